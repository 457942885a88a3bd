//! Ordering the ties that a prefix window leaves: byte-like keys longer than their window.
//!
//! The packed key holds only the first `window` bytes of a string or binary key
//! (`keys::bytes`). After the sort, rows whose packed key agrees up to the end of that
//! column's fields, and whose value runs past the window, form *tie groups*: contiguous in
//! the permutation, ordered among themselves only by the later keys. This step visits those
//! groups and nothing else — a segmented sort over them, on the host's cores:
//!
//! ```text
//!  heads[i]: position i differs from position i-1 on the keys ordered so far
//!  for each long key column, in key order:
//!    heads |= packed key bits [0, bits_end) differ between neighbours
//!    groups = runs of ≥ 2 positions with no head inside whose value is longer than the window
//!    per group, in parallel:   start = window
//!      stable sort by (bytes start .. start+16, min(len - start, 17))   (reversed for DESC)
//!      heads set where that differs; runs still tied and longer go on at start + 16
//! ```
//!
//! The sort inside a group is stable, so rows that tie on the column keep the order the
//! radix sort gave them by the later keys (and, past those, input order): the group ends
//! up ordered by (column, later keys, input order), which is the sort's definition. Later
//! long columns see the heads of earlier ones, so their groups never span two different
//! values of an earlier key. Common inputs — values that differ inside the window — have
//! no groups, and the step costs one pass over neighbouring packed keys.

use rayon::prelude::*;

use datafusion::common::Result;

use super::Segments;
use crate::keys::bytes::{chunk_at, ByteValues};
use crate::keys::{EncodedKeys, KeyColumn, LongKey};

/// Bytes compared per refinement step.
const STEP: usize = 16;
/// Groups at least this large are sorted with all cores.
const PARALLEL_GROUP: usize = 1 << 15;

/// Orders the tie groups of the long byte-like keys of `keys` in `permutation` (the stable
/// sort of `keys`, within `segments` when given: a group never spans two segments);
/// returns how many groups were refined.
pub fn refine_long_ties(
    columns: &[KeyColumn],
    keys: &EncodedKeys,
    segments: Option<&Segments>,
    permutation: &mut [u32],
) -> Result<usize> {
    if keys.long_keys.is_empty() || permutation.len() < 2 {
        return Ok(0);
    }
    let mut heads = vec![false; permutation.len()];
    heads[0] = true;
    // A segment's rows sit at the positions of its own rows after a segmented sort.
    for &start in segments.map_or(&[][..], |s| s.starts()) {
        heads[start as usize] = true;
    }
    let mut refined = 0;
    for long in &keys.long_keys {
        mark_packed_differences(keys, long.bits_end, permutation, &mut heads);
        let values = ByteValues::new(&columns[long.column].arrays)?;
        // Rows of a group agree on the null flag: a group of nulls needs nothing.
        let groups = tie_groups(&heads, permutation, |row| {
            values
                .get(row as usize)
                .is_some_and(|v| v.len() > long.window)
        });
        refined += groups.len();
        let pieces = split_groups(permutation, &mut heads, &groups);
        pieces.into_par_iter().for_each(|(rows, heads)| {
            refine_group(&values, long, rows, heads);
        });
    }
    Ok(refined)
}

/// Sets `heads[i]` where the packed keys of positions `i - 1` and `i` differ in their
/// first `bits` bits.
fn mark_packed_differences(keys: &EncodedKeys, bits: u32, permutation: &[u32], heads: &mut [bool]) {
    let full = (bits / 64) as usize;
    let rest = bits % 64;
    let differs = |a: usize, b: usize| {
        keys.words[..full].iter().any(|w| w[a] != w[b])
            || (rest > 0 && ((keys.words[full][a] ^ keys.words[full][b]) >> (64 - rest)) != 0)
    };
    heads
        .par_iter_mut()
        .enumerate()
        .skip(1)
        .for_each(|(i, head)| {
            if !*head {
                *head = differs(permutation[i - 1] as usize, permutation[i] as usize);
            }
        });
}

/// The runs `[start, end)` of at least two positions with no head after `start` whose
/// first row `needs_more`.
fn tie_groups(
    heads: &[bool],
    permutation: &[u32],
    needs_more: impl Fn(u32) -> bool,
) -> Vec<(usize, usize)> {
    let mut groups = Vec::new();
    let mut start = 0;
    for end in 1..=heads.len() {
        if end == heads.len() || heads[end] {
            if end - start >= 2 && needs_more(permutation[start]) {
                groups.push((start, end));
            }
            start = end;
        }
    }
    groups
}

