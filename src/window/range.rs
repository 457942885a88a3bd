//! `RANGE` frames with value offsets: the rows whose `ORDER BY` value lies within an
//! offset of the row's (`RANGE BETWEEN INTERVAL '7' DAY PRECEDING AND CURRENT ROW`).
//!
//! A window with such a frame has exactly one `ORDER BY` key. Each row's bound is a
//! *target* value, the key plus or minus the offset (`PRECEDING` subtracts on an
//! ascending key and adds on a descending one), and the frame is found by a binary search
//! over the key within the row's window partition:
//!
//! ```text
//!  key (asc)    1  3  3  4  7  8   null null        RANGE BETWEEN 2 PRECEDING AND 1 FOLLOWING
//!  row 3 (4)    target 2 .. 5  →  rows 1..4 (3, 3, 4)
//!  a null row   its frame is the nulls (their peers), whatever the offsets
//! ```
//!
//! Keys become ordinals, `i128`s in the key's own order (floats by their total order,
//! descending keys bit-inverted), so that one search serves every type. The arithmetic is
//! DataFusion's: checked in the key's type, an unsigned key below its offset has target
//! 0, and a target outside the type *collapses* its bound, a `PRECEDING` one to where the
//! row before found its bound, a `FOLLOWING` one to the partition's end. DataFusion finds
//! each bound by searching from the row before's, so a bound never moves back; the
//! frames here are made to follow by a running maximum within each window partition.

use arrow::array::{Array, ArrayRef, AsArray, Scalar};
use arrow::compute::kernels::numeric::{add, sub};
use arrow::compute::SortOptions;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Date64Type, Decimal128Type, Float32Type, Float64Type,
    Int16Type, Int32Type, Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use datafusion::arrow;
use datafusion::common::{internal_err, Result, ScalarValue};
use rayon::prelude::*;

use super::frames::{peer_bound, Bound, Frame, FrameRows};
use super::layout::{positions, Layout, Position};

/// Rows per task.
const CHUNK_ROWS: usize = 1 << 16;

/// Why gpusort does not find frames with `offset` over an `ORDER BY` key of `key`, if it
/// does not. The offset must have the key's type (DataFusion coerces it so), an interval
/// for dates and timestamps.
pub(crate) fn offset_unsupported(key: &DataType, offset: &ScalarValue) -> Option<String> {
    let offset_type = offset.data_type();
    let fits = match key {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float32
        | DataType::Float64 => &offset_type == key,
        DataType::Decimal128(_, scale) => {
            matches!(offset_type, DataType::Decimal128(_, s) if s == *scale)
        }
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => {
            matches!(offset_type, DataType::Interval(_))
        }
        _ => false,
    };
    (!fits).then(|| format!("a RANGE frame offset {offset} ({offset_type}) over a {key} key"))
}

/// The frames of every row of one input partition (the rows `layout` describes), for a
/// `RANGE` frame over `key` sorted as `options` says.
pub(crate) fn range_frames(
    frame: &Frame,
    key: &ArrayRef,
    options: SortOptions,
    layout: &Layout,
) -> Result<FrameRows> {
    let rows = layout.rows;
    let ordinals = ordinals(key, options.descending)?;
    let start = BoundSearch::new(&frame.start, key, options.descending)?;
    let end = BoundSearch::new(&frame.end, key, options.descending)?;
    let mut starts = vec![0usize; rows];
    let mut ends = vec![0usize; rows];
    starts
        .par_chunks_mut(CHUNK_ROWS)
        .zip(ends.par_chunks_mut(CHUNK_ROWS))
        .enumerate()
        .for_each(|(c, (starts, ends))| {
            let lo = c * CHUNK_ROWS;
            let mut nulls = NullBlock::default();
            for (k, at) in positions(layout, lo, lo + starts.len()).enumerate() {
                if nulls.partition_start != at.partition_start || k == 0 {
                    nulls = NullBlock::of(key, &at, options.nulls_first);
                }
                let row_is_null = key.is_null(at.row);
                starts[k] = start.find(&at, &nulls, &ordinals, row_is_null, false);
                ends[k] = end.find(&at, &nulls, &ordinals, row_is_null, true);
            }
        });
    // Bounds found by position never move back; only searched ones are raised.
    for (bound, values) in [(&start, &mut starts), (&end, &mut ends)] {
        if let BoundSearch::Value { .. } = bound {
            running_max_in_partitions(values, layout);
        }
    }
    ends.par_iter_mut()
        .zip(&starts)
        .for_each(|(end, &start)| *end = (*end).max(start));
    Ok(FrameRows { starts, ends })
}

