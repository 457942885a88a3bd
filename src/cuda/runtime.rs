//! The process's CUDA runtimes, one per device: the probe, each opened device and its
//! kernels, and the process-wide state of failures (a device disabled after a fatal error,
//! fallbacks).
//!
//! ```text
//!  runtime_of(d)  once per process and device: the tuning read (tuning.rs) → libcuda
//!             present? → device d → NVRTC (cached CUBIN, compiled with the tuning's -D
//!             options) → kernels
//!     any failure: the reason is kept, `backend = auto` uses the other devices or the CPU
//!  runtime()  the process's first device (`GPUSORT_CUDA_DEVICE`, default 0): tools, benches
//!  a fatal (sticky) error on device d → disable_device(d): every later run goes to the
//!            set's other devices, or to the CPU
//!  work on the device: a lease from the device's budget (memory/budget.rs), then the
//!            staging buffers; a thread gives idle pool memory back to the driver
//! ```
//!
//! cudarc loads libcuda dynamically and panics when it is missing, so the probe checks for
//! the library first and runs the rest under `catch_unwind`; a machine without a GPU gets a
//! reason, never a panic.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::config::{DeviceMemoryLimit, DeviceSelection, MAX_DEVICES};
use crate::cuda::columns::narrow::Narrowing;
use crate::cuda::encode::Encoder;
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::faults::{self, FaultScope};
use crate::cuda::gather::Gatherer;
use crate::cuda::memory::budget::{DeviceMemoryStats, DeviceShare, Lease, LeaseKind};
use crate::cuda::memory::device::Device;
use crate::cuda::memory::host_memory::{idle_limit, HostRegions, PageLocker};
use crate::cuda::memory::idle_vectors::IdleVectors;
use crate::cuda::memory::lanes::DeviceLanes;
use crate::cuda::memory::transfer::Staging;
use crate::cuda::merge::locality::LocalitySort;
use crate::cuda::merge::segmented::SegmentedSort;
use crate::cuda::module::is_nvrtc_present;
use crate::cuda::parquet::PageEncoder;
use crate::cuda::radix::onesweep::Onesweep;
use crate::cuda::refine::TieRefiner;
use crate::cuda::spread::Spreader;
use crate::cuda::tuning::{switches, Tuning};
use crate::cuda::window::Windower;

/// The opened device and what is loaded on it; one per device and process.
#[derive(Debug)]
pub struct CudaRuntime {
    /// The device.
    pub device: Device,
    /// The radix sort kernels.
    pub onesweep: Onesweep,
    /// The merge sort of nearly sorted keys, its probe and its windowed sort.
    pub locality: LocalitySort,
    /// The sorts within known segments.
    pub segmented: SegmentedSort,
    /// The key encoding kernels.
    pub encoder: Encoder,
    /// The payload gather kernels.
    pub gatherer: Gatherer,
    /// The kernels that put narrowed uploads back to full width.
    pub narrowing: Narrowing,
    /// Window columns over sorted runs; `None` when its kernels did not load.
    pub windower: Option<Windower>,
    /// The kernels that order the ties of long byte-like keys.
    pub refiner: TieRefiner,
    /// The steps of sorts spread over several devices (`multi_gpu/`).
    pub spreader: Spreader,
    /// Parquet data pages built and compressed on the device; `None` when its kernels did
    /// not load.
    pub pages: Option<PageEncoder>,
    /// The tuning the kernels were compiled with, read when the runtime opened.
    pub tuning: Tuning,
    /// Pinned staging buffers; holding the lock is holding the device.
    pub(super) staging: Mutex<Staging>,
    /// Streams beside the device's own, for page jobs that run at once.
    pub(super) lanes: DeviceLanes,
    /// Host memory of gathered windows, reused between sorts.
    pub(super) host_regions: Arc<HostRegions>,
    /// Permutation vectors given back after a sort, filled again by the next download.
    pub(super) idle_permutations: Arc<IdleVectors>,
    /// Runs given to this device and not finished yet, by every backend of the process
    /// (how busy it is, for the choice of a device: `backend.rs`).
    pub(super) runs_in_flight: AtomicUsize,
}

