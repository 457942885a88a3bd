//! Launcher of `kernels/onesweep.cu`: the OneSweep LSD radix sort on the device.
//!
//! ```text
//!  keys (u32 or u64 words, on the device)
//!   │ onesweep_histogram_*   one read: 256-bucket histograms of every digit of every word
//!   ▼ (8 KiB per word back to the host: bucket starts, and which digits are constant)
//!  for word = least significant .. most significant:
//!      keys = word[perm]                       (onesweep_gather_u64; not for the first word)
//!      for each digit that is not constant:    (a constant digit moves nothing: skipped)
//!          onesweep_pass_*   rank in shared memory → look-back → scatter (keys, row ids)
//! ```
//!
//! The first pass generates the row ids itself, so only keys cross PCIe. Tuning constants
//! live in [`PassTuning`] and reach the kernels as `-D` options, so the launch arithmetic
//! here and the kernels cannot disagree.

use std::sync::OnceLock;

use cudarc::driver::result;
use cudarc::driver::sys::{CUdeviceptr, CUfunction_attribute};

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::module::{arg, cached_cubin, launch, launch_shared, Kernel, Module, ONESWEEP};

const RADIX: usize = 256;
/// Keys per tile at most: the pass keeps tile positions in 16 bits.
const MAX_TILE: u32 = 1 << 16;
/// Tile slots of the circular look-back buffer (a power of two): 8 MiB of state, whatever
/// the input size.
pub const LOOKBACK_SLOTS: u32 = 4096;
/// Tile indices have 20 bits in a look-back tag, epochs the 10 above them.
const MAX_TILES: u64 = 1 << 20;
const MAX_EPOCH: u32 = (1 << 10) - 1;
const HISTOGRAM_THREADS: u32 = 512;
const GATHER_THREADS: u32 = 256;

/// Block shape of the pass kernel for one key width and value mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassTuning {
    /// Threads per block (at least 256: one per digit).
    pub threads: u32,
    /// Keys per thread.
    pub items: u32,
    /// Blocks that must fit one SM at once: caps the kernel's registers (the compiler's
    /// launch bound); it changes no launch arithmetic.
    pub blocks: u32,
}

impl PassTuning {
    const fn new(threads: u32, items: u32, blocks: u32) -> Self {
        Self {
            threads,
            items,
            blocks,
        }
    }

    /// Keys per tile (one block's share).
    pub const fn tile(self) -> u32 {
        self.threads * self.items
    }

    /// Dynamic shared memory of one pass block, laid out as `onesweep_pass` in
    /// `onesweep.cu` uses it: the tile's keys (a pass with values puts them in the same
    /// bytes once the keys have left), then per-warp digit offsets, per-warp digit group
    /// bits, digit starts and bases, warp sums and the tile index.
    pub const fn shared_bytes(self, key_bytes: u32) -> u32 {
        let warps = self.threads / 32;
        key_bytes * self.tile() + 4 * (2 * warps * RADIX as u32 + 2 * RADIX as u32 + warps + 1)
    }

    /// `THREADSxITEMSxBLOCKS` from the environment variable `var` (a tuning run's
    /// override), else `default`.
    fn from_env(var: &str, default: Self) -> Self {
        std::env::var(var)
            .ok()
            .and_then(|v| Self::parse(&v))
            .unwrap_or(default)
    }

    /// `THREADSxITEMSxBLOCKS`, when every part is in range.
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('x').map(|p| p.trim().parse::<u32>().ok());
        let tuning = Self::new(parts.next()??, parts.next()??, parts.next()??);
        let valid = parts.next().is_none()
            && tuning.threads >= 256
            && tuning.threads % 32 == 0
            && (1..=64).contains(&tuning.items)
            && tuning.tile() <= MAX_TILE
            && (1..=8).contains(&tuning.blocks);
        valid.then_some(tuning)
    }
}

/// What a pass moves besides the keys; indexes the kernel and tuning tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassMode {
    /// Keys only.
    Keys = 0,
    /// Keys and given u32 values.
    Pairs = 1,
    /// Keys and row ids the pass generates (first pass of a row sort).
    RowIds = 2,
}

