//! One CUDA device: its primary context, the stream every sort runs on, its attributes, and
//! RAII handles for device buffers, pinned host buffers and events.
//!
//! All work of the backend goes to one non-blocking stream; buffers are allocated and freed
//! in stream order (`cuMemAllocAsync`), from the device's default memory pool, which keeps
//! freed memory for the next sort instead of returning it to the driver (until the device
//! is idle a while: [`Device::release_idle_memory`]). Every buffer is charged to the
//! device's [`DeviceBudget`] while it lives.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::result;
use cudarc::driver::sys::{self, CUdevice_attribute as Attr};

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::faults;
use crate::cuda::memory::budget::DeviceBudget;
use crate::cuda::memory::host_memory::PageLocker;

/// An opened device: context, stream and what the launchers need to know about it.
#[derive(Debug)]
pub struct Device {
    context: sys::CUcontext,
    stream: sys::CUstream,
    /// The driver's memory pool the stream allocates from.
    pool: sys::CUmemoryPool,
    /// The ledger every buffer is charged to.
    pub(crate) budget: Arc<DeviceBudget>,
    /// The driver's ordinal of the device.
    pub ordinal: usize,
    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability as one number, e.g. 90.
    pub arch: u32,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Shared memory a block may use with an opt-in, in bytes.
    pub max_shared_per_block: usize,
    /// Device memory, in bytes.
    pub total_memory: usize,
}

// SAFETY: the context and stream handles may be used from any thread once the context is
// made current there (`bind`); the backend serializes all use of one device.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

/// `r` as this crate's error, naming the driver call `name`.
pub(super) fn call<T>(
    name: &'static str,
    r: Result<T, cudarc::driver::DriverError>,
) -> CudaResult<T> {
    r.map_err(|e| CudaError::driver(name, e))
}

impl Device {
    /// The devices the driver sees (0 when it cannot be initialized). The driver library
    /// must be present (see `super::probe`).
    pub fn count() -> usize {
        match result::init().and_then(|_| result::device::get_count()) {
            Ok(count) => count.max(0) as usize,
            Err(_) => 0,
        }
    }

