//! [`CudaBackend`]: the sort contract (`crate::sort::SortBackend`) on a set of devices, and
//! its fallback policy.
//!
//! ```text
//!  CudaBackend::sort*(..)   the set's least busy device (fewest runs in flight, then least
//!                           memory held; the lower ordinal on a tie), disabled ones left out;
//!                           the run's gather and windows stay on that device
//!                           a lease of it for the run's estimated bytes, under the
//!                           session's gpu_sort.device_memory_limit (memory/budget.rs)
//!     too large for what is free, or out of memory: sort_or_split hands the run back to be
//!            sorted in pieces (KeySort::Split), down to MIN_DEVICE_PIECE_ROWS; every other
//!            caller, and smaller runs, go to the CPU backend
//!     error: fatal (sticky) → device disabled for the process; any error → this run is
//!            sorted by the CPU backend instead (same result, counted in `gpu_fallbacks`),
//!            with a run state that still lets the device gather its payload
//! ```

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::datatypes::DataType;
use datafusion::arrow;
use datafusion::common::Result;

use crate::config::AlgorithmChoice;
use crate::config::DEFAULT_SPREAD_MIN_ROWS;
use crate::config::{DeviceMemoryLimit, DeviceSelection};
use crate::cuda::columns::PayloadLayout;
use crate::cuda::encode::encodable_on_device;
use crate::cuda::error::CudaError;
use crate::cuda::faults::FaultScope;
use crate::cuda::gather::payload_layout;
use crate::cuda::memory::budget::DeviceShare;
use crate::cuda::multi_gpu::{sort_columns_spread, ColumnsSpread, SpreadRun};
use crate::cuda::payload::early::{DeviceOf, EarlyUpload};
use crate::cuda::payload::DeviceRun;
use crate::cuda::runtime::{
    count_fallback, device_count, first_ordinal, is_settled, note_failure_of, runtime_of,
    selected_ordinals, CudaRuntime,
};
use crate::cuda::sort_run::{self, Fitted};
use crate::cuda::tuning::switches;
use crate::gather::EarlyColumns;
use crate::keys::{column_rows, encode_keys, limb_sources, EncodedKeys, KeyColumn};
use crate::sort::{
    Algorithm, CpuBackend, DeviceUse, IdTableMaker, KeySort, Permutation, RunState, Segments,
    SortBackend, SortedRun, TransferTimes,
};

/// Runs are not split below this many rows: the CPU sorts such a piece about as fast as
/// the device would, without the merge.
pub const MIN_DEVICE_PIECE_ROWS: usize = 1 << 16;

/// Sorts on a set of GPUs, each run on one of them; any failure sorts that run on the CPU
/// backend instead.
///
/// Made while the runtimes are still being opened ([`CudaBackend::deferred`]), it waits for
/// the devices at its first sort, not when planned; a device that then fails to open is
/// left out, and with none left its sorts run on the CPU as after any other device failure.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    /// The devices, and the memory its sorts may use on each; opened at the first sort
    /// when deferred.
    devices: Arc<OnceLock<std::result::Result<Vec<OpenDevice>, String>>>,
    /// The devices asked for.
    selection: Selection,
    /// The limit asked for, applied to each device once it is open.
    limit: DeviceMemoryLimit,
    /// Faults injected into its device work (tests).
    faults: FaultScope,
    /// Runs of at least this many rows are sorted over every usable device at once.
    spread_min_rows: usize,
    /// Runs one device cannot hold are sorted over every usable device at once, where
    /// together they hold them.
    spread_large_runs: bool,
}

/// Which devices a backend sorts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Selection {
    /// The process's first device (`cuda::runtime`): tools, benchmarks and tests.
    First,
    /// The devices a session's `gpu_sort.devices` names.
    Set(DeviceSelection),
}

/// An open device's runtime and the device memory this backend's sorts may use on it.
#[derive(Debug)]
struct OpenDevice {
    runtime: Arc<CudaRuntime>,
    limit: usize,
}

/// The devices of `opened` not disabled since they opened.
fn usable(opened: &[OpenDevice]) -> impl Iterator<Item = &OpenDevice> {
    opened.iter().filter(|d| !d.runtime.is_disabled())
}

