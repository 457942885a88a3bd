//! Launcher of `kernels/locality_sort.cu` and `kernels/segmented_sort.cu`: the stable merge
//! sorts for nearly sorted keys and for rows in known segments.
//!
//! ```text
//!  block_sort                 every tile of MERGE_TILE rows sorted in place, row ids made
//!  tile_radius                r: every tile sorts after all tiles more than r before it
//!                             (4 bytes back)
//!  r == 0                     sorted: done
//!  r <= max_place_radius      place: each row's final position = rows of the tiles before
//!                             its window + its index + counts in the 2r neighbour tiles;
//!                             its row id written there (one pass)
//!  else, run = MERGE_TILE; while run < n:
//!      find_dirty + scan_tiles  per pair of runs: the overlapping stretch to merge → work
//!                               queue; 8 bytes back: queue length, boundaries out of order
//!      no boundary out of order → sorted: stop (early exit)
//!      merge_tiles, copy_back   persistent blocks over the queue (skipped when it is empty)
//!      run *= 2
//! ```
//!
//! Nearly sorted input and segments of up to a few tiles have a small radius, so they cost
//! a block sort and one placement pass; inside the block sort, threads whose elements
//! already sit in their merged places skip the merge. Otherwise a merge pass costs in
//! proportion to the rows that really move, and most passes only compare the keys at run
//! boundaries. Random input makes every pass merge everything (twice the traffic of a
//! radix pass), which is why the backend probes before it picks this sort.

pub(super) mod locality_probe;
pub(super) mod locality_window;
pub(super) mod segment_starts;
pub(super) mod segment_tiles;

use cudarc::driver::sys::CUdeviceptr;

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;
use crate::cuda::merge::locality_window::rounded_halo;
use crate::cuda::merge::segment_tiles::LargeSegmentTiles;
use crate::cuda::module::{arg, cached_cubin, launch, Kernel, Module, LOCALITY, SEGMENTED};
use crate::cuda::tuning::{
    Tuning, WindowHalo, MERGE_BLOCKS_PER_SM, MERGE_SCAN_THREADS as SCAN_THREADS, MERGE_THREADS,
    MERGE_TILE, SIMPLE_THREADS,
};
use crate::sort::Segments;

/// The radius check keeps its verdicts in the bits of a u32 (`kernels/merge.cuh`).
const LARGEST_PLACE_RADIUS: u32 = 14;

/// The kernels of one element type.
#[derive(Debug, Clone, Copy)]
struct MergeKernels {
    block_sort: Kernel,
    find_dirty: Kernel,
    merge_tiles: Kernel,
    copy_back: Kernel,
    tile_radius: Kernel,
    place: Kernel,
    scan: Kernel,
}

/// The entry points of one element type: `<prefix>_block_sort`, `_find_dirty`,
/// `_merge_tiles`, `_copy_back`, `_tile_radius`, `_place`.
macro_rules! merge_kernels {
    ($module:expr, $prefix:literal, $scan:expr) => {
        MergeKernels {
            block_sort: $module.kernel(concat!($prefix, "_block_sort"))?,
            find_dirty: $module.kernel(concat!($prefix, "_find_dirty"))?,
            merge_tiles: $module.kernel(concat!($prefix, "_merge_tiles"))?,
            copy_back: $module.kernel(concat!($prefix, "_copy_back"))?,
            tile_radius: $module.kernel(concat!($prefix, "_tile_radius"))?,
            place: $module.kernel(concat!($prefix, "_place"))?,
            scan: $scan,
        }
    };
}

/// Keys of one word for the locality sort.
#[derive(Debug)]
pub enum MergeKeys {
    /// 32-bit keys.
    U32(DeviceBuffer<u32>),
    /// 64-bit keys.
    U64(DeviceBuffer<u64>),
}

impl MergeKeys {
    pub(in crate::cuda) fn index(&self) -> usize {
        match self {
            MergeKeys::U32(_) => 0,
            MergeKeys::U64(_) => 1,
        }
    }

