//! Launcher of `kernels/spread.cu`: the device steps of one sort spread over several
//! devices by key ranges (`multi_gpu/`): sampling a slice's keys, classifying its rows by
//! range, and the row-id arithmetic around the stable partition.

use cudarc::driver::sys::CUdeviceptr;

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, SPREAD};
use crate::cuda::tuning::{Tuning, SPREAD_THREADS as THREADS};

/// Key words a spread sort compares (`SPREAD_MAX_WORDS` in `spread.cu`).
pub(crate) const MAX_WORDS: usize = 8;
/// Splitters a classification takes (`SPREAD_MAX_SPLITTERS`): ranges are devices, so at
/// most 64 devices.
pub(crate) const MAX_SPLITTERS: usize = 63;

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
        let split_words = device.alloc::<u64>(splitter_words.len().max(1), "splitter words")?;
        let split_rows = device.alloc::<u32>(splitters.max(1), "splitter rows")?;
        // SAFETY: the host slices outlive the copies: `download_now` below synchronizes.
        unsafe {
            device.upload(&split_words, 0, splitter_words)?;
            device.upload(&split_rows, 0, splitter_rows)?;
        }
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
