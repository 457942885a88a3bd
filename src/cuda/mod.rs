//! The CUDA backend: device probe, kernels, transfers, and [`CudaBackend`].
//!
//! ```text
//!  runtime()  once per process: libcuda present? → device 0 → NVRTC (cached CUBIN) → kernels
//!     │        any failure: the reason is kept, `backend = auto` uses the CPU
//!     ▼
//!  CudaBackend::sort(keys)        one sort at a time per device (the staging lock)
//!     keys ──pinned, chunked──► device ──OneSweep / locality / segmented (strategy.rs)──►
//!          permutation ──pinned, chunked──► host
//!     error: fatal (sticky) → device disabled for the process; any error → this run is
//!            sorted by the CPU backend instead (same result, counted in `gpu_fallbacks`)
//! ```
//!
//! cudarc loads libcuda dynamically and panics when it is missing, so the probe checks for
//! the library first and runs the rest under `catch_unwind`; a machine without a GPU gets a
//! reason, never a panic.

mod columns;
mod dispatch;
mod encode;
mod error;
pub mod faults;
mod gather;
mod memory;
mod merge;
mod module;
mod radix;
mod refine;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use datafusion::common::Result;

pub use columns::PayloadLayout;
pub use dispatch::{DeviceOrder, LOCALITY_MAX_INVERSIONS_PER, SEGMENTED_MERGE_MAX_MEAN_ROWS};
pub use encode::{encodable_on_device, DeviceKeys, Encoded, Encoder};
pub use error::{CudaError, CudaResult};
pub use faults::{inject as inject_fault, Fault};
pub use gather::{payload_layout, DevicePayload, Gatherer};
use gather::{DeviceColumn, DeviceRun};
pub use memory::device::{Device, DeviceBuffer, Event};
pub use memory::host_memory::LOCK_VARIABLE as HOST_LOCK_VARIABLE;
use memory::host_memory::{idle_limit, HostRegions, PageLocker};
use memory::idle_vectors::IdleVectors;
pub use memory::transfer::{Plain as TransferPlain, Staging};
pub use merge::locality_probe::{LocalityProbe, Probe, PROBED_HALOS, PROBE_CHUNK};
pub use merge::locality_window::{locality_window_halo, WindowHalo, LOCALITY_WINDOW_HALO};
pub use merge::segment_starts::{StartsEncoding, SEGMENT_STARTS_CHUNK};
pub use merge::segment_tiles::{segment_tiles_max_rows, SegmentTile, SEGMENT_TILES_MAX_ROWS};
pub use merge::{MergeKeys, MergeSorted, MergeSorts, MERGE_TILE};
pub use module::{compile_cubin, is_nvrtc_present, nvrtc_version, KernelFile, ALL_KERNELS};
pub use radix::onesweep::{
    defines as onesweep_defines, Onesweep, PassMode, PassTuning, RadixKey, Sorted, Values,
};
pub use refine::{Sorters, TieFields, TieRefiner, STEP_BYTES as TIE_STEP_BYTES};

use crate::config::AlgorithmChoice;
use crate::keys::limb_sources;
use crate::keys::{column_rows, encode_keys, EncodedKeys, KeyColumn};
use crate::sort::{
    identity, Algorithm, CpuBackend, PartitionIdTable, Permutation, RunState, Segments,
    SortBackend, SortedRun, TieRefine, TransferTimes,
};

/// The opened device and what is loaded on it; one per process.
#[derive(Debug)]
pub struct CudaRuntime {
    /// The device.
    pub device: Device,
    /// The radix sort kernels.
    pub onesweep: Onesweep,
    /// The locality and segmented merge sort kernels.
    pub merge: MergeSorts,
    /// The key encoding kernels.
    pub encoder: Encoder,
    /// The payload gather kernels.
    pub gatherer: Gatherer,
    /// The kernels that order the ties of long byte-like keys.
    pub refiner: TieRefiner,
    /// Pinned staging buffers; holding the lock is holding the device.
    staging: Mutex<Staging>,
    /// Host memory of gathered windows, reused between sorts.
    host_regions: Arc<HostRegions>,
    /// Permutation vectors given back after a sort, filled again by the next download.
    idle_permutations: Arc<IdleVectors>,
}

