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

use cudarc::driver::result;
use cudarc::driver::sys::CUfunction_attribute;

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;
use crate::cuda::merge::{check_rows, MergeKeys, MergeSorts};
use crate::cuda::module::{
    arg, cached_cubin, launch, launch_shared, Kernel, Module, SEGMENT_TILES_LARGE,
};
use crate::cuda::tuning::{
    TileShape, Tuning, LARGE_TILE_MIN_FILL, MERGE_THREADS, MERGE_TILE, SEGMENT_RANK_MAX_ROWS,
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

impl MergeSorts {
    /// Rows per tile of `tile`.
    pub fn tile_rows(&self, tile: SegmentTile) -> usize {
        match tile {
            SegmentTile::Standard => MERGE_TILE as usize,
            SegmentTile::Large => self.large_segment_tiles.shape.rows(),
        }
    }

    /// The rows between window starts of `tile` for segments of at most `longest` rows: a
    /// window's segments then always fit one tile (s(x + stride) ≤ x + stride + longest − 1).
    fn stride(&self, tile: SegmentTile, longest: usize) -> u32 {
        let rows = self.tile_rows(tile);
        assert!(
            (1..=rows).contains(&longest),
            "{tile:?} segment tiles take segments of 1 ..= {rows} rows, not {longest}"
        );
        (rows + 1 - longest) as u32
    }
}

/// The loaded large-tile kernels (`kernels/segment_tiles_large.cu`).
#[derive(Debug)]
pub struct LargeSegmentTiles {
    _module: Module,
    windows: Kernel,
    /// `segment_tiles_large_u32` and `_u64`; `None` where the device's shared memory per
    /// block is too small for the tile.
    sort: [Option<Kernel>; 2],
    /// The block shape the kernels were compiled with.
    shape: TileShape,
}

impl LargeSegmentTiles {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let shape = tuning.large_segment_tile;
        let module = Module::load(
            SEGMENT_TILES_LARGE,
            &cached_cubin(SEGMENT_TILES_LARGE, device.arch, tuning)?,
        )?;
        let usable = |name: &'static str, key_bytes: usize| -> CudaResult<Option<Kernel>> {
            let kernel = module.kernel(name)?;
            // SAFETY: a function handle of the loaded module.
            let most = unsafe {
                result::function::get_function_attribute(
                    kernel.function,
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                )
            }
            .map_err(|e| CudaError::driver("cuFuncGetAttribute", e))?;
            // SAFETY: as above; the driver checks the size against the device's limit.
            let shared = unsafe {
                result::function::set_function_attribute(
                    kernel.function,
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    large_tile_shared_bytes(shape, key_bytes) as i32,
                )
            };
            if (most as u32) < shape.threads || shared.is_err() {
                log::debug!("gpusort: {name} does not fit this device; large segment tiles off");
                return Ok(None);
            }
            Ok(Some(kernel))
        };
        Ok(Self {
            windows: module.kernel("segment_tile_windows")?,
            sort: [
                usable("segment_tiles_large_u32", 4)?,
                usable("segment_tiles_large_u64", 8)?,
            ],
            shape,
            _module: module,
        })
    }
}

/// Dynamic shared memory of a large tile: `SharedTile<K, true>` of `kernels/merge.cuh`,
/// keys, segments and row ids of the padded tile (one free element per thread's run).
fn large_tile_shared_bytes(shape: TileShape, key_bytes: usize) -> usize {
    (shape.rows() + shape.threads as usize) * (key_bytes + 8)
}

