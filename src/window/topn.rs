//! Top-N per window partition: a filter that bounds a ranking window function over a
//! gpusort sort (`WHERE rn <= 3` over `row_number() OVER (PARTITION BY p ORDER BY o)`)
//! tells the sort it may leave out of each sorted run the rows past `k` in their window
//! partition (`exec/partition_top.rs`), before their payload is gathered.
//!
//! ```text
//!  FilterExec: rn@4 <= 3                        FilterExec: rn@4 <= 3        (unchanged)
//!    SortedWindowExec: row_number() ..   ───►     SortedWindowExec: ..
//!      GpuSortExec: [p, o]                          GpuSortExec: [p, o], partition_top=row_number<=3
//! ```
//!
//! Repartitions between the filter and the window are looked through. Taken only where
//! the result cannot change: every expression of the window is
//! `row_number`, `rank` or `dense_rank` over the same `PARTITION BY` and `ORDER BY` (each
//! row's value depends on the rows before it alone), the sort orders by the partition
//! keys and then the window's order keys, and has no fetch of its own. The filter and the
//! window stay: they compute over the rows the sort emits, a superset of what the filter
//! keeps, as `partition_top.rs` shows.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::split_conjunction;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec, WindowExpr};
use datafusion::physical_plan::ExecutionPlan;

use super::exec::SortedWindowExec;
use super::ranking::Ranking;
use super::spec::{Function, WindowFunction};
use crate::exec::{GpuSortExec, PartitionTop, TopRanking};

/// `plan` with the sorts below filtered ranking windows told which rows they may leave
/// out.
pub(crate) fn tops_into_sorts(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node| {
            let Some(filter) = node.downcast_ref::<FilterExec>() else {
                return Ok(Transformed::no(node));
            };
            match window_with_top(filter)? {
                Some(window) => Ok(Transformed::yes(
                    Arc::clone(&node).replace_children(vec![window], same_properties())?,
                )),
                None => Ok(Transformed::no(node)),
            }
        })?
        .data)
}

/// A child swapped for one that promises the same (the sort's properties do not change).
fn same_properties() -> ReplaceChildrenOptions {
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep)
}

/// The filter's input, over a sort told its top, where the filter bounds a rank of the
/// window below it (through repartitions, which keep rows as they are).
fn window_with_top(filter: &FilterExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut above = Vec::new();
    let mut window = filter.input();
    while let Some(repartition) = window.downcast_ref::<RepartitionExec>() {
        above.push(Arc::clone(window));
        window = repartition.input();
    }
    let Some(mut input) = window_over_top(filter, window)? else {
        return Ok(None);
    };
    for node in above.into_iter().rev() {
        input = node.replace_children(vec![input], same_properties())?;
    }
    Ok(Some(input))
}

/// `window` over a sort told its top, where `filter` bounds one of its ranks.
fn window_over_top(
    filter: &FilterExec,
    window: &Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some((exprs, sort)) = ranked_window(window) else {
        return Ok(None);
    };
    if sort.fetch().is_some() || sort.partition_top().is_some() {
        return Ok(None);
    }
    let input_schema = sort.schema();
    let input_columns = input_schema.fields().len();
    let Some((index, k)) = split_conjunction(filter.predicate())
        .into_iter()
        .filter_map(|conjunct| bounded_column(conjunct.as_ref()))
        .filter(|&(index, k)| index >= input_columns && k >= 1)
        .map(|(index, k)| (index - input_columns, k))
        .min_by_key(|&(_, k)| k)
    else {
        return Ok(None);
    };
    let Some(bounded) = exprs.get(index) else {
        return Ok(None);
    };
    let Some(ranking) = ranking_of(bounded, &input_schema) else {
        return Ok(None);
    };
    // Every expression depends on the rows before it alone, over the same order.
    let same_window = |e: &Arc<dyn WindowExpr>| {
        ranking_of(e, &input_schema).is_some()
            && e.partition_by() == bounded.partition_by()
            && e.order_by() == bounded.order_by()
    };
    if !exprs.iter().all(same_window) {
        return Ok(None);
    }
    let (partition_by, order_by) = (bounded.partition_by(), bounded.order_by());
    let keys = sort.expr();
    let (p, o) = (partition_by.len(), order_by.len());
    if keys.len() < p + o {
        return Ok(None);
    }
    let partitions_first = keys[..p]
        .iter()
        .all(|key| partition_by.iter().any(|e| e == &key.expr))
        && partition_by
            .iter()
            .all(|e| keys[..p].iter().any(|key| &key.expr == e));
    let then_order = keys[p..p + o].iter().zip(order_by).all(|(a, b)| a == b);
    if !(partitions_first && then_order) {
        return Ok(None);
    }
    let top = PartitionTop {
        partition_keys: p,
        order_keys: o,
        ranking,
        k,
    };
    let sort = Arc::new(sort.clone().with_partition_top(top));
    Ok(Some(
        Arc::clone(window).replace_children(vec![sort], same_properties())?,
    ))
}