    /// Opens device `ordinal`. The driver library must be present (see `super::probe`).
    pub fn open(ordinal: i32) -> CudaResult<Self> {
        call("cuInit", result::init())?;
        let count = call("cuDeviceGetCount", result::device::get_count())?;
        if count <= ordinal {
            return Err(CudaError::Unavailable(format!(
                "no CUDA device {ordinal} (the driver sees {count})"
            )));
        }
        let device = call("cuDeviceGet", result::device::get(ordinal))?;
        // SAFETY: `device` is a valid handle from cuDeviceGet.
        let context = call("cuDevicePrimaryCtxRetain", unsafe {
            result::primary_ctx::retain(device)
        })?;
        // SAFETY: `context` was just retained.
        call("cuCtxSetCurrent", unsafe {
            result::ctx::set_current(context)
        })?;
        let stream = new_stream()?;
        let attribute = |a: Attr| {
            // SAFETY: a valid device handle and attribute enum.
            call("cuDeviceGetAttribute", unsafe {
                result::device::get_attribute(device, a)
            })
        };
        let major = attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        // SAFETY: a valid device handle.
        let pool = call("cuDeviceGetDefaultMemPool", unsafe {
            result::device::get_default_mem_pool(device)
        })?;
        let opened = Self {
            context,
            stream,
            pool,
            budget: Arc::new(DeviceBudget::of_device(ordinal as usize)),
            ordinal: ordinal as usize,
            name: call("cuDeviceGetName", result::device::get_name(device))?,
            arch: (major * 10 + minor) as u32,
            sm_count: attribute(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            max_shared_per_block: attribute(
                Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )? as usize,
            // SAFETY: a valid device handle.
            total_memory: call("cuDeviceTotalMem", unsafe {
                result::device::total_mem(device)
            })?,
        };
        opened.keep_freed_memory()?;
        Ok(opened)
    }

    /// A handle of the same device, context, memory pool and budget with a stream of its
    /// own, for work that may run beside this stream's (`lanes.rs`); its context must be
    /// current on the calling thread. Dropping it destroys only its stream.
    pub(crate) fn with_own_stream(&self) -> CudaResult<Self> {
        Ok(Self {
            context: self.context,
            stream: new_stream()?,
            pool: self.pool,
            budget: Arc::clone(&self.budget),
            ordinal: self.ordinal,
            name: self.name.clone(),
            arch: self.arch,
            sm_count: self.sm_count,
            max_shared_per_block: self.max_shared_per_block,
            total_memory: self.total_memory,
        })
    }

    /// Work queued on `other` (a stream of the same context) from now on waits for the
    /// work queued on this device's stream so far, without blocking the host.
    pub(crate) fn order_before(&self, other: sys::CUstream) -> CudaResult<()> {
        let mark = self.event()?;
        mark.record(self)?;
        mark.queue_wait_on(other)
    }

    /// Lets the default memory pool keep freed blocks (the next sort reuses them).
    fn keep_freed_memory(&self) -> CudaResult<()> {
        let mut threshold: u64 = u64::MAX;
        // SAFETY: a valid pool; the attribute takes a pointer to a u64.
        call("cuMemPoolSetAttribute", unsafe {
            result::mem_pool::set_attribute(
                self.pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut c_void,
            )
        })
    }

    /// Gives the blocks the memory pool keeps for later sorts back to the driver, once the
    /// stream's work is done (buffers alive stay).
    pub fn release_idle_memory(&self) -> CudaResult<()> {
        self.bind()?;
        self.synchronize()?;
        // SAFETY: a valid pool; trimming keeps every block in use.
        call("cuMemPoolTrimTo", unsafe {
            result::mem_pool::trim_to(self.pool, 0)
        })
    }

    /// Device memory the driver's pool holds for this process: buffers alive and blocks
    /// kept for reuse.
    pub fn pool_reserved_bytes(&self) -> CudaResult<u64> {
        let mut reserved: u64 = 0;
        // SAFETY: a valid pool; the attribute writes a u64.
        call("cuMemPoolGetAttribute", unsafe {
            result::mem_pool::get_attribute(
                self.pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                &mut reserved as *mut u64 as *mut c_void,
            )
        })?;
        Ok(reserved)
    }

    /// Makes the device's context current on the calling thread.
    pub fn bind(&self) -> CudaResult<()> {
        // SAFETY: the context is retained for the life of `self`.
        call("cuCtxSetCurrent", unsafe {
            result::ctx::set_current(self.context)
        })
    }

    /// Page-locks host memory for this device's context.
    pub fn page_locker(&self) -> ContextPageLocker {
        note_exit_before_the_driver();
        ContextPageLocker {
            context: self.context,
        }
    }

    /// The stream all work is queued on.
    pub fn stream(&self) -> sys::CUstream {
        self.stream
    }

    /// Waits for all queued work; a failed kernel reports here.
    pub fn synchronize(&self) -> CudaResult<()> {
        if faults::any_armed() {
            faults::take_sticky(self.budget.holder_faults(), "cuStreamSynchronize")?;
        }
        // SAFETY: the stream lives as long as `self`.
        call("cuStreamSynchronize", unsafe {
            result::stream::synchronize(self.stream)
        })
    }

    /// A device buffer of `len` elements, uninitialized, in stream order.
    pub fn alloc<T: Copy>(&self, len: usize, what: &'static str) -> CudaResult<DeviceBuffer<T>> {
        let bytes = (len.max(1)) * std::mem::size_of::<T>();
        if faults::any_armed() {
            faults::take_out_of_memory(self.budget.holder_faults(), bytes, what)?;
        }
        self.budget.charge(bytes, what)?;
        let started = std::time::Instant::now();
        // SAFETY: the stream is valid; the memory is only used on it.
        let allocated = unsafe { result::malloc_async(self.stream, bytes) };
        if bytes >= 64 << 20 {
            crate::trace::event(|| {
                format!(
                    "  device: {:.0} MB for {what} in {:.1} ms",
                    bytes as f64 / 1e6,
                    started.elapsed().as_secs_f64() * 1e3
                )
            });
        }
        match allocated {
            Ok(ptr) => Ok(DeviceBuffer {
                ptr,
                len,
                bytes,
                stream: self.stream,
                budget: Arc::clone(&self.budget),
                _type: PhantomData,
            }),
            Err(e) => {
                self.budget.release(bytes);
                if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                    Err(CudaError::OutOfMemory { bytes, what })
                } else {
                    Err(CudaError::driver("cuMemAllocAsync", e))
                }
            }
        }
    }