type Opened = std::result::Result<Arc<CudaRuntime>, String>;

/// Each device's runtime, or why it did not open.
static RUNTIMES: [OnceLock<Opened>; MAX_DEVICES] = [const { OnceLock::new() }; MAX_DEVICES];
/// Each device disabled after a fatal error, and why, in the order they were.
static DISABLED: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// Runs and gathers that the CUDA backend handed to the CPU in this process (after an
/// error, or with the device disabled), outside any fault scope (those count in
/// [`FaultScope::fallbacks`]).
pub fn fallback_count() -> u64 {
    FALLBACKS.load(Ordering::Relaxed)
}

/// The runtime of the process's first device (`GPUSORT_CUDA_DEVICE`, default 0), or why
/// there is none: what tools and benchmarks use.
pub fn runtime() -> Opened {
    runtime_of(first_ordinal())
}

/// The ordinal `GPUSORT_CUDA_DEVICE` names, if set.
pub fn pinned_ordinal() -> Option<usize> {
    static PINNED: OnceLock<Option<usize>> = OnceLock::new();
    *PINNED.get_or_init(|| Tuning::from_env().pinned_device)
}

pub(super) fn first_ordinal() -> usize {
    pinned_ordinal().unwrap_or(0)
}

/// [`device_count`], once known.
static COUNT: OnceLock<usize> = OnceLock::new();

/// The devices the driver sees (0 without a driver, or told to use none). The first call
/// initializes the driver (about 0.1 s in a fresh process).
pub fn device_count() -> usize {
    *COUNT.get_or_init(|| {
        if Tuning::from_env().disable_cuda || !is_driver_present() {
            return 0;
        }
        std::panic::catch_unwind(Device::count)
            .unwrap_or(0)
            .min(MAX_DEVICES)
    })
}

/// Whether device `ordinal`'s runtime was opened, or failed to, already ([`runtime_of`]
/// then answers at once).
pub(super) fn is_settled(ordinal: usize) -> bool {
    RUNTIMES
        .get(ordinal)
        .is_none_or(|slot| slot.get().is_some())
}

/// The runtime of device `ordinal`, opened on first use, or why there is none.
pub fn runtime_of(ordinal: usize) -> Opened {
    if let Some(reason) = disabled_reason_of(ordinal) {
        return Err(format!(
            "CUDA device {ordinal} was disabled after a fatal error: {reason}"
        ));
    }
    let Some(slot) = RUNTIMES.get(ordinal) else {
        return Err(format!("no CUDA device {ordinal} (at most {MAX_DEVICES})"));
    };
    slot.get_or_init(|| {
        open_runtime(ordinal).map_err(|error| {
            let reason = error.to_string();
            // Said once per process and device: sorts of `backend = auto` run on the
            // other devices or on the CPU from here on. A machine without the NVIDIA
            // driver, or told to use none, is no surprise; any other failure is.
            if is_expected_absence(&error) {
                log::info!("gpusort: no CUDA device, sorting on the CPU: {reason}");
            } else {
                log::warn!(
                    "gpusort: CUDA device {ordinal} is not usable, sorting without it: {reason}"
                );
            }
            reason
        })
    })
    .clone()
}

/// Each device whose runtime [`start_opening`] has started opening on a thread.
static OPENING: [AtomicBool; MAX_DEVICES] = [const { AtomicBool::new(false) }; MAX_DEVICES];

/// Calls of [`start_opening`] whose thread has not yet counted the devices and marked
/// those it opens (the driver's initialization, about 0.1 s in a fresh process).
static COUNTING: AtomicUsize = AtomicUsize::new(0);

/// The ordinals `selection` names on this host.
pub fn selected_ordinals(selection: DeviceSelection) -> Vec<usize> {
    selection.ordinals(device_count(), pinned_ordinal())
}

