//! The device memory budget, and the queue in which sorts and gathers take the device.
//!
//! ```text
//!  every DeviceBuffer   charged when allocated, against the limit of the lease that holds
//!                       the device (over it: OverBudget, handled as out of memory);
//!                       released when dropped (also by a run's state outside any lease)
//!  lease(Sort{bytes})   first come, first served: waits until the device is free, no gather
//!                       waits, and `bytes` fit beside what other runs hold on the device;
//!                       after ADMISSION_PATIENCE it goes in anyway and the run is sized to
//!                       what is free (`Lease::available`), so a stalled holder never
//!                       deadlocks the queue
//!  lease(Gather)        ahead of every sort (a gather frees what its run holds); waits only
//!                       for the device
//!  idle                 IdleRelease: after `idle_release` with no lease, the driver's pool
//!                       gives its cached blocks back (runtime.rs runs the trim)
//! ```
//!
//! One lease holds the device at a time (the backend queues all its work on one stream);
//! what the budget decides is who goes next and how large a run may be.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::faults::{FaultScope, FaultSite};

/// What one session's work may do on the device: the memory its leases may fill, and the
/// faults injected into it (tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceShare {
    /// Device memory in use (every holder's) that the work's allocations may not pass.
    pub limit: usize,
    /// The faults armed for the work.
    pub faults: FaultScope,
}

impl DeviceShare {
    /// No limit but the device's memory, no faults (benchmarks, tools).
    pub(crate) const UNLIMITED: Self = Self {
        limit: usize::MAX,
        faults: FaultScope::NONE,
    };
}

/// How long a sort waits for other runs to free device memory before it goes in and sorts
/// in pieces that fit what is free.
pub(crate) const ADMISSION_PATIENCE: Duration = Duration::from_secs(2);

/// What a lease of the device is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseKind {
    /// Sorting a run that needs about `bytes` of device memory.
    Sort {
        /// The run's estimated peak device memory.
        bytes: usize,
    },
    /// Gathering a sorted run (or other short work that frees memory): goes first.
    Gather,
}

/// Device memory use, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceMemoryStats {
    /// Bytes of device buffers alive now.
    pub used: usize,
    /// The most alive at once since the process started (or the last reset).
    pub peak: usize,
    /// Allocations refused because they would pass the holder's limit.
    pub refused: u64,
}

/// The ledger of the device's memory and the queue for the device.
#[derive(Debug, Default)]
pub(crate) struct DeviceBudget {
    /// The device's ordinal (where injected faults fire).
    ordinal: usize,
    ledger: Mutex<Ledger>,
    changed: Condvar,
}

#[derive(Debug)]
struct Ledger {
    /// Bytes of our device buffers alive.
    used: usize,
    /// Most bytes alive at once (process-wide, resettable).
    peak: usize,
    /// Most bytes alive at once during the current lease.
    lease_peak: usize,
    /// The current lease's limit (no lease: none).
    limit: usize,
    /// The current lease's faults, and whether it is a gather's.
    faults: FaultScope,
    gathering: bool,
    /// A lease holds the device.
    busy: bool,
    /// The next sort's place in the queue, and the place now served.
    next_ticket: u64,
    serving: u64,
    /// Gathers waiting for the device (they go before any sort).
    gathers_waiting: usize,
    /// When the last lease ended; `None` while one is held or once idle memory was released.
    idle_since: Option<Instant>,
    /// Allocations refused over a limit.
    refused: u64,
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            used: 0,
            peak: 0,
            lease_peak: 0,
            limit: usize::MAX,
            faults: FaultScope::NONE,
            gathering: false,
            busy: false,
            next_ticket: 0,
            serving: 0,
            gathers_waiting: 0,
            idle_since: None,
            refused: 0,
        }
    }
}

/// The device held for one piece of work; given back when dropped.
#[derive(Debug)]
pub(crate) struct Lease<'a> {
    budget: &'a DeviceBudget,
    /// Device memory free within the lease's limit when it began.
    pub available: usize,
    /// How long the lease waited for its turn.
    pub waited: Duration,
}

impl Lease<'_> {
    /// The ordinal of the device held.
    pub(crate) fn ordinal(&self) -> usize {
        self.budget.ordinal
    }

    /// The most device memory alive at once (every holder's) during this lease so far.
    pub(crate) fn peak_bytes(&self) -> usize {
        self.budget.lock().lease_peak
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut ledger = self.budget.lock();
        ledger.busy = false;
        ledger.limit = usize::MAX;
        ledger.faults = FaultScope::NONE;
        ledger.idle_since = Some(Instant::now());
        drop(ledger);
        self.budget.changed.notify_all();
    }
}

