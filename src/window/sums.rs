//! `sum`, `avg` and `count` over frames, as differences of prefix sums.
//!
//! The argument is scanned once per sorted input partition (`scan.rs`, in parallel); each
//! frame `start..end` then costs one subtraction, whatever its width:
//!
//! ```text
//!  sum(start..end) = prefix[end] - prefix[start]      count likewise, from the non-nulls
//! ```
//!
//! - **Integers and decimals** are summed in wrapping arithmetic (`i64`, `u64`, `i128`),
//!   as DataFusion's `sum` does. A wrapped difference of wrapped prefixes is exactly the
//!   wrapped sum of the frame, so the results equal DataFusion's bit for bit.
//! - **Floats** are summed in double-double arithmetic (a pair of `f64`, about 106
//!   significant bits). A frame's sum is `prefix[end] - prefix[start]` rounded to `f64`;
//!   with `u = 2^-53` and `n` rows before `end` in the input partition, its error against
//!   the exact sum `S` of the frame is at most `u·|S| + 4·n·u²·Σ|x|`, the second sum over
//!   those `n` rows: the rounded exact sum unless the data span some 25 decimal orders of
//!   magnitude. DataFusion adds and subtracts one row at a time in `f64`, so its own
//!   error grows with every row that enters or leaves the frame; the two agree within
//!   DataFusion's error (docs/ordering.md states the bound; tests check it).
//!   NaN and infinities are counted apart: a frame holding a NaN, or both infinities, sums
//!   to NaN; one holding one kind of infinity to that infinity.
//! - **avg** is the frame's sum divided by its count of non-null values: in `f64` for
//!   floats, and for decimals as DataFusion's `DecimalAverager` does (the sum rescaled to
//!   the result's scale, divided truncating toward zero, an error when it overflows).
//! - An empty frame, or one of nulls only, gives null (`count` gives 0).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, Float64Array, Int64Array, PrimitiveArray,
    UInt64Array,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Decimal128Type, DecimalType, Float64Type, Int64Type, UInt64Type};
use datafusion::arrow;
use datafusion::common::{exec_err, internal_err, Result};
use rayon::prelude::*;

use super::frames::FrameRows;
use super::scan::prefix_scan;

/// A double-double number: `hi + lo`, `|lo| ≤ ulp(hi) / 2`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct DoubleDouble {
    hi: f64,
    lo: f64,
}

impl DoubleDouble {
    fn of(x: f64) -> Self {
        Self { hi: x, lo: 0.0 }
    }

    /// `self + other`, with the error of each step kept in `lo`.
    fn plus(self, other: Self) -> Self {
        let (sum, error) = two_sum(self.hi, other.hi);
        let error = error + self.lo + other.lo;
        let hi = sum + error;
        Self {
            hi,
            lo: error - (hi - sum),
        }
    }

    fn negated(self) -> Self {
        Self {
            hi: -self.hi,
            lo: -self.lo,
        }
    }

    fn to_f64(self) -> f64 {
        self.hi + self.lo
    }
}

/// `a + b` and its rounding error (Knuth's two-sum).
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let sum = a + b;
    let b_part = sum - a;
    let error = (a - (sum - b_part)) + (b - b_part);
    (sum, error)
}

/// Counts of the values a double-double cannot carry: NaN, +inf, -inf.
type NonFinite = [u64; 3];

/// Prefix sums of one argument column.
enum Prefix {
    Int64(Vec<i64>),
    UInt64(Vec<u64>),
    Decimal128(Vec<i128>),
    Float64 {
        sums: Vec<DoubleDouble>,
        /// Prefix counts of NaN, +inf and -inf, when the column holds any.
        non_finite: Option<Vec<NonFinite>>,
    },
}

/// Prefix sums and non-null counts of one argument column, shared by `sum`, `avg` and
/// `count` over it.
pub(crate) struct SumPrefix {
    prefix: Option<Prefix>,
    /// Prefix counts of non-null values; `None` when the column has no nulls.
    counts: Option<Vec<u64>>,
    /// The argument's type.
    data_type: DataType,
}

