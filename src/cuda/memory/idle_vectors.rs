//! Permutation vectors kept after a sort and lent to the next one.
//!
//! A device sort brings its permutation (4 bytes per row) back into host memory. Memory the
//! process has never touched costs a page fault and the kernel's zeroing per page on first
//! write, so filling a fresh 400 MB vector ran at the speed of page faults (13–24 GB/s on
//! the GPU hosts with 16 threads) instead of at the speed of the copy (50–59 GB/s into
//! memory touched before; docs/performance.md). The operator gives each large permutation
//! back when its rows are out (dropping the run's `sort::Permutation` gives it back here),
//! and the next sort's download takes it.
//!
//! ```text
//!  sort: take(rows) ─► idle vector that is long enough (cut to length), else a new one
//!  rows emitted ─► give_back(permutation) ─► idle (the oldest freed past the limit)
//! ```
//!
//! Idle vectors are process memory outside DataFusion's memory pool: the runtime keeps at
//! most a quarter of the device gather's idle limit (`GPUSORT_HOST_IDLE_BYTES`; 0 keeps
//! nothing).

use std::sync::{Mutex, MutexGuard};

use crate::sort::PermutationHome;

/// Vectors shorter than this are neither kept nor lent: their first touch costs little.
const SMALLEST_KEPT: usize = 1 << 20;
/// An idle vector is lent only to a sort of at least this fraction of its length, so a
/// small sort does not use up (and give back cut short) the memory of a large one.
const MOST_WASTE: usize = 4;
/// Idle vectors kept at most, whatever their size.
const MOST_KEPT: usize = 4;

/// A set of idle `u32` vectors, each fully initialized over its length.
#[derive(Debug)]
pub(crate) struct IdleVectors {
    limit_bytes: usize,
    idle: Mutex<Vec<Vec<u32>>>,
}

impl IdleVectors {
    /// A set that keeps at most `limit_bytes` of vectors idle.
    pub(crate) fn new(limit_bytes: usize) -> Self {
        Self {
            limit_bytes,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A vector of `len` elements (of unspecified values: the caller overwrites them):
    /// the shortest idle one at least that long (and at most [`MOST_WASTE`] times as
    /// long), cut to `len`, else a new one.
    pub(crate) fn take(&self, len: usize) -> Vec<u32> {
        if len < SMALLEST_KEPT {
            return vec![0; len];
        }
        let found = {
            let mut idle = self.locked();
            let best = idle
                .iter()
                .enumerate()
                .filter(|(_, v)| v.len() >= len && v.len() / MOST_WASTE <= len)
                .min_by_key(|(_, v)| v.len())
                .map(|(i, _)| i);
            best.map(|i| idle.swap_remove(i))
        };
        match found {
            Some(mut vector) => {
                vector.truncate(len);
                vector
            }
            None => vec![0; len],
        }
    }

    /// Keeps `vector` for a later [`IdleVectors::take`] when it is long enough to be
    /// worth it; frees the oldest idle vectors to stay within the limits. A vector is
    /// counted by its capacity, what it holds: one cut short (to a LIMIT's rows, or to a
    /// top-N's) to less than a [`MOST_WASTE`]th of its capacity is freed, not kept.
    pub(crate) fn give_back(&self, vector: Vec<u32>) {
        let bytes = vector.capacity() * 4;
        if vector.len() < SMALLEST_KEPT
            || bytes > self.limit_bytes
            || vector.capacity() / MOST_WASTE > vector.len()
        {
            return;
        }
        let mut idle = self.locked();
        idle.push(vector);
        while idle.len() > MOST_KEPT || Self::bytes(&idle) > self.limit_bytes {
            idle.remove(0);
        }
    }

    /// Bytes held idle now.
    #[cfg(test)]
    fn idle_bytes(&self) -> usize {
        Self::bytes(&self.locked())
    }

    /// The idle vectors (a panic while they were held leaves them usable).
    fn locked(&self) -> MutexGuard<'_, Vec<Vec<u32>>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bytes(idle: &[Vec<u32>]) -> usize {
        idle.iter().map(|v| v.capacity() * 4).sum()
    }
}

impl PermutationHome for IdleVectors {
    fn give_back(&self, rows: Vec<u32>) {
        IdleVectors::give_back(self, rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: usize = SMALLEST_KEPT;

    #[test]
    fn takes_the_shortest_long_enough_vector_cut_to_length() {
        let idle = IdleVectors::new(64 * N);
        idle.give_back(vec![7; 3 * N]);
        idle.give_back(vec![8; 2 * N]);
        let taken = idle.take(N + 5);
        assert_eq!(taken.len(), N + 5);
        assert!(taken.iter().all(|&x| x == 8), "the 2N vector fits best");
        assert_eq!(idle.idle_bytes(), 3 * N * 4);
        let fresh = idle.take(4 * N);
        assert_eq!(fresh.len(), 4 * N, "none is long enough: a new one");
        assert_eq!(idle.idle_bytes(), 3 * N * 4);
    }

    #[test]
    fn vectors_count_by_capacity_and_one_cut_far_short_is_freed() {
        let idle = IdleVectors::new(64 * N);
        let mut cut = vec![1; 8 * N];
        cut.truncate(N);
        idle.give_back(cut);
        assert_eq!(idle.idle_bytes(), 0, "cut to an 8th of its capacity: freed");
        let mut cut = vec![1; 3 * N];
        cut.truncate(2 * N);
        idle.give_back(cut);
        assert_eq!(idle.idle_bytes(), 3 * N * 4, "counted by its capacity");
        let small = IdleVectors::new(5 * N * 4);
        small.give_back(vec![1; 3 * N]);
        let mut long = vec![1; 4 * N];
        long.truncate(3 * N);
        small.give_back(long);
        assert_eq!(
            small.idle_bytes(),
            4 * N * 4,
            "the oldest freed to stay in the limit"
        );
    }

    #[test]
    fn small_sorts_leave_long_vectors_idle() {
        let idle = IdleVectors::new(64 * N);
        idle.give_back(vec![5; 8 * N]);
        assert_eq!(
            idle.take(N - 1),
            vec![0; N - 1],
            "below the smallest kept: new"
        );
        assert_eq!(idle.take(N).len(), N, "more than four times too long: new");
        assert_eq!(idle.idle_bytes(), 8 * N * 4);
        let taken = idle.take(2 * N);
        assert!(taken.len() == 2 * N && taken.iter().all(|&x| x == 5));
        assert_eq!(idle.idle_bytes(), 0);
    }

    #[test]
    fn keeps_within_the_limits_dropping_the_oldest() {
        let idle = IdleVectors::new(5 * N * 4);
        idle.give_back(vec![1; 2 * N]);
        idle.give_back(vec![2; 2 * N]);
        idle.give_back(vec![3; 2 * N]);
        assert_eq!(idle.idle_bytes(), 4 * N * 4, "the oldest went");
        assert_eq!(idle.take(N)[0], 2);
        idle.give_back(vec![0; N - 1]);
        idle.give_back(vec![0; 6 * N]);
        assert_eq!(
            idle.idle_bytes(),
            2 * N * 4,
            "too short and too long are freed"
        );
        let none = IdleVectors::new(0);
        none.give_back(vec![0; 2 * N]);
        assert_eq!(none.idle_bytes(), 0);
        for i in 0..MOST_KEPT + 2 {
            idle.give_back(vec![i as u32; N]);
        }
        assert!(idle.locked().len() <= MOST_KEPT);
    }
}