static RUNTIME: OnceLock<std::result::Result<Arc<CudaRuntime>, String>> = OnceLock::new();
static DISABLED: Mutex<Option<String>> = Mutex::new(None);
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// Runs that the CUDA backend handed to the CPU backend in this process (after an error,
/// or with the device disabled).
pub fn fallback_count() -> u64 {
    FALLBACKS.load(Ordering::Relaxed)
}

/// The process's CUDA runtime, or why there is none.
pub fn runtime() -> std::result::Result<Arc<CudaRuntime>, String> {
    if let Some(reason) = disabled_reason() {
        return Err(format!(
            "the CUDA device was disabled after a fatal error: {reason}"
        ));
    }
    RUNTIME
        .get_or_init(|| open_runtime().map_err(|e| e.to_string()))
        .clone()
}

/// Marks the device unusable for the rest of the process (after a sticky error).
pub fn disable_device(reason: &str) {
    log::error!("gpusort: disabling the CUDA device for this process: {reason}");
    let mut disabled = DISABLED.lock().unwrap_or_else(|p| p.into_inner());
    disabled.get_or_insert_with(|| reason.to_string());
}

/// Why the device was disabled, if it was.
pub fn disabled_reason() -> Option<String> {
    DISABLED.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Whether libcuda can be loaded here (never panics).
pub fn is_driver_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false)
}

fn open_runtime() -> CudaResult<Arc<CudaRuntime>> {
    if std::env::var_os("GPUSORT_DISABLE_CUDA").is_some_and(|v| !v.is_empty() && v != "0") {
        return Err(CudaError::Unavailable("GPUSORT_DISABLE_CUDA is set".into()));
    }
    if !is_driver_present() {
        return Err(CudaError::LibraryMissing {
            library: "libcuda (the NVIDIA driver)",
        });
    }
    if !is_nvrtc_present() {
        return Err(CudaError::LibraryMissing {
            library: "NVRTC (libnvrtc)",
        });
    }
    let ordinal = std::env::var("GPUSORT_CUDA_DEVICE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let opened = std::panic::catch_unwind(|| -> CudaResult<CudaRuntime> {
        let device = Device::open(ordinal)?;
        let onesweep = Onesweep::load(&device)?;
        let merge = MergeSorts::load(&device)?;
        let encoder = Encoder::load(&device)?;
        let gatherer = Gatherer::load(&device)?;
        let refiner = TieRefiner::load(&device)?;
        let staging = Mutex::new(Staging::new(&device)?);
        let page_locker: Option<Arc<dyn PageLocker>> = Some(Arc::new(device.page_locker()));
        Ok(CudaRuntime {
            device,
            onesweep,
            merge,
            encoder,
            gatherer,
            refiner,
            staging,
            host_regions: Arc::new(HostRegions::new(idle_limit(), page_locker)),
            idle_permutations: Arc::new(IdleVectors::new(idle_limit() / 4)),
        })
    })
    .map_err(|_| {
        CudaError::Unavailable("the CUDA driver panicked while opening the device".into())
    })??;
    log::info!(
        "gpusort: CUDA device {} (sm_{}, {} SMs, {} GiB)",
        opened.device.name,
        opened.device.arch,
        opened.device.sm_count,
        opened.device.total_memory >> 30
    );
    Ok(Arc::new(opened))
}

impl CudaRuntime {
    /// Waits until the host memory of gathered windows that went back is page-locked, and
    /// returns the bytes of idle memory that are (for tests and benchmarks).
    pub fn settle_host_memory(&self) -> usize {
        self.host_regions.wait_for_locking();
        self.host_regions.locked_bytes()
    }

