//! The stable merge sorts on the device: for nearly sorted keys (`kernels/locality_sort.cu`)
//! and for rows in known segments (`kernels/segmented_sort.cu`,
//! `kernels/segment_tiles_large.cu`). One type per kernel file holds its module:
//!
//! ```text
//!  locality.rs             LocalitySort: the merge sort of nearly sorted keys, with
//!    locality_probe.rs       Prober: one sampled read that measures how sorted the keys are
//!    locality_window.rs      WindowSort: one kernel for keys within a halo of their place
//!  segmented.rs            SegmentedSort: the merge sort within segments, segment ids, with
//!    segment_starts.rs       SegmentStarts: the segment starts sent in few bytes
//!    segment_tiles.rs        SegmentTiles: runs whose segments fit one tile, one kernel
//!  segment_tiles_large.rs  LargeSegmentTiles: segments up to a large tile, one block per SM
//!  passes.rs               MergeKernels: the block sort and merge passes both sorts run
//! ```

pub(super) mod locality;
pub(super) mod locality_probe;
pub(super) mod locality_window;
pub(super) mod passes;
pub(super) mod segment_starts;
pub(super) mod segment_tiles;
pub(super) mod segment_tiles_large;
pub(super) mod segmented;

use cudarc::driver::sys::CUdeviceptr;

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::DeviceBuffer;
use crate::cuda::tuning::{MERGE_TILE, SIMPLE_THREADS};

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

/// The grid of an element-wise kernel over `n` rows: at most 16 blocks per SM.
pub(in crate::cuda) fn simple_grid(n: usize, sm_count: u32) -> u32 {
    (n.div_ceil(SIMPLE_THREADS as usize) as u32).clamp(1, sm_count * 16)
}

/// The rows between window starts of a tile of `rows` rows for segments of at most
/// `longest` rows: a window's segments then always fit one tile
/// (s(x + stride) ≤ x + stride + longest − 1).
pub(in crate::cuda) fn tile_stride(rows: usize, longest: usize) -> u32 {
    assert!(
        (1..=rows).contains(&longest),
        "segment tiles of {rows} rows take segments of 1 ..= {rows} rows, not {longest}"
    );
    (rows + 1 - longest) as u32
}

/// The merge kernels index rows with u32.
pub(in crate::cuda) fn check_rows(n: usize) -> CudaResult<()> {
    let max = u32::MAX as usize - MERGE_TILE as usize;
    if n > max {
        return Err(CudaError::TooLarge { rows: n, max });
    }
    Ok(())
}
