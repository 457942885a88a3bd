//! `gpusort bench sql`: whole queries with gpusort's rule on (GPU) and off (DataFusion's own
//! sort), on the generated tables of [`crate::bench_tables`].
//!
//! ```text
//!  generate t, g, ts, s, u in memory ──► one session (target_partitions = cores), the
//!  tables registered in memory or (--parquet DIR) written as Parquet files and read from them
//!  per query, per mode (rule on / off):  first run (cold; its result fingerprinted)
//!                                        + `reps` timed runs: plan + execute + collect
//!                                          (`baseline_reps` with the rule off)
//!  the two modes' fingerprints must agree ──► table: medians, speedup, and where the GPU
//!  run's time went (GpuSortExec's stage metrics of the median run)
//!  --variant: other configurations, checked, then timed interleaved with the plain one
//!  --trace:   one more run with every output partition read on its own, its timeline
//! ```
//!
//! The fingerprint of a result is its row count, an order-insensitive hash of all its rows
//! and (for queries whose output order is defined) an order-sensitive hash of the sort key
//! columns: so a wrong order, a lost row or a changed value fails the benchmark, while ties
//! may come out in either mode's order.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::arrow;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_err, DataFusionError, Result};
use datafusion::datasource::MemTable;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::{collect, execute_stream_partitioned, ExecutionPlan};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use futures::StreamExt;
use gpusort::{cuda, BackendChoice, GpuSortExec};
use rayon::prelude::*;

use crate::bench_tables::{generate_tables, Table};
use crate::session::new_session;

/// How each query is run, checked and reported: the options `bench sql` and `bench tpch`
/// share.
#[derive(Debug, Clone, clap::Args)]
pub struct QueryRuns {
    /// Timed runs per query and mode (median taken, after one cold run timed apart).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Timed runs of DataFusion's own sort (default: --reps).
    #[arg(long)]
    pub baseline_reps: Option<usize>,
    /// target_partitions, and the partitions of generated tables (default: the cores).
    #[arg(long)]
    pub partitions: Option<usize>,
    /// Run only this query (Q1 …); repeat for several.
    #[arg(long = "query", value_name = "QUERY")]
    pub only: Vec<String>,
    /// Sort backend with the rule on: auto, cuda or cpu.
    #[arg(long, default_value = "auto")]
    pub backend: BackendChoice,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// A session setting for the runs, e.g. gpu_sort.combine_partitions=false; repeat
    /// for several.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub settings: Vec<String>,
    /// Print each query's plan of the median gpusort run with its metrics.
    #[arg(long = "plans")]
    pub show_plans: bool,
    /// Run each query once more with gpusort and print the timeline of its stages.
    #[arg(long)]
    pub trace: bool,
    /// Another configuration timed in turn with the plain gpusort run: comma-separated
    /// `setting=value` and `env:VARIABLE=value`; repeat for several.
    #[arg(long = "variant", value_name = "CHANGES")]
    pub variants: Vec<String>,
    /// With --variant: each timed run of the plain run and of every variant runs this
    /// many copies of the query at once in the session (queries sharing the host and its
    /// GPUs), timed until the last one ends; every copy's result is checked.
    #[arg(long, default_value_t = 1)]
    pub concurrent: usize,
}

impl QueryRuns {
    /// Timed runs of DataFusion's own sort.
    fn baseline_reps(&self) -> usize {
        self.baseline_reps.unwrap_or(self.reps)
    }

