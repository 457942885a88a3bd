//! The sort step: the [`SortBackend`] contract.
//!
//! A backend sorts the rows of one run by their encoded key words (see [`crate::keys`])
//! and returns the permutation: `permutation[i]` is the row (index within the run) that
//! goes to output position `i`. Every backend is **stable**: rows with equal keys keep
//! their input order, so results do not depend on the backend.
//!
//! Backends: `cpu` (this crate's parallel LSD radix and merge sorts, `cpu/`) and `cuda`
//! (`crate::cuda`: OneSweep, locality and segmented sorts on the GPU) behind the same
//! trait; `crate::backend` is the one place that picks between them. A sorted run
//! (`run.rs`) owns the backend's state for its payload gather.
//!
//! A run may come with **segments** (see [`Segments`]): rows already grouped so that every
//! row of an earlier segment sorts before every row of a later one (the input was ordered
//! by a prefix of the sort keys). Then only rows within one segment change places, and the
//! keys need only order rows within a segment.

mod cpu;
mod refine;
mod run;
pub(crate) mod runs;
mod segments;

use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::arrow;
use datafusion::common::Result;

use crate::config::AlgorithmChoice;
use crate::gather::EarlyColumns;
use crate::keys::{EncodedKeys, KeyColumn};

pub use cpu::{merge_sort, radix_sort, CpuBackend};
pub use refine::refine_long_ties;
pub use run::{
    DeviceUse, Permutation, PermutationHome, RunState, SortedRun, TieRefine, TransferTimes,
};
pub use segments::{segment_starts, segmented_sort, Segments};

/// The algorithm that actually sorted a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// LSD radix sort over 8-bit digits, constant digits skipped (with segments: the
    /// segment index as the leading key).
    #[default]
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

/// The tables of a routing's partition ids over ranges of one key column's values: a
/// backend that makes the ids itself finds the column's range where the column is (the
/// device) and asks for the table over it, instead of the host reading every value first.
pub trait IdTableMaker: Send + Sync {
    /// The key column (index into the sorted columns) whose value decides the partition.
    fn column(&self) -> usize;

    /// The table over the values `first ..= last` of `range` (`None`: no value is
    /// valid), or `None` when there is no table to make: the range is too wide (or
    /// absent), and the caller hashes the rows.
    fn table_over(&self, range: Option<(i128, i128)>) -> Result<Option<PartitionIdTable>>;
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

/// What a backend did with the key columns of a run ([`SortBackend::sort_or_split`]). One
/// per run: its size does not matter.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum KeySort {
    /// Sorted.
    Sorted(SortedRun),
    /// The caller encodes the keys on the host and calls [`SortBackend::sort`].
    OnHost,
    /// The backend's device cannot hold the run now (its memory limit, or out of memory):
    /// the caller sorts it in pieces of at most `rows` rows and merges them.
    Split {
        /// The most rows of one piece.
        rows: usize,
    },
}

impl From<Option<SortedRun>> for KeySort {
    /// What [`SortBackend::sort_key_columns`] returned, as a [`KeySort`].
    fn from(sorted: Option<SortedRun>) -> Self {
        sorted.map_or(KeySort::OnHost, KeySort::Sorted)
    }
}

/// Sorts (encoded key, row id) pairs, stably.
pub trait SortBackend: Debug + Send + Sync {
    /// Short name shown in EXPLAIN: `cpu` or `cuda`.
    fn name(&self) -> &'static str;

    /// The devices its runs go to, shown in EXPLAIN (`0,1`, or the selection asked for,
    /// `all`, while they are being opened); `None` for a backend without devices. Never
    /// waits for a device.
    fn devices(&self) -> Option<String> {
        None
    }

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

    /// [`SortBackend::sort_key_columns`] for a caller that can sort the run in pieces and
    /// merge them: a run the device cannot hold comes back as [`KeySort::Split`] instead of
    /// going to the CPU.
    fn sort_or_split(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<KeySort> {
        self.sort_key_columns(columns, algorithm, segments)
            .map(KeySort::from)
    }

    /// Sorts the rows of one run by (partition id, `columns`), as
    /// [`SortBackend::sort_key_columns`] would with the ids as a leading ascending key
    /// column, making the ids itself from key column `ids.column()` and a table of `ids`
    /// over that column's range; also returns the rows of each partition. `None`: the
    /// caller computes the ids on the host and sorts with them as a key column. The CUDA
    /// backend finds the range and looks the ids up on the device, from the column it
    /// uploads anyway.
    fn sort_key_columns_by_ids(
        &self,
        _columns: &[KeyColumn],
        _ids: &dyn IdTableMaker,
        _algorithm: AlgorithmChoice,
    ) -> Result<Option<(SortedRun, Vec<usize>)>> {
        Ok(None)
    }

    /// A copy of the input columns `columns` (each its index in the input's schema and its
    /// type) that this backend makes as the batches arrive, for the payload gather of a run
    /// that is the whole input (`gather/early.rs`); `None` (the default) where it makes
    /// none. It may leave out any column it cannot take.
    fn early_columns(&self, _columns: &[(usize, DataType)]) -> Option<Arc<dyn EarlyColumns>> {
        None
    }
}

/// The identity permutation of `rows` rows.
pub fn identity(rows: usize) -> Vec<u32> {
    (0..rows as u32).collect()
}