    pub(in crate::cuda) fn ptr(&self) -> CUdeviceptr {
        match self {
            MergeKeys::U32(k) => k.ptr(),
            MergeKeys::U64(k) => k.ptr(),
        }
    }

    pub(in crate::cuda) fn key_bytes(&self) -> usize {
        match self {
            MergeKeys::U32(_) => 4,
            MergeKeys::U64(_) => 8,
        }
    }
}

/// What a merge sort produced.
#[derive(Debug)]
pub struct MergeSorted {
    /// Row ids in sorted order.
    pub permutation: DeviceBuffer<u32>,
    /// Merge passes that merged at least one tile.
    pub merge_passes: u32,
    /// Work-queue tiles merged over all passes.
    pub merged_tiles: u64,
}

/// The loaded merge sort kernels of one device.
#[derive(Debug)]
pub struct MergeSorts {
    _locality_module: Module,
    _segmented_module: Module,
    locality: [MergeKernels; 2],
    segmented: MergeKernels,
    /// `locality_probe_u32` and `_u64` (see `locality_probe.rs`).
    pub(in crate::cuda) probe: [Kernel; 2],
    /// `locality_window_u32` and `_u64` (see `locality_window.rs`).
    pub(in crate::cuda) window: [Kernel; 2],
    /// `locality_window_check_u32` and `_u64`.
    pub(in crate::cuda) window_check: [Kernel; 2],
    segment_ids: Kernel,
    /// `segment_starts_u8` and `_u16` (see `segment_starts.rs`).
    pub(in crate::cuda) segment_starts: [Kernel; 2],
    /// `segment_tiles_u32` and `_u64` (see `segment_tiles.rs`).
    pub(in crate::cuda) segment_tiles: [Kernel; 2],
    /// `segment_tile_bounds`.
    pub(in crate::cuda) segment_tile_bounds: Kernel,
    /// `segment_ranks_u32` and `_u64`.
    pub(in crate::cuda) segment_ranks: [Kernel; 2],
    /// The large segment tiles (see `segment_tiles.rs`).
    pub(in crate::cuda) large_segment_tiles: LargeSegmentTiles,
    segment_key_u32: Kernel,
    segment_word: Kernel,
    sm_count: u32,
    max_place_radius: u32,
    /// How the windowed sort picks its halo.
    pub(in crate::cuda) window_halo: WindowHalo,
    /// The longest segment of the standard segment tile (0: no segment tiles).
    pub(in crate::cuda) segment_tiles_max_rows: usize,
}

