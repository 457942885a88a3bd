//! A run's payload columns gathered on the device in sorted order (the kernels:
//! `gather.rs`), and the CUDA backend's run state ([`DeviceRun`]) from which it starts.
//!
//! The host gather reads each output row's values from wherever the row sat in the input:
//! one DRAM miss per row and column, which at 10⁸ rows costs more than the whole device
//! sort. Here a column crosses PCIe twice, sequentially, and the random reads happen in
//! device memory:
//!
//! ```text
//!  once per run (device lock held):  permutation, each gathered column's values
//!                                    (+ validity bitmap when a row is null) ──pinned──► device
//!                                    (the sort's permutation and key columns, still on the
//!                                    device, are reused: Q1's key `k` never goes up twice)
//!  per window of output batches (lock held for that window only, never while emitting):
//!     gather_w<width> / gather_bits ─► window buffer ──pinned──► each batch's own buffers
//! ```
//!
//! Gathered on the device: primitive columns (integers, floats, decimals, dates, times,
//! timestamps, durations, intervals), `FixedSizeBinary` of 1, 2, 4, 8, 16 or 32 bytes,
//! `Boolean`, and `Utf8View` and `BinaryView` (their views and data buffers go up, and
//! each output batch comes back with its own compact data buffer: `views.rs`). Columns that
//! do not fit in device memory, and every other type, stay with the host gather. A failure
//! part way hands the rest of the run back to the host gather.

pub(super) mod early;
mod read_back;
pub(super) mod resident;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{make_array, Array, ArrayData, ArrayRef};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::DataType;
use datafusion::arrow;
use datafusion::common::Result;

use crate::cuda::columns::views::{views_array, VIEW_BYTES};
use crate::cuda::columns::{upload_raw_column, DeviceColumn, PayloadLayout, RawColumn};
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::gather::{payload_layout, PeerSlices, SlicedColumn, WIDTHS};
use crate::cuda::memory::budget::{DeviceShare, LeaseKind};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::download::download_into_buffers;
use crate::cuda::memory::transfer::Staging;
use crate::cuda::module::{arg, launch};
use crate::cuda::runtime::{note_failure_of, note_gather_failure, CudaRuntime};
use crate::cuda::tuning::{
    GATHER_THREADS as THREADS, GATHER_WINDOWS_KEPT, MIN_GATHER_WINDOW_BYTES,
};
use early::EarlyUpload;
use resident::ResidentRun;

/// Rows of a stretch of byte-array lengths one block scans
/// ([`DevicePayload::gather_range_bytes`]).
const SCAN_STRETCH_ROWS: usize = 4096;
use crate::cuda::window::{compute_windows, SortedColumn, WindowDevice};
use crate::gather::{
    PayloadGather, PayloadStats, ResidentColumns, RunRows, SharedOrder, WindowRequest,
};
use crate::sort::RunState;

/// One column of the run, on the device.
struct PayloadColumn {
    data_type: DataType,
    data: ColumnData,
}

/// Where a payload column's buffers lie.
enum ColumnData {
    /// Whole, on the gathering device.
    Here(RawColumn),
    /// In slices on the devices of a spread run, read over peer access.
    Sliced(SlicedColumn),
}

/// A buffer the gather kernels read a column's values or validity from.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// On the gathering device.
    Here(&'a DeviceBuffer<u8>),
    /// In slices on several devices.
    Sliced(&'a PeerSlices),
}

impl PayloadColumn {
    fn layout(&self) -> PayloadLayout {
        match &self.data {
            ColumnData::Here(raw) => raw.layout,
            ColumnData::Sliced(sliced) => sliced.layout,
        }
    }

    /// The column's values (its `Boolean` bitmap, its views).
    fn values(&self) -> Source<'_> {
        match &self.data {
            ColumnData::Here(raw) => Source::Here(&raw.values),
            ColumnData::Sliced(sliced) => Source::Sliced(&sliced.values),
        }
    }

    /// The column's validity, when some row is null.
    fn validity(&self) -> Option<Source<'_>> {
        match &self.data {
            ColumnData::Here(raw) => raw.validity.as_deref().map(Source::Here),
            ColumnData::Sliced(sliced) => sliced.validity.as_ref().map(Source::Sliced),
        }
    }

    /// The column whole on the gathering device (views always are).
    fn here(&self) -> &RawColumn {
        match &self.data {
            ColumnData::Here(raw) => raw,
            ColumnData::Sliced(_) => {
                unreachable!("only fixed-width and Boolean columns are sliced")
            }
        }
    }

    /// Host bytes a gathered row of it takes on average, over a run of `rows` rows.
    fn row_bytes(&self, rows: usize) -> usize {
        let validity = usize::from(self.validity().is_some());
        match self.layout() {
            PayloadLayout::Fixed(width) => width + validity,
            PayloadLayout::Bits => 1 + validity,
            PayloadLayout::Views => {
                let data = self.here().view_data.as_ref().map_or(0, |d| d.data.len());
                VIEW_BYTES + validity + data.div_ceil(rows.max(1))
            }
        }
    }
}

