//! Normalized sort keys: Arrow key columns → order-preserving unsigned words.
//!
//! The whole encoding is specified in `docs/ordering.md`; in short, per key column:
//!
//! ```text
//!  column ──► null flag field (only if the column has nulls)
//!         │     NULLS FIRST: null → 0, value → 1     NULLS LAST: value → 0, null → 1
//!         └─► value limbs  ──DESC: !limb──►  min/max reduction (`reduce`)
//!               fixed width: `limbs`; strings, binaries: a prefix window (`bytes`);
//!               dictionaries: the rank of the value (`dictionary`)
//!
//!  all fields, key by key, flag before value ──► packed MSB-first into 64-bit words (`pack`)
//! ```
//!
//! Comparing the packed words lexicographically as unsigned integers gives exactly the
//! order of arrow's `lexsort` for the given `SortOptions`; ties are rows whose keys are
//! equal, and a stable sort on the words keeps them in input order — except for byte-like
//! values longer than their window: those are listed in [`EncodedKeys::long_keys`] and
//! their ties are ordered after the sort (`crate::sort::refine`).

pub mod bytes;
mod dictionary;
mod limbs;
mod pack;
mod reduce;

use std::ops::Range;

use arrow::array::{Array, ArrayRef};
use arrow::compute::SortOptions;
use arrow::datatypes::DataType;
use datafusion::arrow;
use datafusion::common::{internal_err, Result};

pub use limbs::{limb_from_bytes, limb_sources, unsupported_reason, LimbKind, LimbSource};
pub use pack::{low_mask, placements, Placement};
use reduce::{reduce_field, KeyField};
pub use reduce::{FieldStats, Reduction};

/// One sort key: its values (one array per input batch) and its direction.
#[derive(Debug, Clone)]
pub struct KeyColumn {
    /// The evaluated key expression for each buffered batch, in input order.
    pub arrays: Vec<ArrayRef>,
    /// ASC/DESC and NULLS FIRST/LAST.
    pub options: SortOptions,
}

/// Encoded keys of `rows` rows: `words[w][row]`, word 0 most significant.
#[derive(Debug, Clone, Default)]
pub struct EncodedKeys {
    /// Packed key words, word-major.
    pub words: Vec<Vec<u64>>,
    /// Significant bits over all words; 0 when every row has the same key.
    pub total_bits: u32,
    /// Number of rows.
    pub rows: usize,
    /// Byte-like key columns with values longer than their encoded window, in key order.
    pub long_keys: Vec<LongKey>,
}

/// A byte-like key column whose packed fields hold only a prefix of some values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongKey {
    /// Index of the key column.
    pub column: usize,
    /// Bytes of each value the packed key holds.
    pub window: usize,
    /// Bits of the packed key up to the end of this column's fields.
    pub bits_end: u32,
    /// Whether the column sorts descending.
    pub descending: bool,
}

impl EncodedKeys {
    /// Whether every key fits one 32-bit word (the top 32 bits of `words[0]`).
    pub fn fits_u32(&self) -> bool {
        self.total_bits <= 32
    }

    /// Bytes the packed keys occupy when shipped at their narrowest word width.
    pub fn shipped_bytes(&self) -> usize {
        if self.fits_u32() && self.total_bits > 0 {
            self.rows * 4
        } else {
            self.words.len() * self.rows * 8
        }
    }
}

/// Encodes the sort key columns of one run (string windows as the host chooses them).
pub fn encode_keys(columns: &[KeyColumn]) -> Result<EncodedKeys> {
    encode_keys_windowed(columns, bytes::LIVE_CHUNKS)
}

/// Encodes the sort key columns of one run, a byte-like key's window growing until
/// `live_chunks` of its chunks vary (`bytes::choose_window`).
pub fn encode_keys_windowed(columns: &[KeyColumn], live_chunks: usize) -> Result<EncodedKeys> {
    let rows = columns.first().map_or(0, column_rows);
    let mut fields = Vec::new();
    let mut long_keys = Vec::new();
    for (index, column) in columns.iter().enumerate() {
        if column_rows(column) != rows {
            return internal_err!("gpusort: key columns differ in length");
        }
        let encoded = encode_column(column, rows, live_chunks)?;
        fields.extend(encoded.fields.into_iter().filter(|f| f.width > 0));
        if let Some(window) = encoded.longer_than {
            long_keys.push(LongKey {
                column: index,
                window,
                bits_end: fields.iter().map(|f| f.width).sum(),
                descending: column.options.descending,
            });
        }
    }
    let (words, total_bits) = pack::pack_fields(&fields, rows);
    Ok(EncodedKeys {
        words,
        total_bits,
        rows,
        long_keys,
    })
}

