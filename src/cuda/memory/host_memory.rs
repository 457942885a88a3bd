//! Host memory for the device gather's output windows, reused from one sort to the next.
//!
//! The gather copies each window back into the output batches' buffers. Memory the process
//! has never touched costs a page fault and the kernel's zeroing per 4 KiB page on first
//! write: on the H100 hosts 16 threads copied 2.4 GB into fresh memory at 13–24 GB/s and
//! into memory touched before at 50–59 GB/s (docs/performance.md). So a window is one
//! region, its batches' buffers are parts of it (each an Arrow buffer of its own size, so
//! memory accounting sees each batch at its size), and when the last part is dropped the
//! region goes back to a list of idle regions that the next window takes from.
//!
//! ```text
//!  window ─ take(len) ─► region (idle one that fits, else new) ─► part per batch buffer
//!  last part dropped ─► region idle again (freed instead past the idle limit)
//! ```
//!
//! A consumer that keeps a few batches of a window keeps the whole region (one window:
//! about a quarter of the idle limit at most, `payload/`) until it drops them.
//!
//! Regions that went back are also page-locked for the device (a [`PageLocker`]:
//! `cuMemHostRegister`), by a thread of their own, off every query's critical path. The
//! device then copies a window straight into a locked region at full PCIe speed, without
//! the staging buffers and the host's copy out of them (on the H100 hosts a window of
//! 100 MB came back at 17 GB/s through staging, 50 GB/s into locked memory;
//! docs/performance.md). Locking touched memory runs at 13–28 GB/s, about as fast as
//! one window's copy through staging, which is why it is never done while a window waits.
//!
//! ```text
//!  last part dropped ─► region not locked yet ─► locking thread ─► idle (locked)
//!                     ─► region locked         ─────────────────► idle
//!  take(len) ─► a locked idle region that fits, else an unlocked one, else a new one
//! ```
//!
//! Idle regions are process memory outside DataFusion's memory pool: at most
//! [`idle_limit`] bytes (4 GiB, and never more than an eighth of physical memory; the
//! environment variable `GPUSORT_HOST_IDLE_BYTES` sets it, 0 keeps nothing idle; see
//! `tuning.rs`). Locked memory is bounded by the same limit: only regions that become idle
//! are locked, and a region freed past the limit is unlocked first. The host-lock switch
//! (`GPUSORT_HOST_LOCK=0`) locks nothing more and copies through the staging buffers.

use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, Weak};

use arrow::buffer::Buffer;
use datafusion::arrow;

use crate::cuda::tuning::switches;

/// Alignment of every region (any Arrow buffer type, and the gather's 256-byte parts).
const ALIGN: usize = 256;
/// Regions are allocated in multiples of this many bytes, so windows of nearby sizes
/// share them.
const GRANULE: usize = 2 << 20;
/// The most idle bytes kept, before the physical memory bound.
const MOST_IDLE: usize = 4 << 30;

/// Bytes of idle regions kept for reuse: `chosen` (`GPUSORT_HOST_IDLE_BYTES`) when set,
/// else [`MOST_IDLE`] but at most an eighth of physical memory (1 GiB when that cannot be
/// read).
pub(crate) fn idle_limit(chosen: Option<usize>) -> usize {
    if let Some(bytes) = chosen {
        return bytes;
    }
    let physical = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    match physical {
        Some(bytes) => MOST_IDLE.min(bytes / 8),
        None => 1 << 30,
    }
}

/// Whether idle regions are page-locked and copied into directly: the host-lock switch,
/// read each time, so that a benchmark can compare both in one process.
fn locking_enabled() -> bool {
    switches().host_lock()
}

/// Page-locks host memory for a device, so the device copies to and from it directly.
pub(crate) trait PageLocker: Send + Sync {
    /// Locks `len` bytes at `ptr`; `false` when that failed (the memory stays usable,
    /// unlocked).
    fn lock(&self, ptr: *mut u8, len: usize) -> bool;
    /// Unlocks memory that [`PageLocker::lock`] locked at `ptr`.
    fn unlock(&self, ptr: *mut u8);
}

/// One allocation of `capacity` bytes.
struct RawRegion {
    ptr: NonNull<u8>,
    capacity: usize,
    /// Page-locked by the regions' [`PageLocker`].
    locked: bool,
}

