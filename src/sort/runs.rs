//! Runs of equal rows in sorted data: where window partitions and peer groups begin
//! (`window/layout.rs`), and which rows are a window partition's first (`exec/
//! partition_top.rs`).
//!
//! Runs are found in parallel, a chunk of rows per task: row `i` starts a run when it is
//! distinct from row `i - 1` on any of the columns (arrow's `distinct`, the comparison
//! DataFusion's own window partitioning uses: nulls equal each other, floats compare by
//! their total order, so `-0.0` and `+0.0` are distinct and NaNs are equal).

use arrow::array::ArrayRef;
use arrow::buffer::BooleanBuffer;
use arrow::compute::kernels::cmp::distinct;
use datafusion::arrow;
use datafusion::common::Result;
use rayon::prelude::*;

/// Rows compared per task when runs are found.
const CHUNK_ROWS: usize = 1 << 18;

/// Consecutive runs that cover rows `0..rows`: run `k` is `starts[k]..starts[k + 1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Runs {
    /// Run starts in ascending order, then the number of rows (no runs: just `[0]`).
    starts: Vec<usize>,
}

impl Runs {
    /// One run of all `rows` (none when there are no rows).
    pub(crate) fn whole(rows: usize) -> Self {
        match rows {
            0 => Self { starts: vec![0] },
            _ => Self {
                starts: vec![0, rows],
            },
        }
    }

    /// Runs of rows equal on every one of `columns` (all of length `rows`).
    pub(crate) fn of_equal_rows(columns: &[ArrayRef], rows: usize) -> Result<Self> {
        if columns.is_empty() || rows == 0 {
            return Ok(Self::whole(rows));
        }
        let chunks: Vec<(usize, usize)> = (1..rows)
            .step_by(CHUNK_ROWS)
            .map(|lo| (lo, (lo + CHUNK_ROWS).min(rows)))
            .collect();
        let found: Vec<Vec<usize>> = chunks
            .into_par_iter()
            .map(|(lo, hi)| changed_rows(columns, lo, hi))
            .collect::<Result<_>>()?;
        let mut starts = Vec::with_capacity(2 + found.iter().map(Vec::len).sum::<usize>());
        starts.push(0);
        starts.extend(found.into_iter().flatten());
        starts.push(rows);
        Ok(Self { starts })
    }

    /// How many runs there are.
    pub(crate) fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// The first row of run `k`.
    pub(crate) fn start(&self, k: usize) -> usize {
        self.starts[k]
    }

    /// One past the last row of run `k`.
    pub(crate) fn end(&self, k: usize) -> usize {
        self.starts[k + 1]
    }

    /// Run starts in ascending order, then the number of rows.
    #[cfg(test)]
    pub(crate) fn starts(&self) -> &[usize] {
        &self.starts
    }

    /// The run that holds `row`.
    pub(crate) fn run_of(&self, row: usize) -> usize {
        self.starts.partition_point(|&start| start <= row) - 1
    }
}

/// Rows `i` in `lo..hi` (`lo ≥ 1`) distinct from row `i - 1` on some column.
fn changed_rows(columns: &[ArrayRef], lo: usize, hi: usize) -> Result<Vec<usize>> {
    let len = hi - lo;
    let mut changed: Option<BooleanBuffer> = None;
    for column in columns {
        let differs = distinct(&column.slice(lo, len), &column.slice(lo - 1, len))?;
        let bits = differs.values().clone();
        changed = Some(match changed {
            None => bits,
            Some(before) => &before | &bits,
        });
    }
    Ok(changed
        .map(|bits| bits.set_indices().map(|i| lo + i).collect())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use std::sync::Arc;

    #[test]
    fn runs_cross_chunks() {
        let long: ArrayRef = Arc::new(Int32Array::from_iter_values(
            (0..(3 * CHUNK_ROWS + 5) as i32).map(|i| i / 7),
        ));
        let runs = Runs::of_equal_rows(&[long], 3 * CHUNK_ROWS + 5).unwrap();
        assert_eq!(runs.len(), (3 * CHUNK_ROWS + 5).div_ceil(7));
        assert_eq!(runs.run_of(14), 2);
        assert_eq!(runs.start(2), 14);
        assert_eq!(runs.end(runs.len() - 1), 3 * CHUNK_ROWS + 5);
    }
}