/// What a device sort leaves on the device for the payload gather: the CUDA backend's
/// [`RunState`], freed with the run.
pub(super) struct DeviceRun {
    /// The runtime that gathers.
    pub runtime: Arc<CudaRuntime>,
    /// The sorted order, when the sort produced one (not for constant keys).
    pub permutation: Option<DeviceBuffer<u32>>,
    /// The key columns the device encoded.
    pub columns: Vec<DeviceColumn>,
    /// What the session's work may do on the device, for the gather.
    pub share: DeviceShare,
}

impl DeviceRun {
    /// A state that keeps nothing: the gather uploads the permutation and every column,
    /// within `share`.
    pub(super) fn empty(runtime: Arc<CudaRuntime>, share: DeviceShare) -> Self {
        Self {
            runtime,
            permutation: None,
            columns: Vec::new(),
            share,
        }
    }
}

impl RunState for DeviceRun {
    fn payload_gatherer(
        self: Box<Self>,
        rows: &RunRows,
        permutation: &[u32],
    ) -> Option<Box<dyn PayloadGather>> {
        if self.runtime.is_disabled() {
            return None;
        }
        let (runtime, faults) = (Arc::clone(&self.runtime), self.share.faults);
        match DevicePayload::upload(&runtime, rows, permutation, *self) {
            Ok(payload) => payload.map(|p| Box::new(p) as Box<dyn PayloadGather>),
            Err(error) => {
                note_gather_failure(runtime.ordinal(), &error, permutation.len(), faults);
                None
            }
        }
    }

    fn order_changed(&mut self) {
        self.permutation = None;
    }
}

/// A run's gathered columns and permutation on the device; gathers windows of output
/// batches on request (see [`PayloadGather`]).
pub(super) struct DevicePayload {
    runtime: Arc<CudaRuntime>,
    /// What the session's work may do on the device.
    share: DeviceShare,
    /// Shared with the payload of the run's resident columns, where it has one.
    permutation: Arc<DeviceBuffer<u32>>,
    /// Rows of the run (the permutation may be longer).
    rows: usize,
    indices: Vec<usize>,
    columns: Vec<PayloadColumn>,
    stats: PayloadStats,
}

/// One column of a gathered window: per output batch, its values (views), its validity
/// when some row is null, and for views the bytes of its long values.
struct Gathered {
    values: Vec<Buffer>,
    validity: Option<Vec<Buffer>>,
    data: Option<Vec<Buffer>>,
}

/// Where one column's parts lie in a window buffer: (byte offset, first part) of each.
struct Regions {
    values: (usize, usize),
    validity: Option<(usize, usize)>,
    data: Option<(usize, usize)>,
}

/// A range of a views column as byte arrays on the device ([`DevicePayload::gather_range_bytes`]).
pub(super) struct RangeBytes {
    /// The values' bytes end to end.
    pub(super) bytes: DeviceBuffer<u8>,
    /// One offset more than the rows, from 0.
    pub(super) offsets: DeviceBuffer<u32>,
    /// The same offsets on the host.
    pub(super) host_offsets: Vec<u32>,
    /// The validity bitmap (row 0 at bit 0), where some row of the run is null.
    pub(super) validity: Option<DeviceBuffer<u8>>,
}

/// A window's views gathered to scratch memory, before their long values are copied.
struct GatheredViews {
    views: DeviceBuffer<u8>,
    /// Each row's offset in its batch's data buffer.
    offsets: DeviceBuffer<u32>,
    /// Bytes of long values per batch.
    batch_bytes: Vec<usize>,
}