impl DeviceBudget {
    /// The budget of device `ordinal`, nothing used.
    pub(crate) fn of_device(ordinal: usize) -> Self {
        Self {
            ordinal,
            ..Self::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for the device as `kind` says, for work within `share` (its limit counts every
    /// holder's device memory together), and holds it until the lease is dropped.
    pub(crate) fn lease(&self, kind: LeaseKind, share: DeviceShare) -> Lease<'_> {
        let limit = share.limit;
        let started = Instant::now();
        let mut ledger = self.lock();
        match kind {
            LeaseKind::Gather => {
                ledger.gathers_waiting += 1;
                while ledger.busy {
                    ledger = self.wait(ledger, None);
                }
                ledger.gathers_waiting -= 1;
            }
            LeaseKind::Sort { bytes } => {
                let ticket = ledger.next_ticket;
                ledger.next_ticket += 1;
                // Waiting for its turn has no deadline; waiting for memory, once it is its
                // turn (the device free, no gather waiting), has one.
                let mut deadline = None;
                loop {
                    let first = ledger.serving == ticket;
                    let turn = first && !ledger.busy && ledger.gathers_waiting == 0;
                    let fits = ledger.used == 0 || ledger.used.saturating_add(bytes) <= limit;
                    if turn && deadline.is_none() {
                        deadline = Some(Instant::now() + ADMISSION_PATIENCE);
                    }
                    let patience_over = deadline.is_some_and(|d| Instant::now() >= d);
                    if turn && (fits || patience_over) {
                        break;
                    }
                    let until = (turn && !fits).then_some(deadline).flatten();
                    ledger = self.wait(ledger, until);
                }
                ledger.serving += 1;
            }
        }
        ledger.busy = true;
        ledger.limit = limit;
        ledger.faults = share.faults;
        ledger.gathering = kind == LeaseKind::Gather;
        ledger.lease_peak = ledger.used;
        ledger.idle_since = None;
        let available = limit.saturating_sub(ledger.used);
        drop(ledger);
        // Later sorts may be waiting for the queue to move on.
        self.changed.notify_all();
        Lease {
            budget: self,
            available,
            waited: started.elapsed(),
        }
    }

    fn wait<'a>(
        &self,
        ledger: MutexGuard<'a, Ledger>,
        until: Option<Instant>,
    ) -> MutexGuard<'a, Ledger> {
        let timeout = match until {
            Some(until) => until.saturating_duration_since(Instant::now()),
            None => Duration::from_secs(3600),
        };
        self.changed
            .wait_timeout(ledger, timeout)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    /// Where the work holding the device runs, for its faults: its scope, whether it is a
    /// gather, and this device's ordinal.
    pub(crate) fn holder_faults(&self) -> FaultSite {
        let ledger = self.lock();
        FaultSite {
            scope: ledger.faults,
            gathering: ledger.gathering,
            ordinal: self.ordinal,
        }
    }

    /// Charges an allocation of `bytes` for `what`: refused when it would pass the limit
    /// of the lease holding the device.
    pub(crate) fn charge(&self, bytes: usize, what: &'static str) -> CudaResult<()> {
        let mut ledger = self.lock();
        let after = ledger.used.saturating_add(bytes);
        if after > ledger.limit {
            ledger.refused += 1;
            return Err(CudaError::OverBudget {
                bytes,
                what,
                used: ledger.used,
                limit: ledger.limit,
            });
        }
        ledger.used = after;
        ledger.peak = ledger.peak.max(after);
        ledger.lease_peak = ledger.lease_peak.max(after);
        Ok(())
    }

    /// Gives back what [`Self::charge`] took for a buffer now freed.
    pub(crate) fn release(&self, bytes: usize) {
        let mut ledger = self.lock();
        ledger.used = ledger.used.saturating_sub(bytes);
        drop(ledger);
        self.changed.notify_all();
    }

    /// Use now and at most.
    pub(crate) fn stats(&self) -> DeviceMemoryStats {
        let ledger = self.lock();
        DeviceMemoryStats {
            used: ledger.used,
            peak: ledger.peak,
            refused: ledger.refused,
        }
    }

    /// Starts the process-wide peak again from what is alive now.
    pub(crate) fn reset_peak(&self) {
        let mut ledger = self.lock();
        ledger.peak = ledger.used;
    }

    /// Waits until the device has been idle for `after` (no lease), then takes it as a
    /// gather would and returns the lease (the caller gives idle memory back under it);
    /// waits again after every release.
    pub(crate) fn wait_idle(&self, after: Duration) -> Lease<'_> {
        let mut ledger = self.lock();
        loop {
            match ledger.idle_since {
                Some(since) if !ledger.busy && since.elapsed() >= after => break,
                Some(since) if !ledger.busy => {
                    let until = since + after;
                    ledger = self.wait(ledger, Some(until));
                }
                _ => ledger = self.wait(ledger, None),
            }
        }
        ledger.busy = true;
        drop(ledger);
        Lease {
            budget: self,
            available: 0,
            waited: Duration::ZERO,
        }
    }

