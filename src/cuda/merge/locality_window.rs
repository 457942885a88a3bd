//! The windowed locality sort: one kernel for keys that are each within a halo of rows of
//! their sorted place, proved exact afterwards (`kernels/locality_sort.cu`).
//!
//! ```text
//!  halo: the least power of two at which the probe (locality_probe.rs) found no key above
//!        the key `halo` rows on; none → decline
//!  locality_window_<k>     block b owns rows [b·M, (b+1)·M), M = MERGE_TILE − 2·halo; from
//!                          its tile of rows around them it sorts the chunks of 2·halo rows,
//!                          merges each chunk's upper half with the next one's lower half,
//!                          and writes the row ids of its owned places; it counts the owned
//!                          places whose (key, id) does not strictly increase, and writes the
//!                          (key, id) of its first and last place
//!  locality_window_check   boundaries where (key, id) does not strictly increase (4 bytes
//!                          back, with the blocks' count); none → the permutation is the
//!                          stable sort; some → decline (a halo below 128 first
//!                          retries at 128, in case the probe's sample missed a key)
//! ```
//!
//! The two phases sort every input in which no row sorts after a row `halo` or more places
//! further on (the kernel's comment has the argument); other input is caught by the checks.
//! Compared with the block sort + radius check + placement of the merge sort, the keys are
//! read once, no key is written, and no second pass reads them again; a chunk of 2·halo rows
//! is sorted instead of the whole tile, so the merge levels above it are saved. The cost is
//! the halo's share of each tile sorted twice. Declining costs the attempt; the keys are left
//! as they were, so the merge sort then runs on them.

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::merge::locality_probe::LocalityProbe;
use crate::cuda::merge::{check_rows, MergeKeys};
use crate::cuda::module::{arg, launch, Kernel, Module};
use crate::cuda::tuning::{
    Tuning, WindowHalo, LOCALITY_WINDOW_HALO, MERGE_ITEMS, MERGE_THREADS, MERGE_TILE,
};

/// The halos a window can have: powers of two up to a quarter of a tile (chunks of two
/// halos are runs of the tile sort), from 16 rows: a window then owns a multiple of 32 rows,
/// so its loads and stores start on 128-byte lines.
pub(crate) const WINDOW_HALOS: std::ops::RangeInclusive<u32> = 16..=(MERGE_TILE / 4);
const _: () = assert!(2 * *WINDOW_HALOS.start() >= MERGE_ITEMS);

/// The halo choice of the tuning, with a fixed halo rounded up to one a window can have.
fn rounded_halo(choice: WindowHalo) -> WindowHalo {
    match choice {
        WindowHalo::Fixed(rows) => WindowHalo::Fixed(window_halo_at_least(rows.max(1))),
        other => other,
    }
}

/// The smallest halo in [`WINDOW_HALOS`] of at least `rows` rows (`rows` > 0).
pub(crate) fn window_halo_at_least(rows: u32) -> u32 {
    rows.next_power_of_two()
        .clamp(*WINDOW_HALOS.start(), *WINDOW_HALOS.end())
}

/// The windowed sort's kernels (of `kernels/locality_sort.cu`, loaded by `LocalitySort`)
/// and how it picks its halo.
#[derive(Debug, Clone, Copy)]
pub struct WindowSort {
    /// `locality_window_u32` and `_u64`.
    window: [Kernel; 2],
    /// `locality_window_check_u32` and `_u64`.
    check: [Kernel; 2],
    /// The halo choice of the tuning, a fixed one rounded to one a window can have.
    choice: WindowHalo,
}

impl WindowSort {
    /// The windowed sort's kernels of the locality sort's `module`.
    pub fn load(module: &Module, tuning: &Tuning) -> CudaResult<Self> {
        Ok(Self {
            window: [
                module.kernel("locality_window_u32")?,
                module.kernel("locality_window_u64")?,
            ],
            check: [
                module.kernel("locality_window_check_u32")?,
                module.kernel("locality_window_check_u64")?,
            ],
            choice: rounded_halo(tuning.window_halo),
        })
    }