impl MergeSorts {
    /// The segment tile that sorts a run of `segments` with keys of `key_bytes` (4 or 8)
    /// bytes, or `None` when no tile suits it: the standard tile when no segment is longer
    /// than `Tuning::segment_tiles_max_rows`; the large tile when none is longer than it and its
    /// blocks would be at least a quarter full.
    pub fn segment_tile_for(&self, key_bytes: usize, segments: &Segments) -> Option<SegmentTile> {
        let longest = segments.longest_rows();
        let standard = self.segment_tiles_max_rows;
        if standard == 0 {
            return None;
        }
        if longest <= standard {
            return Some(SegmentTile::Standard);
        }
        let large = SegmentTile::Large;
        if longest > self.tile_rows(large)
            || self.large_segment_tiles.sort[usize::from(key_bytes == 8)].is_none()
        {
            return None;
        }
        let fill = (self.stride(large, longest) as usize).max(segments.mean_rows());
        (fill * LARGE_TILE_MIN_FILL >= self.tile_rows(large)).then_some(large)
    }

    /// Stable sort of `n` rows by one-word `keys` within `segments`, whose longest segment
    /// must fit `tile`: the permutation. The segment starts go up through the staging
    /// buffers as [`Self::upload_segment_starts`] sends them.
    pub fn sort_segment_tiles(
        &self,
        device: &Device,
        staging: &mut Staging,
        keys: &MergeKeys,
        segments: &Segments,
        n: usize,
        tile: SegmentTile,
    ) -> CudaResult<DeviceBuffer<u32>> {
        let on_device = self.upload_segment_starts(device, staging, segments)?;
        self.sort_segment_tiles_with_starts(device, keys, &on_device, segments, n, tile)
    }

    /// [`Self::sort_segment_tiles`] with the segment starts already on the device.
    pub fn sort_segment_tiles_with_starts(
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
            SegmentTile::Large => self.large_tiles(device, keys, starts, segments, n, &out)?,
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
        let stride = self.stride(SegmentTile::Standard, longest);
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
        launch(device, kernel, blocks, MERGE_THREADS, &mut params, n)
    }

    fn large_tiles(
        &self,
        device: &Device,
        keys: &MergeKeys,
        starts: &DeviceBuffer<u32>,
        segments: &Segments,
        n: usize,
        out: &DeviceBuffer<u32>,
    ) -> CudaResult<()> {
        let large = &self.large_segment_tiles;
        let stride = self.stride(SegmentTile::Large, segments.longest_rows());
        let Some(sort) = large.sort[keys.index()] else {
            return Err(CudaError::Unavailable(
                "large segment tiles do not fit this device's shared memory".into(),
            ));
        };
        let windows = n.div_ceil(stride as usize) as u32;
        // No more listed windows than segments (each holds at least one) or windows.
        let most = windows.min(segments.len() as u32);
        let list = device.alloc::<u32>(2 * most as usize, "segment tile windows")?;
        let listed = device.alloc::<u32>(1, "segment tile window count")?;
        device.zero(&listed)?;
        let count = segments.len() as u32;
        {
            let (mut s, mut c, mut step, mut w, mut l, mut len) = (
                starts.ptr(),
                count,
                stride,
                windows,
                list.ptr(),
                listed.ptr(),
            );
            let mut params = [
                arg(&mut s),
                arg(&mut c),
                arg(&mut step),
                arg(&mut w),
                arg(&mut l),
                arg(&mut len),
            ];
            let grid = windows.div_ceil(MERGE_THREADS);
            launch(device, large.windows, grid, MERGE_THREADS, &mut params, n)?;
        }
        let (mut k, mut s, mut c, mut rows, mut l, mut len, mut o) = (
            keys.ptr(),
            starts.ptr(),
            count,
            n as u32,
            list.ptr(),
            listed.ptr(),
            out.ptr(),
        );
        let mut params = [
            arg(&mut k),
            arg(&mut s),
            arg(&mut c),
            arg(&mut rows),
            arg(&mut l),
            arg(&mut len),
            arg(&mut o),
        ];
        let shape = large.shape;
        let shared = large_tile_shared_bytes(shape, keys.key_bytes()) as u32;
        launch_shared(device, sort, most, shape.threads, shared, &mut params, n)
    }
}
