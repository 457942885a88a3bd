//! Segments: rows that an input already ordered by a prefix of the sort keys groups
//! together, found on the host, and the CPU backend's segmented sort over them.
//!
//! ```text
//!  prefix key columns ──arrow `partition` per batch (vectorized), one comparison per
//!                       boundary and per batch seam──► segment starts
//!                       (a boundary out of order: the input is not ordered by the prefix
//!                       after all → no segments, the run is sorted whole)
//!  segmented_sort:      every segment sorted on its own, in parallel (short ones with a
//!                       stable comparison sort, long ones with the radix sort)
//! ```

use std::cmp::Ordering;
use std::ops::Range;

use arrow::array::{make_comparator, ArrayRef, DynComparator};
use arrow::compute::partition;
use datafusion::arrow;
use datafusion::common::Result;
use rayon::prelude::*;

use super::{identity, radix_sort};
use crate::keys::KeyColumn;

/// Segments of one run: `starts[s]` is the first row of segment `s` (`starts[0] == 0`,
/// strictly ascending); the last segment ends at `rows`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segments {
    starts: Vec<u32>,
    rows: usize,
    /// Rows of the longest segment.
    longest: usize,
}

/// Segments from this length on are radix sorted (in parallel themselves); shorter ones
/// get a comparison sort each, many segments in parallel.
const RADIX_SEGMENT_ROWS: usize = 1 << 16;

impl Segments {
    /// Segments starting at `starts` in a run of `rows` rows.
    ///
    /// # Panics
    /// When `starts` does not begin with 0, is not strictly ascending, or reaches `rows`
    /// (for `rows > 0`).
    pub fn new(starts: Vec<u32>, rows: usize) -> Self {
        if rows > 0 {
            assert_eq!(
                starts.first(),
                Some(&0),
                "the first segment starts at row 0"
            );
            assert!(
                starts.windows(2).all(|w| w[0] < w[1]) && (*starts.last().unwrap() as usize) < rows,
                "segment starts ascend within the run"
            );
        }
        let mut segments = Self {
            starts,
            rows,
            longest: 0,
        };
        segments.longest = segments.ranges().map(|r| r.len()).max().unwrap_or(0);
        segments
    }

    /// First rows of the segments.
    pub fn starts(&self) -> &[u32] {
        &self.starts
    }

    /// Rows of the run.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether the run has no rows.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Rows of the longest segment (0 without rows).
    pub fn longest_rows(&self) -> usize {
        self.longest
    }

    /// Mean rows per segment.
    pub fn mean_rows(&self) -> usize {
        self.rows / self.len().max(1)
    }

    /// The rows of each segment.
    pub fn ranges(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.starts.iter().enumerate().map(|(s, &start)| {
            let end = self
                .starts
                .get(s + 1)
                .map_or(self.rows, |&next| next as usize);
            start as usize..end
        })
    }
}

/// The segments of rows with equal values in `prefix` (key columns the rows are ordered
/// by, arrays batch by batch), or `None` when the rows turn out not to be in the order of
/// `prefix` (then they must be sorted whole).
pub fn segment_starts(prefix: &[KeyColumn]) -> Result<Option<Segments>> {
    let Some(first) = prefix.first() else {
        return Ok(None);
    };
    let mut starts: Vec<u32> = Vec::new();
    let mut offset = 0usize;
    // The prefix arrays of the last batch with rows, for the comparison across the seam.
    let mut previous: Option<Vec<ArrayRef>> = None;
    for b in 0..first.arrays.len() {
        let arrays: Vec<ArrayRef> = prefix.iter().map(|c| c.arrays[b].clone()).collect();
        let len = arrays[0].len();
        if len == 0 {
            continue;
        }
        let within = comparators(prefix, &arrays, &arrays)?;
        for range in partition(&arrays)?.ranges() {
            let ordered = match (range.start, &previous) {
                (0, None) => Ordering::Less,
                (0, Some(last)) => {
                    compare(&comparators(prefix, last, &arrays)?, last[0].len() - 1, 0)
                }
                (start, _) => compare(&within, start - 1, start),
            };
            match ordered {
                Ordering::Less => starts.push((offset + range.start) as u32),
                Ordering::Equal => {}
                Ordering::Greater => return Ok(None),
            }
        }
        offset += len;
        previous = Some(arrays);
    }
    Ok(Some(Segments::new(starts, offset)))
}

fn comparators(
    prefix: &[KeyColumn],
    left: &[ArrayRef],
    right: &[ArrayRef],
) -> Result<Vec<DynComparator>> {
    prefix
        .iter()
        .zip(left.iter().zip(right))
        .map(|(c, (l, r))| Ok(make_comparator(l.as_ref(), r.as_ref(), c.options)?))
        .collect()
}

