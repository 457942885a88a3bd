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

/// Time between the steps of one piece of work, for one event that says where it went:
/// [`Laps::lap`] after each step, [`Laps::summary`] at the end.
#[derive(Debug)]
pub struct Laps {
    last: Instant,
    laps: Vec<(&'static str, f64)>,
}

impl Laps {
    /// Starts timing now.
    pub fn start() -> Self {
        Self {
            last: Instant::now(),
            laps: Vec::new(),
        }
    }

    /// Ends step `name`: the time since the last step ended (or the start).
    pub fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.laps
            .push((name, (now - self.last).as_secs_f64() * 1e3));
        self.last = now;
    }

    /// `name 1.2 ms, name 0.3 ms`, the steps in order.
    pub fn summary(&self) -> String {
        self.laps
            .iter()
            .map(|(name, ms)| format!("{name} {ms:.1} ms"))
            .collect::<Vec<_>>()
            .join(", ")
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

    #[test]
    fn laps_name_their_steps_in_order() {
        let mut laps = Laps::start();
        laps.lap("first");
        laps.lap("second");
        let summary = laps.summary();
        assert!(summary.starts_with("first "), "{summary}");
        assert!(summary.contains(" ms, second "), "{summary}");
        assert!(summary.ends_with(" ms"), "{summary}");
    }
}