impl SumPrefix {
    /// Prefix sums of `arg` when `with_sums` (else only its counts), in parallel.
    pub(crate) fn new(arg: &ArrayRef, with_sums: bool) -> Result<Self> {
        let rows = arg.len();
        let nulls = arg.logical_nulls().filter(|n| n.null_count() > 0);
        let counts = nulls
            .as_ref()
            .map(|nulls| prefix_scan(rows, 0u64, |i| u64::from(nulls.is_valid(i)), |a, b| a + b));
        let prefix = match with_sums {
            false => None,
            true => Some(sums_of(arg, nulls.as_ref())?),
        };
        Ok(Self {
            prefix,
            counts,
            data_type: arg.data_type().clone(),
        })
    }

    /// Counts of a column without nulls (`count(*)`), which is not read.
    pub(crate) fn every_row() -> Self {
        Self {
            prefix: None,
            counts: None,
            data_type: DataType::Null,
        }
    }

    /// Non-null values in `start..end`.
    fn count(&self, start: usize, end: usize) -> u64 {
        match &self.counts {
            Some(counts) => counts[end] - counts[start],
            None => (end - start) as u64,
        }
    }

    /// `count(arg)` over each frame.
    pub(crate) fn counts_over(&self, frames: &FrameRows) -> ArrayRef {
        let counts = frames
            .starts
            .iter()
            .zip(&frames.ends)
            .map(|(&start, &end)| self.count(start, end) as i64);
        Arc::new(Int64Array::from_iter_values(counts))
    }

    /// Validity of a frame aggregate: valid where the frame holds a non-null value.
    fn validity(&self, frames: &FrameRows) -> Option<NullBuffer> {
        let valid: Vec<bool> = frames
            .starts
            .iter()
            .zip(&frames.ends)
            .map(|(&start, &end)| self.count(start, end) > 0)
            .collect();
        let nulls = NullBuffer::from(valid);
        (nulls.null_count() > 0).then_some(nulls)
    }

    /// `sum(arg)` over each frame, of type `output`.
    pub(crate) fn sums_over(&self, frames: &FrameRows, output: &DataType) -> Result<ArrayRef> {
        let nulls = self.validity(frames);
        let pairs = || frames.starts.iter().zip(&frames.ends);
        let array: ArrayRef = match self.prefix.as_ref() {
            Some(Prefix::Int64(p)) => Arc::new(Int64Array::new(
                pairs().map(|(&s, &e)| p[e].wrapping_sub(p[s])).collect(),
                nulls,
            )),
            Some(Prefix::UInt64(p)) => Arc::new(UInt64Array::new(
                pairs().map(|(&s, &e)| p[e].wrapping_sub(p[s])).collect(),
                nulls,
            )),
            Some(Prefix::Decimal128(p)) => Arc::new(
                Decimal128Array::new(
                    pairs().map(|(&s, &e)| p[e].wrapping_sub(p[s])).collect(),
                    nulls,
                )
                .with_data_type(output.clone()),
            ),
            Some(Prefix::Float64 { sums, non_finite }) => Arc::new(Float64Array::new(
                pairs()
                    .map(|(&s, &e)| float_sum(sums, non_finite.as_deref(), s, e))
                    .collect(),
                nulls,
            )),
            None => return internal_err!("gpusort window: sum without prefix sums"),
        };
        check_type(array, output)
    }

    /// `avg(arg)` over each frame, of type `output`.
    pub(crate) fn averages_over(&self, frames: &FrameRows, output: &DataType) -> Result<ArrayRef> {
        let nulls = self.validity(frames);
        let pairs = || frames.starts.iter().zip(&frames.ends);
        let array: ArrayRef = match (self.prefix.as_ref(), output) {
            (Some(Prefix::Float64 { sums, non_finite }), DataType::Float64) => {
                Arc::new(Float64Array::new(
                    pairs()
                        .map(|(&s, &e)| {
                            let count = self.count(s, e);
                            float_sum(sums, non_finite.as_deref(), s, e) / count.max(1) as f64
                        })
                        .collect(),
                    nulls,
                ))
            }
            (Some(Prefix::Decimal128(p)), DataType::Decimal128(_, target_scale)) => {
                let DataType::Decimal128(_, sum_scale) = self.data_type else {
                    return internal_err!("gpusort window: avg of {}", self.data_type);
                };
                let averager = DecimalAverage::new(sum_scale, *target_scale, output)?;
                let mut values = Vec::with_capacity(frames.starts.len());
                for (&s, &e) in pairs() {
                    let count = self.count(s, e);
                    values.push(match count {
                        0 => 0,
                        _ => averager.average(p[e].wrapping_sub(p[s]), count)?,
                    });
                }
                Arc::new(Decimal128Array::new(values.into(), nulls).with_data_type(output.clone()))
            }
            _ => return internal_err!("gpusort window: avg of {} into {output}", self.data_type),
        };
        check_type(array, output)
    }
}

