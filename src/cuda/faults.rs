//! Injected faults, so tests can drive the recovery paths of the CUDA backend on a real
//! device: the next allocation fails as out of memory, or the next synchronization reports
//! a sticky error (as an illegal address in a kernel would). Each injected fault fires once.

use std::sync::atomic::{AtomicU8, Ordering};

use cudarc::driver::sys::CUresult;

use crate::cuda::error::{CudaError, CudaResult};

/// A fault to inject into the next sort on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next device allocation reports out of memory.
    OutOfMemory = 1,
    /// The next stream synchronization reports `CUDA_ERROR_ILLEGAL_ADDRESS`.
    StickyError = 2,
}

static PENDING: AtomicU8 = AtomicU8::new(0);

/// Arms `fault`; it fires at the next matching call.
pub fn inject(fault: Fault) {
    PENDING.store(fault as u8, Ordering::SeqCst);
}

fn take(fault: Fault) -> bool {
    PENDING
        .compare_exchange(fault as u8, 0, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

/// Fails an allocation of `bytes` for `what` if an out-of-memory fault is armed.
pub(crate) fn take_out_of_memory(bytes: usize, what: &'static str) -> CudaResult<()> {
    if take(Fault::OutOfMemory) {
        return Err(CudaError::OutOfMemory { bytes, what });
    }
    Ok(())
}

/// Fails `call` with a sticky error if one is armed.
pub(crate) fn take_sticky(call: &'static str) -> CudaResult<()> {
    if take(Fault::StickyError) {
        return Err(CudaError::Driver {
            call,
            code: CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        });
    }
    Ok(())
}