impl DevicePayload {
    /// Puts on the device the permutation and every column of `rows` that the device can
    /// gather (as many as fit in device memory); `None` when no column qualifies. What the
    /// sort `retained` (its permutation, the key columns) is reused, not uploaded again.
    pub(super) fn upload(
        runtime: &Arc<CudaRuntime>,
        rows: &RunRows,
        permutation: &[u32],
        retained: DeviceRun,
    ) -> CudaResult<Option<DevicePayload>> {
        let candidates: Vec<(usize, PayloadLayout)> = (0..rows.num_columns())
            .filter_map(|c| payload_layout(rows.column_type(c)?).map(|layout| (c, layout)))
            .collect();
        if candidates.is_empty() || permutation.is_empty() {
            return Ok(None);
        }
        let (kept_permutation, kept_columns) = (retained.permutation, retained.columns);
        let started = Instant::now();
        let share = retained.share;
        runtime.with_lease(LeaseKind::Gather, share, |device, staging, lease| {
            let n = permutation.len();
            let mut stats = PayloadStats {
                device_wait: lease.waited,
                ..PayloadStats::default()
            };
            let device_permutation = match kept_permutation.filter(|p| p.len() >= n) {
                Some(kept) => kept,
                None => {
                    stats.h2d_bytes += n * 4;
                    staging.upload::<u32, _>(device, n, "gather permutation", |start, out| {
                        out.copy_from_slice(&permutation[start..start + out.len()])
                    })?
                }
            };
            let mut early = match rows.early() {
                Some(early) => take_early(early.as_any(), device, staging, rows, &candidates)?,
                None => Default::default(),
            };
            stats.h2d_bytes += early.late_bytes;
            stats.early_h2d_bytes = early.early_bytes;
            let mut payload = DevicePayload {
                runtime: Arc::clone(runtime),
                share,
                permutation: Arc::new(device_permutation),
                rows: n,
                indices: Vec::new(),
                columns: Vec::new(),
                stats,
            };
            for (index, layout) in candidates {
                let arrays = rows.column_arrays(index);
                let kept = kept_columns.iter().find(|k| {
                    k.raw.layout == layout
                        && k.arrays.len() == arrays.len()
                        && k.arrays.iter().zip(&arrays).all(|(a, b)| Arc::ptr_eq(a, b))
                });
                let raw = match (kept, early.columns.remove(&index)) {
                    (Some(kept), _) => kept.raw.clone(),
                    (None, Some(raw)) => {
                        payload.stats.early_columns += 1;
                        raw
                    }
                    (None, None) => match upload_raw_column(
                        device,
                        staging,
                        &arrays,
                        layout,
                        Some(&runtime.narrowing),
                    ) {
                        Ok((raw, bytes)) => {
                            payload.stats.h2d_bytes += bytes;
                            raw
                        }
                        // The columns put there so far are gathered here, the rest on the host.
                        Err(error) if error.is_out_of_memory() => break,
                        Err(other) => return Err(other),
                    },
                };
                crate::trace::event(|| format!("  payload column {index} on the device"));
                payload.indices.push(index);
                payload.columns.push(PayloadColumn {
                    data_type: arrays[0].data_type().clone(),
                    data: ColumnData::Here(raw),
                });
            }
            device.synchronize()?;
            payload.stats.upload = started.elapsed();
            payload.stats.device_peak_bytes = lease.peak_bytes();
            Ok((!payload.columns.is_empty()).then_some(payload))
        })
    }
}

/// A gathered validity bitmap of `rows` rows (row 0 at bit 0) brought to the host, where
/// some row is null; `None` for no bitmap or no null row.
pub(super) fn download_nulls(
    device: &Device,
    bits: Option<&DeviceBuffer<u8>>,
    rows: usize,
) -> CudaResult<Option<NullBuffer>> {
    let Some(bits) = bits else {
        return Ok(None);
    };
    let host = Buffer::from_vec(device.download_now(bits)?);
    let nulls = NullBuffer::new(BooleanBuffer::new(host, 0, rows));
    Ok((nulls.null_count() > 0).then_some(nulls))
}

/// The columns of `candidates` that `early` (a backend's copy of the run's columns, made
/// while its input arrived) holds, put together on `device`; none where it is not this
/// backend's, or where the copy is on another device (it is let go then).
fn take_early(
    early: &dyn std::any::Any,
    device: &Device,
    staging: &mut Staging,
    rows: &RunRows,
    candidates: &[(usize, PayloadLayout)],
) -> CudaResult<early::Taken> {
    match early.downcast_ref::<EarlyUpload>() {
        Some(early) => early.take_columns(device, staging, rows, candidates),
        None => Ok(early::Taken::default()),
    }
}

impl DevicePayload {
    /// The runtime of the device that gathers.
    pub(super) fn runtime(&self) -> &Arc<CudaRuntime> {
        &self.runtime
    }

    /// One device's payload of a run spread over several devices: the whole `permutation`
    /// of the run's `rows` rows on `runtime`'s device, and `columns` (each one's index in
    /// the run, its type, and its slices on the run's devices, which must outlive this
    /// payload and stay readable from this device); `stats` what putting them there cost.
    pub(super) fn sliced(
        runtime: Arc<CudaRuntime>,
        share: DeviceShare,
        permutation: DeviceBuffer<u32>,
        columns: Vec<(usize, DataType, SlicedColumn)>,
        stats: PayloadStats,
    ) -> Self {
        let rows = permutation.len();
        let (indices, columns) = columns
            .into_iter()
            .map(|(index, data_type, sliced)| {
                let column = PayloadColumn {
                    data_type,
                    data: ColumnData::Sliced(sliced),
                };
                (index, column)
            })
            .unzip();
        Self {
            runtime,
            share,
            permutation: Arc::new(permutation),
            rows,
            indices,
            columns,
            stats,
        }
    }

    /// The width of column `at`'s values (its place among the payload's columns), when the
    /// device holds them as fixed-width values of its own (not sliced over devices).
    pub(super) fn fixed_width(&self, at: usize) -> Option<usize> {
        let column = &self.columns[at];
        match (column.layout(), &column.data) {
            (PayloadLayout::Fixed(width), ColumnData::Here(_)) => Some(width),
            _ => None,
        }
    }

