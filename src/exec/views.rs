//! String and binary view arrays whose values live in buffers they share with other arrays.
//!
//! A view array made by a gather or a merge points into the data buffers of the arrays its
//! rows came from, and keeps every one of those buffers alive, however few of its bytes it
//! uses. A merge of spilled runs makes its output this way from the IPC bodies it read
//! back: each output batch then pins whole spilled batches (all their columns) for as long
//! as a consumer holds it, and `get_array_memory_size` counts each of those buffers in
//! full. This module measures such arrays by what they use and compacts the ones that pin
//! far more than that.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, GenericByteViewArray, RecordBatch};
use arrow::datatypes::{ByteViewType, DataType};
use datafusion::arrow;
use datafusion::common::Result;

/// A view array is compacted when the data buffers it pins take more than this many times
/// the bytes its values use (plus [`COMPACT_SLACK_BYTES`]).
const COMPACT_RATIO: usize = 2;

/// Pinned bytes below this are never worth a copy.
const COMPACT_SLACK_BYTES: usize = 64 << 10;

/// The memory `batch` takes once written to an IPC file and read back (the spill writer
/// compacts view arrays): the sum of [`array_memory`] over its columns.
pub(super) fn memory_when_compact(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|a| array_memory(a.as_ref()))
        .sum()
}

/// The memory `array` takes by what it uses: a view array counts its views, nulls and the
/// value bytes not inlined in its views (not the whole buffers it points into); other
/// arrays count as `get_array_memory_size` says.
pub(crate) fn array_memory(array: &dyn Array) -> usize {
    match array.data_type() {
        DataType::Utf8View => view_memory(array.as_string_view()),
        DataType::BinaryView => view_memory(array.as_binary_view()),
        _ => array.get_array_memory_size(),
    }
}

fn view_memory<T: ByteViewType + ?Sized>(array: &GenericByteViewArray<T>) -> usize {
    let nulls = array.nulls().map_or(0, |n| n.buffer().capacity());
    16 * array.len() + nulls + array.total_buffer_bytes_used()
}

/// `batch` with every view column that pins much more than it uses copied into buffers of
/// its own (top-level columns; views nested in lists or structs are left as they are).
/// Columns that need nothing are shared, not copied.
pub(super) fn compact_views(batch: RecordBatch) -> Result<RecordBatch> {
    if !batch.columns().iter().any(needs_compaction) {
        return Ok(batch);
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|array| match array.data_type() {
            DataType::Utf8View if needs_compaction(array) => {
                Arc::new(array.as_string_view().gc()) as ArrayRef
            }
            DataType::BinaryView if needs_compaction(array) => {
                Arc::new(array.as_binary_view().gc()) as ArrayRef
            }
            _ => Arc::clone(array),
        })
        .collect();
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

fn needs_compaction(array: &ArrayRef) -> bool {
    match array.data_type() {
        DataType::Utf8View => pins_too_much(array.as_string_view()),
        DataType::BinaryView => pins_too_much(array.as_binary_view()),
        _ => false,
    }
}

fn pins_too_much<T: ByteViewType + ?Sized>(array: &GenericByteViewArray<T>) -> bool {
    let pinned: usize = array.data_buffers().iter().map(|b| b.capacity()).sum();
    pinned > COMPACT_RATIO * array.total_buffer_bytes_used() + COMPACT_SLACK_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringViewArray, UInt32Array};
    use arrow::compute::take;
    use arrow::datatypes::{Field, Schema};

    fn batch(strings: ArrayRef) -> RecordBatch {
        let ids = Arc::new(Int32Array::from_iter_values(0..strings.len() as i32));
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("s", DataType::Utf8View, true),
        ]);
        RecordBatch::try_new(Arc::new(schema), vec![ids, strings]).unwrap()
    }

    #[test]
    fn a_few_rows_taken_from_a_large_array_are_compacted() {
        let long: StringViewArray = (0..100_000)
            .map(|i| Some(format!("a value long enough not to be inlined {i}")))
            .collect();
        let few = take(&long, &UInt32Array::from(vec![5, 99_999, 7]), None).unwrap();
        let pinned = batch(few);
        assert!(pinned.get_array_memory_size() > 4 << 20);
        let compact = compact_views(pinned.clone()).unwrap();
        assert_eq!(compact, pinned);
        assert!(compact.get_array_memory_size() < 1 << 10);
        // Measured by what it uses, the pinned batch is as small as the compact one.
        assert!(memory_when_compact(&pinned) < 1 << 10);
        // The id column is shared, not copied.
        assert!(Arc::ptr_eq(pinned.column(0), compact.column(0)));
    }

    #[test]
    fn arrays_using_their_buffers_are_left_alone() {
        let own: StringViewArray = (0..1000)
            .map(|i| Some(format!("a value long enough not to be inlined {i}")))
            .collect();
        let whole = batch(Arc::new(own));
        let same = compact_views(whole.clone()).unwrap();
        assert!(Arc::ptr_eq(whole.column(1), same.column(1)));
    }
}
