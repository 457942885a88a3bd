//! Top-N per window partition inside the sort: a filter `row_number() <= k` (or `rank()`,
//! `dense_rank()`) above a window over this sort lets each sorted run drop, before its
//! payload is gathered, the rows no window partition keeps.
//!
//! ```text
//!  FilterExec: rn <= 3                       kept: it still filters exactly
//!    SortedWindowExec: row_number() ..       computes ranks over the rows it receives
//!      GpuSortExec: .., partition_top=row_number<=3
//!          run sorted → keys of the PARTITION BY (and ORDER BY) gathered in sorted
//!          order → per window partition the rows ranked ≤ 3 in this run → payload
//!          gathered for those only
//! ```
//!
//! A run holds part of the input, so a window partition's rows ranked within `k` in the
//! whole input are ranked within `k` in their run too, and so are all the rows before
//! them: the rows kept in every run hold each partition's first `k` rows (its rows of
//! rank or dense rank up to `k`, ties included) and everything before them in order, so
//! the window above ranks them as it would rank the whole input, and the filter above
//! drops the rest. Where a sort does not apply the cut (its runs sorted in pieces, with
//! hash routing or in one sort of several partitions) it emits every row, which is as
//! correct.

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{Field, Schema};
use datafusion::arrow;
use datafusion::common::Result;
use datafusion::physical_expr::LexOrdering;

use crate::gather::RunRows;
use crate::sort::runs::Runs;
use crate::sort::Permutation;

/// The ranking function a filter above the window bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopRanking {
    /// `row_number()`: rows.
    RowNumber,
    /// `rank()`: rows before the row's peer group.
    Rank,
    /// `dense_rank()`: peer groups.
    DenseRank,
}

/// The rows of each window partition a filter above keeps: those whose `ranking` is at
/// most `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionTop {
    /// How many leading sort keys are the window's `PARTITION BY`.
    pub partition_keys: usize,
    /// How many sort keys after them are its `ORDER BY` (they make the peers).
    pub order_keys: usize,
    /// What is ranked.
    pub ranking: TopRanking,
    /// The highest rank kept (at least 1).
    pub k: usize,
}

impl fmt::Display for PartitionTop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.ranking {
            TopRanking::RowNumber => "row_number",
            TopRanking::Rank => "rank",
            TopRanking::DenseRank => "dense_rank",
        };
        write!(f, "{name}<={}", self.k)
    }
}

/// Drops from `permutation`, a run's sorted order by `exprs`, the rows ranked past
/// `top.k` within their window partition in this run; `false` when every row stays.
pub(super) fn keep_top_rows(
    rows: &RunRows,
    permutation: &mut Permutation,
    exprs: &LexOrdering,
    top: &PartitionTop,
) -> Result<bool> {
    let len = permutation.len();
    if len <= top.k {
        return Ok(false);
    }
    let ranks_peers = top.ranking != TopRanking::RowNumber;
    let keys = top.partition_keys + if ranks_peers { top.order_keys } else { 0 };
    let sorted = match keys {
        0 => Vec::new(),
        _ => sorted_keys(rows, permutation, exprs, keys)?,
    };
    // Without `PARTITION BY`, one window partition of every row.
    let partitions = Runs::of_equal_rows(&sorted[..top.partition_keys], len)?;
    let peers = match ranks_peers {
        true => Some(Runs::of_equal_rows(&sorted, len)?),
        false => None,
    };
    // Compacted in place: every kept range lies at or after where it is written.
    let mut written = 0;
    let mut keep = |from: usize, to: usize, permutation: &mut Permutation| {
        permutation.copy_within(from..to, written);
        written += to - from;
    };
    let mut group = 0;
    for p in 0..partitions.len() {
        let (start, end) = (partitions.start(p), partitions.end(p));
        let kept_end = match (&peers, top.ranking) {
            (None, _) | (_, TopRanking::RowNumber) => end.min(start + top.k),
            (Some(peers), ranking) => {
                while peers.end(group) <= start {
                    group += 1;
                }
                let first = group;
                // Peer groups that start within the partition's first k rows (rank), or
                // the first k peer groups (dense rank).
                while group < peers.len() && peers.start(group) < end {
                    let within = match ranking {
                        TopRanking::Rank => peers.start(group) - start < top.k,
                        _ => group - first < top.k,
                    };
                    if !within {
                        break;
                    }
                    group += 1;
                }
                peers.start(group).min(end).max(start)
            }
        };
        keep(start, kept_end, permutation);
    }
    permutation.truncate(written);
    Ok(written < len)
}

/// The first `keys` sort keys of the run's rows, in `permutation` order.
fn sorted_keys(
    rows: &RunRows,
    permutation: &[u32],
    exprs: &LexOrdering,
    keys: usize,
) -> Result<Vec<ArrayRef>> {
    let batches = rows
        .batches()
        .iter()
        .map(|batch| {
            let columns: Vec<ArrayRef> = exprs
                .iter()
                .take(keys)
                .map(|e| e.expr.evaluate(batch)?.into_array(batch.num_rows()))
                .collect::<Result<_>>()?;
            let fields: Vec<Field> = columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("key{i}"), c.data_type().clone(), true))
                .collect();
            Ok(RecordBatch::try_new(
                Arc::new(Schema::new(fields)),
                columns,
            )?)
        })
        .collect::<Result<Vec<_>>>()?;
    let gathered = RunRows::new(batches).gather(permutation)?;
    Ok(gathered.columns().to_vec())
}