    /// Column `at`'s values of output rows `start .. start + rows` gathered into a buffer of
    /// their own, with their validity bitmap (row `start` at bit 0) where some row of the
    /// run is null; queued on the device's stream.
    pub(super) fn gather_range(
        &self,
        device: &Device,
        at: usize,
        order: u64,
        rows: usize,
    ) -> CudaResult<(DeviceBuffer<u8>, Option<DeviceBuffer<u8>>)> {
        let column = &self.columns[at];
        let PayloadLayout::Fixed(width) = column.layout() else {
            panic!("a gathered range of a column that is not fixed-width");
        };
        let values = device.alloc::<u8>((rows * width).max(1), "gathered column values")?;
        if rows > 0 {
            self.launch_values(device, column.values(), width, order, &[rows], values.ptr())?;
        }
        Ok((values, self.gather_validity(device, column, order, rows)?))
    }

    /// `column`'s validity bitmap of output rows `start .. start + rows` (row `start` at
    /// bit 0), where some row of the run is null; queued on the device's stream.
    fn gather_validity(
        &self,
        device: &Device,
        column: &PayloadColumn,
        order: u64,
        rows: usize,
    ) -> CudaResult<Option<DeviceBuffer<u8>>> {
        let Some(bits) = column.validity() else {
            return Ok(None);
        };
        let out = device.alloc::<u8>(rows.div_ceil(32).max(1) * 4, "gathered validity")?;
        if rows > 0 {
            self.launch_bits(device, bits, order, &[rows], out.ptr())?;
        }
        Ok(Some(out))
    }

    /// Whether column `at` is byte-like values held whole on this device (views).
    pub(super) fn is_views(&self, at: usize) -> bool {
        matches!(
            (self.columns[at].layout(), &self.columns[at].data),
            (PayloadLayout::Views, ColumnData::Here(_))
        )
    }

    /// Column `at`'s (views) values of output rows `start .. start + rows` as byte
    /// arrays: their bytes end to end and their `rows + 1` offsets (also brought to the
    /// host), with their validity bitmap where some row of the run is null. An error where
    /// the bytes pass 32-bit offsets.
    pub(super) fn gather_range_bytes(
        &self,
        device: &Device,
        at: usize,
        order: u64,
        rows: usize,
    ) -> CudaResult<RangeBytes> {
        let column = &self.columns[at];
        let gathered = device.alloc::<u8>(rows * VIEW_BYTES, "gathered views")?;
        let offsets = device.alloc::<u32>(rows + 1, "resident byte offsets")?;
        // The views' long bytes (written by the gather, unused here) land in `offsets`,
        // which the lengths of every value then overwrite.
        self.launch_gather_views(device, column, order, rows, gathered.ptr(), offsets.ptr())?;
        let gatherer = &self.runtime.gatherer;
        // The lengths scanned a block per stretch of rows, then each stretch moved up by
        // the bytes of those before it.
        let stretches = rows.div_ceil(SCAN_STRETCH_ROWS);
        let totals = device.alloc::<u64>(stretches, "resident stretch bytes")?;
        let (mut views, mut n, mut lengths) = (gathered.ptr(), rows as u32, offsets.ptr());
        let mut params = [arg(&mut views), arg(&mut n), arg(&mut lengths)];
        let grid = self.grid_for(rows);
        launch(
            device,
            gatherer.view_lengths,
            grid,
            THREADS,
            &mut params,
            rows,
        )?;
        self.launch_scan(
            device,
            offsets.ptr(),
            rows,
            SCAN_STRETCH_ROWS,
            stretches,
            totals.ptr(),
        )?;
        let mut bases = device.download_now(&totals)?;
        let mut total = 0u64;
        for base in bases.iter_mut() {
            (*base, total) = (total, total + *base);
        }
        if total > u64::from(u32::MAX) {
            return Err(CudaError::BatchTooLarge { bytes: total });
        }
        let end = [total as u32];
        // SAFETY: `end` and `bases` outlive the copies: the stream is synchronized (the
        // offsets' download) before this returns.
        unsafe {
            device.upload(&offsets, rows, &end)?;
            device.upload(&totals, 0, &bases)?;
        }
        let (mut stretch, mut sums) = (SCAN_STRETCH_ROWS as u32, totals.ptr());
        let mut params = [
            arg(&mut lengths),
            arg(&mut n),
            arg(&mut stretch),
            arg(&mut sums),
        ];
        launch(
            device,
            gatherer.add_stretch_bases,
            grid,
            THREADS,
            &mut params,
            rows,
        )?;
        let bytes = device.alloc::<u8>((total as usize).max(1), "resident bytes")?;
        let data = column
            .here()
            .view_data
            .as_ref()
            .expect("views have their data");
        let (mut src, mut starts, mut out) = (data.data.ptr(), data.starts.ptr(), bytes.ptr());
        let mut params = [
            arg(&mut views),
            arg(&mut lengths),
            arg(&mut n),
            arg(&mut src),
            arg(&mut starts),
            arg(&mut out),
        ];
        launch(
            device,
            gatherer.view_bytes_end_to_end,
            grid,
            THREADS,
            &mut params,
            total as usize,
        )?;
        let host_offsets = device.download_now(&offsets)?;
        let validity = self.gather_validity(device, column, order, rows)?;
        Ok(RangeBytes {
            bytes,
            offsets,
            host_offsets,
            validity,
        })
    }

