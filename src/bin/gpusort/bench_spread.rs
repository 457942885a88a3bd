//! `gpusort bench spread`: a host-resident key sort on one device against the same sort
//! spread over several devices of the host by key ranges (`cuda::sort_host_words`).
//!
//! The keys, `splitmix64(seed + i)` as u64 (`--words` of them per row, word 0 most
//! significant), sit in host memory; each timed run takes them up to the devices, sorts
//! and brings the stable permutation (u32 row ids) back to host memory, so the time is
//! what a query's sort of host data pays. Each device set (`--devices`, as
//! `gpu_sort.devices` takes them) runs `--warmup` untimed runs then `--reps` timed ones,
//! and its median is reported with the steps' times and the speedup over the first set.
//! Every set's first permutation is checked: a permutation, keys in order, equal keys in
//! row order, and identical to the first set's. With `--overlap` given, each device set
//! runs once per value (`on`: copies overlapping the kernels; `off`: one step after
//! another; `auto`: overlapped where the host memory is page-locked and two or more devices
//! sort).

use std::time::Duration;

use datafusion::common::{exec_err, DataFusionError, Result};
use gpusort::cuda::{self, CudaRuntime, HostSortPlan, SpreadSorted, SpreadTimes};
use gpusort::DeviceSelection;
use rayon::prelude::*;

use crate::bench::splitmix64;

/// Options of `gpusort bench spread`.
#[derive(Debug, Clone, clap::Args)]
pub struct SpreadBench {
    /// log2 of the number of rows.
    #[arg(long, default_value_t = 30)]
    pub log2_rows: u32,
    /// u64 key words per row.
    #[arg(long, default_value_t = 1)]
    pub words: usize,
    /// Distinct keys: the keys are taken modulo this (0: all distinct as generated).
    #[arg(long, default_value_t = 0)]
    pub distinct: u64,
    /// The device sets to compare, the first one the baseline (`1`, `2`, `0,1`, `all`).
    #[arg(long, default_values_t = vec![DeviceSelection::First(1), DeviceSelection::All])]
    pub devices: Vec<DeviceSelection>,
    /// Timed runs per set.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Untimed runs first.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Data seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Page-locks the keys and the permutation first, so copies go straight between them
    /// and the devices (else they go through the staging buffers, as a query's do).
    #[arg(long)]
    pub locked: bool,
    /// Whether copies overlap the kernels (`auto`, `on`, `off`); each device set runs once
    /// per value given.
    #[arg(long, default_values_t = vec![Overlap::Auto])]
    pub overlap: Vec<Overlap>,
    /// Chunks each device's keys go up in, when overlapped.
    #[arg(long, default_value_t = cuda::SPREAD_CHUNKS)]
    pub chunks: usize,
    /// Key ranges each device sorts one after another, when overlapped.
    #[arg(long, default_value_t = cuda::SPREAD_RANGES_PER_DEVICE)]
    pub ranges_per_device: usize,
    /// Writes the results as JSON here too.
    #[arg(long)]
    pub json: Option<String>,
}

/// `--overlap`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Overlap {
    /// Where the host memory is page-locked and two or more devices sort.
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

impl std::fmt::Display for Overlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Overlap::Auto => "auto",
            Overlap::On => "on",
            Overlap::Off => "off",
        })
    }
}

/// One set's median run.
struct SetResult {
    label: String,
    median: Duration,
    times: SpreadTimes,
    range_rows: Vec<usize>,
    peer_copies: bool,
    overlapped: bool,
}