    /// The stable sort of `n` keys by the windowed sort, with the halo that the tuning's
    /// choice and `probe` give, when its check proves the result; else `None` (the keys are
    /// untouched). A halo below [`LOCALITY_WINDOW_HALO`] that declines is retried at that
    /// halo when the probe found it clean: the sample can miss a rare key out of order.
    pub fn sort_if_local(
        &self,
        device: &Device,
        keys: &MergeKeys,
        n: usize,
        probe: &LocalityProbe,
    ) -> CudaResult<Option<DeviceBuffer<u32>>> {
        let choice = self.choice;
        if n <= MERGE_TILE as usize {
            return Ok(None);
        }
        let halo = match choice {
            WindowHalo::Off => None,
            WindowHalo::LeastClean => probe.least_clean_halo(),
            WindowHalo::Fixed(halo) => probe.clean_at(halo).then_some(halo),
        };
        let Some(halo) = halo else { return Ok(None) };
        if let Some(permutation) = self.sort(device, keys, n, halo)? {
            return Ok(Some(permutation));
        }
        if choice == WindowHalo::LeastClean
            && halo < LOCALITY_WINDOW_HALO
            && probe.clean_at(LOCALITY_WINDOW_HALO)
        {
            return self.sort(device, keys, n, LOCALITY_WINDOW_HALO);
        }
        Ok(None)
    }

    /// The windowed sort of `n` keys with `halo` rows on each side of each window: the
    /// permutation, or `None` when some key lay further than that from its place.
    pub fn sort(
        &self,
        device: &Device,
        keys: &MergeKeys,
        n: usize,
        halo: u32,
    ) -> CudaResult<Option<DeviceBuffer<u32>>> {
        check_rows(n)?;
        assert!(
            halo.is_power_of_two() && WINDOW_HALOS.contains(&halo),
            "a window's halo is a power of two in {WINDOW_HALOS:?}, not {halo}"
        );
        let out = device.alloc::<u32>(n, "window sort row ids")?;
        if n == 0 {
            return Ok(Some(out));
        }
        let owned = (MERGE_TILE - 2 * halo) as usize;
        let windows = n.div_ceil(owned);
        let edge_keys = device.alloc::<u8>(2 * windows * keys.key_bytes(), "window edge keys")?;
        let edge_ids = device.alloc::<u32>(2 * windows, "window edge row ids")?;
        let failures = device.alloc::<u32>(1, "window check failures")?;
        device.zero(&failures)?;
        {
            let (mut k, mut rows, mut h, mut o, mut ek, mut ei, mut f) = (
                keys.ptr(),
                n as u32,
                halo,
                out.ptr(),
                edge_keys.ptr(),
                edge_ids.ptr(),
                failures.ptr(),
            );
            let mut params = [
                arg(&mut k),
                arg(&mut rows),
                arg(&mut h),
                arg(&mut o),
                arg(&mut ek),
                arg(&mut ei),
                arg(&mut f),
            ];
            launch(
                device,
                self.window[keys.index()],
                windows as u32,
                MERGE_THREADS,
                &mut params,
                n,
            )?;
        }
        let broken =
            self.broken_window_boundaries(device, keys, &edge_keys, &edge_ids, windows, failures)?;
        Ok((broken == 0).then_some(out))
    }

    /// `failures` (the windows' own count) plus how many of the boundaries between
    /// `windows` windows (their first and last owned (key, row id) in `edge_keys` /
    /// `edge_ids`) do not strictly increase.
    fn broken_window_boundaries(
        &self,
        device: &Device,
        keys: &MergeKeys,
        edge_keys: &DeviceBuffer<u8>,
        edge_ids: &DeviceBuffer<u32>,
        windows: usize,
        failures: DeviceBuffer<u32>,
    ) -> CudaResult<u32> {
        let (mut ek, mut ei, mut w, mut f) = (
            edge_keys.ptr(),
            edge_ids.ptr(),
            windows as u32,
            failures.ptr(),
        );
        let mut params = [arg(&mut ek), arg(&mut ei), arg(&mut w), arg(&mut f)];
        launch(
            device,
            self.check[keys.index()],
            windows.div_ceil(MERGE_THREADS as usize) as u32,
            MERGE_THREADS,
            &mut params,
            windows,
        )?;
        Ok(device.download_now(&failures)?[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halos_round_up_to_a_power_of_two_within_range() {
        assert_eq!(window_halo_at_least(1), 16);
        assert_eq!(window_halo_at_least(64), 64);
        assert_eq!(window_halo_at_least(65), 128);
        assert_eq!(window_halo_at_least(100_000), MERGE_TILE / 4);
        assert!(
            WINDOW_HALOS.contains(&LOCALITY_WINDOW_HALO) && LOCALITY_WINDOW_HALO.is_power_of_two()
        );
    }
}