    /// `target_partitions`: as asked, else the number of cores.
    pub fn partitions(&self) -> usize {
        self.partitions
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// Options of `gpusort bench sql`.
#[derive(Debug, Clone, clap::Args)]
pub struct SqlBench {
    /// Rows of tables t, g and ts (s has a fifth of them).
    #[arg(long, default_value_t = 100_000_000)]
    pub rows: usize,
    /// Data seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Write the generated tables to DIR/<table>.parquet (input of benches/sql_duckdb.py).
    #[arg(long, value_name = "DIR")]
    pub write_parquet: Option<PathBuf>,
    /// Query the tables from Parquet: written to DIR/<table>/part-<p>.parquet (one file
    /// per partition) and registered as Parquet tables, as users query them.
    #[arg(long = "parquet", value_name = "DIR")]
    pub parquet_dir: Option<PathBuf>,
    /// How the queries are run.
    #[command(flatten)]
    pub runs: QueryRuns,
}

/// One benchmark query.
pub struct Query {
    pub name: &'static str,
    pub sql: &'static str,
    /// The columns whose order the query defines; empty when its output order across
    /// partitions is not defined (checked as a multiset only).
    pub ordered_by: &'static [&'static str],
}

const QUERIES: [Query; 8] = [
    Query {
        name: "Q1",
        sql: "SELECT * FROM t ORDER BY k",
        ordered_by: &["k"],
    },
    Query {
        name: "Q2",
        sql: "SELECT * FROM g ORDER BY g, v DESC",
        ordered_by: &["g", "v"],
    },
    Query {
        name: "Q3",
        sql: "SELECT * FROM s ORDER BY s",
        ordered_by: &["s"],
    },
    Query {
        name: "Q4",
        sql: "SELECT g, ts, row_number() OVER (PARTITION BY g ORDER BY ts) AS rn FROM g",
        ordered_by: &[],
    },
    Query {
        name: "Q5",
        sql: "SELECT * FROM ts ORDER BY ts",
        ordered_by: &["ts"],
    },
    Query {
        name: "Q6",
        sql: "SELECT * FROM t ORDER BY k LIMIT 100",
        ordered_by: &["k"],
    },
    Query {
        name: "Q7",
        sql: "SELECT * FROM u ORDER BY url",
        ordered_by: &["url"],
    },
    Query {
        name: "Q8",
        sql: "SELECT * FROM p ORDER BY path",
        ordered_by: &["path"],
    },
];

/// GpuSortExec's stage times in one run, summed over its partitions and runs.
#[derive(Debug, Clone, Default)]
struct Stages {
    backend: String,
    collect: Duration,
    encode: Duration,
    h2d: Duration,
    sort: Duration,
    refine: Duration,
    d2h: Duration,
    gather: Duration,
    /// Within `gather`: the device gather's uploads and windows.
    gather_h2d: Duration,
    gather_d2h: Duration,
    partitions: usize,
    fallbacks: usize,
}

/// What one query measured.
pub struct Outcome {
    query: &'static Query,
    rows: usize,
    /// The first run of the query in its mode (the warm-up).
    datafusion_cold: Duration,
    gpusort_cold: Duration,
    /// Medians of the timed runs after it.
    datafusion: Duration,
    gpusort: Duration,
    stages: Option<Stages>,
}

/// Order-insensitive and order-sensitive digests of a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    rows: usize,
    all_rows: u64,
    key_sequence: u64,
}

/// Generates the tables, runs the queries, prints the table.
pub async fn run(options: &SqlBench) -> Result<()> {
    let runs = &options.runs;
    let partitions = runs.partitions();
    let started = Instant::now();
    let tables = generate_tables(options.rows, partitions, options.seed)?;
    let sizes: Vec<String> = tables
        .iter()
        .map(|t| format!("{} ({} rows)", t.name, t.rows()))
        .collect();
    eprintln!(
        "generated {} in {:.1} s",
        sizes.join(", "),
        started.elapsed().as_secs_f64()
    );
    if let Some(dir) = &options.write_parquet {
        write_parquet(&tables, dir)?;
    }
    let session = new_session(runs.backend);
    apply_settings(&session.ctx, partitions, &runs.settings).await?;
    match &options.parquet_dir {
        Some(dir) => {
            write_partition_files(&tables, dir)?;
            for table in &tables {
                let path = dir.join(table.name);
                let options = ParquetReadOptions::default();
                session
                    .ctx
                    .register_parquet(table.name, path.display().to_string(), options)
                    .await?;
            }
        }
        None => {
            for table in &tables {
                let provider =
                    MemTable::try_new(Arc::clone(&table.schema), table.partitions.clone())?;
                session.ctx.register_table(table.name, Arc::new(provider))?;
            }
        }
    }
    drop(tables);
    let queries = QUERIES.iter().filter(|q| selected(q, &runs.only));
    let outcomes = run_queries(&session.ctx, queries, runs).await?;
    report(&outcomes, partitions, options.rows, runs)
}