impl PassMode {
    /// Every mode, in table order.
    pub const ALL: [PassMode; 3] = [PassMode::Keys, PassMode::Pairs, PassMode::RowIds];

    fn label(self) -> &'static str {
        match self {
            PassMode::Keys => "KEYS",
            PassMode::Pairs => "PAIRS",
            PassMode::RowIds => "ROWIDS",
        }
    }
}

/// Measured best block shapes, `[mode]` as [`PassMode`] (docs/performance.md: keys-only
/// passes 2026-11-23 on an H200, passes with values 2026-11-24 on an H100, each confirmed on
/// the other). Passes with values take the largest tiles: their values reuse the keys'
/// shared memory, and longer runs of one digit per tile coalesce their two scatters better;
/// they hold fewer blocks per SM to keep the registers that loading the values early needs.
const U32_TUNING: [PassTuning; 3] = [
    PassTuning::new(384, 28, 3),
    PassTuning::new(256, 48, 2),
    PassTuning::new(256, 48, 2),
];
const U64_TUNING: [PassTuning; 3] = [
    PassTuning::new(384, 23, 2),
    PassTuning::new(512, 32, 1),
    PassTuning::new(512, 32, 1),
];

/// The tuning of `table`, each entry overridable by `GPUSORT_TUNE_<KEY>_<MODE>`.
fn tuning_table(key: &str, table: [PassTuning; 3]) -> [PassTuning; 3] {
    PassMode::ALL.map(|mode| {
        let var = format!("GPUSORT_TUNE_{key}_{}", mode.label());
        PassTuning::from_env(&var, table[mode as usize])
    })
}

/// The tuning of one key width, by mode.
type TuningOf = fn(PassMode) -> PassTuning;

/// A key word type the radix sort handles.
pub trait RadixKey: Copy + Default + Send + Sync + 'static {
    /// 8-bit digits per key.
    const DIGITS: usize;
    /// Row of the kernel tables: 0 for u32, 1 for u64.
    const INDEX: usize;
    /// Pass kernel shape for `mode`.
    fn tuning(mode: PassMode) -> PassTuning;
    /// The smallest tile over all modes.
    fn min_tile() -> u32 {
        PassMode::ALL
            .map(|m| Self::tuning(m).tile())
            .into_iter()
            .min()
            .unwrap_or(1)
    }
}

impl RadixKey for u32 {
    const DIGITS: usize = 4;
    const INDEX: usize = 0;
    fn tuning(mode: PassMode) -> PassTuning {
        static TABLE: OnceLock<[PassTuning; 3]> = OnceLock::new();
        TABLE.get_or_init(|| tuning_table("U32", U32_TUNING))[mode as usize]
    }
}

impl RadixKey for u64 {
    const DIGITS: usize = 8;
    const INDEX: usize = 1;
    fn tuning(mode: PassMode) -> PassTuning {
        static TABLE: OnceLock<[PassTuning; 3]> = OnceLock::new();
        TABLE.get_or_init(|| tuning_table("U64", U64_TUNING))[mode as usize]
    }
}

/// The `-D` options that carry the tuning table into `onesweep.cu`.
pub fn defines() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for mode in PassMode::ALL {
        for (key, tuning) in [("U32", u32::tuning(mode)), ("U64", u64::tuning(mode))] {
            let prefix = format!("ONESWEEP_{key}_{}", mode.label());
            out.push((format!("{prefix}_THREADS"), tuning.threads.to_string()));
            out.push((format!("{prefix}_ITEMS"), tuning.items.to_string()));
            out.push((format!("{prefix}_BLOCKS"), tuning.blocks.to_string()));
        }
    }
    out.push(("HISTOGRAM_THREADS".into(), HISTOGRAM_THREADS.to_string()));
    out
}

/// Where the values of a sort come from.
#[derive(Debug)]
pub enum Values {
    /// Keys only.
    None,
    /// Given values, moved with their keys.
    Given(DeviceBuffer<u32>),
    /// Row ids 0..n, generated by the first pass.
    RowIds,
}

