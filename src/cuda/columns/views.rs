//! Byte-like columns (strings, binaries) on the device as 16-byte Arrow views.
//!
//! ```text
//!  Utf8View, BinaryView      each view as it is; a value longer than 12 bytes names a data
//!                            buffer of its array, renumbered to the run's numbering
//!  Utf8, Binary, Large*      a view made from each value's offsets (its array's values
//!                            buffer is one run buffer)
//!  null rows                 the empty view (never a buffer number)
//!
//!  run buffers: every data buffer of every array, each once (slices of one array share
//!  theirs), uploaded back to back (`ViewData`): the key encoder reads values there, and
//!  the payload gather copies each output batch's long values into that batch's own data
//!  buffer on the device, so output batches are compact and share nothing with the input.
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::builder::make_view;
use arrow::array::{
    Array, ArrayRef, AsArray, ByteView, GenericByteArray, GenericByteViewArray, MAX_INLINE_VIEW_LEN,
};
use arrow::buffer::{Buffer, NullBuffer};
use arrow::datatypes::{BinaryViewType, ByteArrayType, DataType, StringViewType};
use datafusion::arrow;

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;

/// Bytes of one view.
pub(crate) const VIEW_BYTES: usize = 16;
/// Data buffers up to this many bytes per row are uploaded without counting the bytes the
/// views actually read.
const CHEAP_DATA_BYTES_PER_ROW: usize = 64;
/// Data buffers are uploaded when they hold at most this many times the bytes the values
/// read (views into a few rows of huge buffers, as a filter leaves them, stay on the host).
const MOST_DATA_PER_READ_BYTE: usize = 4;
/// Data of any shape up to this size is uploaded.
const SMALL_DATA_BYTES: usize = 64 << 20;

/// Whether `data_type` is a byte-like type the device reads through views.
pub(crate) fn is_view_type(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(
        data_type,
        Utf8View | BinaryView | Utf8 | LargeUtf8 | Binary | LargeBinary
    )
}

/// The run's data buffers of a byte-like column, each once, and which run buffer each
/// array's buffers are.
pub(crate) struct RunBuffers {
    /// Every distinct data buffer, in order of first use.
    pub buffers: Vec<Buffer>,
    /// Per array: the run buffer number of each of its data buffers.
    numbers: Vec<Vec<u32>>,
}

impl RunBuffers {
    /// Numbers the data buffers of `arrays` (all of one byte-like type).
    pub(crate) fn new(arrays: &[ArrayRef]) -> Self {
        let mut buffers = Vec::new();
        let mut seen: HashMap<(usize, usize), u32> = HashMap::new();
        let numbers = arrays
            .iter()
            .map(|array| {
                data_buffers(array)
                    .into_iter()
                    .map(|buffer| {
                        *seen
                            .entry((buffer.as_ptr() as usize, buffer.len()))
                            .or_insert_with(|| {
                                buffers.push(buffer.clone());
                                (buffers.len() - 1) as u32
                            })
                    })
                    .collect()
            })
            .collect();
        Self { buffers, numbers }
    }

    /// Bytes of all data buffers.
    pub(crate) fn bytes(&self) -> usize {
        self.buffers.iter().map(Buffer::len).sum()
    }
}

/// The data buffers an array's views (or offsets) point into.
pub(crate) fn data_buffers(array: &ArrayRef) -> Vec<Buffer> {
    use DataType::*;
    match array.data_type() {
        Utf8View => array.as_string_view().data_buffers().to_vec(),
        BinaryView => array.as_binary_view().data_buffers().to_vec(),
        Utf8 => vec![array.as_string::<i32>().values().clone()],
        LargeUtf8 => vec![array.as_string::<i64>().values().clone()],
        Binary => vec![array.as_binary::<i32>().values().clone()],
        LargeBinary => vec![array.as_binary::<i64>().values().clone()],
        _ => Vec::new(),
    }
}

/// Whether the key encoder should read `arrays` on the device: a byte-like type whose
/// values fit a view (offsets below 4 GiB) and whose data buffers hold mostly bytes the
/// values read.
pub(crate) fn worth_encoding_on_device(arrays: &[ArrayRef]) -> bool {
    let Some(first) = arrays.first() else {
        return true;
    };
    if !is_view_type(first.data_type()) {
        return false;
    }
    let buffers = RunBuffers::new(arrays);
    if buffers.buffers.iter().any(|b| b.len() > u32::MAX as usize) {
        return false;
    }
    let rows: usize = arrays.iter().map(|a| a.len()).sum();
    data_worth_uploading(buffers.bytes(), rows, || {
        arrays.iter().map(read_bytes).sum()
    })
}

