//! Launcher of `kernels/gather.cu`: a run's fixed-width payload columns gathered on the
//! device in sorted order.
//!
//! The host gather reads each output row's values from wherever the row sat in the input:
//! one DRAM miss per row and column, which at 10⁸ rows costs more than the whole device
//! sort. Here a column crosses PCIe twice, sequentially, and the random reads happen in
//! device memory:
//!
//! ```text
//!  once per run (device lock held):  permutation, each gathered column's values
//!                                    (+ validity bitmap when a row is null) ──pinned──► device
//!  per window of output batches (lock held for that window only, never while emitting):
//!     gather_w<width> / gather_bits ─► window buffer ──pinned──► each batch's own buffers
//! ```
//!
//! Gathered on the device: primitive columns (integers, floats, decimals, dates, times,
//! timestamps, durations, intervals), `FixedSizeBinary` of 1, 2, 4, 8, 16 or 32 bytes and
//! `Boolean`. Columns that do not fit in device memory, and every other type, stay with
//! the host gather. A failure part way hands the rest of the run back to the host gather.

use std::mem::MaybeUninit;
use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayData, ArrayRef, BooleanArray};
use arrow::buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer};
use arrow::datatypes::DataType;
use datafusion::arrow;
use datafusion::common::Result;

use super::device::{Device, DeviceBuffer};
use super::encode::{concat_bits, upload_bytes};
use super::error::{CudaError, CudaResult};
use super::module::{arg, cached_cubin, launch, Kernel, Module, GATHER};
use super::transfer::Staging;
use super::{note_gather_failure, CudaRuntime};
use crate::gather::{PayloadGather, RunRows};

const THREADS: u32 = 256;
/// Value widths with a kernel of their own, in the order of [`Gatherer::values`].
const WIDTHS: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// How a column's values are laid out, for the device gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadLayout {
    /// Values of this many bytes each, back to back.
    Fixed(usize),
    /// One bit per value (`Boolean`).
    Bits,
}

/// How `data_type` is gathered on the device, or `None` when the host gathers it.
pub fn payload_layout(data_type: &DataType) -> Option<PayloadLayout> {
    let width = match data_type {
        DataType::Boolean => return Some(PayloadLayout::Bits),
        DataType::FixedSizeBinary(width) => usize::try_from(*width).ok()?,
        other if other.is_primitive() => other.primitive_width()?,
        _ => return None,
    };
    WIDTHS
        .contains(&width)
        .then_some(PayloadLayout::Fixed(width))
}

/// The loaded gather kernels of one device.
#[derive(Debug)]
pub struct Gatherer {
    _module: Module,
    values: [Kernel; 6],
    bits: Kernel,
    grid: u32,
}

impl Gatherer {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device) -> CudaResult<Self> {
        let cubin = cached_cubin(GATHER, device.arch, &[])?;
        let module = Module::load(GATHER.name, &cubin)?;
        let kernel = |name| module.kernel(name);
        Ok(Self {
            values: [
                kernel("gather_w1")?,
                kernel("gather_w2")?,
                kernel("gather_w4")?,
                kernel("gather_w8")?,
                kernel("gather_w16")?,
                kernel("gather_w32")?,
            ],
            bits: kernel("gather_bits")?,
            grid: device.sm_count * 16,
            _module: module,
        })
    }
}

/// One column of the run, on the device.
struct PayloadColumn {
    data_type: DataType,
    layout: PayloadLayout,
    /// The values (or Boolean bitmap) of every input array, back to back.
    values: DeviceBuffer<u8>,
    /// The validity of every input array, back to back; `None` when no row is null.
    validity: Option<DeviceBuffer<u8>>,
}

/// A run's gathered columns and permutation on the device; gathers windows of output
/// batches on request (see [`PayloadGather`]).
pub struct DevicePayload {
    runtime: Arc<CudaRuntime>,
    permutation: DeviceBuffer<u32>,
    indices: Vec<usize>,
    columns: Vec<PayloadColumn>,
    h2d_bytes: usize,
    d2h_bytes: usize,
}

