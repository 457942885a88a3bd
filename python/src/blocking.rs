//! Running async work from Python: one tokio runtime for the process, and a wait that
//! releases the GIL, keeps Python's signal handlers live (Ctrl-C) and cancels the work when
//! Python raises.
//!
//! ```text
//!  Python thread                          runtime worker
//!  wait_for(future) ── spawn ───────────▶ future.await ── result ──▶ channel
//!    loop: on_tick (GIL held)                      ▲
//!          check_signals  ── KeyboardInterrupt ──▶ abort, wait until dropped, raise
//!          recv_timeout(TICK) with the GIL released
//! ```
//!
//! A cancelled future is dropped on the runtime before the exception reaches Python, so
//! whatever it held (a sort's memory, a job's temporary files) is gone by then.

use std::future::Future;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::to_py_err;

/// How often a waiting Python thread looks at its signals and calls its tick.
pub const TICK: Duration = Duration::from_millis(100);

/// The process's runtime: a worker thread per core, as `gpusort sql` and `gpusort sort` use.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("gpusort-python")
            .build()
            .expect("a tokio runtime")
    })
}

/// Runs `future` to its end with the GIL released; Ctrl-C (or any signal handler that
/// raises) cancels it and raises.
pub fn wait_for<T, F>(py: Python<'_>, future: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    wait_with_ticks(py, future, |_| Ok(()))
}

/// [`wait_for`], calling `on_tick` with the GIL held before each wait of [`TICK`]; an error
/// from it cancels the work too.
pub fn wait_with_ticks<T, F>(
    py: Python<'_>,
    future: F,
    mut on_tick: impl FnMut(Python<'_>) -> PyResult<()>,
) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let (sender, receiver) = channel();
    // Shared with the GIL-free closure below, which needs a `Sync` reference.
    let receiver = Mutex::new(receiver);
    let task = runtime().spawn(async move {
        let _ = sender.send(future.await);
    });
    loop {
        if let Err(raised) = on_tick(py).and_then(|()| py.check_signals()) {
            task.abort();
            // The future is dropped by the abort; wait for that so its resources are free.
            py.detach(|| {
                let _ = runtime().block_on(task);
            });
            return Err(raised);
        }
        match py.detach(|| receiver.lock().expect("one waiter").recv_timeout(TICK)) {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => {
                // The task ended without sending: it panicked.
                let ended = py.detach(|| runtime().block_on(task));
                let why = ended
                    .err()
                    .map_or("no answer".to_string(), |e| e.to_string());
                return Err(to_py_err(format!(
                    "gpusort: the query's task failed: {why}"
                )));
            }
        }
    }
}