/// Whether `data` bytes of data buffers are worth uploading for `rows` rows whose values
/// read `read()` bytes of them (counted only when the size alone does not decide).
fn data_worth_uploading(data: usize, rows: usize, read: impl FnOnce() -> usize) -> bool {
    data <= SMALL_DATA_BYTES
        || data <= CHEAP_DATA_BYTES_PER_ROW.saturating_mul(rows)
        || data <= MOST_DATA_PER_READ_BYTE.saturating_mul(read())
}

/// Bytes of the data buffers that `array`'s values read.
fn read_bytes(array: &ArrayRef) -> usize {
    fn offsets<T: ByteArrayType>(array: &GenericByteArray<T>) -> usize {
        let offsets = array.value_offsets();
        (offsets[offsets.len() - 1] - offsets[0]).as_usize()
    }
    use arrow::datatypes::ArrowNativeType;
    use DataType::*;
    match array.data_type() {
        Utf8View => array.as_string_view().total_buffer_bytes_used(),
        BinaryView => array.as_binary_view().total_buffer_bytes_used(),
        Utf8 => offsets(array.as_string::<i32>()),
        LargeUtf8 => offsets(array.as_string::<i64>()),
        Binary => offsets(array.as_binary::<i32>()),
        LargeBinary => offsets(array.as_binary::<i64>()),
        _ => 0,
    }
}

/// One array's values as views in the run's buffer numbering.
enum ViewSource<'a> {
    /// Views, their buffers renumbered.
    Views {
        views: &'a [u128],
        numbers: &'a [u32],
    },
    /// Offsets into the run buffer `number` (32-bit offsets).
    Offsets32 {
        offsets: &'a [i32],
        data: &'a [u8],
        number: u32,
    },
    /// Offsets into the run buffer `number` (64-bit offsets, below 4 GiB).
    Offsets64 {
        offsets: &'a [i64],
        data: &'a [u8],
        number: u32,
    },
}

impl ViewSource<'_> {
    /// The view of row `i` (not null).
    #[inline]
    fn view(&self, i: usize) -> u128 {
        match *self {
            Self::Views { views, numbers } => {
                let view = views[i];
                if (view as u32) <= MAX_INLINE_VIEW_LEN {
                    return view;
                }
                let mut view = ByteView::from(view);
                view.buffer_index = numbers[view.buffer_index as usize];
                view.as_u128()
            }
            Self::Offsets32 {
                offsets,
                data,
                number,
            } => {
                let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
                make_view(&data[start..end], number, start as u32)
            }
            Self::Offsets64 {
                offsets,
                data,
                number,
            } => {
                let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
                make_view(&data[start..end], number, start as u32)
            }
        }
    }
}

fn view_source<'a>(array: &'a ArrayRef, numbers: &'a [u32]) -> ViewSource<'a> {
    use DataType::*;
    let number = numbers.first().copied().unwrap_or(0);
    match array.data_type() {
        Utf8View => ViewSource::Views {
            views: array.as_string_view().views(),
            numbers,
        },
        BinaryView => ViewSource::Views {
            views: array.as_binary_view().views(),
            numbers,
        },
        Utf8 => {
            let a = array.as_string::<i32>();
            ViewSource::Offsets32 {
                offsets: a.value_offsets(),
                data: a.value_data(),
                number,
            }
        }
        Binary => {
            let a = array.as_binary::<i32>();
            ViewSource::Offsets32 {
                offsets: a.value_offsets(),
                data: a.value_data(),
                number,
            }
        }
        LargeUtf8 => {
            let a = array.as_string::<i64>();
            ViewSource::Offsets64 {
                offsets: a.value_offsets(),
                data: a.value_data(),
                number,
            }
        }
        LargeBinary => {
            let a = array.as_binary::<i64>();
            ViewSource::Offsets64 {
                offsets: a.value_offsets(),
                data: a.value_data(),
                number,
            }
        }
        other => unreachable!("{other} has no views"),
    }
}

