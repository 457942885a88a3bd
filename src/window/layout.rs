//! Where a sorted partition's window partitions and peer groups begin.
//!
//! A window over `PARTITION BY p ORDER BY o` reads rows sorted on `(p, o)`. A window
//! partition is a run of rows equal on `p`; a peer group is a run of rows equal on `(p, o)`
//! (without `ORDER BY`, the whole window partition). Every window function is computed from
//! the row's position against those runs:
//!
//! ```text
//!  row        0  1  2  3  4  5  6  7
//!  p          a  a  a  a  b  b  b  b        partitions  starts [0, 4, 8]
//!  o          1  1  2  3  1  2  2  2        peers       starts [0, 2, 3, 4, 5, 8]
//! ```
//!
//! Runs are found in parallel, a chunk of rows per task: row `i` starts a run when it is
//! distinct from row `i - 1` on any of the columns (arrow's `distinct`, the comparison
//! DataFusion's own window partitioning uses: nulls equal each other, floats compare by
//! their total order, so `-0.0` and `+0.0` are distinct and NaNs are equal).

use arrow::array::{new_empty_array, ArrayRef};
use arrow::compute::kernels::cmp::distinct;
use arrow::datatypes::DataType;
use datafusion::arrow;
use datafusion::common::Result;

pub(crate) use crate::sort::runs::Runs;

/// Why rows of `data_type` cannot be compared for runs, if they cannot.
pub(crate) fn incomparable_reason(data_type: &DataType) -> Option<String> {
    let empty = new_empty_array(data_type);
    distinct(&empty, &empty)
        .err()
        .map(|e| format!("rows of type {data_type} cannot be compared for equality: {e}"))
}

/// The window partitions and peer groups of one sorted input partition.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// Rows in all.
    pub rows: usize,
    /// Runs of rows equal on the `PARTITION BY` columns.
    pub partitions: Runs,
    /// Runs of rows equal on the `PARTITION BY` and `ORDER BY` columns.
    pub peers: Runs,
}

impl Layout {
    /// The layout of `rows` rows sorted on `partition_by` then `order_by`.
    pub(crate) fn of(
        partition_by: &[ArrayRef],
        order_by: &[ArrayRef],
        rows: usize,
    ) -> Result<Self> {
        let partitions = Runs::of_equal_rows(partition_by, rows)?;
        let peers = match order_by.is_empty() {
            true => partitions.clone(),
            false => {
                let all: Vec<ArrayRef> = partition_by.iter().chain(order_by).cloned().collect();
                Runs::of_equal_rows(&all, rows)?
            }
        };
        Ok(Self {
            rows,
            partitions,
            peers,
        })
    }
}

/// Where one row stands in its window partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Position {
    /// The row.
    pub row: usize,
    /// First row of its window partition.
    pub partition_start: usize,
    /// One past the last row of its window partition.
    pub partition_end: usize,
    /// Index of its peer group (over the whole input).
    pub peer_group: usize,
    /// Index of its window partition's first peer group.
    pub first_peer_group: usize,
    /// Index of its window partition's last peer group.
    pub last_peer_group: usize,
    /// First row of its peer group.
    pub peer_start: usize,
    /// One past the last row of its peer group.
    pub peer_end: usize,
}

/// The positions of rows `lo..hi`, in order, found by walking the runs.
pub(crate) fn positions(
    layout: &Layout,
    lo: usize,
    hi: usize,
) -> impl Iterator<Item = Position> + '_ {
    let mut partition = if lo < hi {
        layout.partitions.run_of(lo)
    } else {
        0
    };
    let mut group = if lo < hi { layout.peers.run_of(lo) } else { 0 };
    let mut current = Position::default();
    let mut needs_partition = true;
    (lo..hi).map(move |row| {
        if !needs_partition && row >= current.partition_end {
            partition += 1;
            needs_partition = true;
        }
        if needs_partition {
            let (start, end) = (
                layout.partitions.start(partition),
                layout.partitions.end(partition),
            );
            current.partition_start = start;
            current.partition_end = end;
            current.first_peer_group = layout.peers.run_of(start);
            current.last_peer_group = layout.peers.run_of(end - 1);
            needs_partition = false;
        }
        while row >= layout.peers.end(group) {
            group += 1;
        }
        current.row = row;
        current.peer_group = group;
        current.peer_start = layout.peers.start(group);
        current.peer_end = layout.peers.end(group);
        current
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int32Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn runs_of_equal_rows_across_columns_and_chunks() {
        let p: ArrayRef = Arc::new(Int32Array::from(vec![1, 1, 1, 1, 2, 2, 2, 2]));
        let o: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            Some("a"),
            Some("b"),
            None,
            Some("a"),
            None,
            None,
            None,
        ]));
        let layout = Layout::of(&[p], &[o], 8).unwrap();
        assert_eq!(layout.partitions.starts(), [0, 4, 8]);
        assert_eq!(layout.peers.starts(), [0, 2, 3, 4, 5, 8]);
    }

    #[test]
    fn floats_compare_by_total_order() {
        let x: ArrayRef = Arc::new(Float64Array::from(vec![-0.0, 0.0, f64::NAN, f64::NAN, 1.0]));
        let runs = Runs::of_equal_rows(&[x], 5).unwrap();
        assert_eq!(runs.starts(), [0, 1, 2, 4, 5]);
    }

    #[test]
    fn positions_walk_partitions_and_peers() {
        let p: ArrayRef = Arc::new(Int32Array::from(vec![1, 1, 1, 2, 2]));
        let o: ArrayRef = Arc::new(Int32Array::from(vec![5, 5, 6, 1, 1]));
        let layout = Layout::of(&[p], &[o], 5).unwrap();
        let all: Vec<Position> = positions(&layout, 1, 5).collect();
        assert_eq!(all.len(), 4);
        assert_eq!((all[0].partition_start, all[0].partition_end), (0, 3));
        assert_eq!((all[0].peer_start, all[0].peer_end), (0, 2));
        assert_eq!((all[1].peer_group, all[1].first_peer_group), (1, 0));
        assert_eq!((all[2].partition_start, all[2].peer_group), (3, 2));
        assert_eq!(all[3].last_peer_group, 2);
    }
}