    /// Sets every byte of `buffer` to zero, in stream order.
    pub fn zero<T>(&self, buffer: &DeviceBuffer<T>) -> CudaResult<()> {
        let bytes = buffer.len.max(1) * std::mem::size_of::<T>();
        // SAFETY: `buffer` owns `bytes` bytes on this stream.
        call("cuMemsetD8Async", unsafe {
            result::memset_d8_async(buffer.ptr, 0, bytes, self.stream)
        })
    }

    /// Sets bytes `offset .. offset + len` of `buffer` to `value`, in stream order.
    pub fn fill_bytes(
        &self,
        buffer: &DeviceBuffer<u8>,
        offset: usize,
        len: usize,
        value: u8,
    ) -> CudaResult<()> {
        assert!(
            offset + len <= buffer.len,
            "a fill past the end of a device buffer"
        );
        // SAFETY: the range lies within `buffer`, which lives on this stream.
        call("cuMemsetD8Async", unsafe {
            result::memset_d8_async(buffer.ptr + offset as u64, value, len, self.stream)
        })
    }

    /// Queues a copy of `src` (pinned or not) to `dst[offset..]`.
    ///
    /// # Safety
    /// `src` must stay alive and unchanged until the copy has completed on the stream.
    pub unsafe fn upload<T>(
        &self,
        dst: &DeviceBuffer<T>,
        offset: usize,
        src: &[T],
    ) -> CudaResult<()> {
        // SAFETY: as the caller promises, on this device's stream.
        unsafe { upload_on(self.stream, dst, offset, src) }
    }

    /// Queues a copy of `src[offset..offset + dst.len()]` into `dst`.
    ///
    /// # Safety
    /// `dst` must stay alive and untouched until the copy has completed on the stream.
    pub unsafe fn download<T>(
        &self,
        dst: &mut [T],
        src: &DeviceBuffer<T>,
        offset: usize,
    ) -> CudaResult<()> {
        // SAFETY: as the caller promises, on this device's stream.
        unsafe { download_on(self.stream, dst, src, offset) }
    }

    /// A new buffer holding a copy of `src`, in stream order.
    pub fn duplicate<T: Copy>(
        &self,
        src: &DeviceBuffer<T>,
        what: &'static str,
    ) -> CudaResult<DeviceBuffer<T>> {
        let copy = self.alloc::<T>(src.len, what)?;
        let bytes = src.len * std::mem::size_of::<T>();
        // SAFETY: both buffers hold `bytes` bytes on this stream and do not overlap.
        call("cuMemcpyDtoDAsync", unsafe {
            result::memcpy_dtod_async(copy.ptr, src.ptr, bytes, self.stream)
        })?;
        Ok(copy)
    }

