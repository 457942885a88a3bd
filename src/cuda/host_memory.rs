//! Host memory for the device gather's output windows, reused from one sort to the next.
//!
//! The gather copies each window back into the output batches' buffers. Memory the process
//! has never touched costs a page fault and the kernel's zeroing per 4 KiB page on first
//! write: on the H100 hosts 16 threads copied 2.4 GB into fresh memory at 13–24 GB/s and
//! into memory touched before at 50–59 GB/s (docs/performance.md). So a window is one
//! region, its batches' buffers are slices of it, and when the last of them is dropped the
//! region goes back to a list of idle regions that the next window takes from.
//!
//! ```text
//!  window ─ take(len) ─► region (idle one that fits, else new) ─► Buffer ─► batch slices
//!  last slice dropped ─► region idle again (freed instead past the idle limit)
//! ```
//!
//! Idle regions are process memory outside DataFusion's memory pool: at most
//! [`idle_limit`] bytes (4 GiB, and never more than an eighth of physical memory).

use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::buffer::Buffer;
use datafusion::arrow;

/// Alignment of every region (any Arrow buffer type, and the gather's 256-byte parts).
const ALIGN: usize = 256;
/// Regions are allocated in multiples of this many bytes, so windows of nearby sizes
/// share them.
const GRANULE: usize = 2 << 20;
/// The most idle bytes kept, before the physical memory bound.
const MOST_IDLE: usize = 4 << 30;

/// Bytes of idle regions kept for reuse: [`MOST_IDLE`], at most an eighth of physical
/// memory (1 GiB when that cannot be read).
pub fn idle_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
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
    })
}

/// One allocation of `capacity` bytes.
struct RawRegion {
    ptr: NonNull<u8>,
    capacity: usize,
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
        Self { ptr, capacity }
    }

    fn free(self) {
        // SAFETY: allocated by `new` with this layout and not freed before.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.capacity)) };
    }
}

/// The idle regions of the process.
pub struct HostRegions {
    idle: Mutex<Vec<RawRegion>>,
    /// Most bytes kept idle.
    limit: usize,
}

impl std::fmt::Debug for HostRegions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRegions")
            .field("idle_bytes", &self.idle_bytes())
            .finish()
    }
}

impl HostRegions {
    /// No idle regions yet; at most `limit` bytes of them kept.
    pub fn new(limit: usize) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            limit,
        }
    }

    /// A region of at least `len` bytes as one Arrow buffer of exactly `len` bytes (its
    /// contents undefined: every byte must be written before it is read); the region
    /// becomes idle again when the buffer and all its slices are dropped.
    ///
    /// # Safety
    /// The caller writes all `len` bytes (through [`Buffer::as_ptr`]) before anything
    /// reads the buffer or a slice of it.
    pub unsafe fn take(self: &Arc<Self>, len: usize) -> Buffer {
        let capacity = len.max(1).next_multiple_of(GRANULE);
        let raw = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            // The smallest idle region that fits, unless it is more than twice too large.
            let best = idle
                .iter()
                .enumerate()
                .filter(|(_, r)| r.capacity >= capacity && r.capacity <= 2 * capacity)
                .min_by_key(|(_, r)| r.capacity)
                .map(|(i, _)| i);
            best.map(|i| idle.swap_remove(i))
        };
        let raw = raw.unwrap_or_else(|| RawRegion::new(capacity));
        let ptr = raw.ptr;
        let owner = Arc::new(Region {
            raw: Some(raw),
            regions: Arc::clone(self),
        });
        // SAFETY: `ptr` is valid for `capacity >= len` bytes for as long as `owner` lives,
        // which the buffer keeps alive; the caller writes them before any read.
        unsafe { Buffer::from_custom_allocation(ptr, len, owner) }
    }

    /// Bytes held by idle regions.
    pub fn idle_bytes(&self) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.iter().map(|r| r.capacity).sum()
    }

    /// Keeps `raw` for reuse, or frees it (and older idle regions) past the idle limit.
    fn give_back(&self, raw: RawRegion) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.push(raw);
        let mut held: usize = idle.iter().map(|r| r.capacity).sum();
        while held > self.limit {
            let oldest = idle.remove(0);
            held -= oldest.capacity;
            oldest.free();
        }
    }
}

impl Drop for HostRegions {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|p| p.into_inner()));
        idle.into_iter().for_each(RawRegion::free);
    }
}

/// The owner of a region lent out as an Arrow buffer.
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
        // SAFETY: every byte is written before the buffer is read.
        let buffer = unsafe { regions.take(len) };
        unsafe { std::ptr::write_bytes(buffer.as_ptr() as *mut u8, byte, len) };
        buffer
    }

    #[test]
    fn regions_come_back_when_the_last_slice_is_dropped() {
        let regions = Arc::new(HostRegions::new(1 << 30));
        let whole = filled(&regions, 5000, 7);
        let first = whole.as_ptr();
        let slice = whole.slice_with_length(4096, 10);
        drop(whole);
        assert_eq!(regions.idle_bytes(), 0, "a slice still holds the region");
        assert_eq!(slice.as_slice(), &[7; 10]);
        drop(slice);
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

    #[test]
    fn idle_memory_stays_under_the_limit() {
        let regions = Arc::new(HostRegions::new(3 * GRANULE));
        let buffers: Vec<Buffer> = (0..5).map(|i| filled(&regions, GRANULE, i)).collect();
        drop(buffers);
        assert_eq!(regions.idle_bytes(), 3 * GRANULE);
        assert!(idle_limit() >= GRANULE && idle_limit() <= MOST_IDLE);
    }
}
