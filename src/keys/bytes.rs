//! Byte-like sort keys (strings, binaries, fixed-size binaries): a prefix window of each
//! value as order-preserving limbs, and row access to the values for refining ties.
//!
//! Arrow orders these values bytewise, a proper prefix before any longer value
//! (`"ab" < "ab\0" < "abc"`). A window of `8·c` bytes encodes a value of `len` bytes as
//!
//! ```text
//!  chunk limbs   bytes 8i .. 8i+8 of the value, big-endian, zero-padded    (i < c)
//!  length marker min(len, 8·c + 1)
//! ```
//!
//! Comparing (chunks…, marker) lexicographically orders the values by their first `8·c`
//! bytes exactly: where one value has ended its padding zeros compare at or below any byte
//! of the other, and if all bytes agree the marker puts the shorter value first. Values
//! longer than the window (marker `8·c + 1`) with equal chunks tie; `sort::refine` orders
//! them after the sort by the bytes past the window.
//!
//! The window grows chunk by chunk. A chunk that is the same in every row — a prefix all
//! values share, such as `https://www.` — is left out of the key (min/max reduction gives it
//! no bits), so chunks are added until [`LIVE_CHUNKS`] of them vary ([`DEVICE_LIVE_CHUNKS`]
//! when the device encodes: a key word costs it little), every value ends inside the
//! window, or the window reaches [`MAX_CHUNKS`] chunks. One scan over the values gathers
//! the statistics of all candidate chunks; only the varying ones are then written.

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryViewArray, FixedSizeBinaryArray, GenericByteArray,
    StringViewArray,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{
    ArrowNativeType, BinaryType, ByteArrayType, DataType, LargeBinaryType, LargeUtf8Type, Utf8Type,
};
use datafusion::arrow;
use datafusion::common::{internal_err, Result};
use rayon::prelude::*;

use super::reduce::{FieldStats, KeyField, Reduction};

/// Chunks that must vary before the host encoder's window stops growing. Wider windows
/// cost key words (on the CPU, eight more digit passes each); narrower ones leave more ties
/// to the refinement, which reads values at random.
pub const LIVE_CHUNKS: usize = 4;
/// The device encoder's: every chunk up to [`MAX_CHUNKS`], so that values of up to 64 bytes
/// leave no ties to the host's refinement. A key word costs the device eight digit passes
/// (about 5 ms per 60 M rows on an H100); ties past a 32-byte window cost the host's
/// refinement 3.8 s on TPC-H `l_comment` at scale factor 10 (docs/performance.md).
pub const DEVICE_LIVE_CHUNKS: usize = MAX_CHUNKS;
/// Most chunks in a window (bytes past `8 * MAX_CHUNKS` are left to the refinement).
pub const MAX_CHUNKS: usize = 8;

/// Whether values of `data_type` are compared as byte strings.
pub fn is_byte_like(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(
        data_type,
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_)
    )
}

