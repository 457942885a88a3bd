//! The splitters of a sort spread over several devices: from samples of every device's
//! keys, the (key words, row id) pairs that cut the whole order into ranges of about equal
//! rows.
//!
//! A row's place in the result is (its key words, its row id), a total order: equal keys
//! are split between ranges by row id, so one dominant value still spreads evenly, and the
//! ranges concatenate into the stable order.

use std::cmp::Ordering;

use crate::cuda::spread::Samples;

/// Sorted splitters: splitter `s` is `words[s * word_count ..][..word_count]` and
/// `rows[s]`; range `r` holds the rows at or above splitter `r - 1` and below splitter `r`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Splitters {
    /// Key words, splitter-major.
    pub words: Vec<u64>,
    /// Row ids.
    pub rows: Vec<u32>,
}

impl Splitters {
    /// The ranges these splitters cut.
    pub(crate) fn ranges(&self) -> usize {
        self.rows.len() + 1
    }
}

/// One sample: which device's samples, and which of them.
#[derive(Clone, Copy)]
struct At {
    device: usize,
    index: usize,
}

/// Up to `ranges - 1` splitters at evenly spaced ranks of all `samples` (each device's
/// word-major, `word_count` words per row); fewer when there are fewer samples.
pub(crate) fn choose(samples: &[Samples], word_count: usize, ranges: usize) -> Splitters {
    let mut all: Vec<At> = samples
        .iter()
        .enumerate()
        .flat_map(|(device, s)| (0..s.rows.len()).map(move |index| At { device, index }))
        .collect();
    let word = |at: At, w: usize| {
        let s = &samples[at.device];
        s.words[w * s.rows.len() + at.index]
    };
    let row = |at: At| samples[at.device].rows[at.index];
    all.sort_unstable_by(|&a, &b| {
        (0..word_count)
            .map(|w| word(a, w).cmp(&word(b, w)))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or_else(|| row(a).cmp(&row(b)))
    });
    let total = all.len();
    let mut out = Splitters::default();
    let mut last = None;
    for k in 1..ranges {
        let rank = k * total / ranges;
        if rank == 0 || rank >= total || last == Some(rank) {
            continue;
        }
        last = Some(rank);
        out.words
            .extend((0..word_count).map(|w| word(all[rank], w)));
        out.rows.push(row(all[rank]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(keys: &[u64], first_row: u32) -> Samples {
        Samples {
            words: keys.to_vec(),
            rows: (first_row..first_row + keys.len() as u32).collect(),
        }
    }

    #[test]
    fn splitters_cut_evenly_spaced_ranks() {
        let a = samples(&[7, 1, 5, 3], 0);
        let b = samples(&[2, 8, 4, 6], 100);
        let s = choose(&[a, b], 1, 4);
        // Sorted keys 1..=8: ranks 2, 4, 6 are keys 3, 5, 7.
        assert_eq!(s.words, vec![3, 5, 7]);
        assert_eq!(s.rows, vec![3, 2, 0]);
        assert_eq!(s.ranges(), 4);
    }

    #[test]
    fn equal_keys_are_split_by_row_id() {
        let a = samples(&[9; 4], 0);
        let b = samples(&[9; 4], 4);
        let s = choose(&[a, b], 1, 2);
        assert_eq!(s.words, vec![9]);
        assert_eq!(s.rows, vec![4]);
    }

    #[test]
    fn several_words_compare_most_significant_first() {
        // Two rows per device, words word-major: row keys (1, 9), (0, 5) and (1, 2), (0, 7).
        let a = Samples {
            words: vec![1, 0, 9, 5],
            rows: vec![0, 1],
        };
        let b = Samples {
            words: vec![1, 0, 2, 7],
            rows: vec![2, 3],
        };
        // Order: (0,5) r1, (0,7) r3, (1,2) r2, (1,9) r0; the median rank 2 is (1,2) r2.
        let s = choose(&[a, b], 2, 2);
        assert_eq!(s.words, vec![1, 2]);
        assert_eq!(s.rows, vec![2]);
    }

    #[test]
    fn few_samples_give_fewer_splitters() {
        let s = choose(&[samples(&[4], 0)], 1, 4);
        assert!(s.rows.is_empty());
        let none = choose(&[Samples::default(), Samples::default()], 1, 2);
        assert_eq!(none.ranges(), 1);
    }
}