    /// Queues a copy of `len` elements of `src` (on device `from`, this one or another)
    /// from `src_at` on into `dst[dst_at..]`, on this device's stream. Between two devices
    /// it goes over their peer link where [`Self::share_pool_with`] granted access.
    ///
    /// # Safety
    /// `src` must stay alive and unchanged until the copy has completed on this stream.
    pub unsafe fn copy_from<T>(
        &self,
        dst: &DeviceBuffer<T>,
        dst_at: usize,
        from: &Device,
        src: &DeviceBuffer<T>,
        src_at: usize,
        len: usize,
    ) -> CudaResult<()> {
        assert!(
            dst_at + len <= dst.len && src_at + len <= src.len,
            "a device copy past the end of a buffer"
        );
        let size = std::mem::size_of::<T>();
        let (to, at) = (
            dst.ptr + (dst_at * size) as u64,
            src.ptr + (src_at * size) as u64,
        );
        if from.ordinal == self.ordinal {
            return call("cuMemcpyDtoDAsync", unsafe {
                result::memcpy_dtod_async(to, at, len * size, self.stream)
            });
        }
        // SAFETY: both ranges lie within live buffers (asserted above); the contexts are
        // retained for the lives of `self` and `from`.
        call("cuMemcpyPeerAsync", unsafe {
            sys::cuMemcpyPeerAsync(to, self.context, at, from.context, len * size, self.stream)
                .result()
        })
    }

    /// Lets `reader` access this device's pool memory (its peer copies and kernels) where
    /// the hardware allows it (NVLink, or PCIe peer-to-peer); false where it does not.
    pub fn share_pool_with(&self, reader: &Device) -> CudaResult<bool> {
        let handle = |ordinal: usize| call("cuDeviceGet", result::device::get(ordinal as i32));
        let (holder, peer) = (handle(self.ordinal)?, handle(reader.ordinal)?);
        let mut can: std::ffi::c_int = 0;
        // SAFETY: valid device handles and an out pointer to an int.
        call("cuDeviceCanAccessPeer", unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, peer, holder).result()
        })?;
        if can == 0 {
            return Ok(false);
        }
        let access = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: reader.ordinal as std::ffi::c_int,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: a valid pool and one access descriptor.
        call("cuMemPoolSetAccess", unsafe {
            sys::cuMemPoolSetAccess(self.pool, &access, 1).result()
        })?;
        Ok(true)
    }

    /// Copies a small device buffer back, waiting for it.
    pub fn download_now<T: Copy + Default>(&self, src: &DeviceBuffer<T>) -> CudaResult<Vec<T>> {
        let mut out = vec![T::default(); src.len];
        // SAFETY: `out` outlives the copy: we synchronize before returning.
        unsafe { self.download(&mut out, src, 0)? };
        self.synchronize()?;
        Ok(out)
    }

    /// A new event for ordering host work against the stream.
    pub fn event(&self) -> CudaResult<Event> {
        let handle = call(
            "cuEventCreate",
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
        )?;
        Ok(Event { handle })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: the stream was created by `open` and is no longer used.
        let _ = unsafe { result::stream::destroy(self.stream) };
    }
}

/// A new non-blocking stream in the context current on the calling thread.
pub(super) fn new_stream() -> CudaResult<sys::CUstream> {
    call(
        "cuStreamCreate",
        result::stream::create(result::stream::StreamKind::NonBlocking),
    )
}

/// Queues a copy of `src` to `dst[offset..]` on `stream` (of `dst`'s device).
///
/// # Safety
/// `src` must stay alive and unchanged until the copy has completed on `stream`.
pub(super) unsafe fn upload_on<T>(
    stream: sys::CUstream,
    dst: &DeviceBuffer<T>,
    offset: usize,
    src: &[T],
) -> CudaResult<()> {
    assert!(
        offset + src.len() <= dst.len,
        "upload past the end of a device buffer"
    );
    let at = dst.ptr + (offset * std::mem::size_of::<T>()) as u64;
    call("cuMemcpyHtoDAsync", unsafe {
        result::memcpy_htod_async(at, src, stream)
    })
}

/// Queues a copy of `src[offset..offset + dst.len()]` into `dst` on `stream` (of `src`'s
/// device).
///
/// # Safety
/// `dst` must stay alive and untouched until the copy has completed on `stream`.
pub(super) unsafe fn download_on<T>(
    stream: sys::CUstream,
    dst: &mut [T],
    src: &DeviceBuffer<T>,
    offset: usize,
) -> CudaResult<()> {
    assert!(
        offset + dst.len() <= src.len,
        "download past the end of a device buffer"
    );
    let at = src.ptr + (offset * std::mem::size_of::<T>()) as u64;
    call("cuMemcpyDtoHAsync", unsafe {
        result::memcpy_dtoh_async(dst, at, stream)
    })
}

