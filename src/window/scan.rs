//! Parallel prefix scans: `prefix[i]` is the combination of items `0..i`.
//!
//! Two passes over chunks of rows: each task combines its chunk's items, the chunk totals
//! are scanned in order, then each task writes its chunk's prefixes starting from the
//! total of the chunks before it. The combination must be associative; it is applied to
//! the items in row order within a chunk.

use rayon::prelude::*;

/// Items per task.
const CHUNK_ROWS: usize = 1 << 16;

/// `prefix` of length `rows + 1`: `prefix[0] = zero`, `prefix[i + 1] = combine(prefix[i],
/// item(i))`, computed in parallel.
pub(crate) fn prefix_scan<T, I, C>(rows: usize, zero: T, item: I, combine: C) -> Vec<T>
where
    T: Copy + Send + Sync,
    I: Fn(usize) -> T + Sync,
    C: Fn(T, T) -> T + Sync,
{
    let chunks = rows.div_ceil(CHUNK_ROWS);
    let totals: Vec<T> = (0..chunks)
        .into_par_iter()
        .map(|c| {
            let (lo, hi) = (c * CHUNK_ROWS, ((c + 1) * CHUNK_ROWS).min(rows));
            (lo..hi).fold(zero, |acc, i| combine(acc, item(i)))
        })
        .collect();
    let mut carries = Vec::with_capacity(chunks);
    let mut carry = zero;
    for total in totals {
        carries.push(carry);
        carry = combine(carry, total);
    }
    let mut prefix = vec![zero; rows + 1];
    prefix[1..]
        .par_chunks_mut(CHUNK_ROWS)
        .zip(carries)
        .enumerate()
        .for_each(|(c, (out, carry))| {
            let mut acc = carry;
            for (k, slot) in out.iter_mut().enumerate() {
                acc = combine(acc, item(c * CHUNK_ROWS + k));
                *slot = acc;
            }
        });
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_across_chunks() {
        let rows = 3 * CHUNK_ROWS + 17;
        let prefix = prefix_scan(rows, 0u64, |i| i as u64, |a, b| a + b);
        assert_eq!(prefix.len(), rows + 1);
        for i in [0, 1, CHUNK_ROWS, CHUNK_ROWS + 1, rows] {
            let n = i as u64;
            assert_eq!(prefix[i], n * n.saturating_sub(1) / 2);
        }
        assert_eq!(prefix_scan(0, 7u8, |_| 1, |a, b| a + b), vec![7]);
    }
}
