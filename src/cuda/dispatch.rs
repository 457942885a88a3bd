//! Which device sort a run gets, and running it on keys already on the device.
//!
//! ```text
//!  segments known (input ordered by a key prefix):
//!     key of one word, longest segment ≤ Tuning::segment_tiles_max_rows (standard tile),
//!     or ≤ the large tile's rows with blocks at least a quarter full (large tile)
//!         → segment tiles: blocks of whole segments, each sorted as one tile (one kernel)
//!     mean segment ≤ SEGMENTED_MERGE_MAX_MEAN_ROWS, key of one word
//!         → segmented merge sort: (segment, key) elements; with u32 keys (segment << 32 | key)
//!           as one word through the locality kernels
//!     otherwise → OneSweep over (segment index word, key words): a composite radix sort,
//!           whose cost does not depend on segment length (no cliff)
//!  no segments:
//!     onesweep → OneSweep
//!     locality / segmented → locality sort (keys of one word; longer keys: OneSweep)
//!     auto → sortedness probe on a sample (keys greater than the key one tile on for
//!            u32 keys, four tiles on for u64); few enough: locality sort, else OneSweep
//!  locality sort: the least halo at which the same probe found no key above the key `halo`
//!            rows on → windowed sort (locality_window.rs), kept when its check proves it;
//!            else the merge sort
//! ```
//!
//! The thresholds (`tuning.rs`) come from `gpusort bench merge` (docs/performance.md).

use crate::config::AlgorithmChoice;
use crate::cuda::encode::DeviceKeys;
use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;
use crate::cuda::merge::locality_probe::LocalityProbe;
use crate::cuda::merge::MergeKeys;
use crate::cuda::runtime::CudaRuntime;
use crate::cuda::tuning::{
    LOCALITY_MAX_INVERSIONS_PER, LOCALITY_PROBE_EVERY, LOCALITY_PROBE_TILES, MERGE_TILE,
    SEGMENTED_MERGE_MAX_MEAN_ROWS,
};
use crate::sort::{Algorithm, Segments};

/// What the device did with one run's keys.
pub struct DeviceOrder {
    /// The permutation on the device; `None` is the identity.
    pub permutation: Option<DeviceBuffer<u32>>,
    /// The algorithm that ran.
    pub algorithm: Algorithm,
}

/// Sorts `n` rows by `keys` (consumed) on the device, as `algorithm` and `segments`
/// say (see the module docs).
pub fn sort_on_device(
    rt: &CudaRuntime,
    device: &Device,
    staging: &mut Staging,
    keys: DeviceKeys,
    algorithm: AlgorithmChoice,
    segments: Option<&Segments>,
    n: usize,
) -> CudaResult<DeviceOrder> {
    if let Some(segments) = segments {
        return sort_segments(rt, device, staging, keys, algorithm, segments, n);
    }
    let keys = match one_word(keys) {
        Ok(keys) => keys,
        Err(DeviceKeys::Words(words)) => {
            return Ok(radix(rt.onesweep.sort_rows_by_words(device, words, n)?));
        }
        Err(_constant) => return Ok(radix(None)),
    };
    let probe = match algorithm {
        AlgorithmChoice::Onesweep => None,
        // Too few rows for `auto` to find them nearly sorted.
        AlgorithmChoice::Auto if n <= 2 * far_distance(&keys) as usize => None,
        _ => Some(probe(rt, device, &keys, n)?),
    };
    // The locality sort: forced, or `auto` finds the keys nearly sorted.
    let locality =
        probe.filter(|probe| !matches!(algorithm, AlgorithmChoice::Auto) || nearly_sorted(probe));
    if let Some(probe) = &locality {
        let window = rt.locality.windows.sort_if_local(device, &keys, n, probe)?;
        if let Some(permutation) = window {
            return Ok(DeviceOrder {
                permutation: Some(permutation),
                algorithm: Algorithm::Locality,
            });
        }
        let sorted = rt.locality.sort_rows(device, keys, n)?;
        return Ok(DeviceOrder {
            permutation: Some(sorted.permutation),
            algorithm: Algorithm::Locality,
        });
    }
    let permutation = match keys {
        MergeKeys::U32(word) => rt.onesweep.sort_rows_u32(device, word, n)?,
        MergeKeys::U64(word) => rt.onesweep.sort_rows_by_words(device, vec![word], n)?,
    };
    Ok(radix(permutation))
}

/// The sortedness probe of `keys`: at the window halos, and at the far distance of
/// their width.
fn probe(
    rt: &CudaRuntime,
    device: &Device,
    keys: &MergeKeys,
    n: usize,
) -> CudaResult<LocalityProbe> {
    rt.locality
        .prober
        .probe(device, keys, n, far_distance(keys), LOCALITY_PROBE_EVERY)
}