/// Runs the benchmark and prints its table.
pub fn run(options: &SpreadBench) -> Result<()> {
    if options.words == 0 || options.log2_rows > 32 {
        return exec_err!("--words must be at least 1 and --log2-rows at most 32");
    }
    let n = 1usize << options.log2_rows;
    let words: Vec<Vec<u64>> = (0..options.words)
        .map(|w| {
            key_word(
                n,
                options.seed + (w as u64) * 0x1000_0000_0000,
                options.distinct,
            )
        })
        .collect();
    let word_refs: Vec<&[u64]> = words.iter().map(Vec::as_slice).collect();
    // Touched before the runs, as a long-lived process's memory is: a fresh vector would
    // time the kernel's page faults.
    let mut permutation = vec![u32::MAX; n];
    permutation.par_chunks_mut(1 << 16).for_each(|c| c.fill(0));
    let _locks = match options.locked {
        true => lock(&word_refs, &permutation)?,
        false => Vec::new(),
    };
    println!(
        "host-resident sort of {n} rows × {} u64 key word(s), permutation back to the host; \
         host memory {}",
        options.words,
        if options.locked {
            "page-locked"
        } else {
            "pageable (copies staged)"
        }
    );
    let mut results: Vec<SetResult> = Vec::new();
    let mut baseline: Option<Vec<u32>> = None;
    let sets = options
        .devices
        .iter()
        .flat_map(|&d| options.overlap.iter().map(move |&o| (d, o)));
    for (selection, overlap) in sets {
        let runtimes = open(selection)?;
        let refs: Vec<&CudaRuntime> = runtimes.iter().map(|r| r.as_ref()).collect();
        let label = format!(
            "{} GPU(s) {:?}, overlap {overlap}",
            refs.len(),
            refs.iter().map(|r| r.ordinal()).collect::<Vec<_>>()
        );
        let plan = HostSortPlan {
            overlap: match overlap {
                Overlap::Auto => None,
                Overlap::On => Some(true),
                Overlap::Off => Some(false),
            },
            chunks: options.chunks,
            ranges_per_device: options.ranges_per_device,
        };
        let sort = |permutation: &mut [u32]| sort(&refs, &word_refs, permutation, plan);
        permutation.par_chunks_mut(1 << 16).for_each(|c| c.fill(0));
        sort(&mut permutation)?;
        check(&word_refs, &permutation)?;
        match &baseline {
            Some(base) if *base != permutation => {
                return exec_err!("{label}: the permutation differs from the first set's");
            }
            Some(_) => {}
            None => baseline = Some(permutation.clone()),
        }
        for _ in 1..options.warmup {
            sort(&mut permutation)?;
        }
        let mut runs: Vec<(Duration, SpreadSorted)> = Vec::with_capacity(options.reps);
        for _ in 0..options.reps.max(1) {
            let started = std::time::Instant::now();
            let run = sort(&mut permutation)?;
            runs.push((started.elapsed(), run));
        }
        runs.sort_by_key(|r| r.0);
        let (median, run) = runs.swap_remove(runs.len() / 2);
        results.push(SetResult {
            label,
            median,
            times: run.times,
            range_rows: run.range_rows,
            peer_copies: run.peer_copies,
            overlapped: run.overlapped,
        });
    }
    print_table(&results, n);
    if let Some(path) = &options.json {
        write_json(path, options, &results, n)?;
    }
    Ok(())
}

/// One key word of every row, as the generator makes it.
fn key_word(n: usize, seed: u64, distinct: u64) -> Vec<u64> {
    let mut word = vec![0u64; n];
    word.par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(c, chunk)| {
            for (j, key) in chunk.iter_mut().enumerate() {
                let k = splitmix64(seed + (c << 16 | j) as u64);
                *key = if distinct > 0 { k % distinct } else { k };
            }
        });
    word
}

/// The runtimes of the devices `selection` names, every one open.
fn open(selection: DeviceSelection) -> Result<Vec<std::sync::Arc<CudaRuntime>>> {
    let ordinals = cuda::selected_ordinals(selection);
    if ordinals.is_empty() {
        return exec_err!("--devices {selection}: no such device on this host");
    }
    ordinals
        .into_iter()
        .map(|d| {
            cuda::runtime_of(d)
                .map_err(|e| DataFusionError::Execution(format!("device {d} did not open: {e}")))
        })
        .collect()
}

fn sort(
    runtimes: &[&CudaRuntime],
    words: &[&[u64]],
    out: &mut [u32],
    plan: HostSortPlan,
) -> Result<SpreadSorted> {
    cuda::sort_host_words_with(runtimes, words, out, plan)
        .map_err(|e| DataFusionError::External(Box::new(e)))
}

