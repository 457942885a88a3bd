//! Process-wide memory settings `gpusort sort` makes before any thread starts, so that its
//! resident memory stays near `--memory-limit`.
//!
//! - **The allocator** is mimalloc (`main.rs`), not glibc's malloc: glibc gave every thread
//!   an arena of its own and kept freed memory in the arena that freed it (0.4 to 1 GiB past
//!   a 1 GiB limit on 16 cores, until the command bounded the arenas), and it handed large
//!   buffers back to the kernel on every free, so that each new one was faulted in again
//!   (docs/performance.md, session 28). mimalloc returns freed pages to the kernel after a
//!   short delay instead, from whichever thread frees them.
//! - **Under a limit below 8 GiB** ([`PROMPT_PURGE_LIMIT`]) mimalloc maps no transparent huge
//!   pages and purges freed memory sooner. By default it backs its arenas with 2 MiB pages
//!   (the untouched rest of every huge page a job touches stays resident) and keeps freed
//!   pages for a second (`purge_delay`, 1000 ms in mimalloc 3): a few hundred MiB whatever
//!   the limit, and more where a job frees large buffers every few hundred milliseconds
//!   (SF10 by key range under 4 GiB: 1.2 GiB past the limit + 20 %). Peak RSS
//!   of `lineitem` on the CPU backend, by purge delay (docs/performance.md, session 31):
//!
//!   | input, limit | defaults | 250 ms | 10 ms | at once |
//!   | --- | --- | --- | --- | --- |
//!   | SF1, 400 MiB | 745 to 1 093 MiB | | 535, 586 MiB | 392 to 442 MiB |
//!   | SF1, 1 GiB | 1 194 to 1 374 MiB | 976, 1 084 MiB | 967, 969 MiB | 855 to 879 MiB |
//!   | SF4, 1 GiB | 1 792 MiB, 25 s | 1 228, 1 264 MiB | 999, 1 022 MiB, 31 s | 876, 924 MiB, 40 s |
//!   | SF4, 2 GiB | 2 471 MiB | 1 947, 1 980 MiB, 25 s | | |
//!
//!   (no huge pages in the last three columns; SF4 with the pool's floor as well). SF10
//!   on the CUDA backend under 4 GiB (2026-11-29): 5.2 to 5.3 GiB with the defaults, 4.0
//!   to 4.6 GiB with 250 ms, 3.8 GiB with 100 ms, in the same time. So freed memory is
//!   purged at once under 1 GiB, after 10 ms under 2 GiB and after 100 ms up to 8 GiB
//!   ([`purge_delay_ms`]); larger limits keep the defaults. The default limit (half the
//!   memory) is a limit like any other: on a host of less than 16 GiB it purges sooner.
//! - **Idle page-locked regions** of the device gather (`GPUSORT_HOST_IDLE_BYTES`, by
//!   default up to 4 GiB kept for reuse): [`memory::idle_regions_bytes`] of the limit
//!   unless the variable is set.

use std::ffi::c_long;

use gpusort::pipeline::memory;
use libmimalloc_sys::{mi_option_get, mi_option_set};

