//! Functions that read another row's value: `lag`, `lead`, `first_value`, `last_value`
//! and `nth_value`.
//!
//! Each is an index per row (or none), then one `take` of the argument, so every
//! argument type arrow can take is served by the same code:
//!
//! ```text
//!  lag(x, k, d)       row - k        when still in the partition, else d
//!  lead(x, k, d)      row + k        likewise
//!  first_value(x)     frame start    when the frame holds a row, else null
//!  last_value(x)      frame end - 1  likewise
//!  nth_value(x, n)    frame start + n - 1 (n > 0), frame end + n (n < 0), when in the frame
//! ```

use arrow::array::{Array, ArrayRef, BooleanArray, Scalar, UInt64Array};
use arrow::compute::kernels::zip::zip;
use arrow::compute::take;
use datafusion::arrow;
use datafusion::common::{Result, ScalarValue};

use super::frames::FrameRows;
use super::layout::{positions, Layout};

/// A function that reads another row of its partition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ValueOf {
    /// `lag(x, offset, default)` (a negative offset reads ahead) and `lead`, as the offset
    /// back (`lag`) or ahead (`lead`, negated).
    Shifted {
        /// Rows back: `lag`'s offset, or minus `lead`'s.
        back: i64,
        /// The value where the row shifted to lies outside the partition (null if absent).
        default: ScalarValue,
    },
    /// `first_value(x)`.
    First,
    /// `last_value(x)`.
    Last,
    /// `nth_value(x, n)` (`n = 0`: null).
    Nth(i64),
}

impl ValueOf {
    /// Whether the function reads the frame (else only the partition).
    pub(crate) fn reads_frame(&self) -> bool {
        !matches!(self, ValueOf::Shifted { .. })
    }

    /// The value for rows `lo..hi` of `arg` (the whole input partition's argument); value
    /// functions of the frame read `frames`, the frames of those rows.
    pub(crate) fn evaluate(
        &self,
        arg: &ArrayRef,
        layout: &Layout,
        lo: usize,
        hi: usize,
        frames: Option<&FrameRows>,
    ) -> Result<ArrayRef> {
        match (self, frames) {
            (ValueOf::Shifted { back, default }, _) => shifted(arg, layout, lo, hi, *back, default),
            (_, Some(frames)) => Ok(take(arg.as_ref(), &self.frame_indices(frames), None)?),
            (_, None) => {
                datafusion::common::internal_err!("gpusort window: {self:?} without frames")
            }
        }
    }

    /// The row each frame's value comes from.
    fn frame_indices(&self, frames: &FrameRows) -> UInt64Array {
        let pick = |start: usize, end: usize| -> Option<u64> {
            let row = match *self {
                ValueOf::First => Some(start),
                ValueOf::Last => end.checked_sub(1),
                ValueOf::Nth(0) => None,
                ValueOf::Nth(n) if n > 0 => start.checked_add(n as usize - 1),
                ValueOf::Nth(n) => end.checked_sub(n.unsigned_abs() as usize),
                ValueOf::Shifted { .. } => None,
            }?;
            (start <= row && row < end).then_some(row as u64)
        };
        frames
            .starts
            .iter()
            .zip(&frames.ends)
            .map(|(&start, &end)| pick(start, end))
            .collect()
    }
}

/// `lag`/`lead` for rows `lo..hi`.
fn shifted(
    arg: &ArrayRef,
    layout: &Layout,
    lo: usize,
    hi: usize,
    back: i64,
    default: &ScalarValue,
) -> Result<ArrayRef> {
    let indices: UInt64Array = positions(layout, lo, hi)
        .map(|at| {
            let row = at.row as i128 - back as i128;
            let inside = at.partition_start as i128 <= row && row < at.partition_end as i128;
            inside.then_some(row as u64)
        })
        .collect();
    let taken = take(arg.as_ref(), &indices, None)?;
    if default.is_null() || indices.null_count() == 0 {
        return Ok(taken);
    }
    let outside = BooleanArray::from_iter((0..indices.len()).map(|i| Some(indices.is_null(i))));
    let default = default.cast_to(arg.data_type())?.to_array_of_size(1)?;
    Ok(zip(&outside, &Scalar::new(default), &taken)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::frames::{Bound, Frame, Units};
    use arrow::array::{AsArray, Int32Array, StringArray};
    use arrow::datatypes::Int32Type;
    use std::sync::Arc;

    fn layout() -> Layout {
        let p: ArrayRef = Arc::new(Int32Array::from(vec![1, 1, 1, 2, 2]));
        Layout::of(&[p], &[], 5).unwrap()
    }

    fn ints(array: &ArrayRef) -> Vec<Option<i32>> {
        array.as_primitive::<Int32Type>().iter().collect()
    }

    #[test]
    fn lag_and_lead_stay_in_the_partition() {
        let x: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(10),
            None,
            Some(30),
            Some(40),
            Some(50),
        ]));
        let lag = ValueOf::Shifted {
            back: 1,
            default: ScalarValue::Int64(Some(-1)),
        };
        let got = lag.evaluate(&x, &layout(), 0, 5, None).unwrap();
        assert_eq!(
            ints(&got),
            vec![Some(-1), Some(10), None, Some(-1), Some(40)]
        );
        let lead2 = ValueOf::Shifted {
            back: -2,
            default: ScalarValue::Null,
        };
        let got = lead2.evaluate(&x, &layout(), 1, 5, None).unwrap();
        assert_eq!(ints(&got), vec![None, None, None, None]);
        let got = lead2.evaluate(&x, &layout(), 0, 1, None).unwrap();
        assert_eq!(ints(&got), vec![Some(30)]);
    }

    #[test]
    fn frame_values_of_any_type() {
        let x: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c", "d", "e"]));
        let frame = Frame {
            units: Units::Rows,
            start: Bound::Preceding(1),
            end: Bound::CurrentRow,
        };
        let frames = frame.rows_between(&layout(), 0, 5);
        let strings = |f: ValueOf| -> Vec<Option<String>> {
            let got = f.evaluate(&x, &layout(), 0, 5, Some(&frames)).unwrap();
            got.as_string::<i32>()
                .iter()
                .map(|s| s.map(str::to_string))
                .collect()
        };
        let s = |v: &[Option<&str>]| v.iter().map(|x| x.map(str::to_string)).collect::<Vec<_>>();
        assert_eq!(
            strings(ValueOf::First),
            s(&[Some("a"), Some("a"), Some("b"), Some("d"), Some("d")])
        );
        assert_eq!(
            strings(ValueOf::Last),
            s(&[Some("a"), Some("b"), Some("c"), Some("d"), Some("e")])
        );
        assert_eq!(
            strings(ValueOf::Nth(2)),
            s(&[None, Some("b"), Some("c"), None, Some("e")])
        );
        assert_eq!(
            strings(ValueOf::Nth(-2)),
            s(&[None, Some("a"), Some("b"), None, Some("d")])
        );
    }
}
