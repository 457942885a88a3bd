//! The choice of sort backend: the one place that names the concrete backends.
//!
//! ```text
//!  gpu_sort.backend = cpu   → sort::CpuBackend
//!                     auto  → cuda::CudaBackend when a device opens, else CpuBackend
//!                     cuda  → cuda::CudaBackend, or the reason none is usable
//! ```
//!
//! Everything else sees an `Arc<dyn SortBackend>` (`crate::sort`'s contract).

use std::sync::Arc;

use crate::config::{BackendChoice, DeviceMemoryLimit};
use crate::cuda::CudaBackend;
use crate::sort::{CpuBackend, SortBackend};

/// Picks the backend for `choice` (a CUDA backend's sorts within `device_limit`), or says
/// why none is usable.
pub fn resolve_backend(
    choice: BackendChoice,
    device_limit: DeviceMemoryLimit,
) -> Result<Arc<dyn SortBackend>, String> {
    match choice {
        BackendChoice::Cpu => Ok(Arc::new(CpuBackend)),
        BackendChoice::Auto => match CudaBackend::with_limit(device_limit) {
            Ok(cuda) => Ok(Arc::new(cuda)),
            Err(why) => {
                log::debug!("gpusort: backend auto uses the CPU: {why}");
                Ok(Arc::new(CpuBackend))
            }
        },
        BackendChoice::Cuda => CudaBackend::with_limit(device_limit)
            .map(|cuda| Arc::new(cuda) as Arc<dyn SortBackend>)
            .map_err(|why| {
                format!("gpu_sort.backend = 'cuda' but no CUDA device is usable: {why}")
            }),
    }
}
