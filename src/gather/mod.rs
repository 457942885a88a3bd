//! Gather: a run's permutation → output `RecordBatch`es of `batch_size` rows.
//!
//! The run's rows live in the input batches as they arrived (never concatenated). Each
//! column gets a gatherer once per run (`columns`); output batch `j` locates rows
//! `permutation[j*batch_size ..]` (input batch, row) once and every column gathers from
//! those locations (`take` when the run is one batch). Batches are built in parallel, a
//! window of them at a time, and handed out in order as each window completes, so the
//! first rows leave while later ones are still being built. A batch ends sooner where the
//! values of a string or binary column with 32-bit offsets would overflow them
//! (`batches`).
//!
//! A backend may gather some columns itself ([`PayloadGather`]: the CUDA backend gathers
//! fixed-width columns on the device); the host then gathers only the others, and windows
//! are larger ([`DEVICE_WINDOW_ROWS`]) so that each device round trip moves megabytes.

mod batches;
mod bytes;
mod columns;
mod early;
mod hollow;
mod resident;
mod windows;

use std::sync::{Arc, OnceLock};

use arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::{concat, take};
use arrow::datatypes::SchemaRef;
use datafusion::arrow;
use datafusion::common::{DataFusionError, Result};
use rayon::prelude::*;

pub use bytes::Views;
pub use columns::{column_gatherer, ColumnGather, RowAt};
pub use early::EarlyColumns;
pub use hollow::{any_hollow, hollow_array, is_hollow};
pub use resident::{
    resident_part, ResidentColumns, ResidentPart, ResidentRequest, SharedOrder, RESIDENT_RUN_KEY,
};
pub use windows::{
    append_window_columns, ordered_of, FrameEnd, FrameRange, Ordered, RangeKey, WindowColumn,
    WindowKind, WindowRequest, DEVICE_WINDOWS_KEY,
};

/// Most output rows per window when a [`PayloadGather`] takes part (it may ask for fewer:
/// [`PayloadGather::window_rows`]).
pub const DEVICE_WINDOW_ROWS: usize = 1 << 22;
/// Output batches larger than this are gathered on the host in pieces of this many rows,
/// in parallel.
pub const PIECE_ROWS: usize = 1 << 16;

/// Gathers some columns of a run's output somewhere other than the host's gather (the
/// GPU), window by window.
pub trait PayloadGather: Send {
    /// Indices of the columns it gathers.
    fn columns(&self) -> &[usize];

    /// Those columns for output rows `start .. start + batch_rows.iter().sum()`, one array
    /// per output batch of `batch_rows` rows (all of the same size but the last):
    /// `[column][batch]`. `Ok(None)` when it could not (the reason is logged): the caller
    /// gathers these columns itself from then on.
    fn gather(&mut self, start: usize, batch_rows: &[usize]) -> Result<Option<Vec<Vec<ArrayRef>>>>;

    /// What it did so far.
    fn stats(&self) -> PayloadStats;

    /// Rows per window, at most `most`: fewer where a window of `most` rows would take
    /// more host memory than the gatherer keeps for reuse.
    fn window_rows(&self, most: usize) -> usize {
        most
    }

    /// Gathers only those of its columns that are in `keep` from now on (the others were
    /// needed where the run is only, for window columns).
    fn retain_columns(&mut self, _keep: &[usize]) {}

    /// Hands those of `columns` that it holds where the run is, and can keep there, to a
    /// [`ResidentColumns`] of their own (the run's `rows` in `permutation`'s order), and
    /// gathers them no more; `None` where it keeps none.
    fn split_resident(
        &mut self,
        _columns: &[usize],
        _rows: &Arc<RunRows>,
        _permutation: &SharedOrder,
    ) -> Option<Arc<dyn ResidentColumns>> {
        None
    }

    /// The window columns of `request` over every row of the run in sorted order (the
    /// rows it gathers), window partitions also starting at rows `starts` (the parts of
    /// a shared sort), computed where the run is; `Ok(None)` when it cannot (the window
    /// is then computed above, on the host).
    fn windows(
        &mut self,
        _request: &WindowRequest,
        _starts: &[usize],
    ) -> Result<Option<Vec<ArrayRef>>> {
        Ok(None)
    }
}