    /// The payload of the columns at `taken` (places among its columns) alone, sharing the
    /// permutation; they are gathered here no more.
    fn split_off(&mut self, taken: &[usize]) -> DevicePayload {
        let mut indices = Vec::new();
        let mut columns = Vec::new();
        let mut kept_indices = Vec::new();
        let mut kept_columns = Vec::new();
        for (at, (index, column)) in std::mem::take(&mut self.indices)
            .into_iter()
            .zip(std::mem::take(&mut self.columns))
            .enumerate()
        {
            match taken.contains(&at) {
                true => {
                    indices.push(index);
                    columns.push(column);
                }
                false => {
                    kept_indices.push(index);
                    kept_columns.push(column);
                }
            }
        }
        self.indices = kept_indices;
        self.columns = kept_columns;
        DevicePayload {
            runtime: Arc::clone(&self.runtime),
            share: self.share,
            permutation: Arc::clone(&self.permutation),
            rows: self.rows,
            indices,
            columns,
            stats: PayloadStats::default(),
        }
    }
}

impl PayloadGather for DevicePayload {
    fn columns(&self) -> &[usize] {
        &self.indices
    }

    fn split_resident(
        &mut self,
        columns: &[usize],
        rows: &Arc<RunRows>,
        permutation: &SharedOrder,
    ) -> Option<Arc<dyn ResidentColumns>> {
        let taken: Vec<usize> = (0..self.columns.len())
            .filter(|&at| {
                columns.contains(&self.indices[at])
                    && (self.fixed_width(at).is_some() || self.is_views(at))
            })
            .collect();
        let declined = if self.runtime.pages.is_none() {
            Some("the page kernels did not load".to_string())
        } else if permutation.len() != self.rows {
            Some(format!("an order of {} rows", permutation.len()))
        } else if taken.is_empty() {
            Some("none of them is held whole here".to_string())
        } else {
            None
        };
        if let Some(reason) = declined {
            crate::trace::event(|| format!("  {} rows: no column stays ({reason})", self.rows));
            return None;
        }
        let payload = self.split_off(&taken);
        Some(Arc::new(ResidentRun::new(
            payload,
            Arc::clone(rows),
            Arc::clone(permutation),
        )))
    }

    fn retain_columns(&mut self, keep: &[usize]) {
        let kept: Vec<bool> = self.indices.iter().map(|i| keep.contains(i)).collect();
        let mut flags = kept.iter();
        self.columns
            .retain(|_| *flags.next().expect("a flag per column"));
        self.indices.retain(|i| keep.contains(i));
    }

    fn gather(&mut self, start: usize, batch_rows: &[usize]) -> Result<Option<Vec<Vec<ArrayRef>>>> {
        let rows: usize = batch_rows.iter().sum();
        let runtime = Arc::clone(&self.runtime);
        let started = Instant::now();
        let host = runtime.with_lease(LeaseKind::Gather, self.share, |device, staging, lease| {
            let host = self.gather_window(device, staging, start, batch_rows);
            self.stats.device_wait += lease.waited;
            self.stats.device_peak_bytes = self.stats.device_peak_bytes.max(lease.peak_bytes());
            host
        });
        self.stats.windows += started.elapsed();
        let host = match host {
            Ok(host) => host,
            Err(error) => {
                note_gather_failure(runtime.ordinal(), &error, rows, self.share.faults);
                return Ok(None);
            }
        };
        let mut out = Vec::with_capacity(host.len());
        for (column, gathered) in self.columns.iter().zip(host) {
            let Gathered {
                values,
                validity,
                data,
            } = gathered;
            for buffer in values.iter().chain(validity.iter().flatten()) {
                self.stats.d2h_bytes += buffer.len();
            }
            self.stats.d2h_bytes += data.iter().flatten().map(Buffer::len).sum::<usize>();
            let nulls = |b: usize, len: usize| {
                validity
                    .as_ref()
                    .map(|v| NullBuffer::new(BooleanBuffer::new(v[b].clone(), 0, len)))
                    .filter(|n| n.null_count() > 0)
            };
            let arrays = match data {
                Some(data) => values
                    .into_iter()
                    .zip(data)
                    .zip(batch_rows)
                    .enumerate()
                    .map(|(b, ((views, data), &len))| {
                        views_array(&column.data_type, views, data, len, nulls(b, len))
                    })
                    .collect(),
                None => batch_rows
                    .iter()
                    .enumerate()
                    .map(|(b, &len)| {
                        let data = ArrayData::builder(column.data_type.clone())
                            .len(len)
                            .add_buffer(values[b].clone())
                            .nulls(nulls(b, len))
                            .build()?;
                        Ok(make_array(data))
                    })
                    .collect::<Result<Vec<ArrayRef>>>()?,
            };
            out.push(arrays);
        }
        Ok(Some(out))
    }

    fn stats(&self) -> PayloadStats {
        self.stats
    }

    fn window_rows(&self, most: usize) -> usize {
        let row_bytes: usize = self
            .columns
            .iter()
            .map(|column| column.row_bytes(self.rows))
            .sum();
        let kept = self.runtime.host_regions.limit();
        if kept == 0 {
            // Nothing is kept for reuse: no window size brings back locked memory.
            return most;
        }
        let budget = (kept / GATHER_WINDOWS_KEPT).max(MIN_GATHER_WINDOW_BYTES);
        (budget / row_bytes.max(1)).clamp(1, most.max(1))
    }

