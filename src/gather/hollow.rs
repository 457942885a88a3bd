//! Stand-ins for input arrays whose values are held elsewhere (on the device): an array
//! of the same type, length and validity whose values buffer is a slice of one shared
//! buffer of zeros ([`hollow_array`]), so that a sort's buffered batch keeps its shape
//! (schema, rows, nulls) while the host memory of its values is freed.
//!
//! A stand-in's values are not the input's: every host path that would read them
//! ([`is_hollow`]) must fail instead (the run's host gather does: `RunRows::gather_columns`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use arrow::array::{make_array, Array, ArrayData, ArrayRef};
use arrow::buffer::Buffer;
use arrow::datatypes::DataType;
use datafusion::arrow;

/// The most bytes of values one stand-in takes from the shared zeros: larger arrays are
/// not replaced (a batch of 1 Mi rows of 16-byte values). The zeros are never written,
/// so their pages cost little or no resident memory.
pub(super) const MOST_HOLLOW_BYTES: usize = 16 << 20;

/// Whether this process made a stand-in yet: until it does, no array is one, and the
/// host's gathers skip looking.
static MADE_ANY: AtomicBool = AtomicBool::new(false);

/// Whether any stand-in was made in this process.
pub(super) fn any_made() -> bool {
    MADE_ANY.load(Ordering::Relaxed)
}

/// The shared zeros every stand-in's values are a slice of.
fn zeros() -> &'static Buffer {
    static ZEROS: OnceLock<Buffer> = OnceLock::new();
    ZEROS.get_or_init(|| Buffer::from_vec(vec![0u8; MOST_HOLLOW_BYTES]))
}

/// A stand-in for `array` (a fixed-width array of `width`-byte values, or a view array
/// whose views are `width` = 16 bytes): same type, length and validity, values all zero
/// (a view array's views then say "empty", and it has no data buffers). `None` where the
/// array is too long, nested, or of another shape.
pub fn hollow_array(array: &ArrayRef, width: usize) -> Option<ArrayRef> {
    let bytes = array.len().checked_mul(width)?;
    if bytes > MOST_HOLLOW_BYTES {
        return None;
    }
    let fits = match array.data_type() {
        DataType::Utf8View | DataType::BinaryView => width == 16,
        t => t.primitive_width() == Some(width),
    };
    if !fits {
        return None;
    }
    MADE_ANY.store(true, Ordering::Relaxed);
    let data = ArrayData::builder(array.data_type().clone())
        .len(array.len())
        .nulls(array.logical_nulls())
        .add_buffer(zeros().slice_with_length(0, bytes))
        .build()
        .ok()?;
    Some(make_array(data))
}

/// Whether `array` is a stand-in made by [`hollow_array`].
pub fn is_hollow(array: &dyn Array) -> bool {
    if !any_made() {
        return false;
    }
    let data = array.to_data();
    let Some(values) = data.buffers().first() else {
        return false;
    };
    let zeros = zeros();
    let (start, end) = (
        zeros.as_ptr() as usize,
        zeros.as_ptr() as usize + zeros.len(),
    );
    let at = values.as_ptr() as usize;
    at >= start && at < end && data.child_data().is_empty()
}

/// Whether any of `arrays` is a stand-in.
pub fn any_hollow(arrays: &[ArrayRef]) -> bool {
    arrays.iter().any(|a| is_hollow(a.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringViewArray};
    use std::sync::Arc;

    #[test]
    fn stand_ins_keep_type_length_and_nulls_and_are_recognised() {
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![Some(5), None, Some(7)]));
        let hollow = hollow_array(&ints, 8).unwrap();
        assert_eq!(hollow.data_type(), ints.data_type());
        assert_eq!(hollow.len(), 3);
        assert_eq!(hollow.logical_nulls(), ints.logical_nulls());
        assert!(is_hollow(hollow.as_ref()));
        assert!(!is_hollow(ints.as_ref()));
        let strings: ArrayRef = Arc::new(StringViewArray::from(vec![
            Some("a string longer than twelve bytes"),
            None,
        ]));
        let hollow = hollow_array(&strings, 16).unwrap();
        assert_eq!(hollow.data_type(), strings.data_type());
        assert_eq!(hollow.null_count(), 1);
        assert!(any_hollow(&[strings.clone(), hollow]));
        assert!(!any_hollow(&[strings]));
        // A sliced input keeps its own rows' validity.
        let sliced = ints.slice(1, 2);
        let hollow = hollow_array(&sliced, 8).unwrap();
        assert_eq!(hollow.logical_nulls(), sliced.logical_nulls());
        // Too wide a width, or too many rows, is refused.
        assert!(hollow_array(&ints, 4).is_none());
        let long: ArrayRef = Arc::new(Int64Array::from(vec![0; MOST_HOLLOW_BYTES / 8 + 1]));
        assert!(hollow_array(&long, 8).is_none());
    }
}
