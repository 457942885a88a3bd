//! Gatherers for strings and binaries, prepared once per run.
//!
//! ```text
//!  views (Utf8View, BinaryView):
//!     once: every input array's views and data buffers; the run's buffers numbered
//!           array by array (array a's buffer i is run buffer first[a] + i)
//!     per output batch: copy each row's 16-byte view; a value longer than 12 bytes points
//!           into a data buffer, renumbered to its place among the buffers this batch
//!           reads (so an output batch holds only the buffers it uses, never a copy)
//!     or, where the run asks for compact views (`Views::Copied`): the values longer than
//!           12 bytes copied into one new buffer, so the batch pins nothing of its input
//!           (a merge's windows: their input is read back from disk and must go)
//!  offsets (Utf8, LargeUtf8, Binary, LargeBinary):
//!     per output batch: new offsets, then the values' bytes copied behind them
//! ```
//!
//! Null rows get an empty value (an all-zero view, or no bytes).

use std::marker::PhantomData;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, ByteView, GenericByteArray, GenericByteViewArray, MAX_INLINE_VIEW_LEN,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    ArrowNativeType, BinaryType, BinaryViewType, ByteArrayType, ByteViewType, DataType,
    LargeBinaryType, LargeUtf8Type, StringViewType, Utf8Type,
};
use datafusion::arrow;
use datafusion::common::{exec_err, Result};

use super::columns::{gather_nulls, input_nulls, ColumnGather, RowAt};

/// How gathered view arrays hold their values' bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Views {
    /// Pointing into the input's data buffers.
    Shared,
    /// Copied into buffers of their own.
    Copied,
}

/// The gatherer for string and binary columns, or `None` for other types.
pub(super) fn byte_gatherer(arrays: &[ArrayRef], views: Views) -> Option<Box<dyn ColumnGather>> {
    use DataType::*;
    let gather: Box<dyn ColumnGather> = match arrays.first()?.data_type() {
        Utf8View => Box::new(ViewGather::<StringViewType>::new(arrays, views)),
        BinaryView => Box::new(ViewGather::<BinaryViewType>::new(arrays, views)),
        Utf8 => Box::new(OffsetGather::<Utf8Type>::new(arrays)),
        LargeUtf8 => Box::new(OffsetGather::<LargeUtf8Type>::new(arrays)),
        Binary => Box::new(OffsetGather::<BinaryType>::new(arrays)),
        LargeBinary => Box::new(OffsetGather::<LargeBinaryType>::new(arrays)),
        _ => return None,
    };
    Some(gather)
}

/// Views copied, data buffers shared.
struct ViewGather<T: ByteViewType> {
    views: Vec<ScalarBuffer<u128>>,
    /// Every data buffer of the run, array by array.
    buffers: Vec<Buffer>,
    /// Run buffer number of each input array's buffer 0.
    first: Vec<u32>,
    nulls: Option<Vec<Option<NullBuffer>>>,
    /// Whether values are copied.
    copied: bool,
    _type: PhantomData<T>,
}

impl<T: ByteViewType> ViewGather<T> {
    fn new(arrays: &[ArrayRef], views: Views) -> Self {
        let typed: Vec<&GenericByteViewArray<T>> =
            arrays.iter().map(|a| a.as_byte_view::<T>()).collect();
        let mut buffers = Vec::new();
        let mut first = Vec::with_capacity(typed.len());
        for array in &typed {
            first.push(buffers.len() as u32);
            buffers.extend(array.data_buffers().iter().cloned());
        }
        Self {
            views: typed.iter().map(|a| a.views().clone()).collect(),
            buffers,
            first,
            nulls: input_nulls(arrays),
            copied: views == Views::Copied,
            _type: PhantomData,
        }
    }

