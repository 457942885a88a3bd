//! The CUDA backend: device probe, kernels, transfers, and [`CudaBackend`].
//!
//! ```text
//!  backend.rs     CudaBackend: the sort contract on the device, fallback to the CPU
//!  sort_run.rs    one run: keys up, encode, dispatch, refine, permutation down
//!  dispatch.rs    which device sort a run gets
//!  runtime.rs     the probe, the opened device and its kernels, failures of the process
//!  payload.rs     a run's payload gathered on the device (DeviceRun: the run's state)
//!  encode.rs · refine.rs · gather.rs          key encoding · long-string ties · gather kernels
//!  tuning.rs                                  launch shapes, thresholds, GPUSORT_* overrides
//!  radix/ · merge/                            OneSweep · locality and segmented sorts
//!  columns/ · memory/                         raw columns on the device · buffers, copies
//!  module.rs · error.rs · faults.rs           NVRTC and kernels · errors · injected faults
//! ```

mod backend;
mod columns;
mod dispatch;
mod encode;
mod error;
pub mod faults;
mod gather;
mod memory;
mod merge;
mod module;
mod payload;
mod radix;
mod refine;
mod runtime;
mod sort_run;
mod tuning;

pub use backend::CudaBackend;
pub use columns::PayloadLayout;
pub use dispatch::{sort_on_device, DeviceOrder};
pub use encode::{encodable_on_device, DeviceKeys, Encoded, Encoder, TieFields};
pub use error::{CudaError, CudaResult};
pub use faults::{inject as inject_fault, Fault};
pub use gather::{payload_layout, Gatherer};
pub use memory::device::{Device, DeviceBuffer, Event};
pub use memory::transfer::{Plain as TransferPlain, Staging};
pub use merge::locality::LocalitySort;
pub use merge::locality_probe::{LocalityProbe, Probe, Prober};
pub use merge::locality_window::WindowSort;
pub use merge::passes::MergeKernels;
pub use merge::segment_starts::{SegmentStarts, StartsEncoding};
pub use merge::segment_tiles::{SegmentTile, SegmentTiles};
pub use merge::segment_tiles_large::LargeSegmentTiles;
pub use merge::segmented::SegmentedSort;
pub use merge::{MergeKeys, MergeSorted};
pub use module::{compile_cubin, is_nvrtc_present, nvrtc_version, KernelFile, ALL_KERNELS};
pub use payload::DevicePayload;
pub use radix::onesweep::{Onesweep, RadixKey, Sorted, Values};
pub use refine::{Sorters, TieRefiner};
pub use tuning::{
    switches, PassMode, PassTuning, Switches, Tuning, WindowHalo, LOCALITY_MAX_INVERSIONS_PER,
    LOCALITY_WINDOW_HALO, MERGE_TILE, PROBED_HALOS, PROBE_CHUNK, SEGMENTED_MERGE_MAX_MEAN_ROWS,
    SEGMENT_STARTS_CHUNK, SEGMENT_TILES_MAX_ROWS, TIE_STEP_BYTES,
};

pub use runtime::{
    disable_device, disabled_reason, fallback_count, is_driver_present, runtime, CudaRuntime,
};