/// An upper bound on the devices `selection` names on this host, told without waiting for
/// the driver's initialization where the devices are not counted yet: the GPUs the driver
/// lists in `/proc` (fewer where `CUDA_VISIBLE_DEVICES` names fewer). Where that list
/// cannot be read, the devices are counted here (the driver initialized, or waited for).
/// For setting memory aside per device before the devices are open.
pub fn selected_count_bound(selection: DeviceSelection) -> usize {
    let listed = match (COUNT.get(), super::visible::listed_devices()) {
        (None, Some(listed)) => listed.min(MAX_DEVICES),
        // Counted already, or nothing to tell it from: the count itself.
        _ => return selected_ordinals(selection).len(),
    };
    match selection {
        DeviceSelection::Ordinals(mask) => (mask.count_ones() as usize).min(listed),
        DeviceSelection::All if pinned_ordinal().is_some() => listed.min(1),
        DeviceSelection::All => listed,
        DeviceSelection::First(n) => n.min(listed),
    }
}

/// Starts opening the runtimes of the devices `selection` names, each on a thread of its
/// own, unless open, failed, or already being opened. Opening (driver, context, kernels,
/// pinned staging) takes a good part of a second in a fresh process; a job that starts it
/// first plans and scans meanwhile, and its first device sort waits only for what is left
/// ([`OpenState::Opening`] makes the planner defer the devices to then).
///
/// The devices are counted on that thread too where they were not yet (the driver's
/// initialization), unless the driver lists none; meanwhile [`open_state`] says `Opening`,
/// even where the count then finds no device to open (a driver that lists GPUs none of
/// which CUDA shows): the planner's sorts then wait for nothing at their first sort and
/// run on the CPU, counted as fallbacks.
pub fn start_opening(selection: DeviceSelection) {
    // Without a driver, or told to use no device, opening fails at once: it does so here,
    // so that nothing is planned for a device being opened that will never be.
    if !is_driver_present() || Tuning::from_env().disable_cuda {
        let _ = runtime();
        return;
    }
    // Counted already, or nothing to count (the driver lists no GPU): nothing to wait for.
    if COUNT.get().is_some() || super::visible::listed_devices() == Some(0) {
        return open_selected(selection);
    }
    COUNTING.fetch_add(1, Ordering::AcqRel);
    let spawned = std::thread::Builder::new()
        .name("gpusort-cuda-count".into())
        .spawn(move || {
            // Each device to open is marked before the count is let go of, so that
            // `open_state` never sees it not started in between.
            let _counted = CountingDone;
            open_selected(selection);
        });
    if spawned.is_err() {
        COUNTING.fetch_sub(1, Ordering::AcqRel);
        open_selected(selection);
    }
}

/// Lets go of one [`COUNTING`] when dropped (a panic included).
struct CountingDone;