/// Applies the settings for a job under `memory_limit`, `given` on the command line (or
/// else the default limit). Call it before any other thread starts: it sets an environment
/// variable and options of the allocator.
pub fn bound_for_limit(memory_limit: Option<usize>, given: bool) {
    let Some(limit) = memory_limit else {
        return;
    };
    if given && limit < memory::SMALLEST_HELD_LIMIT {
        log::warn!(
            "a memory limit of {} MiB is below the {} MiB that jobs were seen to keep their \
             peak within (plus 20 %): the job runs, but may hold more than that",
            limit >> 20,
            memory::SMALLEST_HELD_LIMIT >> 20
        );
    }
    if limit < PROMPT_PURGE_LIMIT {
        purge_sooner_without_huge_pages(purge_delay_ms(limit));
    }
    if std::env::var_os("GPUSORT_TRACE").is_some() {
        // SAFETY: reads options.
        let (delay, thp) = unsafe { (mi_option_get(PURGE_DELAY), mi_option_get(ALLOW_THP)) };
        eprintln!("process: mimalloc purge_delay {delay} ms, allow_thp {thp}");
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
/// checked against that header: the build stops here when the crate's count of options
/// changes, and the unit test below checks the two options' defaults.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const ALLOW_THP: libmimalloc_sys::mi_option_t = 43;
const _: () = assert!(libmimalloc_sys::_mi_option_last == 47);

/// Under limits below this, mimalloc purges sooner than its default and maps no huge
/// pages. At 4 GiB, with mimalloc's defaults, SF10 `lineitem` peaked at 5.2 to 5.3 GiB
/// both merged and by key range (H200, 2026-11-29): a job that frees a gathered group of
/// rows every few hundred milliseconds keeps several of them for the second mimalloc
/// waits. There, 250 ms peaked at 4.0 to 4.6 GiB by key range, and 100 ms at 3.8 GiB in
/// the same time (docs/performance.md, 2026-11-29).
pub const PROMPT_PURGE_LIMIT: usize = 8 << 30;

/// How long mimalloc may keep freed memory under a limit `limit` below
/// [`PROMPT_PURGE_LIMIT`]: not at all under 1 GiB, 10 ms under 2 GiB, 100 ms from there
/// (SF4 under 2 GiB peaked within the limit at 250 ms, SF10 under 4 GiB only at 100 ms).
pub fn purge_delay_ms(limit: usize) -> c_long {
    if limit < 1 << 30 {
        0
    } else if limit < 2 << 30 {
        10
    } else {
        100
    }
}

/// Has mimalloc give freed memory back to the kernel after `delay_ms`, and stops
/// transparent huge pages for this process. What the environment sets for either
/// (`MIMALLOC_PURGE_DELAY` or its old name `MIMALLOC_RESET_DELAY`, `MIMALLOC_ALLOW_THP`,
/// in any case, as mimalloc reads them) still wins.
fn purge_sooner_without_huge_pages(delay_ms: c_long) {
    if !mimalloc_variable_set(&["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]) {
        // SAFETY: a plain write of an option mimalloc reads at each purge; no other thread
        // runs yet (see `bound_for_limit`).
        unsafe { mi_option_set(PURGE_DELAY, delay_ms) };
    }
    if !mimalloc_variable_set(&["MIMALLOC_ALLOW_THP"]) {
        // mimalloc asks for huge pages on each new mapping unless this option is off; the
        // kernel (THP "always") would still give them, also to the arena mimalloc mapped
        // before `main`, unless the process opts out (a flag its children would inherit;
        // `gpusort sort` starts none).
        // SAFETY: as above; `prctl(PR_SET_THP_DISABLE)` changes no memory.
        unsafe {
            mi_option_set(ALLOW_THP, 0);
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

/// Whether the environment sets one of mimalloc's variables `names` (compared as mimalloc
/// does, without regard to case).
fn mimalloc_variable_set(names: &[&str]) -> bool {
    std::env::vars_os().any(|(key, _)| {
        key.to_str()
            .is_some_and(|key| names.iter().any(|name| key.eq_ignore_ascii_case(name)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads only: the options are set by the command (`tests/pipeline.rs` checks them
    /// through `GPUSORT_TRACE`), not in this test binary, whose other tests share the
    /// process.
    #[test]
    fn small_limits_purge_sooner_and_the_option_indices_name_the_options_meant() {
        assert_eq!(purge_delay_ms(400 << 20), 0);
        assert_eq!(purge_delay_ms((1 << 30) - 1), 0);
        assert_eq!(purge_delay_ms(1 << 30), 10);
        assert_eq!(purge_delay_ms((2 << 30) - 1), 10);
        assert_eq!(purge_delay_ms(2 << 30), 100);
        assert_eq!(purge_delay_ms((4 << 30) - 1), 100);
        assert_eq!(purge_delay_ms(4 << 30), 100);
        assert_eq!(purge_delay_ms((8 << 30) - 1), 100);
        if mimalloc_variable_set(&[
            "MIMALLOC_PURGE_DELAY",
            "MIMALLOC_RESET_DELAY",
            "MIMALLOC_ALLOW_THP",
        ]) {
            return;
        }
        // SAFETY: reads options.
        let defaults = unsafe { (mi_option_get(PURGE_DELAY), mi_option_get(ALLOW_THP)) };
        // mimalloc 3's defaults of `purge_delay` and `allow_thp`.
        assert_eq!(defaults, (1000, 1));
    }
}