    /// The views of `rows` (0, the empty inline view, for a null row), each out-of-line
    /// view passed to `relocate` with the run buffer its bytes are in, to be pointed at the
    /// buffer the output holds them in.
    fn gathered_views(
        &self,
        rows: &[RowAt],
        nulls: Option<&NullBuffer>,
        mut relocate: impl FnMut(ByteView, usize) -> ByteView,
    ) -> ScalarBuffer<u128> {
        rows.iter()
            .enumerate()
            .map(|(i, at)| {
                if nulls.is_some_and(|n| n.is_null(i)) {
                    return 0;
                }
                let view = self.views[at.batch as usize][at.row as usize];
                if (view as u32) <= MAX_INLINE_VIEW_LEN {
                    return view;
                }
                let view = ByteView::from(view);
                let run_buffer = (self.first[at.batch as usize] + view.buffer_index) as usize;
                relocate(view, run_buffer).as_u128()
            })
            .collect()
    }

    /// The views of `rows`, their long values copied into new buffers (a new buffer is
    /// started before one would pass [`MAX_COPY_BUFFER`] bytes).
    fn gather_copied(&self, rows: &[RowAt], nulls: Option<NullBuffer>) -> ArrayRef {
        let mut buffers: Vec<Buffer> = Vec::new();
        let mut data: Vec<u8> = Vec::new();
        let views = self.gathered_views(rows, nulls.as_ref(), |mut view, run_buffer| {
            let start = view.offset as usize;
            let bytes = &self.buffers[run_buffer][start..start + view.length as usize];
            if data.len() + bytes.len() > MAX_COPY_BUFFER {
                buffers.push(Buffer::from_vec(std::mem::take(&mut data)));
            }
            view.buffer_index = buffers.len() as u32;
            view.offset = data.len() as u32;
            data.extend_from_slice(bytes);
            view
        });
        if !data.is_empty() {
            buffers.push(Buffer::from_vec(data));
        }
        // SAFETY: each view is a valid view of an input array of this type (or the empty
        // inline view for a null row); an out-of-line view keeps its length and its prefix,
        // and points at a copy of its bytes.
        Arc::new(unsafe { GenericByteViewArray::<T>::new_unchecked(views, buffers, nulls) })
    }
}

/// Copied view values go into buffers of at most this many bytes (view offsets are 32-bit).
const MAX_COPY_BUFFER: usize = 1 << 30;

impl<T: ByteViewType> ColumnGather for ViewGather<T> {
    fn gather(&self, rows: &[RowAt]) -> Result<ArrayRef> {
        let nulls = gather_nulls(self.nulls.as_ref(), rows);
        if self.copied {
            return Ok(self.gather_copied(rows, nulls));
        }
        let mut slot_of = vec![u32::MAX; self.buffers.len()];
        let mut used: Vec<Buffer> = Vec::new();
        let views = self.gathered_views(rows, nulls.as_ref(), |mut view, run_buffer| {
            let slot = &mut slot_of[run_buffer];
            if *slot == u32::MAX {
                *slot = used.len() as u32;
                used.push(self.buffers[run_buffer].clone());
            }
            view.buffer_index = *slot;
            view
        });
        // SAFETY: each view is a valid view of an input array of this type (or the empty
        // inline view for a null row); an out-of-line view keeps its offset and length and
        // points at the same buffer under its new number in `used`.
        let array = unsafe { GenericByteViewArray::<T>::new_unchecked(views, used, nulls) };
        Ok(Arc::new(array))
    }
}

/// Values copied behind new offsets.
struct OffsetGather<T: ByteArrayType> {
    arrays: Vec<GenericByteArray<T>>,
    nulls: Option<Vec<Option<NullBuffer>>>,
}

impl<T: ByteArrayType> OffsetGather<T> {
    fn new(arrays: &[ArrayRef]) -> Self {
        let typed: Vec<GenericByteArray<T>> =
            arrays.iter().map(|a| a.as_bytes::<T>().clone()).collect();
        Self {
            arrays: typed,
            nulls: input_nulls(arrays),
        }
    }

    fn bytes(&self, at: RowAt) -> &[u8] {
        let array = &self.arrays[at.batch as usize];
        let offsets = array.value_offsets();
        let row = at.row as usize;
        &array.value_data()[offsets[row].as_usize()..offsets[row + 1].as_usize()]
    }
}

