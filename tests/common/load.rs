//! Many queries at once in one process: sorts, windows, string keys, a LIMIT and a sort
//! that spills under a memory limit, 16 at a time, each repeated. Every answer must equal
//! DataFusion's (every query orders by a unique column last, so there is one right answer),
//! and on the CUDA backend the device memory in use must never pass the sessions'
//! `gpu_sort.device_memory_limit`.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use gpusort::{
    BackendChoice, DeviceMemoryLimit, GpuSortConfig, GpuSortExec, SessionStateBuilderExt,
};
use rand::Rng;

use super::data::case_rng;
use super::{physical_plan, register, seed, session_config, stock_context};

/// Queries run at once.
pub const CONCURRENT_QUERIES: usize = 16;

/// The queries, each ordered by `rid` (unique) last. The last one runs under a memory
/// limit and spills.
const QUERIES: [&str; 6] = [
    "SELECT * FROM t ORDER BY k, rid",
    "SELECT rid, s, g FROM t ORDER BY s DESC NULLS LAST, rid",
    "SELECT g, k, rid, ROW_NUMBER() OVER (PARTITION BY g ORDER BY k DESC, rid) AS rn \
     FROM t ORDER BY rid",
    "SELECT g, rid, SUM(k) OVER (PARTITION BY g ORDER BY s, rid \
     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running FROM t ORDER BY g, rid",
    "SELECT * FROM t ORDER BY v DESC, rid LIMIT 1000",
    "SELECT rid, s, v FROM t ORDER BY s, v, rid",
];

/// What a load run did.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Queries answered.
    pub queries: usize,
    /// Runs sorted in pieces because the device could not hold them whole.
    pub device_splits: usize,
    /// Runs the CUDA backend handed to the CPU.
    pub gpu_fallbacks: usize,
    /// Runs spilled to disk.
    pub spills: usize,
}

/// Table `t` of `rows` rows in 4 partitions: `g` (Int32, 200 values, nulls), `k` (Int64,
/// many ties, nulls), `rid` (Int64, unique), `s` (Utf8, 0 to 60 bytes, nulls), `v`
/// (Float64 with NaN, -0.0 and nulls).
fn table(rows: usize) -> Vec<Vec<RecordBatch>> {
    let mut rng = case_rng(seed(), "load");
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int32, true),
        Field::new("k", DataType::Int64, true),
        Field::new("rid", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("v", DataType::Float64, true),
    ]));
    let per = rows.div_ceil(4);
    (0..4)
        .map(|p| {
            let first = p * per;
            let n = per.min(rows.saturating_sub(first));
            (0..n)
                .step_by(8192)
                .map(|at| {
                    let len = 8192.min(n - at);
                    let g: Int32Array = (0..len)
                        .map(|_| rng.random_bool(0.98).then(|| rng.random_range(0..200)))
                        .collect();
                    let k: Int64Array = (0..len)
                        .map(|_| rng.random_bool(0.97).then(|| rng.random_range(-5000..5000)))
                        .collect();
                    let rid = Int64Array::from_iter_values(
                        (first + at..first + at + len).map(|r| r as i64),
                    );
                    let s: StringArray = (0..len)
                        .map(|_| {
                            rng.random_bool(0.95).then(|| {
                                let chars = rng.random_range(0..60);
                                (0..chars)
                                    .map(|_| rng.random_range(b'a'..=b'e') as char)
                                    .collect::<String>()
                            })
                        })
                        .collect();
                    let v: Float64Array = (0..len)
                        .map(|_| match rng.random_range(0..100) {
                            0 => None,
                            1 => Some(f64::NAN),
                            2 => Some(-0.0),
                            _ => Some(rng.random_range(-1e3..1e3)),
                        })
                        .collect();
                    let columns: Vec<ArrayRef> = vec![
                        Arc::new(g),
                        Arc::new(k),
                        Arc::new(rid),
                        Arc::new(s),
                        Arc::new(v),
                    ];
                    RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
                })
                .collect()
        })
        .collect()
}

/// A session with gpusort forced on every sort, on `backend` within `device_limit`, and
/// a memory pool of `memory_limit` bytes when given.
fn gpu_session(
    backend: BackendChoice,
    device_limit: DeviceMemoryLimit,
    memory_limit: Option<usize>,
) -> SessionContext {
    let mut gpu = GpuSortConfig::forced_cpu();
    gpu.backend = backend;
    gpu.device_memory_limit = device_limit;
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limit) = memory_limit {
        runtime = runtime.with_memory_limit(limit, 1.0);
    }
    let state = SessionStateBuilder::new()
        .with_config(session_config(4, 8192))
        .with_runtime_env(runtime.build_arc().unwrap())
        .with_default_features()
        .with_gpu_sort(gpu)
        .build();
    SessionContext::new_with_state(state)
}