// SAFETY: a region is plain memory owned by whoever holds the `RawRegion`.
unsafe impl Send for RawRegion {}

impl RawRegion {
    fn layout(capacity: usize) -> Layout {
        Layout::from_size_align(capacity, ALIGN).expect("region layout")
    }

    fn new(capacity: usize) -> Self {
        let layout = Self::layout(capacity);
        // SAFETY: the layout has a non-zero size (callers round up to GRANULE).
        let ptr = unsafe { alloc(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self {
            ptr,
            capacity,
            locked: false,
        }
    }

    /// Unlocks (when locked) and frees the region.
    fn free(self, locker: Option<&dyn PageLocker>) {
        if let (true, Some(locker)) = (self.locked, locker) {
            locker.unlock(self.ptr.as_ptr());
        }
        // SAFETY: allocated by `new` with this layout and not freed before.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.capacity)) };
    }
}

/// The idle regions of the process.
pub(crate) struct HostRegions {
    idle: Mutex<Vec<RawRegion>>,
    /// Most bytes kept idle.
    limit: usize,
    /// Locks idle regions for the device; `None`: regions stay unlocked.
    locker: Option<Arc<dyn PageLocker>>,
    /// The locking thread's queue (started with the first region to lock) and how many
    /// regions it has not finished.
    locking: Mutex<(Option<Sender<RawRegion>>, usize)>,
    /// Signalled when the locking thread has finished a region.
    locked_one: Condvar,
}

impl std::fmt::Debug for HostRegions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRegions")
            .field("idle_bytes", &self.idle_bytes())
            .finish()
    }
}

impl HostRegions {
    /// No idle regions yet; at most `limit` bytes of them kept, locked by `locker` when
    /// given.
    pub(crate) fn new(limit: usize, locker: Option<Arc<dyn PageLocker>>) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            limit,
            locker,
            locking: Mutex::new((None, 0)),
            locked_one: Condvar::new(),
        }
    }

    /// A region of at least `len` bytes (its contents undefined), lent until every buffer
    /// made from it ([`LentRegion::part`]) is dropped; then it is idle again.
    pub(crate) fn take(self: &Arc<Self>, len: usize) -> LentRegion {
        let capacity = len.max(1).next_multiple_of(GRANULE);
        let raw = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            // The smallest idle region that fits (locked ones first), unless it is more
            // than twice too large.
            let best = idle
                .iter()
                .enumerate()
                .filter(|(_, r)| r.capacity >= capacity && r.capacity <= 2 * capacity)
                .min_by_key(|(_, r)| (!r.locked, r.capacity))
                .map(|(i, _)| i);
            best.map(|i| idle.swap_remove(i))
        };
        let raw = raw.unwrap_or_else(|| RawRegion::new(capacity));
        LentRegion {
            ptr: raw.ptr,
            len,
            owner: Arc::new(Region {
                raw: Some(raw),
                regions: Arc::clone(self),
            }),
        }
    }

    /// The most bytes kept idle: a window larger than this is a fresh allocation each
    /// time, never locked.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held by idle regions.
    pub(crate) fn idle_bytes(&self) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.iter().map(|r| r.capacity).sum()
    }

    /// Bytes held by idle regions that are page-locked.
    pub(crate) fn locked_bytes(&self) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.iter().filter(|r| r.locked).map(|r| r.capacity).sum()
    }

    /// Waits until the locking thread has finished every region handed to it.
    pub(crate) fn wait_for_locking(&self) {
        let mut locking = self.locking.lock().unwrap_or_else(|p| p.into_inner());
        while locking.1 > 0 {
            locking = self
                .locked_one
                .wait(locking)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A region that was lent is back: to the locking thread when it is not locked yet
    /// (and can be), else idle.
    fn give_back(self: &Arc<Self>, raw: RawRegion) {
        if raw.locked || self.limit == 0 || raw.capacity > self.limit || !locking_enabled() {
            return self.keep_idle(raw);
        }
        let Some(locker) = self.locker.clone() else {
            return self.keep_idle(raw);
        };
        let mut locking = self.locking.lock().unwrap_or_else(|p| p.into_inner());
        if locking.0.is_none() {
            locking.0 = self.start_locking_thread(locker);
        }
        let raw = match &locking.0 {
            Some(queue) => match queue.send(raw) {
                Ok(()) => {
                    locking.1 += 1;
                    return;
                }
                Err(unsent) => unsent.0,
            },
            None => raw,
        };
        drop(locking);
        self.keep_idle(raw);
    }

    /// Starts the thread that locks the regions sent to it and keeps them idle; `None`
    /// when no thread could be started.
    fn start_locking_thread(
        self: &Arc<Self>,
        locker: Arc<dyn PageLocker>,
    ) -> Option<Sender<RawRegion>> {
        let (queue, regions) = channel::<RawRegion>();
        let owner: Weak<Self> = Arc::downgrade(self);
        let started = std::thread::Builder::new()
            .name("gpusort-page-lock".into())
            .spawn(move || {
                for mut raw in regions {
                    let Some(owner) = owner.upgrade() else {
                        raw.free(None);
                        continue;
                    };
                    raw.locked = locker.lock(raw.ptr.as_ptr(), raw.capacity);
                    owner.keep_idle(raw);
                    let mut locking = owner.locking.lock().unwrap_or_else(|p| p.into_inner());
                    locking.1 -= 1;
                    owner.locked_one.notify_all();
                }
            });
        match started {
            Ok(_) => Some(queue),
            Err(error) => {
                log::warn!("gpusort: no thread to page-lock host memory: {error}");
                None
            }
        }
    }

    /// Keeps `raw` for reuse, or frees it (and older idle regions) past the idle limit.
    fn keep_idle(&self, raw: RawRegion) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.push(raw);
        let mut held: usize = idle.iter().map(|r| r.capacity).sum();
        let mut freed = Vec::new();
        while held > self.limit {
            let oldest = idle.remove(0);
            held -= oldest.capacity;
            freed.push(oldest);
        }
        drop(idle);
        for raw in freed {
            raw.free(self.locker.as_deref());
        }
    }
}

