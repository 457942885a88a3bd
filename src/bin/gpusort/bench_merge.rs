//! `gpusort bench merge`: the segmented and locality sorts against CUB on the same GPU and
//! data (`benches/cub_merge.cu`, built with nvcc on the GPU host, `--cub PATH`).
//!
//! Segmented: 2^N random u64 keys (`splitmix64(seed + i)`) with row ids in segments of
//! 16 … 1 000 000 rows; gpusort as the product runs it (`auto`: the segment-tile sort
//! (standard or large tile) when every segment fits one, else segment indices from the segment starts, then the merge
//! sort or the composite radix sort by mean length), and each of its paths forced; CUB's
//! stable segmented sort and segmented radix sort.
//! Locality: nearly sorted u32 and u64 keys (noise 0, 64, 4 096: see `nearly_sorted`) with
//! row ids; gpusort `auto` (probe, then its choice), the locality sort and OneSweep forced;
//! CUB's radix sort. Warm medians with CUDA events around the sort alone, each run on a
//! fresh device copy of the input.

use std::process::Command;

use datafusion::common::{exec_err, DataFusionError, Result};
use gpusort::cuda::{self, CudaRuntime, DeviceKeys, SegmentTile};
use gpusort::sort::Segments;
use gpusort::AlgorithmChoice;

use crate::bench::{generate, splitmix64, upload};

/// Options of `gpusort bench merge`.
#[derive(Debug, Clone)]
pub struct MergeBench {
    /// log2 of the number of keys.
    pub log2_size: u32,
    /// Timed runs per cell (median taken).
    pub reps: usize,
    /// Untimed runs first.
    pub warmup: usize,
    /// Data seed.
    pub seed: u64,
    /// The CUB baseline binary.
    pub cub: Option<String>,
}

const SEGMENT_LENGTHS: [usize; 6] = [16, 100, 113, 1000, 10_000, 1_000_000];
const NOISES: [u64; 3] = [0, 64, 4096];

/// Row `i` of the nearly sorted data (also in `benches/cub_merge.cu`).
fn nearly_sorted(i: u64, seed: u64, noise: u64, bits: u32) -> u64 {
    let base = 16 * i + splitmix64(seed.wrapping_add(i)) % (16 * noise + 1);
    if bits == 32 {
        base
    } else {
        (base << 24) | (splitmix64((!seed).wrapping_add(i)) & 0xff_ffff)
    }
}

/// How gpusort sorts in one timed cell.
#[derive(Debug, Clone, Copy)]
enum Path {
    /// As the product does (`algorithm = auto`).
    Auto,
    /// The segment-tile sort forced with this tile (segments of at most one tile).
    Tiles(SegmentTile),
    /// The segment-tile sort forced, its segment starts uploaded before the timed region
    /// (as CUB's offsets are).
    TilesStartsOnDevice(SegmentTile),
    /// Only the upload of the segment starts (as the segment-tile sort sends them).
    StartsUpload,
    /// A staged upload of one byte per segment, filled with a constant: the copy and the
    /// staging's overhead without the lengths' computation.
    StagedBytes,
    /// The merge sort forced (locality sort, or the segmented merge sort).
    Merge,
    /// OneSweep forced (with segments: the composite radix sort).
    Radix,
}

