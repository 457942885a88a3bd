//! A second stream on a device, for copies that overlap the kernels of its main stream
//! (one sort's upload of the next chunk while the last one is partitioned, its download of
//! one sorted range while the next is sorted).
//!
//! The two streams are ordered only where the caller says so: the side stream waits for
//! the main stream's work queued so far ([`SideStream::wait_for_work`]), and the main
//! stream for a mark of the side stream ([`SideStream::mark`], an [`Event`];
//! [`SideStream::work_waits_for`]).
//! Buffers are allocated and freed on the main stream, so a buffer the side stream uses
//! must be allocated before a [`SideStream::wait_for_work`] and freed only after the side
//! stream's use of it is done ([`SideStream::synchronize`], or a mark the main stream
//! waited for).

use cudarc::driver::result;
use cudarc::driver::sys;

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{
    call, download_on, new_stream, upload_on, Device, DeviceBuffer, Event,
};

/// A non-blocking stream beside `device`'s own, destroyed (after its work) on drop.
pub(crate) struct SideStream<'d> {
    device: &'d Device,
    stream: sys::CUstream,
}

impl<'d> SideStream<'d> {
    /// A new side stream of `device` (whose context must be current on this thread).
    pub(crate) fn new(device: &'d Device) -> CudaResult<Self> {
        Ok(Self {
            device,
            stream: new_stream()?,
        })
    }

    /// Work queued on the side stream from now on waits for what the main stream holds now.
    pub(crate) fn wait_for_work(&self) -> CudaResult<()> {
        self.device.order_before(self.stream)
    }

    /// Work queued on the main stream from now on waits for `mark` (of the side stream).
    pub(crate) fn work_waits_for(&self, mark: &Event) -> CudaResult<()> {
        mark.queue_wait_on(self.device.stream())
    }

    /// The current end of the side stream's work (`wait` blocks the host until it).
    pub(crate) fn mark(&self) -> CudaResult<Event> {
        let mark = self.device.event()?;
        mark.record_on(self.stream)?;
        Ok(mark)
    }

    /// Queues a copy of `src` to `dst[offset..]` on the side stream.
    ///
    /// # Safety
    /// `src` must stay alive and unchanged, and `dst` alive, until the copy is done.
    pub(crate) unsafe fn upload<T>(
        &self,
        dst: &DeviceBuffer<T>,
        offset: usize,
        src: &[T],
    ) -> CudaResult<()> {
        // SAFETY: as the caller promises; the stream is of `dst`'s device.
        unsafe { upload_on(self.stream, dst, offset, src) }
    }

    /// Queues a copy of `src[..dst.len()]` into `dst` on the side stream.
    ///
    /// # Safety
    /// `dst` must stay alive and untouched, and `src` alive, until the copy is done.
    pub(crate) unsafe fn download<T>(
        &self,
        dst: &mut [T],
        src: &DeviceBuffer<T>,
    ) -> CudaResult<()> {
        // SAFETY: as the caller promises; the stream is of `src`'s device.
        unsafe { download_on(self.stream, dst, src, 0) }
    }

    /// Blocks until the side stream's work is done.
    pub(crate) fn synchronize(&self) -> CudaResult<()> {
        // SAFETY: the stream lives as long as `self`.
        call("cuStreamSynchronize", unsafe {
            result::stream::synchronize(self.stream)
        })
    }
}

impl Drop for SideStream<'_> {
    fn drop(&mut self) {
        // Copies still queued finish first: their host memory may be about to go.
        let _ = self.synchronize();
        // SAFETY: created by `new`, no longer used.
        let _ = unsafe { result::stream::destroy(self.stream) };
    }
}
