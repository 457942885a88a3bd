//! Window functions over a gpusort sort.
//!
//! A window over `PARTITION BY p ORDER BY o` reads rows sorted on `(p, o)`: its
//! partitions and peer groups are runs of that order (`layout.rs`), and every function
//! is computed from a row's place among those runs, prefix sums, running extremes or an
//! index into the argument, in parallel over pieces of rows.
//!
//! | file | concern |
//! | --- | --- |
//! | `plan.rs` | which windows over a `GpuSortExec` are replaced, and by what |
//! | `topn.rs` | a filter on a rank above the window lets the sort drop rows past it |
//! | `spec.rs` | a DataFusion window expression → a [`spec::WindowFunction`], or why not |
//! | `exec.rs` | `SortedWindowExec`, the operator |
//! | `device.rs` | which functions the sort's backend computes where the rows are (the device) |
//! | `concat.rs` | a column of many batches as one, copied on all cores |
//! | `evaluate.rs` | one input partition's window columns, piece by piece |
//! | `layout.rs` | window partition and peer group starts |
//! | `frames.rs` | each row's frame |
//! | `range.rs` | `RANGE` frames with value offsets, searched over the `ORDER BY` key |
//! | `ranking.rs` | `row_number`, `rank`, `dense_rank`, `percent_rank`, `cume_dist`, `ntile` |
//! | `values.rs` | `lag`, `lead`, `first_value`, `last_value`, `nth_value` |
//! | `sums.rs` | `sum`, `avg`, `count` by prefix sums |
//! | `extremes.rs` | `min`, `max` by running scans and monotone deques |
//! | `scan.rs` | the parallel prefix scan |

mod concat;
mod device;
mod evaluate;
mod exec;
mod extremes;
mod frames;
mod layout;
mod plan;
mod range;
mod ranking;
mod scan;
mod spec;
mod sums;
mod topn;
mod values;

pub use exec::SortedWindowExec;
pub(crate) use plan::{windows_over_sorts, WindowDecision, WindowDecline};
pub(crate) use topn::tops_into_sorts;