/// Where a window partition's null keys lie (they are one run, first or last) and the
/// rest.
#[derive(Debug, Default, Clone, Copy)]
struct NullBlock {
    partition_start: usize,
    /// Rows with a null key.
    nulls: (usize, usize),
    /// Rows with a key.
    values: (usize, usize),
}

impl NullBlock {
    fn of(key: &ArrayRef, at: &Position, nulls_first: bool) -> Self {
        let (start, end) = (at.partition_start, at.partition_end);
        // The nulls are one run at an end: found by a binary search.
        let count = match (key.null_count(), nulls_first) {
            (0, _) => 0,
            (_, true) => first_where(start, end, |row| key.is_valid(row)) - start,
            (_, false) => end - first_where(start, end, |row| key.is_null(row)),
        };
        let (nulls, values) = match nulls_first {
            true => ((start, start + count), (start + count, end)),
            false => ((end - count, end), (start, end - count)),
        };
        Self {
            partition_start: start,
            nulls,
            values,
        }
    }
}

/// The first row in `lo..hi` where `holds`, which holds from some row on (`hi` if none).
fn first_where(mut lo: usize, mut hi: usize, holds: impl Fn(usize) -> bool) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match holds(mid) {
            true => hi = mid,
            false => lo = mid + 1,
        }
    }
    lo
}

/// How one end of the frame is found.
enum BoundSearch {
    /// `UNBOUNDED` or `CURRENT ROW`: from the row's position.
    Position(Bound),
    /// An offset: each row's target as an ordinal, [`OUTSIDE`] where it falls outside the
    /// key's type; `preceding` says which way such a bound collapses.
    Value { targets: Vec<i128>, preceding: bool },
}

impl BoundSearch {
    fn new(bound: &Bound, key: &ArrayRef, descending: bool) -> Result<Self> {
        let (offset, preceding) = match bound {
            Bound::ValuePreceding(offset) => (offset, true),
            Bound::ValueFollowing(offset) => (offset, false),
            other => return Ok(Self::Position(other.clone())),
        };
        // PRECEDING subtracts on an ascending key, FOLLOWING on a descending one.
        let adds = preceding == descending;
        let targets = targets(key, offset, adds, descending)?;
        Ok(Self::Value { targets, preceding })
    }

    /// The row's bound before the running maximum (exclusive when `is_end`).
    fn find(
        &self,
        at: &Position,
        nulls: &NullBlock,
        ordinals: &[i128],
        row_is_null: bool,
        is_end: bool,
    ) -> usize {
        let (targets, preceding) = match self {
            Self::Position(bound) => return peer_bound(at, bound, is_end),
            Self::Value { targets, preceding } => (targets, *preceding),
        };
        if row_is_null {
            // A null's target is null: its frame is the nulls.
            return match is_end {
                true => nulls.nulls.1,
                false => nulls.nulls.0,
            };
        }
        let target = targets[at.row];
        if target == OUTSIDE {
            return match preceding {
                true => at.partition_start,
                false => at.partition_end,
            };
        }
        let (lo, hi) = nulls.values;
        let keys = &ordinals[lo..hi];
        lo + match is_end {
            true => keys.partition_point(|&k| k <= target),
            false => keys.partition_point(|&k| k < target),
        }
    }
}

