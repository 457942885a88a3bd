//! sqllogictest runner: our own `.slt` files and DataFusion's, against gpusort.
//!
//! - `sql-tests/*.slt` (ours) run with gpusort forced on (CPU backend, `min_rows = 0`,
//!   `topk = true`); every record must pass.
//! - DataFusion's own files, shipped in the `datafusion-sqllogictest` crate, run twice:
//!   stock and forced. The run fails if any record fails forced but passes stock. Records
//!   that fail stock (mostly those reading data files the crate does not ship) are counted
//!   and reported, not judged. In EXPLAIN output, sort operators (`SortExec`,
//!   `SortPreservingMergeExec`, `GpuSortExec`) are set aside before comparing, since
//!   replacing them is the point, and so is a hash `RepartitionExec` directly below a sort
//!   (a hash routed `GpuSortExec` does its work, `gpu_sort.absorb_repartition`), and every
//!   `CoalescePartitionsExec` without a LIMIT (the one sort that replaces a sort over
//!   partitions reads them itself, `src/planner/shapes.rs`); window operators are compared by their first window
//!   expression only, since a streaming window (`BoundedWindowAggExec`) above a replaced
//!   sort becomes gpusort's own (`SortedWindowExec`, `gpu_sort.window_functions`) or a
//!   whole-partition one (`WindowAggExec`, `gpu_sort.whole_partition_windows`), and they
//!   print their expressions differently.
//!
//! Environment:
//! - `GPUSORT_SLT_FILTER=name` runs only files whose name contains `name`;
//! - `GPUSORT_SLT_BACKEND=cuda` (or `auto`; default `cpu`) forces gpusort's sorts onto that
//!   backend; `cuda` fails at once when no CUDA device is usable;
//! - `GPUSORT_SLT_DIR` (our files; default `sql-tests/` of this crate),
//!   `GPUSORT_SLT_DATAFUSION_DIR` (DataFusion's `test_files`; default: found with
//!   `cargo metadata`) and `GPUSORT_SLT_WORK_DIR` (scratch output), for a machine without
//!   cargo or this checkout (the GPU host).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_sqllogictest::{df_value_validator, value_normalizer, DataFusion};
use gpusort::{BackendChoice, GpuSortConfig, SessionStateBuilderExt};
use indicatif::ProgressBar;
use sqllogictest::{parse_file, strict_column_validator, Normalizer, Record};

/// DataFusion's files run here: the ones about sorting, windows and limits.
const DATAFUSION_FILES: [&str; 10] = [
    "order.slt",
    "window.slt",
    "select.slt",
    "limit.slt",
    "topk.slt",
    "window_limits.slt",
    "window_topn.slt",
    "distinct_on.slt",
    "subquery_sort.slt",
    "sort_merge_join.slt",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Stock,
    Forced,
}

fn context(mode: Mode) -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(4);
    let builder = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features();
    let builder = match mode {
        Mode::Stock => builder,
        Mode::Forced => {
            let mut gpu = GpuSortConfig::forced_cpu();
            gpu.backend = forced_backend();
            builder.with_gpu_sort(gpu)
        }
    };
    SessionContext::new_with_state(builder.build())
}

const SORT_OPERATORS: [&str; 4] = [
    "SortExec:",
    "SortPreservingMergeExec:",
    "GpuSortExec:",
    "PartialSortExec:",
];

/// A plan line without its `NN)--` tree prefix.
fn plan_body(line: &str) -> &str {
    let line = line.trim();
    match line.find(')') {
        Some(i) if i > 0 && line[..i].bytes().all(|b| b.is_ascii_digit()) => {
            line[i + 1..].trim_start_matches('-')
        }
        _ => line,
    }
}

/// The plan lines without sort operators and without a hash repartition directly below
/// one (a hash routed `GpuSortExec` does that repartition's work itself).
fn without_sort_operators(lines: impl Iterator<Item = String>) -> Vec<String> {
    let mut kept = Vec::new();
    let mut below_sort = false;
    for line in lines.map(|l| window_operator(plan_body(&l).trim())) {
        let is_sort = SORT_OPERATORS.iter().any(|op| line.starts_with(op));
        // The coalesce of partitions below a sort is read through by the one sort that
        // replaces it (src/planner/shapes.rs), with or without row-wise operators between.
        let gathered = line == "CoalescePartitionsExec";
        let absorbed =
            gathered || below_sort && line.starts_with("RepartitionExec: partitioning=Hash(");
        below_sort = is_sort;
        if !is_sort && !absorbed {
            kept.push(line);
        }
    }
    kept
}

/// A window operator's line as `window: <its first window expression>`; other lines as
/// they are.
fn window_operator(line: &str) -> String {
    let expressions = [
        "BoundedWindowAggExec: wdw=[",
        "WindowAggExec: wdw=[",
        "SortedWindowExec: wdw=[",
    ]
    .iter()
    .find_map(|op| line.strip_prefix(op));
    match expressions {
        Some(rest) => {
            let first = rest.split(": Field {").next().unwrap_or(rest);
            let first = first.split(": Ok(Field {").next().unwrap_or(first);
            let first = first.split(": frame ").next().unwrap_or(first);
            format!("window: {first}")
        }
        None => line.to_string(),
    }
}