impl MergeSorts {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let locality_module =
            Module::load(LOCALITY, &cached_cubin(LOCALITY, device.arch, tuning)?)?;
        let segmented_module =
            Module::load(SEGMENTED, &cached_cubin(SEGMENTED, device.arch, tuning)?)?;
        let locality_scan = locality_module.kernel("merge_scan_tiles")?;
        let segmented_scan = segmented_module.kernel("merge_scan_tiles")?;
        Ok(Self {
            locality: [
                merge_kernels!(locality_module, "locality_u32", locality_scan),
                merge_kernels!(locality_module, "locality_u64", locality_scan),
            ],
            segmented: merge_kernels!(segmented_module, "segmented", segmented_scan),
            probe: [
                locality_module.kernel("locality_probe_u32")?,
                locality_module.kernel("locality_probe_u64")?,
            ],
            window: [
                locality_module.kernel("locality_window_u32")?,
                locality_module.kernel("locality_window_u64")?,
            ],
            window_check: [
                locality_module.kernel("locality_window_check_u32")?,
                locality_module.kernel("locality_window_check_u64")?,
            ],
            segment_ids: segmented_module.kernel("segment_ids")?,
            segment_starts: [
                segmented_module.kernel("segment_starts_u8")?,
                segmented_module.kernel("segment_starts_u16")?,
            ],
            segment_tiles: [
                segmented_module.kernel("segment_tiles_u32")?,
                segmented_module.kernel("segment_tiles_u64")?,
            ],
            segment_tile_bounds: segmented_module.kernel("segment_tile_bounds")?,
            segment_ranks: [
                segmented_module.kernel("segment_ranks_u32")?,
                segmented_module.kernel("segment_ranks_u64")?,
            ],
            large_segment_tiles: LargeSegmentTiles::load(device, tuning)?,
            segment_key_u32: segmented_module.kernel("segment_key_u32")?,
            segment_word: segmented_module.kernel("segment_word")?,
            sm_count: device.sm_count,
            max_place_radius: tuning.place_max_radius.min(LARGEST_PLACE_RADIUS),
            window_halo: rounded_halo(tuning.window_halo),
            segment_tiles_max_rows: tuning.segment_tiles_max_rows,
            _locality_module: locality_module,
            _segmented_module: segmented_module,
        })
    }

    /// Stable locality sort of `n` keys: the permutation.
    pub fn sort_rows(&self, device: &Device, keys: MergeKeys, n: usize) -> CudaResult<MergeSorted> {
        check_rows(n)?;
        let kernels = self.locality[keys.index()];
        let key_bytes = keys.key_bytes();
        self.run(device, kernels, keys.ptr(), key_bytes, None, n)
    }

    /// Stable sort of `n` rows with u64 `keys` within the segments `segs` (each row's
    /// segment index, ascending): the permutation.
    pub fn sort_segmented_rows(
        &self,
        device: &Device,
        keys: &DeviceBuffer<u64>,
        segs: &DeviceBuffer<u32>,
        n: usize,
    ) -> CudaResult<MergeSorted> {
        check_rows(n)?;
        self.run(device, self.segmented, keys.ptr(), 8, Some(segs.ptr()), n)
    }

    /// Each of the `n` rows' segment index in `segments` (their starts sent as
    /// [`Self::upload_segment_starts`] does).
    pub fn segment_ids(
        &self,
        device: &Device,
        staging: &mut Staging,
        segments: &Segments,
        n: usize,
    ) -> CudaResult<DeviceBuffer<u32>> {
        check_rows(n)?;
        let on_device = self.upload_segment_starts(device, staging, segments)?;
        let out = device.alloc::<u32>(n, "segment ids")?;
        let (mut s, mut count, mut rows, mut o) =
            (on_device.ptr(), segments.len() as u32, n as u32, out.ptr());
        let mut params = [arg(&mut s), arg(&mut count), arg(&mut rows), arg(&mut o)];
        let blocks = n.div_ceil(MERGE_TILE as usize) as u32;
        launch(
            device,
            self.segment_ids,
            blocks,
            MERGE_THREADS,
            &mut params,
            n,
        )?;
        device.synchronize()?;
        Ok(out)
    }

    /// `segment << 32 | key` for every row: one u64 word that sorts like (segment, key).
    pub fn segment_key_u32(
        &self,
        device: &Device,
        segs: &DeviceBuffer<u32>,
        keys: &DeviceBuffer<u32>,
        n: usize,
    ) -> CudaResult<DeviceBuffer<u64>> {
        let out = device.alloc::<u64>(n, "segment keys")?;
        let (mut s, mut k, mut rows, mut o) = (segs.ptr(), keys.ptr(), n as u32, out.ptr());
        let mut params = [arg(&mut s), arg(&mut k), arg(&mut rows), arg(&mut o)];
        let grid = self.simple_grid(n);
        launch(
            device,
            self.segment_key_u32,
            grid,
            SIMPLE_THREADS,
            &mut params,
            n,
        )?;
        Ok(out)
    }

    /// The segment index of every row as a u64 key word.
    pub fn segment_word(
        &self,
        device: &Device,
        segs: &DeviceBuffer<u32>,
        n: usize,
    ) -> CudaResult<DeviceBuffer<u64>> {
        let out = device.alloc::<u64>(n, "segment key word")?;
        let (mut s, mut rows, mut o) = (segs.ptr(), n as u32, out.ptr());
        let mut params = [arg(&mut s), arg(&mut rows), arg(&mut o)];
        let grid = self.simple_grid(n);
        launch(
            device,
            self.segment_word,
            grid,
            SIMPLE_THREADS,
            &mut params,
            n,
        )?;
        Ok(out)
    }

    pub(in crate::cuda) fn simple_grid(&self, n: usize) -> u32 {
        (n.div_ceil(SIMPLE_THREADS as usize) as u32).clamp(1, self.sm_count * 16)
    }

    /// The radius of the sorted tiles of `data` (keys, segments, row ids), or
    /// `max_place_radius + 1` when larger.
    fn tile_radius(
        &self,
        device: &Device,
        kernels: MergeKernels,
        data: [CUdeviceptr; 3],
        n: usize,
    ) -> CudaResult<u32> {
        let tiles = n.div_ceil(MERGE_TILE as usize) as u32;
        let failed = device.alloc::<u32>(1, "merge tile radius")?;
        device.zero(&failed)?;
        let grid = tiles.div_ceil(SIMPLE_THREADS);
        let max = self.max_place_radius;
        launch_over_data(
            device,
            kernels.tile_radius,
            data,
            n,
            max,
            &failed,
            grid,
            SIMPLE_THREADS,
        )?;
        // Bit r set: radius r ruled out; the radius is the first r not ruled out.
        let failed = device.download_now(&failed)?[0];
        Ok((!failed).trailing_zeros().min(self.max_place_radius + 1))
    }

    /// The placement pass: the permutation of `n` rows whose sorted tiles have `radius`.
    fn place(
        &self,
        device: &Device,
        kernels: MergeKernels,
        data: [CUdeviceptr; 3],
        n: usize,
        radius: u32,
    ) -> CudaResult<DeviceBuffer<u32>> {
        let out = device.alloc::<u32>(n, "merge placed row ids")?;
        let tiles = n.div_ceil(MERGE_TILE as usize) as u32;
        launch_over_data(
            device,
            kernels.place,
            data,
            n,
            radius,
            &out,
            tiles,
            MERGE_THREADS,
        )?;
        Ok(out)
    }

    /// The block sort and the merge passes over keys at `keys` (sorted in place, as are
    /// the segment indices at `segs`).
    fn run(
        &self,
        device: &Device,
        kernels: MergeKernels,
        keys: CUdeviceptr,
        key_bytes: usize,
        segs: Option<CUdeviceptr>,
        n: usize,
    ) -> CudaResult<MergeSorted> {
        let ids = device.alloc::<u32>(n, "merge row ids")?;
        let mut sorted = MergeSorted {
            permutation: ids,
            merge_passes: 0,
            merged_tiles: 0,
        };
        if n == 0 {
            return Ok(sorted);
        }
        let data = [keys, segs.unwrap_or(0), sorted.permutation.ptr()];
        let tiles = n.div_ceil(MERGE_TILE as usize) as u32;
        {
            let [mut k, mut s, mut i] = data;
            let mut rows = n as u32;
            let mut params = [arg(&mut k), arg(&mut s), arg(&mut i), arg(&mut rows)];
            launch(
                device,
                kernels.block_sort,
                tiles,
                MERGE_THREADS,
                &mut params,
                n,
            )?;
        }
        if tiles == 1 {
            return Ok(sorted);
        }
        let radius = self.tile_radius(device, kernels, data, n)?;
        if radius == 0 {
            return Ok(sorted);
        }
        if radius <= self.max_place_radius {
            sorted.permutation = self.place(device, kernels, data, n, radius)?;
            device.synchronize()?;
            return Ok(sorted);
        }
        let scratch_keys = device.alloc::<u8>(n * key_bytes, "merge scratch keys")?;
        let scratch_segs = match segs {
            Some(_) => Some(device.alloc::<u32>(n, "merge scratch segments")?),
            None => None,
        };
        let scratch_ids = device.alloc::<u32>(n, "merge scratch row ids")?;
        let scratch = [
            scratch_keys.ptr(),
            scratch_segs.as_ref().map_or(0, |s| s.ptr()),
            scratch_ids.ptr(),
        ];
        let max_pairs = (tiles as usize).div_ceil(2);
        let a_lo = device.alloc::<u32>(max_pairs, "merge pair starts")?;
        let b_hi = device.alloc::<u32>(max_pairs, "merge pair ends")?;
        let pair_tiles = device.alloc::<u32>(max_pairs, "merge pair tiles")?;
        let tile_start = device.alloc::<u32>(max_pairs + 1, "merge work queue")?;
        let summary = device.alloc::<u32>(2, "merge pass summary")?;
        let mut run = MERGE_TILE as usize;
        while run < n {
            let runs = n.div_ceil(run) as u32;
            let pairs = runs.div_ceil(2);
            device.zero(&summary)?;
            {
                let [mut k, mut s, mut i] = data;
                let (mut rows, mut r) = (n as u32, run as u32);
                let (mut lo, mut hi, mut t, mut sum) =
                    (a_lo.ptr(), b_hi.ptr(), pair_tiles.ptr(), summary.ptr());
                let mut params = [
                    arg(&mut k),
                    arg(&mut s),
                    arg(&mut i),
                    arg(&mut rows),
                    arg(&mut r),
                    arg(&mut lo),
                    arg(&mut hi),
                    arg(&mut t),
                    arg(&mut sum),
                ];
                let grid = runs.div_ceil(SIMPLE_THREADS);
                launch(
                    device,
                    kernels.find_dirty,
                    grid,
                    SIMPLE_THREADS,
                    &mut params,
                    n,
                )?;
            }
            {
                let (mut t, mut p, mut starts, mut sum) =
                    (pair_tiles.ptr(), pairs, tile_start.ptr(), summary.ptr());
                let mut params = [arg(&mut t), arg(&mut p), arg(&mut starts), arg(&mut sum)];
                launch(device, kernels.scan, 1, SCAN_THREADS, &mut params, n)?;
            }
            let [queued, out_of_order] = device.download_now(&summary)?[..] else {
                unreachable!("the summary holds two counts");
            };
            if out_of_order == 0 {
                break;
            }
            if queued > 0 {
                let grid = queued.min(self.sm_count * MERGE_BLOCKS_PER_SM);
                for kernel in [kernels.merge_tiles, kernels.copy_back] {
                    let [mut k, mut s, mut i] = data;
                    let [mut sk, mut ss, mut si] = scratch;
                    let (mut rows, mut r, mut p, mut total) = (n as u32, run as u32, pairs, queued);
                    let (mut lo, mut hi, mut starts) = (a_lo.ptr(), b_hi.ptr(), tile_start.ptr());
                    let mut params = [
                        arg(&mut k),
                        arg(&mut s),
                        arg(&mut i),
                        arg(&mut sk),
                        arg(&mut ss),
                        arg(&mut si),
                        arg(&mut rows),
                        arg(&mut r),
                        arg(&mut lo),
                        arg(&mut hi),
                        arg(&mut starts),
                        arg(&mut p),
                        arg(&mut total),
                    ];
                    launch(device, kernel, grid, MERGE_THREADS, &mut params, n)?;
                }
                sorted.merge_passes += 1;
                sorted.merged_tiles += queued as u64;
            }
            run *= 2;
        }
        device.synchronize()?;
        Ok(sorted)
    }
}

/// Launches `kernel(keys, segs, ids, n, value, out)` over the merge arrays `data`.
#[allow(clippy::too_many_arguments)]
fn launch_over_data(
    device: &Device,
    kernel: Kernel,
    data: [CUdeviceptr; 3],
    n: usize,
    value: u32,
    out: &DeviceBuffer<u32>,
    grid: u32,
    threads: u32,
) -> CudaResult<()> {
    let [mut k, mut s, mut i] = data;
    let (mut rows, mut v, mut o) = (n as u32, value, out.ptr());
    let mut params = [
        arg(&mut k),
        arg(&mut s),
        arg(&mut i),
        arg(&mut rows),
        arg(&mut v),
        arg(&mut o),
    ];
    launch(device, kernel, grid, threads, &mut params, n)
}

/// The merge kernels index rows with u32.
pub(in crate::cuda) fn check_rows(n: usize) -> CudaResult<()> {
    let max = u32::MAX as usize - MERGE_TILE as usize;
    if n > max {
        return Err(CudaError::TooLarge { rows: n, max });
    }
    Ok(())
}