    /// Runs `work` with exclusive use of the device and its staging buffers.
    pub fn with_device<T>(
        &self,
        work: impl FnOnce(&Device, &mut Staging) -> CudaResult<T>,
    ) -> CudaResult<T> {
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        self.device.bind()?;
        work(&self.device, &mut staging)
    }

    /// Sorts the rows of `keys` (encoded on the host) on the device, as `algorithm` and
    /// `segments` say: the stable permutation.
    pub fn sort_rows(
        self: &Arc<Self>,
        keys: &EncodedKeys,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> CudaResult<SortedRun> {
        let n = keys.rows;
        if n < 2 || keys.words.is_empty() {
            return Ok(in_order(n, segments));
        }
        self.with_device(|device, staging| {
            let started = Instant::now();
            let (device_keys, h2d_bytes) = if keys.fits_u32() {
                let word = &keys.words[0];
                let upload = staging.upload::<u32, _>(device, n, "u32 keys", |start, out| {
                    for (o, w) in out.iter_mut().zip(&word[start..]) {
                        *o = (w >> 32) as u32;
                    }
                })?;
                (DeviceKeys::U32(upload), n * 4)
            } else {
                let words = keys
                    .words
                    .iter()
                    .map(|word| {
                        staging.upload::<u64, _>(device, n, "key words", |start, out| {
                            out.copy_from_slice(&word[start..start + out.len()])
                        })
                    })
                    .collect::<CudaResult<Vec<_>>>()?;
                (DeviceKeys::Words(words), n * 8 * keys.words.len())
            };
            let how = How {
                algorithm,
                segments,
                upload_started: started,
                h2d_bytes,
            };
            let no_ties = TieFields::default();
            self.sort_device_keys(device, staging, device_keys, how, Vec::new(), &no_ties, n)
        })
    }

    /// Sorts the rows of key columns (every one [`encodable_on_device`]): their raw
    /// buffers go to the device, which encodes and sorts them.
    pub fn sort_columns(
        self: &Arc<Self>,
        columns: &[KeyColumn],
        n: usize,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> CudaResult<SortedRun> {
        if n < 2 {
            return Ok(in_order(n, segments));
        }
        let (run, _) = self.sort_columns_with(columns, n, algorithm, segments, None)?;
        Ok(run)
    }

    /// Sorts the rows of key columns (every one fixed-width) by (partition id, columns),
    /// the ids made on the device from `ids` and key column `ids.column`: the order and
    /// the rows per partition.
    pub fn sort_columns_by_ids(
        self: &Arc<Self>,
        columns: &[KeyColumn],
        n: usize,
        ids: &PartitionIdTable,
        algorithm: AlgorithmChoice,
    ) -> CudaResult<(SortedRun, Vec<usize>)> {
        let (run, counts) = self.sort_columns_with(columns, n, algorithm, None, Some(ids))?;
        match counts {
            Some(counts) => Ok((run, counts)),
            None => Err(CudaError::Inconsistent(
                "a sort by partition ids made no ids".to_string(),
            )),
        }
    }

    /// [`Self::sort_columns`], the partition ids of `ids` leading the key when given (and
    /// then the rows per partition).
    fn sort_columns_with(
        self: &Arc<Self>,
        columns: &[KeyColumn],
        n: usize,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
        ids: Option<&PartitionIdTable>,
    ) -> CudaResult<(SortedRun, Option<Vec<usize>>)> {
        self.with_device(|device, staging| {
            let started = Instant::now();
            crate::trace::event(|| format!("  {n} rows: device taken"));
            let mut encoded = self.encoder.encode(device, staging, columns, n, ids)?;
            let counts = encoded.partition_counts.take();
            let how = How {
                algorithm,
                segments,
                upload_started: started,
                h2d_bytes: encoded.h2d_bytes,
            };
            let run = self.sort_device_keys(
                device,
                staging,
                encoded.keys,
                how,
                encoded.columns,
                &encoded.ties,
                n,
            )?;
            Ok((run, counts))
        })
    }

    /// Sorts packed key words put on the device as `how` says, orders the ties that
    /// `ties` leaves (`refine.rs`), and brings the permutation back; the permutation and
    /// the raw `key_columns` stay on the device for the payload gather
    /// (the run's state, `DeviceRun`).
    #[allow(clippy::too_many_arguments)]
    fn sort_device_keys(
        self: &Arc<Self>,
        device: &Device,
        staging: &mut Staging,
        keys: DeviceKeys,
        how: How,
        key_columns: Vec<DeviceColumn>,
        ties: &TieFields,
        n: usize,
    ) -> CudaResult<SortedRun> {
        device.synchronize()?;
        let mut transfer = TransferTimes {
            upload: how.upload_started.elapsed(),
            download: Duration::ZERO,
        };
        crate::trace::event(|| format!("  {n} rows: keys on the device"));
        let order = self.sort_on_device(device, staging, keys, how.algorithm, how.segments, n)?;
        device.synchronize()?;
        crate::trace::event(|| format!("  {n} rows: sorted on the device"));
        let (algorithm, mut perm) = (order.algorithm, order.permutation);
        let mut tie_refine = TieRefine::default();
        if !ties.is_empty() {
            let refine_started = Instant::now();
            let perm = match &mut perm {
                Some(perm) => perm,
                None => perm.insert(self.refiner.identity(device, n)?),
            };
            let segment_ids = match how.segments {
                Some(segments) => Some(self.merge.segment_ids(device, staging, segments, n)?),
                None => None,
            };
            let sorters = Sorters {
                merge: &self.merge,
                onesweep: &self.onesweep,
            };
            tie_refine.groups =
                self.refiner
                    .refine(device, sorters, perm, ties, segment_ids.as_ref(), n)?;
            tie_refine.time = refine_started.elapsed();
            crate::trace::event(|| {
                format!(
                    "  {n} rows: {} tie groups ordered on the device",
                    tie_refine.groups
                )
            });
        }
        let (permutation, d2h_bytes) = match &perm {
            None => (identity(n), 0),
            Some(perm) => {
                let download_started = Instant::now();
                let mut permutation = self.idle_permutations.take(n);
                staging.download(device, perm, &mut permutation)?;
                device.synchronize()?;
                transfer.download = download_started.elapsed();
                crate::trace::event(|| format!("  {n} rows: permutation downloaded"));
                (permutation, n * 4)
            }
        };
        let home = Arc::clone(&self.idle_permutations);
        Ok(SortedRun {
            permutation: Permutation::with_home(permutation, home),
            algorithm,
            h2d_bytes: how.h2d_bytes,
            d2h_bytes,
            transfer,
            state: Some(Box::new(DeviceRun {
                runtime: Arc::clone(self),
                permutation: perm,
                columns: key_columns,
            })),
            tie_refine,
            ..SortedRun::default()
        })
    }
}

/// How one run is sorted on the device, and what its upload took.
struct How<'a> {
    algorithm: AlgorithmChoice,
    segments: Option<&'a Segments>,
    upload_started: Instant,
    h2d_bytes: usize,
}

/// A run of fewer than two rows (or no keys): already in order.
fn in_order(n: usize, segments: Option<&Segments>) -> SortedRun {
    let algorithm = match segments {
        Some(_) => Algorithm::Segmented,
        None => Algorithm::Radix,
    };
    SortedRun::on_host(identity(n), algorithm)
}

/// Sorts on the GPU; any failure sorts that run on the CPU backend instead.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    runtime: Arc<CudaRuntime>,
}

