//! A second stream on a device, for copies that overlap the kernels of its main stream
//! (one sort's upload of the next chunk while the last one is partitioned, its download of
//! one sorted range while the next is sorted).
//!
//! The two streams are ordered only where the caller says so: the side stream waits for
//! the main stream's work queued so far ([`SideStream::wait_for_work`]), and the main
//! stream for a [`Mark`] of the side stream ([`SideStream::work_waits_for`]).
//! Buffers are allocated and freed on the main stream, so a buffer the side stream uses
//! must be allocated before a [`SideStream::wait_for_work`] and freed only after the side
//! stream's use of it is done ([`SideStream::synchronize`], or a mark the main stream
//! waited for).

use cudarc::driver::result;
use cudarc::driver::sys;

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};

fn call<T>(name: &'static str, r: Result<T, cudarc::driver::DriverError>) -> CudaResult<T> {
    r.map_err(|e| CudaError::driver(name, e))
}

/// A non-blocking stream beside `device`'s own, destroyed (after its work) on drop.
pub(crate) struct SideStream<'d> {
    device: &'d Device,
    stream: sys::CUstream,
}

/// A point in one stream's work that the other stream, or the host, can wait for.
pub(crate) struct Mark {
    handle: sys::CUevent,
}

// SAFETY: event handles may be used from any thread of the context.
unsafe impl Send for Mark {}
unsafe impl Sync for Mark {}

impl Mark {
    fn record(stream: sys::CUstream) -> CudaResult<Self> {
        let handle = call(
            "cuEventCreate",
            result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING),
        )?;
        let mark = Mark { handle };
        // SAFETY: both handles are alive.
        call("cuEventRecord", unsafe {
            result::event::record(mark.handle, stream)
        })?;
        Ok(mark)
    }

    /// Blocks the calling thread until the work before the mark is done.
    pub(crate) fn wait(&self) -> CudaResult<()> {
        // SAFETY: the handle is alive.
        call("cuEventSynchronize", unsafe {
            result::event::synchronize(self.handle)
        })
    }

    fn queue_wait(&self, stream: sys::CUstream) -> CudaResult<()> {
        // SAFETY: both handles are alive; the wait is queued, not blocking.
        call("cuStreamWaitEvent", unsafe {
            result::stream::wait_event(
                stream,
                self.handle,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        })
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once (the driver keeps it until the
        // work it marks is done).
        let _ = unsafe { result::event::destroy(self.handle) };
    }
}

impl<'d> SideStream<'d> {
    /// A new side stream of `device` (whose context must be current on this thread).
    pub(crate) fn new(device: &'d Device) -> CudaResult<Self> {
        let stream = call(
            "cuStreamCreate",
            result::stream::create(result::stream::StreamKind::NonBlocking),
        )?;
        Ok(Self { device, stream })
    }

    /// Work queued on the side stream from now on waits for what the main stream holds now.
    pub(crate) fn wait_for_work(&self) -> CudaResult<()> {
        Mark::record(self.device.stream())?.queue_wait(self.stream)
    }

    /// Work queued on the main stream from now on waits for `mark` (of the side stream).
    pub(crate) fn work_waits_for(&self, mark: &Mark) -> CudaResult<()> {
        mark.queue_wait(self.device.stream())
    }

    /// The current end of the side stream's work.
    pub(crate) fn mark(&self) -> CudaResult<Mark> {
        Mark::record(self.stream)
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
        assert!(
            offset + src.len() <= dst.len(),
            "upload past the end of a device buffer"
        );
        let at = dst.ptr() + (offset * std::mem::size_of::<T>()) as u64;
        call("cuMemcpyHtoDAsync", unsafe {
            result::memcpy_htod_async(at, src, self.stream)
        })
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
        assert!(
            dst.len() <= src.len(),
            "download past the end of a device buffer"
        );
        call("cuMemcpyDtoHAsync", unsafe {
            result::memcpy_dtoh_async(dst, src.ptr(), self.stream)
        })
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
