//! Ranking functions, from each row's position among its partition's rows and peer
//! groups (`layout.rs`); they read no column.
//!
//! ```text
//!  row_number    row - partition start + 1
//!  rank          peer group start - partition start + 1
//!  dense_rank    peer group index - partition's first group index + 1
//!  percent_rank  (rank - 1) / max(partition rows - 1, 1)
//!  cume_dist     (peer group end - partition start) / partition rows
//!  ntile(n)      as DataFusion: the first rows % n buckets hold one row more
//! ```

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, UInt64Array};
use datafusion::arrow;

use super::layout::{positions, Layout, Position};

/// A ranking function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ranking {
    /// `row_number()`.
    RowNumber,
    /// `rank()`.
    Rank,
    /// `dense_rank()`.
    DenseRank,
    /// `percent_rank()`.
    PercentRank,
    /// `cume_dist()`.
    CumeDist,
    /// `ntile(n)`, `n ≥ 1`.
    Ntile(u64),
}

impl Ranking {
    /// The function's value for rows `lo..hi`.
    pub(crate) fn evaluate(self, layout: &Layout, lo: usize, hi: usize) -> ArrayRef {
        let at = positions(layout, lo, hi);
        match self {
            Ranking::RowNumber => unsigned(at.map(|p| p.row - p.partition_start + 1)),
            Ranking::Rank => unsigned(at.map(|p| p.peer_start - p.partition_start + 1)),
            Ranking::DenseRank => unsigned(at.map(|p| p.peer_group - p.first_peer_group + 1)),
            Ranking::PercentRank => float(at.map(|p| {
                let rank = (p.peer_start - p.partition_start) as f64;
                rank / (rows_of(&p) as f64 - 1.0).max(1.0)
            })),
            Ranking::CumeDist => {
                float(at.map(|p| (p.peer_end - p.partition_start) as f64 / rows_of(&p) as f64))
            }
            Ranking::Ntile(n) => unsigned(at.map(|p| {
                ntile_bucket((p.row - p.partition_start) as u64, rows_of(&p) as u64, n) as usize
            })),
        }
    }
}

fn rows_of(at: &Position) -> usize {
    at.partition_end - at.partition_start
}

/// The 1-based bucket of row `i` of `rows` split into `n` buckets: `rows % n` buckets of
/// `rows / n + 1` rows first, then buckets of `rows / n` rows.
pub(crate) fn ntile_bucket(i: u64, rows: u64, n: u64) -> u64 {
    let base = rows / n;
    let remainder = rows % n;
    let large_rows = remainder * (base + 1);
    match i < large_rows {
        true => i / (base + 1) + 1,
        false => remainder + (i - large_rows) / base + 1,
    }
}

fn unsigned(values: impl Iterator<Item = usize>) -> ArrayRef {
    Arc::new(UInt64Array::from_iter_values(values.map(|v| v as u64)))
}

fn float(values: impl Iterator<Item = f64>) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray, Int32Array};
    use arrow::datatypes::{Float64Type, UInt64Type};

    fn layout() -> Layout {
        let p: ArrayRef = Arc::new(Int32Array::from(vec![1, 1, 1, 1, 2]));
        let o: ArrayRef = Arc::new(Int32Array::from(vec![3, 3, 4, 5, 1]));
        Layout::of(&[p], &[o], 5).unwrap()
    }

    fn unsigned_of(ranking: Ranking) -> Vec<u64> {
        let array = ranking.evaluate(&layout(), 0, 5);
        array.as_primitive::<UInt64Type>().values().to_vec()
    }

    #[test]
    fn ranks_count_rows_and_peer_groups() {
        assert_eq!(unsigned_of(Ranking::RowNumber), vec![1, 2, 3, 4, 1]);
        assert_eq!(unsigned_of(Ranking::Rank), vec![1, 1, 3, 4, 1]);
        assert_eq!(unsigned_of(Ranking::DenseRank), vec![1, 1, 2, 3, 1]);
        assert_eq!(unsigned_of(Ranking::Ntile(3)), vec![1, 1, 2, 3, 1]);
        let tail = Ranking::Rank.evaluate(&layout(), 2, 5);
        assert_eq!(tail.len(), 3);
        assert_eq!(tail.as_primitive::<UInt64Type>().values(), &[3, 4, 1]);
    }

    #[test]
    fn distributions_are_fractions_of_the_partition() {
        let percent = Ranking::PercentRank.evaluate(&layout(), 0, 5);
        let percent = percent.as_primitive::<Float64Type>().values().to_vec();
        assert_eq!(percent, vec![0.0, 0.0, 2.0 / 3.0, 1.0, 0.0]);
        let cume = Ranking::CumeDist.evaluate(&layout(), 0, 5);
        let cume = cume.as_primitive::<Float64Type>().values().to_vec();
        assert_eq!(cume, vec![0.5, 0.5, 0.75, 1.0, 1.0]);
    }

    #[test]
    fn ntile_buckets_as_datafusion() {
        let sizes = |rows: u64, n: u64| {
            let mut sizes = vec![0; n.min(rows) as usize];
            for i in 0..rows {
                sizes[ntile_bucket(i, rows, n) as usize - 1] += 1;
            }
            sizes
        };
        assert_eq!(sizes(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(sizes(3, 5), vec![1, 1, 1]);
        assert_eq!(sizes(8, 1), vec![8]);
    }
}
