//! Which of DataFusion's window expressions gpusort computes, and how: a planned window
//! expression becomes a [`WindowFunction`], or a reason to keep DataFusion's operator.
//!
//! Taken: `row_number`, `rank`, `dense_rank`, `percent_rank`, `cume_dist`, `ntile`, `lag`,
//! `lead`, `first_value`, `last_value`, `nth_value`, and `sum`, `avg`, `count`, `min`,
//! `max` over `ROWS`, `RANGE` and `GROUPS` frames of any bounds (`RANGE` offsets over
//! integers, floats, decimals, dates and timestamps). Not taken, each with its reason:
//! other `RANGE` offsets, `IGNORE NULLS`, `DISTINCT`, `FILTER`, other functions, and argument types the sums and
//! extremes do not cover.

use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef, Schema};
use datafusion::arrow;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{WindowFrame, WindowFrameBound, WindowFrameUnits};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::window::{SlidingAggregateWindowExpr, StandardWindowExpr};
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::windows::{PlainAggregateWindowExpr, WindowExpr, WindowUDFExpr};

use super::extremes::Extreme;
use super::frames::{Bound, Frame, Units};
use super::layout::incomparable_reason;
use super::range::offset_unsupported;
use super::ranking::Ranking;
use super::values::ValueOf;

/// What a window expression computes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Function {
    /// A ranking function (reads no column, ignores the frame).
    Ranking(Ranking),
    /// A function that reads another row's value.
    Value(ValueOf),
    /// `sum(x)` over the frame.
    Sum,
    /// `avg(x)` over the frame.
    Avg,
    /// `count(x)` over the frame (`count(*)` counts a literal: every row).
    Count,
    /// `min(x)` or `max(x)` over the frame.
    Extreme(Extreme),
}

/// A window expression gpusort computes.
#[derive(Debug, Clone)]
pub(crate) struct WindowFunction {
    /// What it computes.
    pub function: Function,
    /// Its argument, if it reads one.
    pub arg: Option<Arc<dyn PhysicalExpr>>,
    /// Its frame (ignored by ranking functions and `lag`/`lead`).
    pub frame: Frame,
    /// Its output column.
    pub output: FieldRef,
    /// The `PARTITION BY` expressions.
    pub partition_by: Vec<Arc<dyn PhysicalExpr>>,
    /// The `ORDER BY` expressions.
    pub order_by: Vec<PhysicalSortExpr>,
}

impl WindowFunction {
    /// How `expr` is computed over `input`, or why gpusort leaves it to DataFusion.
    pub(crate) fn of(expr: &Arc<dyn WindowExpr>, input: &Schema) -> Result<Self, String> {
        let output = expr.field().map_err(|e| e.to_string())?;
        let (function, arg) = match function_of(expr, input) {
            Ok(found) => found,
            Err(reason) => return Err(format!("{}: {reason}", expr.name())),
        };
        let frame = frame_of(expr.get_window_frame())
            .map_err(|reason| format!("{}: {reason}", expr.name()))?;
        if frame.has_value_offset() {
            range_offsets_reason(&frame, expr.order_by(), input)
                .map_err(|reason| format!("{}: {reason}", expr.name()))?;
        }
        for key in expr
            .partition_by()
            .iter()
            .chain(expr.order_by().iter().map(|s| &s.expr))
        {
            let data_type = key.data_type(input).map_err(|e| e.to_string())?;
            if let Some(reason) = incomparable_reason(&data_type) {
                return Err(format!("{}: key {key}: {reason}", expr.name()));
            }
        }
        Ok(Self {
            function,
            arg,
            frame,
            output,
            partition_by: expr.partition_by().to_vec(),
            order_by: expr.order_by().to_vec(),
        })
    }

    /// Whether the function reads peer groups (rows equal on `ORDER BY`): ranks that
    /// count them, and `RANGE` or `GROUPS` frames. `ROWS` frames, `row_number`, `ntile`
    /// and `lag`/`lead` read only the window partitions.
    pub(crate) fn reads_peers(&self) -> bool {
        match &self.function {
            Function::Ranking(ranking) => {
                !matches!(ranking, Ranking::RowNumber | Ranking::Ntile(_))
            }
            Function::Value(ValueOf::Shifted { .. }) => false,
            _ => self.frame.units != Units::Rows,
        }
    }

    /// Whether the argument is a non-null literal (`count(*)` is `count(1)`): every row
    /// counts, and the argument need not be evaluated.
    pub(crate) fn has_constant_argument(&self) -> bool {
        self.arg
            .as_ref()
            .and_then(|arg| arg.downcast_ref::<Literal>())
            .is_some_and(|literal| !literal.value().is_null())
    }