/// Page-locks every key word and the permutation (for every device).
fn lock(words: &[&[u64]], permutation: &[u32]) -> Result<Vec<cuda::HostLock>> {
    let rt = cuda::runtime().map_err(DataFusionError::Execution)?;
    let failed = || DataFusionError::Execution("page-locking the host memory failed".into());
    let mut locks = Vec::new();
    for word in words {
        // SAFETY: the words and the permutation outlive the locks (dropped first in `run`)
        // and are neither freed nor moved meanwhile.
        locks.push(unsafe { rt.device.lock_host(word) }.ok_or_else(failed)?);
    }
    // SAFETY: as above.
    locks.push(unsafe { rt.device.lock_host(permutation) }.ok_or_else(failed)?);
    Ok(locks)
}

/// `perm` is a permutation of the rows that orders `words` stably.
fn check(words: &[&[u64]], perm: &[u32]) -> Result<()> {
    let n = perm.len();
    let key = |row: u32| words.iter().map(move |w| w[row as usize]);
    let bad = (1..n).into_par_iter().find_any(|&i| {
        let (a, b) = (perm[i - 1], perm[i]);
        match key(a).cmp(key(b)) {
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => a >= b,
            std::cmp::Ordering::Greater => true,
        }
    });
    if let Some(i) = bad {
        return exec_err!("rows {} and {} out of order at {i}", perm[i - 1], perm[i]);
    }
    let seen: Vec<std::sync::atomic::AtomicBool> = (0..n).map(|_| Default::default()).collect();
    let repeated = perm.par_iter().any(|&row| {
        (row as usize) >= n || seen[row as usize].swap(true, std::sync::atomic::Ordering::Relaxed)
    });
    if repeated {
        return exec_err!("the sort's row ids are not a permutation");
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print_table(results: &[SetResult], n: usize) {
    println!(
        "| devices | median ms | G keys/s | vs first | upload | partition | exchange | sort | download | rows per device | peer copies | overlapped |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |");
    let base = results.first().map(|r| r.median);
    for r in results {
        let t = r.times;
        println!(
            "| {} | {:.1} | {:.2} | {:.2}× | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:?} | {} | {} |",
            r.label,
            ms(r.median),
            n as f64 / r.median.as_secs_f64() / 1e9,
            base.map_or(1.0, |b| b.as_secs_f64() / r.median.as_secs_f64()),
            ms(t.upload),
            ms(t.partition),
            ms(t.exchange),
            ms(t.sort),
            ms(t.download),
            r.range_rows,
            r.peer_copies,
            r.overlapped,
        );
    }
    if results.iter().any(|r| r.overlapped) {
        println!(
            "overlapped rows: upload until the last chunk is up, partition what was left of it, \
             sort until the last range is sorted (its exchange included), download what was left"
        );
    }
}

fn write_json(path: &str, options: &SpreadBench, results: &[SetResult], n: usize) -> Result<()> {
    let sets: Vec<String> = results
        .iter()
        .map(|r| {
            let t = r.times;
            format!(
                r#"    {{"devices": "{}", "median_ms": {:.3}, "upload_ms": {:.3}, "partition_ms": {:.3}, "exchange_ms": {:.3}, "sort_ms": {:.3}, "download_ms": {:.3}, "range_rows": {:?}, "peer_copies": {}, "overlapped": {}}}"#,
                r.label,
                ms(r.median),
                ms(t.upload),
                ms(t.partition),
                ms(t.exchange),
                ms(t.sort),
                ms(t.download),
                r.range_rows,
                r.peer_copies,
                r.overlapped,
            )
        })
        .collect();
    let out = format!(
        "{{\n  \"rows\": {n},\n  \"words\": {},\n  \"distinct\": {},\n  \"reps\": {},\n  \"sets\": [\n{}\n  ]\n}}\n",
        options.words,
        options.distinct,
        options.reps,
        sets.join(",\n")
    );
    std::fs::write(path, out).map_err(|e| DataFusionError::External(Box::new(e)))
}