/// The disjoint slices of `permutation` and `heads` that `groups` (sorted, disjoint) cover.
fn split_groups<'a>(
    permutation: &'a mut [u32],
    heads: &'a mut [bool],
    groups: &[(usize, usize)],
) -> Vec<(&'a mut [u32], &'a mut [bool])> {
    let mut pieces = Vec::with_capacity(groups.len());
    let (mut rows, mut flags) = (permutation, heads);
    let mut consumed = 0;
    for &(start, end) in groups {
        let (_, tail_rows) = rows.split_at_mut(start - consumed);
        let (_, tail_flags) = flags.split_at_mut(start - consumed);
        let (group_rows, rest_rows) = tail_rows.split_at_mut(end - start);
        let (group_flags, rest_flags) = tail_flags.split_at_mut(end - start);
        pieces.push((group_rows, group_flags));
        rows = rest_rows;
        flags = rest_flags;
        consumed = end;
    }
    pieces
}

/// The refinement key of `value` at byte `start`: the next [`STEP`] bytes and a length
/// marker (`STEP + 1`: the value goes on).
#[inline]
fn step_key(value: &[u8], start: usize) -> (u128, u8) {
    let high = chunk_at(value, start) as u128;
    let low = chunk_at(value, start + 8) as u128;
    let marker = value.len().saturating_sub(start).min(STEP + 1) as u8;
    ((high << 64) | low, marker)
}

/// Orders one tie group: every row is longer than `long.window` and equal before it.
fn refine_group(values: &ByteValues, long: &LongKey, rows: &mut [u32], heads: &mut [bool]) {
    let mut pending = vec![(0, rows.len(), long.window)];
    while let Some((begin, end, start)) = pending.pop() {
        let group = &mut rows[begin..end];
        let mut keyed: Vec<((u128, u8), u32)> = group
            .iter()
            .map(|&row| (step_key(values.value(row as usize), start), row))
            .collect();
        let compare = |a: &((u128, u8), u32), b: &((u128, u8), u32)| {
            if long.descending {
                b.0.cmp(&a.0)
            } else {
                a.0.cmp(&b.0)
            }
        };
        if keyed.len() >= PARALLEL_GROUP {
            keyed.par_sort_by(compare);
        } else {
            keyed.sort_by(compare);
        }
        let mut run_start = 0;
        for i in 0..=keyed.len() {
            let run_ends = i == keyed.len() || (i > 0 && keyed[i].0 != keyed[i - 1].0);
            if run_ends {
                let goes_on = keyed[run_start].0 .1 as usize > STEP;
                if i - run_start >= 2 && goes_on {
                    pending.push((begin + run_start, begin + i, start + STEP));
                }
                if i < keyed.len() {
                    heads[begin + i] = true;
                }
                run_start = i;
            }
            if i < keyed.len() {
                group[i] = keyed[i].1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::encode_keys;
    use crate::sort::radix_sort;
    use datafusion::arrow::array::{ArrayRef, Int32Array, StringArray};
    use datafusion::arrow::compute::SortOptions;
    use std::sync::Arc;

    fn sorted(columns: &[KeyColumn]) -> Vec<u32> {
        let keys = encode_keys(columns).unwrap();
        let mut permutation = radix_sort(&keys.words, keys.rows);
        refine_long_ties(columns, &keys, None, &mut permutation).unwrap();
        permutation
    }

    fn column(array: ArrayRef, descending: bool) -> KeyColumn {
        KeyColumn {
            arrays: vec![array],
            options: SortOptions {
                descending,
                nulls_first: false,
            },
        }
    }

    #[test]
    fn long_shared_prefixes_then_the_next_key() {
        let prefix = "x".repeat(100);
        let texts = vec![
            format!("{prefix}b"),
            format!("{prefix}a{}", "z".repeat(40)),
            format!("{prefix}a"),
            format!("{prefix}b"),
            format!("{prefix}a{}", "z".repeat(40)),
        ];
        let strings: ArrayRef = Arc::new(StringArray::from(texts.clone()));
        let numbers: ArrayRef = Arc::new(Int32Array::from(vec![1, 9, 5, 0, 3]));
        for descending in [false, true] {
            let permutation = sorted(&[
                column(strings.clone(), descending),
                column(numbers.clone(), false),
            ]);
            let mut expected: Vec<u32> = (0..5).collect();
            expected.sort_by(|&a, &b| {
                let by_text = texts[a as usize].cmp(&texts[b as usize]);
                let by_text = if descending {
                    by_text.reverse()
                } else {
                    by_text
                };
                by_text.then([1, 9, 5, 0, 3][a as usize].cmp(&[1, 9, 5, 0, 3][b as usize]))
            });
            assert_eq!(permutation, expected, "descending = {descending}");
        }
    }

    #[test]
    fn short_values_need_no_groups() {
        let strings: ArrayRef = Arc::new(StringArray::from(vec!["b", "a", "c", "a"]));
        let columns = [column(strings, false)];
        let keys = encode_keys(&columns).unwrap();
        assert!(keys.long_keys.is_empty());
        assert_eq!(sorted(&columns), vec![1, 3, 0, 2]);
    }
}
