//! The operator: [`GpuSortExec`] and the machinery behind one of its partitions.
//!
//! - `gpu_sort_exec`: the `ExecutionPlan` (properties, display, execute).
//! - `combined`: one sort for all partitions of a sort that keeps its input's partitioning.
//! - `hash_routing`: rows routed to hash partitions as `RepartitionExec` routes them.
//! - `id_table`: the partition of every value of a routing key, for a backend to look up.
//! - `stream`: run splitting, merging runs, the output channel.
//! - `resources`: a partition's sort properties and execution resources, travelling together.
//! - `buffer`: draining the input within the memory reservation; spilling when it is full
//!   (or handing the payload's host copy to the device).
//! - `spill`: sorted runs written to and read back from disk.
//! - `window_merge`: merging sorted runs by sorting windows of them on the backend.
//! - `views`: string and binary view arrays that pin buffers shared with other arrays.
//! - `run`: `RunSorter`, one run: keys → encode → backend sort → gather.
//! - `pieces`: a run the device cannot hold, sorted in pieces.
//! - `cancel`: stopping a sort whose consumers went away; its blocking jobs counted.
//! - `metrics`: stage times and transfer bytes.

mod buffer;
mod cancel;
mod combined;
mod gpu_sort_exec;
mod hash_routing;
mod id_table;
mod metrics;
mod partition_top;
mod pieces;
mod resources;
mod run;
mod spill;
mod spill_read;
mod stream;
pub(crate) mod views;
mod window_merge;

pub(crate) use buffer::HELD_WORKING_BYTES_PER_ROW;
pub use gpu_sort_exec::{GpuSortExec, GpuSortOptions};
pub use hash_routing::{HashRouting, MAX_ROUTED_PARTITIONS};
pub use id_table::IdTables;
pub use metrics::SortMetrics;
pub use partition_top::{PartitionTop, TopRanking};
pub(crate) use spill_read::read_trusted as read_spilled;
