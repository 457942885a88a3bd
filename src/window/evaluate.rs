//! One sorted input partition's window functions, computed on all cores.
//!
//! ```text
//!  batches (sorted on PARTITION BY, ORDER BY)
//!     │  keys and arguments evaluated, concatenated across batches
//!     ▼
//!  layout: window partition and peer group starts     (parallel over chunks of rows)
//!  per function: prefix sums / running extremes        (parallel scans)
//!     │
//!     ▼  pieces of rows, in parallel: frames, then each function's column for the piece
//!  output batches: a piece of an input batch + the window columns
//! ```
//!
//! A piece never crosses an input batch, so its input columns are slices, not copies.
//! Nothing here runs one row at a time through dynamic dispatch: each function is a
//! typed loop over its piece.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use datafusion::arrow;
use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;
use rayon::prelude::*;

use super::concat::concat_arrays;
use super::extremes::ExtremeMethod;
use super::frames::FrameRows;
use super::layout::Layout;
use super::range::range_frames;
use super::spec::{Function, WindowFunction};
use super::sums::{check_type, SumPrefix};

/// Fewest rows in a piece (smaller partitions are one piece).
const MIN_PIECE_ROWS: usize = 1 << 13;
/// Most rows in a piece.
const MAX_PIECE_ROWS: usize = 1 << 20;

/// What a function needs over the whole input partition before its pieces are computed.
enum Prepared {
    /// Ranking functions: the layout only.
    Nothing,
    /// Value functions: the argument.
    Argument(ArrayRef),
    /// `sum`, `avg`, `count`: prefix sums of the argument.
    Sums(SumPrefix),
    /// `min`, `max`.
    Extreme(ExtremeMethod),
}

/// The window functions' columns appended to `batches`, the rows of one input partition
/// in sorted order; output batches follow `schema` (the input's columns, then one per
/// function).
pub(crate) fn evaluate_partition(
    batches: Vec<RecordBatch>,
    functions: &[WindowFunction],
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let batches: Vec<RecordBatch> = batches.into_iter().filter(|b| b.num_rows() > 0).collect();
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows == 0 {
        return Ok(Vec::new());
    }
    let (layouts, range_keys) = layouts_of(&batches, functions, rows)?;
    let prepared: Vec<Prepared> = functions
        .par_iter()
        .zip(&layouts)
        .map(|(function, layout)| prepare(function, &batches, layout))
        .collect::<Result<_>>()?;
    let value_frames: Vec<Option<FrameRows>> = functions
        .par_iter()
        .zip(&layouts)
        .zip(&range_keys)
        .map(|((function, layout), key)| value_offset_frames(function, key.as_ref(), layout))
        .collect::<Result<_>>()?;
    let pieces = pieces_of(&batches, rows);
    pieces
        .into_par_iter()
        .map(|piece| {
            let mut columns = batches[piece.batch]
                .slice(piece.offset, piece.hi - piece.lo)
                .columns()
                .to_vec();
            for (((function, layout), prepared), value_frames) in functions
                .iter()
                .zip(&layouts)
                .zip(&prepared)
                .zip(&value_frames)
            {
                let frames = function.reads_frame().then(|| match value_frames {
                    Some(all) => FrameRows {
                        starts: all.starts[piece.lo..piece.hi].to_vec(),
                        ends: all.ends[piece.lo..piece.hi].to_vec(),
                    },
                    None => function.frame.rows_between(layout, piece.lo, piece.hi),
                });
                let column = compute(function, layout, prepared, frames, piece.lo, piece.hi)?;
                columns.push(check_type(column, function.output.data_type())?);
            }
            Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
        })
        .collect()
}

/// Rows `lo..hi` of the input partition, which are rows `offset..` of input batch `batch`.
struct Piece {
    batch: usize,
    offset: usize,
    lo: usize,
    hi: usize,
}

/// Pieces of about `rows / (4 × threads)` rows, none crossing a batch.
fn pieces_of(batches: &[RecordBatch], rows: usize) -> Vec<Piece> {
    let target = rows
        .div_ceil(4 * rayon::current_num_threads())
        .clamp(MIN_PIECE_ROWS, MAX_PIECE_ROWS);
    let mut pieces = Vec::new();
    let mut lo = 0;
    for (batch, b) in batches.iter().enumerate() {
        let mut offset = 0;
        while offset < b.num_rows() {
            let len = target.min(b.num_rows() - offset);
            pieces.push(Piece {
                batch,
                offset,
                lo,
                hi: lo + len,
            });
            offset += len;
            lo += len;
        }
    }
    pieces
}

/// A function's `ORDER BY` column, when it reads a `RANGE` frame with a value offset.
type RangeKey = Option<ArrayRef>;

