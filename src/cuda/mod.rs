//! The CUDA backend: device probe, kernels, transfers, and [`CudaBackend`].
//!
//! ```text
//!  backend.rs     CudaBackend: the sort contract on the device, fallback to the CPU
//!  sort_run.rs    one run: keys up, encode, dispatch, refine, permutation down
//!  dispatch.rs    which device sort a run gets
//!  runtime.rs     the probe, the opened device and its kernels, failures of the process
//!  payload/       a run's payload gathered on the device (DeviceRun: the run's state)
//!  payload/resident.rs  a run's columns kept on the device for the writer's pages
//!  window.rs      window columns over a run's sorted rows (kernels and their use)
//!  multi_gpu/     one sort spread over several devices by key ranges (spread.rs: its kernels)
//!  encode.rs · refine.rs · gather.rs          key encoding · long-string ties · gather kernels
//!  parquet.rs · parquet_dictionary.rs         Parquet pages built on the device · their dictionaries
//!  pages.rs                                   the page kernels of the process's device, for the writer
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
mod multi_gpu;
mod pages;
mod parquet;
mod parquet_dictionary;
mod parquet_input;
mod payload;
mod radix;
mod refine;
mod runtime;
mod sort_run;
mod spread;
mod tuning;
mod visible;
mod window;

// The device API: what the session (through `backend.rs`), the binary's benchmarks and the
// GPU tests (`tests/gpu/`) use. The launchers themselves (`Onesweep`, `LocalitySort`,
// `SegmentedSort`, `Encoder`, `Gatherer`, `TieRefiner`) are reached through the fields of
// [`CudaRuntime`]; their kernels, modules and launch arithmetic stay inside this module.
pub use backend::{CudaBackend, MIN_DEVICE_PIECE_ROWS};
pub use dispatch::{sort_on_device, DeviceOrder};
pub use encode::DeviceKeys;
pub use error::{CudaError, CudaResult};
pub use faults::{Fault, FaultScope, OpenFault};
pub use memory::budget::DeviceMemoryStats;
pub use memory::device::{is_page_locked, Device, DeviceBuffer, Event, HostLock};
pub use memory::transfer::{Plain as TransferPlain, Staging};
pub use merge::locality_probe::{LocalityProbe, Probe};
pub use merge::segment_starts::StartsEncoding;
pub use merge::segment_tiles::SegmentTile;
pub use merge::{MergeKeys, MergeSorted};
pub use module::cached_kernel_path;
pub use multi_gpu::{
    sort_host_words, sort_host_words_with, HostSortPlan, SpreadSorted, SpreadTimes,
};
pub use pages::encode_on_device;
pub use parquet::{
    ColumnPages, EncodedPage, OnDevice, PageColumn, PageCut, PageEncoder, StatisticsOrder,
};
pub use payload::resident::{CutPages, ResidentPageSpec, ResidentPages, ResidentRun};
pub use radix::onesweep::{RadixKey, Sorted, Values};
pub use runtime::{
    device_count, disabled_reason, disabled_reason_of, fallback_count, is_driver_present,
    open_state, pinned_ordinal, runtime, runtime_of, selected_count_bound, selected_ordinals,
    start_opening, CudaRuntime, OpenState, DEFAULT_DEVICE_MEMORY_FRACTION,
};
pub use tuning::{
    switches, PassMode, Switches, Tuning, DEVICE_IDLE_RELEASE, DICT_CHUNK_VALUES,
    LOCALITY_WINDOW_HALO, MERGE_TILE, PROBED_HALOS, PROBE_CHUNK, SEGMENTED_MERGE_MAX_MEAN_ROWS,
    SEGMENT_STARTS_CHUNK, SPREAD_CHUNKS, SPREAD_RANGES_PER_DEVICE,
};
