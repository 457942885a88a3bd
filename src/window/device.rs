//! Which window functions the sort's backend computes where the sorted rows already are
//! (the CUDA device), described for it as a [`WindowRequest`] over the sort's columns, or
//! why not.
//!
//! Taken, over `ROWS` frames of any bounds, `GROUPS` frames, and `RANGE` frames without
//! offsets or with offsets over one integer, date, timestamp or float key:
//! - the ranking functions;
//! - `count`, and `sum` of integers and decimals (a cast from a narrower integer of the
//!   same sign included), `avg` of decimals; float `sum` and `avg` of integers and floats
//!   (in double-double, as the host sums them);
//! - `min` and `max` of integers, floats, decimals, dates, times and timestamps, over
//!   frames that start at the partition's first row, end at its last, or hold a bounded
//!   number of rows;
//! - `lag`, `lead`, `first_value`, `last_value` and `nth_value` of values 1 to 16 bytes
//!   wide.
//!
//! Every key and argument must be a column of the sort, and every function must share the
//! node's `PARTITION BY` and `ORDER BY`. Key columns must be of a fixed width of at most
//! 16 bytes. Everything else is computed on all cores (`evaluate.rs`), with the same
//! results.

use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef, Schema, TimeUnit};
use datafusion::arrow;
use datafusion::physical_expr::expressions::{CastExpr, Column};
use datafusion::physical_expr::PhysicalExpr;

use datafusion::common::ScalarValue;

use super::extremes::Extreme;
use super::frames::{Bound, Frame, Units};
use super::ranking::Ranking;
use super::spec::{Function, WindowFunction};
use super::values::ValueOf;
use crate::gather::{
    ordered_of, FrameEnd, FrameRange, RangeKey, WindowColumn, WindowKind, WindowRequest,
    DEVICE_WINDOWS_KEY,
};