/// Within each window partition, each value raised to the largest before it.
fn running_max_in_partitions(values: &mut [usize], layout: &Layout) {
    let first_run = |lo: usize| layout.partitions.run_of(lo);
    // Each chunk's largest value since its last partition start, and whether it has one.
    let tails: Vec<(bool, usize)> = values
        .par_chunks(CHUNK_ROWS)
        .enumerate()
        .map(|(c, chunk)| {
            let lo = c * CHUNK_ROWS;
            let last_start = layout
                .partitions
                .start(layout.partitions.run_of(lo + chunk.len() - 1));
            let from = last_start.max(lo) - lo;
            let max = chunk[from..].iter().copied().max().unwrap_or(0);
            (last_start >= lo, max)
        })
        .collect();
    let mut carries = Vec::with_capacity(tails.len());
    let mut carry = 0;
    for (restarts, max) in tails {
        carries.push(carry);
        carry = match restarts {
            true => max,
            false => carry.max(max),
        };
    }
    values
        .par_chunks_mut(CHUNK_ROWS)
        .zip(carries)
        .enumerate()
        .for_each(|(c, (chunk, carry))| {
            let lo = c * CHUNK_ROWS;
            let mut run = first_run(lo);
            let mut next_start = layout.partitions.end(run);
            let mut running = match layout.partitions.start(run) == lo {
                true => 0,
                false => carry,
            };
            for (k, value) in chunk.iter_mut().enumerate() {
                if lo + k == next_start {
                    run += 1;
                    next_start = layout.partitions.end(run);
                    running = 0;
                }
                running = running.max(*value);
                *value = running;
            }
        });
}

/// A float's place in the total order (`-NaN < -inf < -0.0 < +0.0 < +inf < +NaN`).
fn total_f64(v: f64) -> i128 {
    let bits = v.to_bits() as i64;
    (bits ^ (((bits >> 63) as u64) >> 1) as i64) as i128
}

fn total_f32(v: f32) -> i128 {
    let bits = v.to_bits() as i32;
    (bits ^ (((bits >> 31) as u32) >> 1) as i32) as i128
}

/// Each row's key as an ordinal in the sort's direction (0 for nulls).
fn ordinals(key: &ArrayRef, descending: bool) -> Result<Vec<i128>> {
    let mut out = ascending_ordinals(key)?;
    if descending {
        out.par_iter_mut().for_each(|o| *o = !*o);
    }
    Ok(out)
}

fn map_values<T: ArrowPrimitiveType>(
    key: &ArrayRef,
    f: impl Fn(T::Native) -> i128 + Sync,
) -> Vec<i128> {
    key.as_primitive::<T>()
        .values()
        .par_iter()
        .map(|&v| f(v))
        .collect()
}

fn ascending_ordinals(key: &ArrayRef) -> Result<Vec<i128>> {
    Ok(match key.data_type() {
        DataType::Int8 => map_values::<Int8Type>(key, i128::from),
        DataType::Int16 => map_values::<Int16Type>(key, i128::from),
        DataType::Int32 => map_values::<Int32Type>(key, i128::from),
        DataType::Int64 => map_values::<Int64Type>(key, i128::from),
        DataType::UInt8 => map_values::<UInt8Type>(key, i128::from),
        DataType::UInt16 => map_values::<UInt16Type>(key, i128::from),
        DataType::UInt32 => map_values::<UInt32Type>(key, i128::from),
        DataType::UInt64 => map_values::<UInt64Type>(key, i128::from),
        DataType::Float32 => map_values::<Float32Type>(key, total_f32),
        DataType::Float64 => map_values::<Float64Type>(key, total_f64),
        DataType::Decimal128(_, _) => map_values::<Decimal128Type>(key, |v| v),
        DataType::Date32 => map_values::<Date32Type>(key, i128::from),
        DataType::Date64 => map_values::<Date64Type>(key, i128::from),
        DataType::Timestamp(TimeUnit::Second, _) => {
            map_values::<TimestampSecondType>(key, i128::from)
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            map_values::<TimestampMillisecondType>(key, i128::from)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            map_values::<TimestampMicrosecondType>(key, i128::from)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            map_values::<TimestampNanosecondType>(key, i128::from)
        }
        other => return internal_err!("gpusort window: a RANGE offset over a {other} key"),
    })
}