/// The output of [`Onesweep::sort`].
#[derive(Debug)]
pub struct Sorted<K> {
    /// The sorted keys.
    pub keys: DeviceBuffer<K>,
    /// The values in key order; `None` for keys only, and for row ids when no pass ran
    /// (then the order is the identity).
    pub values: Option<DeviceBuffer<u32>>,
    /// Digit passes that ran.
    pub passes: u32,
}

/// The loaded OneSweep kernels of one device.
#[derive(Debug)]
pub struct Onesweep {
    _module: Module,
    histogram: [Kernel; 2],
    /// `[key][mode]`, mode 0 keys only, 1 given values, 2 row ids.
    pass: [[Kernel; 3]; 2],
    gather_u64: Kernel,
    sm_count: u32,
}

/// Look-back state of one sort: the circular buffer, one tile counter per pass, the epoch.
struct PassState {
    lookback: DeviceBuffer<u64>,
    counters: DeviceBuffer<u32>,
    epoch: u32,
}

impl PassState {
    fn new(device: &Device) -> CudaResult<Self> {
        let lookback = device.alloc::<u64>(LOOKBACK_SLOTS as usize * RADIX, "look-back state")?;
        let counters = device.alloc::<u32>(MAX_EPOCH as usize + 1, "tile counters")?;
        device.zero(&lookback)?;
        device.zero(&counters)?;
        Ok(Self {
            lookback,
            counters,
            epoch: 0,
        })
    }

    /// The epoch of the next pass; after the last one the state is cleared and reused.
    fn next_epoch(&mut self, device: &Device) -> CudaResult<u32> {
        if self.epoch == MAX_EPOCH {
            device.zero(&self.lookback)?;
            device.zero(&self.counters)?;
            self.epoch = 0;
        }
        self.epoch += 1;
        Ok(self.epoch)
    }
}

/// Histograms of one key word: `DIGITS` arrays of 256 counts.
type WordHistograms = Vec<[u32; RADIX]>;

