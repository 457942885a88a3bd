//! Stable, run-adaptive parallel merge sort over encoded keys.
//!
//! rayon's `par_sort_by` is a stable merge sort that detects existing runs, so nearly
//! sorted input (time series arriving almost in order) costs close to one pass.

use rayon::prelude::*;

use crate::sort::identity;

/// Sorts `rows` rows by their key words; returns the stable permutation.
pub fn merge_sort(words: &[Vec<u64>], rows: usize) -> Vec<u32> {
    match words {
        [] => identity(rows),
        [word] => {
            let mut pairs: Vec<(u64, u32)> = word
                .par_iter()
                .enumerate()
                .map(|(i, k)| (*k, i as u32))
                .collect();
            pairs.par_sort_by_key(|p| p.0);
            pairs.into_par_iter().map(|p| p.1).collect()
        }
        _ => {
            let mut permutation = identity(rows);
            permutation.par_sort_by(|a, b| {
                let (a, b) = (*a as usize, *b as usize);
                words
                    .iter()
                    .map(|w| w[a].cmp(&w[b]))
                    .find(|o| o.is_ne())
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            permutation
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_on_ties_with_two_words() {
        let words = vec![vec![1, 0, 1, 0], vec![5, 5, 5, 5]];
        assert_eq!(merge_sort(&words, 4), vec![1, 3, 0, 2]);
    }
}