/// The request for `functions` over a sort of `input` whose window output keeps the
/// input columns `keep` (`None`: all), or why the device does not compute them.
pub(crate) fn device_request(
    functions: &[WindowFunction],
    input: &Schema,
    keep: Option<&[usize]>,
) -> Result<WindowRequest, String> {
    let Some(first) = functions.first() else {
        return Err("no window function".to_string());
    };
    let same_keys = functions.iter().all(|f| {
        same_exprs(&f.partition_by, &first.partition_by)
            && f.order_by.len() == first.order_by.len()
            && f.order_by
                .iter()
                .zip(&first.order_by)
                .all(|(a, b)| a.options == b.options)
            && same_exprs(
                &f.order_by
                    .iter()
                    .map(|s| Arc::clone(&s.expr))
                    .collect::<Vec<_>>(),
                &first
                    .order_by
                    .iter()
                    .map(|s| Arc::clone(&s.expr))
                    .collect::<Vec<_>>(),
            )
    });
    if !same_keys {
        return Err("the functions differ in PARTITION BY or ORDER BY".to_string());
    }
    let key = |expr: &Arc<dyn PhysicalExpr>| -> Result<usize, String> {
        let column = expr
            .downcast_ref::<Column>()
            .ok_or_else(|| format!("key {expr} is not a column"))?;
        let data_type = input.field(column.index()).data_type();
        match key_width(data_type) {
            Some(_) => Ok(column.index()),
            None => Err(format!("key {expr} is of type {data_type}")),
        }
    };
    let partition_by = first
        .partition_by
        .iter()
        .map(key)
        .collect::<Result<Vec<_>, _>>()?;
    let order_by = first
        .order_by
        .iter()
        .map(|s| key(&s.expr))
        .collect::<Result<Vec<_>, _>>()?;
    let offsets = functions.iter().any(|f| f.frame.has_value_offset());
    let range_key = match (offsets, first.order_by.as_slice()) {
        (false, _) => None,
        (true, [key]) => {
            let data_type = key.expr.data_type(input).map_err(|e| e.to_string())?;
            let (signed, min, max) = range_of(&data_type)
                .ok_or_else(|| format!("a RANGE frame offset over a {data_type} key"))?;
            Some(RangeKey {
                signed,
                float: matches!(data_type, DataType::Float32 | DataType::Float64),
                min,
                max,
                descending: key.options.descending,
                nulls_first: key.options.nulls_first,
            })
        }
        (true, _) => return Err("a RANGE frame offset over several keys".to_string()),
    };
    let key_type = match &first.order_by[..] {
        [key] => key.expr.data_type(input).ok(),
        _ => None,
    };
    let columns = functions
        .iter()
        .map(|f| {
            column_of(f, input, key_type.as_ref())
                .map_err(|reason| format!("{}: {reason}", f.output.name()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let kept: Vec<FieldRef> = match keep {
        Some(keep) => keep
            .iter()
            .map(|&c| Arc::clone(&input.fields()[c]))
            .collect(),
        None => input.fields().to_vec(),
    };
    let fields = kept
        .into_iter()
        .chain(functions.iter().map(|f| Arc::clone(&f.output)));
    let mut metadata = input.metadata().clone();
    metadata.insert(DEVICE_WINDOWS_KEY.to_string(), "true".to_string());
    Ok(WindowRequest {
        partition_by,
        order_by,
        columns,
        range_key,
        keep: keep.map(<[usize]>::to_vec),
        schema: Arc::new(Schema::new_with_metadata(
            fields.collect::<Vec<_>>(),
            metadata,
        )),
    })
}

/// The first and last days arrow's date arithmetic takes (chrono's `NaiveDate` range, as
/// days since 1970-01-01): beyond them, DataFusion's `RANGE` target of a date falls
/// outside its type.
const DATE32_DAYS: (i128, i128) = (-96_465_292, 95_026_236);

/// The first and last timestamps arrow's interval arithmetic takes, in seconds (chrono's
/// `NaiveDateTime` range): `-262143-01-01T00:00:00` and `+262142-12-31T23:59:59`.
const TIMESTAMP_SECONDS: (i128, i128) = (DATE32_DAYS.0 * 86_400, DATE32_DAYS.1 * 86_400 + 86_399);

/// Units of a timestamp in one second.
fn units_per_second(unit: &TimeUnit) -> i128 {
    match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    }
}

/// The values of a timestamp of `unit` that arrow's interval arithmetic takes: chrono's
/// range in that unit, within `i64`.
fn timestamp_range(unit: &TimeUnit) -> (i128, i128) {
    let per_second = units_per_second(unit);
    let (first, last) = TIMESTAMP_SECONDS;
    (
        (first * per_second).max(i64::MIN.into()),
        (last * per_second + per_second - 1).min(i64::MAX.into()),
    )
}

/// Whether a timestamp's time zone adds days as fixed lengths of time (none, or UTC).
fn fixed_days(zone: Option<&str>) -> bool {
    matches!(zone, None | Some("UTC" | "+00:00" | "Z"))
}

/// Whether a `RANGE` key of `data_type` is signed, and its values' range, for the keys a
/// device searches: integers, dates, timestamps without a time zone (or in UTC), and
/// floats (whose targets never leave their type: the range is every key).
fn range_of(data_type: &DataType) -> Option<(bool, i128, i128)> {
    use DataType::*;
    if matches!(data_type, Float32 | Float64) {
        return Some((false, 0, u64::MAX.into()));
    }
    if let Timestamp(unit, zone) = data_type {
        let (min, max) = timestamp_range(unit);
        return fixed_days(zone.as_deref()).then_some((true, min, max));
    }
    Some(match data_type {
        Int8 => (true, i8::MIN.into(), i8::MAX.into()),
        Int16 => (true, i16::MIN.into(), i16::MAX.into()),
        Int32 => (true, i32::MIN.into(), i32::MAX.into()),
        Int64 => (true, i64::MIN.into(), i64::MAX.into()),
        UInt8 => (false, 0, u8::MAX.into()),
        UInt16 => (false, 0, u16::MAX.into()),
        UInt32 => (false, 0, u32::MAX.into()),
        UInt64 => (false, 0, u64::MAX.into()),
        Date32 => (true, DATE32_DAYS.0, DATE32_DAYS.1),
        _ => return None,
    })
}

/// A `RANGE` offset in the key's units: an integer of the key's type, whole days for a
/// date key, days and a whole number of the key's units (parts of one sign) for a
/// timestamp, or a float key's offset's bits (finite, not negative).
fn offset_units(offset: &ScalarValue, key: &DataType) -> Result<u64, String> {
    let value: Option<i128> = match (key, offset) {
        (DataType::Timestamp(unit, _), _) => timestamp_offset(offset, unit),
        // A float offset as its bits, when finite and not negative.
        (DataType::Float32, ScalarValue::Float32(Some(d))) if d.is_finite() && *d >= 0.0 => {
            Some(d.to_bits().into())
        }
        (DataType::Float64, ScalarValue::Float64(Some(d))) if d.is_finite() && *d >= 0.0 => {
            Some(d.to_bits().into())
        }
        (DataType::Float32 | DataType::Float64, _) => None,
        (DataType::Date32, ScalarValue::IntervalMonthDayNano(Some(v)))
            if v.months == 0 && v.nanoseconds == 0 =>
        {
            Some(v.days.into())
        }
        (DataType::Date32, ScalarValue::IntervalDayTime(Some(v))) if v.milliseconds == 0 => {
            Some(v.days.into())
        }
        (DataType::Date32, _) => None,
        (_, ScalarValue::Int8(v)) => v.map(i128::from),
        (_, ScalarValue::Int16(v)) => v.map(i128::from),
        (_, ScalarValue::Int32(v)) => v.map(i128::from),
        (_, ScalarValue::Int64(v)) => v.map(i128::from),
        (_, ScalarValue::UInt8(v)) => v.map(i128::from),
        (_, ScalarValue::UInt16(v)) => v.map(i128::from),
        (_, ScalarValue::UInt32(v)) => v.map(i128::from),
        (_, ScalarValue::UInt64(v)) => v.map(i128::from),
        _ => None,
    };
    value
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(|| format!("a RANGE frame offset {offset} over a {key} key"))
}

/// A `RANGE` offset over a timestamp of `unit` as a count of units, when it is days and a
/// whole number of units (no months), both not negative: arrow then adds it as one fixed
/// length of time, its steps never leaving the range where the whole stays in it.
fn timestamp_offset(offset: &ScalarValue, unit: &TimeUnit) -> Option<i128> {
    let (days, nanoseconds): (i128, i128) = match offset {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            (v.days.into(), v.nanoseconds.into())
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            (v.days.into(), i128::from(v.milliseconds) * 1_000_000)
        }
        _ => return None,
    };
    let per_second = units_per_second(unit);
    let unit_nanoseconds = 1_000_000_000 / per_second;
    let whole = days >= 0 && nanoseconds >= 0 && nanoseconds % unit_nanoseconds == 0;
    whole.then(|| days * 86_400 * per_second + nanoseconds / unit_nanoseconds)
}

/// Bytes of a fixed-width value the device compares (keys) or copies between rows
/// (`lag` .. `nth_value`), for the types it takes.
fn key_width(data_type: &DataType) -> Option<usize> {
    let width = match data_type {
        DataType::FixedSizeBinary(width) => usize::try_from(*width).ok()?,
        DataType::Boolean => return None,
        other if other.is_primitive() => other.primitive_width()?,
        _ => return None,
    };
    [1, 2, 4, 8, 16].contains(&width).then_some(width)
}

fn same_exprs(a: &[Arc<dyn PhysicalExpr>], b: &[Arc<dyn PhysicalExpr>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.as_ref() == y.as_ref())
}

/// One function as a device column; `key` is the type of the one `ORDER BY` key.
fn column_of(
    function: &WindowFunction,
    input: &Schema,
    key: Option<&DataType>,
) -> Result<WindowColumn, String> {
    let frame_of = |frame: &Frame| frame_of(frame, key);
    let output = function.output.data_type().clone();
    let rows_frame = FrameRange {
        peers: false,
        start: FrameEnd::UnboundedPreceding,
        end: FrameEnd::UnboundedFollowing,
    };
    let mut default = None;
    let (kind, arg, frame) = match &function.function {
        Function::Ranking(ranking) => {
            let kind = match *ranking {
                Ranking::RowNumber => WindowKind::RowNumber,
                Ranking::Rank => WindowKind::Rank,
                Ranking::DenseRank => WindowKind::DenseRank,
                Ranking::PercentRank => WindowKind::PercentRank,
                Ranking::CumeDist => WindowKind::CumeDist,
                Ranking::Ntile(n) => WindowKind::Ntile(n),
            };
            (kind, None, rows_frame)
        }
        Function::Count => {
            let arg = match function.has_constant_argument() {
                true => None,
                false => Some(argument(function, input, false)?),
            };
            (WindowKind::Count, arg, frame_of(&function.frame)?)
        }
        Function::Sum if output == DataType::Float64 => (
            WindowKind::Sum,
            Some(float_argument(function, input)?),
            frame_of(&function.frame)?,
        ),
        Function::Sum => (
            WindowKind::Sum,
            Some(argument(function, input, true)?),
            frame_of(&function.frame)?,
        ),
        Function::Avg if output == DataType::Float64 => (
            WindowKind::Avg,
            Some(float_argument(function, input)?),
            frame_of(&function.frame)?,
        ),
        Function::Avg => {
            let (index, data_type) = plain_argument(function, input)?;
            if !matches!(data_type, DataType::Decimal128(_, _)) {
                return Err(format!("an avg of {data_type}"));
            }
            (WindowKind::Avg, Some(index), frame_of(&function.frame)?)
        }
        Function::Extreme(extreme) => {
            let (index, data_type) = plain_argument(function, input)?;
            if ordered_of(data_type).is_none() {
                return Err(format!("a min or max of {data_type}"));
            }
            let frame = frame_of(&function.frame)?;
            let read = frame.start == FrameEnd::UnboundedPreceding
                || frame.end == FrameEnd::UnboundedFollowing
                || frame.most_rows().is_some();
            if !read {
                return Err("a min or max over peer groups inside the partition".to_string());
            }
            let kind = match extreme {
                Extreme::Min => WindowKind::Min,
                Extreme::Max => WindowKind::Max,
            };
            (kind, Some(index), frame)
        }
        Function::Value(value) => {
            let (index, data_type) = plain_argument(function, input)?;
            if key_width(data_type).is_none() {
                return Err(format!("a value of {data_type}"));
            }
            let (kind, frame) = match value {
                // The kernels shift rows in 64-bit arithmetic.
                ValueOf::Shifted { back, .. } | ValueOf::Nth(back)
                    if back.unsigned_abs() >= 1 << 62 =>
                {
                    return Err(format!("an offset of {back} rows"));
                }
                ValueOf::Shifted {
                    back,
                    default: value,
                } => {
                    default = default_bytes(value, data_type)?;
                    (WindowKind::Shifted { back: *back }, rows_frame)
                }
                ValueOf::First => (WindowKind::First, frame_of(&function.frame)?),
                ValueOf::Last => (WindowKind::Last, frame_of(&function.frame)?),
                ValueOf::Nth(n) => (WindowKind::Nth(*n), frame_of(&function.frame)?),
            };
            (kind, Some(index), frame)
        }
    };
    let argument_type = arg.map(|index| input.field(index).data_type());
    let expected = match (kind, &output) {
        (
            WindowKind::Sum,
            DataType::Int64 | DataType::UInt64 | DataType::Decimal128(_, _) | DataType::Float64,
        ) => true,
        (WindowKind::Avg, DataType::Decimal128(_, _) | DataType::Float64) => true,
        (WindowKind::Count, DataType::Int64) => true,
        (
            WindowKind::RowNumber | WindowKind::Rank | WindowKind::DenseRank | WindowKind::Ntile(_),
            DataType::UInt64,
        ) => true,
        (WindowKind::PercentRank | WindowKind::CumeDist, DataType::Float64) => true,
        (
            WindowKind::Min
            | WindowKind::Max
            | WindowKind::Shifted { .. }
            | WindowKind::First
            | WindowKind::Last
            | WindowKind::Nth(_),
            output,
        ) => argument_type == Some(output),
        _ => false,
    };
    if !expected {
        return Err(format!("an output of type {output}"));
    }
    Ok(WindowColumn {
        kind,
        arg,
        frame,
        output,
        default,
    })
}

/// The sort's column a function reads as it is (no cast), and its type.
fn plain_argument<'a>(
    function: &WindowFunction,
    input: &'a Schema,
) -> Result<(usize, &'a DataType), String> {
    let Some(expr) = function.arg.as_ref() else {
        return Err("no argument".to_string());
    };
    match expr.downcast_ref::<Column>() {
        Some(column) => Ok((column.index(), input.field(column.index()).data_type())),
        None => Err(format!("argument {expr} is not a column")),
    }
}

/// `lag`'s or `lead`'s default as the argument type's little-endian bytes (`None`: null).
fn default_bytes(value: &ScalarValue, data_type: &DataType) -> Result<Option<Vec<u8>>, String> {
    if value.is_null() {
        return Ok(None);
    }
    let width = key_width(data_type).ok_or_else(|| format!("a default of {data_type}"))?;
    let array = value
        .cast_to(data_type)
        .and_then(|v| v.to_array_of_size(1))
        .map_err(|e| format!("default {value}: {e}"))?;
    let data = array.to_data();
    if data.null_count() > 0 {
        return Ok(None);
    }
    let Some(buffer) = data.buffers().first() else {
        return Err(format!("default {value}: no values"));
    };
    let at = data.offset() * width;
    buffer
        .as_slice()
        .get(at..at + width)
        .map(|bytes| Some(bytes.to_vec()))
        .ok_or_else(|| format!("default {value}: short values"))
}

/// A function's argument as a column of the sort and the type it is cast to, if it is.
fn cast_column(function: &WindowFunction) -> Result<(&Column, Option<&DataType>), String> {
    let Some(expr) = function.arg.as_ref() else {
        return Err("no argument".to_string());
    };
    let (column, cast_to) = match expr.downcast_ref::<CastExpr>() {
        Some(cast) => (cast.expr().downcast_ref::<Column>(), Some(cast.cast_type())),
        None => (expr.downcast_ref::<Column>(), None),
    };
    match column {
        Some(column) => Ok((column, cast_to)),
        None => Err(format!("argument {expr} is not a column")),
    }
}

/// The sort's column a float `sum` or `avg` reads: an integer or float column, or its
/// cast to `Float64` (DataFusion's coercion of their arguments), which the device converts
/// as arrow's cast does.
fn float_argument(function: &WindowFunction, input: &Schema) -> Result<usize, String> {
    let (column, cast_to) = cast_column(function)?;
    let data_type = input.field(column.index()).data_type();
    let source =
        data_type.is_integer() || matches!(data_type, DataType::Float32 | DataType::Float64);
    match (source, cast_to) {
        (true, None | Some(DataType::Float64)) => Ok(column.index()),
        (_, Some(to)) => Err(format!("a float sum of {data_type} cast to {to}")),
        (false, None) => Err(format!("a float sum of {data_type}")),
    }
}

/// The sort's column a function reads: a column, or a cast of one between integers of the
/// same sign (DataFusion casts `sum`'s narrower integers to 64 bits). For `sum`, the
/// column must be an integer or a `Decimal128` whose sum is the output type.
fn argument(function: &WindowFunction, input: &Schema, sum: bool) -> Result<usize, String> {
    let (column, cast_to) = cast_column(function)?;
    let expr = function.arg.as_ref().expect("an argument");
    let data_type = input.field(column.index()).data_type();
    let output = function.output.data_type();
    if let Some(to) = cast_to {
        let widens = (data_type.is_signed_integer() && to == &DataType::Int64)
            || (data_type.is_unsigned_integer() && to == &DataType::UInt64);
        if !widens {
            return Err(format!("argument {expr} casts {data_type} to {to}"));
        }
    }
    if !sum {
        // `count` reads only the validity, gathered with the values.
        let gathered = match data_type {
            DataType::FixedSizeBinary(width) => [1, 2, 4, 8, 16, 32].contains(width),
            DataType::Boolean => false,
            other => other.is_primitive(),
        };
        return match gathered {
            true => Ok(column.index()),
            false => Err(format!("a count of {data_type}")),
        };
    }
    let fits = match data_type {
        t if t.is_signed_integer() => output == &DataType::Int64,
        t if t.is_unsigned_integer() => output == &DataType::UInt64,
        DataType::Decimal128(_, scale) => {
            matches!(output, DataType::Decimal128(_, out_scale) if out_scale == scale)
        }
        _ => false,
    };
    match fits {
        true => Ok(column.index()),
        false => Err(format!("a sum of {data_type} into {output}")),
    }
}

/// The frame as the device reads it: `ROWS` or `GROUPS` of any bounds, or `RANGE`, with
/// offsets over an integer, date or timestamp `key` (the one `ORDER BY` key's type).
fn frame_of(frame: &Frame, key: Option<&DataType>) -> Result<FrameRange, String> {
    let peers = frame.units != Units::Rows;
    let groups = frame.units == Units::Groups;
    let offset = |value: &ScalarValue| -> Result<u64, String> {
        match key {
            Some(key) if frame.units == Units::Range && range_of(key).is_some() => {
                offset_units(value, key)
            }
            Some(key) => Err(format!("a RANGE frame offset over a {key} key")),
            None => Err("a RANGE frame offset without one ORDER BY key".to_string()),
        }
    };
    let end = |bound: &Bound| -> Result<FrameEnd, String> {
        Ok(match bound {
            Bound::UnboundedPreceding => FrameEnd::UnboundedPreceding,
            Bound::Preceding(n) if groups => FrameEnd::GroupsPreceding(*n as u64),
            Bound::Following(n) if groups => FrameEnd::GroupsFollowing(*n as u64),
            Bound::Preceding(n) => FrameEnd::Preceding(*n as u64),
            Bound::CurrentRow => FrameEnd::CurrentRow,
            Bound::Following(n) => FrameEnd::Following(*n as u64),
            Bound::UnboundedFollowing => FrameEnd::UnboundedFollowing,
            Bound::ValuePreceding(value) => FrameEnd::ValuePreceding(offset(value)?),
            Bound::ValueFollowing(value) => FrameEnd::ValueFollowing(offset(value)?),
        })
    };
    if frame.units == Units::Range
        && [&frame.start, &frame.end]
            .iter()
            .any(|b| matches!(b, Bound::Preceding(_) | Bound::Following(_)))
    {
        return Err("a RANGE frame with offsets".to_string());
    }
    Ok(FrameRange {
        peers,
        start: end(&frame.start)?,
        end: end(&frame.end)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_date_range_is_arrows() {
        use arrow::datatypes::Date32Type;
        let (first, last) = (DATE32_DAYS.0 as i32, DATE32_DAYS.1 as i32);
        assert!(Date32Type::to_naive_date_opt(first).is_some());
        assert!(Date32Type::to_naive_date_opt(first - 1).is_none());
        assert!(Date32Type::to_naive_date_opt(last).is_some());
        assert!(Date32Type::to_naive_date_opt(last + 1).is_none());
    }

    #[test]
    fn the_timestamp_ranges_are_arrows() {
        use arrow::array::temporal_conversions::as_datetime;
        use arrow::datatypes::{
            TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
            TimestampSecondType,
        };
        fn check<T: arrow::datatypes::ArrowPrimitiveType>(unit: TimeUnit) {
            let (first, last) = timestamp_range(&unit);
            let (first, last) = (first as i64, last as i64);
            assert!(as_datetime::<T>(first).is_some(), "{unit:?}");
            assert!(as_datetime::<T>(last).is_some(), "{unit:?}");
            if first > i64::MIN {
                assert!(as_datetime::<T>(first - 1).is_none(), "{unit:?}");
            }
            if last < i64::MAX {
                assert!(as_datetime::<T>(last + 1).is_none(), "{unit:?}");
            }
        }
        check::<TimestampSecondType>(TimeUnit::Second);
        check::<TimestampMillisecondType>(TimeUnit::Millisecond);
        check::<TimestampMicrosecondType>(TimeUnit::Microsecond);
        check::<TimestampNanosecondType>(TimeUnit::Nanosecond);
    }

    #[test]
    fn timestamp_offsets_in_the_keys_units() {
        use arrow::datatypes::IntervalMonthDayNano;
        let day_and_a_second =
            ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(0, 1, 1_000_000_000)));
        assert_eq!(
            timestamp_offset(&day_and_a_second, &TimeUnit::Second),
            Some(86_401)
        );
        assert_eq!(
            timestamp_offset(&day_and_a_second, &TimeUnit::Microsecond),
            Some(86_401_000_000)
        );
        let half_a_second =
            ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(0, 0, 500_000_000)));
        assert_eq!(timestamp_offset(&half_a_second, &TimeUnit::Second), None);
        assert_eq!(
            timestamp_offset(&half_a_second, &TimeUnit::Millisecond),
            Some(500)
        );
        let a_month = ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(1, 0, 0)));
        assert_eq!(timestamp_offset(&a_month, &TimeUnit::Second), None);
        let mixed = ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(0, 1, -1)));
        assert_eq!(timestamp_offset(&mixed, &TimeUnit::Nanosecond), None);
        assert!(range_of(&DataType::Timestamp(TimeUnit::Second, Some("UTC".into()))).is_some());
        assert!(range_of(&DataType::Timestamp(
            TimeUnit::Second,
            Some("Europe/Paris".into())
        ))
        .is_none());
    }

    #[test]
    fn keys_of_fixed_width_up_to_16_bytes() {
        assert_eq!(key_width(&DataType::Int32), Some(4));
        assert_eq!(key_width(&DataType::Decimal128(15, 2)), Some(16));
        assert_eq!(key_width(&DataType::Date32), Some(4));
        assert_eq!(key_width(&DataType::Utf8), None);
        assert_eq!(key_width(&DataType::Boolean), None);
        assert_eq!(key_width(&DataType::Decimal256(50, 2)), None);
    }

    #[test]
    fn frames_of_rows_peers_and_groups() {
        let running = Frame {
            units: Units::Range,
            start: Bound::UnboundedPreceding,
            end: Bound::CurrentRow,
        };
        assert_eq!(
            frame_of(&running, None),
            Ok(FrameRange {
                peers: true,
                start: FrameEnd::UnboundedPreceding,
                end: FrameEnd::CurrentRow,
            })
        );
        let groups = Frame {
            units: Units::Groups,
            start: Bound::Preceding(1),
            end: Bound::CurrentRow,
        };
        assert_eq!(
            frame_of(&groups, None),
            Ok(FrameRange {
                peers: true,
                start: FrameEnd::GroupsPreceding(1),
                end: FrameEnd::CurrentRow,
            })
        );
        let sliding = Frame {
            units: Units::Rows,
            start: Bound::Preceding(6),
            end: Bound::Following(2),
        };
        assert_eq!(
            frame_of(&sliding, None).map(|f| (f.start, f.end)),
            Ok((FrameEnd::Preceding(6), FrameEnd::Following(2)))
        );
    }
}
