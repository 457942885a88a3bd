//! [`CudaBackend`]: the sort contract (`crate::sort::SortBackend`) on the device, and its
//! fallback policy.
//!
//! ```text
//!  CudaBackend::sort*(..)   a lease of the device for the run's estimated bytes, under the
//!                           session's gpu_sort.device_memory_limit (memory/budget.rs)
//!     too large for what is free, or out of memory: sort_or_split hands the run back to be
//!            sorted in pieces (KeySort::Split), down to MIN_DEVICE_PIECE_ROWS; every other
//!            caller, and smaller runs, go to the CPU backend
//!     error: fatal (sticky) → device disabled for the process; any error → this run is
//!            sorted by the CPU backend instead (same result, counted in `gpu_fallbacks`),
//!            with a run state that still lets the device gather its payload
//! ```

use std::sync::{Arc, OnceLock};

use datafusion::common::Result;

use crate::config::AlgorithmChoice;
use crate::config::DeviceMemoryLimit;
use crate::cuda::encode::encodable_on_device;
use crate::cuda::error::CudaError;
use crate::cuda::faults::FaultScope;
use crate::cuda::memory::budget::DeviceShare;
use crate::cuda::payload::DeviceRun;
use crate::cuda::runtime::{
    count_fallback, disabled_reason, note_failure_of, runtime, CudaRuntime,
};
use crate::cuda::sort_run::{self, Fitted};
use crate::cuda::tuning::switches;
use crate::keys::{column_rows, encode_keys, limb_sources, EncodedKeys, KeyColumn};
use crate::sort::{CpuBackend, IdTableMaker, KeySort, RunState, Segments, SortBackend, SortedRun};

/// Runs are not split below this many rows: the CPU sorts such a piece about as fast as
/// the device would, without the merge.
pub const MIN_DEVICE_PIECE_ROWS: usize = 1 << 16;

/// Sorts on the GPU; any failure sorts that run on the CPU backend instead.
///
/// Made while the runtime is still being opened ([`CudaBackend::deferred`]), it waits for
/// the device at its first sort, not when planned; should the device then fail to open,
/// its sorts run on the CPU as after any other device failure.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    /// The device, and the memory its sorts may use; opened at the first sort when
    /// deferred.
    device: Arc<OnceLock<std::result::Result<OpenDevice, String>>>,
    /// The limit asked for, applied once the device is open.
    limit: DeviceMemoryLimit,
    /// Faults injected into its device work (tests).
    faults: FaultScope,
}

/// The open runtime and the device memory this backend's sorts may use.
#[derive(Debug)]
struct OpenDevice {
    runtime: Arc<CudaRuntime>,
    limit: usize,
}

impl CudaBackend {
    /// The backend over the process's device, under the default device memory limit, or
    /// why there is none.
    pub fn new() -> std::result::Result<Self, String> {
        Self::with_limit(DeviceMemoryLimit::Auto)
    }

    /// The backend over the process's device, its sorts within `limit`; the device is
    /// opened now (waiting for it), or why there is none.
    pub fn with_limit(limit: DeviceMemoryLimit) -> std::result::Result<Self, String> {
        let backend = Self::deferred(limit);
        backend.open().map_err(str::to_string)?;
        Ok(backend)
    }

    /// The backend over the process's device, its sorts within `limit`, opened at its
    /// first sort: for a runtime being opened meanwhile (`cuda::start_opening`).
    pub fn deferred(limit: DeviceMemoryLimit) -> Self {
        Self {
            device: Arc::new(OnceLock::new()),
            limit,
            faults: FaultScope::NONE,
        }
    }