/// The float sum of rows `start..end`.
fn float_sum(
    sums: &[DoubleDouble],
    non_finite: Option<&[NonFinite]>,
    start: usize,
    end: usize,
) -> f64 {
    if let Some(counts) = non_finite {
        let [nan, pos, neg] = [0, 1, 2].map(|k| counts[end][k] - counts[start][k]);
        match (nan > 0 || (pos > 0 && neg > 0), pos > 0, neg > 0) {
            (true, _, _) => return f64::NAN,
            (false, true, _) => return f64::INFINITY,
            (false, _, true) => return f64::NEG_INFINITY,
            _ => {}
        }
    }
    sums[end].plus(sums[start].negated()).to_f64()
}

/// The wrapped prefix sums of `arg`, nulls counting as zero.
fn sums_of(arg: &ArrayRef, nulls: Option<&NullBuffer>) -> Result<Prefix> {
    let rows = arg.len();
    let valid = |i: usize| nulls.is_none_or(|n| n.is_valid(i));
    Ok(match arg.data_type() {
        DataType::Int64 => {
            let values = arg.as_primitive::<Int64Type>().values();
            let item = |i: usize| if valid(i) { values[i] } else { 0 };
            Prefix::Int64(prefix_scan(rows, 0, item, i64::wrapping_add))
        }
        DataType::UInt64 => {
            let values = arg.as_primitive::<UInt64Type>().values();
            let item = |i: usize| if valid(i) { values[i] } else { 0 };
            Prefix::UInt64(prefix_scan(rows, 0, item, u64::wrapping_add))
        }
        DataType::Decimal128(_, _) => {
            let values = arg.as_primitive::<Decimal128Type>().values();
            let item = |i: usize| if valid(i) { values[i] } else { 0 };
            Prefix::Decimal128(prefix_scan(rows, 0, item, i128::wrapping_add))
        }
        DataType::Float64 => float_sums_of(arg.as_primitive::<Float64Type>(), nulls),
        other => return internal_err!("gpusort window: sum of {other}"),
    })
}

