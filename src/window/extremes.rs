//! `min` and `max` over frames.
//!
//! Frames never move backwards (`frames.rs`), so:
//! - frames that start at their partition's first row read a segmented running extreme
//!   (a parallel prefix scan that restarts at each window partition), frames that end at
//!   its last row a segmented running extreme from the end;
//! - any other frame reads a monotone deque of the rows that can still be the extreme,
//!   each row pushed and popped once within a piece of rows.
//!
//! Values compare as arrow's `min` and `max` kernels compare them: floats by their total
//! order (`-NaN < -inf < -0.0 < +0.0 < +inf < +NaN`). Nulls are skipped; a frame without a
//! value gives null.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{downcast_primitive_array, Array, ArrayRef, ArrowPrimitiveType, PrimitiveArray};
use arrow::datatypes::ArrowNativeTypeOp;
use datafusion::arrow;
use datafusion::common::{internal_err, Result};

use super::frames::{Frame, FrameRows};
use super::layout::Layout;
use super::scan::prefix_scan;

/// Which extreme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extreme {
    /// `min`.
    Min,
    /// `max`.
    Max,
}

impl Extreme {
    /// Whether `candidate` beats `incumbent` (ties do not).
    fn beats<T: ArrowNativeTypeOp>(self, candidate: T, incumbent: T) -> bool {
        match self {
            Extreme::Min => candidate.is_lt(incumbent),
            Extreme::Max => candidate.is_gt(incumbent),
        }
    }

    /// The better of two optional values.
    fn pick<T: ArrowNativeTypeOp>(self, a: Option<T>, b: Option<T>) -> Option<T> {
        match (a, b) {
            (Some(x), Some(y)) => Some(if self.beats(y, x) { y } else { x }),
            (x, None) => x,
            (None, y) => y,
        }
    }
}

/// Running extremes from each window partition's start (`ascending`) or end, as a prefix
/// over all rows: entry `i` is the extreme of its partition's rows up to `i` (or from `i`).
pub(crate) struct RunningExtreme {
    values: ArrayRef,
    ascending: bool,
}

impl RunningExtreme {
    /// Scans `values` once; frames ending (`from_start`) or starting at a partition's edge.
    pub(crate) fn new(
        values: &ArrayRef,
        layout: &Layout,
        extreme: Extreme,
        from_start: bool,
    ) -> Result<Self> {
        let scanned = downcast_primitive_array!(
            values => Arc::new(running(values, layout, extreme, from_start)) as ArrayRef,
            other => return internal_err!("gpusort window: min/max of {other}")
        );
        Ok(Self {
            values: scanned,
            ascending: from_start,
        })
    }

    /// The extreme of each frame, which must share the edge this was scanned from.
    pub(crate) fn over(&self, frames: &FrameRows) -> Result<ArrayRef> {
        let len = frames.starts.len();
        let mut indices = Vec::with_capacity(len);
        for (&start, &end) in frames.starts.iter().zip(&frames.ends) {
            indices.push(match (start < end, self.ascending) {
                (false, _) => None,
                (true, true) => Some((end - 1) as u64),
                (true, false) => Some(start as u64),
            });
        }
        let indices = arrow::array::UInt64Array::from(indices);
        Ok(arrow::compute::take(&self.values, &indices, None)?)
    }
}

/// The segmented running extreme of `values`.
fn running<T: ArrowPrimitiveType>(
    values: &PrimitiveArray<T>,
    layout: &Layout,
    extreme: Extreme,
    from_start: bool,
) -> PrimitiveArray<T> {
    let rows = values.len();
    let starts_partition = partition_edges(layout, from_start);
    // Item k is row k (from the start) or row rows - 1 - k (from the end).
    let row_of = |k: usize| if from_start { k } else { rows - 1 - k };
    let item = |k: usize| {
        let row = row_of(k);
        let value = values.is_valid(row).then(|| values.value(row));
        (starts_partition[row], value)
    };
    let combine = |a: (bool, Option<T::Native>), b: (bool, Option<T::Native>)| match b.0 {
        true => b,
        false => (a.0, extreme.pick(a.1, b.1)),
    };
    let scanned = prefix_scan(rows, (false, None), item, combine);
    let out: PrimitiveArray<T> = (0..rows)
        .map(|row| scanned[if from_start { row } else { rows - 1 - row } + 1].1)
        .collect();
    out.with_data_type(values.data_type().clone())
}

/// For each row, whether it is its window partition's first row (`from_start`) or last.
fn partition_edges(layout: &Layout, from_start: bool) -> Vec<bool> {
    let mut edges = vec![false; layout.rows];
    for k in 0..layout.partitions.len() {
        let row = match from_start {
            true => layout.partitions.start(k),
            false => layout.partitions.end(k) - 1,
        };
        edges[row] = true;
    }
    edges
}

/// The extreme of each frame by a monotone deque; frames must not move backwards.
pub(crate) fn sliding(values: &ArrayRef, frames: &FrameRows, extreme: Extreme) -> Result<ArrayRef> {
    Ok(downcast_primitive_array!(
        values => Arc::new(sliding_typed(values, frames, extreme)) as ArrayRef,
        other => return internal_err!("gpusort window: min/max of {other}")
    ))
}