    fn windows(
        &mut self,
        request: &WindowRequest,
        starts: &[usize],
    ) -> Result<Option<Vec<ArrayRef>>> {
        let runtime = Arc::clone(&self.runtime);
        let Some(kernels) = runtime.windower.as_ref() else {
            return Ok(None);
        };
        let started = Instant::now();
        let computed =
            runtime.with_lease(LeaseKind::Gather, self.share, |device, staging, lease| {
                let mut at = WindowDevice {
                    device,
                    staging,
                    regions: &runtime.host_regions,
                    kernels,
                };
                let rows = self.rows;
                let computed = compute_windows(&mut at, request, rows, starts, &mut |index| {
                    self.sorted_column(device, index)
                });
                self.stats.device_wait += lease.waited;
                self.stats.device_peak_bytes = self.stats.device_peak_bytes.max(lease.peak_bytes());
                computed
            });
        self.stats.windows += started.elapsed();
        match computed {
            Ok(columns) => {
                if let Some(columns) = &columns {
                    self.stats.d2h_bytes += columns
                        .iter()
                        .map(|c| c.to_data().buffers().iter().map(Buffer::len).sum::<usize>())
                        .sum::<usize>();
                }
                Ok(columns)
            }
            Err(error) => {
                note_failure_of(
                    self.runtime.ordinal(),
                    "window",
                    "computing it on the host",
                    &error,
                    self.rows,
                );
                Ok(None)
            }
        }
    }
}

impl DevicePayload {
    /// Column `index` of the run gathered whole, in sorted order, when the device holds it
    /// as fixed-width values.
    fn sorted_column(&self, device: &Device, index: usize) -> CudaResult<Option<SortedColumn>> {
        let Some(at) = self.indices.iter().position(|&i| i == index) else {
            return Ok(None);
        };
        let column = &self.columns[at];
        let PayloadLayout::Fixed(width) = column.layout() else {
            return Ok(None);
        };
        let (values, validity) = self.gather_range(device, at, self.order_at(0), self.rows)?;
        Ok(Some(SortedColumn {
            values,
            validity,
            width,
            data_type: column.data_type.clone(),
        }))
    }
}

impl Drop for DevicePayload {
    fn drop(&mut self) {
        // The buffers are freed in stream order right after this; make the device's
        // context current on this thread in case it was never bound here.
        let _ = self.runtime.device.bind();
    }
}

impl DevicePayload {
    /// The permutation entries of output rows `start ..`, as a device pointer: the order
    /// the gathers take.
    pub(super) fn order_at(&self, start: usize) -> u64 {
        self.permutation.ptr() + (start * 4) as u64
    }

    /// Gathers every column for output rows `start ..` into one device buffer (each
    /// column's values, then its validity, then for views its batches' data, at 256-byte
    /// aligned offsets) and downloads it in one stream of copies, so that the copy of one
    /// column overlaps the host's drain of the previous one. Per column: one buffer per
    /// batch of each part.
    fn gather_window(
        &self,
        device: &Device,
        staging: &mut Staging,
        start: usize,
        batch_rows: &[usize],
    ) -> CudaResult<Vec<Gathered>> {
        let batches = batch_rows.len();
        let bitmap_bytes = batch_rows[0].div_ceil(32) * 4;
        // Views first: their batches' data sizes are known only once gathered.
        let prepared: Vec<Option<GatheredViews>> = self
            .columns
            .iter()
            .map(|column| match column.layout() {
                PayloadLayout::Views => self
                    .gather_views(device, column, start, batch_rows)
                    .map(Some),
                _ => Ok(None),
            })
            .collect::<CudaResult<_>>()?;
        // Every part of the window buffer in order (batch buffers and padding), and where
        // each column's part list starts: (byte offset, first part).
        let mut sizes: Vec<usize> = Vec::new();
        let mut offset = 0;
        let mut place = |part_sizes: &mut dyn Iterator<Item = usize>| {
            let at = (offset, sizes.len());
            for size in part_sizes {
                sizes.push(size);
                offset += size;
            }
            let padding = offset.next_multiple_of(256) - offset;
            if padding > 0 {
                sizes.push(padding);
                offset += padding;
            }
            at
        };
        let regions: Vec<Regions> = self
            .columns
            .iter()
            .zip(&prepared)
            .map(|(column, views)| {
                let values = match column.layout() {
                    PayloadLayout::Fixed(width) => place(&mut batch_rows.iter().map(|r| r * width)),
                    PayloadLayout::Views => place(&mut batch_rows.iter().map(|r| r * VIEW_BYTES)),
                    PayloadLayout::Bits => place(&mut std::iter::repeat_n(bitmap_bytes, batches)),
                };
                let validity = column
                    .validity()
                    .map(|_| place(&mut std::iter::repeat_n(bitmap_bytes, batches)));
                let data = views
                    .as_ref()
                    .map(|v| place(&mut v.batch_bytes.iter().copied()));
                Regions {
                    values,
                    validity,
                    data,
                }
            })
            .collect();
        let out = device.alloc::<u8>(offset, "gathered window")?;
        for ((column, at), views) in self.columns.iter().zip(&regions).zip(&prepared) {
            let values_at = out.ptr() + at.values.0 as u64;
            match (column.layout(), views) {
                (PayloadLayout::Fixed(width), _) => self.launch_values(
                    device,
                    column.values(),
                    width,
                    self.order_at(start),
                    batch_rows,
                    values_at,
                )?,
                (PayloadLayout::Bits, _) => self.launch_bits(
                    device,
                    column.values(),
                    self.order_at(start),
                    batch_rows,
                    values_at,
                )?,
                (PayloadLayout::Views, Some(views)) => {
                    let data_at = out.ptr() + at.data.expect("views have data").0 as u64;
                    self.copy_view_bytes(
                        device, staging, column, views, batch_rows, values_at, data_at,
                    )?
                }
                (PayloadLayout::Views, None) => unreachable!("views are prepared"),
            }
            if let (Some(bits), Some(validity)) = (column.validity(), at.validity) {
                let at = out.ptr() + validity.0 as u64;
                self.launch_bits(device, bits, self.order_at(start), batch_rows, at)?;
            }
        }
        let host_regions = &self.runtime.host_regions;
        let mut parts: Vec<Option<Buffer>> =
            download_into_buffers(device, staging, host_regions, &out, &sizes)?
                .into_iter()
                .map(Some)
                .collect();
        let take = |parts: &mut Vec<Option<Buffer>>, first: usize| -> Vec<Buffer> {
            parts[first..first + batches]
                .iter_mut()
                .map(|p| p.take().expect("each part taken once"))
                .collect()
        };
        Ok(regions
            .iter()
            .map(|at| Gathered {
                values: take(&mut parts, at.values.1),
                validity: at.validity.map(|v| take(&mut parts, v.1)),
                data: at.data.map(|d| take(&mut parts, d.1)),
            })
            .collect())
    }