/// Sets `target_partitions` and each `name=value` of `settings` in the session.
pub async fn apply_settings(
    ctx: &SessionContext,
    partitions: usize,
    settings: &[String],
) -> Result<()> {
    let partitions = format!("datafusion.execution.target_partitions={partitions}");
    for setting in std::iter::once(&partitions).chain(settings) {
        let Some((name, value)) = setting.split_once('=') else {
            return exec_err!("--set {setting}: expected name=value");
        };
        ctx.sql(&format!("SET {} = {}", name.trim(), value.trim()))
            .await?
            .collect()
            .await?;
    }
    Ok(())
}

/// Runs each query in both modes.
pub async fn run_queries(
    ctx: &SessionContext,
    queries: impl Iterator<Item = &'static Query>,
    options: &QueryRuns,
) -> Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    for query in queries {
        outcomes.push(measure(ctx, query, options).await?);
    }
    Ok(outcomes)
}

/// Prints the table (and writes the JSON file when asked); `rows`: of the largest table.
pub fn report(
    outcomes: &[Outcome],
    partitions: usize,
    rows: usize,
    options: &QueryRuns,
) -> Result<()> {
    let device = gpusort::cuda::runtime()
        .map(|r| format!("{} (sm_{})", r.device.name, r.device.arch))
        .unwrap_or_else(|why| format!("no GPU: {why}"));
    println!(
        "device: {device}; {partitions} partitions; median of {} runs (DataFusion: {}) after \
         a first (cold) run, timed apart; times in seconds, planning + execution + \
         collecting the result",
        options.reps,
        options.baseline_reps()
    );
    print_table(outcomes);
    if let Some(path) = &options.json {
        std::fs::write(path, to_json(outcomes, &device, partitions, rows, options))
            .map_err(|e| DataFusionError::Execution(format!("writing {}: {e}", path.display())))?;
    }
    Ok(())
}

pub fn selected(query: &Query, only: &[String]) -> bool {
    only.is_empty() || only.iter().any(|q| q.eq_ignore_ascii_case(query.name))
}

async fn set_rule(ctx: &SessionContext, enabled: bool) -> Result<()> {
    ctx.sql(&format!("SET gpu_sort.enabled = {enabled}"))
        .await?
        .collect()
        .await?;
    Ok(())
}

/// Both modes of one query: the warm-up results must agree, then the timed runs.
async fn measure(
    ctx: &SessionContext,
    query: &'static Query,
    options: &QueryRuns,
) -> Result<Outcome> {
    let reps = options.reps;
    set_rule(ctx, false).await?;
    let (datafusion_cold, expected) = run_checked(ctx, query).await?;
    let datafusion = median_run(ctx, query, options.baseline_reps()).await?.0;
    set_rule(ctx, true).await?;
    let (gpusort_cold, got) = run_checked(ctx, query).await?;
    if got != expected {
        return exec_err!(
            "{}: gpusort's result differs from DataFusion's: {got:?} vs {expected:?}",
            query.name
        );
    }
    let (gpusort, plan) = median_run(ctx, query, reps).await?;
    eprintln!(
        "{}: DataFusion {:.3} s, gpusort {:.3} s",
        query.name,
        datafusion.as_secs_f64(),
        gpusort.as_secs_f64()
    );
    if !options.variants.is_empty() {
        compare_variants(ctx, query, &expected, options).await?;
    }
    if options.trace {
        print_timeline(ctx, query).await?;
    }
    if options.show_plans {
        eprintln!(
            "{} plan of the median gpusort run, with its metrics:\n{}",
            query.name,
            DisplayableExecutionPlan::with_metrics(plan.as_ref()).indent(true)
        );
    }
    Ok(Outcome {
        query,
        rows: expected.rows,
        datafusion_cold,
        gpusort_cold,
        datafusion,
        gpusort,
        stages: stages_of(&plan),
    })
}

/// One change of a variant: a session setting, a switch of the device runtime
/// (`cuda::Switches`), or another environment variable.
enum Change {
    Setting(String, String),
    Switch(String, String),
    Env(String, String),
}