impl CudaBackend {
    /// The backend over the process's device, or why there is none.
    pub fn new() -> std::result::Result<Self, String> {
        runtime().map(|runtime| Self { runtime })
    }

    /// A run state that keeps nothing on the device: its payload gather uploads the
    /// permutation and every column (for runs the device did not sort, and for tests).
    pub fn empty_run_state(&self) -> Box<dyn RunState> {
        Box::new(DeviceRun::empty(Arc::clone(&self.runtime)))
    }

    /// `run` (sorted by the CPU backend after the device failed or was disabled) with a
    /// state that still lets the device gather its payload.
    fn with_empty_state(&self, mut run: SortedRun) -> SortedRun {
        run.state = Some(self.empty_run_state());
        run
    }
}

impl SortBackend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn sort(
        &self,
        keys: &EncodedKeys,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<SortedRun> {
        if let Some(reason) = disabled_reason() {
            log::debug!("gpusort: CUDA disabled ({reason}); sorting on the CPU");
            return cpu_fallback(keys, algorithm, segments);
        }
        match self.runtime.sort_rows(keys, algorithm, segments) {
            Ok(run) => Ok(run),
            Err(error) => {
                note_failure(&error, keys.rows);
                Ok(self.with_empty_state(cpu_fallback(keys, algorithm, segments)?))
            }
        }
    }

    fn sort_key_columns(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<Option<SortedRun>> {
        if disabled_reason().is_some() || !encodable_on_device(columns) {
            return Ok(None);
        }
        let rows = columns.first().map_or(0, column_rows);
        match self
            .runtime
            .sort_columns(columns, rows, algorithm, segments)
        {
            Ok(run) => Ok(Some(run)),
            Err(error) => {
                note_failure(&error, rows);
                let keys = encode_keys(columns)?;
                let mut run = self.with_empty_state(cpu_fallback(&keys, algorithm, segments)?);
                run.refine_keys = (!keys.long_keys.is_empty()).then_some(keys);
                Ok(Some(run))
            }
        }
    }

    fn sort_key_columns_by_ids(
        &self,
        columns: &[KeyColumn],
        ids: &PartitionIdTable,
        algorithm: AlgorithmChoice,
    ) -> Result<Option<(SortedRun, Vec<usize>)>> {
        let rows = columns.first().map_or(0, column_rows);
        // Byte-like keys may leave ties for the host to refine, which needs the ids as a
        // host column: those keep the host's ids.
        let fixed_width = columns.iter().all(|c| {
            c.arrays
                .first()
                .is_none_or(|a| limb_sources(a.data_type()).is_some())
        });
        // For measurement (`bench sql --variant env:GPUSORT_HOST_PARTITION_IDS=1`): keep the
        // host's hashing.
        let host_ids = std::env::var_os("GPUSORT_HOST_PARTITION_IDS").is_some_and(|v| v == "1");
        if disabled_reason().is_some() || rows < 2 || !fixed_width || host_ids {
            return Ok(None);
        }
        match self
            .runtime
            .sort_columns_by_ids(columns, rows, ids, algorithm)
        {
            Ok(sorted) => Ok(Some(sorted)),
            Err(error) => {
                note_failure_of(
                    "partition id sort",
                    "hashing the rows on the host",
                    &error,
                    rows,
                );
                Ok(None)
            }
        }
    }
}

/// Logs a failed device gather (the host gathers instead, counted as a fallback); a fatal
/// error disables the device for the process.
pub(super) fn note_gather_failure(error: &CudaError, rows: usize) {
    FALLBACKS.fetch_add(1, Ordering::Relaxed);
    note_failure_of("gather", "gathering on the host", error, rows);
}

/// Logs a failed device sort; a fatal error disables the device for the process.
fn note_failure(error: &CudaError, rows: usize) {
    note_failure_of("sort", "sorting this run on the CPU", error, rows);
}

/// Logs a failed device step (`what`, handled as `then`); a fatal error disables the
/// device for the process.
fn note_failure_of(what: &str, then: &str, error: &CudaError, rows: usize) {
    if error.is_fatal() {
        disable_device(&error.to_string());
    }
    log::warn!("gpusort: CUDA {what} of {rows} rows failed ({error}); {then}");
}

fn cpu_fallback(
    keys: &EncodedKeys,
    algorithm: AlgorithmChoice,
    segments: Option<&Segments>,
) -> Result<SortedRun> {
    FALLBACKS.fetch_add(1, Ordering::Relaxed);
    let mut run = CpuBackend.sort(keys, algorithm, segments)?;
    run.fell_back = true;
    Ok(run)
}