/// Device memory of `len` elements of `T`, freed in stream order on drop.
#[derive(Debug)]
pub struct DeviceBuffer<T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    /// Bytes charged to `budget`.
    bytes: usize,
    stream: sys::CUstream,
    budget: Arc<DeviceBudget>,
    _type: PhantomData<T>,
}

// SAFETY: a device pointer is plain data; all access goes through the serialized device.
unsafe impl<T> Send for DeviceBuffer<T> {}
unsafe impl<T> Sync for DeviceBuffer<T> {}

impl<T> DeviceBuffer<T> {
    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The raw device address, for kernel arguments.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAllocAsync on `stream`; freed once, after queued work.
        let _ = unsafe { result::free_async(self.ptr, self.stream) };
        self.budget.release(self.bytes);
    }
}

/// Page-locked host memory: copies from and to it run at full PCIe speed.
#[derive(Debug)]
pub(crate) struct PinnedBuffer<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: the buffer is owned memory like a Vec; the owner synchronizes device copies.
unsafe impl<T: Send> Send for PinnedBuffer<T> {}
unsafe impl<T: Sync> Sync for PinnedBuffer<T> {}

impl<T: Copy> PinnedBuffer<T> {
    /// `len` elements of page-locked memory (contents unspecified, zeroed here).
    pub(crate) fn new(len: usize) -> CudaResult<Self> {
        let bytes = len.max(1) * std::mem::size_of::<T>();
        // SAFETY: a plain host allocation, freed in Drop.
        let ptr = call("cuMemHostAlloc", unsafe { result::malloc_host(bytes, 0) })? as *mut T;
        // SAFETY: `bytes` bytes were just allocated at `ptr`.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, bytes) };
        Ok(Self { ptr, len })
    }

    /// The memory as a mutable slice.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as `as_slice`, with exclusive access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc; the owner has waited for its copies.
        let _ = unsafe { result::free_host(self.ptr as *mut c_void) };
    }
}

/// Set when the process exits (`exit`, or `main` returning), before the CUDA driver tears
/// its contexts down: the page-locking thread then stops locking, instead of failing with
/// `CUDA_ERROR_DEINITIALIZED` and warning at every normal exit.
static EXITING: AtomicBool = AtomicBool::new(false);

extern "C" fn note_exit() {
    EXITING.store(true, Ordering::SeqCst);
}

/// Registers [`note_exit`] once. Exit handlers run in reverse order of registration, and
/// the driver registered its own when it was initialized, before any context existed: this
/// one runs first.
fn note_exit_before_the_driver() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a function that only stores to an atomic.
        unsafe { libc::atexit(note_exit) };
    });
}

/// Page-locks host memory through one context (`cuMemHostRegister`, portable: every
/// context of the process may copy to and from it), from any thread.
#[derive(Debug)]
pub struct ContextPageLocker {
    context: sys::CUcontext,
}

// SAFETY: a context handle may be made current on any thread; the primary context is
// retained for the life of the process's runtime.
unsafe impl Send for ContextPageLocker {}
unsafe impl Sync for ContextPageLocker {}

impl PageLocker for ContextPageLocker {
    fn lock(&self, ptr: *mut u8, len: usize) -> bool {
        if EXITING.load(Ordering::SeqCst) {
            return false;
        }
        // SAFETY: the caller owns `len` bytes at `ptr` and keeps them until `unlock`.
        let locked = unsafe {
            result::ctx::set_current(self.context).and_then(|()| {
                sys::cuMemHostRegister_v2(ptr as *mut c_void, len, sys::CU_MEMHOSTREGISTER_PORTABLE)
                    .result()
            })
        };
        match &locked {
            // The process is exiting (the check above raced the exit): nothing is lost.
            Err(error)
                if EXITING.load(Ordering::SeqCst)
                    || error.0 == sys::cudaError_enum::CUDA_ERROR_DEINITIALIZED =>
            {
                log::debug!("gpusort: page-locking stopped at exit: {error}");
            }
            Err(error) => {
                log::warn!("gpusort: page-locking {len} bytes of host memory failed: {error}")
            }
            Ok(()) => {}
        }
        locked.is_ok()
    }

