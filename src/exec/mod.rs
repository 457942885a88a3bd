//! The operator: [`GpuSortExec`] and the machinery behind one of its partitions.
//!
//! - `gpu_sort_exec`: the `ExecutionPlan` (properties, display, execute).
//! - `stream`: buffering the input, run splitting, merging runs, the output channel.
//! - `sorter`: one run: keys → encode → backend sort → gather.
//! - `metrics`: stage times and transfer bytes.

mod gpu_sort_exec;
mod metrics;
mod sorter;
mod stream;

pub use gpu_sort_exec::{GpuSortExec, GpuSortOptions};
pub use metrics::SortMetrics;
