//! `gpusort bench kernels`: our OneSweep against NVIDIA's CUB on the same GPU and data.
//!
//! For each variant (u32 keys, u64 keys, u32 keys + u32 values, u64 keys + u32 row ids) and
//! size, the keys are `splitmix64(seed + i)` (values `splitmix64(!seed + i)`), generated
//! identically by `benches/cub_sort.cu`, the CUB baseline this command runs (`--cub PATH`,
//! built with nvcc on the GPU host). Each timing is warm (after warm-up runs), taken with
//! CUDA events around the sort alone (a fresh device copy of the input is made before each
//! run, outside the events, so the input never sits in L2), and the median of `--reps`.

use std::process::Command;

use datafusion::common::{exec_err, DataFusionError, Result};
use gpusort::cuda::{self, CudaRuntime, DeviceBuffer, RadixKey, TransferPlain, Values};
use rayon::prelude::*;

/// One row of the table; on the command line by its CUB name (`--variants u32_pairs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    #[value(name = "u32_keys")]
    U32Keys,
    #[value(name = "u64_keys")]
    U64Keys,
    #[value(name = "u32_pairs")]
    U32Pairs,
    #[value(name = "u64_rowids")]
    U64RowIds,
}

const VARIANTS: [Variant; 4] = [
    Variant::U32Keys,
    Variant::U64Keys,
    Variant::U32Pairs,
    Variant::U64RowIds,
];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::U32Keys => "u32 keys",
            Variant::U64Keys => "u64 keys",
            Variant::U32Pairs => "u32 + u32 pairs",
            Variant::U64RowIds => "u64 key + u32 row id",
        }
    }

    /// The name `benches/cub_sort.cu` prints.
    fn cub_name(self) -> &'static str {
        match self {
            Variant::U32Keys => "u32_keys",
            Variant::U64Keys => "u64_keys",
            Variant::U32Pairs => "u32_pairs",
            Variant::U64RowIds => "u64_rowids",
        }
    }
}

/// Options of `gpusort bench kernels`.
#[derive(Debug, Clone)]
pub struct KernelBench {
    /// log2 of each size.
    pub log2_sizes: Vec<u32>,
    /// Timed runs per cell (median taken).
    pub reps: usize,
    /// Untimed runs first.
    pub warmup: usize,
    /// Data seed.
    pub seed: u64,
    /// The CUB baseline binary.
    pub cub: Option<String>,
    /// The variants to time; empty: all of them.
    pub variants: Vec<Variant>,
}

/// The generator of every benchmark's data (also in `benches/cub_sort.cu`).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn generate<T: Send>(n: usize, seed: u64, make: impl Fn(u64) -> T + Sync + Send) -> Vec<T> {
    (0..n as u64)
        .into_par_iter()
        .map(|i| make(splitmix64(seed.wrapping_add(i))))
        .collect()
}

fn cuda_err(e: cuda::CudaError) -> DataFusionError {
    e.into()
}

/// Runs the benchmark and prints the table.
pub fn run(options: &KernelBench) -> Result<()> {
    let runtime = cuda::runtime()
        .map_err(|why| DataFusionError::Execution(format!("no CUDA device: {why}")))?;
    println!(
        "device: {} (sm_{}, {} SMs); warm median of {} runs after {} warm-up; G keys/s = keys / median time",
        runtime.device.name, runtime.device.arch, runtime.device.sm_count, options.reps, options.warmup
    );
    let cub = match &options.cub {
        Some(path) => run_cub(path, options)?,
        None => Vec::new(),
    };
    println!("| variant | keys | gpusort G keys/s | CUB G keys/s | gpusort / CUB |");
    println!("| --- | --- | --- | --- | --- |");
    let chosen = VARIANTS
        .into_iter()
        .filter(|v| options.variants.is_empty() || options.variants.contains(v));
    for variant in chosen {
        for &log2 in &options.log2_sizes {
            let ours = time_variant(&runtime, variant, 1usize << log2, options)?;
            let n = (1u64 << log2) as f64;
            let ours_rate = n / ours / 1e6;
            let theirs = cub
                .iter()
                .find(|(name, l, _)| name == variant.cub_name() && *l == log2)
                .map(|(_, _, ms)| n / ms / 1e6);
            let (cub_text, ratio) = match theirs {
                Some(rate) => (format!("{rate:.2}"), format!("{:.2}×", ours_rate / rate)),
                None => ("-".to_string(), "-".to_string()),
            };
            println!(
                "| {} | 2^{log2} | {ours_rate:.2} | {cub_text} | {ratio} |",
                variant.name()
            );
        }
    }
    Ok(())
}

