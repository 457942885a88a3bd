//! A coordinator and localhost worker processes sorting a Parquet table with gpusort.
//!
//! ```sh
//! cargo run --release -p gpusort-distributed --example 01_localhost_cluster -- --workers 2
//! ```
//!
//! starts two workers (this program with `worker --port P`, as separate processes), writes
//! a Parquet table (unless `--data` names one), prints the distributed plan of the query,
//! runs it `--reps` times on the cluster and, with `--compare`, the same query in this one
//! process with gpusort, and prints the times. Each worker sorts its share on its own GPU
//! (or CPU); the coordinator merges and counts the rows. Workers on one host share its GPU:
//! each gets `gpu_sort.device_memory_limit` = 80 % / workers of it unless told otherwise.
//!
//! To run workers yourself (on other hosts), start `01_localhost_cluster worker --port P` on
//! each and pass `--worker-urls http://host:P,...` to the coordinator.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_distributed::{DistributedExt, SessionStateBuilderExt, WorkerResolver};
use futures::StreamExt;
use gpusort::{gpu_sort_context_with, BackendChoice, GpuSortConfig};
use gpusort_distributed::{explain_distributed, gpu_sort_worker, DistributedGpuSortExt};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use url::Url;

#[derive(Parser)]
#[command(about = "gpusort on a localhost datafusion-distributed cluster")]
struct Args {
    #[command(subcommand)]
    role: Option<Role>,
    /// Worker processes to start on this host.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Workers already running (comma-separated URLs); none are started then.
    #[arg(long, value_delimiter = ',')]
    worker_urls: Vec<Url>,
    /// First port of the started workers.
    #[arg(long, default_value_t = 50_100)]
    port: u16,
    /// A directory of Parquet files registered as table `t`; one is written when absent.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Rows of the written table (i64 key `k`, f64 `v`, string `s`).
    #[arg(long, default_value_t = 4_000_000)]
    rows: usize,
    /// Files of the written table.
    #[arg(long, default_value_t = 8)]
    files: usize,
    /// The query; its rows are counted on the coordinator.
    #[arg(long, default_value = "SELECT * FROM t ORDER BY k, v")]
    query: String,
    /// Runs of the query (the first is also timed).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Also run the query in this process alone (gpusort, no workers) and compare.
    #[arg(long)]
    compare: bool,
    /// gpu_sort.backend of the workers (and of the one-process run).
    #[arg(long, default_value = "auto")]
    backend: String,
    /// gpu_sort.device_memory_limit of every worker (default: 80 % / workers for workers
    /// started here, which share this host's GPU; auto for --worker-urls).
    #[arg(long)]
    device_memory_limit: Option<String>,
    /// Other gpu_sort settings, as KEY=VALUE (e.g. combine_partitions=false).
    #[arg(long = "set", value_delimiter = ',')]
    settings: Vec<String>,
    /// Partitions per process (default: its cores).
    #[arg(long)]
    target_partitions: Option<usize>,
    /// After the timed runs, print the cluster's EXPLAIN ANALYZE of the query: the time
    /// each worker's operators and the coordinator's merge took.
    #[arg(long)]
    analyze: bool,
}

