//! Launcher of `kernels/segmented_sort.cu`: the stable sort of rows within known segments
//! (input ordered by a prefix of the sort key), and the segment ids and key words the
//! other device sorts of segments take.
//!
//! ```text
//!  segment starts ─ SegmentStarts (segment_starts.rs) ─► device
//!  longest segment fits a tile ─► SegmentTiles (segment_tiles.rs): one kernel
//!  else segment_ids ─► (segment, key) through the merge passes (passes.rs), or
//!       segment_key_u32 / segment_word ─► keys of the locality sort or OneSweep
//! ```

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;
use crate::cuda::merge::passes::MergeKernels;
use crate::cuda::merge::segment_starts::SegmentStarts;
use crate::cuda::merge::segment_tiles::{SegmentTile, SegmentTiles};
use crate::cuda::merge::{check_rows, simple_grid, MergeKeys, MergeSorted};
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, SEGMENTED};
use crate::cuda::tuning::{Tuning, MERGE_THREADS, MERGE_TILE, SIMPLE_THREADS};
use crate::sort::Segments;

/// The loaded segmented sort of one device.
#[derive(Debug)]
pub struct SegmentedSort {
    _module: Module,
    /// The merge passes over (segment, u64 key).
    merge: MergeKernels,
    segment_ids: Kernel,
    segment_key_u32: Kernel,
    segment_word: Kernel,
    /// The segment starts' upload.
    pub starts: SegmentStarts,
    /// The segment-tile sorts.
    pub tiles: SegmentTiles,
    sm_count: u32,
}

impl SegmentedSort {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(SEGMENTED, device.arch, tuning)?;
        Ok(Self {
            merge: MergeKernels::load(&module, "segmented", device, tuning)?,
            segment_ids: module.kernel("segment_ids")?,
            segment_key_u32: module.kernel("segment_key_u32")?,
            segment_word: module.kernel("segment_word")?,
            starts: SegmentStarts::load(&module)?,
            tiles: SegmentTiles::load(&module, device, tuning)?,
            sm_count: device.sm_count,
            _module: module,
        })
    }

    /// Stable sort of `n` rows by one-word `keys` within `segments`, whose longest segment
    /// must fit `tile`: the permutation. The segment starts go up through the staging
    /// buffers as [`SegmentStarts::upload`] sends them.
    pub fn sort_segment_tiles(
        &self,
        device: &Device,
        staging: &mut Staging,
        keys: &MergeKeys,
        segments: &Segments,
        n: usize,
        tile: SegmentTile,
    ) -> CudaResult<DeviceBuffer<u32>> {
        let on_device = self.starts.upload(device, staging, segments)?;
        self.tiles.sort(device, keys, &on_device, segments, n, tile)
    }

    /// Stable sort of `n` rows with u64 `keys` within the segments `segs` (each row's
    /// segment index, ascending): the permutation.
    pub fn sort_rows(
        &self,
        device: &Device,
        keys: &DeviceBuffer<u64>,
        segs: &DeviceBuffer<u32>,
        n: usize,
    ) -> CudaResult<MergeSorted> {
        check_rows(n)?;
        self.merge.sort(device, keys.ptr(), 8, Some(segs.ptr()), n)
    }

    /// Each of the `n` rows' segment index in `segments` (their starts sent as
    /// [`SegmentStarts::upload`] does).
    pub fn segment_ids(
        &self,
        device: &Device,
        staging: &mut Staging,
        segments: &Segments,
        n: usize,
    ) -> CudaResult<DeviceBuffer<u32>> {
        check_rows(n)?;
        let on_device = self.starts.upload(device, staging, segments)?;
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
        let grid = simple_grid(n, self.sm_count);
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
        let grid = simple_grid(n, self.sm_count);
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
}