/// Value limbs a key of `data_type` may need per row while encoding (for memory estimates):
/// a string's widest window and its marker, a dictionary's rank, a fixed-width type's limbs.
pub fn working_limbs(data_type: &DataType) -> usize {
    match data_type {
        t if bytes::is_byte_like(t) => bytes::LIVE_CHUNKS + 1,
        DataType::Dictionary(_, _) => 1,
        t => limbs::limb_count(t).max(1),
    }
}

/// Rows of a key column (over all its arrays).
pub fn column_rows(column: &KeyColumn) -> usize {
    column.arrays.iter().map(|a| a.len()).sum()
}

/// The rows `range` of a key column (rows counted across its arrays), none copied.
pub fn slice_column(column: &KeyColumn, range: Range<usize>) -> KeyColumn {
    KeyColumn {
        arrays: slice_arrays(&column.arrays, range),
        options: column.options,
    }
}

/// The rows `range` of one column given as consecutive `arrays`, none copied.
pub fn slice_arrays(arrays: &[ArrayRef], range: Range<usize>) -> Vec<ArrayRef> {
    slice_parts(arrays, range, |a| a.len(), |a, at, len| a.slice(at, len))
}

/// The rows `range` of consecutive `parts` of `len` rows each, cut with `slice` (a part
/// wholly inside is cloned, not cut).
pub fn slice_parts<T: Clone>(
    parts: &[T],
    range: Range<usize>,
    len: impl Fn(&T) -> usize,
    slice: impl Fn(&T, usize, usize) -> T,
) -> Vec<T> {
    let mut out = Vec::new();
    let mut start = 0;
    for part in parts {
        let end = start + len(part);
        let (from, to) = (range.start.max(start), range.end.min(end));
        if from < to {
            out.push(match to - from == len(part) {
                true => part.clone(),
                false => slice(part, from - start, to - from),
            });
        }
        start = end;
        if start >= range.end {
            break;
        }
    }
    out
}

/// The fields of one key column.
struct ColumnFields {
    /// Null flag first, then the value fields.
    fields: Vec<KeyField>,
    /// For a byte-like column with values longer than its window: the window's bytes.
    longer_than: Option<usize>,
}

/// The null-flag field and the value fields of one key column.
fn encode_column(column: &KeyColumn, rows: usize, live_chunks: usize) -> Result<ColumnFields> {
    let data_type = match column.arrays.first() {
        Some(array) => array.data_type().clone(),
        None => {
            return Ok(ColumnFields {
                fields: Vec::new(),
                longer_than: None,
            })
        }
    };
    if let Some(reason) = unsupported_reason(&data_type) {
        return internal_err!("gpusort: {reason}");
    }
    let valid = validity(&column.arrays, &data_type, rows);
    let mut fields = Vec::new();
    if let Some(valid) = &valid {
        fields.push(null_flag_field(valid, column.options.nulls_first));
    }
    let descending = column.options.descending;
    let finish = |mut limb: Vec<u64>| {
        if descending {
            limb.iter_mut().for_each(|v| *v = !*v);
        }
        reduce_field(limb, valid.as_deref())
    };
    let mut longer_than = None;
    if bytes::is_byte_like(&data_type) {
        let valid = valid.as_deref();
        let window =
            bytes::window_fields(&column.arrays, rows, valid, descending, live_chunks, finish)?;
        fields.extend(window.fields);
        longer_than = window.has_longer.then_some(window.window);
    } else if matches!(data_type, DataType::Dictionary(_, _)) {
        fields.push(finish(dictionary::rank_limb(&column.arrays, rows)?));
    } else {
        let mut limbs = vec![Vec::with_capacity(rows); limbs::limb_count(&data_type)];
        for array in &column.arrays {
            limbs::append_limbs(array, &mut limbs)?;
        }
        fields.extend(limbs.into_iter().map(finish));
    }
    Ok(ColumnFields {
        fields,
        longer_than,
    })
}

