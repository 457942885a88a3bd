//! Launcher of `kernels/spread.cu`: the device steps of one sort spread over several
//! devices by key ranges (`multi_gpu/`): sampling a slice's keys, classifying its rows by
//! range, and the row-id arithmetic around the stable partition.

use cudarc::driver::sys::CUdeviceptr;

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, SPREAD};
use crate::cuda::tuning::{Tuning, SPREAD_THREADS as THREADS, SPREAD_TILE as TILE};

/// Key words a spread sort compares (`SPREAD_MAX_WORDS` in `spread.cu`).
pub(crate) const MAX_WORDS: usize = 8;
/// Splitters a classification takes (`SPREAD_MAX_SPLITTERS`): ranges are devices, so at
/// most 64 devices.
pub(crate) const MAX_SPLITTERS: usize = 63;

/// Ranges the fused partition takes (`SPREAD_FUSED_RANGES` in `spread.cu`); sorts over more
/// devices classify, partition and exchange in separate steps.
pub(crate) const FUSED_RANGES: usize = 8;

/// Where `spread_scatter` writes each range's rows, as `spread.cu`'s `Targets`, by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct Targets {
    word: [[CUdeviceptr; MAX_WORDS]; FUSED_RANGES],
    ids: [CUdeviceptr; FUSED_RANGES],
}

/// Where one range's rows go: its key word buffers and its row id buffer (on this device
/// or, with peer access, on another).
pub(crate) struct Target<'a> {
    /// The key words, most significant first.
    pub words: &'a [DeviceBuffer<u64>],
    /// The global row ids.
    pub ids: &'a DeviceBuffer<u32>,
}

/// Where each tile's rows of each range start in the range's target: `base[r]` plus the
/// rows of range `r` in the tiles before (`counts` tile-major, `ranges` per tile).
pub(crate) fn tile_offsets(counts: &[u32], ranges: usize, base: &[usize]) -> Vec<u32> {
    let mut next: Vec<usize> = base.to_vec();
    let mut out = Vec::with_capacity(counts.len());
    for tile in counts.chunks(ranges) {
        for (r, &count) in tile.iter().enumerate() {
            out.push(next[r] as u32);
            next[r] += count as usize;
        }
    }
    out
}

/// The rows of each range in `counts` (tile-major, `ranges` per tile).
pub(crate) fn range_totals(counts: &[u32], ranges: usize) -> Vec<usize> {
    let mut totals = vec![0usize; ranges];
    for tile in counts.chunks(ranges) {
        for (total, &count) in totals.iter_mut().zip(tile) {
            *total += count as usize;
        }
    }
    totals
}

/// The key words of a slice as `spread.cu`'s `Words` takes them, by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct Words {
    word: [CUdeviceptr; MAX_WORDS],
}

impl Words {
    fn of(words: &[DeviceBuffer<u64>]) -> CudaResult<Self> {
        if words.is_empty() || words.len() > MAX_WORDS {
            return Err(CudaError::Inconsistent(format!(
                "a spread sort takes 1 to {MAX_WORDS} key words, not {}",
                words.len()
            )));
        }
        let mut out = Words {
            word: [0; MAX_WORDS],
        };
        for (slot, word) in out.word.iter_mut().zip(words) {
            *slot = word.ptr();
        }
        Ok(out)
    }
}

/// Samples of a slice's keys: `count` rows, word `w` of sample `i` at `words[w * count + i]`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Samples {
    /// The sampled rows' key words, word-major.
    pub words: Vec<u64>,
    /// Their global row ids.
    pub rows: Vec<u32>,
}

/// The loaded spread kernels of one device.
#[derive(Debug)]
pub struct Spreader {
    _module: Module,
    sample: Kernel,
    classify: Kernel,
    row_ids: Kernel,
    gather_u32: Kernel,
    count: Kernel,
    scatter: Kernel,
    grid: u32,
}

