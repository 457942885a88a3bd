//! The CPU backend: this crate's own parallel sorts over encoded keys, on all cores.
//!
//! `auto` and `onesweep` use the LSD radix sort (the CPU counterpart of OneSweep);
//! `locality` and `segmented` use the stable run-adaptive merge sort, which does little
//! work on nearly sorted input. Without known segments a segmented sort is a sort of one
//! segment.

use datafusion::common::Result;

use super::{merge_sort, radix_sort, Algorithm, SortBackend, SortedRun};
use crate::config::AlgorithmChoice;
use crate::keys::EncodedKeys;

/// Sorts on the host's cores with rayon.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

impl SortBackend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn sort(&self, keys: &EncodedKeys, algorithm: AlgorithmChoice) -> Result<SortedRun> {
        let algorithm = match algorithm {
            AlgorithmChoice::Auto | AlgorithmChoice::Onesweep => Algorithm::Radix,
            AlgorithmChoice::Locality | AlgorithmChoice::Segmented => Algorithm::Merge,
        };
        let permutation = match algorithm {
            Algorithm::Radix => radix_sort(&keys.words, keys.rows),
            Algorithm::Merge => merge_sort(&keys.words, keys.rows),
        };
        Ok(SortedRun {
            permutation,
            algorithm,
            h2d_bytes: 0,
            d2h_bytes: 0,
            fell_back: false,
            transfer: Default::default(),
            retained: None,
        })
    }
}
