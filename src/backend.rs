//! The choice of sort backend: the one place that names the concrete backends.
//!
//! ```text
//!  gpu_sort.backend = cpu   → sort::CpuBackend
//!                     auto  → cuda::CudaBackend over gpu_sort.devices when one of them
//!                             opens, else CpuBackend; deferred to the first sort while
//!                             they are being opened
//!                     cuda  → cuda::CudaBackend, or the reason none is usable
//! ```
//!
//! Everything else sees an `Arc<dyn SortBackend>` (`crate::sort`'s contract).

use std::sync::Arc;

use crate::config::{BackendChoice, GpuSortConfig};
use crate::cuda::{open_state, CudaBackend, FaultScope, OpenState};
use crate::sort::{CpuBackend, SortBackend};

/// Picks the backend `settings.backend` names (a CUDA backend's sorts within
/// `settings.device_memory_limit`, with the faults of `settings.fault_scope`), or says why
/// none is usable.
pub fn resolve_backend(settings: &GpuSortConfig) -> Result<Arc<dyn SortBackend>, String> {
    let faults = FaultScope::from_id(settings.fault_scope);
    let (limit, devices) = (settings.device_memory_limit, settings.devices);
    let (spread, large) = (settings.spread_min_rows, settings.spread_large_runs);
    let cuda = || {
        CudaBackend::on_devices(limit, devices).map(|cuda| {
            cuda.with_faults(faults)
                .with_spread_min_rows(spread)
                .with_spread_large_runs(large)
        })
    };
    match settings.backend {
        BackendChoice::Cpu => Ok(Arc::new(CpuBackend)),
        // A device being opened (`cuda::start_opening`) is waited for at the first sort,
        // so that planning and scanning go on meanwhile.
        BackendChoice::Auto if open_state(devices) == OpenState::Opening => Ok(Arc::new(
            CudaBackend::deferred(limit, devices)
                .with_faults(faults)
                .with_spread_min_rows(spread)
                .with_spread_large_runs(large),
        )),
        BackendChoice::Auto => match cuda() {
            Ok(cuda) => Ok(Arc::new(cuda)),
            // Why was logged once, when the device failed to open (cuda::runtime).
            Err(_) => Ok(Arc::new(CpuBackend)),
        },
        BackendChoice::Cuda => cuda()
            .map(|cuda| Arc::new(cuda) as Arc<dyn SortBackend>)
            .map_err(|why| {
                format!("gpu_sort.backend = 'cuda' but no CUDA device is usable: {why}")
            }),
    }
}

/// The backend to plan with when the sorts run in other processes that resolve their own
/// (the workers of a distributed engine, `GpuSortRule::partition_local`): the one
/// `settings` names here, or the CPU backend when this process has no usable device. A
/// planning process without a GPU then still plans `GpuSortExec`, and each worker sorts
/// on its own GPU, or refuses the task when `cuda` is asked for and it has none.
pub fn resolve_planning_backend(settings: &GpuSortConfig) -> Arc<dyn SortBackend> {
    resolve_backend(settings).unwrap_or_else(|_| Arc::new(CpuBackend))
}