/// One array of byte-like values, downcast once.
#[derive(Debug, Clone, Copy)]
enum ByteArray<'a> {
    Utf8(&'a GenericByteArray<Utf8Type>),
    LargeUtf8(&'a GenericByteArray<LargeUtf8Type>),
    Binary(&'a GenericByteArray<BinaryType>),
    LargeBinary(&'a GenericByteArray<LargeBinaryType>),
    Utf8View(&'a StringViewArray),
    BinaryView(&'a BinaryViewArray),
    Fixed(&'a FixedSizeBinaryArray),
}

impl<'a> ByteArray<'a> {
    fn new(array: &'a ArrayRef) -> Result<Self> {
        use DataType::*;
        Ok(match array.data_type() {
            Utf8 => Self::Utf8(array.as_string::<i32>()),
            LargeUtf8 => Self::LargeUtf8(array.as_string::<i64>()),
            Binary => Self::Binary(array.as_binary::<i32>()),
            LargeBinary => Self::LargeBinary(array.as_binary::<i64>()),
            Utf8View => Self::Utf8View(array.as_string_view()),
            BinaryView => Self::BinaryView(array.as_binary_view()),
            FixedSizeBinary(_) => Self::Fixed(array.as_fixed_size_binary()),
            other => return internal_err!("gpusort: {other} is not a byte-like key type"),
        })
    }

    /// The bytes of value `i` (whatever lies under a null slot).
    #[inline]
    fn value(self, i: usize) -> &'a [u8] {
        fn offsets<T: ByteArrayType>(array: &GenericByteArray<T>, i: usize) -> &[u8] {
            let offsets = array.value_offsets();
            let (start, end) = (offsets[i].as_usize(), offsets[i + 1].as_usize());
            &array.value_data()[start..end]
        }
        match self {
            Self::Utf8(a) => offsets(a, i),
            Self::LargeUtf8(a) => offsets(a, i),
            Self::Binary(a) => offsets(a, i),
            Self::LargeBinary(a) => offsets(a, i),
            Self::Utf8View(a) => a.value(i).as_bytes(),
            Self::BinaryView(a) => a.value(i),
            Self::Fixed(a) => a.value(i),
        }
    }
}

/// The values of one byte-like key column over all its arrays, addressed by run row.
#[derive(Debug)]
pub struct ByteValues<'a> {
    arrays: Vec<ByteArray<'a>>,
    /// Each array's logical nulls.
    nulls: Vec<Option<NullBuffer>>,
    /// Run row of each array's first row, and the run's row count last.
    starts: Vec<usize>,
}

impl<'a> ByteValues<'a> {
    /// The values of `arrays` (one per batch, in run order).
    pub fn new(arrays: &'a [ArrayRef]) -> Result<Self> {
        let mut starts = Vec::with_capacity(arrays.len() + 1);
        let mut row = 0;
        for array in arrays {
            starts.push(row);
            row += array.len();
        }
        starts.push(row);
        let nulls = arrays.iter().map(|a| a.logical_nulls()).collect();
        let arrays = arrays.iter().map(ByteArray::new).collect::<Result<_>>()?;
        Ok(Self {
            arrays,
            nulls,
            starts,
        })
    }

    /// The array holding run row `row`, and the row's index in it.
    #[inline]
    fn locate(&self, row: usize) -> (usize, usize) {
        let array = self.starts.partition_point(|&s| s <= row) - 1;
        (array, row - self.starts[array])
    }

    /// The bytes of run row `row` (whatever lies under a null slot).
    #[inline]
    pub fn value(&self, row: usize) -> &'a [u8] {
        let (array, index) = self.locate(row);
        self.arrays[array].value(index)
    }

    /// The bytes of run row `row`, or `None` when it is null.
    #[inline]
    pub fn get(&self, row: usize) -> Option<&'a [u8]> {
        let (array, index) = self.locate(row);
        let is_null = self.nulls[array].as_ref().is_some_and(|n| n.is_null(index));
        (!is_null).then(|| self.arrays[array].value(index))
    }

    /// Fills `out[row]` with `f(row, value of row)` for every run row, in parallel by array.
    fn map_into<T: Send>(&self, out: &mut [T], f: impl Fn(usize, &[u8]) -> T + Sync) {
        let mut pieces = Vec::with_capacity(self.arrays.len());
        let mut rest = out;
        for (i, array) in self.arrays.iter().enumerate() {
            let (piece, tail) = rest.split_at_mut(self.starts[i + 1] - self.starts[i]);
            pieces.push((*array, self.starts[i], piece));
            rest = tail;
        }
        pieces.into_par_iter().for_each(|(array, start, piece)| {
            for (i, slot) in piece.iter_mut().enumerate() {
                *slot = f(start + i, array.value(i));
            }
        });
    }

    /// Folds `f` over the valid rows (`valid`: `None` when all are), in parallel by array.
    fn fold_valid<A: Send + Clone + Sync>(
        &self,
        valid: Option<&[bool]>,
        init: A,
        f: impl Fn(A, &[u8]) -> A + Sync,
        merge: impl Fn(A, A) -> A + Sync + Send,
    ) -> A {
        (0..self.arrays.len())
            .into_par_iter()
            .map(|i| {
                let (array, start) = (self.arrays[i], self.starts[i]);
                (0..self.starts[i + 1] - start)
                    .filter(|row| valid.is_none_or(|valid| valid[start + row]))
                    .fold(init.clone(), |acc, row| f(acc, array.value(row)))
            })
            .reduce(|| init.clone(), merge)
    }
}

/// Bytes `start .. start + 8` of `value` as a big-endian `u64`, zero-padded.
#[inline]
pub fn chunk_at(value: &[u8], start: usize) -> u64 {
    match value.get(start..start + 8) {
        Some(bytes) => u64::from_be_bytes(bytes.try_into().expect("8 bytes")),
        None => {
            let mut buf = [0u8; 8];
            if start < value.len() {
                buf[..value.len() - start].copy_from_slice(&value[start..]);
            }
            u64::from_be_bytes(buf)
        }
    }
}

/// The length marker of a value of `len` bytes in a window of `window` bytes.
#[inline]
pub fn length_marker(len: usize, window: usize) -> u64 {
    len.min(window + 1) as u64
}

/// The fields of a byte-like key column: its window's chunks, then the length marker.
pub struct WindowFields {
    /// The chunk fields that vary, then the marker's (fields of width 0 dropped).
    pub fields: Vec<KeyField>,
    /// Bytes the chunks cover.
    pub window: usize,
    /// Whether a valid value is longer than the window (its ties need refining).
    pub has_longer: bool,
}

/// What one scan over a column's valid values finds: the statistics of each of the first
/// [`MAX_CHUNKS`] chunk limbs (inverted when descending) and the longest value.
#[derive(Clone, Copy)]
struct Scan {
    chunks: [FieldStats; MAX_CHUNKS],
    longest: usize,
}

impl Scan {
    const EMPTY: Self = Self {
        chunks: [FieldStats::EMPTY; MAX_CHUNKS],
        longest: 0,
    };

    fn add(mut self, value: &[u8], descending: bool) -> Self {
        for (c, stats) in self.chunks.iter_mut().enumerate() {
            let limb = chunk_at(value, 8 * c);
            *stats = stats.add(if descending { !limb } else { limb });
        }
        self.longest = self.longest.max(value.len());
        self
    }

    fn merge(mut self, other: Self) -> Self {
        for (mine, theirs) in self.chunks.iter_mut().zip(other.chunks) {
            *mine = mine.merge(theirs);
        }
        self.longest = self.longest.max(other.longest);
        self
    }
}

/// The window of a byte-like column, from the statistics of its first chunk limbs
/// (inverted when descending; at least `MAX_CHUNKS` of them, or as many as the longest
/// value needs) and its longest valid value: the chunks that vary, with their reductions,
/// and the window's bytes. Chunks are added until [`LIVE_CHUNKS`] vary, every value ends
/// inside the window, or it holds [`MAX_CHUNKS`]. Both backends' encoders choose with it,
/// each with its own `live_chunks` ([`LIVE_CHUNKS`], [`DEVICE_LIVE_CHUNKS`]).
pub fn choose_window(
    chunks: &[FieldStats],
    longest: usize,
    live_chunks: usize,
) -> (Vec<(usize, Reduction)>, usize) {
    let mut live: Vec<(usize, Reduction)> = Vec::new();
    let mut taken = 0;
    while live.len() < live_chunks && taken < longest.div_ceil(8).min(MAX_CHUNKS) {
        if let Some(reduction) = chunks[taken].reduction() {
            live.push((taken, reduction));
        }
        taken += 1;
    }
    (live, 8 * taken)
}

/// Encodes the byte-like `arrays` of a key column (`rows` rows) as a window of chunks and a
/// length marker. One scan finds which chunks vary and how to reduce them; the chunks that
/// vary are then written already reduced (nulls 0), and the marker goes through `finish`
/// (DESC inversion and reduction, as any limb).
pub fn window_fields(
    arrays: &[ArrayRef],
    rows: usize,
    valid: Option<&[bool]>,
    descending: bool,
    live_chunks: usize,
    finish: impl FnOnce(Vec<u64>) -> KeyField,
) -> Result<WindowFields> {
    let values = ByteValues::new(arrays)?;
    let scan = values.fold_valid(
        valid,
        Scan::EMPTY,
        |scan, value| scan.add(value, descending),
        Scan::merge,
    );
    let (live, window) = choose_window(&scan.chunks, scan.longest, live_chunks);
    let is_valid = |row: usize| valid.is_none_or(|valid| valid[row]);
    let mut fields: Vec<KeyField> = live
        .into_iter()
        .map(|(chunk, reduction)| {
            let mut limb = vec![0u64; rows];
            values.map_into(&mut limb, |row, value| {
                let v = chunk_at(value, 8 * chunk);
                let v = if descending { !v } else { v };
                if is_valid(row) {
                    reduction.apply(v)
                } else {
                    0
                }
            });
            KeyField {
                values: limb,
                width: reduction.width,
            }
        })
        .collect();
    let mut marker = vec![0u64; rows];
    values.map_into(&mut marker, |_, value| length_marker(value.len(), window));
    fields.push(finish(marker));
    fields.retain(|f| f.width > 0);
    Ok(WindowFields {
        fields,
        window,
        has_longer: scan.longest > window,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::reduce::reduce_field;
    use arrow::array::{BinaryArray, StringArray};
    use std::sync::Arc;

    fn encoded(values: &[&[u8]], window_chunks: usize) -> Vec<Vec<u64>> {
        let window = 8 * window_chunks;
        values
            .iter()
            .map(|v| {
                let mut limbs: Vec<u64> = (0..window_chunks).map(|c| chunk_at(v, 8 * c)).collect();
                limbs.push(length_marker(v.len(), window));
                limbs
            })
            .collect()
    }

    #[test]
    fn window_orders_prefixes_and_zero_bytes() {
        let values: [&[u8]; 7] = [b"", b"\0", b"ab", b"ab\0", b"ab\0\0", b"abc", b"b"];
        for chunks in [1, 2] {
            let limbs = encoded(&values, chunks);
            for i in 0..values.len() {
                for j in 0..values.len() {
                    assert_eq!(limbs[i].cmp(&limbs[j]), values[i].cmp(values[j]), "{i} {j}");
                }
            }
        }
    }

    #[test]
    fn longer_values_tie_only_when_the_window_agrees() {
        let a = b"0123456789abcdefX".as_slice();
        let b = b"0123456789abcdefY".as_slice();
        let c = b"0123456789abcdef".as_slice();
        let limbs = encoded(&[a, b, c], 2);
        assert_eq!(limbs[0], limbs[1]);
        assert!(limbs[2] < limbs[0]);
    }

    #[test]
    fn shared_prefix_chunks_do_not_count_as_live() {
        let prefix = "https://www.example.com/";
        let strings: Vec<String> = (0..50).map(|i| format!("{prefix}{i:05}/page")).collect();
        let array: ArrayRef = Arc::new(StringArray::from(strings.clone()));
        let encoded = window_fields(&[array], 50, None, false, LIVE_CHUNKS, |limb| {
            reduce_field(limb, None)
        })
        .unwrap();
        // Bytes 0..24 are shared, 24..32 vary, 32..40 hold the shared "ge"; every value
        // (34 bytes) ends inside the 40-byte window, and its marker is the same for all.
        assert_eq!(encoded.window, 40);
        assert!(!encoded.has_longer);
        assert_eq!(encoded.fields.len(), 1);
    }

    #[test]
    fn values_are_found_across_arrays() {
        let a: ArrayRef = Arc::new(BinaryArray::from(vec![b"x".as_slice(), b"yy"]));
        let b: ArrayRef = Arc::new(BinaryArray::from(vec![b"zzz".as_slice()]));
        let arrays = [a.slice(1, 1), b];
        let values = ByteValues::new(&arrays).unwrap();
        assert_eq!(values.value(0), b"yy");
        assert_eq!(values.value(1), b"zzz");
    }
}
