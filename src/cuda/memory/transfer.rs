//! Host ↔ device copies through two pinned staging buffers, chunked and overlapped.
//!
//! ```text
//!  upload:    fill chunk 0 ─► copy 0 ─┐
//!                     fill chunk 1 ───┴► copy 1 ─┐        (fill = convert/narrow the host
//!                              fill chunk 2 ─────┴► ...     data into pinned memory, on the
//!                                                           copy threads)
//!  download:  copy 0 ─► copy 1 ─► copy 2 ...
//!                 └► drain 0  └► drain 1  ...             (drain = pinned → destination)
//! ```
//!
//! Pageable copies run at a fraction of PCIe speed; pinned ones at full speed, and with two
//! buffers the host's conversion of one chunk overlaps the copy of the other.

use std::mem::MaybeUninit;
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer, Event, PinnedBuffer};

/// Bytes per staging buffer.
pub(crate) const CHUNK_BYTES: usize = 32 << 20;
/// Elements per parallel slice of a fill or drain.
const PAR_ELEMS: usize = 1 << 16;
/// Bytes per parallel piece of a drain into parts.
const PAR_BYTES: usize = 1 << 18;

/// Runs `copy` (a fill or a drain of the staging buffers) on the copy threads: a rayon pool
/// of its own, as many threads as the global pool, so that a copy never queues behind the
/// global pool's tasks. A Parquet writer encodes on the global pool while the next key
/// range is sorted (`pipeline/ranged_job.rs`); behind its encoders, the payload of a
/// range went up at 3 to 6 GB/s where it goes up at about 48 GB/s alone (SF10 `lineitem`
/// under 4 GiB, H200, docs/performance.md, 2026-11-29). Where the pool cannot be built,
/// the global pool copies.
///
/// Callers hold the staging buffers' lock, so they must not be workers of the global pool:
/// one waiting in `install` runs other global jobs meanwhile, and such a job could ask for
/// the staging buffers again. Every caller today is a thread of its own (tokio's blocking
/// threads, the gather's scoped threads, the page jobs' threads).
fn on_copy_threads<R: Send>(copy: impl FnOnce() -> R + Send) -> R {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(rayon::current_num_threads())
            .thread_name(|i| format!("gpusort-copy-{i}"))
            .build()
            .map_err(|e| log::warn!("gpusort: no copy threads ({e}); copies share the global pool"))
            .ok()
    });
    match pool {
        Some(pool) => pool.install(copy),
        None => copy(),
    }
}

/// Two pinned buffers and the events that say when the device is done with each.
#[derive(Debug)]
pub struct Staging {
    buffers: [PinnedBuffer<u8>; 2],
    done: [Event; 2],
}

impl Staging {
    /// Allocates the pinned buffers.
    pub fn new(device: &Device) -> CudaResult<Self> {
        Ok(Self {
            buffers: [
                PinnedBuffer::new(CHUNK_BYTES)?,
                PinnedBuffer::new(CHUNK_BYTES)?,
            ],
            done: [device.event()?, device.event()?],
        })
    }

