//! An in-memory datafusion-distributed cluster for the tests: workers served by tonic
//! over in-process pipes, a coordinator session with gpusort, the stock single-process
//! DataFusion session the answers are compared with, and a multi-file Parquet table.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_distributed::{
    grpc, ChannelResolver, DistributedExt, SessionStateBuilderExt, Worker, WorkerChannel,
    WorkerQueryContext, WorkerResolver,
};
use gpusort::{GpuSortConfig, GpuSortRule};
use gpusort_distributed::DistributedGpuSortExt;
use hyper_util::rt::TokioIo;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tonic::transport::{Endpoint, Server};
use url::Url;

const WORKER_URL: &str = "http://localhost:50051";

/// Workers of one in-memory server: every URL the coordinator resolves leads to it.
#[derive(Clone)]
pub struct InMemoryWorkers {
    channel: grpc::BoxCloneSyncChannel,
}

impl InMemoryWorkers {
    /// Workers whose sessions run gpusort's operators (`with_gpusort`) or are
    /// datafusion-distributed's defaults, without gpusort's codec.
    pub fn start(with_gpusort: bool) -> Self {
        let (client, server) = tokio::io::duplex(1 << 20);
        let mut client = Some(client);
        let channel = Endpoint::try_from(WORKER_URL)
            .expect("a valid URL")
            .connect_with_connector_lazy(tower::service_fn(move |_| {
                let client = client.take().expect("one connection per in-memory server");
                async move { Ok::<_, std::io::Error>(TokioIo::new(client)) }
            }));
        let this = Self {
            channel: grpc::BoxCloneSyncChannel::new(channel),
        };
        let resolver = this.clone();
        let worker = Worker::from_session_builder(move |ctx: WorkerQueryContext| {
            let resolver = resolver.clone();
            async move {
                let builder = ctx.builder.with_distributed_channel_resolver(resolver);
                let builder = match with_gpusort {
                    true => builder.with_gpu_sort_worker(&ctx.headers)?,
                    false => builder,
                };
                Ok(builder.build())
            }
        });
        tokio::spawn(async move {
            Server::builder()
                .add_service(worker.into_worker_server())
                .serve_with_incoming(tokio_stream::once(Ok::<_, std::io::Error>(server)))
                .await
        });
        this
    }
}

#[async_trait]
impl ChannelResolver for InMemoryWorkers {
    async fn get_worker_client_for_url(&self, _: &Url) -> Result<Box<dyn WorkerChannel>> {
        Ok(grpc::create_worker_client(self.channel.clone()))
    }
}

/// `count` worker URLs.
pub struct Urls(pub usize);

impl WorkerResolver for Urls {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(vec![Url::parse(WORKER_URL).expect("a valid URL"); self.0])
    }
}

/// Partitions per process, in the coordinator, the workers and the reference alike.
pub const TARGET_PARTITIONS: usize = 4;

/// A coordinator over `workers` worker URLs with gpusort's `config` and its rule (whose
/// decisions the caller may read); scans split into small pieces so that every query is
/// spread over the workers.
pub fn coordinator(
    workers: InMemoryWorkers,
    count: usize,
    config: GpuSortConfig,
    rule: Arc<GpuSortRule>,
) -> Result<SessionContext> {
    coordinator_with_budget(workers, count, config, rule, None)
}

/// [`coordinator`], with datafusion-distributed's per-connection buffer budget set to
/// `budget` bytes when given.
pub fn coordinator_with_budget(
    workers: InMemoryWorkers,
    count: usize,
    config: GpuSortConfig,
    rule: Arc<GpuSortRule>,
    budget: Option<usize>,
) -> Result<SessionContext> {
    // Scans keep the files' order, so ties have one input order to keep: no reordering of
    // row groups by statistics, no file taken over by another partition's stream.
    let mut session_config = SessionConfig::new().with_target_partitions(TARGET_PARTITIONS);
    session_config.options_mut().optimizer.enable_sort_pushdown = false;
    session_config
        .options_mut()
        .execution
        .enable_file_stream_work_stealing = false;
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(session_config)
        .with_distributed_worker_resolver(Urls(count))
        .with_distributed_channel_resolver(workers)
        .with_distributed_planner()
        .with_distributed_file_scan_config_bytes_per_partition(64 * 1024)?;
    let state = match budget {
        Some(bytes) => state.with_distributed_worker_connection_buffer_budget_bytes(bytes)?,
        None => state,
    };
    let state = state.with_distributed_gpu_sort_rule(config, rule).build();
    Ok(SessionContext::new_with_state(state))
}

/// Stock DataFusion in one process, without gpusort.
pub fn reference() -> SessionContext {
    SessionContext::new_with_config(SessionConfig::new().with_target_partitions(TARGET_PARTITIONS))
}

/// Registers the table `t` of `dir` in every context.
pub async fn register(dir: &Path, contexts: &[&SessionContext]) -> Result<()> {
    for ctx in contexts {
        ctx.register_parquet(
            "t",
            dir.to_str().expect("a UTF-8 path"),
            ParquetReadOptions::default(),
        )
        .await?;
    }
    Ok(())
}

/// `files` Parquet files of `rows_per_file` rows each (row groups of 1,000 rows) in
/// `dir`, named in row order: `k` (i64, many ties, nulls), `g` (i32, 7 groups), `s`
/// (strings with shared prefixes, nulls), `f` (f64 with -0.0, infinities and NaNs),
/// and `row`, the row's position in the table.
pub fn write_table(dir: &Path, files: usize, rows_per_file: usize, seed: u64) -> Result<()> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("g", DataType::Int32, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("f", DataType::Float64, false),
        Field::new("row", DataType::Int64, false),
    ]));
    let mut rng = SmallRng::seed_from_u64(seed);
    let words = [
        "",
        "a",
        "ab",
        "abc",
        "prefix-long-common-0",
        "prefix-long-common-1",
        "zz",
    ];
    let specials = [
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
    ];
    for file in 0..files {
        let start = (file * rows_per_file) as i64;
        let k: Int64Array = (0..rows_per_file)
            .map(|_| (!rng.random_bool(0.05)).then(|| rng.random_range(0..200)))
            .collect();
        let g: Int32Array = (0..rows_per_file).map(|_| rng.random_range(0..7)).collect();
        let s: StringArray = (0..rows_per_file)
            .map(|_| (!rng.random_bool(0.1)).then(|| words[rng.random_range(0..words.len())]))
            .collect();
        let f: Float64Array = (0..rows_per_file)
            .map(|_| match rng.random_bool(0.1) {
                true => specials[rng.random_range(0..specials.len())],
                false => rng.random_range(-100.0..100.0),
            })
            .collect();
        let row: Int64Array = (start..start + rows_per_file as i64).collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(k),
            Arc::new(g),
            Arc::new(s),
            Arc::new(f),
            Arc::new(row),
        ];
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        let path = dir.join(format!("part-{file:03}.parquet"));
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(1000))
            .build();
        let mut writer = ArrowWriter::try_new(
            std::fs::File::create(path)?,
            Arc::clone(&schema),
            Some(properties),
        )?;
        for offset in (0..rows_per_file).step_by(1000) {
            writer.write(&batch.slice(offset, 1000.min(rows_per_file - offset)))?;
            writer.flush()?;
        }
        writer.close()?;
    }
    Ok(())
}
