//! Windows computed over a gpusort sort a whole partition at a time.
//!
//! Above a sort DataFusion plans `BoundedWindowAggExec`, which streams: it evaluates
//! window functions such as `row_number()` one row at a time through `ScalarValue`s
//! (about 70 ns a row; 6.5 s of the 100 M-row window query's 7 s of CPU time were spent
//! there). Streaming buys nothing above `GpuSortExec`, which holds its whole input before
//! its first output row anyway. DataFusion's `WindowAggExec` computes the same functions
//! vectorized, one partition key group at a time, once its input partition has arrived.
//!
//! ```text
//!  BoundedWindowAggExec (mode Sorted)        WindowAggExec (same window expressions)
//!        GpuSortExec              ───►            GpuSortExec
//! ```
//!
//! Swapped only when the input is a `GpuSortExec` itself, the input is fully ordered for
//! the windows (mode `Sorted`), and the new node promises the same output ordering and
//! partitioning as the old one. The price: each output partition's rows are held while its
//! windows are computed; `gpu_sort.whole_partition_windows = false` keeps the streaming
//! operator.
//!
//! `WindowAggExec` concatenates its input partition into one batch before it computes;
//! arrow's concatenation of a single batch is a slice. So the sort below emits each sorted
//! run in batches of up to `gpu_sort.window_batch_rows` rows (16 Mi by default; 0: the
//! session's batch size), and a partition of up to that many rows reaches the window as
//! one batch that is not copied again: on the 100 M-row window query this took the median
//! from 0.349 to 0.283 s (docs/performance.md). The sort gathers such a batch on all
//! cores all the same (device downloads drained in pieces, host columns gathered in
//! pieces and concatenated).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::{ExecutionPlan, InputOrderMode};

use crate::exec::GpuSortExec;

/// `plan` with every streaming window directly above a `GpuSortExec` replaced by a
/// whole-partition window, the sort emitting batches of up to `batch_rows` rows (0: the
/// session's batch size).
pub(crate) fn windows_over_sorts(
    plan: Arc<dyn ExecutionPlan>,
    batch_rows: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node| match whole_partition_window(&node, batch_rows)? {
            Some(window) => Ok(Transformed::yes(window)),
            None => Ok(Transformed::no(node)),
        })?
        .data)
}

/// The whole-partition window for `node`, when it is a streaming window that may be
/// swapped.
fn whole_partition_window(
    node: &Arc<dyn ExecutionPlan>,
    batch_rows: usize,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(bounded) = node.downcast_ref::<BoundedWindowAggExec>() else {
        return Ok(None);
    };
    let Some(sort) = bounded.input().downcast_ref::<GpuSortExec>() else {
        return Ok(None);
    };
    if bounded.input_order_mode != InputOrderMode::Sorted {
        return Ok(None);
    }
    let sort = match batch_rows {
        0 => sort.clone(),
        rows => sort.clone().with_run_batch_rows(rows),
    };
    let can_repartition = !bounded.partition_keys().is_empty();
    let window = WindowAggExec::try_new(
        bounded.window_expr().to_vec(),
        Arc::new(sort),
        can_repartition,
    )?;
    let (new, old) = (window.properties(), bounded.properties());
    let same_promises = new.output_ordering() == old.output_ordering()
        && new.output_partitioning() == old.output_partitioning()
        && window.schema() == bounded.schema();
    Ok(same_promises.then(|| Arc::new(window) as Arc<dyn ExecutionPlan>))
}
