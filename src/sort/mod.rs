//! The sort step: the [`SortBackend`] contract and the choice of backend.
//!
//! A backend sorts the rows of one run by their encoded key words (see [`crate::keys`])
//! and returns the permutation: `permutation[i]` is the row (index within the run) that
//! goes to output position `i`. Every backend is **stable**: rows with equal keys keep
//! their input order, so results do not depend on the backend.
//!
//! Backends: `cpu` (this crate's parallel LSD radix and merge sorts) and `cuda`
//! ([`crate::cuda::CudaBackend`]: OneSweep, locality and segmented sorts on the GPU)
//! behind the same trait.
//!
//! A run may come with **segments** (see [`Segments`]): rows already grouped so that every
//! row of an earlier segment sorts before every row of a later one (the input was ordered
//! by a prefix of the sort keys). Then only rows within one segment change places, and the
//! keys need only order rows within a segment.

mod cpu;
mod merge;
mod radix;
mod refine;
mod segments;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use datafusion::common::Result;

use crate::config::{AlgorithmChoice, BackendChoice};
use crate::cuda::CudaBackend;
use crate::gather::{PayloadGather, RunRows};
use crate::keys::{EncodedKeys, KeyColumn};

pub use cpu::CpuBackend;
pub use merge::merge_sort;
pub use radix::radix_sort;
pub use refine::refine_long_ties;
pub use segments::{segment_starts, segmented_sort, Segments};

/// The algorithm that actually sorted a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// LSD radix sort over 8-bit digits, constant digits skipped (with segments: the
    /// segment index as the leading key).
    Radix,
    /// Stable merge sort that does little work on nearly sorted input.
    Locality,
    /// Stable sort within known segments.
    Segmented,
}

impl Algorithm {
    /// Every algorithm, in the order of their metrics.
    pub const ALL: [Algorithm; 3] = [Algorithm::Radix, Algorithm::Locality, Algorithm::Segmented];

    /// Name shown in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Radix => "onesweep",
            Algorithm::Locality => "locality",
            Algorithm::Segmented => "segmented",
        }
    }
}

/// What a backend kept of a sorted run for its later steps (the CUDA backend: the
/// permutation and the raw key columns, still on the device, which its payload gather
/// reuses instead of uploading them again). Opaque to the operator; dropping it frees it.
pub struct Retained(pub Box<dyn std::any::Any + Send + Sync>);

impl Debug for Retained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Retained")
    }
}

/// The outcome of sorting one run.
#[derive(Debug)]
pub struct SortedRun {
    /// Row indices of the run in sorted order.
    pub permutation: Vec<u32>,
    /// Which algorithm sorted it.
    pub algorithm: Algorithm,
    /// Bytes copied host → device (0 on the CPU).
    pub h2d_bytes: usize,
    /// Bytes copied device → host (0 on the CPU).
    pub d2h_bytes: usize,
    /// The GPU failed on this run and the CPU backend sorted it instead.
    pub fell_back: bool,
    /// Wall time of the copies to and from the device within the sort (zero on the CPU).
    pub transfer: TransferTimes,
    /// What the backend kept for [`SortBackend::payload_gatherer`] (valid for exactly this
    /// permutation, or a prefix of it).
    pub retained: Option<Retained>,
    /// The packed keys, when the backend encoded byte-like keys with values longer than
    /// their window (`long_keys` not empty) and left their ties unordered: the caller
    /// orders those ties after the sort (`crate::sort::refine`), as for keys encoded on
    /// the host. A backend that orders them itself leaves this `None`.
    pub refine_keys: Option<EncodedKeys>,
    /// Tie groups of long byte-like keys that the backend ordered itself, and the wall
    /// time it took (within the sort's time).
    pub tie_refine: TieRefine,
}

/// Tie groups of long byte-like keys ordered by the backend within its sort.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TieRefine {
    /// Groups of rows equal on the packed window that were ordered by later bytes.
    pub groups: usize,
    /// Wall time of that ordering.
    pub time: Duration,
}

impl SortedRun {
    /// A run sorted without the device: `permutation` found by `algorithm`, nothing
    /// copied, nothing kept.
    pub fn on_host(permutation: Vec<u32>, algorithm: Algorithm) -> Self {
        Self {
            permutation,
            algorithm,
            h2d_bytes: 0,
            d2h_bytes: 0,
            fell_back: false,
            transfer: TransferTimes::default(),
            retained: None,
            refine_keys: None,
            tie_refine: TieRefine::default(),
        }
    }
}

/// Where a device sort's wall time went besides the sort kernels themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferTimes {
    /// Key columns host → device, with the device's key encoding overlapped.
    pub upload: Duration,
    /// The permutation device → host.
    pub download: Duration,
}