    /// A staging buffer viewed as `T`s.
    fn slice_mut<T: Plain>(&mut self, which: usize, len: usize) -> &mut [T] {
        let bytes = self.buffers[which].as_mut_slice();
        // SAFETY: the pinned allocation is page aligned (so aligned for any `T`), holds
        // CHUNK_BYTES bytes, and `len * size_of::<T>() <= CHUNK_BYTES`; `T` is plain data.
        unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr() as *mut T, len) }
    }

    /// Uploads `n` elements into a new device buffer; `fill(start, out)` writes elements
    /// `start .. start + out.len()` (called on several threads for disjoint slices).
    pub fn upload<T, F>(
        &mut self,
        device: &Device,
        n: usize,
        what: &'static str,
        fill: F,
    ) -> CudaResult<DeviceBuffer<T>>
    where
        T: Plain,
        F: Fn(usize, &mut [T]) + Sync,
    {
        let out = device.alloc::<T>(n, what)?;
        let fill = |start: usize, part: &mut [T]| {
            fill(start, part);
            true
        };
        self.upload_chunks(device, n, fill, |start| (&out, start), |_, _| Ok(()))?;
        Ok(out)
    }

    /// Uploads `n` elements as [`Self::upload`] fills them, but each chunk goes into the
    /// device buffer `scratch` (at least a chunk long) and is then handed to
    /// `place(scratch, start, len)`, which queues what puts it in its final place (a
    /// kernel: in stream order, so the next chunk's copy into `scratch` waits for it).
    /// Stops at the first `fill` that returns `false` (what was queued then is harmless:
    /// the scratch buffer and the destination belong to the caller) and returns `false`.
    pub fn upload_through<T, F, P>(
        &mut self,
        device: &Device,
        n: usize,
        scratch: &DeviceBuffer<T>,
        fill: F,
        mut place: P,
    ) -> CudaResult<bool>
    where
        T: Plain,
        F: Fn(usize, &mut [T]) -> bool + Sync,
        P: FnMut(&DeviceBuffer<T>, usize, usize) -> CudaResult<()>,
    {
        let chunk = CHUNK_BYTES / std::mem::size_of::<T>();
        assert!(
            scratch.len() >= chunk.min(n),
            "a scratch buffer shorter than a chunk"
        );
        self.upload_chunks(
            device,
            n,
            fill,
            |_| (scratch, 0),
            |start, len| place(scratch, start, len),
        )
    }

    /// The chunk loop of the uploads: each chunk of `n` elements filled by `fill` (on the
    /// copy threads) into a staging buffer while the other one is copied, then copied to
    /// `to(start)` (a device buffer and the element there), then `then(start, len)`.
    /// Stops at the first `fill` that returns `false` and returns `false`.
    fn upload_chunks<'d, T: Plain + 'd>(
        &mut self,
        device: &Device,
        n: usize,
        fill: impl Fn(usize, &mut [T]) -> bool + Sync,
        to: impl Fn(usize) -> (&'d DeviceBuffer<T>, usize),
        mut then: impl FnMut(usize, usize) -> CudaResult<()>,
    ) -> CudaResult<bool> {
        let chunk = CHUNK_BYTES / std::mem::size_of::<T>();
        let (started, mut waiting, mut filling) = (
            std::time::Instant::now(),
            std::time::Duration::ZERO,
            std::time::Duration::ZERO,
        );
        for (i, start) in (0..n).step_by(chunk).enumerate() {
            let which = i % 2;
            let len = chunk.min(n - start);
            let waited = std::time::Instant::now();
            self.done[which].wait()?;
            waiting += waited.elapsed();
            let staged = self.slice_mut::<T>(which, len);
            let filled_at = std::time::Instant::now();
            let filled = on_copy_threads(|| {
                staged
                    .par_chunks_mut(PAR_ELEMS)
                    .enumerate()
                    .all(|(j, part)| fill(start + j * PAR_ELEMS, part))
            });
            filling += filled_at.elapsed();
            if !filled {
                return Ok(false);
            }
            let (dst, at) = to(start);
            // SAFETY: the staged chunk is not touched again until `done[which]` (recorded
            // right after the copy) has completed.
            unsafe { device.upload(dst, at, &*staged)? };
            self.done[which].record(device)?;
            then(start, len)?;
        }
        let bytes = n * std::mem::size_of::<T>();
        if bytes >= 256 << 20 {
            crate::trace::event(|| {
                format!(
                    "  staging: {:.0} MB in {:.1} ms, filling {:.1} ms, waiting for the device {:.1} ms",
                    bytes as f64 / 1e6,
                    started.elapsed().as_secs_f64() * 1e3,
                    filling.as_secs_f64() * 1e3,
                    waiting.as_secs_f64() * 1e3
                )
            });
        }
        Ok(true)
    }

    /// Downloads all of `src` into `dst` (same length).
    pub fn download<T: Plain>(
        &mut self,
        device: &Device,
        src: &DeviceBuffer<T>,
        dst: &mut [T],
    ) -> CudaResult<()> {
        assert_eq!(
            src.len(),
            dst.len(),
            "download into a slice of another length"
        );
        self.download_with(device, src, |start, staged| {
            let dst = &mut dst[start..start + staged.len()];
            on_copy_threads(|| {
                dst.par_chunks_mut(PAR_ELEMS)
                    .zip(staged.par_chunks(PAR_ELEMS))
                    .for_each(|(d, s)| d.copy_from_slice(s))
            });
        })
    }

    /// Downloads all of `src` into `parts` laid end to end (their lengths add up to
    /// `src.len()`): a gathered column lands straight in its output batches' buffers.
    /// Every byte of every part is written.
    pub fn download_parts(
        &mut self,
        device: &Device,
        src: &DeviceBuffer<u8>,
        parts: &mut [&mut [MaybeUninit<u8>]],
    ) -> CudaResult<()> {
        let mut starts = Vec::with_capacity(parts.len());
        let mut total = 0;
        for part in parts.iter() {
            starts.push(total);
            total += part.len();
        }
        assert_eq!(total, src.len(), "download into parts of another length");
        self.download_with(device, src, |start, staged| {
            let end = start + staged.len();
            let first = starts.partition_point(|&s| s <= start).saturating_sub(1);
            let last = starts.partition_point(|&s| s < end);
            // Pieces of at most PAR_BYTES, so that one large part (a whole-partition batch)
            // is drained by every core, not one.
            let pieces: Vec<(&mut [MaybeUninit<u8>], &[u8])> = parts[first..last]
                .iter_mut()
                .zip(&starts[first..last])
                .filter_map(|(part, &part_start)| {
                    let from = part_start.max(start);
                    let to = (part_start + part.len()).min(end);
                    (from < to).then(|| {
                        let dst = &mut part[from - part_start..to - part_start];
                        let src = &staged[from - start..to - start];
                        dst.chunks_mut(PAR_BYTES).zip(src.chunks(PAR_BYTES))
                    })
                })
                .flatten()
                .collect();
            on_copy_threads(|| {
                pieces.into_par_iter().for_each(|(dst, src)| {
                    // SAFETY: `dst` and `src` have the same length and do not overlap (one
                    // is pinned staging memory, the other an output buffer).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src.as_ptr(),
                            dst.as_mut_ptr() as *mut u8,
                            src.len(),
                        )
                    };
                })
            });
        })
    }

    /// Downloads `src` chunk by chunk through the staging buffers, the copy of one chunk
    /// overlapping the drain of the other; `drain(start, staged)` consumes elements
    /// `start .. start + staged.len()`.
    fn download_with<T: Plain>(
        &mut self,
        device: &Device,
        src: &DeviceBuffer<T>,
        mut drain: impl FnMut(usize, &[T]),
    ) -> CudaResult<()> {
        let n = src.len();
        let chunk = CHUNK_BYTES / std::mem::size_of::<T>();
        let mut pending: Option<(usize, usize)> = None;
        for (i, start) in (0..n).step_by(chunk).enumerate() {
            let which = i % 2;
            let len = chunk.min(n - start);
            self.done[which].wait()?;
            let staged = self.slice_mut::<T>(which, len);
            // SAFETY: the staged chunk is read only after `done[which]` has completed.
            unsafe { device.download(staged, src, start)? };
            self.done[which].record(device)?;
            if let Some((prev, prev_start)) = pending.replace((i, start)) {
                self.drain_chunk(prev % 2, prev_start, chunk.min(n - prev_start), &mut drain)?;
            }
        }
        if let Some((last, last_start)) = pending {
            self.drain_chunk(last % 2, last_start, chunk.min(n - last_start), &mut drain)?;
        }
        Ok(())
    }

    /// Waits for staging buffer `which` and hands its `len` elements to `drain`.
    fn drain_chunk<T: Plain>(
        &mut self,
        which: usize,
        start: usize,
        len: usize,
        drain: &mut impl FnMut(usize, &[T]),
    ) -> CudaResult<()> {
        self.done[which].wait()?;
        drain(start, self.slice_mut::<T>(which, len));
        Ok(())
    }
}

/// Plain data that may live in a staging buffer: any bit pattern is a valid value, no
/// padding, no pointers.
///
/// # Safety
/// Implement only for such types.
pub unsafe trait Plain: Copy + Send + Sync + 'static {}
// SAFETY: primitive integers are plain data.
unsafe impl Plain for u8 {}
// SAFETY: as above.
unsafe impl Plain for u16 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for u64 {}