    /// Whether the function reads its frame.
    pub(crate) fn reads_frame(&self) -> bool {
        match &self.function {
            Function::Ranking(_) => false,
            Function::Value(value) => value.reads_frame(),
            _ => true,
        }
    }
}

type Found = (Function, Option<Arc<dyn PhysicalExpr>>);

fn function_of(expr: &Arc<dyn WindowExpr>, input: &Schema) -> Result<Found, String> {
    if let Some(standard) = expr.as_any().downcast_ref::<StandardWindowExpr>() {
        let Some(udwf) = standard
            .get_standard_func_expr()
            .as_any()
            .downcast_ref::<WindowUDFExpr>()
        else {
            return Err("not a window function gpusort knows".to_string());
        };
        return standard_function(udwf, expr.field().map_err(|e| e.to_string())?.data_type());
    }
    let aggregate = match (
        expr.as_any().downcast_ref::<PlainAggregateWindowExpr>(),
        expr.as_any().downcast_ref::<SlidingAggregateWindowExpr>(),
    ) {
        (Some(plain), _) => plain.get_aggregate_expr(),
        (_, Some(sliding)) => sliding.get_aggregate_expr(),
        _ => return Err("not a window expression gpusort knows".to_string()),
    };
    // DataFusion keeps the FILTER clause private; its Debug output ends with it.
    if !format!("{expr:?}").ends_with("filter: None }") {
        return Err("FILTER is not computed by gpusort".to_string());
    }
    if aggregate.is_reversed() {
        return Err("a window reversed by DataFusion's planner is not computed by gpusort".into());
    }
    if aggregate.is_distinct() {
        return Err("DISTINCT is not computed by gpusort".to_string());
    }
    if aggregate.ignore_nulls() {
        return Err("IGNORE NULLS is not computed by gpusort".to_string());
    }
    let args = aggregate.expressions();
    let [arg] = args.as_slice() else {
        return Err(format!("{} arguments", args.len()));
    };
    let arg_type = arg.data_type(input).map_err(|e| e.to_string())?;
    let output = aggregate.field();
    let output = output.data_type();
    let function = match aggregate.fun().name() {
        "sum" if is_summable(&arg_type) && sum_type(&arg_type).as_ref() == Some(output) => {
            Function::Sum
        }
        "avg" if is_averageable(&arg_type, output) => Function::Avg,
        "count" if output == &DataType::Int64 => Function::Count,
        "min" | "max" if arg_type.is_primitive() && &arg_type == output => {
            match aggregate.fun().name() {
                "min" => Function::Extreme(Extreme::Min),
                _ => Function::Extreme(Extreme::Max),
            }
        }
        name @ ("sum" | "avg" | "min" | "max" | "count") => {
            return Err(format!(
                "{name} of {arg_type} into {output} is not computed by gpusort"
            ))
        }
        name => return Err(format!("aggregate {name} is not computed by gpusort")),
    };
    Ok((function, Some(Arc::clone(arg))))
}

/// The sum's type for an argument of `arg_type`, as DataFusion's `sum` types it.
fn sum_type(arg_type: &DataType) -> Option<DataType> {
    match arg_type {
        DataType::Int64 | DataType::UInt64 | DataType::Float64 => Some(arg_type.clone()),
        DataType::Decimal128(precision, scale) => {
            Some(DataType::Decimal128(38.min(precision + 10), *scale))
        }
        _ => None,
    }
}

fn is_summable(arg_type: &DataType) -> bool {
    sum_type(arg_type).is_some()
}

fn is_averageable(arg_type: &DataType, output: &DataType) -> bool {
    match (arg_type, output) {
        (DataType::Float64, DataType::Float64) => true,
        (DataType::Decimal128(_, sum_scale), DataType::Decimal128(_, scale)) => scale >= sum_scale,
        _ => false,
    }
}

