//! One step of the coordinator's parallel merge: which of the queued rows can leave now,
//! and merging those on all cores.
//!
//! Every input is a sorted stream; its queue holds the batches received and not yet merged,
//! each with its sort keys as arrow `Rows` (byte strings that compare as the keys do).
//! Rows leave in the order (key, input, position): ties in input order, so a merge of
//! stably sorted partitions is stable.
//!
//! **What can leave** ([`ready_counts`]). A later row of an unfinished input is at least the
//! last row queued for it. Let F be the least of those last rows. Every queued row below F
//! can leave. A row equal to F can leave when no unfinished input before its own ends at
//! F (such an input may still send rows equal to F, which come first). The first input
//! ending at F always empties its queue, so every step makes progress.
//!
//! **Merging them** ([`merge_ready`]). Keys sampled from the ready rows cut them into parts
//! by key (all rows of one key in one part); each part is a k-way merge of its inputs'
//! slices, run on its own rayon thread, and its rows are gathered into batches with arrow's
//! `interleave`. Parts come out in key order.
//!
//! ```text
//!   input 0: ▓▓▓▓▓▓▓▓▓▓▓│▒▒▒        ▓ ready (below F, or at F where allowed)
//!   input 1: ▓▓▓▓▓▓▓│▒▒▒▒▒ ← F      ▒ waits for more of the input that ends at F
//!   input 2: ▓▓▓▓▓▓▓▓▓▓▓▓▓▓│▒
//!            └ part 0 ┘└ part 1 ┘   parts cut by sampled keys, merged in parallel
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::interleave_record_batch;
use datafusion::arrow::row::Rows;
use datafusion::common::Result;
use rayon::prelude::*;

/// Rows of ready data below which a part is not worth a thread of its own.
const MIN_PART_ROWS: usize = 32 * 1024;

/// Keys sampled per part to choose where parts begin.
const SAMPLES_PER_PART: usize = 16;

/// A received batch, its sort keys as rows, and how many of its rows were merged.
pub(crate) struct Queued {
    pub batch: RecordBatch,
    pub rows: Rows,
    pub start: usize,
}

impl Queued {
    fn remaining(&self) -> usize {
        self.batch.num_rows() - self.start
    }

    fn key(&self, row: usize) -> &[u8] {
        self.rows.row(row).data()
    }

    fn last_key(&self) -> &[u8] {
        self.key(self.batch.num_rows() - 1)
    }

    /// Rows from `start` on below `key` (or also equal to it when `inclusive`).
    fn count_before(&self, key: &[u8], inclusive: bool) -> usize {
        self.bound(self.start, self.batch.num_rows(), key, inclusive) - self.start
    }