/// An integer or decimal offset's value.
fn offset_value(offset: &ScalarValue) -> Option<i128> {
    Some(match offset {
        ScalarValue::Int8(v) => i128::from((*v)?),
        ScalarValue::Int16(v) => i128::from((*v)?),
        ScalarValue::Int32(v) => i128::from((*v)?),
        ScalarValue::Int64(v) => i128::from((*v)?),
        ScalarValue::UInt8(v) => i128::from((*v)?),
        ScalarValue::UInt16(v) => i128::from((*v)?),
        ScalarValue::UInt32(v) => i128::from((*v)?),
        ScalarValue::UInt64(v) => i128::from((*v)?),
        ScalarValue::Decimal128(v, _, _) => (*v)?,
        _ => return None,
    })
}

/// A target that falls outside the key's type (and the target of a null key, which is not
/// searched). No key's ordinal is this low.
const OUTSIDE: i128 = i128::MIN;

/// A target (`None`: outside the type) as an ordinal in the sort's direction.
fn encode(target: Option<i128>, descending: bool) -> i128 {
    match target {
        None => OUTSIDE,
        Some(t) => match descending {
            true => !t,
            false => t,
        }
        .max(OUTSIDE + 1),
    }
}

/// Integer targets `v ± d`, outside `min..=max` as [`OUTSIDE`]; an unsigned key below the
/// offset on the subtracting side has target 0, as in DataFusion.
fn integer_targets<T: ArrowPrimitiveType>(
    key: &ArrayRef,
    d: i128,
    adds: bool,
    (min, max): (i128, i128),
    descending: bool,
) -> Vec<i128>
where
    T::Native: Into<i128>,
{
    let unsigned = min == 0;
    key.as_primitive::<T>()
        .values()
        .par_iter()
        .map(|&v| {
            let v: i128 = v.into();
            let t = match adds {
                true => v + d,
                false if unsigned && v < d => 0,
                false => v - d,
            };
            encode((min..=max).contains(&t).then_some(t), descending)
        })
        .collect()
}

/// Float targets in the key's own precision (they never fall outside: ±inf).
fn float_targets<T: ArrowPrimitiveType>(
    key: &ArrayRef,
    d: T::Native,
    adds: bool,
    ordinal: impl Fn(T::Native) -> i128 + Sync,
    descending: bool,
) -> Vec<i128>
where
    T::Native: std::ops::Add<Output = T::Native> + std::ops::Sub<Output = T::Native>,
{
    key.as_primitive::<T>()
        .values()
        .par_iter()
        .map(|&v| encode(Some(ordinal(if adds { v + d } else { v - d })), descending))
        .collect()
}

/// Each row's target for `offset` (added when `adds`) as an ordinal in the sort's
/// direction ([`encode`]).
fn targets(
    key: &ArrayRef,
    offset: &ScalarValue,
    adds: bool,
    descending: bool,
) -> Result<Vec<i128>> {
    macro_rules! int {
        ($t:ty, $native:ty) => {{
            let Some(d) = offset_value(offset) else {
                return internal_err!("gpusort window: RANGE offset {offset}");
            };
            let range = (<$native>::MIN.into(), <$native>::MAX.into());
            integer_targets::<$t>(key, d, adds, range, descending)
        }};
    }
    Ok(match (key.data_type(), offset) {
        (DataType::Int8, _) => int!(Int8Type, i8),
        (DataType::Int16, _) => int!(Int16Type, i16),
        (DataType::Int32, _) => int!(Int32Type, i32),
        (DataType::Int64, _) => int!(Int64Type, i64),
        (DataType::UInt8, _) => int!(UInt8Type, u8),
        (DataType::UInt16, _) => int!(UInt16Type, u16),
        (DataType::UInt32, _) => int!(UInt32Type, u32),
        (DataType::UInt64, _) => int!(UInt64Type, u64),
        (DataType::Float32, ScalarValue::Float32(Some(d))) => {
            float_targets::<Float32Type>(key, *d, adds, total_f32, descending)
        }
        (DataType::Float64, ScalarValue::Float64(Some(d))) => {
            float_targets::<Float64Type>(key, *d, adds, total_f64, descending)
        }
        (DataType::Decimal128(_, _), _) => {
            let Some(d) = offset_value(offset) else {
                return internal_err!("gpusort window: RANGE offset {offset}");
            };
            key.as_primitive::<Decimal128Type>()
                .values()
                .par_iter()
                .map(|&v| {
                    let t = match adds {
                        true => v.checked_add(d),
                        false => v.checked_sub(d),
                    };
                    encode(t, descending)
                })
                .collect()
        }
        (DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _), _) => {
            temporal_targets(key, offset, adds, descending)?
        }
        (other, _) => {
            return internal_err!("gpusort window: RANGE offset {offset} over a {other} key")
        }
    })
}