impl CudaRuntime {
    /// Uploads the permutation and every column of `rows` that the device can gather (as
    /// many as fit in device memory); `None` when no column qualifies.
    pub fn upload_payload(
        self: &Arc<Self>,
        rows: &RunRows,
        permutation: &[u32],
    ) -> CudaResult<Option<DevicePayload>> {
        let candidates: Vec<(usize, PayloadLayout)> = (0..rows.num_columns())
            .filter_map(|c| payload_layout(rows.column_type(c)?).map(|layout| (c, layout)))
            .collect();
        if candidates.is_empty() || permutation.is_empty() {
            return Ok(None);
        }
        self.with_device(|device, staging| {
            let n = permutation.len();
            let device_permutation =
                staging.upload::<u32, _>(device, n, "gather permutation", |start, out| {
                    out.copy_from_slice(&permutation[start..start + out.len()])
                })?;
            let mut payload = DevicePayload {
                runtime: Arc::clone(self),
                permutation: device_permutation,
                indices: Vec::new(),
                columns: Vec::new(),
                h2d_bytes: n * 4,
                d2h_bytes: 0,
            };
            for (index, layout) in candidates {
                let arrays = rows.column_arrays(index);
                match upload_payload_column(device, staging, &arrays, layout) {
                    Ok((column, bytes)) => {
                        payload.indices.push(index);
                        payload.columns.push(column);
                        payload.h2d_bytes += bytes;
                    }
                    // The columns uploaded so far are gathered here, the rest on the host.
                    Err(CudaError::OutOfMemory { .. }) => break,
                    Err(other) => return Err(other),
                }
            }
            device.synchronize()?;
            Ok((!payload.columns.is_empty()).then_some(payload))
        })
    }
}

/// Uploads one column's values and validity; returns it and the bytes copied.
fn upload_payload_column(
    device: &Device,
    staging: &mut Staging,
    arrays: &[ArrayRef],
    layout: PayloadLayout,
) -> CudaResult<(PayloadColumn, usize)> {
    let data_type = arrays[0].data_type().clone();
    let values = match layout {
        PayloadLayout::Bits => {
            let bits = concat_bits(arrays.iter().map(|a| {
                a.as_any()
                    .downcast_ref::<BooleanArray>()
                    .expect("Boolean column")
                    .values()
                    .clone()
            }));
            upload_bytes(device, staging, &[bits.values()], "gathered Boolean values")?
        }
        PayloadLayout::Fixed(width) => {
            let data: Vec<ArrayData> = arrays.iter().map(|a| a.to_data()).collect();
            let parts: Vec<&[u8]> = data
                .iter()
                .map(|d| &d.buffers()[0].as_slice()[d.offset() * width..][..d.len() * width])
                .collect();
            upload_bytes(device, staging, &parts, "gathered column values")?
        }
    };
    let mut bytes = values.len();
    let validity = if arrays.iter().any(|a| a.null_count() > 0) {
        let bits = concat_bits(arrays.iter().map(|a| match a.nulls() {
            Some(nulls) => nulls.inner().clone(),
            None => NullBuffer::new_valid(a.len()).inner().clone(),
        }));
        let buffer = upload_bytes(device, staging, &[bits.values()], "gathered validity")?;
        bytes += buffer.len();
        Some(buffer)
    } else {
        None
    };
    let column = PayloadColumn {
        data_type,
        layout,
        values,
        validity,
    };
    Ok((column, bytes))
}

impl PayloadGather for DevicePayload {
    fn columns(&self) -> &[usize] {
        &self.indices
    }

    fn gather(&mut self, start: usize, batch_rows: &[usize]) -> Result<Option<Vec<Vec<ArrayRef>>>> {
        let rows: usize = batch_rows.iter().sum();
        let runtime = Arc::clone(&self.runtime);
        let host = runtime.with_device(|device, staging| {
            self.columns
                .iter()
                .map(|column| {
                    let values = match column.layout {
                        PayloadLayout::Fixed(width) => {
                            self.gather_values(device, staging, column, start, batch_rows, width)?
                        }
                        PayloadLayout::Bits => {
                            self.gather_bits(device, staging, &column.values, start, batch_rows)?
                        }
                    };
                    let validity = match &column.validity {
                        Some(bits) => {
                            Some(self.gather_bits(device, staging, bits, start, batch_rows)?)
                        }
                        None => None,
                    };
                    Ok((values, validity))
                })
                .collect::<CudaResult<Vec<_>>>()
        });
        let host = match host {
            Ok(host) => host,
            Err(error) => {
                note_gather_failure(&error, rows);
                return Ok(None);
            }
        };
        let mut out = Vec::with_capacity(host.len());
        for (column, (values, validity)) in self.columns.iter().zip(host) {
            self.d2h_bytes += values.iter().map(Buffer::len).sum::<usize>();
            self.d2h_bytes += validity.iter().flatten().map(Buffer::len).sum::<usize>();
            let arrays = batch_rows
                .iter()
                .enumerate()
                .map(|(b, &len)| {
                    let nulls = validity
                        .as_ref()
                        .map(|v| NullBuffer::new(BooleanBuffer::new(v[b].clone(), 0, len)))
                        .filter(|n| n.null_count() > 0);
                    let data = ArrayData::builder(column.data_type.clone())
                        .len(len)
                        .add_buffer(values[b].clone())
                        .nulls(nulls)
                        .build()?;
                    Ok(make_array(data))
                })
                .collect::<Result<Vec<ArrayRef>>>()?;
            out.push(arrays);
        }
        Ok(Some(out))
    }