fn parse_variant(spec: &str) -> Result<Vec<Change>> {
    spec.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            let Some((name, value)) = item.split_once('=') else {
                return exec_err!("--variant {spec}: expected name=value items, got {item}");
            };
            let (name, value) = (name.trim().to_string(), value.trim().to_string());
            Ok(match name.strip_prefix("env:") {
                Some(variable) if cuda::Switches::VARIABLES.contains(&variable) => {
                    Change::Switch(variable.to_string(), value)
                }
                Some(variable) if variable.starts_with("GPUSORT_") => {
                    return exec_err!(
                        "--variant {spec}: {variable} is read once, when the device opens; \
                         run the benchmark again with it set instead (only {} change \
                         between runs)",
                        cuda::Switches::VARIABLES.join(", ")
                    );
                }
                Some(variable) => Change::Env(variable.to_string(), value),
                None => Change::Setting(name, value),
            })
        })
        .collect()
}

/// Applies `changes`, returning what undoes them.
async fn apply(ctx: &SessionContext, changes: &[Change]) -> Result<Vec<Change>> {
    let mut undo = Vec::new();
    for change in changes {
        match change {
            Change::Setting(name, value) => {
                let entries = ctx.state().config_options().entries();
                let Some(old) = entries.iter().find(|e| &e.key == name) else {
                    return exec_err!("--variant: no setting {name}");
                };
                let old = old.value.clone().unwrap_or_default();
                ctx.sql(&format!("SET {name} = {value}"))
                    .await?
                    .collect()
                    .await?;
                undo.push(Change::Setting(name.clone(), old));
            }
            Change::Switch(variable, value) => {
                // Opening the runtime sets the switches from the environment: open it first.
                let _ = cuda::runtime();
                let switches = cuda::switches();
                let old = switches
                    .value(variable)
                    .map_or("", |on| if on { "1" } else { "0" });
                undo.push(Change::Switch(variable.clone(), old.to_string()));
                if let Err(message) = switches.set(variable, value) {
                    return exec_err!("--variant: {message}");
                }
            }
            Change::Env(variable, value) => {
                let old = std::env::var(variable).unwrap_or_default();
                std::env::set_var(variable, value);
                undo.push(Change::Env(variable.clone(), old));
            }
        }
    }
    undo.reverse();
    Ok(undo)
}

/// Times the plain gpusort run and every variant in turn (run 1 of each, then run 2 of
/// each, …, so that drift of the host hits all alike) after one checked run of each.
async fn compare_variants(
    ctx: &SessionContext,
    query: &Query,
    expected: &Fingerprint,
    options: &QueryRuns,
) -> Result<()> {
    let mut variants = vec![("plain".to_string(), Vec::new())];
    for spec in &options.variants {
        variants.push((spec.clone(), parse_variant(spec)?));
    }
    let copies = options.concurrent.max(1);
    let mut times = vec![Vec::new(); variants.len()];
    for rep in 0..=options.reps {
        for ((name, changes), times) in variants.iter().zip(&mut times) {
            let undo = apply(ctx, changes).await?;
            let started = Instant::now();
            let results =
                futures::future::try_join_all((0..copies).map(|_| run_once(ctx, query))).await?;
            let elapsed = started.elapsed();
            apply(ctx, &undo).await?;
            if rep == 0 {
                for (_, batches, _) in &results {
                    let got = fingerprint(batches, query.ordered_by)?;
                    if &got != expected {
                        return exec_err!(
                            "{} with {name}: result differs from DataFusion's",
                            query.name
                        );
                    }
                }
            } else {
                times.push(elapsed.as_secs_f64());
            }
        }
    }
    let at_once = match copies {
        1 => String::new(),
        n => format!(", {n} copies at once"),
    };
    for ((name, _), mut times) in variants.iter().zip(times) {
        times.sort_by(f64::total_cmp);
        let runs: Vec<String> = times.iter().map(|t| format!("{t:.3}")).collect();
        eprintln!(
            "{} {name}: median {:.3} s{at_once} (runs {})",
            query.name,
            times[times.len() / 2],
            runs.join(" ")
        );
    }
    Ok(())
}