    /// Gathers the views of output rows `start ..` (empty under nulls) into a scratch
    /// buffer and finds where each long value's bytes go in its batch's data buffer.
    fn gather_views(
        &self,
        device: &Device,
        column: &PayloadColumn,
        start: usize,
        batch_rows: &[usize],
    ) -> CudaResult<GatheredViews> {
        let rows: usize = batch_rows.iter().sum();
        let views = device.alloc::<u8>(rows * VIEW_BYTES, "gathered views")?;
        let offsets = device.alloc::<u32>(rows, "long value offsets")?;
        let totals = device.alloc::<u64>(batch_rows.len(), "batch data sizes")?;
        self.launch_gather_views(
            device,
            column,
            self.order_at(start),
            rows,
            views.ptr(),
            offsets.ptr(),
        )?;
        self.launch_scan(
            device,
            offsets.ptr(),
            rows,
            batch_rows[0],
            batch_rows.len(),
            totals.ptr(),
        )?;
        let batch_bytes = device.download_now(&totals)?;
        if let Some(&too_big) = batch_bytes.iter().find(|&&b| b > u64::from(u32::MAX)) {
            return Err(CudaError::BatchTooLarge { bytes: too_big });
        }
        Ok(GatheredViews {
            views,
            offsets,
            batch_bytes: batch_bytes.into_iter().map(|b| b as usize).collect(),
        })
    }

    /// Queues the gather of `column`'s views of output rows `start .. start + rows` (empty
    /// under nulls) to device address `views`, and the bytes each long value needs outside
    /// its view to `long_bytes` (u32 each).
    fn launch_gather_views(
        &self,
        device: &Device,
        column: &PayloadColumn,
        order: u64,
        rows: usize,
        views: u64,
        long_bytes: u64,
    ) -> CudaResult<()> {
        let raw = column.here();
        let valid = raw.validity.as_ref().map_or(0, |v| v.ptr());
        let (mut src, mut valid, mut perm, mut n) = (raw.values.ptr(), valid, order, rows as u32);
        let (mut out, mut long) = (views, long_bytes);
        let mut params = [
            arg(&mut src),
            arg(&mut valid),
            arg(&mut perm),
            arg(&mut n),
            arg(&mut out),
            arg(&mut long),
        ];
        let kernel = self.runtime.gatherer.views;
        launch(
            device,
            kernel,
            self.grid_for(rows),
            THREADS,
            &mut params,
            rows,
        )
    }

    /// Queues the exclusive scan of the `rows` u32 at device address `values`, within
    /// `stretches` stretches of `stretch` rows (a block each; a batch of a window each,
    /// all equal but the last), each stretch's sum to `totals` (u64).
    fn launch_scan(
        &self,
        device: &Device,
        values: u64,
        rows: usize,
        stretch: usize,
        stretches: usize,
        totals: u64,
    ) -> CudaResult<()> {
        let (mut values, mut n, mut stretch_rows, mut sums) =
            (values, rows as u32, stretch as u32, totals);
        let mut params = [
            arg(&mut values),
            arg(&mut n),
            arg(&mut stretch_rows),
            arg(&mut sums),
        ];
        // One block a stretch, each writing its total (0 for a stretch past the rows).
        let blocks = stretches as u32;
        let kernel = self.runtime.gatherer.scan_view_bytes;
        launch(device, kernel, blocks, THREADS, &mut params, rows)
    }