    fn unlock(&self, ptr: *mut u8) {
        // SAFETY: `ptr` was locked by `lock` and the device no longer copies to or from it.
        let _ = unsafe {
            result::ctx::set_current(self.context)
                .and_then(|()| sys::cuMemHostUnregister(ptr as *mut c_void).result())
        };
    }
}

/// Host memory page-locked for every context until this drops: copies to and from it
/// go straight between host memory and the devices (see [`is_page_locked`]).
#[derive(Debug)]
pub struct HostLock {
    locker: ContextPageLocker,
    ptr: *mut u8,
}

// SAFETY: only the address is kept, to unlock it.
unsafe impl Send for HostLock {}

impl Device {
    /// Page-locks `memory` (portable: for every device's context) until the returned lock
    /// drops; `None` where the driver refused.
    ///
    /// # Safety
    /// `memory` must outlive the lock and not be freed or moved while locked.
    pub unsafe fn lock_host<T>(&self, memory: &[T]) -> Option<HostLock> {
        let (ptr, len) = (memory.as_ptr() as *mut u8, std::mem::size_of_val(memory));
        let locker = self.page_locker();
        (len > 0 && locker.lock(ptr, len)).then_some(HostLock { locker, ptr })
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        self.locker.unlock(self.ptr);
    }
}

/// Whether `memory` starts in page-locked host memory (allocated or registered with the
/// driver), so that a copy can go straight to or from it instead of through the staging
/// buffers.
pub fn is_page_locked<T>(memory: &[T]) -> bool {
    if memory.is_empty() {
        return false;
    }
    let mut flags: std::ffi::c_uint = 0;
    // SAFETY: the driver only reads the address; it fails for memory it does not know.
    unsafe { sys::cuMemHostGetFlags(&mut flags, memory.as_ptr() as *mut c_void) }
        .result()
        .is_ok()
}

/// A CUDA event.
#[derive(Debug)]
pub struct Event {
    handle: sys::CUevent,
}

// SAFETY: event handles may be used from any thread of the context.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

impl Event {
    /// Records the event at the current end of `device`'s stream.
    pub fn record(&self, device: &Device) -> CudaResult<()> {
        self.record_on(device.stream())
    }

    /// Records the event at the current end of `stream` (of the event's context).
    pub(super) fn record_on(&self, stream: sys::CUstream) -> CudaResult<()> {
        // SAFETY: both handles are alive.
        call("cuEventRecord", unsafe {
            result::event::record(self.handle, stream)
        })
    }

    /// Makes the work queued on `stream` from now on wait for the last `record`, without
    /// blocking the host.
    pub(super) fn queue_wait_on(&self, stream: sys::CUstream) -> CudaResult<()> {
        // SAFETY: both handles are alive.
        call("cuStreamWaitEvent", unsafe {
            result::stream::wait_event(
                stream,
                self.handle,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        })
    }

    /// Waits until the work before the last `record` has completed.
    pub fn wait(&self) -> CudaResult<()> {
        // SAFETY: the handle is alive.
        call("cuEventSynchronize", unsafe {
            result::event::synchronize(self.handle)
        })
    }

    /// Milliseconds between `start` and this event (both recorded and complete).
    pub fn elapsed_ms_since(&self, start: &Event) -> CudaResult<f32> {
        // SAFETY: both handles are alive.
        call("cuEventElapsedTime", unsafe {
            result::event::elapsed(start.handle, self.handle)
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once.
        let _ = unsafe { result::event::destroy(self.handle) };
    }
}