    /// Marks idle memory as given back: the idle wait starts only after the next lease.
    pub(crate) fn released_idle(&self, lease: Lease<'_>) {
        drop(lease);
        let mut ledger = self.lock();
        ledger.idle_since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn share(limit: usize) -> DeviceShare {
        DeviceShare {
            limit,
            faults: FaultScope::NONE,
        }
    }

    #[test]
    fn charges_past_the_lease_limit_are_refused_and_released_bytes_come_back() {
        let budget = DeviceBudget::default();
        let lease = budget.lease(LeaseKind::Sort { bytes: 100 }, share(1000));
        assert_eq!(lease.available, 1000);
        budget.charge(600, "a").unwrap();
        let refused = budget.charge(500, "b").unwrap_err();
        assert!(refused.is_out_of_memory(), "{refused}");
        assert!(refused.to_string().contains("600 of 1000"), "{refused}");
        budget.charge(400, "c").unwrap();
        assert_eq!(lease.peak_bytes(), 1000);
        drop(lease);
        budget.release(600);
        // Outside a lease nothing limits a charge (a run's state is freed, never grown).
        let stats = budget.stats();
        assert_eq!((stats.used, stats.peak, stats.refused), (400, 1000, 1));
        budget.release(400);
        assert_eq!(budget.stats().used, 0);
    }

    #[test]
    fn a_sort_waits_for_memory_another_run_holds_and_goes_in_when_it_is_freed() {
        let budget = Arc::new(DeviceBudget::default());
        // A first run sorted, its state (800 bytes) still on the device.
        drop(budget.lease(LeaseKind::Sort { bytes: 800 }, share(1000)));
        budget.charge(800, "held").unwrap();
        let freed_after = Duration::from_millis(200);
        let freer = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || {
                std::thread::sleep(freed_after);
                budget.release(800);
            })
        };
        let lease = budget.lease(LeaseKind::Sort { bytes: 500 }, share(1000));
        assert!(lease.waited >= freed_after, "{:?}", lease.waited);
        assert!(lease.waited < ADMISSION_PATIENCE, "{:?}", lease.waited);
        assert_eq!(lease.available, 1000);
        freer.join().unwrap();
    }

    #[test]
    fn a_sort_that_never_fits_goes_in_after_its_patience_with_what_is_free() {
        let budget = DeviceBudget::default();
        budget.charge(700, "held by a stalled run").unwrap();
        let lease = budget.lease(LeaseKind::Sort { bytes: 500 }, share(1000));
        assert!(lease.waited >= ADMISSION_PATIENCE, "{:?}", lease.waited);
        assert_eq!(lease.available, 300);
    }

    #[test]
    fn patience_starts_when_the_device_is_free_not_while_another_sort_holds_it() {
        let budget = Arc::new(DeviceBudget::default());
        let held_for = ADMISSION_PATIENCE + Duration::from_millis(300);
        let freed_after = Duration::from_millis(200);
        let (ready, holding) = std::sync::mpsc::channel();
        let other = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || {
                let first = budget.lease(LeaseKind::Sort { bytes: 800 }, share(1000));
                budget.charge(800, "the first run's state").unwrap();
                ready.send(()).unwrap();
                std::thread::sleep(held_for);
                drop(first);
                // The first run's gather frees its state a moment after its sort ended.
                std::thread::sleep(freed_after);
                budget.release(800);
            })
        };
        holding.recv().unwrap();
        let lease = budget.lease(LeaseKind::Sort { bytes: 500 }, share(1000));
        assert!(lease.waited >= held_for, "{:?}", lease.waited);
        assert_eq!(
            lease.available, 1000,
            "it went in before the memory was freed"
        );
        other.join().unwrap();
    }

    #[test]
    fn sorts_are_served_in_arrival_order_and_gathers_go_first() {
        let budget = Arc::new(DeviceBudget::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let started = Arc::new(AtomicUsize::new(0));
        let first = budget.lease(LeaseKind::Sort { bytes: 1 }, share(1000));
        let mut threads = Vec::new();
        let kinds = [
            ("sort 1", LeaseKind::Sort { bytes: 1 }),
            ("sort 2", LeaseKind::Sort { bytes: 1 }),
            ("gather", LeaseKind::Gather),
        ];
        for (name, kind) in kinds {
            let (budget, order, arrived) = (
                Arc::clone(&budget),
                Arc::clone(&order),
                Arc::clone(&started),
            );
            threads.push(std::thread::spawn(move || {
                arrived.fetch_add(1, Ordering::SeqCst);
                let _lease = budget.lease(kind, share(1000));
                order.lock().unwrap().push(name);
                std::thread::sleep(Duration::from_millis(20));
            }));
            // Each waits before the next arrives.
            while started.load(Ordering::SeqCst) < threads.len() {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(first);
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["gather", "sort 1", "sort 2"]);
    }

    #[test]
    fn the_idle_wait_ends_after_the_last_lease_and_once_per_idle_period() {
        let budget = DeviceBudget::default();
        drop(budget.lease(LeaseKind::Gather, share(1000)));
        let after = Duration::from_millis(50);
        let started = Instant::now();
        let lease = budget.wait_idle(after);
        assert!(started.elapsed() >= Duration::from_millis(40));
        budget.released_idle(lease);
        assert_eq!(budget.lock().idle_since, None);
    }
}
