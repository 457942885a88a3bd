//! Packing reduced key fields into as few 64-bit words as the sum of their widths needs.
//!
//! The fields form one bit string, most significant field first; word `w` holds bits
//! `64w .. 64w+64` of it, so comparing the words lexicographically compares the string.
//! A field may straddle two words. When the string is at most 32 bits the keys also fit
//! one 32-bit word (see [`EncodedKeys::fits_u32`](super::EncodedKeys::fits_u32)).

use rayon::prelude::*;

use super::reduce::KeyField;

const CHUNK_ROWS: usize = 1 << 16;

/// The part of one field that lands in one word: `word |= ((v >> drop_low) & mask(bits))
/// << place`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Index of the field.
    pub field: usize,
    /// Right shift that drops the field's bits below this word.
    pub drop_low: u32,
    /// Bits of the field in this word.
    pub bits: u32,
    /// Left shift that puts them in place.
    pub place: u32,
}

/// Where the fields of widths `widths` (most significant first) land in 64-bit word `word`.
pub fn placements(widths: &[u32], word: usize) -> Vec<Placement> {
    let (word_lo, word_hi) = (64 * word as u64, 64 * word as u64 + 64);
    let mut offset = 0u64;
    let mut out = Vec::new();
    for (i, width) in widths.iter().enumerate() {
        let (lo, hi) = (offset, offset + *width as u64);
        offset = hi;
        let (a, b) = (lo.max(word_lo), hi.min(word_hi));
        if a >= b {
            continue;
        }
        out.push(Placement {
            field: i,
            drop_low: (hi - b) as u32,
            bits: (b - a) as u32,
            place: (word_hi - b) as u32,
        });
    }
    out
}

/// The `bits` lowest bits set.
#[inline]
pub fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// Packs `fields` (all of `rows` values, widths > 0) into words; returns them with the
/// total bit count.
pub(super) fn pack_fields(fields: &[KeyField], rows: usize) -> (Vec<Vec<u64>>, u32) {
    let widths: Vec<u32> = fields.iter().map(|f| f.width).collect();
    let total_bits: u32 = widths.iter().sum();
    let word_count = total_bits.div_ceil(64) as usize;
    let words = (0..word_count)
        .map(|w| pack_word(fields, &placements(&widths, w), rows))
        .collect();
    (words, total_bits)
}

fn pack_word(fields: &[KeyField], parts: &[Placement], rows: usize) -> Vec<u64> {
    let mut word = vec![0u64; rows];
    word.par_chunks_mut(CHUNK_ROWS)
        .enumerate()
        .for_each(|(i, chunk)| {
            let start = i * CHUNK_ROWS;
            for (p, part) in parts.iter().enumerate() {
                let values = &fields[part.field].values[start..start + chunk.len()];
                let mask = low_mask(part.bits);
                let bits = |v: &u64| ((v >> part.drop_low) & mask) << part.place;
                // The first part stores (no read of the fresh page: a read-then-write
                // of newly mapped memory faults twice), the others OR in.
                if p == 0 {
                    chunk
                        .iter_mut()
                        .zip(values)
                        .for_each(|(out, v)| *out = bits(v));
                } else {
                    chunk
                        .iter_mut()
                        .zip(values)
                        .for_each(|(out, v)| *out |= bits(v));
                }
            }
        });
    word
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(values: Vec<u64>, width: u32) -> KeyField {
        KeyField { values, width }
    }

    #[test]
    fn packs_narrow_fields_into_one_word_msb_first() {
        let fields = [field(vec![1, 0], 1), field(vec![2, 3], 2)];
        let (words, bits) = pack_fields(&fields, 2);
        assert_eq!(bits, 3);
        assert_eq!(words, vec![vec![0b110u64 << 61, 0b011u64 << 61]]);
    }

    #[test]
    fn field_straddles_two_words() {
        let fields = [
            field(vec![0], 40),
            field(vec![(0xABCu64 << 36) | 0x123], 48),
        ];
        let (words, bits) = pack_fields(&fields, 1);
        assert_eq!(bits, 88);
        // The second field's top 24 bits end word 0; its low 24 bits start word 1.
        let v = (0xABCu64 << 36) | 0x123;
        assert_eq!(words[0][0], v >> 24);
        assert_eq!(words[1][0], (v & 0xFF_FFFF) << 40);
    }

    #[test]
    fn packed_order_equals_field_order() {
        let a = [3u64, 3, 1, 2];
        let b = [5u64, 1, 7, 0];
        let fields = [field(a.to_vec(), 2), field(b.to_vec(), 63)];
        let (words, _) = pack_fields(&fields, 4);
        for i in 0..4 {
            for j in 0..4 {
                let packed = (words[0][i], words[1][i]).cmp(&(words[0][j], words[1][j]));
                assert_eq!(packed, (a[i], b[i]).cmp(&(a[j], b[j])));
            }
        }
    }
}
