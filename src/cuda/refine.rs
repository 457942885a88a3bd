//! Launcher of `kernels/refine.cu`: the ties that a byte-like key's window leaves, ordered
//! on the device after the sort, so the permutation comes back final and no packed key
//! crosses PCIe.
//!
//! The packed key holds a string's first `window` bytes (up to 64 on the device). Rows
//! equal on every key up to the end of a long column's window, whose values go on past it,
//! form *tie groups*: contiguous in the sorted permutation, ordered among themselves only
//! by the later keys and input order. Each group is sorted again by the next bytes of the
//! column, with the segmented sort, until no ties remain:
//!
//! ```text
//!  heads[i] = 1: sorted position i starts a run (position 0, a segment start)
//!  per long key column c, in key order:
//!    heads |= a field of the columns up to c differs between positions i - 1 and i
//!    tied  = positions in runs of ≥ 2 whose value is longer than c's window
//!    start = window; while tied is not empty:
//!      compact the tied positions (scan, scatter); group = running count of run starts
//!      key   = 7 bytes of the value from `start` | min(len - start, 8)   (inverted for DESC)
//!      stable sort of (group, key): segmented merge sort, or OneSweep over (group word,
//!        key) when the mean group is long; the group's rows put in that order
//!      heads where neighbours' keys differ; tied = still equal and longer than start + 7
//!      start += 7
//! ```
//!
//! Each step reads only the positions still tied, so an input costs in proportion to the
//! bytes that are really shared: all values equal, or a long common prefix, takes one
//! short step per 7 shared bytes over the tied rows (and the merge sort exits early on
//! keys already in order), never a comparison of every pair. The stable sort keeps the
//! order the first sort gave within equal bytes, so a group ends up ordered by (column,
//! later keys, input order): the sort's definition, as `crate::sort::refine` does it on
//! the host for keys encoded there.

use crate::cuda::encode::{FieldSource, TieFields};
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::merge::segmented::SegmentedSort;
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, REFINE};
use crate::cuda::radix::onesweep::Onesweep;
use crate::cuda::tuning::{
    Tuning, REFINE_SCAN_TILE as SCAN_TILE, REFINE_THREADS as THREADS,
    SEGMENTED_MERGE_MAX_MEAN_ROWS, TIE_STEP_BYTES as STEP_BYTES,
};

/// The loaded refinement kernels of one device.
#[derive(Debug)]
pub struct TieRefiner {
    _module: Module,
    iota: Kernel,
    heads_init: Kernel,
    mark_field: Kernel,
    first_flags: Kernel,
    block_sums: Kernel,
    scan_tiles: Kernel,
    compact: Kernel,
    step_keys: Kernel,
    gather_perm: Kernel,
    scatter_perm: Kernel,
    step_heads: Kernel,
    next_flags: Kernel,
    grid: u32,
}

/// The positions still tied, in order, and whether each starts its group.
struct Tied {
    positions: DeviceBuffer<u32>,
    starts: DeviceBuffer<u32>,
    count: usize,
}

/// The sorts a refinement needs besides its own kernels.
pub struct Sorters<'a> {
    /// The segmented merge sort.
    pub segmented: &'a SegmentedSort,
    /// The radix sort, for long groups.
    pub onesweep: &'a Onesweep,
}