impl Drop for HostRegions {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|p| p.into_inner()));
        for raw in idle {
            raw.free(self.locker.as_deref());
        }
    }
}

/// A region lent out: Arrow buffers over parts of it keep it from going back.
pub(crate) struct LentRegion {
    ptr: NonNull<u8>,
    len: usize,
    owner: Arc<Region>,
}

impl LentRegion {
    /// The region's first byte (aligned to 256 bytes).
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Whether the region is page-locked and locking is enabled ([`locking_enabled`]):
    /// the device may copy into it directly.
    pub(crate) fn is_locked(&self) -> bool {
        self.owner.raw.as_ref().is_some_and(|raw| raw.locked) && locking_enabled()
    }

    /// Bytes `offset .. offset + size` as an Arrow buffer of capacity `size`: memory
    /// accounting sees each part at its own size, and the region goes back when the last
    /// part is dropped.
    ///
    /// # Safety
    /// The part lies inside the region's length, its bytes are written before the buffer
    /// is read, and no two parts overlap while written.
    pub(crate) unsafe fn part(&self, offset: usize, size: usize) -> Buffer {
        assert!(offset + size <= self.len, "part past the end of a region");
        // SAFETY: inside the allocation (checked above), which `owner` keeps alive for as
        // long as the buffer lives; the caller writes it before any read.
        unsafe {
            let ptr = NonNull::new_unchecked(self.ptr.as_ptr().add(offset));
            Buffer::from_custom_allocation(ptr, size, Arc::clone(&self.owner) as _)
        }
    }
}

/// The owner of a region lent out as Arrow buffers.
struct Region {
    raw: Option<RawRegion>,
    regions: Arc<HostRegions>,
}

