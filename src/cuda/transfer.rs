//! Host ↔ device copies through two pinned staging buffers, chunked and overlapped.
//!
//! ```text
//!  upload:    fill chunk 0 ─► copy 0 ─┐
//!                     fill chunk 1 ───┴► copy 1 ─┐        (fill = convert/narrow the host
//!                              fill chunk 2 ─────┴► ...     data into pinned memory, on all cores)
//!  download:  copy 0 ─► copy 1 ─► copy 2 ...
//!                 └► drain 0  └► drain 1  ...             (drain = pinned → destination)
//! ```
//!
//! Pageable copies run at a fraction of PCIe speed; pinned ones at full speed, and with two
//! buffers the host's conversion of one chunk overlaps the copy of the other.

use rayon::prelude::*;

use super::device::{Device, DeviceBuffer, Event, PinnedBuffer};
use super::error::CudaResult;

/// Bytes per staging buffer.
pub const CHUNK_BYTES: usize = 32 << 20;
/// Elements per parallel slice of a fill or drain.
const PAR_ELEMS: usize = 1 << 16;

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
        let chunk = CHUNK_BYTES / std::mem::size_of::<T>();
        for (i, start) in (0..n).step_by(chunk).enumerate() {
            let which = i % 2;
            let len = chunk.min(n - start);
            self.done[which].wait()?;
            let staged = self.slice_mut::<T>(which, len);
            staged
                .par_chunks_mut(PAR_ELEMS)
                .enumerate()
                .for_each(|(j, part)| fill(start + j * PAR_ELEMS, part));
            // SAFETY: the staged chunk is not touched again until `done[which]` (recorded
            // right after the copy) has completed.
            unsafe { device.upload(&out, start, &*staged)? };
            self.done[which].record(device)?;
        }
        Ok(out)
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
        let chunk = CHUNK_BYTES / std::mem::size_of::<T>();
        let starts: Vec<usize> = (0..dst.len()).step_by(chunk).collect();
        let mut pending: Option<(usize, usize)> = None;
        for (i, &start) in starts.iter().enumerate() {
            let which = i % 2;
            let len = chunk.min(dst.len() - start);
            self.done[which].wait()?;
            let staged = self.slice_mut::<T>(which, len);
            // SAFETY: the staged chunk is read only after `done[which]` has completed.
            unsafe { device.download(staged, src, start)? };
            self.done[which].record(device)?;
            if let Some((prev, prev_start)) = pending.replace((i, start)) {
                self.drain(prev % 2, &mut dst[prev_start..], chunk)?;
            }
        }
        if let Some((last, last_start)) = pending {
            self.drain(last % 2, &mut dst[last_start..], chunk)?;
        }
        Ok(())
    }

    /// Waits for staging buffer `which` and copies its chunk into `dst`.
    fn drain<T: Plain>(&mut self, which: usize, dst: &mut [T], chunk: usize) -> CudaResult<()> {
        self.done[which].wait()?;
        let len = chunk.min(dst.len());
        let staged = self.slice_mut::<T>(which, len);
        dst[..len]
            .par_chunks_mut(PAR_ELEMS)
            .zip(staged.par_chunks(PAR_ELEMS))
            .for_each(|(d, s)| d.copy_from_slice(s));
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
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for u64 {}