/// What a [`PayloadGather`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PayloadStats {
    /// Bytes moved host → device.
    pub h2d_bytes: usize,
    /// Bytes moved device → host.
    pub d2h_bytes: usize,
    /// Wall time of its uploads.
    pub upload: std::time::Duration,
    /// Wall time of its windows (gather and copies back).
    pub windows: std::time::Duration,
    /// The most device memory in use at once (every query's) while it held the device.
    pub device_peak_bytes: usize,
    /// Time spent waiting for the device.
    pub device_wait: std::time::Duration,
    /// Columns the backend had put on the device while the run's input was read
    /// (`early.rs`).
    pub early_columns: usize,
    /// Their bytes that crossed then (not in `h2d_bytes`).
    pub early_h2d_bytes: usize,
}

/// The buffered rows of one run, addressed by row id (0 .. rows).
pub struct RunRows {
    batches: Vec<RecordBatch>,
    /// `starts[b]` is the row id of the first row of `batches[b]`.
    starts: Vec<usize>,
    /// Rows of every batch but the last, when they are all equal (locating is a division).
    uniform: Option<usize>,
    rows: usize,
    /// One gatherer per column (when the run has more than one batch), prepared when the
    /// host first gathers that column: a device gather never needs it, and preparing one
    /// reads every input array once more (21 ms for Q1's three columns of 12 000 arrays).
    columns: Vec<OnceLock<Box<dyn ColumnGather>>>,
    /// How gathered view arrays hold their values.
    views: Views,
    /// A backend's copy of some of the run's columns, made while the input arrived.
    early: Option<Arc<dyn EarlyColumns>>,
    /// Per column, whether some of its arrays are stand-ins (`hollow.rs`), found once.
    hollow: OnceLock<Vec<bool>>,
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
                .map(|_| OnceLock::new())
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
            views: Views::Shared,
            early: None,
            hollow: OnceLock::new(),
        }
    }

    /// Whether column `c`'s values are held elsewhere only (some of its arrays are
    /// stand-ins: `hollow.rs`): the host cannot gather it.
    pub fn is_hollow_column(&self, c: usize) -> bool {
        if !hollow::any_made() {
            return false;
        }
        let hollow = self.hollow.get_or_init(|| {
            (0..self.num_columns())
                .map(|c| self.batches.iter().any(|b| is_hollow(b.column(c).as_ref())))
                .collect()
        });
        hollow.get(c).copied().unwrap_or(false)
    }

    /// The error of a host gather of column `c`, whose values are held elsewhere only.
    fn hollow_error(c: usize) -> DataFusionError {
        DataFusionError::Execution(format!(
            "gpusort: column {c} of the sort's input was held on the device only (its \
             memory limit), and the device could not gather it; nothing of the output is \
             wrong, the sort stopped. Rerun with a larger memory limit or with the key \
             ranges on (`--key-ranges on`)"
        ))
    }

    /// The same rows, with `early`: a backend's copy of some of their columns, made while
    /// they arrived (`early.rs`).
    pub fn with_early(mut self, early: Option<Arc<dyn EarlyColumns>>) -> Self {
        self.early = early;
        self
    }

    /// The backend's copy of some of the run's columns, made while the input arrived.
    pub fn early(&self) -> Option<&Arc<dyn EarlyColumns>> {
        self.early.as_ref()
    }

    /// How gathered view arrays hold their values.
    pub fn views(&self) -> Views {
        self.views
    }

    /// The same rows, gathered into view arrays that hold `views` values.
    pub fn with_views(mut self, views: Views) -> Self {
        self.views = views;
        self
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The buffered batches.
    pub fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }

    /// The row id of the first row of each buffered batch.
    pub fn batch_starts(&self) -> &[usize] {
        &self.starts
    }

    /// Number of columns.
    pub fn num_columns(&self) -> usize {
        self.batches.first().map_or(0, |b| b.num_columns())
    }

    /// The type of column `c`, when the run has rows.
    pub fn column_type(&self, c: usize) -> Option<&arrow::datatypes::DataType> {
        self.batches.first().map(|b| b.column(c).data_type())
    }

    /// Column `c`'s array of every buffered batch, in order.
    pub fn column_arrays(&self, c: usize) -> Vec<ArrayRef> {
        self.batches.iter().map(|b| b.column(c).clone()).collect()
    }

    /// Builds one output batch holding rows `ids`, in that order.
    pub fn gather(&self, ids: &[u32]) -> Result<RecordBatch> {
        self.gather_with(ids, vec![None; self.num_columns()])
    }

    /// [`RunRows::gather`], with the columns already gathered elsewhere given in `ready`
    /// (one entry per column). A batch of more than [`PIECE_ROWS`] rows (a sort handing a
    /// window whole partitions) has its other columns gathered in pieces on all cores and
    /// concatenated.
    pub fn gather_with(&self, ids: &[u32], ready: Vec<Option<ArrayRef>>) -> Result<RecordBatch> {
        let all: Vec<usize> = (0..ready.len()).collect();
        self.gather_projected(ids, ready, &all, self.batches[0].schema())
    }

    /// [`RunRows::gather_with`] for columns `keep` only, in that order: a batch of `schema`
    /// (theirs).
    fn gather_projected(
        &self,
        ids: &[u32],
        mut ready: Vec<Option<ArrayRef>>,
        keep: &[usize],
        schema: SchemaRef,
    ) -> Result<RecordBatch> {
        let missing: Vec<usize> = keep
            .iter()
            .copied()
            .filter(|&c| ready[c].is_none())
            .collect();
        let mut gathered = if missing.is_empty() {
            Vec::new()
        } else if ids.len() <= PIECE_ROWS {
            self.gather_columns(ids, &missing)?
        } else {
            let pieces = ids
                .par_chunks(PIECE_ROWS)
                .map(|piece| self.gather_columns(piece, &missing))
                .collect::<Result<Vec<_>>>()?;
            (0..missing.len())
                .map(|i| {
                    let parts: Vec<&dyn Array> = pieces.iter().map(|p| p[i].as_ref()).collect();
                    Ok(concat(&parts)?)
                })
                .collect::<Result<Vec<_>>>()?
        }
        .into_iter();
        let columns = keep
            .iter()
            .map(|&c| match ready[c].take() {
                Some(array) => array,
                None => gathered
                    .next()
                    .expect("one gathered array per missing column"),
            })
            .collect();
        let options = RecordBatchOptions::new().with_row_count(Some(ids.len()));
        Ok(RecordBatch::try_new_with_options(
            schema, columns, &options,
        )?)
    }

    /// Columns `columns` of rows `ids`, in that order.
    pub fn gather_columns(&self, ids: &[u32], columns: &[usize]) -> Result<Vec<ArrayRef>> {
        if let Some(&c) = columns.iter().find(|&&c| self.is_hollow_column(c)) {
            return Err(Self::hollow_error(c));
        }
        if let [batch] = self.batches.as_slice() {
            let indices = UInt32Array::from(ids.to_vec());
            return columns
                .iter()
                .map(|&c| Ok(take(batch.column(c), &indices, None)?))
                .collect();
        }
        let at: Vec<RowAt> = ids.iter().map(|&id| self.locate(id as usize)).collect();
        columns
            .iter()
            .map(|&c| {
                self.columns[c]
                    .get_or_init(|| column_gatherer(self.column_arrays(c), self.views))
                    .gather(&at)
            })
            .collect()
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

/// Gathers `permutation` in output batches of `batch_size` rows (fewer where a string or
/// binary column's values would overflow its 32-bit offsets), in parallel, calling `emit`
/// with each in order. Stops early (returning `Ok`) when `emit` returns `false`.
/// `payload`, when given, gathers its columns (see [`PayloadGather`]).
pub fn gather_sorted(
    rows: &RunRows,
    permutation: &[u32],
    batch_size: usize,
    payload: Option<&mut (dyn PayloadGather + '_)>,
    emit: impl FnMut(RecordBatch) -> bool,
) -> Result<()> {
    gather_sorted_columns(rows, permutation, batch_size, payload, None, emit)
}

/// [`gather_sorted`] of the columns `keep` only, in that order (`None`: every column);
/// the payload is told to gather no others.
pub fn gather_sorted_columns(
    rows: &RunRows,
    permutation: &[u32],
    batch_size: usize,
    mut payload: Option<&mut (dyn PayloadGather + '_)>,
    keep: Option<&[usize]>,
    emit: impl FnMut(RecordBatch) -> bool,
) -> Result<()> {
    if let (Some(payload), Some(keep)) = (payload.as_deref_mut(), keep) {
        payload.retain_columns(keep);
    }
    gather_in_windows(
        rows,
        permutation,
        batch_size,
        payload,
        keep,
        DEVICE_WINDOW_ROWS,
        batches::OFFSET_BYTES,
        emit,
    )
}

/// [`gather_sorted`] with windows of about `device_window` rows when `payload` is given.
///
/// The payload's next window is gathered on a thread of its own while this one builds and
/// emits the current window's batches (on the device that is its copy back, ~2 ms per
/// window of Q1, overlapping the hand-over of 512 batches to the consumer):
///
/// ```text
///  payload:  gather 0 │ gather 1          │ gather 2          │ ...
///  here:              │ build + emit 0    │ build + emit 1    │ ...
/// ```
#[allow(clippy::too_many_arguments)]
fn gather_in_windows<'p, 'g: 'p>(
    rows: &RunRows,
    permutation: &[u32],
    batch_size: usize,
    payload: Option<&'p mut (dyn PayloadGather + 'g)>,
    keep: Option<&[usize]>,
    device_window: usize,
    offset_bytes: usize,
    mut emit: impl FnMut(RecordBatch) -> bool,
) -> Result<()> {
    if rows.rows() == 0 {
        return Ok(());
    }
    let all: Vec<usize> = (0..rows.num_columns()).collect();
    let keep = keep.unwrap_or(&all);
    let schema = Arc::new(rows.batches[0].schema().project(keep)?);
    let batch_size = batch_size.max(1);
    let window_rows = match payload.as_deref() {
        Some(payload) => payload.window_rows(device_window).max(batch_size),
        None => batch_size * rayon::current_num_threads().max(1),
    };
    let lengths = batches::batch_lengths(rows, permutation, batch_size, offset_bytes);
    // A payload gather lays out batches of `batch_size` rows (the run's last one fewer);
    // batches cut short by their strings' bytes are gathered on the host alone.
    let uniform = lengths
        .split_last()
        .is_none_or(|(_, init)| init.iter().all(|&len| len == batch_size));
    let payload = payload.filter(|_| uniform);
    let windows = windows_of(&lengths, window_rows, batch_size);
    std::thread::scope(|scope| {
        let gather_window = |gatherer: &'p mut (dyn PayloadGather + 'g), w: usize| {
            let Window { start, batch_rows } = windows[w];
            scope.spawn(move || {
                let gathered = gatherer.gather(start, batch_rows);
                (gatherer, gathered)
            })
        };
        let mut pending = payload
            .filter(|_| !windows.is_empty())
            .map(|gatherer| gather_window(gatherer, 0));
        for (w, window) in windows.iter().enumerate() {
            let mut ready: Vec<Vec<Option<ArrayRef>>> =
                vec![vec![None; rows.num_columns()]; window.batch_rows.len()];
            if let Some(handle) = pending.take() {
                let (gatherer, gathered) = handle.join().map_err(|_| {
                    DataFusionError::Internal("gpusort: a payload gather panicked".to_string())
                })?;
                crate::trace::event(|| format!("  window {w}: payload gathered"));
                // A declined window hands the rest of the run to the host.
                if let Some(columns) = gathered? {
                    for (&c, arrays) in gatherer.columns().iter().zip(columns) {
                        for (batch, array) in ready.iter_mut().zip(arrays) {
                            batch[c] = Some(array);
                        }
                    }
                    if w + 1 < windows.len() {
                        pending = Some(gather_window(gatherer, w + 1));
                    }
                }
            }
            let mut ids: Vec<&[u32]> = Vec::with_capacity(window.batch_rows.len());
            let mut at = window.start;
            for &len in window.batch_rows {
                ids.push(&permutation[at..at + len]);
                at += len;
            }
            let batches: Vec<Result<RecordBatch>> = ids
                .into_par_iter()
                .zip(ready)
                .map(|(ids, ready)| rows.gather_projected(ids, ready, keep, Arc::clone(&schema)))
                .collect();
            crate::trace::event(|| format!("  window {w}: batches built"));
            let emitting = std::time::Instant::now();
            for batch in batches {
                if !emit(batch?) {
                    // The scope waits for the window gathered ahead.
                    return Ok(());
                }
            }
            crate::trace::event(|| {
                format!(
                    "  window {w}: emitted in {:.1} ms",
                    emitting.elapsed().as_secs_f64() * 1e3
                )
            });
        }
        Ok(())
    })
}