/// A window node's expressions and the gpusort sort it reads directly.
fn ranked_window(
    window: &Arc<dyn ExecutionPlan>,
) -> Option<(&[Arc<dyn WindowExpr>], &GpuSortExec)> {
    let (exprs, input) = if let Some(w) = window.downcast_ref::<SortedWindowExec>() {
        (w.window_expr(), w.input())
    } else if let Some(w) = window.downcast_ref::<BoundedWindowAggExec>() {
        (w.window_expr(), w.input())
    } else if let Some(w) = window.downcast_ref::<WindowAggExec>() {
        (w.window_expr(), w.input())
    } else {
        return None;
    };
    Some((exprs, input.downcast_ref::<GpuSortExec>()?))
}

/// The ranking a filter can bound: `row_number`, `rank` or `dense_rank`.
fn ranking_of(
    expr: &Arc<dyn WindowExpr>,
    input: &datafusion::arrow::datatypes::Schema,
) -> Option<TopRanking> {
    let function = WindowFunction::of(expr, input).ok()?;
    match function.function {
        Function::Ranking(Ranking::RowNumber) => Some(TopRanking::RowNumber),
        Function::Ranking(Ranking::Rank) => Some(TopRanking::Rank),
        Function::Ranking(Ranking::DenseRank) => Some(TopRanking::DenseRank),
        _ => None,
    }
}

/// `(column, k)` when `expr` keeps only rows whose column is at most `k`:
/// `c <= k`, `c < k + 1`, `k >= c`, `k + 1 > c`.
fn bounded_column(expr: &dyn datafusion::physical_expr::PhysicalExpr) -> Option<(usize, usize)> {
    let binary = expr.downcast_ref::<BinaryExpr>()?;
    let (left, right) = (binary.left(), binary.right());
    let (column, literal, op) = match (
        left.downcast_ref::<Column>(),
        right.downcast_ref::<Literal>(),
    ) {
        (Some(c), Some(l)) => (c, l, *binary.op()),
        _ => {
            let c = right.downcast_ref::<Column>()?;
            let l = left.downcast_ref::<Literal>()?;
            let flipped = match binary.op() {
                Operator::GtEq => Operator::LtEq,
                Operator::Gt => Operator::Lt,
                _ => return None,
            };
            (c, l, flipped)
        }
    };
    // An integer bound only: a cast would truncate `rn < 2.5` to `rn < 2`.
    if !literal.value().data_type().is_integer() {
        return None;
    }
    let value = match literal
        .value()
        .cast_to(&datafusion::arrow::datatypes::DataType::UInt64)
    {
        Ok(ScalarValue::UInt64(Some(v))) => usize::try_from(v).ok()?,
        _ => return None,
    };
    let k = match op {
        Operator::LtEq => value,
        Operator::Lt => value.checked_sub(1)?,
        _ => return None,
    };
    Some((column.index(), k))
}
