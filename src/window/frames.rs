//! Window frames: the rows an aggregate or a value function reads for each row.
//!
//! A frame is found from the row's [`Position`] alone, without looking at the data:
//!
//! ```text
//!  ROWS    n PRECEDING .. m FOLLOWING      rows  i - n ..= i + m
//!  RANGE   UNBOUNDED / CURRENT ROW         the partition's start or end, or the row's peers
//!  GROUPS  n PRECEDING .. m FOLLOWING      peer groups  g - n ..= g + m
//! ```
//!
//! Each frame is clipped to the row's window partition and becomes empty where its end
//! comes before its start (`ROWS BETWEEN 3 PRECEDING AND 5 PRECEDING` of the first rows).
//! Within a window partition frame starts and ends never decrease from one row to the
//! next, which the sliding computations of `extremes.rs` rely on.
//!
//! `RANGE` frames with a value offset (`RANGE BETWEEN INTERVAL '7' DAY PRECEDING AND
//! CURRENT ROW`) need the `ORDER BY` values: `range.rs` finds them for a whole input
//! partition at once.

use datafusion::common::ScalarValue;

use super::layout::{positions, Layout, Position};

/// One end of a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bound {
    /// `UNBOUNDED PRECEDING`.
    UnboundedPreceding,
    /// `n PRECEDING`.
    Preceding(usize),
    /// `CURRENT ROW`.
    CurrentRow,
    /// `n FOLLOWING`.
    Following(usize),
    /// `UNBOUNDED FOLLOWING`.
    UnboundedFollowing,
    /// `RANGE` only: `v PRECEDING`, an offset of the `ORDER BY` value (of its type, or an
    /// interval for dates and timestamps).
    ValuePreceding(ScalarValue),
    /// `RANGE` only: `v FOLLOWING`.
    ValueFollowing(ScalarValue),
}

impl Bound {
    /// Whether this end is an offset of the `ORDER BY` value.
    pub(crate) fn is_value_offset(&self) -> bool {
        matches!(self, Bound::ValuePreceding(_) | Bound::ValueFollowing(_))
    }
}

/// What a frame's offsets count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Units {
    /// Rows.
    Rows,
    /// The `ORDER BY` value: the peers (`CURRENT ROW`), or rows whose value lies within
    /// an offset of the row's (`range.rs`).
    Range,
    /// Peer groups.
    Groups,
}

/// A window frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    /// What the offsets count.
    pub units: Units,
    /// Where it starts.
    pub start: Bound,
    /// Where it ends (inclusive).
    pub end: Bound,
}

impl Frame {
    /// The whole window partition for every row.
    #[cfg(test)]
    pub(crate) const WHOLE_PARTITION: Frame = Frame {
        units: Units::Rows,
        start: Bound::UnboundedPreceding,
        end: Bound::UnboundedFollowing,
    };

    /// Whether every frame starts at its window partition's first row.
    pub(crate) fn starts_unbounded(&self) -> bool {
        self.start == Bound::UnboundedPreceding
    }

    /// Whether every frame ends at its window partition's last row.
    pub(crate) fn ends_unbounded(&self) -> bool {
        self.end == Bound::UnboundedFollowing
    }

    /// Whether an end is an offset of the `ORDER BY` value: the frames are then found
    /// from the values (`range.rs`), not from positions.
    pub(crate) fn has_value_offset(&self) -> bool {
        self.start.is_value_offset() || self.end.is_value_offset()
    }

    /// The rows `start..end` of the frame of the row at `at`; not for frames with value
    /// offsets.
    pub(crate) fn rows_of(&self, layout: &Layout, at: &Position) -> (usize, usize) {
        let start = match self.units {
            Units::Rows => row_bound(at, &self.start, false),
            Units::Range => peer_bound(at, &self.start, false),
            Units::Groups => group_bound(layout, at, &self.start, false),
        };
        let end = match self.units {
            Units::Rows => row_bound(at, &self.end, true),
            Units::Range => peer_bound(at, &self.end, true),
            Units::Groups => group_bound(layout, at, &self.end, true),
        };
        let start = start.clamp(at.partition_start, at.partition_end);
        let end = end.clamp(at.partition_start, at.partition_end);
        (start, end.max(start))
    }

    /// The frames of rows `lo..hi`, as `(starts, ends)`.
    pub(crate) fn rows_between(&self, layout: &Layout, lo: usize, hi: usize) -> FrameRows {
        let mut starts = Vec::with_capacity(hi - lo);
        let mut ends = Vec::with_capacity(hi - lo);
        for at in positions(layout, lo, hi) {
            let (start, end) = self.rows_of(layout, &at);
            starts.push(start);
            ends.push(end);
        }
        FrameRows { starts, ends }
    }
}

/// The frames of a range of rows: row `lo + k` reads rows `starts[k]..ends[k]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FrameRows {
    /// First row of each frame.
    pub starts: Vec<usize>,
    /// One past the last row of each frame (equal to the start when it is empty).
    pub ends: Vec<usize>,
}

/// A `ROWS` bound (exclusive when it is the frame's end); may lie outside the partition.
fn row_bound(at: &Position, bound: &Bound, is_end: bool) -> usize {
    let past = usize::from(is_end);
    match *bound {
        Bound::UnboundedPreceding => at.partition_start,
        Bound::Preceding(n) => (at.row + past).saturating_sub(n),
        Bound::CurrentRow => at.row + past,
        Bound::Following(n) => at.row.saturating_add(n).saturating_add(past),
        Bound::UnboundedFollowing => at.partition_end,
        Bound::ValuePreceding(_) | Bound::ValueFollowing(_) => {
            unreachable!("a value offset in a ROWS frame")
        }
    }
}