/// Consecutive output batches gathered together.
#[derive(Clone, Copy)]
struct Window<'a> {
    /// The first output row.
    start: usize,
    /// Rows of each of its batches.
    batch_rows: &'a [usize],
}

/// Output batches of `lengths` rows (of at most `batch_size` rows) grouped into windows of
/// at most `window_rows` rows and `window_rows / batch_size` batches (at least one).
fn windows_of(lengths: &[usize], window_rows: usize, batch_size: usize) -> Vec<Window<'_>> {
    let most_batches = (window_rows / batch_size.max(1)).max(1);
    let mut windows = Vec::new();
    let (mut first, mut start, mut rows) = (0, 0, 0);
    for (i, &len) in lengths.iter().enumerate() {
        if rows > 0 && (rows + len > window_rows || i - first == most_batches) {
            windows.push(Window {
                start,
                batch_rows: &lengths[first..i],
            });
            (first, start, rows) = (i, start + rows, 0);
        }
        rows += len;
    }
    if rows > 0 {
        windows.push(Window {
            start,
            batch_rows: &lengths[first..],
        });
    }
    windows
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
    fn the_host_never_gathers_a_column_whose_values_are_held_elsewhere() {
        // Two batches of two columns; the second batch's column `b` is a stand-in.
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("b", DataType::Int32, false),
        ]));
        let make = |a: Vec<i32>, b: ArrayRef| {
            RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(Int32Array::from(a)), b])
                .unwrap()
        };
        let real: ArrayRef = Arc::new(Int32Array::from(vec![7, 8]));
        let hollow = hollow_array(&(Arc::new(Int32Array::from(vec![9, 10])) as ArrayRef), 4)
            .expect("a stand-in");
        let rows = RunRows::new(vec![make(vec![1, 2], real), make(vec![3, 4], hollow)]);
        assert!(!rows.is_hollow_column(0));
        assert!(rows.is_hollow_column(1));
        // Column `a` gathers; `b` fails, also for rows of its real batch only, and so
        // does a whole-batch gather.
        let a = rows.gather_columns(&[3, 0], &[0]).unwrap();
        assert_eq!(a[0].as_primitive::<Int32Type>().values(), &[4, 1]);
        let error = rows.gather_columns(&[0, 1], &[1]).unwrap_err().to_string();
        assert!(error.contains("held on the device only"), "{error}");
        assert!(rows.gather(&[2]).is_err());
    }

    #[test]
    fn gathers_across_batches_in_order() {
        let rows = RunRows::new(vec![
            batch(vec![10, 11]),
            batch(vec![]),
            batch(vec![12, 13, 14]),
        ]);
        let mut out = Vec::new();
        gather_sorted(&rows, &[4, 0, 3, 1, 2], 2, None, |b| {
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

    /// Batches of (Int32 `a`, Utf8 `s`) whose rows are numbered from `first`.
    fn two_column_batch(first: i32, rows: i32) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let values: Vec<i32> = (first..first + rows).collect();
        let text: Vec<String> = values.iter().map(|v| format!("row {v}")).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(values)),
                Arc::new(arrow::array::StringArray::from(text)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn batches_larger_than_a_piece_gather_in_pieces() {
        let rows_in = 3 * PIECE_ROWS as i32 + 17;
        let multi = RunRows::new(vec![
            two_column_batch(0, 1000),
            two_column_batch(1000, rows_in - 1000),
        ]);
        let single = RunRows::new(vec![two_column_batch(0, rows_in)]);
        let ids: Vec<u32> = (0..rows_in as u32)
            .map(|i| (i * 7919) % rows_in as u32)
            .collect();
        let expected_a: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        for rows in [&multi, &single] {
            let all = rows.gather_with(&ids, vec![None, None]).unwrap();
            let ready: ArrayRef = Arc::new(Int32Array::from(expected_a.clone()));
            let one_ready = rows.gather_with(&ids, vec![Some(ready), None]).unwrap();
            for batch in [all, one_ready] {
                assert_eq!(batch.num_rows(), ids.len());
                assert_eq!(
                    batch.column(0).as_primitive::<Int32Type>().values(),
                    &expected_a[..]
                );
                let text = batch.column(1).as_string::<i32>();
                for (i, &id) in ids.iter().enumerate().step_by(997) {
                    assert_eq!(text.value(i), format!("row {id}"));
                }
                assert_eq!(
                    text.value(ids.len() - 1),
                    format!("row {}", ids[ids.len() - 1])
                );
            }
        }
    }

    /// Gathers its columns on the host with `take`, as a device would, and fails (returns
    /// `None`) from window `fail_at` on.
    struct TakeGather {
        columns: Vec<usize>,
        all: RecordBatch,
        permutation: Vec<u32>,
        windows: usize,
        fail_at: usize,
    }

    impl PayloadGather for TakeGather {
        fn columns(&self) -> &[usize] {
            &self.columns
        }

        fn gather(
            &mut self,
            start: usize,
            batch_rows: &[usize],
        ) -> Result<Option<Vec<Vec<ArrayRef>>>> {
            self.windows += 1;
            if self.windows > self.fail_at {
                return Ok(None);
            }
            let mut at = start;
            let mut per_batch = Vec::new();
            for &len in batch_rows {
                let ids = UInt32Array::from(self.permutation[at..at + len].to_vec());
                per_batch.push(ids);
                at += len;
            }
            Ok(Some(
                self.columns
                    .iter()
                    .map(|&c| {
                        per_batch
                            .iter()
                            .map(|ids| take(self.all.column(c), ids, None).unwrap())
                            .collect()
                    })
                    .collect(),
            ))
        }

        fn stats(&self) -> PayloadStats {
            PayloadStats::default()
        }
    }

    fn two_columns(values: std::ops::Range<i32>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("b", DataType::Int32, true),
        ]));
        let b: Int32Array = values.clone().map(|v| (v % 3 != 0).then_some(-v)).collect();
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int32Array::from_iter_values(values)), Arc::new(b)],
        )
        .unwrap()
    }

    #[test]
    fn an_empty_run_asks_the_payload_nothing() {
        let rows = RunRows::new(vec![two_columns(0..10), two_columns(10..20)]);
        let mut payload = TakeGather {
            columns: vec![1],
            all: two_columns(0..20),
            permutation: Vec::new(),
            windows: 0,
            fail_at: usize::MAX,
        };
        let mut emitted = 0;
        gather_in_windows(
            &rows,
            &[],
            4,
            Some(&mut payload),
            None,
            8,
            usize::MAX,
            |_| {
                emitted += 1;
                true
            },
        )
        .unwrap();
        assert_eq!((emitted, payload.windows), (0, 0));
    }

    #[test]
    fn payload_columns_fill_their_place_window_by_window() {
        let all = two_columns(0..1000);
        let batches = vec![all.slice(0, 333), all.slice(333, 0), all.slice(333, 667)];
        let rows = RunRows::new(batches.clone());
        let single = RunRows::new(vec![all.clone()]);
        let permutation: Vec<u32> = (0..1000u32).map(|i| (i * 7919) % 1000).collect();
        let gathered = |rows: &RunRows, payload: Option<&mut TakeGather>, window| {
            let mut out = Vec::new();
            let payload = payload.map(|p| p as &mut dyn PayloadGather);
            gather_in_windows(
                rows,
                &permutation[..998],
                30,
                payload,
                None,
                window,
                usize::MAX,
                |b| {
                    out.push(b);
                    true
                },
            )
            .unwrap();
            out
        };
        let expected = gathered(&rows, None, 0);
        for (fail_at, rows) in [(usize::MAX, &rows), (2, &rows), (0, &rows), (1, &single)] {
            let mut payload = TakeGather {
                columns: vec![1],
                all: all.clone(),
                permutation: permutation.clone(),
                windows: 0,
                fail_at,
            };
            let actual = gathered(rows, Some(&mut payload), 100);
            assert_eq!(actual, expected, "payload failing from window {fail_at}");
            assert!(actual.iter().all(|b| b.num_rows() <= 30));
            // Windows of 90 rows (whole batches of 30): 12 for 998 rows.
            let windows = if fail_at == usize::MAX {
                12
            } else {
                fail_at + 1
            };
            assert_eq!(
                payload.windows, windows,
                "asked once per window until it fails"
            );
        }
    }

    /// A payload whose windows must stay small (its host memory) gets windows of at most
    /// the rows it asks for, in whole batches, and the same output.
    #[test]
    fn windows_are_as_small_as_the_payload_asks() {
        /// [`TakeGather`] asking for windows of at most `rows` rows.
        struct Narrow(TakeGather, usize);
        impl PayloadGather for Narrow {
            fn columns(&self) -> &[usize] {
                self.0.columns()
            }
            fn gather(
                &mut self,
                start: usize,
                batch_rows: &[usize],
            ) -> Result<Option<Vec<Vec<ArrayRef>>>> {
                assert!(batch_rows.iter().sum::<usize>() <= self.1.max(30));
                self.0.gather(start, batch_rows)
            }
            fn stats(&self) -> PayloadStats {
                self.0.stats()
            }
            fn window_rows(&self, most: usize) -> usize {
                self.1.min(most)
            }
        }
        let all = two_columns(0..1000);
        let rows = RunRows::new(vec![all.slice(0, 500), all.slice(500, 500)]);
        let permutation: Vec<u32> = (0..1000u32).map(|i| (i * 7919) % 1000).collect();
        let mut outputs = Vec::new();
        // 34 batches of 30 rows: windows of at most 100 rows hold 3 of them (12 windows);
        // asked for 65 rows, 2 (17 windows); asked for fewer than a batch, 1 (34).
        for (asked, windows) in [(usize::MAX, 12), (65, 17), (1, 34)] {
            let mut payload = Narrow(
                TakeGather {
                    columns: vec![1],
                    all: all.clone(),
                    permutation: permutation.clone(),
                    windows: 0,
                    fail_at: usize::MAX,
                },
                asked,
            );
            let mut out = Vec::new();
            gather_in_windows(
                &rows,
                &permutation,
                30,
                Some(&mut payload),
                None,
                100,
                usize::MAX,
                |b| {
                    out.push(b);
                    true
                },
            )
            .unwrap();
            assert_eq!(payload.0.windows, windows, "asked for {asked} rows");
            outputs.push(out);
        }
        assert!(outputs.windows(2).all(|pair| pair[0] == pair[1]));
    }

    /// Strings whose bytes would pass a batch's offsets are cut into more batches (here at
    /// most 1 000 bytes a batch: "row 0" to "row 999" take 5 to 7 bytes), on the host even
    /// where a payload gather is offered (it lays out only batches of one size).
    #[test]
    fn string_batches_are_cut_before_their_offsets_overflow() {
        let all = two_column_batch(0, 1000);
        let rows = RunRows::new(vec![all.slice(0, 400), all.slice(400, 600)]);
        let permutation: Vec<u32> = (0..1000u32).map(|i| (i * 7919) % 1000).collect();
        for with_payload in [false, true] {
            let mut payload = TakeGather {
                columns: vec![0],
                all: all.clone(),
                permutation: permutation.clone(),
                windows: 0,
                fail_at: usize::MAX,
            };
            let offered = with_payload.then_some(&mut payload as &mut dyn PayloadGather);
            let mut out = Vec::new();
            gather_in_windows(&rows, &permutation, 300, offered, None, 500, 1000, |b| {
                out.push(b);
                true
            })
            .unwrap();
            assert_eq!(payload.windows, 0);
            let mut a = Vec::new();
            for batch in &out {
                let text = batch.column(1).as_string::<i32>();
                assert!(
                    text.value_data().len() <= 1000,
                    "{} bytes",
                    text.value_data().len()
                );
                assert!(batch.num_rows() <= 300);
                for (i, v) in batch
                    .column(0)
                    .as_primitive::<Int32Type>()
                    .values()
                    .iter()
                    .enumerate()
                {
                    assert_eq!(text.value(i), format!("row {v}"));
                    a.push(*v as u32);
                }
            }
            assert_eq!(a, permutation, "payload: {with_payload}");
            // About 6.9 KB in batches of at most 1 000 bytes, not 4 batches of 300 rows.
            assert!(out.len() >= 7, "{} batches", out.len());
        }
    }

    #[test]
    fn stops_when_emit_declines() {
        let rows = RunRows::new(vec![batch((0..100).collect())]);
        let perm: Vec<u32> = (0..100).collect();
        let mut emitted = 0;
        gather_sorted(&rows, &perm, 10, None, |_| {
            emitted += 1;
            false
        })
        .unwrap();
        assert_eq!(emitted, 1);
    }
}
