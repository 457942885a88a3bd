//! The merge sort's passes over one element type, shared by the locality sort
//! (`locality.rs`) and the segmented sort (`segmented.rs`): each loads its own
//! [`MergeKernels`] from its module (`MERGE_ENTRY_POINTS` of `kernels/merge.cuh`).
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

use cudarc::driver::sys::CUdeviceptr;

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::merge::MergeSorted;
use crate::cuda::module::{arg, launch, Kernel, Module};
use crate::cuda::tuning::{
    Tuning, MERGE_BLOCKS_PER_SM, MERGE_SCAN_THREADS as SCAN_THREADS, MERGE_THREADS, MERGE_TILE,
    SIMPLE_THREADS,
};

/// The radius check keeps its verdicts in the bits of a u32 (`kernels/merge.cuh`).
const LARGEST_PLACE_RADIUS: u32 = 14;

/// The merge sort kernels of one element type, and how the passes use them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MergeKernels {
    block_sort: Kernel,
    find_dirty: Kernel,
    merge_tiles: Kernel,
    copy_back: Kernel,
    tile_radius: Kernel,
    place: Kernel,
    scan: Kernel,
    sm_count: u32,
    max_place_radius: u32,
}

impl MergeKernels {
    /// The entry points `<prefix>_block_sort`, `_find_dirty`, `_merge_tiles`,
    /// `_copy_back`, `_tile_radius` and `_place`, and `merge_scan_tiles`, of `module`.
    pub(crate) fn load(
        module: &Module,
        prefix: &str,
        device: &Device,
        tuning: &Tuning,
    ) -> CudaResult<Self> {
        let entry = |suffix: &str| module.kernel(&format!("{prefix}_{suffix}"));
        Ok(Self {
            block_sort: entry("block_sort")?,
            find_dirty: entry("find_dirty")?,
            merge_tiles: entry("merge_tiles")?,
            copy_back: entry("copy_back")?,
            tile_radius: entry("tile_radius")?,
            place: entry("place")?,
            scan: module.kernel("merge_scan_tiles")?,
            sm_count: device.sm_count,
            max_place_radius: tuning.place_max_radius.min(LARGEST_PLACE_RADIUS),
        })
    }

    /// The radius of the sorted tiles of `data` (keys, segments, row ids), or
    /// `max_place_radius + 1` when larger.
    fn tile_radius(&self, device: &Device, data: [CUdeviceptr; 3], n: usize) -> CudaResult<u32> {
        let tiles = n.div_ceil(MERGE_TILE as usize) as u32;
        let failed = device.alloc::<u32>(1, "merge tile radius")?;
        device.zero(&failed)?;
        let grid = tiles.div_ceil(SIMPLE_THREADS);
        let max = self.max_place_radius;
        launch_over_data(
            device,
            self.tile_radius,
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
        data: [CUdeviceptr; 3],
        n: usize,
        radius: u32,
    ) -> CudaResult<DeviceBuffer<u32>> {
        let out = device.alloc::<u32>(n, "merge placed row ids")?;
        let tiles = n.div_ceil(MERGE_TILE as usize) as u32;
        launch_over_data(
            device,
            self.place,
            data,
            n,
            radius,
            &out,
            tiles,
            MERGE_THREADS,
        )?;
        Ok(out)
    }

    /// The block sort and the merge passes over `n` keys of `key_bytes` bytes at `keys`
    /// (sorted in place, as are the segment indices at `segs`): the permutation.
    pub(in crate::cuda) fn sort(
        &self,
        device: &Device,
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
                self.block_sort,
                tiles,
                MERGE_THREADS,
                &mut params,
                n,
            )?;
        }
        if tiles == 1 {
            return Ok(sorted);
        }
        let radius = self.tile_radius(device, data, n)?;
        if radius == 0 {
            return Ok(sorted);
        }
        if radius <= self.max_place_radius {
            sorted.permutation = self.place(device, data, n, radius)?;
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
                    self.find_dirty,
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
                launch(device, self.scan, 1, SCAN_THREADS, &mut params, n)?;
            }
            let [queued, out_of_order] = device.download_now(&summary)?[..] else {
                unreachable!("the summary holds two counts");
            };
            if out_of_order == 0 {
                break;
            }
            if queued > 0 {
                let grid = queued.min(self.sm_count * MERGE_BLOCKS_PER_SM);
                for kernel in [self.merge_tiles, self.copy_back] {
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