/// Double-double prefix sums of the finite values, and prefix counts of the others.
fn float_sums_of(values: &PrimitiveArray<Float64Type>, nulls: Option<&NullBuffer>) -> Prefix {
    let rows = values.len();
    let values = values.values();
    let valid = |i: usize| nulls.is_none_or(|n| n.is_valid(i));
    let finite = |i: usize| valid(i) && values[i].is_finite();
    let item = |i: usize| DoubleDouble::of(if finite(i) { values[i] } else { 0.0 });
    let sums = prefix_scan(rows, DoubleDouble::default(), item, DoubleDouble::plus);
    let has_non_finite = (0..rows)
        .into_par_iter()
        .any(|i| valid(i) && !values[i].is_finite());
    let non_finite = has_non_finite.then(|| {
        let kind = |i: usize| -> NonFinite {
            let x = values[i];
            match valid(i) {
                false => [0, 0, 0],
                true => [
                    u64::from(x.is_nan()),
                    u64::from(x == f64::INFINITY),
                    u64::from(x == f64::NEG_INFINITY),
                ],
            }
        };
        prefix_scan(rows, [0; 3], kind, |a, b| {
            [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
        })
    });
    Prefix::Float64 { sums, non_finite }
}

/// DataFusion's decimal average: the sum rescaled to the result's scale, then divided.
struct DecimalAverage {
    multiplier: i128,
    precision: u8,
    scale: i8,
}

impl DecimalAverage {
    fn new(sum_scale: i8, target_scale: i8, output: &DataType) -> Result<Self> {
        let DataType::Decimal128(precision, scale) = *output else {
            return internal_err!("gpusort window: decimal avg into {output}");
        };
        let Some(multiplier) = u32::try_from(target_scale - sum_scale)
            .ok()
            .and_then(|shift| 10i128.checked_pow(shift))
        else {
            return internal_err!("gpusort window: avg from scale {sum_scale} to {target_scale}");
        };
        Ok(Self {
            multiplier,
            precision,
            scale,
        })
    }

    fn average(&self, sum: i128, count: u64) -> Result<i128> {
        let Some(scaled) = sum.checked_mul(self.multiplier) else {
            return exec_err!("Arithmetic Overflow in AvgAccumulator");
        };
        let average = scaled.wrapping_div(count as i128);
        match Decimal128Type::validate_decimal_precision(average, self.precision, self.scale) {
            Ok(()) => Ok(average),
            Err(_) => exec_err!("Arithmetic Overflow in AvgAccumulator"),
        }
    }
}

/// `array` when it has the `expected` type.
pub(crate) fn check_type(array: ArrayRef, expected: &DataType) -> Result<ArrayRef> {
    match array.data_type() == expected {
        true => Ok(array),
        false => internal_err!(
            "gpusort window: computed {} where {expected} was planned",
            array.data_type()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(pairs: &[(usize, usize)]) -> FrameRows {
        FrameRows {
            starts: pairs.iter().map(|p| p.0).collect(),
            ends: pairs.iter().map(|p| p.1).collect(),
        }
    }

    #[test]
    fn integer_sums_wrap_as_datafusion_does() {
        let arg: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(i64::MAX),
            Some(1),
            None,
            Some(5),
        ]));
        let prefix = SumPrefix::new(&arg, true).unwrap();
        let f = frames(&[(0, 2), (1, 3), (2, 3), (3, 3), (0, 4)]);
        let sums = prefix.sums_over(&f, &DataType::Int64).unwrap();
        let expected = Int64Array::from(vec![
            Some(i64::MIN),
            Some(1),
            None,
            None,
            Some(i64::MIN + 5),
        ]);
        assert_eq!(sums.as_primitive::<Int64Type>(), &expected);
        let counts = prefix.counts_over(&f);
        assert_eq!(
            counts.as_primitive::<Int64Type>().values(),
            &[2, 1, 0, 0, 3]
        );
    }

    #[test]
    fn float_sums_survive_cancellation_and_count_non_finite_values() {
        let arg: ArrayRef = Arc::new(Float64Array::from(vec![
            1e20,
            1.0,
            -1e20,
            3.0,
            f64::INFINITY,
            2.0,
            f64::NAN,
        ]));
        let prefix = SumPrefix::new(&arg, true).unwrap();
        let f = frames(&[(0, 4), (1, 2), (2, 4), (3, 5), (5, 6), (4, 7)]);
        let sums = prefix.sums_over(&f, &DataType::Float64).unwrap();
        let sums = sums.as_primitive::<Float64Type>().values();
        assert_eq!(&sums[..3], &[4.0, 1.0, -1e20 + 3.0]);
        assert_eq!(sums[3], f64::INFINITY);
        assert_eq!(sums[4], 2.0);
        assert!(sums[5].is_nan());
    }

    #[test]
    fn decimal_average_truncates_like_datafusion() {
        let arg: ArrayRef = Arc::new(
            Decimal128Array::from(vec![100, 200, 201]).with_data_type(DataType::Decimal128(10, 2)),
        );
        let prefix = SumPrefix::new(&arg, true).unwrap();
        let output = DataType::Decimal128(14, 6);
        let f = frames(&[(0, 3), (1, 1)]);
        let avg = prefix.averages_over(&f, &output).unwrap();
        let avg = avg.as_primitive::<Decimal128Type>();
        assert_eq!(avg.value(0), 1_670_000);
        assert!(avg.is_null(1));
    }
}
