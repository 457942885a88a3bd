//! The devices of one sort spread over several of them: each held (its lease and staging
//! buffers) for the whole sort, and the sort's steps run on all of them at once, one
//! thread per device.
//!
//! Devices are taken in the order given (ascending ordinals, from the backend), so two
//! spread sorts never wait for each other's devices in a cycle.

use std::sync::MutexGuard;

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::budget::{DeviceShare, Lease, LeaseKind};
use crate::cuda::memory::transfer::Staging;
use crate::cuda::runtime::CudaRuntime;

/// One device held for a spread sort.
pub(super) struct Held<'a> {
    /// The device's runtime.
    pub rt: &'a CudaRuntime,
    /// The lease: the device is this sort's until it drops.
    lease: Lease<'a>,
    staging: MutexGuard<'a, Staging>,
}

impl Held<'_> {
    /// Device memory free within the lease's limit when it was granted.
    pub(super) fn available(&self) -> usize {
        self.lease.available
    }
}

/// Takes each of `runtimes` in order, as `kind` and `share` say.
pub(super) fn hold_all<'a>(
    runtimes: &[&'a CudaRuntime],
    kind: LeaseKind,
    share: DeviceShare,
) -> Vec<Held<'a>> {
    runtimes
        .iter()
        .map(|&rt| {
            let lease = rt.device.budget.lease(kind, share);
            let staging = rt.staging.lock().unwrap_or_else(|p| p.into_inner());
            Held { rt, lease, staging }
        })
        .collect()
}

/// One device's view in a step: its runtime and staging buffers, and its part of the
/// step's state.
pub(super) struct Step<'s, S> {
    /// The device's runtime.
    pub rt: &'s CudaRuntime,
    /// Its staging buffers.
    pub staging: &'s mut Staging,
    /// Its state.
    pub state: &'s mut S,
}

/// A spread sort's failure, and the device it happened on (`None`: on the host).
#[derive(Debug)]
pub(crate) struct Failure {
    /// The device whose step failed.
    pub ordinal: Option<usize>,
    /// What failed.
    pub error: CudaError,
}

impl From<CudaError> for Failure {
    fn from(error: CudaError) -> Self {
        Self {
            ordinal: None,
            error,
        }
    }
}

/// Runs `work(i, step)` for every device `i` at once, each on a thread of its own bound to
/// the device, with `states[i]`; the results in device order, or the first failure.
pub(super) fn on_each<S, T, F>(
    held: &mut [Held<'_>],
    states: &mut [S],
    work: F,
) -> Result<Vec<T>, Failure>
where
    S: Send,
    T: Send,
    F: Fn(usize, Step<'_, S>) -> CudaResult<T> + Sync,
{
    on_each_telling(held, states, &|| {}, work)
}

/// [`on_each`], calling `failed` on the thread of a device that could not be bound or whose
/// work failed, as soon as it did (for work that waits on the other devices).
pub(super) fn on_each_telling<S, T, F>(
    held: &mut [Held<'_>],
    states: &mut [S],
    failed: &(dyn Fn() + Sync),
    work: F,
) -> Result<Vec<T>, Failure>
where
    S: Send,
    T: Send,
    F: Fn(usize, Step<'_, S>) -> CudaResult<T> + Sync,
{
    assert_eq!(held.len(), states.len(), "one state per held device");
    let work = &work;
    std::thread::scope(|scope| {
        let threads: Vec<_> = held
            .iter_mut()
            .zip(states.iter_mut())
            .enumerate()
            .map(|(i, (h, state))| {
                let rt = h.rt;
                let staging: &mut Staging = &mut h.staging;
                let started = std::thread::Builder::new().spawn_scoped(scope, move || {
                    let step = Step { rt, staging, state };
                    let done = rt.device.bind().and_then(|()| work(i, step));
                    if done.is_err() {
                        failed();
                    }
                    done.map_err(|error| Failure {
                        ordinal: Some(rt.ordinal()),
                        error,
                    })
                });
                if started.is_err() {
                    // The others may wait for this device's work: told it will not come.
                    failed();
                }
                started.map_err(|e| Failure {
                    ordinal: Some(rt.ordinal()),
                    error: CudaError::Inconsistent(format!(
                        "a device thread of a spread sort could not start: {e}"
                    )),
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t?.join().unwrap_or_else(|_| {
                    Err(Failure::from(CudaError::Inconsistent(
                        "a device thread of a spread sort panicked".to_string(),
                    )))
                })
            })
            .collect()
    })
}
