//! The sortedness probe of the locality sort (`locality_probe_<k>` in
//! `kernels/locality_sort.cu`): one sampled read of the keys that answers both of its
//! questions.
//!
//! ```text
//!  sample: every `every`-th chunk of PROBE_CHUNK consecutive positions
//!  per sampled key, per distance d: is it greater than the key d rows on?
//!      d = every window halo (16, 32, … 512)   → the least halo the windowed sort can try
//!      d = far (tiles apart, by key width)    → `auto`: locality sort or OneSweep
//!  (7 counts back, 56 bytes)
//! ```

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::Device;
use crate::cuda::merge::{check_rows, simple_grid, MergeKeys};
use crate::cuda::module::{arg, launch, Kernel, Module};
use crate::cuda::tuning::{PROBED_HALOS, PROBE_CHUNK, SIMPLE_THREADS};

/// Sampled keys greater than the key some distance on, and how many were sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Probed keys greater than the key `distance` rows further on.
    pub inversions: u64,
    /// Keys probed.
    pub probed: u64,
}

impl Probe {
    /// Some keys were probed and none was out of order at this distance.
    pub fn clean(&self) -> bool {
        self.probed > 0 && self.inversions == 0
    }
}

/// What one probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalityProbe {
    /// At each of [`PROBED_HALOS`].
    pub halos: [Probe; PROBED_HALOS.len()],
    /// At the far distance.
    pub far: Probe,
}

impl LocalityProbe {
    /// The least of [`PROBED_HALOS`] at which no sampled key was out of order.
    pub fn least_clean_halo(&self) -> Option<u32> {
        PROBED_HALOS
            .iter()
            .zip(&self.halos)
            .find(|(_, probe)| probe.clean())
            .map(|(&halo, _)| halo)
    }

    /// Whether no sampled key was out of order at `halo` (one of [`PROBED_HALOS`]).
    pub fn clean_at(&self, halo: u32) -> bool {
        PROBED_HALOS
            .iter()
            .position(|&h| h == halo)
            .is_some_and(|k| self.halos[k].clean())
    }
}

/// The probe's kernels, `locality_probe_u32` and `_u64` (of `kernels/locality_sort.cu`,
/// loaded by `LocalitySort`).
#[derive(Debug, Clone, Copy)]
pub struct Prober {
    kernels: [Kernel; 2],
    sm_count: u32,
}

impl Prober {
    /// The probe kernels of the locality sort's `module`.
    pub fn load(module: &Module, device: &Device) -> CudaResult<Self> {
        Ok(Self {
            kernels: [
                module.kernel("locality_probe_u32")?,
                module.kernel("locality_probe_u64")?,
            ],
            sm_count: device.sm_count,
        })
    }

    /// The probe of `n` keys over every `every`-th chunk of [`PROBE_CHUNK`] positions, at
    /// the window halos and at `far` rows.
    pub fn probe(
        &self,
        device: &Device,
        keys: &MergeKeys,
        n: usize,
        far: u32,
        every: u32,
    ) -> CudaResult<LocalityProbe> {
        check_rows(n)?;
        assert!(every >= 1, "the probe takes every chunk at most");
        let slots = PROBED_HALOS.len() + 1;
        let counts = device.alloc::<u64>(slots, "probe counters")?;
        device.zero(&counts)?;
        let nearest = PROBED_HALOS[0].min(far);
        let (mut ptr, mut rows, mut far_rows, mut every_chunk, mut out) =
            (keys.ptr(), n as u32, far, every, counts.ptr());
        let mut params = [
            arg(&mut ptr),
            arg(&mut rows),
            arg(&mut far_rows),
            arg(&mut every_chunk),
            arg(&mut out),
        ];
        launch(
            device,
            self.kernels[keys.index()],
            simple_grid(probed_positions(n, nearest, every) as usize, self.sm_count),
            SIMPLE_THREADS,
            &mut params,
            n,
        )?;
        let counts = device.download_now(&counts)?;
        let at = |k: usize, distance: u32| Probe {
            inversions: counts[k],
            probed: probed_positions(n, distance, every),
        };
        Ok(LocalityProbe {
            halos: std::array::from_fn(|k| at(k, PROBED_HALOS[k])),
            far: at(PROBED_HALOS.len(), far),
        })
    }
}

/// How many positions below `n - distance` lie in every `every`-th chunk of
/// [`PROBE_CHUNK`] positions, from the first chunk on.
fn probed_positions(n: usize, distance: u32, every: u32) -> u64 {
    let limit = (n as u64).saturating_sub(distance as u64);
    if limit == 0 {
        return 0;
    }
    let step = every as u64 * PROBE_CHUNK;
    let chunks = limit.div_ceil(step);
    let last = (chunks - 1) * step;
    (chunks - 1) * PROBE_CHUNK + PROBE_CHUNK.min(limit - last)
}

#[cfg(test)]
mod tests {
    use super::super::locality_window::WINDOW_HALOS;
    use super::*;

    #[test]
    fn probed_positions_count_the_sampled_chunks() {
        let brute = |n: usize, distance: u32, every: u32| {
            (0..(n as u64).saturating_sub(distance as u64))
                .filter(|i| (i / PROBE_CHUNK).is_multiple_of(every as u64))
                .count() as u64
        };
        for n in [0, 1, 1023, 1024, 1025, 5000, 8192, 8193, 100_000] {
            for distance in [0, 1, 2048, 8192] {
                for every in [1, 2, 8] {
                    assert_eq!(
                        probed_positions(n, distance, every),
                        brute(n, distance, every),
                        "n={n} distance={distance} every={every}"
                    );
                }
            }
        }
    }

    #[test]
    fn probed_halos_are_the_window_halos() {
        let powers: Vec<u32> = WINDOW_HALOS.filter(|h| h.is_power_of_two()).collect();
        assert_eq!(powers, PROBED_HALOS);
    }

    #[test]
    fn the_least_clean_halo_is_chosen() {
        let probe = |dirty_below: u32| LocalityProbe {
            halos: PROBED_HALOS.map(|h| Probe {
                inversions: u64::from(h < dirty_below),
                probed: 100,
            }),
            far: Probe {
                inversions: 0,
                probed: 100,
            },
        };
        assert_eq!(probe(0).least_clean_halo(), Some(16));
        assert_eq!(probe(64).least_clean_halo(), Some(64));
        assert_eq!(probe(1024).least_clean_halo(), None);
        assert!(probe(64).clean_at(128) && !probe(64).clean_at(32) && !probe(0).clean_at(100));
        let unprobed = Probe {
            inversions: 0,
            probed: 0,
        };
        assert!(!unprobed.clean());
    }
}