/// Date and timestamp targets: arrow's interval arithmetic (the kernel DataFusion applies
/// to each row) over chunks of the column in parallel; in a chunk where some row's target
/// falls outside the type, row by row, as DataFusion does.
fn temporal_targets(
    key: &ArrayRef,
    offset: &ScalarValue,
    adds: bool,
    descending: bool,
) -> Result<Vec<i128>> {
    let delta = Scalar::new(offset.to_array()?);
    let chunks: Vec<usize> = (0..key.len()).step_by(CHUNK_ROWS).collect();
    let parts: Vec<Vec<i128>> = chunks
        .into_par_iter()
        .map(|lo| {
            let part = key.slice(lo, CHUNK_ROWS.min(key.len() - lo));
            let whole = match adds {
                true => add(&part, &delta),
                false => sub(&part, &delta),
            };
            match whole {
                Ok(moved) => Ok(ascending_ordinals(&moved)?
                    .into_iter()
                    .map(|t| encode(Some(t), descending))
                    .collect()),
                Err(_) => (0..part.len())
                    .map(|row| {
                        Ok(encode(
                            temporal_target(&part, row, offset, adds)?,
                            descending,
                        ))
                    })
                    .collect(),
            }
        })
        .collect::<Result<_>>()?;
    Ok(parts.concat())
}

