//! Launchers of the segment-tile sorts: runs whose segments all fit one tile, sorted by
//! one kernel over their keys and segment starts.
//!
//! ```text
//!  segment starts ──staged upload (segment_starts.rs: as u8/u16 lengths)──► device
//!  standard tile (MERGE_TILE rows, kernels/segmented_sort.cu), longest segment ≤ half a tile:
//!     segment_tile_bounds: each block's first segment (one binary search per block)
//!     block b: rows [s(b·stride), s((b+1)·stride)), s(x) = first segment start ≥ x
//!              (whole segments; stride = MERGE_TILE + 1 − longest, so they fit one tile)
//!              head flags → block scan → each row's segment within the tile
//!              longest segment ≤ SEGMENT_RANK_MAX_ROWS: each row ranked by counting the
//!              rows of its segment before it (segment_ranks_<k>); else block sort of
//!              (segment, key, row id) (segment_tiles_<k>) → final row ids written
//!  large tile (Tuning::large_segment_tile rows, kernels/segment_tiles_large.cu), longer segments:
//!     segment_tile_windows: the same windows, each non-empty one appended to a list
//!     segment_tiles_large_<k>: one block per listed window, one block per SM (its tile
//!              in dynamic shared memory), the same sort as segment_tiles_<k>
//! ```
//!
//! No segment index per row is written, no key is written back and no pass follows: the
//! keys are read once and the permutation written once.

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::merge::segment_tiles_large::LargeSegmentTiles;
use crate::cuda::merge::{check_rows, tile_stride, MergeKeys};
use crate::cuda::module::{arg, launch, Kernel, Module};
use crate::cuda::tuning::{
    Tuning, LARGE_TILE_MIN_FILL, MERGE_THREADS, MERGE_TILE, SEGMENT_RANK_MAX_ROWS,
};
use crate::sort::Segments;

/// Which tile the segment-tile sort uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentTile {
    /// [`MERGE_TILE`] rows, several blocks per SM (`segment_tiles_<k>`, `segment_ranks_<k>`).
    Standard,
    /// The large tile's rows ([`Tuning::large_segment_tile`]), one block per SM
    /// (`segment_tiles_large_<k>`).
    Large,
}

/// The segment-tile kernels of `kernels/segmented_sort.cu` (loaded by `SegmentedSort`),
/// and the large tile's own module.
#[derive(Debug)]
pub struct SegmentTiles {
    /// `segment_tiles_u32` and `_u64`.
    tiles: [Kernel; 2],
    /// `segment_ranks_u32` and `_u64`.
    ranks: [Kernel; 2],
    /// `segment_tile_bounds`.
    bounds: Kernel,
    /// The longest segment of the standard tile (0: no segment tiles).
    max_rows: usize,
    /// The large tile.
    pub large: LargeSegmentTiles,
}

impl SegmentTiles {
    /// The standard tile's kernels of the segmented sort's `module`, and the large tile
    /// compiled and loaded for `device`.
    pub fn load(module: &Module, device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        Ok(Self {
            tiles: [
                module.kernel("segment_tiles_u32")?,
                module.kernel("segment_tiles_u64")?,
            ],
            ranks: [
                module.kernel("segment_ranks_u32")?,
                module.kernel("segment_ranks_u64")?,
            ],
            bounds: module.kernel("segment_tile_bounds")?,
            max_rows: tuning.segment_tiles_max_rows,
            large: LargeSegmentTiles::load(device, tuning)?,
        })
    }

    /// Rows per tile of `tile`.
    pub fn tile_rows(&self, tile: SegmentTile) -> usize {
        match tile {
            SegmentTile::Standard => MERGE_TILE as usize,
            SegmentTile::Large => self.large.rows(),
        }
    }

    /// The segment tile that sorts a run of `segments` with keys of `key_bytes` (4 or 8)
    /// bytes, or `None` when no tile suits it: the standard tile when no segment is longer
    /// than `Tuning::segment_tiles_max_rows`; the large tile when none is longer than it and its
    /// blocks would be at least a quarter full.
    pub fn tile_for(&self, key_bytes: usize, segments: &Segments) -> Option<SegmentTile> {
        let longest = segments.longest_rows();
        let standard = self.max_rows;
        if standard == 0 {
            return None;
        }
        if longest <= standard {
            return Some(SegmentTile::Standard);
        }
        let large = SegmentTile::Large;
        if longest > self.tile_rows(large) || !self.large.fits(key_bytes) {
            return None;
        }
        let fill = (tile_stride(self.tile_rows(large), longest) as usize).max(segments.mean_rows());
        (fill * LARGE_TILE_MIN_FILL >= self.tile_rows(large)).then_some(large)
    }

    /// Stable sort of `n` rows by one-word `keys` within `segments` (their starts on the
    /// device), whose longest segment must fit `tile`: the permutation.
    pub fn sort(
        &self,
        device: &Device,
        keys: &MergeKeys,
        starts: &DeviceBuffer<u32>,
        segments: &Segments,
        n: usize,
        tile: SegmentTile,
    ) -> CudaResult<DeviceBuffer<u32>> {
        check_rows(n)?;
        let out = device.alloc::<u32>(n, "segment tile row ids")?;
        if n == 0 {
            return Ok(out);
        }
        match tile {
            SegmentTile::Standard => {
                self.standard_tiles(device, keys, starts, segments, n, &out)?
            }
            SegmentTile::Large => self.large.sort(device, keys, starts, segments, n, &out)?,
        }
        device.synchronize()?;
        Ok(out)
    }

    fn standard_tiles(
        &self,
        device: &Device,
        keys: &MergeKeys,
        starts: &DeviceBuffer<u32>,
        segments: &Segments,
        n: usize,
        out: &DeviceBuffer<u32>,
    ) -> CudaResult<()> {
        let longest = segments.longest_rows();
        let stride = tile_stride(MERGE_TILE as usize, longest);
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
            launch(device, self.bounds, grid, MERGE_THREADS, &mut params, n)?;
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
            self.ranks[keys.index()]
        } else {
            self.tiles[keys.index()]
        };
        launch(device, kernel, blocks, MERGE_THREADS, &mut params, n)
    }
}
