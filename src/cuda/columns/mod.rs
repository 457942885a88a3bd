//! A column's raw Arrow buffers on the device, as both the key encoder (`encode.rs`) and
//! the payload gather (`gather.rs`) read them: the values (the `Boolean` bitmap, or the
//! 16-byte views of a byte-like column: `views.rs`) of every input array back to back, and
//! their validity bitmaps back to back when some row is null. A key column the encoder put
//! there is handed on to the gather instead of being uploaded again. Wide integer-like
//! values whose high bytes only repeat the sign cross PCIe narrowed (`narrow.rs`).

pub(super) mod narrow;
mod parts;
pub(super) mod views;

use std::sync::Arc;

use arrow::array::{Array, ArrayData, ArrayRef, BooleanArray};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use datafusion::arrow;

use crate::cuda::columns::narrow::{upload_narrowed, worth_narrowing, Narrowing};
use crate::cuda::columns::parts::Parts;
use crate::cuda::columns::views::{upload_view_data, upload_views, RunBuffers, ViewData};
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;

/// How a column's values are laid out on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadLayout {
    /// Values of this many bytes each, back to back.
    Fixed(usize),
    /// One bit per value (`Boolean`).
    Bits,
    /// 16-byte views of byte-like values, their data buffers numbered across the run.
    Views,
}

/// One column's buffers on the device.
#[derive(Debug, Clone)]
pub struct RawColumn {
    /// How `values` holds the column.
    pub layout: PayloadLayout,
    /// The values (or `Boolean` bitmap) of every input array, back to back.
    pub values: Arc<DeviceBuffer<u8>>,
    /// The validity of every input array, back to back; `None` when no row is null.
    pub validity: Option<Arc<DeviceBuffer<u8>>>,
    /// For [`PayloadLayout::Views`]: the data buffers the views point into.
    pub view_data: Option<Arc<ViewData>>,
}

/// Uploads the column given as `arrays` (all of one type, laid out as `layout`); returns
/// its buffers and the bytes copied. With `narrowing`, wide integer-like values go across
/// narrowed where they allow it (`narrow.rs`).
pub(super) fn upload_raw_column(
    device: &Device,
    staging: &mut Staging,
    arrays: &[ArrayRef],
    layout: PayloadLayout,
    narrowing: Option<&Narrowing>,
) -> CudaResult<(RawColumn, usize)> {
    if crate::gather::any_hollow(arrays) {
        // Stand-ins of values the device held (`gather/hollow.rs`): never sent as values.
        return Err(CudaError::Inconsistent(
            "a column held on the device only was to be uploaded again from its stand-ins"
                .to_string(),
        ));
    }
    let mut view_data = None;
    let (values, mut bytes) = match layout {
        PayloadLayout::Views => {
            let run = RunBuffers::new(arrays);
            let (views, _) = upload_views(device, staging, arrays, &run)?;
            let (data, data_bytes) = upload_view_data(device, staging, &run.buffers)?;
            view_data = Some(Arc::new(data));
            let sent = views.len() + data_bytes;
            (views, sent)
        }
        PayloadLayout::Bits => {
            let bits = concat_bits(arrays.iter().map(|a| {
                a.as_any()
                    .downcast_ref::<BooleanArray>()
                    .expect("Boolean column")
                    .values()
                    .clone()
            }));
            let values = upload_bytes(device, staging, &[bits.values()], "Boolean column values")?;
            let sent = values.len();
            (values, sent)
        }
        PayloadLayout::Fixed(width) => {
            let data: Vec<ArrayData> = arrays.iter().map(|a| a.to_data()).collect();
            let parts: Vec<&[u8]> = data.iter().map(|d| fixed_values(d, width)).collect();
            upload_fixed(device, staging, arrays, &parts, width, narrowing)?
        }
    };
    let (validity, validity_bytes) = upload_validity(device, staging, arrays)?;
    bytes += validity_bytes;
    let column = RawColumn {
        layout,
        values: Arc::new(values),
        validity,
        view_data,
    };
    Ok((column, bytes))
}

/// Uploads the validity bitmaps of `arrays` back to back, where some row is null; returns
/// the buffer and the bytes copied.
pub(super) fn upload_validity(
    device: &Device,
    staging: &mut Staging,
    arrays: &[ArrayRef],
) -> CudaResult<(Option<Arc<DeviceBuffer<u8>>>, usize)> {
    if !arrays.iter().any(|a| a.logical_null_count() > 0) {
        return Ok((None, 0));
    }
    let bits = concat_bits(arrays.iter().map(|a| match a.logical_nulls() {
        Some(nulls) => nulls.inner().clone(),
        None => NullBuffer::new_valid(a.len()).inner().clone(),
    }));
    let buffer = upload_bytes(device, staging, &[bits.values()], "column validity")?;
    let bytes = buffer.len();
    Ok((Some(Arc::new(buffer)), bytes))
}

/// The bytes of `array`'s values (`width` bytes each) from its offset on.
pub(super) fn fixed_values(array: &ArrayData, width: usize) -> &[u8] {
    &array.buffers()[0].as_slice()[array.offset() * width..][..array.len() * width]
}

/// Uploads fixed-width values (`parts` of `arrays`), narrowed when `narrowing` is given,
/// the type is worth it and every value allows it, else whole; returns the buffer and the
/// bytes copied.
pub(in crate::cuda) fn upload_fixed(
    device: &Device,
    staging: &mut Staging,
    arrays: &[ArrayRef],
    parts: &[&[u8]],
    width: usize,
    narrowing: Option<&Narrowing>,
) -> CudaResult<(DeviceBuffer<u8>, usize)> {
    let worth = arrays
        .first()
        .is_some_and(|a| worth_narrowing(a.data_type()));
    let mut copied = 0;
    if let Some(kernels) = narrowing.filter(|_| worth) {
        let narrowed = upload_narrowed(device, staging, kernels, parts, width)?;
        copied += narrowed.copied;
        if let Some(values) = narrowed.values {
            return Ok((values, copied));
        }
    }
    let values = upload_bytes(device, staging, parts, "column values")?;
    copied += values.len();
    Ok((values, copied))
}

/// The bitmaps one after the other, from bit 0.
fn concat_bits(parts: impl Iterator<Item = BooleanBuffer>) -> BooleanBuffer {
    let mut builder = arrow::array::BooleanBufferBuilder::new(0);
    for part in parts {
        builder.append_buffer(&part);
    }
    builder.finish()
}

/// Uploads `parts` back to back, padded with zeros to a multiple of 8 bytes (so that the
/// kernels' word reads of bitmaps stay inside the buffer).
pub(in crate::cuda) fn upload_bytes(
    device: &Device,
    staging: &mut Staging,
    parts: &[&[u8]],
    what: &'static str,
) -> CudaResult<DeviceBuffer<u8>> {
    let parts = Parts::new(parts);
    let padded = parts.len().div_ceil(8).max(1) * 8;
    staging.upload::<u8, _>(device, padded, what, |start, out| {
        parts.copy_into(start, out)
    })
}

/// A key column the encoder uploaded, kept for the gather.
pub struct DeviceColumn {
    /// The column's input arrays (the key's own, compared by pointer with the run's).
    pub arrays: Vec<ArrayRef>,
    /// Its buffers on the device.
    pub raw: RawColumn,
}