impl Onesweep {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device) -> CudaResult<Self> {
        let cubin = cached_cubin(ONESWEEP, device.arch, &defines())?;
        let module = Module::load(ONESWEEP, &cubin)?;
        let k = |name| module.kernel(name);
        let loaded = Self {
            histogram: [k("onesweep_histogram_u32")?, k("onesweep_histogram_u64")?],
            pass: [
                [
                    k("onesweep_pass_u32_keys")?,
                    k("onesweep_pass_u32_pairs")?,
                    k("onesweep_pass_u32_rowids")?,
                ],
                [
                    k("onesweep_pass_u64_keys")?,
                    k("onesweep_pass_u64_pairs")?,
                    k("onesweep_pass_u64_rowids")?,
                ],
            ],
            gather_u64: k("onesweep_gather_u64")?,
            sm_count: device.sm_count,
            _module: module,
        };
        loaded.check_block_shapes()?;
        Ok(loaded)
    }

    /// Every pass kernel can run its tuned block size on this device (registers allow it)
    /// and gets the dynamic shared memory its tile needs.
    fn check_block_shapes(&self) -> CudaResult<()> {
        let rows: [(TuningOf, u32); 2] = [(u32::tuning, 4), (u64::tuning, 8)];
        for (row, (tuning_of, key_bytes)) in rows.into_iter().enumerate() {
            for (mode, kernel) in PassMode::ALL.into_iter().zip(self.pass[row]) {
                let tuning = tuning_of(mode);
                // SAFETY: a function handle of the loaded module.
                let most = unsafe {
                    result::function::get_function_attribute(
                        kernel.function,
                        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                    )
                }
                .map_err(|e| CudaError::driver("cuFuncGetAttribute", e))?;
                if (most as u32) < tuning.threads {
                    return Err(CudaError::Unavailable(format!(
                        "{} runs at most {most} threads per block on this device, tuned for {}",
                        kernel.name, tuning.threads
                    )));
                }
                let shared = tuning.shared_bytes(key_bytes);
                // SAFETY: as above; the driver checks the size against the device's limit.
                unsafe {
                    result::function::set_function_attribute(
                        kernel.function,
                        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        shared as i32,
                    )
                }
                .map_err(|_| {
                    CudaError::Unavailable(format!(
                        "{} needs {shared} bytes of shared memory per block, more than this device gives",
                        kernel.name
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// Sorts `n` keys (and values) stably by all their bits.
    pub fn sort<K: RadixKey>(
        &self,
        device: &Device,
        keys: DeviceBuffer<K>,
        values: Values,
        n: usize,
    ) -> CudaResult<Sorted<K>> {
        check_size::<K>(n)?;
        let histograms = self.histograms(device, &[&keys], n)?;
        let mut state = PassState::new(device)?;
        let mut run = PassRun::new(keys, values);
        self.run_word_passes(device, &mut run, &histograms[0], n, &mut state)?;
        Ok(run.finish())
    }

    /// The stable sort permutation of `n` rows keyed by `words` (word 0 most significant).
    /// `None` means the identity (every key equal).
    pub fn sort_rows_by_words(
        &self,
        device: &Device,
        words: Vec<DeviceBuffer<u64>>,
        n: usize,
    ) -> CudaResult<Option<DeviceBuffer<u32>>> {
        check_size::<u64>(n)?;
        let histograms = self.histograms(device, &words.iter().collect::<Vec<_>>(), n)?;
        let mut state = PassState::new(device)?;
        let mut perm: Option<DeviceBuffer<u32>> = None;
        for (word, histogram) in words.into_iter().zip(&histograms).rev() {
            if live_digits(histogram, n).is_empty() {
                continue;
            }
            let keys = match &perm {
                None => word,
                Some(perm) => self.gather(device, &word, perm, n)?,
            };
            let values = perm.take().map_or(Values::RowIds, Values::Given);
            let mut run = PassRun::new(keys, values);
            self.run_word_passes(device, &mut run, histogram, n, &mut state)?;
            perm = run.finish().values;
        }
        Ok(perm)
    }

    /// The stable sort permutation of `n` rows keyed by one u32 each (`None`: identity).
    pub fn sort_rows_u32(
        &self,
        device: &Device,
        keys: DeviceBuffer<u32>,
        n: usize,
    ) -> CudaResult<Option<DeviceBuffer<u32>>> {
        Ok(self.sort(device, keys, Values::RowIds, n)?.values)
    }

    /// One read of each word: the histograms of all its digits.
    fn histograms<K: RadixKey>(
        &self,
        device: &Device,
        words: &[&DeviceBuffer<K>],
        n: usize,
    ) -> CudaResult<Vec<WordHistograms>> {
        let per_word = K::DIGITS * RADIX;
        let counts = device.alloc::<u32>(words.len() * per_word, "digit histograms")?;
        device.zero(&counts)?;
        let grid = (n.div_ceil(HISTOGRAM_THREADS as usize) as u32).clamp(1, self.sm_count * 4);
        for (w, word) in words.iter().enumerate() {
            let mut keys = word.ptr();
            let mut rows = n as u32;
            let mut out: CUdeviceptr = counts.ptr() + (w * per_word * 4) as u64;
            let mut params = [arg(&mut keys), arg(&mut rows), arg(&mut out)];
            launch(
                device,
                self.histogram[K::INDEX],
                grid,
                HISTOGRAM_THREADS,
                &mut params,
                n,
            )?;
        }
        let flat = device.download_now(&counts)?;
        Ok(flat
            .chunks(per_word)
            .map(|word| {
                word.chunks(RADIX)
                    .map(|d| d.try_into().expect("256 counts"))
                    .collect()
            })
            .collect())
    }

    /// Runs the live digit passes of one word over `run`.
    fn run_word_passes<K: RadixKey>(
        &self,
        device: &Device,
        run: &mut PassRun<K>,
        histograms: &WordHistograms,
        n: usize,
        state: &mut PassState,
    ) -> CudaResult<()> {
        let digits = live_digits(histograms, n);
        if digits.is_empty() {
            return Ok(());
        }
        let starts: Vec<u32> = histograms.iter().flat_map(bucket_starts).collect();
        let bucket_starts = device.alloc::<u32>(starts.len(), "bucket starts")?;
        // SAFETY: `starts` outlives the copy: `synchronize` below waits for it.
        unsafe { device.upload(&bucket_starts, 0, &starts)? };
        for digit in digits {
            let epoch = state.next_epoch(device)?;
            self.pass(device, run, n, digit, &bucket_starts, state, epoch)?;
        }
        device.synchronize()
    }

    #[allow(clippy::too_many_arguments)]
    fn pass<K: RadixKey>(
        &self,
        device: &Device,
        run: &mut PassRun<K>,
        n: usize,
        digit: usize,
        bucket_starts: &DeviceBuffer<u32>,
        state: &PassState,
        epoch: u32,
    ) -> CudaResult<()> {
        let mode = run.prepare_values(device, n)?;
        let kernel = self.pass[K::INDEX][mode];
        let tuning = K::tuning(PassMode::ALL[mode]);
        let tiles = n.div_ceil(tuning.tile() as usize) as u32;
        let shared = tuning.shared_bytes(std::mem::size_of::<K>() as u32);
        let (mut keys_in, mut keys_out) = (run.keys.ptr(), run.keys_alt(device, n)?.ptr());
        let (mut vals_in, mut vals_out) = run.value_ptrs();
        let mut rows = n as u32;
        let mut shift = (digit * 8) as u32;
        let mut starts: CUdeviceptr = bucket_starts.ptr() + (digit * RADIX * 4) as u64;
        let mut lookback = state.lookback.ptr();
        let mut slot_mask = LOOKBACK_SLOTS - 1;
        let mut counter: CUdeviceptr = state.counters.ptr() + (epoch as u64) * 4;
        let mut epoch = epoch;
        let mut params = [
            arg(&mut keys_in),
            arg(&mut keys_out),
            arg(&mut vals_in),
            arg(&mut vals_out),
            arg(&mut rows),
            arg(&mut shift),
            arg(&mut starts),
            arg(&mut lookback),
            arg(&mut slot_mask),
            arg(&mut counter),
            arg(&mut epoch),
        ];
        launch_shared(
            device,
            kernel,
            tiles,
            tuning.threads,
            shared,
            &mut params,
            n,
        )?;
        run.swap();
        Ok(())
    }

    /// `word[perm[i]]` for every row: the next word in the current order.
    fn gather(
        &self,
        device: &Device,
        word: &DeviceBuffer<u64>,
        perm: &DeviceBuffer<u32>,
        n: usize,
    ) -> CudaResult<DeviceBuffer<u64>> {
        let out = device.alloc::<u64>(n, "gathered key word")?;
        let (mut src, mut order, mut dst, mut rows) = (word.ptr(), perm.ptr(), out.ptr(), n as u32);
        let mut params = [
            arg(&mut src),
            arg(&mut order),
            arg(&mut dst),
            arg(&mut rows),
        ];
        let grid = (n.div_ceil(GATHER_THREADS as usize) as u32).clamp(1, self.sm_count * 16);
        launch(
            device,
            self.gather_u64,
            grid,
            GATHER_THREADS,
            &mut params,
            n,
        )?;
        Ok(out)
    }
}

/// Keys and values of one sort, double-buffered across passes.
struct PassRun<K> {
    keys: DeviceBuffer<K>,
    keys_alt: Option<DeviceBuffer<K>>,
    values: Values,
    values_alt: Option<DeviceBuffer<u32>>,
    passes: u32,
}

impl<K: RadixKey> PassRun<K> {
    fn new(keys: DeviceBuffer<K>, values: Values) -> Self {
        Self {
            keys,
            keys_alt: None,
            values,
            values_alt: None,
            passes: 0,
        }
    }

    fn keys_alt(&mut self, device: &Device, n: usize) -> CudaResult<&DeviceBuffer<K>> {
        if self.keys_alt.is_none() {
            self.keys_alt = Some(device.alloc::<K>(n, "radix key buffer")?);
        }
        Ok(self.keys_alt.as_ref().expect("allocated above"))
    }

    /// The kernel mode of the next pass (0 keys, 1 values, 2 row ids), with the value
    /// output buffer allocated.
    fn prepare_values(&mut self, device: &Device, n: usize) -> CudaResult<usize> {
        if matches!(self.values, Values::None) {
            return Ok(0);
        }
        if self.values_alt.is_none() {
            self.values_alt = Some(device.alloc::<u32>(n, "radix value buffer")?);
        }
        Ok(if matches!(self.values, Values::RowIds) {
            2
        } else {
            1
        })
    }

    fn value_ptrs(&self) -> (CUdeviceptr, CUdeviceptr) {
        let input = match &self.values {
            Values::Given(v) => v.ptr(),
            _ => 0,
        };
        (input, self.values_alt.as_ref().map_or(0, |v| v.ptr()))
    }

    /// After a pass: its outputs become the next pass's inputs.
    fn swap(&mut self) {
        let alt = self
            .keys_alt
            .take()
            .expect("a pass wrote the alternate keys");
        self.keys_alt = Some(std::mem::replace(&mut self.keys, alt));
        if let Some(out) = self.values_alt.take() {
            match std::mem::replace(&mut self.values, Values::Given(out)) {
                Values::Given(old) => self.values_alt = Some(old),
                Values::RowIds | Values::None => {}
            }
        }
        self.passes += 1;
    }

    fn finish(self) -> Sorted<K> {
        Sorted {
            keys: self.keys,
            values: match self.values {
                Values::Given(v) => Some(v),
                Values::RowIds | Values::None => None,
            },
            passes: self.passes,
        }
    }
}

fn check_size<K: RadixKey>(n: usize) -> CudaResult<()> {
    let max = (MAX_TILES * K::min_tile() as u64 - 1).min(u32::MAX as u64) as usize;
    if n > max {
        return Err(CudaError::TooLarge { rows: n, max });
    }
    Ok(())
}

/// Digits whose histogram does not put every key in one bucket.
fn live_digits(histograms: &WordHistograms, n: usize) -> Vec<usize> {
    histograms
        .iter()
        .enumerate()
        .filter(|(_, h)| !h.iter().any(|&c| c as usize == n))
        .map(|(d, _)| d)
        .collect()
}

/// Exclusive prefix sums of one digit's histogram: where each bucket starts.
fn bucket_starts(histogram: &[u32; RADIX]) -> [u32; RADIX] {
    let mut starts = [0u32; RADIX];
    let mut sum = 0u32;
    for (start, count) in starts.iter_mut().zip(histogram) {
        *start = sum;
        sum = sum.wrapping_add(*count);
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_digits_are_not_live() {
        let mut h = vec![[0u32; RADIX]; 4];
        h[0][3] = 10;
        h[1][0] = 4;
        h[1][9] = 6;
        h[2][255] = 10;
        h[3][1] = 10;
        assert_eq!(live_digits(&h, 10), vec![1]);
    }

    #[test]
    fn bucket_starts_are_exclusive_sums() {
        let mut h = [0u32; RADIX];
        h[0] = 2;
        h[2] = 3;
        h[255] = 1;
        let s = bucket_starts(&h);
        assert_eq!((s[0], s[1], s[2], s[3], s[255]), (0, 2, 2, 5, 5));
    }

    fn assert_size_limit<K: RadixKey>() {
        let tiles_limit = MAX_TILES * K::min_tile() as u64 - 1;
        let max = tiles_limit.min(u32::MAX as u64) as usize;
        assert!(check_size::<K>(max).is_ok());
        assert!(matches!(
            check_size::<K>(max + 1),
            Err(CudaError::TooLarge { rows, max: m }) if rows == max + 1 && m == max
        ));
    }

    #[test]
    fn size_limit_follows_tiles_and_row_ids() {
        assert_size_limit::<u32>();
        assert_size_limit::<u64>();
    }

    #[test]
    fn tuning_overrides_parse_and_reject_bad_shapes() {
        assert_eq!(
            PassTuning::parse("384x28x3"),
            Some(PassTuning::new(384, 28, 3))
        );
        assert_eq!(
            PassTuning::parse(" 512 x 16 x 2 "),
            Some(PassTuning::new(512, 16, 2))
        );
        for bad in [
            "384x28",
            "384x28x3x1",
            "200x16x2",
            "300x16x2",
            "384x0x3",
            "384x65x3",
            "1056x64x1",
            "384x28x0",
            "384x28x9",
            "axbxc",
        ] {
            assert_eq!(PassTuning::parse(bad), None, "{bad}");
        }
    }
}
