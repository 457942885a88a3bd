//! Launcher of `kernels/segment_tiles_large.cu`: runs whose segments are longer than the
//! standard tile but fit a large one (`Tuning::large_segment_tile` rows), sorted one block
//! per SM with the tile in dynamic shared memory.
//!
//! ```text
//!  segment_tile_windows      windows of `tile_stride` rows (merge/mod.rs), each
//!                            non-empty one appended to a list
//!  segment_tiles_large_<k>   one block per listed window, one block per SM: the sort of
//!                            segment_tiles_<k> (segment_tiles.rs) over a larger tile
//! ```

use cudarc::driver::result;
use cudarc::driver::sys::CUfunction_attribute;

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::merge::{tile_stride, MergeKeys};
use crate::cuda::module::{
    arg, launch, launch_shared, load_module, Kernel, Module, SEGMENT_TILES_LARGE,
};
use crate::cuda::tuning::{TileShape, Tuning, MERGE_THREADS};
use crate::sort::Segments;

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
        let module = load_module(SEGMENT_TILES_LARGE, device.arch, tuning)?;
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

    /// Rows of a tile.
    pub fn rows(&self) -> usize {
        self.shape.rows()
    }

    /// Whether the tile fits this device for keys of `key_bytes` (4 or 8) bytes.
    pub fn fits(&self, key_bytes: usize) -> bool {
        self.sort[usize::from(key_bytes == 8)].is_some()
    }

    /// Writes to `out` the permutation that sorts `n` rows by one-word `keys` within
    /// `segments` (their starts on the device), whose longest segment fits the tile.
    pub fn sort(
        &self,
        device: &Device,
        keys: &MergeKeys,
        starts: &DeviceBuffer<u32>,
        segments: &Segments,
        n: usize,
        out: &DeviceBuffer<u32>,
    ) -> CudaResult<()> {
        let stride = tile_stride(self.rows(), segments.longest_rows());
        let Some(sort) = self.sort[keys.index()] else {
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
            launch(device, self.windows, grid, MERGE_THREADS, &mut params, n)?;
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
        let shape = self.shape;
        let shared = large_tile_shared_bytes(shape, keys.key_bytes()) as u32;
        launch_shared(device, sort, most, shape.threads, shared, &mut params, n)
    }
}

/// Dynamic shared memory of a large tile: `SharedTile<K, true>` of `kernels/merge.cuh`,
/// keys, segments and row ids of the padded tile (one free element per thread's run).
fn large_tile_shared_bytes(shape: TileShape, key_bytes: usize) -> usize {
    (shape.rows() + shape.threads as usize) * (key_bytes + 8)
}
