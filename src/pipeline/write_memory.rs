//! The memory a Parquet output holds, counted in the session's memory pool.
//!
//! Two things: leaf columns handed to the column encoders and not yet encoded (*queued*),
//! and what the encoders of row groups not yet appended to the file hold (*encoded*: pages,
//! dictionaries). One [`WriteMemory`] is shared by every file of one output and holds one
//! reservation in the pool:
//! - At the start it claims a floor (an eighth of the pool's limit, at most 512 MiB),
//!   before the sort runs, so a merge of spilled runs planned later leaves the writer room.
//! - Beyond the floor it grows the reservation while the pool grants it, up to a cap (a
//!   quarter of the limit, at most 1 GiB; 1 GiB where the pool has no limit).
//! - A leaf is queued only while queued + encoded + its bytes fit in the reservation, or
//!   when nothing is queued at all: the writer always makes progress, and past the pool's
//!   limit only by one batch, which is then in the reservation too.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// The floor is this share of the pool's limit...
const FLOOR_SHARE: usize = 8;
/// ...and at most this.
const MAX_FLOOR: usize = 512 << 20;
/// The reservation grows up to this share of the limit...
const CAP_SHARE: usize = 4;
/// ...and never past this (nor past it where the pool has no limit).
const MAX_CAP: usize = 1 << 30;

/// What the writer holds now.
#[derive(Debug, Default)]
struct Held {
    queued: usize,
    encoded: usize,
    /// Counts every change, so that a waiter sees changes it did not wait for.
    changes: u64,
}

/// The memory of one output, in the pool.
pub(super) struct WriteMemory {
    reservation: MemoryReservation,
    floor: usize,
    cap: usize,
    held: Mutex<Held>,
    changed: Condvar,
}

impl std::fmt::Debug for WriteMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteMemory")
            .field("reserved", &self.reservation.size())
            .field("floor", &self.floor)
            .field("cap", &self.cap)
            .field("held", &*self.lock())
            .finish()
    }
}

impl WriteMemory {
    /// The memory of an output writing into `pool`; claims the floor now.
    pub(super) fn new(pool: &Arc<dyn MemoryPool>) -> Self {
        let (floor, cap) = match pool.memory_limit() {
            MemoryLimit::Finite(limit) => {
                let floor = (limit / FLOOR_SHARE).min(MAX_FLOOR);
                (floor, floor.max((limit / CAP_SHARE).min(MAX_CAP)))
            }
            MemoryLimit::Infinite | MemoryLimit::Unknown => (0, MAX_CAP),
        };
        let reservation =
            MemoryConsumer::new("gpusort Parquet writer (queued columns, encoded pages)")
                .register(pool);
        // At the start the pool is empty; if another query holds it, the writer starts
        // without its floor and grows as it can.
        let _ = reservation.try_resize(floor);
        Self {
            reservation,
            floor,
            cap,
            held: Mutex::new(Held::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `bytes` more queued when they fit (see the module's rules); otherwise returns
    /// the change count to wait on with [`Self::wait_for_change`].
    pub(super) fn try_queue(&self, bytes: usize) -> Result<(), u64> {
        let mut held = self.lock();
        let need = held.queued + held.encoded + bytes;
        let fits = need <= self.reservation.size()
            || (need <= self.cap && self.reservation.try_resize(need).is_ok());
        if !fits && held.queued > 0 {
            return Err(held.changes);
        }
        if !fits {
            // Nothing queued: go on, and count it.
            self.reservation.resize(need);
        }
        held.queued += bytes;
        Ok(())
    }

    /// The change count now, to wait on with [`Self::wait_for_change`].
    pub(super) fn changes(&self) -> u64 {
        self.lock().changes
    }

    /// Waits until something changed after change count `seen` (or a moment passed).
    pub(super) fn wait_for_change(&self, seen: u64) {
        let held = self.lock();
        if held.changes == seen {
            let _ = self
                .changed
                .wait_timeout(held, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A queued leaf of `bytes` is encoded (or dropped); its encoder now holds `encoded`
    /// bytes where it held `before`.
    pub(super) fn leaf_done(&self, bytes: usize, before: usize, encoded: usize) {
        let mut held = self.lock();
        held.queued -= bytes;
        held.encoded = held.encoded + encoded - before;
        self.changed_locked(&mut held);
    }

    /// An encoder finished (closed or failed): wake the writer waiting for it.
    pub(super) fn encoder_done(&self) {
        let mut held = self.lock();
        self.changed_locked(&mut held);
    }

    /// Encoders holding `encoded` bytes in all were appended to the file and dropped.
    pub(super) fn appended(&self, encoded: usize) {
        let mut held = self.lock();
        held.encoded -= encoded;
        let used = held.queued + held.encoded;
        if self.reservation.size() > used.max(self.floor) {
            self.reservation.resize(used.max(self.floor));
        }
        self.changed_locked(&mut held);
    }

    fn changed_locked(&self, held: &mut Held) {
        held.changes += 1;
        self.changed.notify_all();
    }

    /// Bytes reserved in the pool now.
    #[cfg(test)]
    pub(super) fn reserved(&self) -> usize {
        self.reservation.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::GreedyMemoryPool;

    #[test]
    fn the_floor_is_claimed_and_queued_bytes_stay_within_the_cap() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(256 << 20));
        let memory = WriteMemory::new(&pool);
        // An eighth of 256 MiB: 32 MiB; the cap a quarter, 64 MiB.
        assert_eq!(memory.reserved(), 32 << 20);
        assert_eq!(pool.reserved(), 32 << 20);
        memory.try_queue(60 << 20).unwrap();
        assert_eq!(memory.reserved(), 60 << 20);
        // Past the cap while something is queued: wait.
        assert!(memory.try_queue(8 << 20).is_err());
        memory.leaf_done(60 << 20, 0, 1 << 20);
        memory.try_queue(8 << 20).unwrap();
        memory.leaf_done(8 << 20, 1 << 20, 2 << 20);
        memory.appended(2 << 20);
        // Back to the floor once the file has it all.
        assert_eq!(memory.reserved(), 32 << 20);
    }

    #[test]
    fn with_nothing_queued_one_leaf_goes_through_a_full_pool() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(64 << 20));
        let memory = WriteMemory::new(&pool);
        let other = MemoryConsumer::new("sort").register(&pool);
        other.try_grow((64 << 20) - memory.reserved()).unwrap();
        memory.try_queue(100 << 20).unwrap();
        assert!(memory.reserved() >= 100 << 20);
        assert!(memory.try_queue(1).is_err());
    }
}