/// The layout each function reads (functions with the same `PARTITION BY` and `ORDER BY`
/// share one), and for each function that reads a `RANGE` frame with a value offset its
/// `ORDER BY` column, evaluated once for both.
fn layouts_of(
    batches: &[RecordBatch],
    functions: &[WindowFunction],
    rows: usize,
) -> Result<(Vec<Arc<Layout>>, Vec<RangeKey>)> {
    let mut found: HashMap<String, (Arc<Layout>, Vec<ArrayRef>)> = HashMap::new();
    let mut layouts = Vec::with_capacity(functions.len());
    let mut range_keys = Vec::with_capacity(functions.len());
    for function in functions {
        // Without peers the ORDER BY columns are not read (peers are then the partitions).
        let reads_peers = function.reads_peers();
        let key = match reads_peers {
            true => format!("{:?} / {:?}", function.partition_by, function.order_by),
            false => format!("{:?}", function.partition_by),
        };
        if !found.contains_key(&key) {
            let partition_by = columns_of(batches, &function.partition_by)?;
            let order_exprs: Vec<_> = match reads_peers {
                true => function
                    .order_by
                    .iter()
                    .map(|s| Arc::clone(&s.expr))
                    .collect(),
                false => Vec::new(),
            };
            let order_by = columns_of(batches, &order_exprs)?;
            let layout = Arc::new(Layout::of(&partition_by, &order_by, rows)?);
            found.insert(key.clone(), (layout, order_by));
        }
        let (layout, order_by) = &found[&key];
        layouts.push(Arc::clone(layout));
        let reads_range = function.reads_frame() && function.frame.has_value_offset();
        range_keys.push(reads_range.then(|| order_by.first().cloned()).flatten());
    }
    Ok((layouts, range_keys))
}

/// `exprs` evaluated over all `batches`, each one column of all rows.
fn columns_of(batches: &[RecordBatch], exprs: &[Arc<dyn PhysicalExpr>]) -> Result<Vec<ArrayRef>> {
    exprs
        .par_iter()
        .map(|expr| column_of(batches, expr))
        .collect()
}

fn column_of(batches: &[RecordBatch], expr: &Arc<dyn PhysicalExpr>) -> Result<ArrayRef> {
    let parts: Vec<ArrayRef> = batches
        .iter()
        .map(|batch| expr.evaluate(batch)?.into_array(batch.num_rows()))
        .collect::<Result<_>>()?;
    concat_arrays(&parts)
}

fn prepare(
    function: &WindowFunction,
    batches: &[RecordBatch],
    layout: &Layout,
) -> Result<Prepared> {
    if function.function == Function::Count && function.has_constant_argument() {
        return Ok(Prepared::Sums(SumPrefix::every_row()));
    }
    let arg = match &function.arg {
        Some(arg) => column_of(batches, arg)?,
        None => return Ok(Prepared::Nothing),
    };
    Ok(match &function.function {
        Function::Ranking(_) => Prepared::Nothing,
        Function::Value(_) => Prepared::Argument(arg),
        Function::Sum | Function::Avg => Prepared::Sums(SumPrefix::new(&arg, true)?),
        Function::Count => Prepared::Sums(SumPrefix::new(&arg, false)?),
        Function::Extreme(extreme) => {
            Prepared::Extreme(ExtremeMethod::new(&arg, layout, &function.frame, *extreme)?)
        }
    })
}

/// The frames of every row when `function` reads a `RANGE` frame with a value offset
/// (found from `key`, its `ORDER BY` column: `range.rs`).
fn value_offset_frames(
    function: &WindowFunction,
    key: Option<&ArrayRef>,
    layout: &Layout,
) -> Result<Option<FrameRows>> {
    let Some(values) = key else {
        return Ok(None);
    };
    let [key] = function.order_by.as_slice() else {
        return datafusion::common::internal_err!(
            "gpusort window: a RANGE offset over {} ORDER BY keys",
            function.order_by.len()
        );
    };
    Ok(Some(range_frames(
        &function.frame,
        values,
        key.options,
        layout,
    )?))
}

/// `function`'s column for rows `lo..hi`, whose frames are `frames` where it reads them.
fn compute(
    function: &WindowFunction,
    layout: &Layout,
    prepared: &Prepared,
    frames: Option<FrameRows>,
    lo: usize,
    hi: usize,
) -> Result<ArrayRef> {
    let output = function.output.data_type();
    match (&function.function, prepared, frames.as_ref()) {
        (Function::Ranking(ranking), _, _) => Ok(ranking.evaluate(layout, lo, hi)),
        (Function::Value(value), Prepared::Argument(arg), frames) => {
            value.evaluate(arg, layout, lo, hi, frames)
        }
        (Function::Sum, Prepared::Sums(sums), Some(frames)) => sums.sums_over(frames, output),
        (Function::Avg, Prepared::Sums(sums), Some(frames)) => sums.averages_over(frames, output),
        (Function::Count, Prepared::Sums(sums), Some(frames)) => Ok(sums.counts_over(frames)),
        (Function::Extreme(_), Prepared::Extreme(method), Some(frames)) => method.over(frames),
        _ => datafusion::common::internal_err!(
            "gpusort window: {:?} prepared wrongly",
            function.function
        ),
    }
}