// SAFETY: the region's memory is only reached through the Arrow buffers that own it.
unsafe impl Sync for Region {}
impl std::panic::RefUnwindSafe for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            self.regions.give_back(raw);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(regions: &Arc<HostRegions>, len: usize, byte: u8) -> Buffer {
        let region = regions.take(len);
        // SAFETY: every byte is written before the buffer is read.
        unsafe {
            std::ptr::write_bytes(region.as_mut_ptr(), byte, len);
            region.part(0, len)
        }
    }

    #[test]
    fn regions_come_back_when_the_last_part_is_dropped() {
        let regions = Arc::new(HostRegions::new(1 << 30, None));
        let region = regions.take(5000);
        let first = region.as_mut_ptr() as *const u8;
        // SAFETY: both parts are written before they are read and do not overlap.
        let (a, b) = unsafe {
            std::ptr::write_bytes(region.as_mut_ptr(), 7, 5000);
            (region.part(0, 4096), region.part(4096, 10))
        };
        drop(region);
        // Each part counts its own bytes.
        assert_eq!((a.capacity(), b.capacity()), (4096, 10));
        drop(a);
        assert_eq!(regions.idle_bytes(), 0, "a part still holds the region");
        assert_eq!(b.as_slice(), &[7; 10]);
        drop(b);
        assert_eq!(regions.idle_bytes(), GRANULE);
        // The next window of a similar size reuses it; a much smaller one does not.
        let again = filled(&regions, 4000, 1);
        assert_eq!(again.as_ptr(), first);
        assert_eq!(again.len(), 4000);
        let other = filled(&regions, 10, 2);
        assert_ne!(other.as_ptr(), first);
        drop((again, other));
        assert_eq!(regions.idle_bytes(), 2 * GRANULE);
        assert_eq!(first as usize % ALIGN, 0);
    }

    /// Records what it locked and unlocked; refuses regions of `refuse` bytes.
    #[derive(Default)]
    struct RecordingLocker {
        locked: Mutex<Vec<usize>>,
        unlocked: Mutex<Vec<usize>>,
        refuse: usize,
    }

    impl PageLocker for RecordingLocker {
        fn lock(&self, ptr: *mut u8, len: usize) -> bool {
            if len == self.refuse {
                return false;
            }
            self.locked.lock().unwrap().push(ptr as usize);
            true
        }

        fn unlock(&self, ptr: *mut u8) {
            self.unlocked.lock().unwrap().push(ptr as usize);
        }
    }

    #[test]
    fn regions_that_go_back_are_locked_and_taken_first() {
        let locker = Arc::new(RecordingLocker {
            refuse: 3 * GRANULE,
            ..Default::default()
        });
        let regions = Arc::new(HostRegions::new(
            8 * GRANULE,
            Some(Arc::clone(&locker) as Arc<dyn PageLocker>),
        ));
        // A new region is not locked; once back it is, by the locking thread.
        let first = regions.take(GRANULE);
        assert!(!first.is_locked());
        let first_at = first.as_mut_ptr() as usize;
        drop(first);
        regions.wait_for_locking();
        assert_eq!(*locker.locked.lock().unwrap(), [first_at]);
        assert_eq!(regions.locked_bytes(), GRANULE);
        // A region the locker refuses stays usable, unlocked.
        drop(regions.take(3 * GRANULE));
        regions.wait_for_locking();
        assert_eq!(
            (regions.idle_bytes(), regions.locked_bytes()),
            (4 * GRANULE, GRANULE)
        );
        // An unlocked idle region that fits as well as a locked one loses to it, and a
        // locked region goes back without being locked again.
        let unlocked_region = regions.take(2 * GRANULE);
        assert!(!unlocked_region.is_locked(), "3 granules, refused");
        let locked_region = regions.take(GRANULE);
        assert!(locked_region.is_locked());
        assert_eq!(locked_region.as_mut_ptr() as usize, first_at);
        drop((locked_region, unlocked_region));
        regions.wait_for_locking();
        assert_eq!(locker.locked.lock().unwrap().len(), 1);
        // Freed past the limit: unlocked first.
        let large = regions.take(8 * GRANULE);
        drop(large);
        regions.wait_for_locking();
        assert_eq!(regions.idle_bytes(), 8 * GRANULE);
        assert_eq!(*locker.unlocked.lock().unwrap(), [first_at]);
        assert_eq!(regions.locked_bytes(), 8 * GRANULE);
    }

    #[test]
    fn idle_memory_stays_under_the_limit() {
        let regions = Arc::new(HostRegions::new(3 * GRANULE, None));
        let buffers: Vec<Buffer> = (0..5).map(|i| filled(&regions, GRANULE, i)).collect();
        drop(buffers);
        assert_eq!(regions.idle_bytes(), 3 * GRANULE);
        assert!(idle_limit(None) >= GRANULE && idle_limit(None) <= MOST_IDLE);
        assert_eq!(idle_limit(Some(7)), 7);
    }
}