/// Median milliseconds of one variant at `n` keys.
fn time_variant(
    runtime: &CudaRuntime,
    variant: Variant,
    n: usize,
    options: &KernelBench,
) -> Result<f64> {
    let seed = options.seed;
    match variant {
        Variant::U32Keys => time_sort(
            runtime,
            generate(n, seed, |x| x as u32),
            None,
            false,
            options,
        ),
        Variant::U64Keys => time_sort(runtime, generate(n, seed, |x| x), None, false, options),
        Variant::U32Pairs => time_sort(
            runtime,
            generate(n, seed, |x| x as u32),
            Some(generate(n, !seed, |x| x as u32)),
            false,
            options,
        ),
        Variant::U64RowIds => time_sort(runtime, generate(n, seed, |x| x), None, true, options),
    }
}

/// `data` copied to a new device buffer through the staging buffers.
pub fn upload<T: TransferPlain>(
    device: &cuda::Device,
    staging: &mut cuda::Staging,
    data: &[T],
) -> cuda::CudaResult<DeviceBuffer<T>> {
    staging.upload::<T, _>(device, data.len(), "bench input", |s, o| {
        o.copy_from_slice(&data[s..s + o.len()])
    })
}

fn time_sort<K: RadixKey + TransferPlain>(
    runtime: &CudaRuntime,
    keys: Vec<K>,
    values: Option<Vec<u32>>,
    row_ids: bool,
    options: &KernelBench,
) -> Result<f64> {
    let n = keys.len();
    let mut times = runtime
        .with_device(|device, staging| {
            let pristine_keys = upload(device, staging, &keys)?;
            let pristine_values = values
                .as_ref()
                .map(|v| upload(device, staging, v))
                .transpose()?;
            let (start, stop) = (device.event()?, device.event()?);
            let mut times = Vec::new();
            for rep in 0..options.warmup + options.reps {
                let k = device.duplicate(&pristine_keys, "bench keys")?;
                let v = match &pristine_values {
                    Some(p) => Values::Given(device.duplicate(p, "bench values")?),
                    None if row_ids => Values::RowIds,
                    None => Values::None,
                };
                start.record(device)?;
                let sorted = runtime.onesweep.sort(device, k, v, n)?;
                stop.record(device)?;
                stop.wait()?;
                drop(sorted);
                if rep >= options.warmup {
                    times.push(stop.elapsed_ms_since(&start)? as f64);
                }
            }
            Ok(times)
        })
        .map_err(cuda_err)?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Runs the CUB baseline; returns (variant, log2 size, median ms) per line it printed.
fn run_cub(path: &str, options: &KernelBench) -> Result<Vec<(String, u32, f64)>> {
    let sizes: Vec<String> = options.log2_sizes.iter().map(|s| s.to_string()).collect();
    let output = Command::new(path)
        .arg(options.seed.to_string())
        .arg(options.reps.to_string())
        .arg(options.warmup.to_string())
        .args(&sizes)
        .output()
        .map_err(|e| DataFusionError::Execution(format!("running the CUB baseline {path}: {e}")))?;
    if !output.status.success() {
        return exec_err!(
            "the CUB baseline {path} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("cub ")) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [_, name, log2, ms] = fields[..] {
            if let (Ok(log2), Ok(ms)) = (log2.parse(), ms.parse()) {
                rows.push((name.to_string(), log2, ms));
            }
        }
    }
    Ok(rows)
}
