//! SIGINT and SIGTERM stop a running job cleanly: the job's future is dropped, which
//! cancels its sort, removes its temporary output and, once the sort's blocking jobs have
//! stopped, its spill files (the session's temporary directory goes with it); `main` then
//! waits for those jobs and exits with 128 + the signal's number. A second signal ends the
//! process at once.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only an atomic store and `signal`, both safe in a signal handler. A second signal of
    // the same kind ends the process at once, as without the handler.
    RECEIVED.store(signal, Ordering::SeqCst);
    // SAFETY: restores the default action; async-signal-safe.
    unsafe { libc::signal(signal, libc::SIG_DFL) };
}

/// Routes SIGINT and SIGTERM to [`received`] instead of ending the process at once.
pub fn install() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(signal, handler) };
    }
}

/// Resolves with the number of the first SIGINT or SIGTERM received.
pub async fn received() -> i32 {
    loop {
        let signal = RECEIVED.load(Ordering::SeqCst);
        if signal != 0 {
            return signal;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The exit code of a process ended by `signal`, as a shell reports it.
pub fn exit_code(signal: i32) -> i32 {
    128 + signal
}
