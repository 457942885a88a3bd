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
//! drops the rest. The cut is made in each sorted run and in each partition's part of a
//! shared sort of several partitions; a run sorted in pieces (larger than the device)
//! emits every row, which is as correct.

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
    let kept = TopCut::new(rows, exprs, top)?.cut(permutation)?;
    permutation.truncate(kept);
    Ok(kept < len)
}

/// Cuts sorted orders of one run's rows (the whole run's, or each partition's part of a
/// shared one) to the rows within a window partition's top.
pub(super) struct TopCut {
    top: PartitionTop,
    /// The run's key columns the cut compares (none without `PARTITION BY` and peers).
    keys: Option<RunRows>,
}

impl TopCut {
    /// Evaluates the keys the cut compares over the rows of `rows`.
    pub(super) fn new(rows: &RunRows, exprs: &LexOrdering, top: &PartitionTop) -> Result<Self> {
        let ranks_peers = top.ranking != TopRanking::RowNumber;
        let count = top.partition_keys + if ranks_peers { top.order_keys } else { 0 };
        let keys = match count {
            0 => None,
            _ => Some(key_rows(rows, exprs, count)?),
        };
        Ok(Self { top: *top, keys })
    }

    /// Compacts `order` (rows of the run in sorted order) so that its first rows are
    /// those within the top, in order; returns how many.
    pub(super) fn cut(&self, order: &mut [u32]) -> Result<usize> {
        let (top, len) = (&self.top, order.len());
        if len <= top.k {
            return Ok(len);
        }
        let sorted: Vec<ArrayRef> = match &self.keys {
            Some(keys) => keys.gather(order)?.columns().to_vec(),
            None => Vec::new(),
        };
        // Without `PARTITION BY`, one window partition of every row.
        let partitions = Runs::of_equal_rows(&sorted[..top.partition_keys], len)?;
        let peers = match top.ranking {
            TopRanking::RowNumber => None,
            _ => Some(Runs::of_equal_rows(&sorted, len)?),
        };
        // Compacted in place: every kept range lies at or after where it is written.
        let mut written = 0;
        let mut group = 0;
        for p in 0..partitions.len() {
            let (start, end) = (partitions.start(p), partitions.end(p));
            let kept_end = match &peers {
                None => end.min(start + top.k),
                Some(peers) => {
                    while peers.end(group) <= start {
                        group += 1;
                    }
                    let first = group;
                    // Peer groups that start within the partition's first k rows (rank),
                    // or the first k peer groups (dense rank).
                    while group < peers.len() && peers.start(group) < end {
                        let within = match top.ranking {
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
            order.copy_within(start..kept_end, written);
            written += kept_end - start;
        }
        Ok(written)
    }
}

/// The first `keys` sort keys of the run's rows, as rows to gather in sorted order.
fn key_rows(rows: &RunRows, exprs: &LexOrdering, keys: usize) -> Result<RunRows> {
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
    Ok(RunRows::new(batches))
}