/// Runs `query` once more with every output partition read by a task of its own, and
/// prints the operator's timeline (`gpusort::trace`) with when each partition's first
/// batch and end arrived, in milliseconds from the start of planning.
async fn print_timeline(ctx: &SessionContext, query: &Query) -> Result<()> {
    gpusort::trace::take();
    gpusort::trace::enable(true);
    let started = Instant::now();
    let plan = ctx.sql(query.sql).await?.create_physical_plan().await?;
    gpusort::trace::event(|| "planned".to_string());
    let streams = execute_stream_partitioned(plan, ctx.task_ctx())?;
    let readers = streams.into_iter().enumerate().map(|(p, mut stream)| {
        tokio::spawn(async move {
            let mut batches = Vec::new();
            while let Some(batch) = stream.next().await {
                if batches.is_empty() {
                    gpusort::trace::event(|| format!("output {p}: first batch"));
                }
                batches.push(batch?);
            }
            gpusort::trace::event(|| format!("output {p}: done"));
            Ok::<_, DataFusionError>(batches)
        })
    });
    let outputs = futures::future::join_all(readers).await;
    let elapsed = started.elapsed();
    gpusort::trace::enable(false);
    for output in outputs {
        output.map_err(|e| DataFusionError::External(Box::new(e)))??;
    }
    eprintln!("{} timeline (ms from the start of planning):", query.name);
    for (at, what) in gpusort::trace::take() {
        let ms = at.saturating_duration_since(started).as_secs_f64() * 1e3;
        eprintln!("  {ms:8.1}  {what}");
    }
    eprintln!("  {:8.1}  all output read", elapsed.as_secs_f64() * 1e3);
    Ok(())
}

/// Runs once and fingerprints the result.
async fn run_checked(ctx: &SessionContext, query: &Query) -> Result<(Duration, Fingerprint)> {
    let (elapsed, batches, _) = run_once(ctx, query).await?;
    Ok((elapsed, fingerprint(&batches, query.ordered_by)?))
}

/// Plans, executes and collects once.
async fn run_once(
    ctx: &SessionContext,
    query: &Query,
) -> Result<(Duration, Vec<RecordBatch>, Arc<dyn ExecutionPlan>)> {
    let started = Instant::now();
    let plan = ctx.sql(query.sql).await?.create_physical_plan().await?;
    let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await?;
    Ok((started.elapsed(), batches, plan))
}

/// The median of `reps` runs, with the plan of that run (its metrics).
async fn median_run(
    ctx: &SessionContext,
    query: &Query,
    reps: usize,
) -> Result<(Duration, Arc<dyn ExecutionPlan>)> {
    let mut runs = Vec::new();
    for _ in 0..reps.max(1) {
        let (elapsed, batches, plan) = run_once(ctx, query).await?;
        drop(batches);
        runs.push((elapsed, plan));
    }
    runs.sort_by_key(|(elapsed, _)| *elapsed);
    Ok(runs.swap_remove(runs.len() / 2))
}

