//! Parallel LSD radix sort of (key words, row id) pairs over 8-bit digits.
//!
//! ```text
//!  for word w = last .. first:                   (least significant word first)
//!      keys[i] = words[w][perm[i]]               (gather in the current order)
//!      one read → the 8 digit histograms of w    (a digit whose histogram has one
//!      for each live digit d = 0 .. 7:             full bucket is constant: skip it)
//!          per-chunk counts → exclusive offsets ordered (bucket, chunk)
//!          every chunk scatters its pairs to its own offsets   (stable)
//! ```
//!
//! The CPU counterpart of OneSweep: the same digit passes, with chunks of the input in
//! place of thread blocks and a serial prefix over (bucket, chunk) in place of the
//! decoupled look-back.

use rayon::prelude::*;

use crate::sort::identity;

const RADIX: usize = 256;
/// Below this many rows one chunk (one thread) sorts.
const PARALLEL_MIN_ROWS: usize = 1 << 15;

type Histogram = [usize; RADIX];

/// A pointer that chunks of a scatter write through at disjoint positions.
#[derive(Clone, Copy)]
struct ScatterTarget<T>(*mut T);

// SAFETY: every chunk writes only the positions its own offsets give, which are disjoint.
unsafe impl<T: Send> Send for ScatterTarget<T> {}
unsafe impl<T: Send> Sync for ScatterTarget<T> {}

impl<T> ScatterTarget<T> {
    /// # Safety
    /// `at` is in bounds and no other thread writes it during the pass.
    #[inline]
    unsafe fn write(self, at: usize, value: T) {
        unsafe { self.0.add(at).write(value) }
    }
}

/// Sorts `rows` rows by `words` (word-major, word 0 most significant); stable.
pub fn radix_sort(words: &[Vec<u64>], rows: usize) -> Vec<u32> {
    let mut perm = identity(rows);
    if rows < 2 || words.is_empty() {
        return perm;
    }
    let mut keys = vec![0u64; rows];
    let mut keys_out = vec![0u64; rows];
    let mut perm_out = vec![0u32; rows];
    for (w, word) in words.iter().enumerate().rev() {
        if w == words.len() - 1 {
            keys.copy_from_slice(word);
        } else {
            keys.par_iter_mut()
                .zip(perm.par_iter())
                .for_each(|(k, &p)| *k = word[p as usize]);
        }
        let histograms = digit_histograms(&keys);
        for (digit, histogram) in histograms.iter().enumerate() {
            if is_constant_digit(histogram, rows) {
                continue;
            }
            scatter_pass(&keys, &perm, &mut keys_out, &mut perm_out, digit as u32 * 8);
            std::mem::swap(&mut keys, &mut keys_out);
            std::mem::swap(&mut perm, &mut perm_out);
        }
    }
    perm
}

fn is_constant_digit(histogram: &Histogram, rows: usize) -> bool {
    histogram.contains(&rows)
}

fn chunk_rows(rows: usize) -> usize {
    if rows < PARALLEL_MIN_ROWS {
        rows.max(1)
    } else {
        rows.div_ceil(rayon::current_num_threads() * 2)
            .max(PARALLEL_MIN_ROWS / 4)
    }
}

/// The histograms of all 8 digits of `keys`, in one read.
fn digit_histograms(keys: &[u64]) -> Vec<Histogram> {
    keys.par_chunks(chunk_rows(keys.len()))
        .map(|chunk| {
            let mut h = vec![[0usize; RADIX]; 8];
            for k in chunk {
                for (d, hist) in h.iter_mut().enumerate() {
                    hist[((k >> (d * 8)) & 0xff) as usize] += 1;
                }
            }
            h
        })
        .reduce(
            || vec![[0usize; RADIX]; 8],
            |mut a, b| {
                for (ha, hb) in a.iter_mut().zip(&b) {
                    ha.iter_mut().zip(hb).for_each(|(x, y)| *x += y);
                }
                a
            },
        )
}

/// One stable counting-sort pass on the digit at `shift`.
fn scatter_pass(
    keys: &[u64],
    perm: &[u32],
    keys_out: &mut [u64],
    perm_out: &mut [u32],
    shift: u32,
) {
    let chunk = chunk_rows(keys.len());
    let digit = |k: u64| ((k >> shift) & 0xff) as usize;
    let counts: Vec<Histogram> = keys
        .par_chunks(chunk)
        .map(|c| {
            let mut h = [0usize; RADIX];
            c.iter().for_each(|k| h[digit(*k)] += 1);
            h
        })
        .collect();
    let offsets = exclusive_offsets(&counts);
    let key_target = ScatterTarget(keys_out.as_mut_ptr());
    let perm_target = ScatterTarget(perm_out.as_mut_ptr());
    keys.par_chunks(chunk)
        .zip(perm.par_chunks(chunk))
        .zip(offsets)
        .for_each(|((ks, ps), mut next)| {
            for (k, p) in ks.iter().zip(ps) {
                let at = &mut next[digit(*k)];
                // SAFETY: `at` < keys.len() == keys_out.len() == perm_out.len(); the offsets
                // of different chunks and buckets are disjoint ranges.
                unsafe {
                    key_target.write(*at, *k);
                    perm_target.write(*at, *p);
                }
                *at += 1;
            }
        });
}

/// Start position of each (chunk, bucket): buckets in order, chunks in order within one.
fn exclusive_offsets(counts: &[Histogram]) -> Vec<Histogram> {
    let mut offsets = vec![[0usize; RADIX]; counts.len()];
    let mut sum = 0;
    for bucket in 0..RADIX {
        for (chunk, count) in counts.iter().enumerate() {
            offsets[chunk][bucket] = sum;
            sum += count[bucket];
        }
    }
    offsets
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn reference(words: &[Vec<u64>], rows: usize) -> Vec<u32> {
        let mut perm = identity(rows);
        perm.sort_by_key(|&r| words.iter().map(|w| w[r as usize]).collect::<Vec<_>>());
        perm
    }

    #[test]
    fn matches_stable_reference_across_sizes_and_words() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for &rows in &[0usize, 1, 2, 255, 256, 257, 40_000, 100_003] {
            for word_count in 1..=3 {
                let words: Vec<Vec<u64>> = (0..word_count)
                    .map(|w| {
                        (0..rows)
                            .map(|_| rng.random::<u64>() >> (w * 10 + 20))
                            .collect()
                    })
                    .collect();
                assert_eq!(
                    radix_sort(&words, rows),
                    reference(&words, rows),
                    "rows {rows}"
                );
            }
        }
    }

    #[test]
    fn keeps_ties_in_input_order() {
        let words = vec![vec![3, 1, 3, 1, 2]];
        assert_eq!(radix_sort(&words, 5), vec![1, 3, 4, 0, 2]);
    }
}