impl Drop for CountingDone {
    fn drop(&mut self) {
        COUNTING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// [`start_opening`]'s work once the devices may be counted.
fn open_selected(selection: DeviceSelection) {
    for ordinal in selected_ordinals(selection) {
        if RUNTIMES[ordinal].get().is_some() || OPENING[ordinal].swap(true, Ordering::AcqRel) {
            continue;
        }
        let spawned = std::thread::Builder::new()
            .name(format!("gpusort-cuda-open-{ordinal}"))
            .spawn(move || {
                let _ = runtime_of(ordinal);
            });
        if spawned.is_err() {
            OPENING[ordinal].store(false, Ordering::Release);
        }
    }
}

/// Where the process's CUDA runtime stands, without waiting for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenState {
    /// Open and usable.
    Open,
    /// Being opened by [`start_opening`]'s thread.
    Opening,
    /// Not opened yet, and nobody is opening it.
    NotStarted,
    /// Failed to open, or disabled after a fatal error: why.
    Unusable(String),
}

/// Where the runtimes of the devices `selection` names stand, without waiting: `Opening`
/// while [`start_opening`]'s thread counts the devices; else `Open` when one is, else
/// `Opening` when one is being opened, else `NotStarted` when one is not, else `Unusable`
/// (each device's reason).
pub fn open_state(selection: DeviceSelection) -> OpenState {
    if COUNTING.load(Ordering::Acquire) > 0 {
        // Being counted, and then opened, by `start_opening`'s thread.
        return OpenState::Opening;
    }
    let ordinals = selected_ordinals(selection);
    if ordinals.is_empty() {
        // No driver (or no device at all): opening says why.
        return match runtime() {
            Ok(_) => OpenState::Open,
            Err(why) => OpenState::Unusable(why),
        };
    }
    let states: Vec<OpenState> = ordinals.iter().map(|&d| open_state_of(d)).collect();
    for wanted in [OpenState::Open, OpenState::Opening, OpenState::NotStarted] {
        if states.contains(&wanted) {
            return wanted;
        }
    }
    let reasons: Vec<String> = states
        .into_iter()
        .zip(&ordinals)
        .map(|(state, d)| match state {
            OpenState::Unusable(why) if ordinals.len() > 1 => format!("device {d}: {why}"),
            OpenState::Unusable(why) => why,
            _ => unreachable!("the other states were returned above"),
        })
        .collect();
    OpenState::Unusable(reasons.join("; "))
}

/// Where device `ordinal`'s runtime stands, without waiting for it.
fn open_state_of(ordinal: usize) -> OpenState {
    if let Some(reason) = disabled_reason_of(ordinal) {
        return OpenState::Unusable(reason);
    }
    match RUNTIMES[ordinal].get() {
        Some(Ok(_)) => OpenState::Open,
        Some(Err(why)) => OpenState::Unusable(why.clone()),
        None if OPENING[ordinal].load(Ordering::Acquire) => OpenState::Opening,
        None => OpenState::NotStarted,
    }
}

/// Whether opening failed only because this machine has no NVIDIA driver, or was told
/// to use no device.
fn is_expected_absence(error: &CudaError) -> bool {
    match error {
        CudaError::LibraryMissing { library } => library.starts_with("libcuda"),
        CudaError::Unavailable(why) => why.contains("GPUSORT_DISABLE_CUDA"),
        _ => false,
    }
}

/// Marks device `ordinal` unusable for the rest of the process (after a sticky error).
pub(super) fn disable_device(ordinal: usize, reason: &str) {
    log::error!("gpusort: disabling CUDA device {ordinal} for this process: {reason}");
    let mut disabled = DISABLED.lock().unwrap_or_else(|p| p.into_inner());
    if !disabled.iter().any(|(d, _)| *d == ordinal) {
        disabled.push((ordinal, reason.to_string()));
    }
}

/// Why a device was disabled, if one was (the first one's reason).
pub fn disabled_reason() -> Option<String> {
    let disabled = DISABLED.lock().unwrap_or_else(|p| p.into_inner());
    disabled.first().map(|(_, why)| why.clone())
}

/// Why device `ordinal` was disabled, if it was.
pub fn disabled_reason_of(ordinal: usize) -> Option<String> {
    let disabled = DISABLED.lock().unwrap_or_else(|p| p.into_inner());
    disabled
        .iter()
        .find(|(d, _)| *d == ordinal)
        .map(|(_, why)| why.clone())
}

/// Whether libcuda can be loaded here (never panics).
pub fn is_driver_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false)
}

