//! The plan shapes in which DataFusion gathers sorted or unsorted partitions into one
//! stream, and how each becomes one sort of all input partitions.
//!
//! ```text
//!  SortPreservingMergeExec(expr)              GpuSortExec(expr, 1 partition)
//!    chain of row-wise operators     ──►        the same chain, sorts removed
//!      SortExec{preserve_partitioning}            (runs on every input partition)
//!        input                                      input
//!
//!  SortExec{preserve_partitioning: false}     GpuSortExec(1 partition)
//!    chain of row-wise operators     ──►        the same chain
//!      CoalescePartitionsExec                     input (N partitions)
//!        input (N partitions)
//! ```
//!
//! A *chain* is made of operators that treat every row on its own and keep each
//! partition apart: projections, filters, batch coalescing (none of them with a LIMIT),
//! and `UnionExec`, whose every child then needs its own chain down to a sort. Such an
//! operator gives the same rows whether its input is sorted or not, so it may run below
//! the one sort that replaces the merge: it then runs on every input partition in
//! parallel, and a filter or a narrowing projection shrinks what the sort has to hold.
//!
//! Ties: the merge breaks ties by input partition and each partition's sort keeps its
//! input order, which is the order in which `GpuSortExec` reads its input partitions and
//! rows; the one sort is stable, so it yields the same rows in the same order.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_expr::LexOrdering;
#[allow(deprecated)]
use datafusion::physical_plan::coalesce_batches::CoalesceBatchesExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

/// A merge of sorted partitions, or a sort of coalesced partitions, found in a plan and
/// rewritten to feed one sort of all partitions.
#[derive(Debug)]
pub(super) struct GatheredSort {
    /// The plan to sort: the chain with the partition sorts (or the coalesce) removed.
    pub input: Arc<dyn ExecutionPlan>,
    /// The keys the one sort must order by.
    pub expr: LexOrdering,
    /// The LIMIT of the whole, if any.
    pub fetch: Option<usize>,
    /// How many partitions the merge (or the coalesce) gathered.
    pub replaced: usize,
}

/// `SortPreservingMergeExec` over a chain over per-partition `SortExec`s: the chain without
/// those sorts, when every path below the merge reaches one through row-wise operators and
/// no sort's LIMIT would change the result.
pub(super) fn merge_over_partition_sorts(
    merge: &SortPreservingMergeExec,
) -> Result<Option<GatheredSort>> {
    let mut sorts = Vec::new();
    let Some(chain) = strip_partition_sorts(merge.input(), &mut sorts, true)? else {
        return Ok(None);
    };
    if sorts.is_empty() {
        return Ok(None);
    }
    // A sort below may only cut rows the merge's own LIMIT would drop anyway.
    let fetch_is_safe = sorts.iter().all(|sort| match (sort.fetch, merge.fetch()) {
        (None, _) => true,
        (Some(below), Some(total)) => sort.limit_safe && below >= total,
        (Some(_), None) => false,
    });
    if !fetch_is_safe {
        return Ok(None);
    }
    Ok(Some(GatheredSort {
        expr: finest_ordering(merge.input(), merge.expr()),
        input: chain,
        fetch: merge.fetch(),
        replaced: merge.input().output_partitioning().partition_count(),
    }))
}

/// `SortExec{preserve_partitioning: false}` over a chain over `CoalescePartitionsExec`:
/// the chain over the coalesce's input, when that input has several partitions.
pub(super) fn sort_over_coalesce(sort: &SortExec) -> Result<Option<GatheredSort>> {
    if sort.preserve_partitioning() {
        return Ok(None);
    }
    let Some(input) = strip_coalesce(sort.input())? else {
        return Ok(None);
    };
    Ok(Some(GatheredSort {
        // The chain keeps the partitions the coalesce gathered.
        replaced: input.output_partitioning().partition_count(),
        input,
        expr: sort.expr().clone(),
        fetch: sort.fetch(),
    }))
}

/// One partition sort removed from below a merge.
struct RemovedSort {
    fetch: Option<usize>,
    /// No filter stands between the merge and this sort (a filter above a sort with a
    /// LIMIT sees fewer rows than it would without the LIMIT).
    limit_safe: bool,
}

/// Operators that give the same rows, partition by partition, whatever the order of
/// their input, and keep the number of partitions (a union adds its children's).
fn is_row_wise(plan: &Arc<dyn ExecutionPlan>) -> bool {
    #[allow(deprecated)]
    let coalesces_batches = plan.downcast_ref::<CoalesceBatchesExec>().is_some();
    plan.fetch().is_none()
        && (plan.downcast_ref::<ProjectionExec>().is_some()
            || plan.downcast_ref::<FilterExec>().is_some()
            || plan.downcast_ref::<CooperativeExec>().is_some()
            || plan.downcast_ref::<UnionExec>().is_some()
            || coalesces_batches)
}

/// `plan` with each partition sort on every path down through row-wise operators replaced
/// by its input; `None` when a path ends anywhere else.
fn strip_partition_sorts(
    plan: &Arc<dyn ExecutionPlan>,
    removed: &mut Vec<RemovedSort>,
    limit_safe: bool,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(sort) = plan.downcast_ref::<SortExec>() {
        let single_partition = sort.input().output_partitioning().partition_count() == 1;
        if !sort.preserve_partitioning() && !single_partition {
            return Ok(None);
        }
        removed.push(RemovedSort {
            fetch: sort.fetch(),
            limit_safe,
        });
        return Ok(Some(Arc::clone(sort.input())));
    }
    if !is_row_wise(plan) {
        return Ok(None);
    }
    let limit_safe = limit_safe && plan.downcast_ref::<FilterExec>().is_none();
    let mut children = Vec::new();
    for child in plan.children() {
        match strip_partition_sorts(child, removed, limit_safe)? {
            Some(child) => children.push(child),
            None => return Ok(None),
        }
    }
    Ok(Some(
        Arc::clone(plan).replace_children(children, recompute())?,
    ))
}

/// `plan` with the `CoalescePartitionsExec` at the end of a chain of single-child
/// row-wise operators replaced by its input; `None` when there is none, it has a LIMIT,
/// or its input has one partition.
fn strip_coalesce(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(coalesce) = plan.downcast_ref::<CoalescePartitionsExec>() {
        let partitions = coalesce.input().output_partitioning().partition_count();
        let gathers = coalesce.fetch().is_none() && partitions > 1;
        return Ok(gathers.then(|| Arc::clone(coalesce.input())));
    }
    let children = plan.children();
    if children.len() != 1 || plan.downcast_ref::<UnionExec>().is_some() || !is_row_wise(plan) {
        return Ok(None);
    }
    match strip_coalesce(children[0])? {
        Some(child) => Ok(Some(
            Arc::clone(plan).replace_children(vec![child], recompute())?,
        )),
        None => Ok(None),
    }
}

/// New children, new plan properties computed from them (their partitioning changes).
fn recompute() -> ReplaceChildrenOptions {
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)
}

/// The order the merged stream really has: the merge's keys, or the longer ordering every
/// partition below it was sorted by when that extends them (ties of the merge's keys are
/// then in that order, and the one sort must give them so).
fn finest_ordering(merge_input: &Arc<dyn ExecutionPlan>, expr: &LexOrdering) -> LexOrdering {
    match merge_input.output_ordering() {
        Some(ordering)
            if ordering.len() > expr.len()
                && ordering.iter().zip(expr.iter()).all(|(a, b)| a == b) =>
        {
            ordering.clone()
        }
        _ => expr.clone(),
    }
}