/// DataFusion's validator; for plans, also equal once sort operators are set aside.
fn forced_validator(normalizer: Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    if df_value_validator(normalizer, actual, expected) {
        return true;
    }
    let is_plan = expected.iter().any(|l| l.contains("physical_plan"));
    if !is_plan {
        return false;
    }
    let expected = without_sort_operators(expected.iter().map(normalizer));
    let actual = without_sort_operators(actual.iter().map(|row| row.join(" ")));
    expected == actual
}

/// Runs every record of `path`; returns the indices of the records that failed, and the
/// count of records run.
async fn failing_records(path: &Path, mode: Mode) -> (Vec<(usize, String)>, usize) {
    let ctx = context(mode);
    let relative = PathBuf::from(path.file_name().unwrap());
    let mut runner = sqllogictest::Runner::new(|| {
        let ctx = ctx.clone();
        let relative = relative.clone();
        async move { Ok(DataFusion::new(ctx, relative, ProgressBar::hidden())) }
    });
    runner.with_column_validator(strict_column_validator);
    runner.with_normalizer(value_normalizer);
    runner.with_validator(match mode {
        Mode::Stock => df_value_validator,
        Mode::Forced => forced_validator,
    });
    let records = parse_file(path).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    let mut failures = Vec::new();
    let mut count = 0;
    for (i, record) in records.into_iter().enumerate() {
        if matches!(record, Record::Halt { .. }) {
            break;
        }
        if !matches!(record, Record::Statement { .. } | Record::Query { .. }) {
            let _ = runner.run_async(record).await;
            continue;
        }
        count += 1;
        if let Err(e) = runner.run_async(record).await {
            failures.push((i, e.to_string()));
        }
    }
    (failures, count)
}

/// The backend gpusort's sorts are forced onto (`GPUSORT_SLT_BACKEND`, default `cpu`).
fn forced_backend() -> BackendChoice {
    std::env::var("GPUSORT_SLT_BACKEND").map_or(BackendChoice::Cpu, |b| {
        b.parse().expect("GPUSORT_SLT_BACKEND: cpu, cuda or auto")
    })
}

fn datafusion_test_files() -> PathBuf {
    if let Ok(dir) = std::env::var("GPUSORT_SLT_DATAFUSION_DIR") {
        return PathBuf::from(dir);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata JSON");
    let manifest = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "datafusion-sqllogictest")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("datafusion-sqllogictest in the dependency graph");
    Path::new(manifest).parent().unwrap().join("test_files")
}

fn selected(name: &str) -> bool {
    std::env::var("GPUSORT_SLT_FILTER").map_or(true, |f| name.contains(&f))
}

/// Our files: forced on, all records pass.
async fn run_own_files() -> usize {
    let dir = std::env::var("GPUSORT_SLT_DIR").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-tests"),
        PathBuf::from,
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    let mut errors = 0;
    for path in files.iter().filter(|p| selected(&p.display().to_string())) {
        let (failures, count) = failing_records(path, Mode::Forced).await;
        println!(
            "ours       {:<28} {:>5} records, {:>4} failed",
            name_of(path),
            count,
            failures.len()
        );
        for (i, e) in &failures {
            println!("  record #{i}: {e}");
        }
        errors += failures.len();
    }
    errors
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// DataFusion's files: stock and forced; count records that fail only when forced.
async fn run_datafusion_files() -> usize {
    let dir = datafusion_test_files();
    // Work where DataFusion's files expect to write their scratch output.
    let work = std::env::var("GPUSORT_SLT_WORK_DIR").map_or_else(
        |_| Path::new(env!("CARGO_TARGET_TMPDIR")).join("slt-work"),
        PathBuf::from,
    );
    std::fs::create_dir_all(work.join("test_files/scratch")).unwrap();
    std::env::set_current_dir(&work).unwrap();
    let mut regressions = 0;
    for name in DATAFUSION_FILES.iter().filter(|n| selected(n)) {
        let path = dir.join(name);
        let (stock, count) = failing_records(&path, Mode::Stock).await;
        let (forced, _) = failing_records(&path, Mode::Forced).await;
        let stock_ids: std::collections::HashSet<usize> = stock.iter().map(|f| f.0).collect();
        let only_forced: Vec<&(usize, String)> = forced
            .iter()
            .filter(|f| !stock_ids.contains(&f.0))
            .collect();
        println!(
            "datafusion {name:<28} {count:>5} records: stock passes {:>5}, with gpusort passes {:>5}, regressions {}",
            count - stock.len(),
            count - forced.len(),
            only_forced.len()
        );
        for (i, e) in &only_forced {
            println!("  record #{i} fails only with gpusort: {e}");
        }
        regressions += only_forced.len();
    }
    regressions
}

#[tokio::main]
async fn main() -> ExitCode {
    let backend = forced_backend();
    if backend == BackendChoice::Cuda {
        if let Err(why) = gpusort::cuda::runtime() {
            println!("sqllogictests: GPUSORT_SLT_BACKEND=cuda but no CUDA device is usable: {why}");
            return ExitCode::FAILURE;
        }
    }
    println!("sqllogictests: gpusort forced onto the {backend} backend");
    let own_errors = run_own_files().await;
    let regressions = run_datafusion_files().await;
    println!("sqllogictests: {own_errors} failures in our files, {regressions} regressions in DataFusion's");
    if own_errors + regressions == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
