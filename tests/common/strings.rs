//! Seeded byte-like key columns (strings, binaries, fixed-size binaries, dictionaries) in
//! the shapes the test matrix asks for: every length class, shared prefixes around the
//! 8-byte chunk, values far longer than any window, zero bytes, non-ASCII UTF-8.
//!
//! A value is a pure function of its base value and the shape, so the distributions of
//! `data::base_values` (all equal, 2 / 10 / 256 distinct, …) carry over as they are.

use std::sync::Arc;

use datafusion::arrow::array::*;
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::*;
use rand::rngs::StdRng;
use rand::Rng;

use super::data::null_buffer;

/// How the text of a value is made from its base value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// 0 to 7 bytes over a four-letter alphabet that includes the zero byte.
    Short,
    /// Lengths 0–7, 8 and 9–100 over `a`/`b`: many values are prefixes of others.
    Mixed,
    /// About 10 000 bytes sharing their first 9 990.
    Long,
    /// A prefix of this many bytes shared by every value, then a short varying tail.
    SharedPrefix(usize),
    /// Non-ASCII UTF-8 (2-, 3- and 4-byte characters) mixed with ASCII.
    Unicode,
    /// Lowercase hex of a 60-bit number (as in the SQL benchmark's table `s`).
    Hex,
}

/// Every shape, with the shared prefixes the test matrix names.
pub const SHAPES: [Shape; 10] = [
    Shape::Short,
    Shape::Mixed,
    Shape::Long,
    Shape::SharedPrefix(7),
    Shape::SharedPrefix(8),
    Shape::SharedPrefix(9),
    Shape::SharedPrefix(16),
    Shape::SharedPrefix(64),
    Shape::Unicode,
    Shape::Hex,
];

/// Every byte-like key type, and dictionaries over strings.
pub fn byte_types() -> Vec<DataType> {
    use DataType::*;
    vec![
        Utf8,
        LargeUtf8,
        Utf8View,
        Binary,
        LargeBinary,
        BinaryView,
        FixedSizeBinary(12),
        Dictionary(Box::new(Int32), Box::new(Utf8)),
        Dictionary(Box::new(UInt16), Box::new(Utf8View)),
    ]
}

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn letters(mut h: u64, len: usize, alphabet: &[&str]) -> String {
    let mut out = String::new();
    for i in 0..len {
        if i % 16 == 15 {
            h = mix(h);
        }
        out.push_str(alphabet[(h % alphabet.len() as u64) as usize]);
        h /= alphabet.len() as u64;
    }
    out
}

/// The text of base value `base` in `shape`.
pub fn text_of(base: i64, shape: Shape) -> String {
    let h = mix(base as u64);
    match shape {
        Shape::Short => letters(h >> 3, (h % 8) as usize, &["a", "b", "\0", "z"]),
        Shape::Mixed => {
            let len = match h % 3 {
                0 => (h >> 2) as usize % 8,
                1 => 8,
                _ => 9 + (h >> 2) as usize % 92,
            };
            letters(h >> 9, len, &["a", "b"])
        }
        Shape::Long => format!(
            "{}{}",
            "q".repeat(9990),
            letters(h, (h % 11) as usize, &["a", "b", "c"])
        ),
        Shape::SharedPrefix(p) => format!("{}{:x}", "p".repeat(p), h % 5000),
        Shape::Unicode => letters(h, 1 + (h % 6) as usize, &["é", "ß", "中", "a", "😀", "Z"]),
        Shape::Hex => format!("{:x}", h >> 4),
    }
}

/// A byte-like column of `dt` with `base.len()` rows in `shape`, nulls at
/// `null_fraction` (garbage values under them), sliced so that its offset is not zero.
pub fn make_byte_column(
    rng: &mut StdRng,
    dt: &DataType,
    base: &[i64],
    shape: Shape,
    null_fraction: f64,
) -> ArrayRef {
    let pad = 2;
    let mut texts: Vec<String> = (0..pad).map(|_| text_of(rng.random(), shape)).collect();
    texts.extend(base.iter().map(|b| text_of(*b, shape)));
    let nulls = null_buffer(rng, texts.len(), null_fraction);
    let full = build(rng, dt, &texts, nulls);
    full.slice(pad, base.len())
}

fn build(rng: &mut StdRng, dt: &DataType, texts: &[String], nulls: Option<NullBuffer>) -> ArrayRef {
    use DataType::*;
    let strings = || texts.iter().map(|t| t.as_str());
    let bytes = || texts.iter().map(|t| t.as_bytes());
    let array: ArrayRef = match dt {
        Utf8 => Arc::new(StringArray::from_iter_values(strings())),
        LargeUtf8 => Arc::new(LargeStringArray::from_iter_values(strings())),
        Utf8View => Arc::new(StringViewArray::from_iter_values(strings())),
        Binary => Arc::new(BinaryArray::from_iter_values(bytes())),
        LargeBinary => Arc::new(LargeBinaryArray::from_iter_values(bytes())),
        BinaryView => Arc::new(BinaryViewArray::from_iter_values(bytes())),
        FixedSizeBinary(width) => {
            let width = *width as usize;
            let fixed = texts.iter().map(|t| {
                let mut v = t.as_bytes().to_vec();
                v.resize(width, 0);
                v
            });
            Arc::new(FixedSizeBinaryArray::try_from_iter(fixed).unwrap())
        }
        Dictionary(key, value) => return dictionary(rng, key, value, texts, nulls),
        other => panic!("no byte-like generator for {other}"),
    };
    let data = array.to_data().into_builder().nulls(nulls).build().unwrap();
    make_array(data)
}

/// A dictionary whose values hold every text once or twice, in random order, plus some
/// that no row uses; each row's key points at one copy of its text.
fn dictionary(
    rng: &mut StdRng,
    key: &DataType,
    value: &DataType,
    texts: &[String],
    nulls: Option<NullBuffer>,
) -> ArrayRef {
    let mut distinct: Vec<String> = texts.to_vec();
    distinct.sort();
    distinct.dedup();
    let mut values: Vec<String> = Vec::new();
    let mut copies: Vec<Vec<usize>> = Vec::new();
    for text in &distinct {
        let n = if rng.random_bool(0.3) { 2 } else { 1 };
        copies.push((values.len()..values.len() + n).collect());
        values.extend(std::iter::repeat_n(text.clone(), n));
        if rng.random_bool(0.2) {
            values.push(format!("{text}~unused"));
        }
    }
    let keys: Vec<usize> = texts
        .iter()
        .map(|t| {
            let slot = distinct.binary_search(t).unwrap();
            copies[slot][rng.random_range(0..copies[slot].len())]
        })
        .collect();
    let values = build(rng, value, &values, None);
    let keys: ArrayRef = match key {
        DataType::Int32 => Arc::new(Int32Array::new(
            keys.iter().map(|k| *k as i32).collect(),
            nulls,
        )),
        DataType::UInt16 => Arc::new(UInt16Array::new(
            keys.iter().map(|k| *k as u16).collect(),
            nulls,
        )),
        other => panic!("no dictionary key generator for {other}"),
    };
    let dt = DataType::Dictionary(Box::new(key.clone()), Box::new(values.data_type().clone()));
    let data = keys
        .to_data()
        .into_builder()
        .data_type(dt)
        .child_data(vec![values.to_data()])
        .build()
        .unwrap();
    make_array(data)
}