fn sort_segments(
    rt: &CudaRuntime,
    device: &Device,
    staging: &mut Staging,
    keys: DeviceKeys,
    algorithm: AlgorithmChoice,
    segments: &Segments,
    n: usize,
) -> CudaResult<DeviceOrder> {
    let segmented = |permutation| DeviceOrder {
        permutation,
        algorithm: Algorithm::Segmented,
    };
    if matches!(keys, DeviceKeys::Constant) || segments.len() == n {
        return Ok(segmented(None));
    }
    let keys = match sort_segment_tiles(rt, device, staging, keys, algorithm, segments, n)? {
        Ok(permutation) => return Ok(segmented(Some(permutation))),
        Err(keys) => keys,
    };
    let merge = algorithm != AlgorithmChoice::Onesweep
        && segments.mean_rows() <= SEGMENTED_MERGE_MAX_MEAN_ROWS;
    let segs = rt.segmented.segment_ids(device, staging, segments, n)?;
    let permutation = match keys {
        DeviceKeys::Constant => None,
        DeviceKeys::U32(word) => {
            let composite = rt.segmented.segment_key_u32(device, &segs, &word, n)?;
            drop((word, segs));
            if merge {
                Some(
                    rt.locality
                        .sort_rows(device, MergeKeys::U64(composite), n)?
                        .permutation,
                )
            } else {
                rt.onesweep.sort_rows_by_words(device, vec![composite], n)?
            }
        }
        DeviceKeys::Words(words) if merge && words.len() == 1 => Some(
            rt.segmented
                .sort_rows(device, &words[0], &segs, n)?
                .permutation,
        ),
        DeviceKeys::Words(words) => {
            let mut all = vec![rt.segmented.segment_word(device, &segs, n)?];
            drop(segs);
            all.extend(words);
            rt.onesweep.sort_rows_by_words(device, all, n)?
        }
    };
    Ok(segmented(permutation))
}

/// The segment-tile sort when a tile suits the segments (see `SegmentTiles::tile_for` in
/// `merge/segment_tiles.rs`) and the key is one word: the permutation; otherwise the keys
/// back, untouched.
fn sort_segment_tiles(
    rt: &CudaRuntime,
    device: &Device,
    staging: &mut Staging,
    keys: DeviceKeys,
    algorithm: AlgorithmChoice,
    segments: &Segments,
    n: usize,
) -> CudaResult<Result<DeviceBuffer<u32>, DeviceKeys>> {
    if algorithm == AlgorithmChoice::Onesweep {
        return Ok(Err(keys));
    }
    let keys = match one_word(keys) {
        Ok(keys) => keys,
        Err(other) => return Ok(Err(other)),
    };
    let Some(tile) = rt.segmented.tiles.tile_for(keys.key_bytes(), segments) else {
        return Ok(Err(device_keys(keys)));
    };
    let permutation = rt
        .segmented
        .sort_segment_tiles(device, staging, &keys, segments, n, tile)?;
    Ok(Ok(permutation))
}

/// Keys of one word (u32, or one u64 word) as merge keys; constant keys and keys of
/// several words back as they are.
fn one_word(keys: DeviceKeys) -> Result<MergeKeys, DeviceKeys> {
    match keys {
        DeviceKeys::U32(word) => Ok(MergeKeys::U32(word)),
        DeviceKeys::Words(mut words) if words.len() == 1 => {
            Ok(MergeKeys::U64(words.pop().expect("one word")))
        }
        other => Err(other),
    }
}

/// One-word keys back as device keys.
fn device_keys(keys: MergeKeys) -> DeviceKeys {
    match keys {
        MergeKeys::U32(word) => DeviceKeys::U32(word),
        MergeKeys::U64(word) => DeviceKeys::Words(vec![word]),
    }
}

fn radix(permutation: Option<DeviceBuffer<u32>>) -> DeviceOrder {
    DeviceOrder {
        permutation,
        algorithm: Algorithm::Radix,
    }
}

/// How many rows apart `auto`'s probe compares keys ([`LOCALITY_PROBE_TILES`]).
fn far_distance(keys: &MergeKeys) -> u32 {
    LOCALITY_PROBE_TILES[keys.index()] * MERGE_TILE
}

/// Whether `auto` takes the locality sort: at most one sampled key in
/// [`LOCALITY_MAX_INVERSIONS_PER`] out of order at the far distance.
fn nearly_sorted(probe: &LocalityProbe) -> bool {
    probe.far.inversions * LOCALITY_MAX_INVERSIONS_PER <= probe.far.probed
}
