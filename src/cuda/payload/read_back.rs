//! A few values of a payload column read back from the device by input row id
//! ([`DevicePayload::values_at_ids`]): for the page statistics of a run whose input's
//! host copy of the column was handed to the device (`early.rs`, `take_over`), where the
//! host can no longer read them.

use std::sync::Arc;

use arrow::array::{make_array, ArrayData, ArrayRef, BinaryArray, StringArray};
use arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::DataType;
use datafusion::arrow;

use super::{download_nulls, DevicePayload};
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::Device;

impl DevicePayload {
    /// Column `at`'s (its place among the payload's columns) values at input rows `ids`,
    /// in that order, as an array of its type on the host.
    pub(super) fn values_at_ids(
        &self,
        device: &Device,
        at: usize,
        ids: &[u32],
    ) -> CudaResult<ArrayRef> {
        let data_type = self.columns[at].data_type.clone();
        let rows = ids.len();
        if rows == 0 {
            return Ok(arrow::array::new_empty_array(&data_type));
        }
        let order = device.alloc::<u32>(rows, "ids of values read back")?;
        // SAFETY: `ids` outlives the copy: every path below synchronizes the stream (a
        // download) before returning.
        unsafe { device.upload(&order, 0, ids)? };
        let built = if let Some(width) = self.fixed_width(at) {
            if data_type.primitive_width() != Some(width) {
                return Err(CudaError::Inconsistent(format!(
                    "values of {data_type} read back at {width} bytes"
                )));
            }
            let (values, validity) = self.gather_range(device, at, order.ptr(), rows)?;
            let values = Buffer::from_vec(device.download_now(&values)?);
            ArrayData::builder(data_type)
                .len(rows)
                .add_buffer(values.slice_with_length(0, rows * width))
                .nulls(download_nulls(device, validity.as_ref(), rows)?)
                .build()
                .map(make_array)
        } else {
            let gathered = self.gather_range_bytes(device, at, order.ptr(), rows)?;
            let bytes = Buffer::from_vec(device.download_now(&gathered.bytes)?);
            let offsets: Vec<i32> = gathered.host_offsets.iter().map(|&o| o as i32).collect();
            let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
            let nulls = download_nulls(device, gathered.validity.as_ref(), rows)?;
            let array: CudaResult<ArrayRef> = match data_type {
                DataType::Utf8View => StringArray::try_new(offsets, bytes, nulls)
                    .map(|a| Arc::new(a) as ArrayRef)
                    .map_err(|e| CudaError::Inconsistent(e.to_string())),
                DataType::BinaryView => BinaryArray::try_new(offsets, bytes, nulls)
                    .map(|a| Arc::new(a) as ArrayRef)
                    .map_err(|e| CudaError::Inconsistent(e.to_string())),
                other => {
                    return Err(CudaError::Inconsistent(format!(
                        "byte values of {other} read back"
                    )))
                }
            };
            arrow::compute::cast(&array?, &data_type)
        };
        built.map_err(|e| CudaError::Inconsistent(format!("values read back: {e}")))
    }
}
