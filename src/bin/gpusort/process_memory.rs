//! Process-wide memory settings `gpusort sort` makes before any thread starts, so that its
//! resident memory stays near `--memory-limit`.
//!
//! - **The allocator** is mimalloc (`main.rs`), not glibc's malloc: glibc gave every thread
//!   an arena of its own and kept freed memory in the arena that freed it (0.4 to 1 GiB past
//!   a 1 GiB limit on 16 cores, until the command bounded the arenas), and it handed large
//!   buffers back to the kernel on every free, so that each new one was faulted in again
//!   (docs/performance.md, session 28). mimalloc returns freed pages to the kernel after a
//!   short delay instead, from whichever thread frees them.
//! - **Idle page-locked regions** of the device gather (`GPUSORT_HOST_IDLE_BYTES`, by
//!   default up to 4 GiB kept for reuse): [`memory::idle_regions_bytes`] of the limit
//!   unless the variable is set.

use gpusort::pipeline::memory;

/// Applies the setting for a job under `memory_limit`. Call it before any thread starts:
/// it sets an environment variable.
pub fn bound_for_limit(memory_limit: Option<usize>) {
    let Some(limit) = memory_limit else {
        return;
    };
    if std::env::var_os("GPUSORT_HOST_IDLE_BYTES").is_none() {
        std::env::set_var(
            "GPUSORT_HOST_IDLE_BYTES",
            memory::idle_regions_bytes(limit).to_string(),
        );
    }
}