fn open_runtime(ordinal: usize) -> CudaResult<Arc<CudaRuntime>> {
    let tuning = Tuning::from_env();
    switches().open_with(&tuning);
    faults::arm_open(tuning.open_fault);
    if tuning.disable_cuda {
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
    let opened = std::panic::catch_unwind(|| -> CudaResult<CudaRuntime> {
        let opening = std::time::Instant::now();
        let device = Device::open(ordinal as i32)?;
        crate::trace::event(|| {
            format!(
                "device {ordinal}: context made in {:.1} ms",
                opening.elapsed().as_secs_f64() * 1e3
            )
        });
        let onesweep = Onesweep::load(&device, &tuning)?;
        let locality = LocalitySort::load(&device, &tuning)?;
        let segmented = SegmentedSort::load(&device, &tuning)?;
        let encoder = Encoder::load(&device, &tuning)?;
        let gatherer = Gatherer::load(&device, &tuning)?;
        let narrowing = Narrowing::load(&device, &tuning)?;
        // Without its window kernels the device still sorts; windows go to the host.
        let windower = Windower::load(&device, &tuning)
            .map_err(|e| log::warn!("gpusort: CUDA window kernels not loaded ({e})"))
            .ok();
        let refiner = TieRefiner::load(&device, &tuning)?;
        let spreader = Spreader::load(&device, &tuning)?;
        // Without them the device still sorts; pages are encoded on the host.
        let pages = PageEncoder::load(&device, &tuning)
            .map_err(|e| log::warn!("gpusort: CUDA Parquet page kernels not loaded ({e})"))
            .ok();
        crate::trace::event(|| {
            format!(
                "device {ordinal}: kernels loaded, {:.1} ms after opening began",
                opening.elapsed().as_secs_f64() * 1e3
            )
        });
        let staging = Mutex::new(Staging::new(&device)?);
        let (host_regions, idle_permutations) = host_memory(&device, &tuning);
        crate::trace::event(|| {
            format!(
                "device {ordinal}: opened in {:.1} ms",
                opening.elapsed().as_secs_f64() * 1e3
            )
        });
        Ok(CudaRuntime {
            device,
            onesweep,
            locality,
            segmented,
            encoder,
            gatherer,
            narrowing,
            windower,
            refiner,
            spreader,
            pages,
            staging,
            lanes: DeviceLanes::new(tuning.device_lanes),
            host_regions,
            idle_permutations,
            tuning: tuning.clone(),
            runs_in_flight: AtomicUsize::new(0),
        })
    })
    .map_err(|_| {
        CudaError::Unavailable("the CUDA driver panicked while opening the device".into())
    })??;
    log::info!(
        "gpusort: CUDA device {ordinal}: {} (sm_{}, {} SMs, {} GiB)",
        opened.device.name,
        opened.device.arch,
        opened.device.sm_count,
        opened.device.total_memory >> 30
    );
    let opened = Arc::new(opened);
    release_when_idle(Arc::clone(&opened), tuning.device_idle_release);
    Ok(opened)
}

/// The process's idle host memory: gather regions and permutation vectors kept for reuse,
/// shared by every device's runtime, so the process keeps `GPUSORT_HOST_IDLE_BYTES` at
/// most however many devices it sorts on. Made by the first runtime to open, whose context
/// page-locks the regions for every context (`cuMemHostRegister` portable).
fn host_memory(device: &Device, tuning: &Tuning) -> (Arc<HostRegions>, Arc<IdleVectors>) {
    static HOST_MEMORY: OnceLock<(Arc<HostRegions>, Arc<IdleVectors>)> = OnceLock::new();
    HOST_MEMORY
        .get_or_init(|| {
            let idle = idle_limit(tuning.host_idle_bytes);
            let page_locker: Option<Arc<dyn PageLocker>> = Some(Arc::new(device.page_locker()));
            (
                Arc::new(HostRegions::new(idle, page_locker)),
                Arc::new(IdleVectors::new(idle / 4)),
            )
        })
        .clone()
}

/// Starts the thread that gives the device memory pool's kept blocks back to the driver
/// once no lease has held the device for `after`.
fn release_when_idle(runtime: Arc<CudaRuntime>, after: Duration) {
    let started = std::thread::Builder::new()
        .name("gpusort-device-idle".into())
        .spawn(move || loop {
            let lease = runtime.device.budget.wait_idle(after);
            if runtime.is_disabled() {
                return;
            }
            if let Err(error) = runtime.release_idle_memory_leased() {
                log::warn!("gpusort: giving idle device memory back failed: {error}");
            }
            runtime.device.budget.released_idle(lease);
        });
    if let Err(error) = started {
        log::warn!("gpusort: idle device memory is kept (no thread to release it): {error}");
    }
}

impl CudaRuntime {
    /// Whether this device was disabled after a fatal error.
    pub fn is_disabled(&self) -> bool {
        disabled_reason_of(self.device.ordinal).is_some()
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.device.ordinal
    }

    /// Waits until the host memory of gathered windows that went back is page-locked, and
    /// returns the bytes of idle memory that are (for tests and benchmarks).
    pub fn settle_host_memory(&self) -> usize {
        self.host_regions.wait_for_locking();
        self.host_regions.locked_bytes()
    }

    /// Runs `work` with exclusive use of the device and its staging buffers, ahead of
    /// queued sorts and with no limit but the device's memory (benchmarks, tools).
    pub fn with_device<T>(
        &self,
        work: impl FnOnce(&Device, &mut Staging) -> CudaResult<T>,
    ) -> CudaResult<T> {
        self.with_lease(
            LeaseKind::Gather,
            DeviceShare::UNLIMITED,
            |device, staging, _| work(device, staging),
        )
    }

    /// Runs `work` on one of the device's lanes (`memory/lanes.rs`), beside other jobs on
    /// the others and without the device's lease: for work that only reads what the
    /// device's stream finished writing before it started, and frees all it allocates.
    pub(crate) fn on_lane<T>(
        &self,
        work: impl FnOnce(&Device, &mut Staging) -> CudaResult<T>,
    ) -> CudaResult<T> {
        self.lanes.run(&self.device, work)
    }

    /// Runs `work` once the device's budget grants a lease of `kind` for work within
    /// `share` (see `memory/budget.rs`), with the device and its staging buffers.
    pub(crate) fn with_lease<T>(
        &self,
        kind: LeaseKind,
        share: DeviceShare,
        work: impl FnOnce(&Device, &mut Staging, &Lease<'_>) -> CudaResult<T>,
    ) -> CudaResult<T> {
        let lease = self.device.budget.lease(kind, share);
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        self.device.bind()?;
        work(&self.device, &mut staging, &lease)
    }

    /// The bytes `limit` allows on this device (`auto`: [`DEFAULT_DEVICE_MEMORY_FRACTION`]
    /// of its memory).
    pub fn device_memory_limit(&self, limit: DeviceMemoryLimit) -> usize {
        limit.bytes_of(self.device.total_memory, DEFAULT_DEVICE_MEMORY_FRACTION)
    }

    /// Device memory this process's buffers use now and at most.
    pub fn device_memory(&self) -> DeviceMemoryStats {
        self.device.budget.stats()
    }

    /// Starts the peak of [`Self::device_memory`] again from what is in use now.
    pub fn reset_device_memory_peak(&self) {
        self.device.budget.reset_peak();
    }

    /// Gives the blocks the device's memory pool keeps for later sorts back to the driver
    /// now (as the idle thread does after `GPUSORT_DEVICE_IDLE_RELEASE_MS`).
    pub fn release_idle_memory(&self) -> CudaResult<()> {
        let _lease = self
            .device
            .budget
            .lease(LeaseKind::Gather, DeviceShare::UNLIMITED);
        self.release_idle_memory_leased()
    }

    fn release_idle_memory_leased(&self) -> CudaResult<()> {
        let _staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        self.device.release_idle_memory()
    }
}

/// The share of the device's memory a session's sorts may use unless
/// `gpu_sort.device_memory_limit` says otherwise: room is left for the CUDA context, the
/// kernels and other processes.
pub const DEFAULT_DEVICE_MEMORY_FRACTION: f64 = 0.8;

/// Counts a run or a gather of work in fault scope `scope` that the CPU took over.
pub(super) fn count_fallback(scope: FaultScope) {
    if scope == FaultScope::NONE {
        FALLBACKS.fetch_add(1, Ordering::Relaxed);
    } else {
        scope.count_fallback();
    }
}

/// Logs a failed gather on device `ordinal` of work in fault scope `scope` (the host
/// gathers instead, counted as a fallback); a fatal error disables the device for the
/// process.
pub(super) fn note_gather_failure(
    ordinal: usize,
    error: &CudaError,
    rows: usize,
    scope: FaultScope,
) {
    count_fallback(scope);
    note_failure_of(ordinal, "gather", "gathering on the host", error, rows);
}

/// Logs a failed step on device `ordinal` (`what`, handled as `then`); a fatal error
/// disables the device for the process.
pub(super) fn note_failure_of(
    ordinal: usize,
    what: &str,
    then: &str,
    error: &CudaError,
    rows: usize,
) {
    if error.is_fatal() {
        disable_device(ordinal, &error.to_string());
    }
    log::warn!("gpusort: CUDA {what} of {rows} rows on device {ordinal} failed ({error}); {then}");
}
