//! Min/max analysis: drop the bits of a key field that never vary.
//!
//! A field holds one order-preserving `u64` per row. Over the valid rows we find the
//! minimum `lo`, the maximum `hi`, the OR and the AND of all values: a bit set in the OR but
//! clear in the AND varies, every other bit is the same in every value. With `varying =
//! or & !and`,
//!
//! ```text
//! reduced(v) = (v - lo) >> trailing_zeros(varying)      width = bits(hi - lo) - shift
//! ```
//!
//! is monotonic and injective on the valid values: subtracting `lo` removes the constant
//! high bits, the shift removes constant low bits (all values agree with `lo` there).
//! Null rows get 0; their order comes from the separate null-flag field.
//!
//! The statistics are plain associative reductions, so the CUDA backend computes the same
//! [`FieldStats`] on the device (`kernels/encode.cu`) and both backends reduce a field with
//! the same [`Reduction`].

use rayon::prelude::*;

/// Rows per parallel chunk in the analysis and rewrite passes.
const CHUNK_ROWS: usize = 1 << 16;

/// One field of the packed key: `width` significant bits per row, most significant first.
#[derive(Debug, Clone)]
pub struct KeyField {
    /// The reduced value of every row, below `1 << width`.
    pub values: Vec<u64>,
    /// Bits that vary among the rows; 0 means the field orders nothing.
    pub width: u32,
}

/// Min, max, OR and AND of a field's valid values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldStats {
    /// Smallest value (`u64::MAX` when there is none).
    pub min: u64,
    /// Largest value (0 when there is none).
    pub max: u64,
    /// OR of all values.
    pub or: u64,
    /// AND of all values (`u64::MAX` when there is none).
    pub and: u64,
}

impl FieldStats {
    /// The statistics of no values; the identity of [`FieldStats::merge`].
    pub const EMPTY: Self = Self {
        min: u64::MAX,
        max: 0,
        or: 0,
        and: u64::MAX,
    };

    pub(super) fn add(self, v: u64) -> Self {
        Self {
            min: self.min.min(v),
            max: self.max.max(v),
            or: self.or | v,
            and: self.and & v,
        }
    }

    /// The statistics of both value sets together.
    pub fn merge(self, other: Self) -> Self {
        Self {
            min: self.min.min(other.min),
            max: self.max.max(other.max),
            or: self.or | other.or,
            and: self.and & other.and,
        }
    }

    /// How to reduce the field, or `None` when it orders nothing (no valid value, or all
    /// valid values equal).
    pub fn reduction(self) -> Option<Reduction> {
        let varying = self.or & !self.and;
        if self.min > self.max || varying == 0 {
            return None;
        }
        let shift = varying.trailing_zeros();
        let range = (self.max - self.min) >> shift;
        Some(Reduction {
            lo: self.min,
            shift,
            width: 64 - range.leading_zeros(),
        })
    }
}

/// `reduced(v) = (v - lo) >> shift`, a value below `1 << width`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reduction {
    /// The smallest valid value.
    pub lo: u64,
    /// Constant low bits dropped.
    pub shift: u32,
    /// Bits left.
    pub width: u32,
}

impl Reduction {
    /// The reduced value of `v`.
    #[inline]
    pub fn apply(self, v: u64) -> u64 {
        (v - self.lo) >> self.shift
    }
}

fn analyze(values: &[u64], valid: Option<&[bool]>) -> FieldStats {
    let chunk_stats = |(i, chunk): (usize, &[u64])| {
        let start = i * CHUNK_ROWS;
        chunk
            .iter()
            .enumerate()
            .filter(|(j, _)| valid.is_none_or(|valid| valid[start + j]))
            .fold(FieldStats::EMPTY, |s, (_, v)| s.add(*v))
    };
    values
        .par_chunks(CHUNK_ROWS)
        .enumerate()
        .map(chunk_stats)
        .reduce(|| FieldStats::EMPTY, FieldStats::merge)
}

/// Reduces `values` in place to the bits that vary among the valid rows.
pub(super) fn reduce_field(mut values: Vec<u64>, valid: Option<&[bool]>) -> KeyField {
    let Some(reduction) = analyze(&values, valid).reduction() else {
        return KeyField {
            values: Vec::new(),
            width: 0,
        };
    };
    values
        .par_chunks_mut(CHUNK_ROWS)
        .enumerate()
        .for_each(|(i, chunk)| {
            let start = i * CHUNK_ROWS;
            for (j, v) in chunk.iter_mut().enumerate() {
                let is_valid = valid.is_none_or(|valid| valid[start + j]);
                *v = if is_valid { reduction.apply(*v) } else { 0 };
            }
        });
    KeyField {
        values,
        width: reduction.width,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_constant_high_and_low_bits() {
        let field = reduce_field(vec![0x1000, 0x1300, 0x1100], None);
        assert_eq!(field.width, 2);
        assert_eq!(field.values, vec![0, 3, 1]);
    }

    #[test]
    fn constant_field_has_no_width() {
        assert_eq!(reduce_field(vec![7; 100], None).width, 0);
    }

    #[test]
    fn ignores_values_under_nulls() {
        let valid = [true, false, true];
        let field = reduce_field(vec![10, u64::MAX, 11], Some(&valid));
        assert_eq!(field.width, 1);
        assert_eq!(field.values, vec![0, 0, 1]);
    }

    #[test]
    fn all_null_field_has_no_width() {
        let field = reduce_field(vec![1, 2], Some(&[false, false]));
        assert_eq!(field.width, 0);
    }

    #[test]
    fn full_range_keeps_64_bits() {
        let field = reduce_field(vec![0, u64::MAX], None);
        assert_eq!(field.width, 64);
        assert_eq!(field.values, vec![0, u64::MAX]);
    }

    #[test]
    fn stats_merge_across_chunks() {
        let mut values = vec![5u64; CHUNK_ROWS * 2 + 3];
        values[CHUNK_ROWS * 2 + 1] = 6;
        let field = reduce_field(values, None);
        assert_eq!(field.width, 1);
        assert_eq!(field.values[CHUNK_ROWS * 2 + 1], 1);
    }

    #[test]
    fn merge_is_the_stats_of_the_union() {
        let a = [3u64, 9, 12];
        let b = [7u64, 1];
        let fold = |s: &[u64]| s.iter().fold(FieldStats::EMPTY, |st, v| st.add(*v));
        let all: Vec<u64> = a.iter().chain(&b).copied().collect();
        assert_eq!(fold(&a).merge(fold(&b)), fold(&all));
        assert_eq!(FieldStats::EMPTY.merge(fold(&a)), fold(&a));
    }
}
