//! Process-wide memory settings `gpusort sort` makes before any thread starts, so that its
//! resident memory stays near `--memory-limit`.
//!
//! - **The allocator** is mimalloc (`main.rs`), not glibc's malloc: glibc gave every thread
//!   an arena of its own and kept freed memory in the arena that freed it (0.4 to 1 GiB past
//!   a 1 GiB limit on 16 cores, until the command bounded the arenas), and it handed large
//!   buffers back to the kernel on every free, so that each new one was faulted in again
//!   (docs/performance.md, session 28). mimalloc returns freed pages to the kernel after a
//!   short delay instead, from whichever thread frees them.
//! - **Under a small limit** ([`memory::SMALL_LIMIT`]) mimalloc maps no transparent huge
//!   pages and purges freed memory sooner. By default it backs its arenas with 2 MiB pages
//!   (the untouched rest of every huge page a job touches stays resident) and keeps freed
//!   pages for a second (`purge_delay`, 1000 ms in mimalloc 3): a few hundred MiB whatever
//!   the limit, inside the 20 % over a limit of 4 GiB or more but not over 1 GiB. SF1
//!   `lineitem` on the CPU backend (docs/performance.md, session 31), peak RSS:
//!
//!   | limit | defaults | no huge pages, purged after 250 ms | no huge pages, purged at once |
//!   | --- | --- | --- | --- |
//!   | 400 MiB | 787 to 942 MiB | | 408 to 442 MiB (20 % slower) |
//!   | 1 GiB | 1 264 to 1 335 MiB | 976 to 1 084 MiB (no slower) | 855 to 862 MiB (35 % slower) |
//!
//!   So under 1 GiB freed memory is purged at once ([`purge_delay_ms`]), and from 1 GiB
//!   after 250 ms; large limits keep the defaults.
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
    if limit < memory::SMALLEST_HELD_LIMIT {
        log::warn!(
            "a memory limit of {} MiB is below the {} MiB that jobs were seen to keep their \
             peak within (plus 20 %): the job runs, but may hold more than that",
            limit >> 20,
            memory::SMALLEST_HELD_LIMIT >> 20
        );
    }
    if memory::is_small_limit(limit) {
        keep_freed_memory_briefly(purge_delay_ms(limit));
    }
    if std::env::var_os("GPUSORT_HOST_IDLE_BYTES").is_none() {
        std::env::set_var(
            "GPUSORT_HOST_IDLE_BYTES",
            memory::idle_regions_bytes(limit).to_string(),
        );
    }
}

/// `mi_option_purge_delay` and `mi_option_allow_thp` of mimalloc 3's `mi_option_e`
/// (`include/mimalloc.h`), which the `-sys` crate does not name. A new mimalloc must be
/// checked against that header: the build stops here when its option count changes.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const ALLOW_THP: libmimalloc_sys::mi_option_t = 43;
const _: () = assert!(libmimalloc_sys::_mi_option_last == 47);

/// How long mimalloc may keep freed memory under a [small](memory::SMALL_LIMIT) limit
/// `limit`: not at all under 2 GiB, 250 ms from there.
pub fn purge_delay_ms(limit: usize) -> i64 {
    if limit < 2 << 30 {
        0
    } else {
        250
    }
}

/// Has mimalloc give freed memory back to the kernel after `delay_ms`, and stops
/// transparent huge pages for this process. A `MIMALLOC_PURGE_DELAY` or
/// `MIMALLOC_ALLOW_THP` set in the environment still wins (mimalloc read them when the
/// process started).
fn keep_freed_memory_briefly(delay_ms: i64) {
    use libmimalloc_sys::mi_option_set;
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an option mimalloc reads at each purge; any thread may call it.
        unsafe { mi_option_set(PURGE_DELAY, delay_ms as _) };
    }
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // mimalloc asks for huge pages on each new mapping unless this option is off; the
        // kernel (THP "always") would still give them, unless the process opts out.
        // SAFETY: as above; `prctl(PR_SET_THP_DISABLE)` changes only this process.
        unsafe {
            mi_option_set(ALLOW_THP, 0);
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libmimalloc_sys::mi_option_get;

    #[test]
    fn a_small_limit_purges_sooner_without_huge_pages() {
        assert_eq!(purge_delay_ms(400 << 20), 0);
        assert_eq!(purge_delay_ms((2 << 30) - 1), 0);
        assert_eq!(purge_delay_ms(2 << 30), 250);
        assert_eq!(purge_delay_ms((4 << 30) - 1), 250);
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some()
            || std::env::var_os("MIMALLOC_ALLOW_THP").is_some()
        {
            return;
        }
        // SAFETY: reads options.
        let defaults = unsafe { (mi_option_get(PURGE_DELAY), mi_option_get(ALLOW_THP)) };
        // mimalloc 3's defaults: the indices name the options meant.
        assert_eq!(defaults, (1000, 1));
        // A large limit keeps them.
        bound_for_limit(Some(4 << 30));
        // SAFETY: as above.
        let kept = unsafe { (mi_option_get(PURGE_DELAY), mi_option_get(ALLOW_THP)) };
        assert_eq!(kept, defaults);
        bound_for_limit(Some(512 << 20));
        // SAFETY: as above.
        let set = unsafe { (mi_option_get(PURGE_DELAY), mi_option_get(ALLOW_THP)) };
        assert_eq!(set, (0, 0));
        #[cfg(target_os = "linux")]
        // SAFETY: reads this process's flag.
        assert_eq!(
            unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) },
            1
        );
    }
}