/// The run's data buffers on the device, for reading values through the views.
#[derive(Debug)]
pub struct ViewData {
    /// Every run buffer back to back.
    pub data: DeviceBuffer<u8>,
    /// Where run buffer `b` begins in `data`.
    pub starts: DeviceBuffer<u64>,
}

impl ViewData {
    /// The run buffers `data` on the device, with `starts` (where each begins in `data`,
    /// then the total) uploaded as its table.
    pub(crate) fn new(
        device: &Device,
        staging: &mut Staging,
        data: DeviceBuffer<u8>,
        starts: &[u64],
    ) -> CudaResult<Self> {
        let starts =
            staging.upload::<u64, _>(device, starts.len(), "view buffer starts", |at, out| {
                out.copy_from_slice(&starts[at..at + out.len()])
            })?;
        Ok(Self { data, starts })
    }
}

/// Uploads the views of `arrays` in the run numbering of `buffers` (null rows empty);
/// returns them and the bytes copied.
pub(crate) fn upload_views(
    device: &Device,
    staging: &mut Staging,
    arrays: &[ArrayRef],
    buffers: &RunBuffers,
) -> CudaResult<(DeviceBuffer<u8>, usize)> {
    upload_numbered_views(device, staging, arrays, &buffers.numbers)
}

/// Uploads the views of `arrays` (null rows empty), the data buffers of each array
/// numbered as `numbers` says (one list per array, one number per buffer of
/// [`data_buffers`]); returns them and the bytes copied.
pub(crate) fn upload_numbered_views(
    device: &Device,
    staging: &mut Staging,
    arrays: &[ArrayRef],
    numbers: &[Vec<u32>],
) -> CudaResult<(DeviceBuffer<u8>, usize)> {
    assert_eq!(arrays.len(), numbers.len(), "one numbering per array");
    let sources: Vec<(ViewSource, Option<NullBuffer>)> = arrays
        .iter()
        .zip(numbers)
        .map(|(array, numbers)| (view_source(array, numbers), array.logical_nulls()))
        .collect();
    let mut starts = Vec::with_capacity(arrays.len() + 1);
    let mut rows = 0;
    for array in arrays {
        starts.push(rows);
        rows += array.len();
    }
    starts.push(rows);
    let bytes = rows * VIEW_BYTES;
    let views = staging.upload::<u8, _>(device, bytes.max(VIEW_BYTES), "views", |at, out| {
        debug_assert!(at % VIEW_BYTES == 0 && out.len() % VIEW_BYTES == 0);
        let first = at / VIEW_BYTES;
        let mut array = starts.partition_point(|&s| s <= first).saturating_sub(1);
        for (k, slot) in out.chunks_exact_mut(VIEW_BYTES).enumerate() {
            let row = first + k;
            while array + 1 < starts.len() && starts[array + 1] <= row {
                array += 1;
            }
            let view = match sources.get(array) {
                Some((source, nulls)) => {
                    let i = row - starts[array];
                    match nulls {
                        Some(nulls) if nulls.is_null(i) => 0,
                        _ => source.view(i),
                    }
                }
                None => 0,
            };
            slot.copy_from_slice(&view.to_le_bytes());
        }
    })?;
    Ok((views, bytes))
}

/// Uploads every run buffer back to back, and where each begins; returns them and the
/// bytes copied.
pub(crate) fn upload_view_data(
    device: &Device,
    staging: &mut Staging,
    buffers: &[Buffer],
) -> CudaResult<(ViewData, usize)> {
    let parts: Vec<&[u8]> = buffers.iter().map(|b| b.as_slice()).collect();
    let mut starts = Vec::with_capacity(parts.len() + 1);
    let mut total = 0u64;
    for part in &parts {
        starts.push(total);
        total += part.len() as u64;
    }
    starts.push(total);
    let data = crate::cuda::columns::upload_bytes(device, staging, &parts, "view data")?;
    let bytes = data.len() + starts.len() * 8;
    Ok((ViewData::new(device, staging, data, &starts)?, bytes))
}

