//! The CPU backend: this crate's own parallel sorts over encoded keys, on all cores.
//!
//! `auto` and `onesweep` use the LSD radix sort (the CPU counterpart of OneSweep);
//! `locality` and `segmented` use the stable run-adaptive merge sort, which does little
//! work on nearly sorted input. Without known segments a segmented sort is a sort of one
//! segment. With segments every segment is sorted on its own, in parallel.
//!
//! A peer of the CUDA backend (`crate::cuda`), behind the same [`SortBackend`] contract;
//! the CUDA backend also hands a run to it when the device fails.

mod merge;
mod radix;

use datafusion::common::Result;

pub use merge::merge_sort;
pub use radix::radix_sort;

use super::{segmented_sort, Algorithm, Segments, SortBackend, SortedRun};
use crate::config::AlgorithmChoice;
use crate::keys::EncodedKeys;

/// Sorts on the host's cores with rayon.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

impl SortBackend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn sort(
        &self,
        keys: &EncodedKeys,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<SortedRun> {
        let (algorithm, permutation) = match (segments, algorithm) {
            (Some(segments), _) => (Algorithm::Segmented, segmented_sort(&keys.words, segments)),
            (None, AlgorithmChoice::Auto | AlgorithmChoice::Onesweep) => {
                (Algorithm::Radix, radix_sort(&keys.words, keys.rows))
            }
            (None, AlgorithmChoice::Locality | AlgorithmChoice::Segmented) => {
                (Algorithm::Locality, merge_sort(&keys.words, keys.rows))
            }
        };
        Ok(SortedRun::on_host(permutation, algorithm))
    }
}