    fn transferred_bytes(&self) -> (usize, usize) {
        (self.h2d_bytes, self.d2h_bytes)
    }
}

impl DevicePayload {
    /// The permutation entries of output rows `start ..`, as a device pointer.
    fn permutation_at(&self, start: usize) -> u64 {
        self.permutation.ptr() + (start * 4) as u64
    }

    /// Gathers fixed-width values of output rows `start ..` into one buffer per batch.
    fn gather_values(
        &self,
        device: &Device,
        staging: &mut Staging,
        column: &PayloadColumn,
        start: usize,
        batch_rows: &[usize],
        width: usize,
    ) -> CudaResult<Vec<Buffer>> {
        let rows: usize = batch_rows.iter().sum();
        let out = device.alloc::<u8>(rows * width, "gathered window")?;
        let which = WIDTHS
            .iter()
            .position(|&w| w == width)
            .expect("a gathered width");
        let kernel = self.runtime.gatherer.values[which];
        let mut src = column.values.ptr();
        let mut perm = self.permutation_at(start);
        let mut n = rows as u32;
        let mut dst = out.ptr();
        let mut params = [arg(&mut src), arg(&mut perm), arg(&mut n), arg(&mut dst)];
        let grid = self
            .runtime
            .gatherer
            .grid
            .min(rows.div_ceil(THREADS as usize) as u32);
        launch(device, kernel, grid.max(1), THREADS, &mut params, rows)?;
        let sizes: Vec<usize> = batch_rows.iter().map(|&r| r * width).collect();
        download_into_buffers(device, staging, &out, &sizes)
    }

    /// Gathers a bitmap of output rows `start ..` into one bitmap per batch, each starting
    /// at bit 0 (`batch_rows` all equal but the last).
    fn gather_bits(
        &self,
        device: &Device,
        staging: &mut Staging,
        bits: &DeviceBuffer<u8>,
        start: usize,
        batch_rows: &[usize],
    ) -> CudaResult<Vec<Buffer>> {
        let rows: usize = batch_rows.iter().sum();
        let full = batch_rows[0];
        let words = full.div_ceil(32);
        let batches = batch_rows.len();
        let out = device.alloc::<u8>(batches * words * 4, "gathered bitmap window")?;
        let mut src = bits.ptr();
        let mut perm = self.permutation_at(start);
        let (mut n, mut batch, mut batch_words, mut count) =
            (rows as u32, full as u32, words as u32, batches as u32);
        let mut dst = out.ptr();
        let mut params = [
            arg(&mut src),
            arg(&mut perm),
            arg(&mut n),
            arg(&mut batch),
            arg(&mut batch_words),
            arg(&mut count),
            arg(&mut dst),
        ];
        let threads = batches * words * 32;
        let grid = self
            .runtime
            .gatherer
            .grid
            .min(threads.div_ceil(THREADS as usize) as u32);
        launch(
            device,
            self.runtime.gatherer.bits,
            grid.max(1),
            THREADS,
            &mut params,
            rows,
        )?;
        download_into_buffers(device, staging, &out, &vec![words * 4; batches])
    }
}

/// Downloads `src` into new host buffers of `sizes` bytes (adding up to its length).
fn download_into_buffers(
    device: &Device,
    staging: &mut Staging,
    src: &DeviceBuffer<u8>,
    sizes: &[usize],
) -> CudaResult<Vec<Buffer>> {
    let mut buffers: Vec<MutableBuffer> = sizes
        .iter()
        .map(|&size| MutableBuffer::with_capacity(size))
        .collect();
    {
        let mut parts: Vec<&mut [MaybeUninit<u8>]> = buffers
            .iter_mut()
            .zip(sizes)
            .map(|(buffer, &size)| {
                // SAFETY: the buffer's capacity is at least `size` bytes; they are only
                // written (every one of them, by `download_parts`) through this slice.
                unsafe { std::slice::from_raw_parts_mut(buffer.as_mut_ptr().cast(), size) }
            })
            .collect();
        staging.download_parts(device, src, &mut parts)?;
    }
    Ok(buffers
        .into_iter()
        .zip(sizes)
        .map(|(mut buffer, &size)| {
            // SAFETY: `download_parts` wrote all `size` bytes.
            unsafe { buffer.set_len(size) };
            buffer.into()
        })
        .collect())
}