/// Per-row validity, or `None` when no row is null.
fn validity(arrays: &[ArrayRef], data_type: &DataType, rows: usize) -> Option<Vec<bool>> {
    if *data_type == DataType::Null {
        return Some(vec![false; rows]);
    }
    if arrays.iter().all(|a| a.null_count() == 0) {
        return None;
    }
    let mut valid = Vec::with_capacity(rows);
    for array in arrays {
        match array.logical_nulls() {
            Some(nulls) => valid.extend(nulls.iter()),
            None => valid.extend(std::iter::repeat_n(true, array.len())),
        }
    }
    Some(valid)
}

fn null_flag_field(valid: &[bool], nulls_first: bool) -> KeyField {
    let flag = |is_valid: bool| (is_valid == nulls_first) as u64;
    reduce_field(valid.iter().map(|v| flag(*v)).collect(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int32Array};
    use std::sync::Arc;

    fn order_of(keys: &EncodedKeys) -> Vec<usize> {
        let mut rows: Vec<usize> = (0..keys.rows).collect();
        rows.sort_by_key(|&r| keys.words.iter().map(|w| w[r]).collect::<Vec<_>>());
        rows
    }

    fn opts(descending: bool, nulls_first: bool) -> SortOptions {
        SortOptions {
            descending,
            nulls_first,
        }
    }

    #[test]
    fn nulls_and_directions() {
        let array: ArrayRef = Arc::new(Int32Array::from(vec![Some(3), None, Some(-7), Some(0)]));
        let cases = [
            (opts(false, true), vec![1, 2, 3, 0]),
            (opts(false, false), vec![2, 3, 0, 1]),
            (opts(true, true), vec![1, 0, 3, 2]),
            (opts(true, false), vec![0, 3, 2, 1]),
        ];
        for (options, expected) in cases {
            let keys = encode_keys(&[KeyColumn {
                arrays: vec![array.clone()],
                options,
            }])
            .unwrap();
            assert_eq!(order_of(&keys), expected, "{options:?}");
        }
    }

    #[test]
    fn two_keys_pack_into_few_bits() {
        let a: ArrayRef = Arc::new(Int32Array::from(vec![1, 1, 0, 0]));
        let b: ArrayRef = Arc::new(Float64Array::from(vec![2.0, -0.0, 0.0, -1.0]));
        let keys = encode_keys(&[
            KeyColumn {
                arrays: vec![a],
                options: opts(false, false),
            },
            KeyColumn {
                arrays: vec![b],
                options: opts(true, false),
            },
        ])
        .unwrap();
        // 1 bit for `a`; the floats' sign and low mantissa bits both vary.
        assert!(keys.total_bits > 32 && !keys.fits_u32());
        assert_eq!(order_of(&keys), vec![2, 3, 0, 1]);
    }

    #[test]
    fn narrow_keys_fit_one_u32() {
        let a: ArrayRef = Arc::new(Int32Array::from(vec![Some(1000), None, Some(1003)]));
        let b: ArrayRef = Arc::new(Int32Array::from(vec![-5, 7, 100]));
        let keys = encode_keys(&[
            KeyColumn {
                arrays: vec![a],
                options: opts(false, true),
            },
            KeyColumn {
                arrays: vec![b],
                options: opts(false, false),
            },
        ])
        .unwrap();
        // null flag 1 bit + a: 2 bits + b: 7 bits.
        assert_eq!(keys.total_bits, 10);
        assert!(keys.fits_u32());
        assert_eq!(order_of(&keys), vec![1, 0, 2]);
    }

    #[test]
    fn all_equal_keys_have_no_bits() {
        let a: ArrayRef = Arc::new(Int32Array::from(vec![4; 10]));
        let keys = encode_keys(&[KeyColumn {
            arrays: vec![a],
            options: opts(false, false),
        }])
        .unwrap();
        assert_eq!(keys.total_bits, 0);
        assert!(keys.words.is_empty());
    }
}
