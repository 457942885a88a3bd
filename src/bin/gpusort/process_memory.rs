//! Process-wide memory settings `gpusort sort` makes before any thread starts, so that its
//! resident memory stays near `--memory-limit`.
//!
//! - **Allocator arenas.** glibc's malloc gives threads arenas of their own (up to eight per
//!   core), and memory freed in one arena is kept there. A sort's memory moves between
//!   threads (the scan decodes batches on one, the sort frees them on another): with 16
//!   cores the arenas kept 0.4 to 1 GiB beyond a 1 GiB limit (docs/performance.md). Fewer
//!   arenas cost speed (in memory, 2 arenas instead of 128 took 6.5 to 7.3 s where 5.5 to
//!   5.8 s did), so the command gives each arena [`BYTES_PER_ARENA`] of the limit: 2 under
//!   1 GiB, glibc's own 8 per core under half of a large host's RAM. `MALLOC_ARENA_MAX`, when
//!   set, is left alone.
//! - **Idle page-locked regions** of the device gather (`GPUSORT_HOST_IDLE_BYTES`, by
//!   default up to 4 GiB kept for reuse): [`memory::idle_regions_bytes`] of the limit
//!   unless the variable is set.

use gpusort::pipeline::memory;

/// Each malloc arena is given this much of the memory limit.
pub const BYTES_PER_ARENA: usize = 512 << 20;

/// Arenas for a job under `limit` on `cores` cores: one per [`BYTES_PER_ARENA`], between 2
/// and glibc's own default of 8 per core.
pub fn malloc_arenas(limit: usize, cores: usize) -> usize {
    (limit / BYTES_PER_ARENA).clamp(2, 8 * cores.max(1))
}

/// Applies both settings for a job under `memory_limit`. Call it before any thread starts:
/// it sets an environment variable.
pub fn bound_for_limit(memory_limit: Option<usize>) {
    let Some(limit) = memory_limit else {
        return;
    };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let arenas = i32::try_from(malloc_arenas(limit, cores)).unwrap_or(i32::MAX);
        // SAFETY: mallopt only sets an allocator parameter; no other thread runs yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
    if std::env::var_os("GPUSORT_HOST_IDLE_BYTES").is_none() {
        std::env::set_var(
            "GPUSORT_HOST_IDLE_BYTES",
            memory::idle_regions_bytes(limit).to_string(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arenas_follow_the_limit() {
        assert_eq!(malloc_arenas(1 << 30, 16), 2);
        assert_eq!(malloc_arenas(4 << 30, 16), 8);
        assert_eq!(malloc_arenas(62 << 30, 16), 124);
        assert_eq!(malloc_arenas(1 << 40, 16), 128);
    }
}