/// The ordinals of [`usable`] devices of `opened`.
fn usable_ordinals(opened: &[OpenDevice]) -> Vec<usize> {
    usable(opened).map(|d| d.runtime.ordinal()).collect()
}

/// A run given to a device: counted in the device's runs in flight until dropped.
struct Claim<'a> {
    runtime: &'a Arc<CudaRuntime>,
}

impl<'a> Claim<'a> {
    /// Counts a run in `runtime`'s runs in flight (the caller holds [`CHOOSING`]).
    fn of(runtime: &'a Arc<CudaRuntime>) -> Self {
        runtime.runs_in_flight.fetch_add(1, Ordering::AcqRel);
        Self { runtime }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.runtime.runs_in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Held while a run's device is chosen, so that runs started at once spread out.
static CHOOSING: Mutex<()> = Mutex::new(());

impl CudaBackend {
    /// The backend over the process's first device, under the default device memory limit,
    /// or why there is none.
    pub fn new() -> std::result::Result<Self, String> {
        Self::with_limit(DeviceMemoryLimit::Auto)
    }

    /// The backend over the process's first device, its sorts within `limit`; the device is
    /// opened now (waiting for it), or why there is none.
    pub fn with_limit(limit: DeviceMemoryLimit) -> std::result::Result<Self, String> {
        let backend = Self::unopened(limit, Selection::First);
        backend.open().map_err(str::to_string)?;
        Ok(backend)
    }

    /// The backend over the devices `devices` names, its sorts within `limit` on each; they
    /// are opened now (waiting for them), or why none is usable.
    pub fn on_devices(
        limit: DeviceMemoryLimit,
        devices: DeviceSelection,
    ) -> std::result::Result<Self, String> {
        let backend = Self::unopened(limit, Selection::Set(devices));
        backend.open().map_err(str::to_string)?;
        Ok(backend)
    }

    /// The backend over the devices `devices` names, its sorts within `limit`, opened at
    /// its first sort: for runtimes being opened meanwhile (`cuda::start_opening`).
    pub fn deferred(limit: DeviceMemoryLimit, devices: DeviceSelection) -> Self {
        Self::unopened(limit, Selection::Set(devices))
    }

    fn unopened(limit: DeviceMemoryLimit, selection: Selection) -> Self {
        Self {
            devices: Arc::new(OnceLock::new()),
            selection,
            limit,
            faults: FaultScope::NONE,
            spread_min_rows: DEFAULT_SPREAD_MIN_ROWS,
            spread_large_runs: true,
        }
    }

    /// The ordinals this backend asks for.
    fn ordinals(&self) -> Vec<usize> {
        match self.selection {
            Selection::First => vec![first_ordinal()],
            Selection::Set(devices) => selected_ordinals(devices),
        }
    }

    /// The open devices, waiting for those being opened (each on a thread of its own); or
    /// why none is usable.
    fn open(&self) -> std::result::Result<&[OpenDevice], &str> {
        self.devices
            .get_or_init(|| {
                let ordinals = self.ordinals();
                if ordinals.is_empty() {
                    // No driver or no device: the first device's runtime says why.
                    let count = device_count();
                    return Err(match runtime_of(first_ordinal()) {
                        Err(why) if count == 0 => why,
                        _ => format!(
                            "gpu_sort.devices names none of this host's {count} CUDA devices"
                        ),
                    });
                }
                // Devices not opened yet open at once, each on a thread (every query
                // plans a backend: once they are open, no thread is needed).
                let opened: Vec<_> = if ordinals.iter().all(|&d| is_settled(d)) {
                    ordinals.iter().map(|&d| runtime_of(d)).collect()
                } else {
                    std::thread::scope(|scope| {
                        let opening: Vec<_> = ordinals
                            .iter()
                            .map(|&d| scope.spawn(move || runtime_of(d)))
                            .collect();
                        opening
                            .into_iter()
                            .map(|o| o.join().unwrap_or_else(|_| Err("opening panicked".into())))
                            .collect()
                    })
                };
                let mut devices = Vec::new();
                let mut reasons = Vec::new();
                for (ordinal, opened) in ordinals.iter().zip(opened) {
                    match opened {
                        Ok(runtime) => devices.push(OpenDevice {
                            limit: runtime.device_memory_limit(self.limit),
                            runtime,
                        }),
                        Err(why) if ordinals.len() > 1 => {
                            reasons.push(format!("device {ordinal}: {why}"))
                        }
                        Err(why) => reasons.push(why),
                    }
                }
                if devices.is_empty() {
                    return Err(reasons.join("; "));
                }
                Ok(devices)
            })
            .as_ref()
            .map(Vec::as_slice)
            .map_err(String::as_str)
    }

    /// The least busy usable device for a run, claimed for it, and this backend's share of
    /// it; `None` when no device of the set is usable.
    fn device(&self) -> Option<(Claim<'_>, DeviceShare)> {
        let devices = self.open().ok()?;
        let _choosing = CHOOSING.lock().unwrap_or_else(|p| p.into_inner());
        let chosen = usable(devices).min_by_key(|d| {
            (
                d.runtime.runs_in_flight.load(Ordering::Acquire),
                d.runtime.device_memory().used,
            )
        })?;
        let share = DeviceShare {
            limit: chosen.limit,
            faults: self.faults,
        };
        Some((Claim::of(&chosen.runtime), share))
    }

    /// The ordinals of the usable devices this backend sorts on (opening them if needed):
    /// empty when none is usable.
    pub fn device_ordinals(&self) -> Vec<usize> {
        usable_ordinals(self.open().unwrap_or_default())
    }

    /// This backend sorting runs of at least `rows` rows over all its usable devices at
    /// once, each a range of the keys (`gpu_sort.spread_min_rows`; 0: never).
    pub fn with_spread_min_rows(mut self, rows: usize) -> Self {
        self.spread_min_rows = rows;
        self
    }

    /// This backend sorting a run that one device cannot hold over all its usable devices
    /// at once when together they hold it (`gpu_sort.spread_large_runs`), instead of in
    /// pieces merged on the host.
    pub fn with_spread_large_runs(mut self, spread: bool) -> Self {
        self.spread_large_runs = spread;
        self
    }

    /// This backend with the faults `scope` arms injected into its device work (tests).
    pub fn with_faults(mut self, scope: FaultScope) -> Self {
        self.faults = scope;
        self
    }

    /// The device memory this backend's sorts may use on one device, in bytes: the least
    /// of the set's (0 when no device is usable); waits for deferred devices.
    pub fn memory_limit(&self) -> usize {
        usable(self.open().unwrap_or_default())
            .map(|d| d.limit)
            .min()
            .unwrap_or(0)
    }

    /// A run state that keeps nothing on the device: its payload gather uploads the
    /// permutation and every column (for runs the device did not sort, and for tests), on
    /// the least busy device. `None` when no device is usable.
    pub fn empty_run_state(&self) -> Option<Box<dyn RunState>> {
        let (claim, share) = self.device()?;
        Some(Box::new(DeviceRun::empty(Arc::clone(claim.runtime), share)) as Box<dyn RunState>)
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
        if !encodable_on_device(columns) {
            return Ok(KeySort::OnHost);
        }
        if let Some(run) = self.sort_spread(columns, algorithm, segments, false) {
            return Ok(KeySort::Sorted(run));
        }
        let Some((claim, share)) = self.device() else {
            return Ok(KeySort::OnHost);
        };
        let runtime = claim.runtime;
        let rows = columns.first().map_or(0, column_rows);
        let error = match sort_run::sort_columns(runtime, columns, rows, algorithm, segments, share)
        {
            Ok(Fitted::Done(run)) => return Ok(KeySort::Sorted(run)),
            Ok(Fitted::TooLarge { bytes, available }) => {
                if let Some(run) = self.sort_spread(columns, algorithm, segments, true) {
                    return Ok(KeySort::Sorted(run));
                }
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
        note_failure(runtime.ordinal(), &error, rows);
        drop(claim);
        let keys = encode_keys(columns)?;
        let mut run = self.with_empty_state(cpu_fallback(&keys, algorithm, segments, self.faults)?);
        run.refine_keys = (!keys.long_keys.is_empty()).then_some(keys);
        Ok(KeySort::Sorted(run))
    }

    /// A run of fixed-width keys, with no segments and no other algorithm asked for,
    /// sorted over every usable device at once by key ranges (`multi_gpu/`) when there are
    /// two or more: one of at least `spread_min_rows` rows, or (`too_large`) one that one
    /// device cannot hold, with `spread_large_runs`. Its payload is gathered on all of
    /// them. `None` leaves the run to one device: not asked for, devices short of memory
    /// now, or a failure (noted; a fatal one disables its device).
    fn sort_spread(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
        too_large: bool,
    ) -> Option<SortedRun> {
        let rows = columns.first().map_or(0, column_rows);
        let radix = matches!(algorithm, AlgorithmChoice::Auto | AlgorithmChoice::Onesweep);
        let long_enough = self.spread_min_rows != 0 && rows >= self.spread_min_rows.max(2);
        // A run long enough was offered to the devices before one tried it alone.
        let asked = match too_large {
            true => self.spread_large_runs && rows >= 2 && !long_enough,
            false => long_enough,
        };
        if !asked || segments.is_some() || !radix {
            return None;
        }
        if !is_fixed_width(columns) {
            return None;
        }
        let chosen: Vec<&OpenDevice> = usable(self.open().ok()?).collect();
        if chosen.len() < 2 {
            return None;
        }
        let _claims: Vec<Claim<'_>> = {
            let _choosing = CHOOSING.lock().unwrap_or_else(|p| p.into_inner());
            chosen.iter().map(|d| Claim::of(&d.runtime)).collect()
        };
        let share = DeviceShare {
            limit: chosen.iter().map(|d| d.limit).min()?,
            faults: self.faults,
        };
        let runtimes: Vec<&CudaRuntime> = chosen.iter().map(|d| d.runtime.as_ref()).collect();
        let first = &chosen[0].runtime;
        let mut permutation = first.idle_permutations.take(rows);
        match sort_columns_spread(&runtimes, columns, &mut permutation, share) {
            Ok(Some(spread)) => {
                let devices = chosen.iter().map(|d| Arc::clone(&d.runtime)).collect();
                Some(spread_run(devices, permutation, spread, share))
            }
            Ok(None) => {
                first.idle_permutations.give_back(permutation);
                None
            }
            Err(failure) => {
                first.idle_permutations.give_back(permutation);
                match failure.ordinal {
                    Some(ordinal) => note_failure_of(
                        ordinal,
                        "spread sort",
                        "sorting this run on one device",
                        &failure.error,
                        rows,
                    ),
                    None => log::warn!(
                        "gpusort: sorting {rows} rows over several devices failed ({}); \
                         sorting them on one",
                        failure.error
                    ),
                }
                None
            }
        }
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

    /// The fixed-width and views columns of `columns`, uploaded as they arrive to the
    /// device the first group finds (`payload/early.rs`), within half the backend's limit.
    fn early_columns(&self, columns: &[(usize, DataType)]) -> Option<Arc<dyn EarlyColumns>> {
        let columns: Vec<(usize, PayloadLayout)> = columns
            .iter()
            .filter_map(|(index, data_type)| match payload_layout(data_type)? {
                PayloadLayout::Bits => None,
                layout => Some((*index, layout)),
            })
            .collect();
        if columns.is_empty() {
            return None;
        }
        // Switched off: known without waiting where the devices are open already.
        if let Some(Ok(opened)) = self.devices.get() {
            if usable(opened).any(|d| d.runtime.tuning.early_uploaders == 0) {
                return None;
            }
        }
        let backend = self.clone();
        let device_of: DeviceOf = Box::new(move || {
            // One device: with several, the copy's memory would send the run to another
            // (the least busy one), and the copy would be let go.
            if usable(backend.open().ok()?).count() != 1 {
                return None;
            }
            let (claim, share) = backend.device()?;
            let runtime = Arc::clone(claim.runtime);
            let cap = share.limit.min(runtime.device.total_memory) / 2;
            Some((runtime, cap))
        });
        Some(Arc::new(EarlyUpload::new(columns, device_of)))
    }

    fn devices(&self) -> Option<String> {
        let Some(opened) = self.devices.get() else {
            return Some(match self.selection {
                Selection::First => first_ordinal().to_string(),
                Selection::Set(devices) => devices.to_string(),
            });
        };
        let ordinals: Vec<String> = usable_ordinals(opened.as_deref().unwrap_or_default())
            .iter()
            .map(usize::to_string)
            .collect();
        Some(if ordinals.is_empty() {
            "none".to_string()
        } else {
            ordinals.join(",")
        })
    }

    fn sort(
        &self,
        keys: &EncodedKeys,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<SortedRun> {
        let Some((claim, share)) = self.device() else {
            // Every device disabled, or deferred devices that failed to open (said once,
            // by `cuda::runtime`).
            log::debug!("gpusort: no CUDA device usable; sorting on the CPU");
            return cpu_fallback(keys, algorithm, segments, self.faults);
        };
        let runtime = claim.runtime;
        let error = match sort_run::sort_rows(runtime, keys, algorithm, segments, share) {
            Ok(Fitted::Done(run)) => return Ok(run),
            Ok(Fitted::TooLarge { bytes, available }) => Self::over_budget(share, bytes, available),
            Err(error) => error,
        };
        note_failure(runtime.ordinal(), &error, keys.rows);
        drop(claim);
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
        let fixed_width = is_fixed_width(columns);
        // For measurement (`bench sql --variant env:GPUSORT_HOST_PARTITION_IDS=1`): keep the
        // host's hashing.
        let host_ids = switches().host_partition_ids();
        if rows < 2 || !fixed_width || host_ids {
            return Ok(None);
        }
        let Some((claim, share)) = self.device() else {
            return Ok(None);
        };
        let runtime = claim.runtime;
        match sort_run::sort_columns_by_ids(runtime, columns, rows, ids, algorithm, share) {
            // `None`: the range was too wide for a table.
            Ok(Fitted::Done(sorted)) => Ok(sorted),
            // The host makes the ids; the run then goes through `sort_key_columns`.
            Ok(Fitted::TooLarge { .. }) => Ok(None),
            Err(error) => {
                note_failure_of(
                    runtime.ordinal(),
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

/// Whether every key column is fixed-width (the keys a spread sort and the device's
/// partition ids take).
fn is_fixed_width(columns: &[KeyColumn]) -> bool {
    columns.iter().all(|c| {
        c.arrays
            .first()
            .is_none_or(|a| limb_sources(a.data_type()).is_some())
    })
}

/// The sorted run of a spread sort over `devices`: its permutation (from the first one's
/// idle vectors) and a state whose payload gather runs on all of them.
fn spread_run(
    devices: Vec<Arc<CudaRuntime>>,
    permutation: Vec<u32>,
    spread: ColumnsSpread,
    share: DeviceShare,
) -> SortedRun {
    let home = Arc::clone(&devices[0].idle_permutations);
    let rows = permutation.len();
    let times = spread.sorted.times;
    let spread_devices = spread
        .sorted
        .ordinals
        .iter()
        .fold(0u32, |set, &d| set | 1 << d);
    SortedRun {
        permutation: Permutation::with_home(permutation, home),
        algorithm: Algorithm::Radix,
        h2d_bytes: spread.h2d_bytes,
        d2h_bytes: rows * 4,
        transfer: TransferTimes {
            upload: times.upload,
            download: times.download,
        },
        state: Some(Box::new(SpreadRun {
            runtimes: devices,
            share,
        })),
        device: DeviceUse {
            spread_devices,
            ..DeviceUse::default()
        },
        ..SortedRun::default()
    }
}

/// Logs a failed sort on device `ordinal`; a fatal error disables the device for the
/// process.
fn note_failure(ordinal: usize, error: &CudaError, rows: usize) {
    if let CudaError::OverBudget { .. } = error {
        // Not a failure of the device: it is busy, or the limit is lower than the run.
        log::debug!("gpusort: {rows} rows do not fit the device now ({error}); sorting on the CPU");
        return;
    }
    note_failure_of(ordinal, "sort", "sorting this run on the CPU", error, rows);
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