#[derive(Subcommand)]
enum Role {
    /// Serve as a worker on 127.0.0.1:PORT until killed.
    Worker {
        #[arg(long)]
        port: u16,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(Role::Worker { port }) = args.role {
        return serve_worker(port).await;
    }
    let data = match &args.data {
        Some(dir) => dir.clone(),
        None => {
            let dir = std::env::temp_dir().join(format!("gpusort-cluster-{}", args.rows));
            if !dir.exists() {
                let started = Instant::now();
                write_table(&dir, args.rows, args.files)?;
                println!(
                    "wrote {} rows to {} in {:.2?}",
                    args.rows,
                    dir.display(),
                    started.elapsed()
                );
            }
            dir
        }
    };
    let (urls, _workers) = match args.worker_urls.is_empty() {
        true => start_workers(args.workers, args.port)?,
        false => (args.worker_urls.clone(), Workers(Vec::new())),
    };
    let shares = urls.len().max(1);
    let mut config = GpuSortConfig::default();
    config.backend = args.backend.parse::<BackendChoice>()?;
    for setting in &args.settings {
        let (key, value) = setting.split_once('=').ok_or_else(|| {
            DataFusionError::Configuration(format!("--set {setting}: expected KEY=VALUE"))
        })?;
        datafusion::config::ExtensionOptions::set(&mut config, key, value)?;
    }
    // Workers started here share this host's GPU: each gets its share of it, unless told.
    let mut distributed_config = config.clone();
    let limit = match (&args.device_memory_limit, args.worker_urls.is_empty()) {
        (Some(limit), _) => Some(limit.clone()),
        (None, true) => Some(format!("{}%", 80 / shares)),
        (None, false) => None,
    };
    if let Some(limit) = limit {
        datafusion::config::ExtensionOptions::set(
            &mut distributed_config,
            "device_memory_limit",
            &limit,
        )?;
    }
    let session_config = || {
        let config = SessionConfig::new();
        match args.target_partitions {
            Some(n) => config.with_target_partitions(n),
            None => config,
        }
    };

    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(session_config())
        .with_distributed_worker_resolver(Urls(urls.clone()))
        .with_distributed_planner()
        .with_distributed_gpu_sort(distributed_config)
        .build();
    let cluster = SessionContext::new_with_state(state);
    let path = data
        .to_str()
        .ok_or_else(|| DataFusionError::Plan("a UTF-8 path".into()))?;
    cluster
        .register_parquet("t", path, ParquetReadOptions::default())
        .await?;
    println!("{}", explain_distributed(&cluster, &args.query).await?);
    let cluster_times = run(
        &cluster,
        &args.query,
        args.reps,
        &format!("{} workers", urls.len()),
    )
    .await?;
    if args.analyze {
        print_explain_analyze(&cluster, &args.query).await?;
    }

    if args.compare {
        config.min_rows = GpuSortConfig::default().min_rows;
        let single = gpu_sort_context_with(session_config(), config);
        single
            .register_parquet("t", path, ParquetReadOptions::default())
            .await?;
        let single_times = run(&single, &args.query, args.reps, "one process").await?;
        let median = |t: &[f64]| {
            let mut t = t.to_vec();
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        };
        println!(
            "median: {} workers {:.3} s, one process {:.3} s ({:.2}x)",
            urls.len(),
            median(&cluster_times),
            median(&single_times),
            median(&cluster_times) / median(&single_times)
        );
    }
    Ok(())
}

/// Runs `sql` `reps` times, counting its rows; the seconds of each run.
async fn run(ctx: &SessionContext, sql: &str, reps: usize, label: &str) -> Result<Vec<f64>> {
    let mut times = Vec::new();
    for rep in 0..reps.max(1) {
        let started = Instant::now();
        let mut stream = ctx.sql(sql).await?.execute_stream().await?;
        let mut rows = 0;
        while let Some(batch) = stream.next().await {
            rows += batch?.num_rows();
        }
        let seconds = started.elapsed().as_secs_f64();
        println!("{label}: run {}: {rows} rows in {seconds:.3} s", rep + 1);
        times.push(seconds);
    }
    Ok(times)
}

/// Prints the distributed `EXPLAIN ANALYZE` of `sql`: each stage with its workers' metrics.
async fn print_explain_analyze(ctx: &SessionContext, sql: &str) -> Result<()> {
    let batches = ctx
        .sql(&format!("EXPLAIN ANALYZE {sql}"))
        .await?
        .collect()
        .await?;
    for batch in &batches {
        let plans = cast(batch.column(batch.num_columns() - 1), &DataType::Utf8)?;
        let plans = plans
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| DataFusionError::Internal("EXPLAIN ANALYZE: plan not text".into()))?;
        for plan in plans.iter().flatten() {
            println!("{plan}");
        }
    }
    Ok(())
}

async fn serve_worker(port: u16) -> Result<()> {
    let address = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
    tonic::transport::Server::builder()
        .add_service(gpu_sort_worker().into_worker_server())
        .serve(address)
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))
}

/// Worker processes, killed when dropped.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `count` workers on ports `first_port..` and waits until each accepts connections.
fn start_workers(count: usize, first_port: u16) -> Result<(Vec<Url>, Workers)> {
    let exe = std::env::current_exe()?;
    let mut workers = Workers(Vec::new());
    let mut urls = Vec::new();
    for i in 0..count {
        let port = first_port + i as u16;
        let child = Command::new(&exe)
            .args(["worker", "--port", &port.to_string()])
            .spawn()?;
        workers.0.push(child);
        urls.push(Url::parse(&format!("http://127.0.0.1:{port}")).expect("a valid URL"));
        let address = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return Err(DataFusionError::Execution(format!(
                    "worker on port {port} did not start"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok((urls, workers))
}

struct Urls(Vec<Url>);

impl WorkerResolver for Urls {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(self.0.clone())
    }
}

/// `rows` rows in `files` snappy Parquet files: `k` (i64), `v` (f64), `s` (short strings).
fn write_table(dir: &Path, rows: usize, files: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Float64, false),
        Field::new("s", DataType::Utf8, false),
    ]));
    let per_file = rows.div_ceil(files.max(1));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..files.max(1))
            .map(|file| {
                let schema = Arc::clone(&schema);
                scope.spawn(move || -> Result<()> {
                    let count = per_file.min(rows.saturating_sub(file * per_file));
                    let mut rng = SmallRng::seed_from_u64(file as u64);
                    let properties = WriterProperties::builder()
                        .set_compression(Compression::SNAPPY)
                        .build();
                    let out = std::fs::File::create(dir.join(format!("part-{file:04}.parquet")))?;
                    let mut writer =
                        ArrowWriter::try_new(out, Arc::clone(&schema), Some(properties))?;
                    for start in (0..count).step_by(1 << 20) {
                        let n = (1 << 20).min(count - start);
                        let k: Int64Array = (0..n).map(|_| rng.random::<i64>()).collect();
                        let v: Float64Array = (0..n).map(|_| rng.random::<f64>()).collect();
                        let s: StringArray = (0..n)
                            .map(|_| Some(format!("s{}", rng.random_range(0..100_000))))
                            .collect();
                        let columns: Vec<ArrayRef> = vec![Arc::new(k), Arc::new(v), Arc::new(s)];
                        writer.write(&RecordBatch::try_new(Arc::clone(&schema), columns)?)?;
                    }
                    writer.close()?;
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("writer thread"))
    })
}