/// Runs the benchmark and prints the tables.
pub fn run(options: &MergeBench) -> Result<()> {
    let runtime = cuda::runtime()
        .map_err(|why| DataFusionError::Execution(format!("no CUDA device: {why}")))?;
    let n = 1usize << options.log2_size;
    println!(
        "device: {} (sm_{}, {} SMs); 2^{} keys with u32 row ids; warm median of {} runs after {} warm-up; ms",
        runtime.device.name,
        runtime.device.arch,
        runtime.device.sm_count,
        options.log2_size,
        options.reps,
        options.warmup
    );
    let cub = match &options.cub {
        Some(path) => run_cub(path, options)?,
        None => Vec::new(),
    };
    let cub_ms = |prefix: &str| -> Vec<f64> {
        cub.iter()
            .find(|l| l.starts_with(prefix))
            .map(|l| {
                l[prefix.len()..]
                    .split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    println!();
    println!("| segment rows | gpusort auto (path) | segment tiles forced (tile) | segment tiles, starts on device | starts upload alone | staged bytes, constant fill | large tile forced | merge forced | composite radix forced | CUB stable segmented | CUB segmented radix | auto vs best CUB |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let random = generate(n, options.seed, |x| x);
    for length in SEGMENT_LENGTHS {
        let starts: Vec<u32> = (0..n).step_by(length).map(|s| s as u32).collect();
        let segments = Segments::new(starts, n);
        let chosen = runtime.segmented.tiles.tile_for(8, &segments);
        let path = match chosen {
            Some(SegmentTile::Standard) => "tiles",
            Some(SegmentTile::Large) => "large tiles",
            None if segments.mean_rows() <= cuda::SEGMENTED_MERGE_MAX_MEAN_ROWS => "merge",
            None => "radix",
        };
        let longest = segments.longest_rows();
        let fits_large = longest <= runtime.segmented.tiles.tile_rows(SegmentTile::Large);
        // The tile `auto` picks, else the first that fits.
        let tile = chosen.or([SegmentTile::Standard, SegmentTile::Large]
            .into_iter()
            .find(|&t| longest <= runtime.segmented.tiles.tile_rows(t)));
        let [auto, merge, radix] = [Path::Auto, Path::Merge, Path::Radix]
            .map(|p| time_u64(&runtime, &random, Some(&segments), p, options));
        let (auto, merge, radix) = (auto?, merge?, radix?);
        let forced = |path: Option<Path>| -> Result<String> {
            match path {
                Some(p) => time_u64(&runtime, &random, Some(&segments), p, options)
                    .map(|ms| format!("{ms:.3}")),
                None => Ok("-".into()),
            }
        };
        let tiles = match tile {
            Some(t) => format!("{} ({t:?})", forced(Some(Path::Tiles(t)))?),
            None => "-".into(),
        };
        let tiles_on_device = forced(tile.map(Path::TilesStartsOnDevice))?;
        let starts_upload = forced(Some(Path::StartsUpload))?;
        let staged_bytes = forced(Some(Path::StagedBytes))?;
        let large = forced(fits_large.then_some(Path::Tiles(SegmentTile::Large)))?;
        let theirs = cub_ms(&format!("cub seg {length} "));
        let best = theirs.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "| {length} | {auto:.3} ({path}) | {tiles} | {tiles_on_device} | {starts_upload} | {staged_bytes} | {large} | {merge:.3} | {radix:.3} | {} | {} | {} |",
            cell(theirs.first()),
            cell(theirs.get(1)),
            ratio(best, auto)
        );
    }
    print_host_fill(n, options);
    println!();
    println!("| keys | noise | gpusort auto (path) | locality forced | OneSweep forced | CUB radix | auto vs CUB |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for bits in [32u32, 64] {
        for noise in NOISES {
            let data: Vec<u64> = generate_index(n, |i| nearly_sorted(i, options.seed, noise, bits));
            let narrow: Vec<u32> = data.iter().map(|&k| k as u32).collect();
            let times: Vec<f64> = [Path::Auto, Path::Merge, Path::Radix]
                .into_iter()
                .map(|p| match bits {
                    32 => time_u32(&runtime, &narrow, p, options),
                    _ => time_u64(&runtime, &data, None, p, options),
                })
                .collect::<Result<_>>()?;
            let choice = choice_of(&runtime, &data, bits)?;
            let theirs = cub_ms(&format!("cub near {bits} {noise} "));
            println!(
                "| u{bits} | {noise} | {:.3} ({choice}) | {:.3} | {:.3} | {} | {} |",
                times[0],
                times[1],
                times[2],
                cell(theirs.first()),
                ratio(theirs.first().copied().unwrap_or(f64::NAN), times[0])
            );
        }
    }
    Ok(())
}

/// The host's share of the starts upload at 16 rows per segment: the u8 lengths computed
/// from the starts on all cores into a plain vector (median wall time).
fn print_host_fill(n: usize, options: &MergeBench) {
    use rayon::prelude::*;
    let starts: Vec<u32> = (0..n as u32).step_by(16).collect();
    let mut lengths = vec![0u8; starts.len()];
    let mut times = Vec::new();
    for _ in 0..options.warmup + options.reps {
        let begin = std::time::Instant::now();
        lengths
            .par_chunks_mut(1 << 16)
            .zip(starts.par_chunks(1 << 16))
            .for_each(|(out, from)| {
                for (o, w) in out.iter_mut().zip(from.windows(2)) {
                    *o = (w[1] - w[0] - 1) as u8;
                }
            });
        times.push(begin.elapsed().as_secs_f64() * 1e3);
    }
    let mut timed = times.split_off(options.warmup);
    timed.sort_by(f64::total_cmp);
    println!();
    println!(
        "host fill of the u8 lengths of 16-row segments ({} segments, all cores, into a vector): {:.3} ms (median); checksum {}",
        starts.len(),
        timed[timed.len() / 2],
        lengths.iter().map(|&l| l as u64).sum::<u64>()
    );
}

fn generate_index(n: usize, make: impl Fn(u64) -> u64 + Sync + Send) -> Vec<u64> {
    use rayon::prelude::*;
    (0..n as u64).into_par_iter().map(make).collect()
}

fn cell(ms: Option<&f64>) -> String {
    ms.map_or("-".into(), |m| format!("{m:.3}"))
}

fn ratio(theirs: f64, ours: f64) -> String {
    if theirs.is_finite() {
        format!("{:.2}×", theirs / ours)
    } else {
        "-".into()
    }
}

fn algorithm(path: Path) -> AlgorithmChoice {
    match path {
        Path::Auto => AlgorithmChoice::Auto,
        Path::Tiles(_)
        | Path::TilesStartsOnDevice(_)
        | Path::StartsUpload
        | Path::StagedBytes
        | Path::Merge => AlgorithmChoice::Locality,
        Path::Radix => AlgorithmChoice::Onesweep,
    }
}

/// Which algorithm `auto` picks for these keys.
fn choice_of(runtime: &CudaRuntime, data: &[u64], bits: u32) -> Result<&'static str> {
    let n = data.len();
    let order = runtime
        .with_device(|device, staging| {
            let keys = if bits == 32 {
                let narrow: Vec<u32> = data.iter().map(|&k| k as u32).collect();
                DeviceKeys::U32(upload(device, staging, &narrow)?)
            } else {
                DeviceKeys::Words(vec![upload(device, staging, data)?])
            };
            cuda::sort_on_device(
                runtime,
                device,
                staging,
                keys,
                AlgorithmChoice::Auto,
                None,
                n,
            )
        })
        .map_err(DataFusionError::from)?;
    Ok(order.algorithm.name())
}

/// Median ms of sorting u64 keys (within `segments`) by `path`.
fn time_u64(
    runtime: &CudaRuntime,
    data: &[u64],
    segments: Option<&Segments>,
    path: Path,
    options: &MergeBench,
) -> Result<f64> {
    let n = data.len();
    median(runtime, options, |device, staging| {
        let pristine = upload(device, staging, data)?;
        let starts = match (segments, path) {
            (Some(segments), Path::TilesStartsOnDevice(_)) => {
                Some(upload(device, staging, segments.starts())?)
            }
            _ => None,
        };
        Ok(
            move |device: &cuda::Device, staging: &mut cuda::Staging, start: &cuda::Event| {
                let keys = device.duplicate(&pristine, "bench keys")?;
                start.record(device)?;
                match (segments, path) {
                    (Some(segments), Path::TilesStartsOnDevice(tile)) => {
                        let keys = cuda::MergeKeys::U64(keys);
                        let starts = starts.as_ref().expect("starts uploaded");
                        runtime
                            .segmented
                            .tiles
                            .sort(device, &keys, starts, segments, n, tile)?;
                    }
                    (Some(segments), Path::StartsUpload) => {
                        drop(keys);
                        runtime.segmented.starts.upload(device, staging, segments)?;
                    }
                    (Some(segments), Path::StagedBytes) => {
                        drop(keys);
                        staging.upload::<u8, _>(
                            device,
                            segments.len(),
                            "bench bytes",
                            |_, part| part.fill(1),
                        )?;
                    }
                    (Some(segments), Path::Tiles(tile)) => {
                        let keys = cuda::MergeKeys::U64(keys);
                        runtime
                            .segmented
                            .sort_segment_tiles(device, staging, &keys, segments, n, tile)?;
                    }
                    (Some(segments), Path::Merge) => {
                        let segs = runtime
                            .segmented
                            .segment_ids(device, staging, segments, n)?;
                        runtime.segmented.sort_rows(device, &keys, &segs, n)?;
                    }
                    _ => {
                        let keys = DeviceKeys::Words(vec![keys]);
                        cuda::sort_on_device(
                            runtime,
                            device,
                            staging,
                            keys,
                            algorithm(path),
                            segments,
                            n,
                        )?;
                    }
                }
                Ok(())
            },
        )
    })
}

/// Median ms of sorting u32 keys by `path`.
fn time_u32(runtime: &CudaRuntime, data: &[u32], path: Path, options: &MergeBench) -> Result<f64> {
    let n = data.len();
    median(runtime, options, |device, staging| {
        let pristine = upload(device, staging, data)?;
        Ok(
            move |device: &cuda::Device, staging: &mut cuda::Staging, start: &cuda::Event| {
                let keys = DeviceKeys::U32(device.duplicate(&pristine, "bench keys")?);
                start.record(device)?;
                cuda::sort_on_device(runtime, device, staging, keys, algorithm(path), None, n)?;
                Ok(())
            },
        )
    })
}

/// Median ms of the runs that `prepare` returns (each records `start` itself, after its
/// untimed setup).
fn median<F>(
    runtime: &CudaRuntime,
    options: &MergeBench,
    prepare: impl FnOnce(&cuda::Device, &mut cuda::Staging) -> cuda::CudaResult<F>,
) -> Result<f64>
where
    F: Fn(&cuda::Device, &mut cuda::Staging, &cuda::Event) -> cuda::CudaResult<()>,
{
    let mut times = runtime
        .with_device(|device, staging| {
            let run_once = prepare(device, staging)?;
            let (start, stop) = (device.event()?, device.event()?);
            let mut times = Vec::new();
            for rep in 0..options.warmup + options.reps {
                run_once(device, staging, &start)?;
                stop.record(device)?;
                stop.wait()?;
                if rep >= options.warmup {
                    times.push(stop.elapsed_ms_since(&start)? as f64);
                }
            }
            Ok(times)
        })
        .map_err(DataFusionError::from)?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Runs the CUB baseline; returns the lines it printed.
fn run_cub(path: &str, options: &MergeBench) -> Result<Vec<String>> {
    let output = Command::new(path)
        .arg(options.seed.to_string())
        .arg(options.reps.to_string())
        .arg(options.warmup.to_string())
        .arg(options.log2_size.to_string())
        .output()
        .map_err(|e| DataFusionError::Execution(format!("running the CUB baseline {path}: {e}")))?;
    if !output.status.success() {
        return exec_err!(
            "the CUB baseline {path} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.starts_with("cub "))
        .map(str::to_string)
        .collect())
}
