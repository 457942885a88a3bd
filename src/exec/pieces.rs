//! Sorting a run in pieces when the backend's device cannot hold it whole (its share of
//! `gpu_sort.device_memory_limit` is taken, or the device ran out of memory).
//!
//! ```text
//!  KeySort::Split { rows }  from the backend (run.rs: Ordered::Split)
//!    segments (a key prefix, or partitions sorted together) with more than one piece
//!    between them:  pieces of whole segments, each sorted on its own; their orders follow
//!                   one another (no merge)
//!    otherwise:     pieces of input order, each sorted into memory, merged by DataFusion's
//!                   streaming merge (ties by piece: stable)
//!    rows kept apart by partition ids (a hash-routed sort): pieces of input order, each
//!                   ordered on its own, their orders merged on the host by the keys in
//!                   arrow's row format (ties by piece: stable)
//!  a piece may split again; a piece of one segment that still does not fit, and every
//!  piece under MIN_DEVICE_PIECE_ROWS, is sorted on the CPU
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::compute::concat;
use arrow::row::{RowConverter, SortField};
use datafusion::arrow;
use datafusion::common::Result;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;

use super::run::{split_runs, Apart, Ordered, RunOrder, RunSorter};
use super::spill::{merge_runs, unpooled};
use crate::gather::RunRows;
use crate::keys::{slice_column, slice_parts, KeyColumn};
use crate::sort::{Permutation, Segments};