/// A `RANGE` bound without an offset (those with one are found in `range.rs`).
pub(crate) fn peer_bound(at: &Position, bound: &Bound, is_end: bool) -> usize {
    match bound {
        Bound::UnboundedPreceding => at.partition_start,
        Bound::CurrentRow if is_end => at.peer_end,
        Bound::CurrentRow => at.peer_start,
        Bound::UnboundedFollowing => at.partition_end,
        Bound::Preceding(_)
        | Bound::Following(_)
        | Bound::ValuePreceding(_)
        | Bound::ValueFollowing(_) => unreachable!("a RANGE offset found by position"),
    }
}

/// A `GROUPS` bound (exclusive when it is the frame's end).
fn group_bound(layout: &Layout, at: &Position, bound: &Bound, is_end: bool) -> usize {
    let group = match *bound {
        Bound::UnboundedPreceding => return at.partition_start,
        Bound::UnboundedFollowing => return at.partition_end,
        Bound::CurrentRow => at.peer_group,
        Bound::Preceding(n) => match at.peer_group.checked_sub(n) {
            Some(g) if g >= at.first_peer_group => g,
            // Before the partition's first group: the start clamps to the partition's
            // start, the end makes the frame empty.
            _ => return at.partition_start,
        },
        Bound::Following(n) => match at.peer_group.checked_add(n) {
            Some(g) if g <= at.last_peer_group => g,
            _ => return at.partition_end,
        },
        Bound::ValuePreceding(_) | Bound::ValueFollowing(_) => {
            unreachable!("a value offset in a GROUPS frame")
        }
    };
    match is_end {
        true => layout.peers.end(group),
        false => layout.peers.start(group),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int32Array};
    use datafusion::arrow;
    use std::sync::Arc;

    fn layout() -> Layout {
        // partitions [0, 5), [5, 8); peers by o.
        let p: ArrayRef = Arc::new(Int32Array::from(vec![1, 1, 1, 1, 1, 2, 2, 2]));
        let o: ArrayRef = Arc::new(Int32Array::from(vec![1, 1, 2, 3, 3, 7, 8, 9]));
        Layout::of(&[p], &[o], 8).unwrap()
    }

    fn frames(frame: Frame) -> Vec<(usize, usize)> {
        let rows = frame.rows_between(&layout(), 0, 8);
        rows.starts.into_iter().zip(rows.ends).collect()
    }

    #[test]
    fn rows_frames_clip_to_the_partition() {
        let sliding = Frame {
            units: Units::Rows,
            start: Bound::Preceding(2),
            end: Bound::CurrentRow,
        };
        assert_eq!(
            frames(sliding),
            vec![
                (0, 1),
                (0, 2),
                (0, 3),
                (1, 4),
                (2, 5),
                (5, 6),
                (5, 7),
                (5, 8)
            ]
        );
        let ahead = Frame {
            units: Units::Rows,
            start: Bound::Following(1),
            end: Bound::Following(3),
        };
        assert_eq!(
            frames(ahead),
            vec![
                (1, 4),
                (2, 5),
                (3, 5),
                (4, 5),
                (5, 5),
                (6, 8),
                (7, 8),
                (8, 8)
            ]
        );
        let behind = Frame {
            units: Units::Rows,
            start: Bound::Preceding(3),
            end: Bound::Preceding(2),
        };
        assert_eq!(
            frames(behind),
            vec![
                (0, 0),
                (0, 0),
                (0, 1),
                (0, 2),
                (1, 3),
                (5, 5),
                (5, 5),
                (5, 6)
            ]
        );
    }

    #[test]
    fn range_frames_take_the_peers() {
        let running = Frame {
            units: Units::Range,
            start: Bound::UnboundedPreceding,
            end: Bound::CurrentRow,
        };
        assert_eq!(
            frames(running),
            vec![
                (0, 2),
                (0, 2),
                (0, 3),
                (0, 5),
                (0, 5),
                (5, 6),
                (5, 7),
                (5, 8)
            ]
        );
        let rest = Frame {
            units: Units::Range,
            start: Bound::CurrentRow,
            end: Bound::UnboundedFollowing,
        };
        assert_eq!(frames(rest)[1], (0, 5));
        assert_eq!(frames(Frame::WHOLE_PARTITION)[6], (5, 8));
    }

    #[test]
    fn groups_frames_count_peer_groups() {
        let groups = Frame {
            units: Units::Groups,
            start: Bound::Preceding(1),
            end: Bound::Following(1),
        };
        assert_eq!(
            frames(groups),
            vec![
                (0, 3),
                (0, 3),
                (0, 5),
                (2, 5),
                (2, 5),
                (5, 7),
                (5, 8),
                (6, 8)
            ]
        );
        let before = Frame {
            units: Units::Groups,
            start: Bound::Preceding(2),
            end: Bound::Preceding(1),
        };
        assert_eq!(
            frames(before),
            vec![
                (0, 0),
                (0, 0),
                (0, 2),
                (0, 3),
                (0, 3),
                (5, 5),
                (5, 6),
                (5, 7)
            ]
        );
    }
}
