//! Min/max analysis: drop the bits of a key field that never vary.
//!
//! A field holds one order-preserving `u64` per row. Over the valid rows we find the
//! minimum `lo`, the maximum `hi` and `varying`, the OR of `v ^ v0` (`v0` the first valid
//! value): bits clear in `varying` are the same in every value. Then
//!
//! ```text
//! reduced(v) = (v - lo) >> trailing_zeros(varying)      width = bits(hi - lo) - shift
//! ```
//!
//! is monotonic and injective on the valid values: subtracting `lo` removes the constant
//! high bits, the shift removes constant low bits (all values agree with `lo` there).
//! Null rows get 0; their order comes from the separate null-flag field.

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

#[derive(Debug, Clone, Copy)]
struct FieldStats {
    min: u64,
    max: u64,
    first: Option<u64>,
    varying: u64,
}

impl FieldStats {
    const EMPTY: Self = Self {
        min: u64::MAX,
        max: 0,
        first: None,
        varying: 0,
    };

    fn add(mut self, v: u64) -> Self {
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        match self.first {
            None => self.first = Some(v),
            Some(first) => self.varying |= v ^ first,
        }
        self
    }

    fn merge(self, other: Self) -> Self {
        let varying = match (self.first, other.first) {
            (Some(a), Some(b)) => self.varying | other.varying | (a ^ b),
            _ => self.varying | other.varying,
        };
        Self {
            min: self.min.min(other.min),
            max: self.max.max(other.max),
            first: self.first.or(other.first),
            varying,
        }
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
pub fn reduce_field(mut values: Vec<u64>, valid: Option<&[bool]>) -> KeyField {
    let stats = analyze(&values, valid);
    if stats.first.is_none() || stats.varying == 0 {
        return KeyField {
            values: Vec::new(),
            width: 0,
        };
    }
    let shift = stats.varying.trailing_zeros();
    let range = (stats.max - stats.min) >> shift;
    let width = 64 - range.leading_zeros();
    let lo = stats.min;
    values
        .par_chunks_mut(CHUNK_ROWS)
        .enumerate()
        .for_each(|(i, chunk)| {
            let start = i * CHUNK_ROWS;
            for (j, v) in chunk.iter_mut().enumerate() {
                let is_valid = valid.is_none_or(|valid| valid[start + j]);
                *v = if is_valid { (*v - lo) >> shift } else { 0 };
            }
        });
    KeyField { values, width }
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
}
