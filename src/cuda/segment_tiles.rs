//! Launcher of `segment_tile_bounds`, `segment_ranks_<k>` and `segment_tiles_<k>`
//! (`kernels/segmented_sort.cu`): runs whose segments are all short, sorted by one kernel
//! over their keys and segment starts.
//!
//! ```text
//!  segment starts ──staged upload──► device
//!  segment_tile_bounds: each block's first segment (one binary search per block)
//!  block b: rows [s(b·stride), s((b+1)·stride)), s(x) = first segment start ≥ x
//!           (whole segments; stride = MERGE_TILE + 1 − longest, so they fit one tile)
//!           head flags → block scan → each row's segment within the tile
//!           longest segment ≤ SEGMENT_RANK_MAX_ROWS: each row ranked by counting the
//!           rows of its segment before it (segment_ranks_<k>); else block sort of
//!           (segment, key, row id) (segment_tiles_<k>) → final row ids written
//! ```
//!
//! No segment index per row is written, no key is written back and no pass follows: the
//! keys are read once and the permutation written once.

use std::sync::OnceLock;

use super::device::{Device, DeviceBuffer};
use super::error::CudaResult;
use super::merge::{check_rows, MergeKeys, MergeSorts, MERGE_THREADS, MERGE_TILE};
use super::module::{arg, launch};
use super::transfer::Staging;
use crate::sort::Segments;

/// Runs whose longest segment has at most this many rows are sorted by `segment_ranks_<k>`,
/// which counts each row's rank within its segment (work grows with the square of the
/// segment length: H100, 2^26 u64 keys, limits of 32, 64 and 128 rows measured the same at
/// segments of 16 and slower at 100 and 113 with 128; docs/performance.md).
pub const SEGMENT_RANK_MAX_ROWS: usize = 32;

/// Runs whose longest segment has at most this many rows get the segment-tile sort
/// (a block then takes at least half a tile of rows).
pub const SEGMENT_TILES_MAX_ROWS: usize = MERGE_TILE as usize / 2;

/// The longest segment that [`MergeSorts::sort_segment_tiles`] is given
/// ([`SEGMENT_TILES_MAX_ROWS`], or `GPUSORT_SEGMENT_TILES_MAX_ROWS` for measurements,
/// at most one tile; 0 turns the segment-tile sort off). Read once per process.
pub fn segment_tiles_max_rows() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("GPUSORT_SEGMENT_TILES_MAX_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(SEGMENT_TILES_MAX_ROWS)
            .min(MERGE_TILE as usize)
    })
}

impl MergeSorts {
    /// Stable sort of `n` rows by one-word `keys` within `segments`, whose longest segment
    /// must not exceed one tile: the permutation. The segment starts go up through the
    /// staging buffers.
    pub fn sort_segment_tiles(
        &self,
        device: &Device,
        staging: &mut Staging,
        keys: &MergeKeys,
        segments: &Segments,
        n: usize,
    ) -> CudaResult<DeviceBuffer<u32>> {
        let starts = segments.starts();
        let on_device = staging.upload(device, starts.len(), "segment starts", |at, out| {
            out.copy_from_slice(&starts[at..at + out.len()])
        })?;
        self.sort_segment_tiles_with_starts(device, keys, &on_device, segments, n)
    }

    /// [`Self::sort_segment_tiles`] with the segment starts already on the device.
    pub fn sort_segment_tiles_with_starts(
        &self,
        device: &Device,
        keys: &MergeKeys,
        starts: &DeviceBuffer<u32>,
        segments: &Segments,
        n: usize,
    ) -> CudaResult<DeviceBuffer<u32>> {
        check_rows(n)?;
        let out = device.alloc::<u32>(n, "segment tile row ids")?;
        if n == 0 {
            return Ok(out);
        }
        let longest = segments.longest_rows();
        assert!(
            (1..=MERGE_TILE as usize).contains(&longest),
            "segment tiles take segments of 1 ..= {MERGE_TILE} rows, not {longest}"
        );
        let stride = MERGE_TILE + 1 - longest as u32;
        let blocks = n.div_ceil(stride as usize) as u32;
        let bounds = device.alloc::<u32>(blocks as usize + 1, "segment tile bounds")?;
        let count = segments.len() as u32;
        {
            let (mut s, mut c, mut step, mut b, mut o) =
                (starts.ptr(), count, stride, blocks, bounds.ptr());
            let mut params = [
                arg(&mut s),
                arg(&mut c),
                arg(&mut step),
                arg(&mut b),
                arg(&mut o),
            ];
            let grid = (blocks + 1).div_ceil(MERGE_THREADS);
            launch(
                device,
                self.segment_tile_bounds,
                grid,
                MERGE_THREADS,
                &mut params,
                n,
            )?;
        }
        let (mut k, mut s, mut c, mut rows, mut b, mut o) = (
            keys.ptr(),
            starts.ptr(),
            count,
            n as u32,
            bounds.ptr(),
            out.ptr(),
        );
        let mut params = [
            arg(&mut k),
            arg(&mut s),
            arg(&mut c),
            arg(&mut rows),
            arg(&mut b),
            arg(&mut o),
        ];
        let kernel = if longest <= SEGMENT_RANK_MAX_ROWS {
            self.segment_ranks[keys.index()]
        } else {
            self.segment_tiles[keys.index()]
        };
        launch(device, kernel, blocks, MERGE_THREADS, &mut params, n)?;
        device.synchronize()?;
        Ok(out)
    }
}
