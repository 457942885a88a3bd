//! Injected faults, so tests can drive the recovery paths of the CUDA backend on a real
//! device.
//!
//! ```text
//!  FaultScope::new()       a scope of its own; a session joins it with
//!                          `SET gpu_sort.fault_scope = <scope.id()>` (tests only), a backend
//!                          with `CudaBackend::with_faults`
//!  scope.arm(fault)        fires once, in that scope's device work only (on any device;
//!                          `scope.arm_on(ordinal, fault)`: on that device only):
//!     OutOfMemory          the next device allocation
//!     StickyError          the next stream synchronization (as an illegal address would)
//!     LaunchFailure        the next kernel launch (CUDA_ERROR_LAUNCH_FAILED, sticky)
//!     GatherStickyError    the next synchronization inside a payload gather's lease
//!  GPUSORT_INJECT_FAULT=compile | module_load   (read when the runtime opens, once per
//!                          process): kernel compilation or module loading fails
//! ```
//!
//! Faults of one scope never fire in another's work, so tests that inject them can run in
//! parallel with any other test. The device work carries its scope in the lease that holds
//! the device (`memory/budget.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::driver::sys::CUresult;

use crate::cuda::error::{CudaError, CudaResult};

/// A fault to inject into the device work of one [`FaultScope`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next device allocation reports out of memory.
    OutOfMemory,
    /// The next stream synchronization reports `CUDA_ERROR_ILLEGAL_ADDRESS`.
    StickyError,
    /// The next kernel launch reports `CUDA_ERROR_LAUNCH_FAILED`.
    LaunchFailure,
    /// The next stream synchronization within a payload gather reports
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`.
    GatherStickyError,
}

/// The faults one test arms for its own device work (scope 0: none, the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct FaultScope(u64);

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);
/// Armed faults: the scope, the fault, and the device it fires on (`None`: any).
static ARMED: Mutex<Vec<(FaultScope, Fault, Option<usize>)>> = Mutex::new(Vec::new());
/// Fallbacks to the CPU of each scope's work.
static FALLBACKS: Mutex<Vec<(FaultScope, u64)>> = Mutex::new(Vec::new());
/// Whether any fault is armed: the device's hot paths look no further when none is.
static ANY_ARMED: AtomicBool = AtomicBool::new(false);

impl FaultScope {
    /// No faults: the scope of every session unless a test says otherwise.
    pub const NONE: Self = Self(0);

    /// A scope no other has.
    pub fn new() -> Self {
        Self(NEXT_SCOPE.fetch_add(1, Ordering::Relaxed))
    }

    /// The scope of `id` (the value of `gpu_sort.fault_scope`).
    pub fn from_id(id: u64) -> Self {
        Self(id)
    }

    /// Its id, for `SET gpu_sort.fault_scope`.
    pub fn id(self) -> u64 {
        self.0
    }

    /// Arms `fault` in this scope; it fires once, at the next matching site of the
    /// scope's device work.
    pub fn arm(self, fault: Fault) {
        self.arm_where(fault, None);
    }

    /// Arms `fault` in this scope on device `ordinal` only: it fires once, at the next
    /// matching site of the scope's work on that device.
    pub fn arm_on(self, ordinal: usize, fault: Fault) {
        self.arm_where(fault, Some(ordinal));
    }

    fn arm_where(self, fault: Fault, device: Option<usize>) {
        if self.0 == 0 {
            return;
        }
        let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        armed.push((self, fault, device));
        ANY_ARMED.store(true, Ordering::SeqCst);
    }

    /// Whether `fault` is still armed (it has not fired yet).
    pub fn is_armed(self, fault: Fault) -> bool {
        let armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        armed.iter().any(|&(s, f, _)| (s, f) == (self, fault))
    }

    /// Runs and gathers of this scope's work that the CPU took over.
    pub fn fallbacks(self) -> u64 {
        let counts = FALLBACKS.lock().unwrap_or_else(|p| p.into_inner());
        counts
            .iter()
            .find(|(s, _)| *s == self)
            .map_or(0, |(_, n)| *n)
    }

    /// Counts a fallback of this scope's work.
    pub(crate) fn count_fallback(self) {
        let mut counts = FALLBACKS.lock().unwrap_or_else(|p| p.into_inner());
        match counts.iter_mut().find(|(s, _)| *s == self) {
            Some((_, n)) => *n += 1,
            None => counts.push((self, 1)),
        }
    }

    /// Takes `fault` if it is armed in this scope for device `ordinal` (or any device).
    fn take(self, fault: Fault, ordinal: usize) -> bool {
        if self.0 == 0 || !ANY_ARMED.load(Ordering::Relaxed) {
            return false;
        }
        let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        let Some(at) = armed
            .iter()
            .position(|&(s, f, on)| (s, f) == (self, fault) && on.is_none_or(|d| d == ordinal))
        else {
            return false;
        };
        armed.remove(at);
        ANY_ARMED.store(!armed.is_empty(), Ordering::SeqCst);
        true
    }
}

/// Whether any scope armed a fault (the device looks up the scope of its work only then).
pub(crate) fn any_armed() -> bool {
    ANY_ARMED.load(Ordering::Relaxed)
}

/// Where device work runs, for the faults armed in it: the work's scope, whether it is a
/// payload gather's, and the device's ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FaultSite {
    /// The scope of the work holding the device.
    pub scope: FaultScope,
    /// Whether that work is a payload gather.
    pub gathering: bool,
    /// The device's ordinal.
    pub ordinal: usize,
}

/// Fails an allocation of `bytes` for `what` if the work at `site` armed an out-of-memory
/// fault.
pub(crate) fn take_out_of_memory(
    site: FaultSite,
    bytes: usize,
    what: &'static str,
) -> CudaResult<()> {
    if site.scope.take(Fault::OutOfMemory, site.ordinal) {
        return Err(CudaError::OutOfMemory { bytes, what });
    }
    Ok(())
}

/// Fails `call` with a sticky error if the work at `site` armed one.
pub(crate) fn take_sticky(site: FaultSite, call: &'static str) -> CudaResult<()> {
    let FaultSite { scope, ordinal, .. } = site;
    if scope.take(Fault::StickyError, ordinal)
        || (site.gathering && scope.take(Fault::GatherStickyError, ordinal))
    {
        return Err(CudaError::Driver {
            call,
            code: CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        });
    }
    Ok(())
}

/// Whether the work at `site` armed a launch failure (then taken).
pub(crate) fn take_launch_failure(site: FaultSite) -> bool {
    site.scope.take(Fault::LaunchFailure, site.ordinal)
}

/// A fault injected when the runtime opens (`GPUSORT_INJECT_FAULT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenFault {
    /// NVRTC fails to compile the first kernel file compiled.
    Compile,
    /// The driver fails to load the first module loaded.
    ModuleLoad,
}