    /// The first row of the ascending rows `lo..hi` not below `key` (nor equal to it when
    /// `inclusive`); `hi` when there is none.
    fn bound(&self, mut lo: usize, mut hi: usize, key: &[u8], inclusive: bool) -> usize {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let before = match inclusive {
                true => self.key(mid) <= key,
                false => self.key(mid) < key,
            };
            if before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// One input of the merge: its queued batches (none empty, none fully merged) and whether
/// its stream has ended.
#[derive(Default)]
pub(crate) struct InputQueue {
    pub queued: VecDeque<Queued>,
    pub finished: bool,
}

impl InputQueue {
    /// Queues a received batch (empty ones are dropped); the bytes it holds.
    pub fn push(&mut self, batch: RecordBatch, rows: Rows) -> usize {
        if batch.num_rows() == 0 {
            return 0;
        }
        let queued = Queued {
            batch,
            rows,
            start: 0,
        };
        let bytes = queued_bytes(&queued);
        self.queued.push_back(queued);
        bytes
    }

    /// Whether the merge must wait for this input before it can go on.
    pub fn needs_data(&self) -> bool {
        !self.finished && self.queued.is_empty()
    }

    pub fn is_done(&self) -> bool {
        self.finished && self.queued.is_empty()
    }

    fn pending(&self) -> usize {
        self.queued.iter().map(Queued::remaining).sum()
    }

    fn last_key(&self) -> Option<&[u8]> {
        self.queued.back().map(Queued::last_key)
    }

    /// Queued rows below `key` (or also equal to it when `inclusive`).
    fn count_before(&self, key: &[u8], inclusive: bool) -> usize {
        let mut count = 0;
        for queued in &self.queued {
            let n = queued.count_before(key, inclusive);
            count += n;
            if n < queued.remaining() {
                break;
            }
        }
        count
    }

    /// Marks the first `count` queued rows merged; the bytes of the batches let go.
    pub fn consume(&mut self, mut count: usize) -> usize {
        let mut freed = 0;
        while count > 0 {
            let front = self.queued.front_mut().expect("count within the queue");
            let take = count.min(front.remaining());
            front.start += take;
            count -= take;
            if front.remaining() == 0 {
                let done = self.queued.pop_front().expect("a front");
                freed += queued_bytes(&done);
            }
        }
        freed
    }
}

/// The bytes a queued batch holds: its arrays and its key rows.
fn queued_bytes(queued: &Queued) -> usize {
    queued.batch.get_array_memory_size() + queued.rows.size()
}

/// How many queued rows of each input can be merged now (module docs). Every unfinished
/// input must have rows queued.
pub(crate) fn ready_counts(inputs: &[InputQueue]) -> Vec<usize> {
    debug_assert!(inputs.iter().all(|i| !i.needs_data()));
    let frontier = inputs
        .iter()
        .filter(|i| !i.finished)
        .filter_map(InputQueue::last_key)
        .min()
        .map(<[u8]>::to_vec);
    let Some(frontier) = frontier else {
        return inputs.iter().map(InputQueue::pending).collect();
    };
    let mut blocked = false;
    inputs
        .iter()
        .map(|input| {
            let count = input.count_before(&frontier, !blocked);
            if !input.finished && input.last_key() == Some(frontier.as_slice()) {
                blocked = true;
            }
            count
        })
        .collect()
}

/// A run of rows of one queued batch: (batch slot, first row, end row).
type Slice = (usize, usize, usize);

/// Merges the first `counts[i]` queued rows of every input `i` into batches of at most
/// `batch_size` rows, in key order with ties in input order, on up to `threads` threads.
/// The queues are not changed: [`InputQueue::consume`] the counts afterwards.
pub(crate) fn merge_ready(
    inputs: &[InputQueue],
    counts: &[usize],
    batch_size: usize,
    threads: usize,
) -> Result<Vec<RecordBatch>> {
    // Every queued batch the ready rows touch gets a slot; each input's ready rows are a
    // list of slices of those slots.
    let mut slots: Vec<&Queued> = Vec::new();
    let mut ready: Vec<Vec<Slice>> = Vec::with_capacity(inputs.len());
    for (input, &count) in inputs.iter().zip(counts) {
        let mut slices = Vec::new();
        let mut left = count;
        for queued in &input.queued {
            if left == 0 {
                break;
            }
            let take = left.min(queued.remaining());
            slices.push((slots.len(), queued.start, queued.start + take));
            slots.push(queued);
            left -= take;
        }
        ready.push(slices);
    }
    let total: usize = counts.iter().sum();
    if total == 0 {
        return Ok(Vec::new());
    }
    let parts = (total / MIN_PART_ROWS).clamp(1, threads.max(1));
    let splitters = splitters(&slots, &ready, total, parts);
    // Each input's ready slices cut at every splitter: part p gets cuts[p]..cuts[p + 1].
    let cuts: Vec<Vec<Vec<Slice>>> = ready
        .iter()
        .map(|slices| split_slices(&slots, slices, &splitters))
        .collect();
    let batches: Vec<&RecordBatch> = slots.iter().map(|q| &q.batch).collect();
    let merged: Vec<Vec<RecordBatch>> = (0..splitters.len() + 1)
        .into_par_iter()
        .map(|part| {
            let slices: Vec<&[Slice]> = cuts.iter().map(|c| c[part].as_slice()).collect();
            let order = merge_part(&slots, &slices);
            order
                .chunks(batch_size.max(1))
                .map(|indices| Ok(interleave_record_batch(&batches, indices)?))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<_>>()?;
    Ok(merged.into_iter().flatten().collect())
}

/// Up to `parts - 1` distinct keys, ascending, sampled evenly from the ready rows.
fn splitters(slots: &[&Queued], ready: &[Vec<Slice>], total: usize, parts: usize) -> Vec<Vec<u8>> {
    if parts <= 1 {
        return Vec::new();
    }
    let step = (total / (parts * SAMPLES_PER_PART)).max(1);
    let mut samples: Vec<&[u8]> = Vec::new();
    for slices in ready {
        for &(slot, start, end) in slices {
            samples.extend((start..end).step_by(step).map(|row| slots[slot].key(row)));
        }
    }
    samples.sort_unstable();
    let mut chosen: Vec<Vec<u8>> = (1..parts)
        .map(|p| samples[p * samples.len() / parts].to_vec())
        .collect();
    chosen.dedup();
    chosen
}

/// `slices` (ascending rows of one input) cut into `splitters.len() + 1` parts: part p holds
/// the rows at or above splitter p - 1 and below splitter p.
fn split_slices(slots: &[&Queued], slices: &[Slice], splitters: &[Vec<u8>]) -> Vec<Vec<Slice>> {
    let mut parts: Vec<Vec<Slice>> = vec![Vec::new(); splitters.len() + 1];
    let mut part = 0;
    for &(slot, start, end) in slices {
        let queued = slots[slot];
        let mut row = start;
        while row < end {
            // Where this slice's rows pass the current part's upper splitter.
            let upper = match splitters.get(part) {
                None => end,
                Some(splitter) => queued.bound(row, end, splitter, false),
            };
            if upper > row {
                parts[part].push((slot, row, upper));
                row = upper;
            }
            if row < end {
                part += 1;
            }
        }
    }
    parts
}

/// The k-way merge of one part: (slot, row) of each row in order, ties by input.
fn merge_part(slots: &[&Queued], inputs: &[&[Slice]]) -> Vec<(usize, usize)> {
    let size: usize = inputs
        .iter()
        .flat_map(|s| s.iter())
        .map(|(_, start, end)| end - start)
        .sum();
    let mut order = Vec::with_capacity(size);
    let live: Vec<usize> = (0..inputs.len())
        .filter(|&i| !inputs[i].is_empty())
        .collect();
    if let [only] = live.as_slice() {
        for &(slot, start, end) in inputs[*only] {
            order.extend((start..end).map(|row| (slot, row)));
        }
        return order;
    }
    // Per input: (slice index, row) of its next row.
    let mut next: Vec<(usize, usize)> = inputs
        .iter()
        .map(|s| (0, s.first().map_or(0, |slice| slice.1)))
        .collect();
    let key_of = |input: usize, at: (usize, usize)| -> &[u8] {
        let (slot, _, _) = inputs[input][at.0];
        slots[slot].key(at.1)
    };
    let mut heap: BinaryHeap<Reverse<(&[u8], usize)>> = live
        .iter()
        .map(|&i| Reverse((key_of(i, next[i]), i)))
        .collect();
    while let Some(Reverse((_, input))) = heap.pop() {
        let (slice, row) = next[input];
        let (slot, _, end) = inputs[input][slice];
        order.push((slot, row));
        let advanced = match row + 1 < end {
            true => Some((slice, row + 1)),
            false => inputs[input].get(slice + 1).map(|s| (slice + 1, s.1)),
        };
        if let Some(at) = advanced {
            next[input] = at;
            heap.push(Reverse((key_of(input, at), input)));
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::row::{RowConverter, SortField};
    use std::sync::Arc;

    /// A queue of batches of (key, tag) rows, keys ascending.
    fn queue(batches: &[&[(i64, i64)]], finished: bool) -> InputQueue {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("tag", DataType::Int64, false),
        ]));
        let converter = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let mut input = InputQueue {
            finished,
            ..Default::default()
        };
        for rows in batches {
            let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)));
            let tags: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1)));
            let batch =
                RecordBatch::try_new(Arc::clone(&schema), vec![Arc::clone(&keys), tags]).unwrap();
            let rows = converter.convert_columns(&[keys]).unwrap();
            input.push(batch, rows);
        }
        input
    }

    fn tags(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let tags = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
                tags.values().to_vec()
            })
            .collect()
    }

    #[test]
    fn rows_below_the_least_last_row_are_ready() {
        let inputs = [
            queue(&[&[(1, 0), (5, 1), (9, 2)]], false),
            queue(&[&[(2, 3), (4, 4)], &[(6, 5)]], false),
        ];
        // F = 6 (input 1's last): input 0 may give 1 and 5; input 1 all of its rows.
        assert_eq!(ready_counts(&inputs), vec![2, 3]);
    }

    #[test]
    fn a_tie_at_the_frontier_waits_for_an_earlier_input_that_ends_there() {
        let inputs = [
            queue(&[&[(1, 0), (3, 1)]], false),
            queue(&[&[(3, 2), (3, 3)]], false),
            queue(&[&[(2, 4), (3, 5), (8, 6)]], false),
        ];
        // F = 3; input 0 ends at 3 and may send more 3s, which come before inputs 1 and 2's.
        assert_eq!(ready_counts(&inputs), vec![2, 0, 1]);
    }

    #[test]
    fn finished_inputs_do_not_hold_the_frontier_back() {
        let inputs = [
            queue(&[&[(1, 0), (2, 1)]], true),
            queue(&[&[(7, 2)]], false),
            queue(&[], true),
        ];
        assert_eq!(ready_counts(&inputs), vec![2, 1, 0]);
        let all_done = [queue(&[&[(5, 0)]], true), queue(&[&[(1, 1)]], true)];
        assert_eq!(ready_counts(&all_done), vec![1, 1]);
    }

    #[test]
    fn parts_merge_in_key_order_with_ties_in_input_order() {
        // Many ties across inputs and batches, enough rows for several parts.
        let mut per_input: Vec<Vec<(i64, i64)>> = vec![Vec::new(); 3];
        let mut tag = 0;
        for (i, rows) in per_input.iter_mut().enumerate() {
            for r in 0..100_000i64 {
                rows.push(((r * (i as i64 + 1)) / 7, tag));
                tag += 1;
            }
        }
        let inputs: Vec<InputQueue> = per_input
            .iter()
            .map(|rows| {
                let batches: Vec<&[(i64, i64)]> = rows.chunks(8192).collect();
                queue(&batches, true)
            })
            .collect();
        let counts = ready_counts(&inputs);
        assert_eq!(counts, vec![100_000; 3]);
        let merged = merge_ready(&inputs, &counts, 4096, 8).unwrap();
        assert!(merged.iter().all(|b| b.num_rows() <= 4096));
        let mut expected: Vec<(i64, usize, i64)> = per_input
            .iter()
            .enumerate()
            .flat_map(|(i, rows)| rows.iter().map(move |&(k, t)| (k, i, t)))
            .collect();
        expected.sort();
        let expected: Vec<i64> = expected.into_iter().map(|e| e.2).collect();
        assert_eq!(tags(&merged), expected);
    }

    #[test]
    fn consumed_rows_leave_the_queue() {
        let mut input = queue(&[&[(1, 0), (2, 1)], &[(3, 2)]], false);
        let freed = input.consume(2);
        assert!(freed > 0, "the first batch is let go");
        assert_eq!(input.queued.len(), 1);
        assert_eq!(input.consume(0), 0);
        assert_eq!(input.pending(), 1);
    }
}