impl RunSorter<'_> {
    /// Sorts the rows of `batches` (one run) in pieces of at most `piece_rows` rows, handing
    /// the output batches in order to `emit`; `false` when `emit` asked to stop.
    pub(super) fn sort_in_pieces(
        &self,
        batches: Vec<RecordBatch>,
        piece_rows: usize,
        segments: Option<Segments>,
        emit: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> Result<bool> {
        let between = segments
            .as_ref()
            .map(|segments| pieces_between(segments, piece_rows))
            .filter(|pieces| pieces.len() > 1);
        match between {
            Some(pieces) => self.sort_consecutive(&batches, pieces, emit),
            None => self.sort_and_merge(batches, piece_rows, emit),
        }
    }

    /// Sorts each piece of whole segments on its own; the output of one follows the one
    /// before it. A LIMIT counts over all of them.
    fn sort_consecutive(
        &self,
        batches: &[RecordBatch],
        pieces: Vec<Range<usize>>,
        emit: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> Result<bool> {
        let mut left = self.spec.fetch;
        for piece in pieces {
            let mut within_fetch = |batch: RecordBatch| match &mut left {
                None => emit(batch),
                Some(left) => {
                    let take = batch.num_rows().min(*left);
                    *left -= take;
                    let batch = match take < batch.num_rows() {
                        true => batch.slice(0, take),
                        false => batch,
                    };
                    emit(batch) && *left > 0
                }
            };
            // Stopped: the consumer went away, or the LIMIT is reached.
            if !self.sort_run_or_stop(slice_rows(batches, piece), &mut within_fetch)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Sorts pieces of input order into memory and merges them (the merge breaks ties by
    /// piece, so the sort stays stable).
    fn sort_and_merge(
        &self,
        batches: Vec<RecordBatch>,
        piece_rows: usize,
        emit: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> Result<bool> {
        let Some(schema) = batches.first().map(RecordBatch::schema) else {
            return Ok(true);
        };
        let mut sorted = Vec::new();
        for piece in split_runs(batches, piece_rows) {
            let mut out = Vec::new();
            self.sort_run_or_stop(piece, &mut |batch| {
                out.push(batch);
                true
            })?;
            let stream = MemoryStream::try_new(out, Arc::clone(&schema), None)?;
            sorted.push(Box::pin(stream) as SendableRecordBatchStream);
        }
        // The pieces' batches are the run's sorted copy, accounted with the run's input.
        let reservation = unpooled("GpuSortExec merge of a run's pieces (accounted with the run)");
        let spec = self.spec;
        let mut merged = merge_runs(sorted, schema, spec, spec.run_batch_rows, reservation)?;
        futures::executor::block_on(async {
            while let Some(batch) = merged.next().await {
                if !emit(batch?) {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    /// Orders the rows of `rows` (partitions kept apart at `partitions`) in pieces of whole
    /// `segments` of at most `piece_rows` rows (one larger segment is a piece of its own),
    /// their orders one after another. The order keeps no device state.
    pub(super) fn order_in_pieces(
        &self,
        rows: &RunRows,
        partitions: &Segments,
        segments: &Segments,
        piece_rows: usize,
    ) -> Result<RunOrder> {
        let pieces = pieces_between(segments, piece_rows);
        if pieces.len() <= 1 {
            let columns = self.evaluate_keys(rows)?;
            return self.order_whole(rows, columns, Apart::Segments(partitions));
        }
        let mut permutation = Vec::with_capacity(rows.rows());
        for piece in pieces {
            let piece_rows =
                RunRows::new(slice_rows(rows.batches(), piece.clone())).with_views(rows.views());
            let within = segments_within(partitions, piece.clone());
            let order = self.order_rows(&piece_rows, Apart::Segments(&within))?;
            let offset = piece.start as u32;
            permutation.extend(order.permutation.iter().map(|&row| row + offset));
        }
        Ok(RunOrder {
            permutation: Permutation::new(permutation),
            state: None,
        })
    }
}

impl RunSorter<'_> {
    /// Orders the rows of `rows` (keys evaluated: `columns`) by (partition id of `ids`,
    /// keys); a run the backend's device cannot hold is ordered in pieces of input order
    /// whose orders are merged.
    pub(super) fn order_by_ids(
        &self,
        rows: &RunRows,
        columns: Vec<KeyColumn>,
        ids: KeyColumn,
    ) -> Result<RunOrder> {
        let apart = Apart::ByKey(ids.clone());
        let piece_rows = match self.order_evaluated(rows, columns.clone(), apart, true)? {
            Ordered::Done(order) => return Ok(order),
            Ordered::Split { rows, .. } => rows,
        };
        self.metrics.device_splits.add(1);
        let n = rows.rows();
        let mut orders = Vec::new();
        for start in (0..n).step_by(piece_rows.max(1)) {
            let piece = start..(start + piece_rows).min(n);
            let piece_rows =
                RunRows::new(slice_rows(rows.batches(), piece.clone())).with_views(rows.views());
            let piece_columns = columns
                .iter()
                .map(|c| slice_column(c, piece.clone()))
                .collect();
            let piece_ids = slice_column(&ids, piece.clone());
            let order = self.order_by_ids(&piece_rows, piece_columns, piece_ids)?;
            orders.push((start, order.permutation));
        }
        let mut keys = vec![ids];
        keys.extend(columns);
        Ok(RunOrder {
            permutation: Permutation::new(merge_orders(&keys, orders)?),
            state: None,
        })
    }
}

/// Merges the orders of consecutive pieces of a run (`(first row, order within the
/// piece)`) into the order of the run, comparing `keys` in arrow's row format; ties go to
/// the earlier piece.
fn merge_orders(keys: &[KeyColumn], orders: Vec<(usize, Permutation)>) -> Result<Vec<u32>> {
    let fields = keys
        .iter()
        .map(|k| SortField::new_with_options(k.arrays[0].data_type().clone(), k.options))
        .collect();
    let converter = RowConverter::new(fields)?;
    let columns = keys
        .iter()
        .map(|k| concat(&k.arrays.iter().map(|a| a.as_ref()).collect::<Vec<_>>()))
        .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
    let rows = converter.convert_columns(&columns)?;
    let total = orders.iter().map(|(_, order)| order.len()).sum();
    let mut merged = Vec::with_capacity(total);
    let row_of = |piece: usize, at: usize| orders[piece].0 + orders[piece].1[at] as usize;
    let mut heads = BinaryHeap::with_capacity(orders.len());
    for (piece, (_, order)) in orders.iter().enumerate() {
        if !order.is_empty() {
            heads.push(Reverse((rows.row(row_of(piece, 0)), piece, 0)));
        }
    }
    while let Some(Reverse((_, piece, at))) = heads.pop() {
        merged.push(row_of(piece, at) as u32);
        if at + 1 < orders[piece].1.len() {
            heads.push(Reverse((rows.row(row_of(piece, at + 1)), piece, at + 1)));
        }
    }
    Ok(merged)
}

/// Consecutive pieces of whole segments, each at most `max_rows` rows unless one segment
/// alone is longer.
fn pieces_between(segments: &Segments, max_rows: usize) -> Vec<Range<usize>> {
    let mut pieces: Vec<Range<usize>> = Vec::new();
    for segment in segments.ranges() {
        match pieces.last_mut() {
            Some(piece) if segment.end - piece.start <= max_rows => piece.end = segment.end,
            _ => pieces.push(segment),
        }
    }
    pieces
}

/// The rows `range` of `batches` (rows counted across them), as slices.
fn slice_rows(batches: &[RecordBatch], range: Range<usize>) -> Vec<RecordBatch> {
    slice_parts(batches, range, RecordBatch::num_rows, RecordBatch::slice)
}

/// The segments of `segments` that lie within `range` (a range starting at a segment
/// start), counted from its start.
fn segments_within(segments: &Segments, range: Range<usize>) -> Segments {
    let starts = segments
        .starts()
        .iter()
        .map(|&s| s as usize)
        .filter(|s| range.contains(s))
        .map(|s| (s - range.start) as u32);
    let starts = std::iter::once(0)
        .chain(starts.skip_while(|&s| s == 0))
        .collect();
    Segments::new(starts, range.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(values: Range<i32>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        let column = Arc::new(Int32Array::from_iter_values(values));
        RecordBatch::try_new(schema, vec![column]).unwrap()
    }

    fn values(batches: &[RecordBatch]) -> Vec<i32> {
        batches
            .iter()
            .flat_map(|b| {
                let column = b.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
                column.values().to_vec()
            })
            .collect()
    }

    #[test]
    fn pieces_hold_whole_segments_up_to_the_limit() {
        let segments = Segments::new(vec![0, 3, 5, 12, 13], 20);
        assert_eq!(
            pieces_between(&segments, 6),
            vec![0..5, 5..12, 12..13, 13..20]
        );
        assert_eq!(pieces_between(&segments, 8), vec![0..5, 5..13, 13..20]);
        assert_eq!(pieces_between(&segments, 20), vec![0..20]);
        assert_eq!(
            pieces_between(&segments, 1),
            vec![0..3, 3..5, 5..12, 12..13, 13..20]
        );
    }

    #[test]
    fn slices_cross_batch_boundaries() {
        let batches = vec![batch(0..4), batch(4..10), batch(10..12)];
        assert_eq!(
            values(&slice_rows(&batches, 2..11)),
            (2..11).collect::<Vec<_>>()
        );
        assert_eq!(slice_rows(&batches, 4..10).len(), 1);
        assert!(slice_rows(&batches, 12..12).is_empty());
    }

    #[test]
    fn merged_orders_follow_the_keys_and_keep_ties_in_piece_order() {
        use arrow::compute::SortOptions;
        // Two pieces of rows 0..4 and 4..7, each in its own sorted order.
        let key = KeyColumn {
            arrays: vec![
                Arc::new(Int32Array::from(vec![5, 1, 3, 1])),
                Arc::new(Int32Array::from(vec![3, 0, 1])),
            ],
            options: SortOptions::default(),
        };
        let orders = vec![
            (0, Permutation::new(vec![1, 3, 2, 0])),
            (4, Permutation::new(vec![1, 2, 0])),
        ];
        assert_eq!(
            merge_orders(&[key], orders).unwrap(),
            vec![5, 1, 3, 6, 2, 4, 0]
        );
    }

    #[test]
    fn segments_of_a_piece_start_at_its_first_row() {
        let partitions = Segments::new(vec![0, 4, 9], 15);
        assert_eq!(segments_within(&partitions, 4..15).starts(), &[0, 5]);
        // A piece starting inside a partition (at a segment of the key prefix).
        assert_eq!(segments_within(&partitions, 6..9).starts(), &[0]);
    }
}