fn stages_of(plan: &Arc<dyn ExecutionPlan>) -> Option<Stages> {
    let mut found: Option<Stages> = None;
    let _ = plan.apply(|node| {
        if let Some(exec) = node.downcast_ref::<GpuSortExec>() {
            let metrics = node.metrics();
            let value = |name: &str| {
                metrics
                    .as_ref()
                    .and_then(|m| m.sum_by_name(name))
                    .map_or(0, |v| v.as_usize())
            };
            let time = |name: &str| Duration::from_nanos(value(name) as u64);
            let stages = found.get_or_insert_with(Stages::default);
            stages.backend = exec.backend_name().to_string();
            stages.collect += time("collect_time");
            stages.encode += time("encode_time");
            stages.h2d += time("h2d_time");
            stages.sort += time("device_sort_time");
            // The ordering of string ties past the encoded key window.
            stages.refine += time("tie_refine_time");
            stages.d2h += time("d2h_time");
            stages.gather += time("gather_time");
            stages.gather_h2d += time("gather_h2d_time");
            stages.gather_d2h += time("gather_d2h_time");
            stages.partitions += node.properties().output_partitioning().partition_count();
            stages.fallbacks += value("gpu_fallbacks");
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

fn fingerprint(batches: &[RecordBatch], ordered_by: &[&str]) -> Result<Fingerprint> {
    const BASE: u64 = 0x0000_0100_0000_01B3;
    let per_batch = batches
        .par_iter()
        .map(|batch| -> Result<(usize, u64, u64)> {
            let all_rows: u64 = row_hashes(batch, None)?
                .into_iter()
                .fold(0u64, u64::wrapping_add);
            let mut sequence = 0u64;
            if !ordered_by.is_empty() {
                for h in row_hashes(batch, Some(ordered_by))? {
                    sequence = sequence.wrapping_mul(BASE).wrapping_add(h);
                }
            }
            Ok((batch.num_rows(), all_rows, sequence))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut total = Fingerprint {
        rows: 0,
        all_rows: 0,
        key_sequence: 0,
    };
    for (rows, all_rows, sequence) in per_batch {
        total.rows += rows;
        total.all_rows = total.all_rows.wrapping_add(all_rows);
        total.key_sequence = total
            .key_sequence
            .wrapping_mul(BASE.wrapping_pow(rows as u32))
            .wrapping_add(sequence);
    }
    Ok(total)
}

/// One hash per row of `batch` (of the named columns, or of all).
fn row_hashes(batch: &RecordBatch, columns: Option<&[&str]>) -> Result<Vec<u64>> {
    let arrays = match columns {
        Some(names) => names
            .iter()
            .map(|name| {
                Ok(Arc::clone(batch.column_by_name(name).ok_or_else(|| {
                    DataFusionError::Execution(format!("result has no column {name}"))
                })?))
            })
            .collect::<Result<Vec<_>>>()?,
        None => batch.columns().to_vec(),
    };
    let fields = arrays
        .iter()
        .map(|a| SortField::new(a.data_type().clone()))
        .collect();
    let rows = RowConverter::new(fields)?.convert_columns(&arrays)?;
    Ok(rows
        .iter()
        .map(|row| {
            let mut hasher = DefaultHasher::new();
            row.as_ref().hash(&mut hasher);
            hasher.finish()
        })
        .collect())
}

/// `sql` on one line, runs of white space made one space.
fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn seconds(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

fn print_table(outcomes: &[Outcome]) {
    println!(
        "| query | rows | DataFusion cold | gpusort cold | DataFusion | gpusort | speedup | backend | collect | encode | h2d | device sort | tie refine | d2h | gather | other |"
    );
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for o in outcomes {
        let speedup = o.datafusion.as_secs_f64() / o.gpusort.as_secs_f64().max(1e-9);
        let breakdown = match &o.stages {
            Some(s) => {
                let staged = s.collect + s.encode + s.h2d + s.sort + s.refine + s.d2h + s.gather;
                let other = o
                    .gpusort
                    .checked_sub(staged)
                    .map_or("-".to_string(), seconds);
                let mut backend = s.backend.clone();
                if s.partitions > 1 {
                    backend.push_str(&format!(" ×{} partitions (stage sums)", s.partitions));
                }
                if s.fallbacks > 0 {
                    backend.push_str(&format!(", {} CPU fallbacks", s.fallbacks));
                }
                let mut gather = seconds(s.gather);
                if !(s.gather_h2d + s.gather_d2h).is_zero() {
                    gather.push_str(&format!(
                        " (device: up {}, windows {})",
                        seconds(s.gather_h2d),
                        seconds(s.gather_d2h)
                    ));
                }
                format!(
                    "{backend} | {} | {} | {} | {} | {} | {} | {gather} | {other}",
                    seconds(s.collect),
                    seconds(s.encode),
                    seconds(s.h2d),
                    seconds(s.sort),
                    seconds(s.refine),
                    seconds(s.d2h),
                )
            }
            None => "DataFusion's sort kept | - | - | - | - | - | - | - | -".to_string(),
        };
        println!(
            "| {} `{}` | {} | {} | {} | {} | {} | {speedup:.2}× | {breakdown} |",
            o.query.name,
            one_line(o.query.sql),
            o.rows,
            seconds(o.datafusion_cold),
            seconds(o.gpusort_cold),
            seconds(o.datafusion),
            seconds(o.gpusort),
        );
    }
}

fn to_json(
    outcomes: &[Outcome],
    device: &str,
    partitions: usize,
    rows: usize,
    options: &QueryRuns,
) -> String {
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let entries: Vec<String> = outcomes
        .iter()
        .map(|o| {
            let stages = match &o.stages {
                Some(s) => format!(
                    r#"{{"backend": "{}", "partitions": {}, "collect": {}, "encode": {}, "h2d": {}, "device_sort": {}, "tie_refine": {}, "d2h": {}, "gather": {}, "gather_h2d": {}, "gather_d2h": {}}}"#,
                    s.backend,
                    s.partitions,
                    s.collect.as_secs_f64(),
                    s.encode.as_secs_f64(),
                    s.h2d.as_secs_f64(),
                    s.sort.as_secs_f64(),
                    s.refine.as_secs_f64(),
                    s.d2h.as_secs_f64(),
                    s.gather.as_secs_f64(),
                    s.gather_h2d.as_secs_f64(),
                    s.gather_d2h.as_secs_f64()
                ),
                None => "null".to_string(),
            };
            format!(
                r#"    {{"query": "{}", "sql": "{}", "rows": {}, "datafusion_cold_s": {}, "gpusort_cold_s": {}, "datafusion_s": {}, "gpusort_s": {}, "stages": {stages}}}"#,
                o.query.name,
                escape(&one_line(o.query.sql)),
                o.rows,
                o.datafusion_cold.as_secs_f64(),
                o.gpusort_cold.as_secs_f64(),
                o.datafusion.as_secs_f64(),
                o.gpusort.as_secs_f64()
            )
        })
        .collect();
    format!(
        "{{\n  \"device\": \"{}\",\n  \"partitions\": {partitions},\n  \"rows\": {},\n  \"reps\": {},\n  \"queries\": [\n{}\n  ]\n}}\n",
        escape(device),
        rows,
        options.reps,
        entries.join(",\n")
    )
}

/// Writes each table to `<dir>/<name>.parquet`, row order kept.
fn write_parquet(tables: &[Table], dir: &Path) -> Result<()> {
    create_dir(dir)?;
    for table in tables {
        let path = dir.join(format!("{}.parquet", table.name));
        let batches = table.partitions.iter().flatten().cloned().map(Ok);
        write_parquet_file(&path, Arc::clone(&table.schema), None, batches)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Writes each table's partitions to `<dir>/<name>/part-<p>.parquet`, row order kept:
/// several files of several row groups, as users' tables are. Files already there from an
/// earlier run with the same rows are rewritten.
fn write_partition_files(tables: &[Table], dir: &Path) -> Result<()> {
    let started = Instant::now();
    let jobs: Vec<(&Table, usize)> = tables
        .iter()
        .flat_map(|t| (0..t.partitions.len()).map(move |p| (t, p)))
        .collect();
    jobs.into_par_iter().try_for_each(|(table, p)| {
        let folder = dir.join(table.name);
        create_dir(&folder)?;
        let path = folder.join(format!("part-{p:03}.parquet"));
        let batches = table.partitions[p].iter().cloned().map(Ok);
        write_parquet_file(&path, Arc::clone(&table.schema), None, batches).map(|_| ())
    })?;
    eprintln!(
        "wrote the tables as Parquet under {} in {:.1} s",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Creates `dir` and its parents.
pub fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| DataFusionError::Execution(format!("creating {}: {e}", dir.display())))
}

/// Writes `batches` to the Parquet file `path` and syncs it; returns the rows written.
/// Synced, the files are on disk before any query is timed: the kernel's write-back of
/// several GB would otherwise run during the first queries (Q1 measured 0.258 s in such a
/// run, 0.20 s without the files).
pub fn write_parquet_file(
    path: &Path,
    schema: SchemaRef,
    properties: Option<WriterProperties>,
    batches: impl IntoIterator<Item = Result<RecordBatch>>,
) -> Result<usize> {
    let io = |what: &str, e: std::io::Error| {
        DataFusionError::Execution(format!("{what} {}: {e}", path.display()))
    };
    let file = std::fs::File::create(path).map_err(|e| io("creating", e))?;
    let mut writer = ArrowWriter::try_new(file, schema, properties)?;
    let mut rows = 0;
    for batch in batches {
        let batch = batch?;
        rows += batch.num_rows();
        writer.write(&batch)?;
    }
    let file = writer.into_inner()?;
    file.sync_all().map_err(|e| io("syncing", e))?;
    Ok(rows)
}
