//! A timeline of the operator's stages for `gpusort bench sql --trace`: when the shared
//! sort's stages ended and when each output partition's gather began and ended.
//!
//! Off unless [`enable`]d: recording then costs one relaxed atomic load per call site.
//! Events are kept in memory until [`take`]n; the bench prints them relative to the
//! start of the query.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

static ENABLED: AtomicBool = AtomicBool::new(false);
static EVENTS: Mutex<Vec<(Instant, String)>> = Mutex::new(Vec::new());

/// Switches recording on or off.
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Records `what()` at the current instant when recording is on.
pub fn event(what: impl FnOnce() -> String) {
    if ENABLED.load(Ordering::Relaxed) {
        let now = Instant::now();
        let text = what();
        EVENTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((now, text));
    }
}

/// The events recorded so far, in time order; the record is emptied.
pub fn take() -> Vec<(Instant, String)> {
    let mut events = std::mem::take(&mut *EVENTS.lock().unwrap_or_else(|e| e.into_inner()));
    events.sort_by_key(|(at, _)| *at);
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_when_enabled() {
        take();
        event(|| "dropped".to_string());
        enable(true);
        event(|| "first".to_string());
        event(|| "second".to_string());
        enable(false);
        event(|| "dropped too".to_string());
        let names: Vec<String> = take().into_iter().map(|(_, name)| name).collect();
        assert_eq!(names, ["first", "second"]);
        assert!(take().is_empty());
    }
}