/// One row's date or timestamp target, `None` outside the type (or for a null key).
fn temporal_target(
    key: &ArrayRef,
    row: usize,
    offset: &ScalarValue,
    adds: bool,
) -> Result<Option<i128>> {
    if key.is_null(row) {
        return Ok(None);
    }
    let value = ScalarValue::try_from_array(key, row)?;
    let moved = match adds {
        true => value.add_checked(offset),
        false => value.sub_checked(offset),
    };
    match moved {
        Ok(moved) => Ok(Some(ascending_ordinals(&moved.to_array()?)?[0])),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::frames::Units;
    use arrow::array::{Int32Array, PrimitiveArray};
    use std::sync::Arc;

    /// `values` as an array of `T`.
    fn array<T: ArrowPrimitiveType>(values: Vec<Option<T::Native>>) -> ArrayRef {
        Arc::new(values.into_iter().collect::<PrimitiveArray<T>>())
    }

    fn frames(
        key: ArrayRef,
        partitions: Vec<i32>,
        options: SortOptions,
        start: Bound,
        end: Bound,
    ) -> Vec<(usize, usize)> {
        let rows = key.len();
        let p: ArrayRef = Arc::new(Int32Array::from(partitions));
        let layout = Layout::of(&[p], &[Arc::clone(&key)], rows).unwrap();
        let frame = Frame {
            units: Units::Range,
            start,
            end,
        };
        let found = range_frames(&frame, &key, options, &layout).unwrap();
        found.starts.into_iter().zip(found.ends).collect()
    }

    const ASC_NULLS_LAST: SortOptions = SortOptions {
        descending: false,
        nulls_first: false,
    };

    #[test]
    fn offsets_search_the_partition() {
        let key = array::<Int32Type>(vec![
            Some(1),
            Some(3),
            Some(3),
            Some(4),
            Some(7),
            None,
            Some(2),
            Some(5),
        ]);
        let found = frames(
            key,
            vec![0, 0, 0, 0, 0, 0, 1, 1],
            ASC_NULLS_LAST,
            Bound::ValuePreceding(ScalarValue::Int32(Some(2))),
            Bound::ValueFollowing(ScalarValue::Int32(Some(1))),
        );
        assert_eq!(
            found,
            vec![
                (0, 1),
                (0, 4),
                (0, 4),
                (1, 4),
                (4, 5),
                (5, 6),
                (6, 7),
                (7, 8)
            ]
        );
    }

    #[test]
    fn descending_keys_and_nulls_first() {
        let options = SortOptions {
            descending: true,
            nulls_first: true,
        };
        let key =
            array::<Float64Type>(vec![None, None, Some(9.0), Some(8.5), Some(6.0), Some(5.0)]);
        let found = frames(
            key,
            vec![0; 6],
            options,
            Bound::ValuePreceding(ScalarValue::Float64(Some(1.0))),
            Bound::CurrentRow,
        );
        // 9 → [9, 10] none above it; 8.5 → [8.5, 9.5]; 6 → [6, 7]; 5 → [5, 6].
        assert_eq!(found, vec![(0, 2), (0, 2), (2, 3), (2, 4), (4, 5), (4, 6)]);
    }

    #[test]
    fn targets_outside_the_type_collapse_as_in_datafusion() {
        let key = array::<Int8Type>(vec![
            Some(-128),
            Some(-127),
            Some(0),
            Some(120),
            Some(127),
            None,
        ]);
        // 5 PRECEDING underflows for the first two rows: their frames start at the
        // partition's start; 10 FOLLOWING overflows for the last two keys: their frames
        // end at the partition's end, nulls included.
        let found = frames(
            key,
            vec![0; 6],
            ASC_NULLS_LAST,
            Bound::ValuePreceding(ScalarValue::Int8(Some(5))),
            Bound::ValueFollowing(ScalarValue::Int8(Some(10))),
        );
        assert_eq!(found, vec![(0, 2), (0, 2), (2, 3), (3, 6), (4, 6), (5, 6)]);
        let unsigned = array::<UInt8Type>(vec![Some(0), Some(2), Some(9)]);
        let found = frames(
            unsigned,
            vec![0; 3],
            ASC_NULLS_LAST,
            Bound::ValuePreceding(ScalarValue::UInt8(Some(5))),
            Bound::CurrentRow,
        );
        assert_eq!(found, vec![(0, 1), (0, 2), (2, 3)]);
    }

    #[test]
    fn dates_move_by_intervals() {
        let key = array::<Date32Type>(vec![Some(0), Some(20), Some(31), Some(59), Some(60)]);
        let month = ScalarValue::new_interval_mdn(1, 0, 0);
        let found = frames(
            key,
            vec![0; 5],
            ASC_NULLS_LAST,
            Bound::ValuePreceding(month),
            Bound::CurrentRow,
        );
        // 1970-03-01 (day 59) less a month is 1970-02-01 (day 31).
        assert_eq!(found, vec![(0, 1), (0, 2), (0, 3), (2, 4), (3, 5)]);
    }

    #[test]
    fn long_partitions_keep_bounds_rising_across_chunks() {
        let rows = 3 * CHUNK_ROWS + 11;
        let key = array::<Int64Type>((0..rows as i64).map(|i| Some(i / 3)).collect());
        let found = frames(
            key,
            vec![0; rows],
            ASC_NULLS_LAST,
            Bound::ValuePreceding(ScalarValue::Int64(Some(2))),
            Bound::ValueFollowing(ScalarValue::Int64(Some(1))),
        );
        for (row, &(start, end)) in found.iter().enumerate() {
            let v = row / 3;
            assert_eq!(start, v.saturating_sub(2) * 3, "row {row}");
            assert_eq!(end, ((v + 2) * 3).min(rows), "row {row}");
        }
    }

    #[test]
    fn offsets_of_other_types_are_refused() {
        let int = ScalarValue::Int64(Some(1));
        assert!(offset_unsupported(&DataType::Int64, &int).is_none());
        assert!(offset_unsupported(&DataType::Int32, &int).is_some());
        assert!(offset_unsupported(&DataType::Utf8, &int).is_some());
        let days = ScalarValue::new_interval_mdn(0, 3, 0);
        assert!(offset_unsupported(&DataType::Date32, &days).is_none());
    }
}
