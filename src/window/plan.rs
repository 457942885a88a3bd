//! Windows computed over a gpusort sort: by gpusort itself (`SortedWindowExec`) where it
//! computes every window expression of the node, else by DataFusion's `WindowAggExec`, a
//! whole partition at a time.
//!
//! ```text
//!  BoundedWindowAggExec (mode Sorted)        SortedWindowExec   every expression taken
//!  or WindowAggExec                    ───►  or WindowAggExec   otherwise (the reason is
//!        GpuSortExec                              GpuSortExec    a decision, in EXPLAIN)
//! ```
//!
//! Where gpusort does not compute every expression, a streaming `BoundedWindowAggExec`
//! still becomes DataFusion's `WindowAggExec`: streaming buys nothing above `GpuSortExec`,
//! which holds its whole input before its first output row anyway, and `WindowAggExec`
//! computes vectorized, one partition key group at a time, where the streaming node
//! evaluates functions such as `row_number()` one row at a time through `ScalarValue`s
//! (about 70 ns a row). It is swapped only when the new node promises the same output
//! ordering and partitioning; `gpu_sort.whole_partition_windows = false` keeps the
//! streaming operator.
//!
//! For `WindowAggExec` the sort below emits each sorted run in batches of up to
//! `gpu_sort.window_batch_rows` rows (16 Mi by default; 0: the session's batch size): a
//! partition of up to that many rows reaches the window as one batch, which it does not
//! copy again (arrow's concatenation of a single batch is a slice). `SortedWindowExec`
//! never concatenates its input batches, and takes batches of 128 Ki rows.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec, WindowExpr};
use datafusion::physical_plan::{displayable, ExecutionPlan, InputOrderMode};

use super::exec::SortedWindowExec;
use crate::config::GpuSortConfig;
use crate::exec::GpuSortExec;

/// Rows per batch a sort hands `SortedWindowExec`: enough that per-batch work is small,
/// few enough that the window buffers its input in steps the memory pool can refuse.
const SORTED_WINDOW_BATCH_ROWS: usize = 1 << 17;

/// Name of the window backend in decisions.
const WINDOW_BACKEND: &str = "gpusort windows (all cores)";

/// Why a window over a gpusort sort keeps DataFusion's operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WindowDecline {
    /// `gpu_sort.window_functions = false`.
    Off,
    /// An expression gpusort does not compute (the text says which and why).
    Unsupported(String),
}

/// What the rule did with one window over a gpusort sort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WindowDecision {
    /// The window as EXPLAIN prints it.
    pub window: String,
    /// Who computes it, or why DataFusion does.
    pub outcome: std::result::Result<&'static str, WindowDecline>,
}

/// `plan` with every window directly above a `GpuSortExec` computed by gpusort where it
/// can, else (streaming windows, `gpu_sort.whole_partition_windows`) by a whole-partition
/// window; each window's outcome is pushed to `decisions`.
pub(crate) fn windows_over_sorts(
    plan: Arc<dyn ExecutionPlan>,
    settings: &GpuSortConfig,
    decisions: &mut Vec<WindowDecision>,
) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node| {
            if let Some(window) = window_over_sort(&node, settings, decisions)? {
                return Ok(Transformed::yes(window));
            }
            match projection_over_window(&node)? {
                Some(projection) => Ok(Transformed::yes(projection)),
                None => Ok(Transformed::no(node)),
            }
        })?
        .data)
}