/// The output array of one batch gathered on the device: its views (long values pointing
/// into `data` as buffer 0, null rows empty) and the bytes of its long values.
pub(crate) fn views_array(
    data_type: &DataType,
    views: Buffer,
    data: Buffer,
    len: usize,
    nulls: Option<NullBuffer>,
) -> ArrayRef {
    let views = arrow::buffer::ScalarBuffer::<u128>::new(views, 0, len);
    let buffers = if data.is_empty() {
        Vec::new()
    } else {
        vec![data]
    };
    // SAFETY: each view is the view of a valid value of this type (or the empty view of a
    // null row); a long one points at that value's bytes, copied whole into `data`
    // (`kernels/gather.cu`: copy_view_bytes).
    match data_type {
        DataType::Utf8View => Arc::new(unsafe {
            GenericByteViewArray::<StringViewType>::new_unchecked(views, buffers, nulls)
        }),
        _ => Arc::new(unsafe {
            GenericByteViewArray::<BinaryViewType>::new_unchecked(views, buffers, nulls)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{LargeStringArray, StringArray, StringViewArray};

    fn all_views(arrays: &[ArrayRef]) -> (Vec<u128>, RunBuffers) {
        let buffers = RunBuffers::new(arrays);
        let mut out = Vec::new();
        for (array, numbers) in arrays.iter().zip(&buffers.numbers) {
            let source = view_source(array, numbers);
            let nulls = array.logical_nulls();
            for i in 0..array.len() {
                out.push(match &nulls {
                    Some(n) if n.is_null(i) => 0,
                    _ => source.view(i),
                });
            }
        }
        (out, buffers)
    }

    /// The values the views of `arrays` name, read through the run buffers.
    fn read_back(arrays: &[ArrayRef]) -> Vec<Option<Vec<u8>>> {
        let (views, buffers) = all_views(arrays);
        let nulls: Vec<bool> = arrays
            .iter()
            .flat_map(|a| (0..a.len()).map(|i| a.is_null(i)).collect::<Vec<_>>())
            .collect();
        views
            .iter()
            .zip(nulls)
            .map(|(&view, null)| {
                if null {
                    assert_eq!(view, 0, "a null row's view is empty");
                    return None;
                }
                let len = view as u32 as usize;
                if len <= MAX_INLINE_VIEW_LEN as usize {
                    return Some(view.to_le_bytes()[4..4 + len].to_vec());
                }
                let view = ByteView::from(view);
                let buffer = &buffers.buffers[view.buffer_index as usize];
                let at = view.offset as usize;
                Some(buffer.as_slice()[at..at + len].to_vec())
            })
            .collect()
    }

    #[test]
    fn views_in_run_numbering_read_the_same_values() {
        let long = |s: &str| format!("{s} is longer than twelve bytes");
        let whole: ArrayRef = Arc::new(StringViewArray::from(vec![
            Some("short".to_string()),
            Some(long("a")),
            None,
            Some(long("b")),
        ]));
        let arrays: Vec<ArrayRef> = vec![
            whole.slice(0, 2),
            Arc::new(StringArray::from(vec![
                Some(long("c")),
                None,
                Some("x".into()),
            ])),
            whole.slice(2, 2),
            Arc::new(LargeStringArray::from(vec![long("d")]).slice(0, 1)),
        ];
        let (_, buffers) = all_views(&arrays);
        // The view array's one buffer once (its slices share it), then the two offsets arrays'.
        assert_eq!(buffers.buffers.len(), 3);
        let expected: Vec<Option<Vec<u8>>> = [
            Some("short".to_string()),
            Some(long("a")),
            Some(long("c")),
            None,
            Some("x".into()),
            None,
            Some(long("b")),
            Some(long("d")),
        ]
        .into_iter()
        .map(|v| v.map(String::into_bytes))
        .collect();
        assert_eq!(read_back(&arrays), expected);
    }

    #[test]
    fn only_buffers_mostly_read_are_worth_uploading() {
        let values: Vec<String> = (0..1000).map(|i| format!("value number {i:08}")).collect();
        let array: ArrayRef = Arc::new(StringArray::from(values));
        assert!(worth_encoding_on_device(std::slice::from_ref(&array)));
        assert!(worth_encoding_on_device(&[array.slice(10, 5)]));
        assert!(!worth_encoding_on_device(&[
            Arc::new(arrow::array::Int32Array::from(vec![1])) as ArrayRef
        ]));
        let gib = 1 << 30;
        assert!(data_worth_uploading(gib, 1 << 25, || unreachable!(
            "decided by size"
        )));
        assert!(data_worth_uploading(gib, 1000, || gib / 2));
        assert!(!data_worth_uploading(gib, 1000, || gib / 100));
    }
}