/// The hash partition of every value one integer-like key column can hold, as a table
/// over the column's value range: row `r` goes to partition `ids[value(r) - first]`, or
/// `null_id` when its value is null. Made by `crate::exec` from the routing that
/// `RepartitionExec` would do, so a backend can make partition ids without hashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionIdTable {
    /// The key column (index into the sorted columns) whose value decides the partition.
    pub column: usize,
    /// The value `ids[0]` belongs to: the column's smallest value.
    pub first: i128,
    /// The partition of each value from `first` on.
    pub ids: Vec<u16>,
    /// The partition of a null.
    pub null_id: u16,
    /// The number of partitions (every id is below it).
    pub partitions: usize,
}

impl PartitionIdTable {
    /// The partition of `value` (`None`: null), or `None` when the value lies outside the
    /// table.
    pub fn id_of(&self, value: Option<i128>) -> Option<u16> {
        match value {
            None => Some(self.null_id),
            Some(v) => {
                let at = usize::try_from(v.checked_sub(self.first)?).ok()?;
                self.ids.get(at).copied()
            }
        }
    }
}

/// Sorts (encoded key, row id) pairs, stably.
pub trait SortBackend: Debug + Send + Sync {
    /// Short name shown in EXPLAIN: `cpu` or `cuda`.
    fn name(&self) -> &'static str;

    /// Sorts the `keys.rows` rows of one run. `keys.rows` fits in `u32`. With
    /// `segments`, rows stay within their segment (the keys order rows within one).
    fn sort(
        &self,
        keys: &EncodedKeys,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<SortedRun>;

    /// Encodes and sorts the key columns of one run itself, or returns `None` to have the
    /// caller encode them on the host and call [`SortBackend::sort`]. The CUDA backend
    /// encodes fixed-width columns on the device from their raw buffers.
    fn sort_key_columns(
        &self,
        _columns: &[KeyColumn],
        _algorithm: AlgorithmChoice,
        _segments: Option<&Segments>,
    ) -> Result<Option<SortedRun>> {
        Ok(None)
    }

    /// Sorts the rows of one run by (partition id, `columns`), as
    /// [`SortBackend::sort_key_columns`] would with the ids as a leading ascending key
    /// column, making the ids itself from key column `ids.column` and the table `ids`;
    /// also returns the rows of each partition. `None`: the caller computes the ids on the
    /// host and sorts with them as a key column. The CUDA backend looks the ids up on the
    /// device, from the column it uploads anyway.
    fn sort_key_columns_by_ids(
        &self,
        _columns: &[KeyColumn],
        _ids: &PartitionIdTable,
        _algorithm: AlgorithmChoice,
    ) -> Result<Option<(SortedRun, Vec<usize>)>> {
        Ok(None)
    }

    /// Takes back a permutation that this backend's sort returned, once its rows are out,
    /// to reuse its memory for a later sort (the CUDA backend downloads into it: memory
    /// touched before fills several times faster than fresh pages).
    fn recycle_permutation(&self, _permutation: Vec<u32>) {}

    /// Prepares the gather of some of a run's columns into `permutation` order by the
    /// backend itself, or returns `None` to have the host gather every column. The CUDA
    /// backend gathers fixed-width columns on the device.
    /// `retained` is what the backend's sort of this run kept, when `permutation` is still
    /// its order (or a prefix of it).
    fn payload_gatherer(
        &self,
        _rows: &RunRows,
        _permutation: &[u32],
        _retained: Option<Retained>,
    ) -> Option<Box<dyn PayloadGather>> {
        None
    }
}

/// Picks the backend for `choice`, or says why none is usable.
pub fn resolve_backend(choice: BackendChoice) -> std::result::Result<Arc<dyn SortBackend>, String> {
    match choice {
        BackendChoice::Cpu => Ok(Arc::new(CpuBackend)),
        BackendChoice::Auto => match CudaBackend::new() {
            Ok(cuda) => Ok(Arc::new(cuda)),
            Err(why) => {
                log::debug!("gpusort: backend auto uses the CPU: {why}");
                Ok(Arc::new(CpuBackend))
            }
        },
        BackendChoice::Cuda => CudaBackend::new()
            .map(|cuda| Arc::new(cuda) as Arc<dyn SortBackend>)
            .map_err(|why| {
                format!("gpu_sort.backend = 'cuda' but no CUDA device is usable: {why}")
            }),
    }
}

/// The identity permutation of `rows` rows.
pub fn identity(rows: usize) -> Vec<u32> {
    (0..rows as u32).collect()
}