fn standard_function(udwf: &WindowUDFExpr, output: &DataType) -> Result<Found, String> {
    // DataFusion keeps these two flags private; its Debug output shows them.
    let debug = format!("{udwf:?}");
    if debug.contains("ignore_nulls: true") {
        return Err("IGNORE NULLS is not computed by gpusort".to_string());
    }
    if debug.contains("is_reversed: true") {
        return Err("a window reversed by DataFusion's planner is not computed by gpusort".into());
    }
    let args = udwf.args();
    let arg = || args.first().cloned();
    let literal = |k: usize| -> Result<Option<ScalarValue>, String> {
        match args.get(k) {
            None => Ok(None),
            Some(expr) => match expr.downcast_ref::<Literal>() {
                Some(literal) => Ok(Some(literal.value().clone())),
                None => Err(format!("argument {expr} is not a literal")),
            },
        }
    };
    let integer = |k: usize, default: i64| -> Result<i64, String> {
        match literal(k)? {
            None => Ok(default),
            // DataFusion reads a NULL offset as 0.
            Some(value) if value.is_null() => Ok(0),
            Some(value) => match value.cast_to(&DataType::Int64) {
                Ok(ScalarValue::Int64(Some(n))) => Ok(n),
                _ => Err(format!("offset {value} is not an integer")),
            },
        }
    };
    let ranking = |r: Ranking| Ok((Function::Ranking(r), None));
    let value = |v: ValueOf| Ok((Function::Value(v), arg()));
    match udwf.fun().name() {
        "row_number" => ranking(Ranking::RowNumber),
        "rank" => ranking(Ranking::Rank),
        "dense_rank" => ranking(Ranking::DenseRank),
        "percent_rank" => ranking(Ranking::PercentRank),
        "cume_dist" => ranking(Ranking::CumeDist),
        "ntile" => match integer(0, 0)? {
            n if n >= 1 => ranking(Ranking::Ntile(n as u64)),
            n => Err(format!("ntile({n})")),
        },
        name @ ("lag" | "lead") => {
            let offset = integer(1, 1)?;
            let default = literal(2)?.unwrap_or(ScalarValue::Null);
            if !default.is_null() && default.cast_to(output).is_err() {
                return Err(format!("default {default} does not cast to {output}"));
            }
            let back = match name {
                "lag" => offset,
                _ => offset.checked_neg().ok_or("offset out of range")?,
            };
            value(ValueOf::Shifted { back, default })
        }
        "first_value" => value(ValueOf::First),
        "last_value" => value(ValueOf::Last),
        // nth_value(x, 0) is NULL, as in DataFusion.
        "nth_value" => value(ValueOf::Nth(integer(1, 0)?)),
        name => Err(format!("window function {name} is not computed by gpusort")),
    }
}

/// Why gpusort cannot find `frame`'s value offsets over `order_by`, if it cannot.
fn range_offsets_reason(
    frame: &Frame,
    order_by: &[PhysicalSortExpr],
    input: &Schema,
) -> Result<(), String> {
    let [key] = order_by else {
        return Err(format!(
            "a RANGE frame with an offset over {} ORDER BY keys",
            order_by.len()
        ));
    };
    let data_type = key.expr.data_type(input).map_err(|e| e.to_string())?;
    for bound in [&frame.start, &frame.end] {
        if let Bound::ValuePreceding(offset) | Bound::ValueFollowing(offset) = bound {
            if let Some(reason) = offset_unsupported(&data_type, offset) {
                return Err(reason);
            }
        }
    }
    Ok(())
}

/// The frame gpusort computes for `frame`, or why it cannot.
fn frame_of(frame: &WindowFrame) -> Result<Frame, String> {
    let units = match frame.units {
        WindowFrameUnits::Rows => Units::Rows,
        WindowFrameUnits::Range => Units::Range,
        WindowFrameUnits::Groups => Units::Groups,
    };
    let bound = |bound: &WindowFrameBound| -> Result<Bound, String> {
        let (value, preceding) = match bound {
            WindowFrameBound::CurrentRow => return Ok(Bound::CurrentRow),
            WindowFrameBound::Preceding(value) => (value, true),
            WindowFrameBound::Following(value) => (value, false),
        };
        if value.is_null() {
            return Ok(match preceding {
                true => Bound::UnboundedPreceding,
                false => Bound::UnboundedFollowing,
            });
        }
        if units == Units::Range {
            return Ok(match preceding {
                true => Bound::ValuePreceding(value.clone()),
                false => Bound::ValueFollowing(value.clone()),
            });
        }
        let n = match value.cast_to(&DataType::UInt64) {
            Ok(ScalarValue::UInt64(Some(n))) => usize::try_from(n).unwrap_or(usize::MAX),
            _ => return Err(format!("frame offset {value}")),
        };
        Ok(match preceding {
            true => Bound::Preceding(n),
            false => Bound::Following(n),
        })
    };
    Ok(Frame {
        units,
        start: bound(&frame.start_bound)?,
        end: bound(&frame.end_bound)?,
    })
}