    /// Copies the long values of gathered `views` into their batches' data buffers at
    /// device address `data_at` and writes the final views to `views_at`.
    #[allow(clippy::too_many_arguments)]
    fn copy_view_bytes(
        &self,
        device: &Device,
        staging: &mut Staging,
        column: &PayloadColumn,
        views: &GatheredViews,
        batch_rows: &[usize],
        views_at: u64,
        data_at: u64,
    ) -> CudaResult<()> {
        let rows: usize = batch_rows.iter().sum();
        let mut batch_data = Vec::with_capacity(batch_rows.len());
        let mut at = 0u64;
        for &bytes in &views.batch_bytes {
            batch_data.push(at);
            at += bytes as u64;
        }
        let batch_data = staging.upload::<u64, _>(
            device,
            batch_data.len(),
            "batch data offsets",
            |s, out| out.copy_from_slice(&batch_data[s..s + out.len()]),
        )?;
        let data = column
            .here()
            .view_data
            .as_ref()
            .expect("views have their data");
        let (mut src_views, mut out_views, mut long, mut n, mut batch) = (
            views.views.ptr(),
            views_at,
            views.offsets.ptr(),
            rows as u32,
            batch_rows[0] as u32,
        );
        let (mut src, mut starts, mut batch_data, mut out_data) = (
            data.data.ptr(),
            data.starts.ptr(),
            batch_data.ptr(),
            data_at,
        );
        let mut params = [
            arg(&mut src_views),
            arg(&mut out_views),
            arg(&mut long),
            arg(&mut n),
            arg(&mut batch),
            arg(&mut src),
            arg(&mut starts),
            arg(&mut batch_data),
            arg(&mut out_data),
        ];
        let kernel = self.runtime.gatherer.copy_view_bytes;
        launch(
            device,
            kernel,
            self.grid_for(rows),
            THREADS,
            &mut params,
            rows,
        )
    }

    /// Queues the gather of fixed-width values of output rows `start ..` from `values` to
    /// device address `dst`.
    fn launch_values(
        &self,
        device: &Device,
        values: Source<'_>,
        width: usize,
        order: u64,
        batch_rows: &[usize],
        dst: u64,
    ) -> CudaResult<()> {
        let rows: usize = batch_rows.iter().sum();
        let which = WIDTHS
            .iter()
            .position(|&w| w == width)
            .expect("a gathered width");
        let gatherer = &self.runtime.gatherer;
        let (mut here, mut sliced);
        let (kernel, src) = match values {
            Source::Here(values) => {
                here = values.ptr();
                (gatherer.values[which], arg(&mut here))
            }
            Source::Sliced(slices) => {
                sliced = *slices;
                (gatherer.peer_values[which], arg(&mut sliced))
            }
        };
        let (mut perm, mut n, mut dst) = (order, rows as u32, dst);
        let mut params = [src, arg(&mut perm), arg(&mut n), arg(&mut dst)];
        let grid = self.grid_for(rows);
        launch(device, kernel, grid, THREADS, &mut params, rows)
    }

    /// Queues the gather of a bitmap of output rows `start ..` from `bits` to device
    /// address `dst`: one bitmap per batch, each starting at bit 0 of its own words
    /// (`batch_rows` all equal but the last).
    fn launch_bits(
        &self,
        device: &Device,
        bits: Source<'_>,
        order: u64,
        batch_rows: &[usize],
        dst: u64,
    ) -> CudaResult<()> {
        let rows: usize = batch_rows.iter().sum();
        let full = batch_rows[0];
        let words = full.div_ceil(32);
        let batches = batch_rows.len();
        let gatherer = &self.runtime.gatherer;
        let (mut here, mut sliced);
        let (kernel, src) = match bits {
            Source::Here(bits) => {
                here = bits.ptr();
                (gatherer.bits, arg(&mut here))
            }
            Source::Sliced(slices) => {
                sliced = *slices;
                (gatherer.peer_bits, arg(&mut sliced))
            }
        };
        let (mut perm, mut dst) = (order, dst);
        let (mut n, mut batch, mut batch_words, mut count) =
            (rows as u32, full as u32, words as u32, batches as u32);
        let mut params = [
            src,
            arg(&mut perm),
            arg(&mut n),
            arg(&mut batch),
            arg(&mut batch_words),
            arg(&mut count),
            arg(&mut dst),
        ];
        let grid = self.grid_for(batches * words * 32);
        launch(device, kernel, grid, THREADS, &mut params, rows)
    }

    /// Blocks for `threads` threads of work, at most the kernels' grid.
    fn grid_for(&self, threads: usize) -> u32 {
        (threads.div_ceil(THREADS as usize) as u32).clamp(1, self.runtime.gatherer.grid)
    }
}
