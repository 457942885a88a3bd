//! Gather: a run's permutation → output `RecordBatch`es of `batch_size` rows.
//!
//! The run's rows live in the input batches as they arrived (never concatenated). Each
//! column gets a gatherer once per run (`columns`); output batch `j` locates rows
//! `permutation[j*batch_size ..]` (input batch, row) once and every column gathers from
//! those locations (`take` when the run is one batch). Batches are built in parallel, a
//! window of them at a time, and handed out in order as each window completes, so the
//! first rows leave while later ones are still being built.

mod bytes;
mod columns;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::SchemaRef;
use datafusion::arrow;
use datafusion::common::Result;
use rayon::prelude::*;

pub use columns::{column_gatherer, ColumnGather, RowAt};

/// The buffered rows of one run, addressed by row id (0 .. rows).
pub struct RunRows {
    batches: Vec<RecordBatch>,
    /// `starts[b]` is the row id of the first row of `batches[b]`.
    starts: Vec<usize>,
    /// Rows of every batch but the last, when they are all equal (locating is a division).
    uniform: Option<usize>,
    rows: usize,
    /// One gatherer per column (when the run has more than one batch).
    columns: Vec<Box<dyn ColumnGather>>,
}

impl std::fmt::Debug for RunRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRows")
            .field("batches", &self.batches.len())
            .field("rows", &self.rows)
            .finish()
    }
}

impl RunRows {
    /// Wraps `batches` (empty ones are dropped).
    pub fn new(batches: Vec<RecordBatch>) -> Self {
        let batches: Vec<RecordBatch> = batches.into_iter().filter(|b| b.num_rows() > 0).collect();
        let mut starts = Vec::with_capacity(batches.len());
        let mut rows = 0;
        for batch in &batches {
            starts.push(rows);
            rows += batch.num_rows();
        }
        let uniform = match batches.split_last() {
            Some((_, [])) | None => None,
            Some((_, init)) => {
                let size = init[0].num_rows();
                init.iter().all(|b| b.num_rows() == size).then_some(size)
            }
        };
        let columns = if batches.len() > 1 {
            (0..batches[0].num_columns())
                .map(|c| {
                    let arrays: Vec<ArrayRef> =
                        batches.iter().map(|b| b.column(c).clone()).collect();
                    column_gatherer(arrays)
                })
                .collect()
        } else {
            Vec::new()
        };
        Self {
            batches,
            starts,
            uniform,
            rows,
            columns,
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The buffered batches.
    pub fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }

    /// Builds one output batch holding rows `ids`, in that order.
    pub fn gather(&self, ids: &[u32]) -> Result<RecordBatch> {
        if let [batch] = self.batches.as_slice() {
            let indices = UInt32Array::from(ids.to_vec());
            return Ok(take_record_batch(batch, &indices)?);
        }
        let at: Vec<RowAt> = ids.iter().map(|&id| self.locate(id as usize)).collect();
        let columns = self
            .columns
            .iter()
            .map(|column| column.gather(&at))
            .collect::<Result<Vec<_>>>()?;
        let schema: SchemaRef = self.batches[0].schema();
        let options = RecordBatchOptions::new().with_row_count(Some(ids.len()));
        Ok(RecordBatch::try_new_with_options(
            schema, columns, &options,
        )?)
    }

    fn locate(&self, row: usize) -> RowAt {
        let batch = match self.uniform {
            Some(size) => (row / size).min(self.batches.len() - 1),
            None => self.starts.partition_point(|&start| start <= row) - 1,
        };
        RowAt {
            batch: batch as u32,
            row: (row - self.starts[batch]) as u32,
        }
    }
}

/// Gathers `permutation` in output batches of `batch_size` rows, in parallel, calling
/// `emit` with each in order. Stops early (returning `Ok`) when `emit` returns `false`.
pub fn gather_sorted(
    rows: &RunRows,
    permutation: &[u32],
    batch_size: usize,
    mut emit: impl FnMut(RecordBatch) -> bool,
) -> Result<()> {
    let batch_size = batch_size.max(1);
    let window = batch_size * rayon::current_num_threads().max(1);
    for window_ids in permutation.chunks(window) {
        let batches: Vec<Result<RecordBatch>> = window_ids
            .par_chunks(batch_size)
            .map(|ids| rows.gather(ids))
            .collect();
        for batch in batches {
            if !emit(batch?) {
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int32Array};
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};
    use std::sync::Arc;

    fn batch(values: Vec<i32>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(values))]).unwrap()
    }

    #[test]
    fn gathers_across_batches_in_order() {
        let rows = RunRows::new(vec![
            batch(vec![10, 11]),
            batch(vec![]),
            batch(vec![12, 13, 14]),
        ]);
        let mut out = Vec::new();
        gather_sorted(&rows, &[4, 0, 3, 1, 2], 2, |b| {
            out.extend(
                b.column(0)
                    .as_primitive::<Int32Type>()
                    .values()
                    .iter()
                    .copied(),
            );
            true
        })
        .unwrap();
        assert_eq!(out, vec![14, 10, 13, 11, 12]);
    }

    #[test]
    fn stops_when_emit_declines() {
        let rows = RunRows::new(vec![batch((0..100).collect())]);
        let perm: Vec<u32> = (0..100).collect();
        let mut emitted = 0;
        gather_sorted(&rows, &perm, 10, |_| {
            emitted += 1;
            false
        })
        .unwrap();
        assert_eq!(emitted, 1);
    }
}