impl Spreader {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(SPREAD, device.arch, tuning)?;
        Ok(Self {
            sample: module.kernel("spread_sample")?,
            classify: module.kernel("spread_classify")?,
            row_ids: module.kernel("spread_row_ids")?,
            gather_u32: module.kernel("spread_gather_u32")?,
            count: module.kernel("spread_count")?,
            scatter: module.kernel("spread_scatter")?,
            grid: device.sm_count * 16,
            _module: module,
        })
    }

    fn grid_for(&self, n: usize) -> u32 {
        (n.div_ceil(THREADS as usize) as u32).clamp(1, self.grid)
    }

    /// `count` evenly spaced rows of the `n` rows of `words` (global ids from `first_row`),
    /// brought back to the host.
    pub(crate) fn sample(
        &self,
        device: &Device,
        words: &[DeviceBuffer<u64>],
        n: usize,
        first_row: u32,
        count: usize,
    ) -> CudaResult<Samples> {
        let count = count.min(n);
        if count == 0 {
            return Ok(Samples::default());
        }
        let mut slice = Words::of(words)?;
        let out_words = device.alloc::<u64>(count * words.len(), "spread samples")?;
        let out_rows = device.alloc::<u32>(count, "spread sample rows")?;
        let (mut word_count, mut rows, mut first, mut samples) =
            (words.len() as u32, n as u32, first_row, count as u32);
        let (mut words_out, mut rows_out) = (out_words.ptr(), out_rows.ptr());
        let mut params = [
            arg(&mut slice),
            arg(&mut word_count),
            arg(&mut rows),
            arg(&mut first),
            arg(&mut samples),
            arg(&mut words_out),
            arg(&mut rows_out),
        ];
        let grid = count.div_ceil(THREADS as usize) as u32;
        // SAFETY (launch): every word holds `n` values; the outputs hold `count * words`
        // and `count` values; sampled rows are below `n`.
        launch(device, self.sample, grid, THREADS, &mut params, count)?;
        Ok(Samples {
            words: device.download_now(&out_words)?,
            rows: device.download_now(&out_rows)?,
        })
    }

    /// The range of each of the `n` rows of `words` against the sorted `splitters`
    /// (word-major per splitter: `splitter_words[s * words + w]`), and the rows per range.
    pub(crate) fn classify(
        &self,
        device: &Device,
        words: &[DeviceBuffer<u64>],
        n: usize,
        first_row: u32,
        splitter_words: &[u64],
        splitter_rows: &[u32],
    ) -> CudaResult<(DeviceBuffer<u32>, Vec<usize>)> {
        let splitters = splitter_rows.len();
        if splitters > MAX_SPLITTERS || splitter_words.len() != splitters * words.len() {
            return Err(CudaError::Inconsistent(format!(
                "{splitters} splitters of {} words for {} key words (at most {MAX_SPLITTERS})",
                splitter_words.len(),
                words.len()
            )));
        }
        let mut slice = Words::of(words)?;
        let ranges = device.alloc::<u32>(n, "spread ranges")?;
        let counts = device.alloc::<u32>(splitters + 1, "spread range counts")?;
        device.zero(&counts)?;
        let (split_words, split_rows) =
            self.upload_splitters(device, splitter_words, splitter_rows)?;
        let (mut word_count, mut rows, mut first, mut split_count) =
            (words.len() as u32, n as u32, first_row, splitters as u32);
        let (mut sw, mut sr, mut out, mut counted) = (
            split_words.ptr(),
            split_rows.ptr(),
            ranges.ptr(),
            counts.ptr(),
        );
        let mut params = [
            arg(&mut slice),
            arg(&mut word_count),
            arg(&mut rows),
            arg(&mut first),
            arg(&mut sw),
            arg(&mut sr),
            arg(&mut split_count),
            arg(&mut out),
            arg(&mut counted),
        ];
        if n > 0 {
            // SAFETY (launch): every word holds `n` values, `ranges` `n`, the splitter
            // buffers `splitters` entries, `counts` `splitters + 1`.
            launch(
                device,
                self.classify,
                self.grid_for(n),
                THREADS,
                &mut params,
                n,
            )?;
        }
        let counts = device.download_now(&counts)?;
        Ok((ranges, counts.into_iter().map(|c| c as usize).collect()))
    }

    /// The splitters on the device: their words and row ids.
    fn upload_splitters(
        &self,
        device: &Device,
        splitter_words: &[u64],
        splitter_rows: &[u32],
    ) -> CudaResult<(DeviceBuffer<u64>, DeviceBuffer<u32>)> {
        let words = device.alloc::<u64>(splitter_words.len().max(1), "splitter words")?;
        let rows = device.alloc::<u32>(splitter_rows.len().max(1), "splitter rows")?;
        // SAFETY: the host slices outlive the copies: the callers synchronize before
        // returning.
        unsafe {
            device.upload(&words, 0, splitter_words)?;
            device.upload(&rows, 0, splitter_rows)?;
        }
        Ok((words, rows))
    }

    /// The range of each of the `n` rows of `words` (u8) against the sorted splitters, and
    /// the rows of each range in each tile of `SPREAD_TILE` rows (tile-major, brought back).
    pub(crate) fn count_tiles(
        &self,
        device: &Device,
        words: &[DeviceBuffer<u64>],
        n: usize,
        first_row: u32,
        splitter_words: &[u64],
        splitter_rows: &[u32],
    ) -> CudaResult<(DeviceBuffer<u8>, Vec<u32>)> {
        let splitters = splitter_rows.len();
        if splitters >= FUSED_RANGES || splitter_words.len() != splitters * words.len() {
            return Err(CudaError::Inconsistent(format!(
                "{splitters} splitters of {} words for {} key words (fewer than {FUSED_RANGES})",
                splitter_words.len(),
                words.len()
            )));
        }
        let mut slice = Words::of(words)?;
        let tiles = n.div_ceil(TILE);
        let ranges = device.alloc::<u8>(n.max(1), "spread ranges")?;
        let counts = device.alloc::<u32>((tiles * (splitters + 1)).max(1), "spread tile counts")?;
        let (split_words, split_rows) =
            self.upload_splitters(device, splitter_words, splitter_rows)?;
        let (mut word_count, mut rows, mut first, mut split_count) =
            (words.len() as u32, n as u32, first_row, splitters as u32);
        let (mut sw, mut sr, mut out, mut counted) = (
            split_words.ptr(),
            split_rows.ptr(),
            ranges.ptr(),
            counts.ptr(),
        );
        let mut params = [
            arg(&mut slice),
            arg(&mut word_count),
            arg(&mut rows),
            arg(&mut first),
            arg(&mut sw),
            arg(&mut sr),
            arg(&mut split_count),
            arg(&mut out),
            arg(&mut counted),
        ];
        if tiles == 0 {
            return Ok((ranges, Vec::new()));
        }
        // SAFETY (launch): every word holds `n` values, `ranges` `n`, the splitter buffers
        // `splitters` entries, `counts` `tiles * (splitters + 1)`.
        launch(device, self.count, tiles as u32, THREADS, &mut params, n)?;
        let mut tile_counts = device.download_now(&counts)?;
        tile_counts.truncate(tiles * (splitters + 1));
        Ok((ranges, tile_counts))
    }

    /// Writes each of the `n` rows of `words` (global ids from `first_row`) into its
    /// range's target, `tile_offsets[t * ranges + r]` the place of tile `t`'s first row of
    /// range `r` there; stable within each range. The caller synchronizes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scatter(
        &self,
        device: &Device,
        words: &[DeviceBuffer<u64>],
        n: usize,
        first_row: u32,
        ranges: &DeviceBuffer<u8>,
        tile_offsets: &[u32],
        targets: &[Target<'_>],
    ) -> CudaResult<()> {
        let count = targets.len();
        let tiles = n.div_ceil(TILE);
        if count == 0 || count > FUSED_RANGES || tile_offsets.len() != tiles * count {
            return Err(CudaError::Inconsistent(format!(
                "a scatter of {tiles} tiles into {count} ranges with {} offsets",
                tile_offsets.len()
            )));
        }
        if tiles == 0 {
            return Ok(());
        }
        let mut slice = Words::of(words)?;
        let mut into = Targets {
            word: [[0; MAX_WORDS]; FUSED_RANGES],
            ids: [0; FUSED_RANGES],
        };
        for (r, target) in targets.iter().enumerate() {
            if target.words.len() != words.len() {
                return Err(CudaError::Inconsistent(
                    "a scatter target with other key words".to_string(),
                ));
            }
            for (w, word) in target.words.iter().enumerate() {
                into.word[r][w] = word.ptr();
            }
            into.ids[r] = target.ids.ptr();
        }
        let offsets = device.alloc::<u32>(tile_offsets.len(), "spread tile offsets")?;
        // SAFETY: `tile_offsets` outlives the copy: the caller synchronizes before the
        // slice goes (it borrows it for this call, and the launch below is queued after).
        unsafe { device.upload(&offsets, 0, tile_offsets)? };
        device.synchronize()?;
        let (mut word_count, mut rows, mut first, mut ranges_count) =
            (words.len() as u32, n as u32, first_row, count as u32);
        let (mut of, mut at) = (ranges.ptr(), offsets.ptr());
        let mut params = [
            arg(&mut slice),
            arg(&mut word_count),
            arg(&mut rows),
            arg(&mut first),
            arg(&mut of),
            arg(&mut at),
            arg(&mut ranges_count),
            arg(&mut into),
        ];
        // SAFETY (launch): every word and `ranges` hold `n` values, `offsets` one per tile
        // and range; every row's place lies within its target (the offsets come from the
        // counts of every device, and each target holds its range's rows).
        launch(device, self.scatter, tiles as u32, THREADS, &mut params, n)
    }

    /// `first_row + order[i]` for each of the `n` rows (`first_row + i` without an order).
    pub(crate) fn row_ids(
        &self,
        device: &Device,
        order: Option<&DeviceBuffer<u32>>,
        first_row: u32,
        n: usize,
    ) -> CudaResult<DeviceBuffer<u32>> {
        let out = device.alloc::<u32>(n, "global row ids")?;
        if n == 0 {
            return Ok(out);
        }
        let (mut src, mut first, mut rows, mut dst) =
            (order.map_or(0, |o| o.ptr()), first_row, n as u32, out.ptr());
        let mut params = [
            arg(&mut src),
            arg(&mut first),
            arg(&mut rows),
            arg(&mut dst),
        ];
        // SAFETY (launch): `order` (when given) and `out` hold `n` values.
        launch(
            device,
            self.row_ids,
            self.grid_for(n),
            THREADS,
            &mut params,
            n,
        )?;
        Ok(out)
    }

    /// `src[order[i]]` for each of the `n` rows.
    pub(crate) fn gather_u32(
        &self,
        device: &Device,
        src: &DeviceBuffer<u32>,
        order: &DeviceBuffer<u32>,
        n: usize,
    ) -> CudaResult<DeviceBuffer<u32>> {
        let out = device.alloc::<u32>(n, "gathered row ids")?;
        if n == 0 {
            return Ok(out);
        }
        let (mut from, mut by, mut rows, mut dst) = (src.ptr(), order.ptr(), n as u32, out.ptr());
        let mut params = [arg(&mut from), arg(&mut by), arg(&mut rows), arg(&mut dst)];
        // SAFETY (launch): `src`, `order` and `out` hold `n` values; `order` is a
        // permutation of 0..n.
        launch(
            device,
            self.gather_u32,
            self.grid_for(n),
            THREADS,
            &mut params,
            n,
        )?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_offsets_follow_each_range_from_its_base() {
        // Two tiles of two ranges: tile 0 has 3 and 1 rows, tile 1 has 2 and 4.
        let counts = [3, 1, 2, 4];
        assert_eq!(tile_offsets(&counts, 2, &[10, 0]), vec![10, 0, 13, 1]);
        assert_eq!(range_totals(&counts, 2), vec![5, 5]);
        assert!(tile_offsets(&[], 2, &[0, 0]).is_empty());
    }
}