impl OpenFault {
    /// The fault named by `GPUSORT_INJECT_FAULT`'s value.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "compile" => Some(Self::Compile),
            "module_load" => Some(Self::ModuleLoad),
            _ => None,
        }
    }
}

static OPEN_FAULT: Mutex<Option<OpenFault>> = Mutex::new(None);

/// Arms `fault` for the runtime's opening.
pub(crate) fn arm_open(fault: Option<OpenFault>) {
    *OPEN_FAULT.lock().unwrap_or_else(|p| p.into_inner()) = fault;
}

/// Takes the opening fault `fault` if it is armed.
pub(crate) fn take_open(fault: OpenFault) -> bool {
    let mut armed = OPEN_FAULT.lock().unwrap_or_else(|p| p.into_inner());
    if *armed == Some(fault) {
        *armed = None;
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_fires_once_and_only_in_its_scope() {
        let (mine, other) = (FaultScope::new(), FaultScope::new());
        let site = |scope, gathering| FaultSite {
            scope,
            gathering,
            ordinal: 0,
        };
        mine.arm(Fault::OutOfMemory);
        assert!(take_out_of_memory(site(other, false), 8, "x").is_ok());
        assert!(take_out_of_memory(site(FaultScope::default(), false), 8, "x").is_ok());
        assert!(take_out_of_memory(site(mine, false), 8, "x").is_err());
        assert!(take_out_of_memory(site(mine, false), 8, "x").is_ok());
        mine.arm(Fault::GatherStickyError);
        assert!(
            take_sticky(site(mine, false), "sync").is_ok(),
            "not in a gather"
        );
        assert!(take_sticky(site(mine, true), "sync")
            .unwrap_err()
            .is_fatal());
        assert!(!mine.is_armed(Fault::GatherStickyError));
        FaultScope::default().arm(Fault::LaunchFailure);
        assert!(!take_launch_failure(site(FaultScope::default(), false)));
    }

    #[test]
    fn a_fault_armed_on_a_device_fires_there_only() {
        let scope = FaultScope::new();
        let on = |ordinal| FaultSite {
            scope,
            gathering: false,
            ordinal,
        };
        scope.arm_on(1, Fault::LaunchFailure);
        assert!(!take_launch_failure(on(0)), "device 0 is not the one named");
        assert!(scope.is_armed(Fault::LaunchFailure));
        assert!(take_launch_failure(on(1)));
        assert!(!take_launch_failure(on(1)), "it fires once");
    }

    #[test]
    fn opening_faults_by_name() {
        assert_eq!(OpenFault::parse("compile"), Some(OpenFault::Compile));
        assert_eq!(OpenFault::parse("module_load"), Some(OpenFault::ModuleLoad));
        assert_eq!(OpenFault::parse("oom"), None);
    }
}
