//! Launcher of `kernels/locality_sort.cu`: the stable merge sort for nearly sorted keys
//! (u32 or u64), with the probe that tells how sorted they are and the windowed sort that
//! takes keys each within a halo of their place in one kernel.
//!
//! ```text
//!  keys ─ Prober (locality_probe.rs) ─ nearly sorted? ──► WindowSort (locality_window.rs)
//!                                                           declined ─► merge passes
//! ```

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::Device;
use crate::cuda::merge::locality_probe::Prober;
use crate::cuda::merge::locality_window::WindowSort;
use crate::cuda::merge::passes::MergeKernels;
use crate::cuda::merge::{check_rows, MergeKeys, MergeSorted};
use crate::cuda::module::{load_module, Module, LOCALITY};
use crate::cuda::tuning::Tuning;

/// The loaded locality sort of one device.
#[derive(Debug)]
pub struct LocalitySort {
    _module: Module,
    /// The merge passes over u32 and over u64 keys.
    merge: [MergeKernels; 2],
    /// The sortedness probe.
    pub prober: Prober,
    /// The windowed sort.
    pub windows: WindowSort,
}

impl LocalitySort {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(LOCALITY, device.arch, tuning)?;
        Ok(Self {
            merge: [
                MergeKernels::load(&module, "locality_u32", device, tuning)?,
                MergeKernels::load(&module, "locality_u64", device, tuning)?,
            ],
            prober: Prober::load(&module, device)?,
            windows: WindowSort::load(&module, tuning)?,
            _module: module,
        })
    }

    /// Stable locality sort of `n` keys: the permutation.
    pub fn sort_rows(&self, device: &Device, keys: MergeKeys, n: usize) -> CudaResult<MergeSorted> {
        check_rows(n)?;
        let kernels = self.merge[keys.index()];
        kernels.sort(device, keys.ptr(), keys.key_bytes(), None, n)
    }
}