/// The most of metric `name` over the plan's `GpuSortExec`s and their partitions.
pub fn gpu_sort_metric_max(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
    let mut most = 0;
    plan.apply(|node| {
        if node.downcast_ref::<GpuSortExec>().is_some() {
            for metric in node.metrics().iter().flat_map(|m| m.iter()) {
                if metric.value().name() == name {
                    most = most.max(metric.value().as_usize());
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    most
}

/// The sum of metric `name` over the plan's `GpuSortExec`s.
pub fn gpu_sort_metric(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
    let mut total = 0;
    plan.apply(|node| {
        if node.downcast_ref::<GpuSortExec>().is_some() {
            let metrics = node.metrics();
            total += metrics
                .and_then(|m| m.sum_by_name(name))
                .map_or(0, |v| v.as_usize());
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    total
}

/// Runs [`CONCURRENT_QUERIES`] queries at a time over `rows` rows, `reps` times each, on
/// `backend` within `device_limit`; every answer must equal DataFusion's.
pub async fn concurrent_queries_equal_datafusion(
    backend: BackendChoice,
    rows: usize,
    reps: usize,
    device_limit: DeviceMemoryLimit,
) -> LoadReport {
    let partitions = table(rows);
    let input_bytes: usize = partitions
        .iter()
        .flatten()
        .map(RecordBatch::get_array_memory_size)
        .sum();
    let stock = stock_context(session_config(4, 8192));
    register(&[&stock], "t", partitions.clone());
    let mut expected = Vec::new();
    for sql in QUERIES {
        let batches = stock.sql(sql).await.unwrap().collect().await.unwrap();
        expected.push(Arc::new(batches));
    }
    let partitions = Arc::new(partitions);
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..CONCURRENT_QUERIES {
        let (partitions, expected) = (Arc::clone(&partitions), expected.clone());
        tasks.spawn(async move {
            let mut report = LoadReport::default();
            for rep in 0..reps {
                let query = (task + rep) % QUERIES.len();
                let spills = query == QUERIES.len() - 1;
                // Each spilling query has a pool of its own, half the input.
                let memory_limit = spills.then_some(input_bytes / 2);
                let ctx = gpu_session(backend, device_limit, memory_limit);
                register(&[&ctx], "t", (*partitions).clone());
                let sql = QUERIES[query];
                let plan = physical_plan(&ctx, sql).await.unwrap();
                let batches = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx())
                    .await
                    .unwrap_or_else(|e| panic!("task {task} rep {rep}: {sql}: {e}"));
                assert_same_answer(&expected[query], &batches, sql, task, rep);
                report.queries += 1;
                report.device_splits += gpu_sort_metric(&plan, "device_splits");
                report.gpu_fallbacks += gpu_sort_metric(&plan, "gpu_fallbacks");
                let spilled = plan_spills(&plan);
                assert!(!spills || spilled > 0, "task {task}: {sql} did not spill");
                report.spills += spilled;
            }
            report
        });
    }
    let mut total = LoadReport::default();
    while let Some(done) = tasks.join_next().await {
        let report = done.unwrap();
        total.queries += report.queries;
        total.device_splits += report.device_splits;
        total.gpu_fallbacks += report.gpu_fallbacks;
        total.spills += report.spills;
    }
    assert_eq!(total.queries, CONCURRENT_QUERIES * reps);
    total
}

/// Runs spilled by the plan's `GpuSortExec`s.
fn plan_spills(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let mut spills = 0;
    plan.apply(|node| {
        if node.downcast_ref::<GpuSortExec>().is_some() {
            spills += node.metrics().and_then(|m| m.spill_count()).unwrap_or(0);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    spills
}

/// The same rows in the same order, column by column (floats bit for bit).
fn assert_same_answer(
    expected: &[RecordBatch],
    actual: &[RecordBatch],
    sql: &str,
    task: usize,
    rep: usize,
) {
    let context = format!("seed={} task {task} rep {rep}: {sql}", seed());
    let schema = expected
        .first()
        .or(actual.first())
        .map(RecordBatch::schema)
        .expect("some batch");
    let expected = concat_batches(&schema, expected).unwrap();
    let actual = concat_batches(&schema, actual)
        .unwrap_or_else(|e| panic!("{context}: schema differs: {e}"));
    assert_eq!(actual.num_rows(), expected.num_rows(), "{context}: rows");
    for (c, (a, e)) in actual.columns().iter().zip(expected.columns()).enumerate() {
        assert_eq!(a.to_data(), e.to_data(), "{context}: column {c} differs");
    }
}