/// `node` rebuilt when it is a projection over a `SortedWindowExec` that reads some of the
/// window's input columns only: the window then keeps just those it reads, so that a sort
/// computing the window columns on its device never downloads the others.
fn projection_over_window(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(projection) = node.downcast_ref::<ProjectionExec>() else {
        return Ok(None);
    };
    let Some(window) = projection.input().downcast_ref::<SortedWindowExec>() else {
        return Ok(None);
    };
    if window.kept_columns().is_some() {
        return Ok(None);
    }
    let inputs = window.input().schema().fields().len();
    let read: BTreeSet<usize> = projection
        .expr()
        .iter()
        .flat_map(|p| collect_columns(&p.expr))
        .map(|c| c.index())
        .filter(|&c| c < inputs)
        .collect();
    if read.len() == inputs {
        return Ok(None);
    }
    let keep: Vec<usize> = read.into_iter().collect();
    let Ok(pruned) = window.keeping(keep.clone()) else {
        return Ok(None);
    };
    // Column i of the window's old output is column `moved(i)` of the new one.
    let moved = |c: usize| match keep.binary_search(&c) {
        Ok(at) => at,
        Err(_) => keep.len() + (c - inputs),
    };
    let exprs = projection
        .expr()
        .iter()
        .map(|p| {
            let expr = Arc::clone(&p.expr)
                .transform_down(|e| match e.downcast_ref::<Column>() {
                    Some(column) => Ok(Transformed::yes(Arc::new(Column::new(
                        column.name(),
                        moved(column.index()),
                    ))
                        as Arc<dyn PhysicalExpr>)),
                    None => Ok(Transformed::no(e)),
                })?
                .data;
            Ok(ProjectionExpr {
                expr,
                alias: p.alias.clone(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let rebuilt = ProjectionExec::try_new(exprs, Arc::new(pruned))?;
    // The same columns, as the consumers above were planned against.
    if rebuilt.schema() != projection.schema() {
        return Ok(None);
    }
    Ok(Some(Arc::new(rebuilt)))
}

/// A window node over a sorted input: its expressions, input and whether it streams.
struct WindowNode<'a> {
    window_expr: &'a [Arc<dyn WindowExpr>],
    sort: &'a GpuSortExec,
    is_streaming: bool,
}

fn window_node(node: &Arc<dyn ExecutionPlan>) -> Option<WindowNode<'_>> {
    if let Some(bounded) = node.downcast_ref::<BoundedWindowAggExec>() {
        if bounded.input_order_mode != InputOrderMode::Sorted {
            return None;
        }
        return Some(WindowNode {
            window_expr: bounded.window_expr(),
            sort: bounded.input().downcast_ref::<GpuSortExec>()?,
            is_streaming: true,
        });
    }
    let window = node.downcast_ref::<WindowAggExec>()?;
    Some(WindowNode {
        window_expr: window.window_expr(),
        sort: window.input().downcast_ref::<GpuSortExec>()?,
        is_streaming: false,
    })
}

/// The replacement of `node`, when it is a window over a gpusort sort.
fn window_over_sort(
    node: &Arc<dyn ExecutionPlan>,
    settings: &GpuSortConfig,
    decisions: &mut Vec<WindowDecision>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(window) = window_node(node) else {
        return Ok(None);
    };
    let text = displayable(node.as_ref())
        .one_line()
        .to_string()
        .trim()
        .to_string();
    let outcome = match settings.window_functions {
        false => Err(WindowDecline::Off),
        true => {
            // Batches of a bounded size: the window's input is buffered, accounted, by
            // the batch.
            let sort = window
                .sort
                .clone()
                .with_run_batch_rows(SORTED_WINDOW_BATCH_ROWS);
            SortedWindowExec::try_new(
                Arc::clone(node),
                window.window_expr.to_vec(),
                Arc::new(sort),
                settings.device_window_functions,
                None,
            )
            .map_err(WindowDecline::Unsupported)
        }
    };
    let (replacement, outcome) = match outcome {
        Ok(exec) => (
            Some(Arc::new(exec) as Arc<dyn ExecutionPlan>),
            Ok(WINDOW_BACKEND),
        ),
        Err(reason) => {
            let whole = datafusion_window(node, &window, settings)?;
            (whole, Err(reason))
        }
    };
    decisions.push(WindowDecision {
        window: text,
        outcome,
    });
    Ok(replacement)
}

/// The window DataFusion computes in place of `node`: a streaming one becomes a
/// whole-partition one (`gpu_sort.whole_partition_windows`) over its sort emitting
/// batches of `gpu_sort.window_batch_rows`; `None` keeps `node`.
fn datafusion_window(
    node: &Arc<dyn ExecutionPlan>,
    window: &WindowNode<'_>,
    settings: &GpuSortConfig,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if !(window.is_streaming && settings.whole_partition_windows) {
        return Ok(None);
    }
    let sort = match settings.window_batch_rows {
        0 => window.sort.clone(),
        rows => window.sort.clone().with_run_batch_rows(rows),
    };
    whole_partition_window(node, window.window_expr, Arc::new(sort))
}

/// DataFusion's whole-partition window for the streaming window `node`, over `sort`,
/// when it makes the same promises.
fn whole_partition_window(
    node: &Arc<dyn ExecutionPlan>,
    window_expr: &[Arc<dyn WindowExpr>],
    sort: Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(bounded) = node.downcast_ref::<BoundedWindowAggExec>() else {
        return Ok(None);
    };
    let can_repartition = !bounded.partition_keys().is_empty();
    let window = WindowAggExec::try_new(window_expr.to_vec(), sort, can_repartition)?;
    let (new, old) = (window.properties(), bounded.properties());
    let same_promises = new.output_ordering() == old.output_ordering()
        && new.output_partitioning() == old.output_partitioning()
        && window.schema() == bounded.schema();
    Ok(same_promises.then(|| Arc::new(window) as Arc<dyn ExecutionPlan>))
}