impl<T: ByteArrayType> ColumnGather for OffsetGather<T> {
    fn gather(&self, rows: &[RowAt]) -> Result<ArrayRef> {
        let nulls = gather_nulls(self.nulls.as_ref(), rows);
        let is_null = |i: usize| nulls.as_ref().is_some_and(|n| n.is_null(i));
        let mut offsets = Vec::with_capacity(rows.len() + 1);
        offsets.push(T::Offset::usize_as(0));
        let mut total = 0usize;
        for (i, at) in rows.iter().enumerate() {
            if !is_null(i) {
                total += self.bytes(*at).len();
            }
            match T::Offset::from_usize(total) {
                Some(offset) => offsets.push(offset),
                None => {
                    return exec_err!(
                        "gpusort: gathered {} values overflow their offsets",
                        T::PREFIX
                    )
                }
            }
        }
        let mut values = Vec::with_capacity(total);
        for (i, at) in rows.iter().enumerate() {
            if !is_null(i) {
                values.extend_from_slice(self.bytes(*at));
            }
        }
        // SAFETY: the offsets start at 0 and never decrease, the last one is the length of
        // `values`; each value is the bytes of a valid value of this type (whole UTF-8
        // strings for the string types), so the concatenation is valid too.
        let array = unsafe {
            GenericByteArray::<T>::new_unchecked(
                OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)),
                Buffer::from_vec(values),
                nulls,
            )
        };
        Ok(Arc::new(array))
    }
}

#[cfg(test)]
mod tests {
    use super::super::columns::at;
    use super::*;
    use arrow::array::{BinaryArray, StringViewArray};

    #[test]
    fn views_keep_only_the_buffers_they_read() {
        let long = |s: &str| format!("{s} is longer than twelve bytes");
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringViewArray::from(vec![
                Some("short"),
                Some(&long("a")),
                None,
            ])),
            Arc::new(StringViewArray::from(vec![
                Some(long("b")),
                Some("x".into()),
            ])),
            Arc::new(StringViewArray::from(vec![long("c")])),
        ];
        let rows = at(&[(1, 0), (0, 2), (0, 0), (0, 1), (1, 1)]);
        let out = byte_gatherer(&arrays, Views::Shared)
            .unwrap()
            .gather(&rows)
            .unwrap();
        let out = out.as_string_view();
        let expected = StringViewArray::from(vec![
            Some(long("b")),
            None,
            Some("short".into()),
            Some(long("a")),
            Some("x".into()),
        ]);
        assert_eq!(out, &expected);
        // Arrays 0 and 1 hold one buffer each; array 2's is not read.
        assert_eq!(out.data_buffers().len(), 2);
        // Copied: the same values in one buffer of their own, holding only the long ones.
        let copied = byte_gatherer(&arrays, Views::Copied)
            .unwrap()
            .gather(&rows)
            .unwrap();
        let copied = copied.as_string_view();
        assert_eq!(copied, &expected);
        assert_eq!(copied.data_buffers().len(), 1);
        assert_eq!(
            copied.data_buffers()[0].len(),
            long("b").len() + long("a").len()
        );
        let input = arrays[0].as_string_view().data_buffers()[0].as_ptr();
        assert_ne!(copied.data_buffers()[0].as_ptr(), input);
    }

    #[test]
    fn offsets_copy_values_and_nulls() {
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(BinaryArray::from(vec![Some(b"ab".as_slice()), None])),
            Arc::new(BinaryArray::from(vec![b"".as_slice(), b"xyz"]).slice(1, 1)),
        ];
        let out = byte_gatherer(&arrays, Views::Shared)
            .unwrap()
            .gather(&at(&[(1, 0), (0, 1), (0, 0)]))
            .unwrap();
        let expected = BinaryArray::from(vec![Some(b"xyz".as_slice()), None, Some(b"ab")]);
        assert_eq!(out.as_binary::<i32>(), &expected);
    }
}