fn compare(comparators: &[DynComparator], left: usize, right: usize) -> Ordering {
    comparators
        .iter()
        .map(|c| c(left, right))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Sorts the rows of every segment by `words` (word-major, word 0 most significant),
/// stably; rows never leave their segment. The permutation.
pub fn segmented_sort(words: &[Vec<u64>], segments: &Segments) -> Vec<u32> {
    let mut permutation = identity(segments.rows());
    if words.is_empty() {
        return permutation;
    }
    let mut pieces = Vec::with_capacity(segments.len());
    let mut rest = permutation.as_mut_slice();
    for range in segments.ranges() {
        let (piece, tail) = rest.split_at_mut(range.len());
        pieces.push((range.start, piece));
        rest = tail;
    }
    pieces
        .into_par_iter()
        .with_min_len(64)
        .for_each(|(start, piece)| sort_segment(words, start, piece));
    permutation
}

fn sort_segment(words: &[Vec<u64>], start: usize, piece: &mut [u32]) {
    let len = piece.len();
    if len < 2 {
        return;
    }
    if len >= RADIX_SEGMENT_ROWS {
        let own: Vec<Vec<u64>> = words
            .iter()
            .map(|w| w[start..start + len].to_vec())
            .collect();
        for (out, row) in piece.iter_mut().zip(radix_sort(&own, len)) {
            *out = start as u32 + row;
        }
    } else if let [word] = words {
        piece.sort_by_key(|&row| word[row as usize]);
    } else {
        piece.sort_by(|&a, &b| {
            words
                .iter()
                .map(|w| w[a as usize].cmp(&w[b as usize]))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int32Array};
    use arrow::compute::SortOptions;
    use std::sync::Arc;

    fn column(batches: Vec<ArrayRef>, options: SortOptions) -> KeyColumn {
        KeyColumn {
            arrays: batches,
            options,
        }
    }

    fn ints(values: &[Option<i32>]) -> ArrayRef {
        Arc::new(Int32Array::from(values.to_vec()))
    }

    #[test]
    fn segments_follow_equal_prefix_values_across_batches() {
        let asc = SortOptions::default();
        let prefix = [column(
            vec![
                ints(&[Some(1), Some(1), Some(2)]),
                ints(&[]),
                ints(&[Some(2), Some(3)]),
                ints(&[Some(4), Some(4), Some(4)]),
            ],
            asc,
        )];
        let segments = segment_starts(&prefix).unwrap().unwrap();
        assert_eq!(segments.starts(), &[0, 2, 4, 5]);
        assert_eq!(segments.rows(), 8);
        let ranges: Vec<_> = segments.ranges().collect();
        assert_eq!(ranges, vec![0..2, 2..4, 4..5, 5..8]);
        assert_eq!(segments.longest_rows(), 3);
        assert_eq!(Segments::new(Vec::new(), 0).longest_rows(), 0);
    }

    #[test]
    fn segments_respect_nulls_direction_and_several_columns() {
        let desc_nulls_first = SortOptions {
            descending: true,
            nulls_first: true,
        };
        let prefix = [
            column(
                vec![
                    ints(&[None, None, Some(5), Some(5)]),
                    ints(&[Some(5), Some(2)]),
                ],
                desc_nulls_first,
            ),
            column(
                vec![
                    Arc::new(Float64Array::from(vec![0.5, 0.5, -0.0, 0.0])),
                    Arc::new(Float64Array::from(vec![0.0, f64::NAN])),
                ],
                SortOptions::default(),
            ),
        ];
        let segments = segment_starts(&prefix).unwrap().unwrap();
        assert_eq!(segments.starts(), &[0, 2, 3, 5]);
    }

    #[test]
    fn rows_out_of_prefix_order_have_no_segments() {
        let asc = SortOptions::default();
        // Within a batch.
        let prefix = [column(vec![ints(&[Some(1), Some(3), Some(2)])], asc)];
        assert_eq!(segment_starts(&prefix).unwrap(), None);
        // At a batch seam (two input partitions one after the other).
        let prefix = [column(
            vec![ints(&[Some(1), Some(3)]), ints(&[Some(0)])],
            asc,
        )];
        assert_eq!(segment_starts(&prefix).unwrap(), None);
        // Nulls last, but a null comes first.
        let nulls_last = SortOptions {
            descending: false,
            nulls_first: false,
        };
        let prefix = [column(vec![ints(&[None, Some(1)])], nulls_last)];
        assert_eq!(segment_starts(&prefix).unwrap(), None);
    }

    #[test]
    fn segmented_sort_keeps_rows_in_their_segment_and_ties_in_order() {
        // Segment keys deliberately out of order across segments: rows must not move.
        let words = vec![vec![9, 1, 9, 5, 0, 3, 3, 1]];
        let segments = Segments::new(vec![0, 3, 4], 8);
        assert_eq!(
            segmented_sort(&words, &segments),
            vec![1, 0, 2, 3, 4, 7, 5, 6]
        );
        let two = vec![vec![1, 1, 0, 0], vec![2, 1, 7, 7]];
        assert_eq!(
            segmented_sort(&two, &Segments::new(vec![0], 4)),
            vec![2, 3, 1, 0]
        );
    }

    #[test]
    fn long_segments_use_the_radix_sort_with_the_same_result() {
        let rows = RADIX_SEGMENT_ROWS * 2 + 77;
        let word: Vec<u64> = (0..rows as u64).map(|i| (i * 7919) % 1000).collect();
        let segments = Segments::new(vec![0, 5, RADIX_SEGMENT_ROWS as u32 + 5], rows);
        let got = segmented_sort(std::slice::from_ref(&word), &segments);
        let mut expected = identity(rows);
        for range in segments.ranges() {
            expected[range].sort_by_key(|&r| word[r as usize]);
        }
        assert_eq!(got, expected);
    }
}