    /// The open device, waiting for it if it is being opened; or why it is unusable.
    fn open(&self) -> std::result::Result<&OpenDevice, &str> {
        self.device
            .get_or_init(|| {
                runtime().map(|runtime| OpenDevice {
                    limit: runtime.device_memory_limit(self.limit),
                    runtime,
                })
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// The open device and this backend's share of it; `None` when it is unusable.
    fn device(&self) -> Option<(&Arc<CudaRuntime>, DeviceShare)> {
        let device = self.open().ok()?;
        let share = DeviceShare {
            limit: device.limit,
            faults: self.faults,
        };
        Some((&device.runtime, share))
    }

    /// This backend with the faults `scope` arms injected into its device work (tests).
    pub fn with_faults(mut self, scope: FaultScope) -> Self {
        self.faults = scope;
        self
    }

    /// The device memory this backend's sorts may use, in bytes (0 when the device is
    /// unusable); waits for a deferred device.
    pub fn memory_limit(&self) -> usize {
        self.device().map_or(0, |(_, share)| share.limit)
    }

    /// A run state that keeps nothing on the device: its payload gather uploads the
    /// permutation and every column (for runs the device did not sort, and for tests).
    /// `None` when the device is unusable.
    pub fn empty_run_state(&self) -> Option<Box<dyn RunState>> {
        let (runtime, share) = self.device()?;
        Some(Box::new(DeviceRun::empty(Arc::clone(runtime), share)) as Box<dyn RunState>)
    }

    fn over_budget(share: DeviceShare, bytes: usize, available: usize) -> CudaError {
        let limit = share.limit;
        CudaError::OverBudget {
            bytes,
            what: "a run",
            used: limit - available,
            limit,
        }
    }

    /// Sorts the key columns of a run on the device; one it cannot hold is `Split` when
    /// `splittable` (and not below [`MIN_DEVICE_PIECE_ROWS`]), else sorted on the CPU.
    fn sort_columns(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
        splittable: bool,
    ) -> Result<KeySort> {
        if disabled_reason().is_some() || !encodable_on_device(columns) {
            return Ok(KeySort::OnHost);
        }
        let Some((runtime, share)) = self.device() else {
            return Ok(KeySort::OnHost);
        };
        let rows = columns.first().map_or(0, column_rows);
        let error = match sort_run::sort_columns(runtime, columns, rows, algorithm, segments, share)
        {
            Ok(Fitted::Done(run)) => return Ok(KeySort::Sorted(run)),
            Ok(Fitted::TooLarge { bytes, available }) => {
                // Pieces sized to what is free, with a tenth to spare for the estimate.
                let fits = (rows as f64 * available as f64 / bytes as f64 * 0.9) as usize;
                if splittable && fits >= MIN_DEVICE_PIECE_ROWS {
                    log::debug!("gpusort: a run of {rows} rows needs about {bytes} bytes of device memory, {available} are free: sorting it in pieces of {fits} rows");
                    return Ok(KeySort::Split { rows: fits });
                }
                Self::over_budget(share, bytes, available)
            }
            Err(error) => {
                if splittable && error.is_out_of_memory() && rows / 2 >= MIN_DEVICE_PIECE_ROWS {
                    log::info!("gpusort: sorting {rows} rows ran out of device memory ({error}); sorting them in halves");
                    return Ok(KeySort::Split {
                        rows: rows.div_ceil(2),
                    });
                }
                error
            }
        };
        note_failure(&error, rows);
        let keys = encode_keys(columns)?;
        let mut run = self.with_empty_state(cpu_fallback(&keys, algorithm, segments, self.faults)?);
        run.refine_keys = (!keys.long_keys.is_empty()).then_some(keys);
        Ok(KeySort::Sorted(run))
    }

    /// `run` (sorted by the CPU backend after the device failed or was disabled) with a
    /// state that still lets the device gather its payload.
    fn with_empty_state(&self, mut run: SortedRun) -> SortedRun {
        run.state = self.empty_run_state();
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
            return cpu_fallback(keys, algorithm, segments, self.faults);
        }
        let Some((runtime, share)) = self.device() else {
            // A deferred device that failed to open (said once, by `cuda::runtime`).
            return cpu_fallback(keys, algorithm, segments, self.faults);
        };
        let error = match sort_run::sort_rows(runtime, keys, algorithm, segments, share) {
            Ok(Fitted::Done(run)) => return Ok(run),
            Ok(Fitted::TooLarge { bytes, available }) => Self::over_budget(share, bytes, available),
            Err(error) => error,
        };
        note_failure(&error, keys.rows);
        Ok(self.with_empty_state(cpu_fallback(keys, algorithm, segments, self.faults)?))
    }

    fn sort_key_columns(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<Option<SortedRun>> {
        match self.sort_columns(columns, algorithm, segments, false)? {
            KeySort::Sorted(run) => Ok(Some(run)),
            KeySort::OnHost => Ok(None),
            KeySort::Split { .. } => unreachable!("a run that may not be split is never split"),
        }
    }

    fn sort_or_split(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<KeySort> {
        self.sort_columns(columns, algorithm, segments, true)
    }

    fn sort_key_columns_by_ids(
        &self,
        columns: &[KeyColumn],
        ids: &dyn IdTableMaker,
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
        let host_ids = switches().host_partition_ids();
        if disabled_reason().is_some() || rows < 2 || !fixed_width || host_ids {
            return Ok(None);
        }
        let Some((runtime, share)) = self.device() else {
            return Ok(None);
        };
        match sort_run::sort_columns_by_ids(runtime, columns, rows, ids, algorithm, share) {
            // `None`: the range was too wide for a table.
            Ok(Fitted::Done(sorted)) => Ok(sorted),
            // The host makes the ids; the run then goes through `sort_key_columns`.
            Ok(Fitted::TooLarge { .. }) => Ok(None),
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

/// Logs a failed device sort; a fatal error disables the device for the process.
fn note_failure(error: &CudaError, rows: usize) {
    if let CudaError::OverBudget { .. } = error {
        // Not a failure of the device: it is busy, or the limit is lower than the run.
        log::debug!("gpusort: {rows} rows do not fit the device now ({error}); sorting on the CPU");
        return;
    }
    note_failure_of("sort", "sorting this run on the CPU", error, rows);
}

fn cpu_fallback(
    keys: &EncodedKeys,
    algorithm: AlgorithmChoice,
    segments: Option<&Segments>,
    faults: FaultScope,
) -> Result<SortedRun> {
    count_fallback(faults);
    let mut run = CpuBackend.sort(keys, algorithm, segments)?;
    run.fell_back = true;
    Ok(run)
}