fn sliding_typed<T: ArrowPrimitiveType>(
    values: &PrimitiveArray<T>,
    frames: &FrameRows,
    extreme: Extreme,
) -> PrimitiveArray<T> {
    let mut deque: VecDeque<usize> = VecDeque::new();
    let mut pushed = frames.starts.first().copied().unwrap_or(0);
    let mut out = Vec::with_capacity(frames.starts.len());
    for (&start, &end) in frames.starts.iter().zip(&frames.ends) {
        pushed = pushed.max(start);
        while pushed < end {
            if values.is_valid(pushed) {
                let value = values.value(pushed);
                while deque
                    .back()
                    .is_some_and(|&b| !extreme.beats(values.value(b), value))
                {
                    deque.pop_back();
                }
                deque.push_back(pushed);
            }
            pushed += 1;
        }
        while deque.front().is_some_and(|&f| f < start) {
            deque.pop_front();
        }
        out.push(match start < end {
            true => deque.front().map(|&f| values.value(f)),
            false => None,
        });
    }
    let out: PrimitiveArray<T> = out.into_iter().collect();
    out.with_data_type(values.data_type().clone())
}

/// `min` or `max` of `values` over `frames` (rows of one piece), choosing the running
/// scan when the frame allows it.
pub(crate) enum ExtremeMethod {
    /// Frames share an edge with their partition: read the running extreme.
    Running(RunningExtreme),
    /// Frames with both ends inside the partition: the sliding deque.
    Sliding {
        /// The argument over all rows.
        values: ArrayRef,
        /// Which extreme.
        extreme: Extreme,
    },
}

impl ExtremeMethod {
    /// The method for `frame`, scanning `values` once where it reads a running extreme.
    pub(crate) fn new(
        values: &ArrayRef,
        layout: &Layout,
        frame: &Frame,
        extreme: Extreme,
    ) -> Result<Self> {
        if frame.starts_unbounded() {
            return Ok(Self::Running(RunningExtreme::new(
                values, layout, extreme, true,
            )?));
        }
        if frame.ends_unbounded() {
            return Ok(Self::Running(RunningExtreme::new(
                values, layout, extreme, false,
            )?));
        }
        Ok(Self::Sliding {
            values: Arc::clone(values),
            extreme,
        })
    }

    /// The extreme of each of `frames`.
    pub(crate) fn over(&self, frames: &FrameRows) -> Result<ArrayRef> {
        match self {
            Self::Running(running) => running.over(frames),
            Self::Sliding { values, extreme } => sliding(values, frames, *extreme),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::frames::{Bound, Units};
    use arrow::array::{AsArray, Float64Array, Int32Array};
    use arrow::datatypes::{Float64Type, Int32Type};

    fn layout(partitions: &[i32]) -> Layout {
        let p: ArrayRef = Arc::new(Int32Array::from(partitions.to_vec()));
        Layout::of(&[p], &[], partitions.len()).unwrap()
    }

    #[test]
    fn sliding_and_running_agree_with_a_direct_scan() {
        let layout = layout(&[1, 1, 1, 1, 1, 2, 2, 2]);
        let values: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(5),
            None,
            Some(3),
            Some(9),
            Some(3),
            None,
            Some(-1),
            Some(4),
        ]));
        for (start, end) in [
            (Bound::Preceding(1), Bound::CurrentRow),
            (Bound::UnboundedPreceding, Bound::CurrentRow),
            (Bound::CurrentRow, Bound::UnboundedFollowing),
            (Bound::Preceding(2), Bound::Following(1)),
        ] {
            let frame = Frame {
                units: Units::Rows,
                start,
                end,
            };
            let rows = frame.rows_between(&layout, 0, 8);
            for extreme in [Extreme::Min, Extreme::Max] {
                let method = ExtremeMethod::new(&values, &layout, &frame, extreme).unwrap();
                let got = method.over(&rows).unwrap();
                let got = got.as_primitive::<Int32Type>();
                let ints = values.as_primitive::<Int32Type>();
                for i in 0..8 {
                    let direct = (rows.starts[i]..rows.ends[i])
                        .filter(|&r| ints.is_valid(r))
                        .map(|r| ints.value(r))
                        .reduce(|a, b| match extreme {
                            Extreme::Min => a.min(b),
                            Extreme::Max => a.max(b),
                        });
                    assert_eq!(
                        got.is_valid(i).then(|| got.value(i)),
                        direct,
                        "{frame:?} {extreme:?} row {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn floats_follow_the_total_order() {
        let layout = layout(&[1, 1, 1, 1]);
        let values: ArrayRef = Arc::new(Float64Array::from(vec![0.0, -0.0, f64::NAN, -f64::NAN]));
        let frame = Frame::WHOLE_PARTITION;
        let rows = frame.rows_between(&layout, 0, 4);
        let min = ExtremeMethod::new(&values, &layout, &frame, Extreme::Min)
            .unwrap()
            .over(&rows)
            .unwrap();
        let max = ExtremeMethod::new(&values, &layout, &frame, Extreme::Max)
            .unwrap()
            .over(&rows)
            .unwrap();
        let min = min.as_primitive::<Float64Type>().value(0);
        let max = max.as_primitive::<Float64Type>().value(0);
        assert!(min.is_nan() && min.is_sign_negative());
        assert!(max.is_nan() && max.is_sign_positive());
    }
}