impl TieRefiner {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(REFINE, device.arch, tuning)?;
        Ok(Self {
            iota: module.kernel("refine_iota")?,
            heads_init: module.kernel("refine_heads_init")?,
            mark_field: module.kernel("refine_mark_field")?,
            first_flags: module.kernel("refine_first_flags")?,
            block_sums: module.kernel("refine_block_sums")?,
            scan_tiles: module.kernel("refine_scan_tiles")?,
            compact: module.kernel("refine_compact")?,
            step_keys: module.kernel("refine_step_keys")?,
            gather_perm: module.kernel("refine_gather_perm")?,
            scatter_perm: module.kernel("refine_scatter_perm")?,
            step_heads: module.kernel("refine_step_heads")?,
            next_flags: module.kernel("refine_next_flags")?,
            grid: device.sm_count * 8,
            _module: module,
        })
    }

    /// The identity permutation of `n` rows on the device (to refine a sort that found
    /// every packed key equal).
    pub fn identity(&self, device: &Device, n: usize) -> CudaResult<DeviceBuffer<u32>> {
        let out = device.alloc::<u32>(n, "identity permutation")?;
        let (mut rows, mut o) = (n as u32, out.ptr());
        let mut params = [arg(&mut rows), arg(&mut o)];
        launch(device, self.iota, self.grid, THREADS, &mut params, n)?;
        Ok(out)
    }

    /// Orders the tie groups of `ties` in `perm` (the stable sort of the packed keys of
    /// `n` rows; within segments when `segment_ids` holds each row's segment); returns
    /// how many groups there were.
    pub fn refine(
        &self,
        device: &Device,
        sorters: Sorters<'_>,
        perm: &DeviceBuffer<u32>,
        ties: &TieFields,
        segment_ids: Option<&DeviceBuffer<u32>>,
        n: usize,
    ) -> CudaResult<usize> {
        if ties.is_empty() || n < 2 {
            return Ok(0);
        }
        let heads = device.alloc::<u8>(n, "tie heads")?;
        {
            let mut segs = segment_ids.map_or(0, |s| s.ptr());
            let (mut rows, mut h) = (n as u32, heads.ptr());
            let mut params = [arg(&mut segs), arg(&mut rows), arg(&mut h)];
            launch(device, self.heads_init, self.grid, THREADS, &mut params, n)?;
        }
        let mut groups = 0;
        let mut marked = 0;
        for (long, base) in &ties.long_keys {
            // Fields of the columns after the last long column refined, up to this one.
            while marked < ties.fields.len() && ties.fields[marked].1 <= long.column {
                self.mark_field(device, ties.fields[marked].0, perm, &heads, n)?;
                marked += 1;
            }
            let flags = device.alloc::<u32>(n, "tie flags")?;
            {
                let (mut b, mut window) = (*base, long.window as u32);
                let (mut p, mut h, mut rows, mut f) =
                    (perm.ptr(), heads.ptr(), n as u32, flags.ptr());
                let mut params = [
                    arg(&mut b),
                    arg(&mut window),
                    arg(&mut p),
                    arg(&mut h),
                    arg(&mut rows),
                    arg(&mut f),
                ];
                launch(device, self.first_flags, self.grid, THREADS, &mut params, n)?;
            }
            let mut tied = self.compact(device, &flags, None, &heads, n)?;
            drop(flags);
            let mut start = long.window;
            while let Some(now) = tied {
                let (next, step_groups) =
                    self.step(device, &sorters, perm, &heads, *base, now, start)?;
                // The groups of the window's ties; later steps split them further.
                if start == long.window {
                    groups += step_groups;
                }
                tied = next;
                start += STEP_BYTES;
            }
        }
        device.synchronize()?;
        Ok(groups)
    }

    /// `heads[i] = 1` where `field` differs between the rows at positions `i - 1` and `i`.
    fn mark_field(
        &self,
        device: &Device,
        field: FieldSource,
        perm: &DeviceBuffer<u32>,
        heads: &DeviceBuffer<u8>,
        n: usize,
    ) -> CudaResult<()> {
        let mut source = field;
        let (mut p, mut rows, mut h) = (perm.ptr(), n as u32, heads.ptr());
        let mut params = [arg(&mut source), arg(&mut p), arg(&mut rows), arg(&mut h)];
        launch(device, self.mark_field, self.grid, THREADS, &mut params, n)
    }

    /// One step at byte `start` over the tied positions `tied`: their groups sorted by the
    /// step key, heads set where keys differ; the positions still tied after it (`None`:
    /// none), and how many groups this step sorted.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        device: &Device,
        sorters: &Sorters<'_>,
        perm: &DeviceBuffer<u32>,
        heads: &DeviceBuffer<u8>,
        base: FieldSource,
        tied: Tied,
        start: usize,
    ) -> CudaResult<(Option<Tied>, usize)> {
        let m = tied.count;
        let start = u32::try_from(start)
            .map_err(|_| CudaError::Inconsistent(format!("a tie refined past byte {start}")))?;
        let (group_offsets, groups) = self.exclusive_scan(device, &tied.starts, m)?;
        let keys = device.alloc::<u64>(m, "tie step keys")?;
        let segs = device.alloc::<u32>(m, "tie groups")?;
        {
            let (mut b, mut s) = (base, start);
            let (mut p, mut pos, mut offsets, mut flags) = (
                perm.ptr(),
                tied.positions.ptr(),
                group_offsets.ptr(),
                tied.starts.ptr(),
            );
            let (mut rows, mut k, mut g) = (m as u32, keys.ptr(), segs.ptr());
            let mut params = [
                arg(&mut b),
                arg(&mut s),
                arg(&mut p),
                arg(&mut pos),
                arg(&mut offsets),
                arg(&mut flags),
                arg(&mut rows),
                arg(&mut k),
                arg(&mut g),
            ];
            launch(device, self.step_keys, self.grid, THREADS, &mut params, m)?;
        }
        drop(group_offsets);
        let order = self.sort_groups(device, sorters, keys, &segs, m, groups)?;
        if let Some(order) = order {
            let rows = device.alloc::<u32>(m, "tied rows")?;
            {
                let (mut p, mut pos, mut rows_ptr, mut count) =
                    (perm.ptr(), tied.positions.ptr(), rows.ptr(), m as u32);
                let mut params = [
                    arg(&mut p),
                    arg(&mut pos),
                    arg(&mut count),
                    arg(&mut rows_ptr),
                ];
                launch(device, self.gather_perm, self.grid, THREADS, &mut params, m)?;
            }
            let (mut r, mut o, mut pos, mut count, mut p) = (
                rows.ptr(),
                order.ptr(),
                tied.positions.ptr(),
                m as u32,
                perm.ptr(),
            );
            let mut params = [
                arg(&mut r),
                arg(&mut o),
                arg(&mut pos),
                arg(&mut count),
                arg(&mut p),
            ];
            launch(
                device,
                self.scatter_perm,
                self.grid,
                THREADS,
                &mut params,
                m,
            )?;
        }
        let same_before = device.alloc::<u32>(m, "tie neighbours")?;
        {
            let (mut b, mut s) = (base, start);
            let (mut p, mut pos, mut g, mut count) =
                (perm.ptr(), tied.positions.ptr(), segs.ptr(), m as u32);
            let (mut h, mut same) = (heads.ptr(), same_before.ptr());
            let mut params = [
                arg(&mut b),
                arg(&mut s),
                arg(&mut p),
                arg(&mut pos),
                arg(&mut g),
                arg(&mut count),
                arg(&mut h),
                arg(&mut same),
            ];
            launch(device, self.step_heads, self.grid, THREADS, &mut params, m)?;
        }
        let flags = device.alloc::<u32>(m, "tie flags")?;
        {
            let (mut b, mut s) = (base, start);
            let (mut p, mut pos, mut same, mut count, mut f) = (
                perm.ptr(),
                tied.positions.ptr(),
                same_before.ptr(),
                m as u32,
                flags.ptr(),
            );
            let mut params = [
                arg(&mut b),
                arg(&mut s),
                arg(&mut p),
                arg(&mut pos),
                arg(&mut same),
                arg(&mut count),
                arg(&mut f),
            ];
            launch(device, self.next_flags, self.grid, THREADS, &mut params, m)?;
        }
        let next = self.compact(device, &flags, Some(&tied.positions), heads, m)?;
        Ok((next, groups))
    }

    /// The stable order of `m` tied rows by (group, key), or `None` when they are in
    /// order already.
    fn sort_groups(
        &self,
        device: &Device,
        sorters: &Sorters<'_>,
        keys: DeviceBuffer<u64>,
        segs: &DeviceBuffer<u32>,
        m: usize,
        groups: usize,
    ) -> CudaResult<Option<DeviceBuffer<u32>>> {
        if m / groups.max(1) <= SEGMENTED_MERGE_MAX_MEAN_ROWS {
            let sorted = sorters.segmented.sort_rows(device, &keys, segs, m)?;
            return Ok(Some(sorted.permutation));
        }
        let words = vec![sorters.segmented.segment_word(device, segs, m)?, keys];
        sorters.onesweep.sort_rows_by_words(device, words, m)
    }

    /// The positions whose flag is set among `n` (positions `0..n`, or `positions[i]`),
    /// and whether each starts a run (`heads`); `None` when no flag is set.
    fn compact(
        &self,
        device: &Device,
        flags: &DeviceBuffer<u32>,
        positions: Option<&DeviceBuffer<u32>>,
        heads: &DeviceBuffer<u8>,
        n: usize,
    ) -> CudaResult<Option<Tied>> {
        let (offsets, count) = self.exclusive_scan(device, flags, n)?;
        if count == 0 {
            return Ok(None);
        }
        let tied = Tied {
            positions: device.alloc::<u32>(count, "tied positions")?,
            starts: device.alloc::<u32>(count, "tie group starts")?,
            count,
        };
        let (mut f, mut o, mut rows) = (flags.ptr(), offsets.ptr(), n as u32);
        let (mut p, mut h) = (positions.map_or(0, |p| p.ptr()), heads.ptr());
        let (mut out, mut starts) = (tied.positions.ptr(), tied.starts.ptr());
        let mut params = [
            arg(&mut f),
            arg(&mut o),
            arg(&mut rows),
            arg(&mut p),
            arg(&mut h),
            arg(&mut out),
            arg(&mut starts),
        ];
        launch(device, self.compact, self.grid, THREADS, &mut params, n)?;
        Ok(Some(tied))
    }

    /// The exclusive prefix sums of `n` values, and their total: tile sums on the device,
    /// their offsets added up on the host (a few kilobytes each way), then each tile.
    fn exclusive_scan(
        &self,
        device: &Device,
        values: &DeviceBuffer<u32>,
        n: usize,
    ) -> CudaResult<(DeviceBuffer<u32>, usize)> {
        let tiles = n.div_ceil(SCAN_TILE);
        let sums = device.alloc::<u32>(tiles, "scan tile sums")?;
        {
            let (mut v, mut rows, mut s) = (values.ptr(), n as u32, sums.ptr());
            let mut params = [arg(&mut v), arg(&mut rows), arg(&mut s)];
            launch(
                device,
                self.block_sums,
                tiles as u32,
                THREADS,
                &mut params,
                n,
            )?;
        }
        let sums = device.download_now(&sums)?;
        let mut offsets = Vec::with_capacity(tiles);
        let mut total = 0usize;
        for sum in sums {
            offsets.push(total as u32);
            total += sum as usize;
        }
        let out = device.alloc::<u32>(n, "scan offsets")?;
        let tile_offsets = device.alloc::<u32>(tiles, "scan tile offsets")?;
        // SAFETY: `offsets` outlives the copy: the synchronize below waits for it.
        unsafe { device.upload(&tile_offsets, 0, &offsets)? };
        {
            let (mut v, mut rows, mut t, mut o) =
                (values.ptr(), n as u32, tile_offsets.ptr(), out.ptr());
            let mut params = [arg(&mut v), arg(&mut rows), arg(&mut t), arg(&mut o)];
            launch(
                device,
                self.scan_tiles,
                tiles as u32,
                THREADS,
                &mut params,
                n,
            )?;
        }
        device.synchronize()?;
        Ok((out, total))
    }
}
