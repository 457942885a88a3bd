//! The device memory budget: runs past `gpu_sort.device_memory_limit` and runs that run
//! out of device memory are sorted in pieces on the device; sixteen queries at once keep
//! the device memory in use within the limit; idle device memory goes back to the driver.
//! The limit counts all the device memory of the process, so the tests that measure it run
//! in a child process each, away from tests running beside them.

use datafusion::arrow::array::StringArray;
use datafusion::arrow::compute::concat_batches;
use gpusort::DeviceMemoryLimit;

use super::*;
use common::load::{
    concurrent_queries_equal_datafusion, gpu_sort_metric, gpu_sort_metric_max, CONCURRENT_QUERIES,
};
use faults::{is_child, run_child};

/// Runs child test `name` and prints what it reported.
fn in_child(name: &str) {
    let text = run_child(name, &[]);
    for line in text.lines().filter(|l| l.contains("device peak")) {
        println!("{line}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn runs_past_the_device_memory_limit_are_sorted_in_pieces_on_the_device() {
    if device().is_some() {
        in_child("budget::pieces_child");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sixteen_queries_at_once_stay_within_the_device_memory_limit() {
    if device().is_some() {
        in_child("budget::sixteen_queries_child");
    }
}

/// `rows` rows in 8 batches: `g` (Int64, 64 values), `k` (Int64, ties), `rid` (unique),
/// `s` (Utf8 payload).
fn table(rows: usize, label: &str) -> Vec<Vec<RecordBatch>> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int64, false),
        Field::new("k", DataType::Int64, false),
        Field::new("rid", DataType::Int64, false),
        Field::new("s", DataType::Utf8, false),
    ]));
    let keys = random_keys(rows, label, |x| x);
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(
                keys.iter().map(|x| (x % 64) as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                keys.iter().map(|x| (x >> 40) as i64),
            )),
            Arc::new(Int64Array::from_iter_values(0..rows as i64)),
            Arc::new(StringArray::from_iter_values(
                keys.iter().map(|x| format!("payload {}", x >> 50)),
            )),
        ],
    )
    .unwrap();
    let per = rows.div_ceil(8);
    vec![(0..rows)
        .step_by(per)
        .map(|at| batch.slice(at, per.min(rows - at)))
        .collect()]
}

/// A session forcing gpusort on the CUDA backend within `limit` of device memory, the
/// faults of `faults` injected.
fn cuda_session(limit: &str, faults: FaultScope) -> datafusion::prelude::SessionContext {
    let mut gpu = gpusort::GpuSortConfig::forced_cpu();
    gpu.backend = Cuda;
    gpu.device_memory_limit = limit.parse().unwrap();
    gpu.fault_scope = faults.id();
    // Pieces on one device are what these tests check, on hosts of several too.
    gpu.spread_large_runs = false;
    gpusort::gpu_sort_context_with(common::session_config(4, 8192), gpu)
}

/// Runs `sql` in `ctx` and in stock DataFusion: the answers must be equal; the plan of
/// `ctx` is returned with its metrics.
async fn same_answer(
    ctx: &datafusion::prelude::SessionContext,
    table: &[Vec<RecordBatch>],
    sql: &str,
) -> Arc<dyn datafusion::physical_plan::ExecutionPlan> {
    let stock = common::stock_context(common::session_config(4, 8192));
    common::register(&[&stock, ctx], "t", table.to_vec());
    let expected = stock.sql(sql).await.unwrap().collect().await.unwrap();
    let plan = common::physical_plan(ctx, sql).await.unwrap();
    let actual = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx())
        .await
        .unwrap();
    let schema = expected[0].schema();
    let (expected, actual) = (
        concat_batches(&schema, &expected).unwrap(),
        concat_batches(&schema, &actual).unwrap(),
    );
    assert_eq!(actual.columns(), expected.columns(), "{sql}");
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn pieces_child() {
    if !is_child("budget::pieces_child") {
        return;
    }
    let rt = device().unwrap();
    let limit = 64 << 20;
    let ctx = cuda_session("64M", FaultScope::default());
    let table = table(4 << 20, "budget pieces");
    rt.reset_device_memory_peak();
    for sql in [
        // Pieces of input order, merged.
        "SELECT * FROM t ORDER BY k, rid",
        // A window's sort: partitions of g sorted in pieces of whole partitions.
        "SELECT g, rid, ROW_NUMBER() OVER (PARTITION BY g ORDER BY k DESC, rid) AS rn FROM t \
         ORDER BY rid",
        "SELECT * FROM t ORDER BY k DESC, rid LIMIT 5000",
    ] {
        let plan = same_answer(&ctx, &table, sql).await;
        let splits = gpu_sort_metric(&plan, "device_splits");
        let fallbacks = gpu_sort_metric(&plan, "gpu_fallbacks");
        let peak = gpu_sort_metric_max(&plan, "device_peak_bytes");
        println!("{sql}: {splits} splits, {fallbacks} fallbacks, device peak {peak} bytes");
        assert!(splits > 0, "{sql}: no run was split under a 64 MiB limit");
        assert_eq!(fallbacks, 0, "{sql}: pieces must sort on the device");
        assert!(peak > 0 && peak <= limit, "{sql}: device peak {peak}");
        let text = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string();
        assert!(text.contains("GpuSortExec"), "{text}");
    }
    let memory = rt.device_memory();
    assert!(memory.peak <= limit, "{memory:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn an_out_of_memory_splits_the_run_and_retries_on_the_device() {
    if device().is_none() {
        return;
    }
    let faults = FaultScope::new();
    let ctx = cuda_session("auto", faults);
    let table = table(1 << 20, "budget oom");
    let sql = "SELECT * FROM t ORDER BY k, rid";
    // The fault fires at this session's next device allocation: its sort's.
    let stock = common::stock_context(common::session_config(4, 8192));
    common::register(&[&stock, &ctx], "t", table.clone());
    let expected = stock.sql(sql).await.unwrap().collect().await.unwrap();
    let plan = common::physical_plan(&ctx, sql).await.unwrap();
    faults.arm(Fault::OutOfMemory);
    let actual = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx())
        .await
        .unwrap();
    let schema = expected[0].schema();
    assert_eq!(
        concat_batches(&schema, &actual).unwrap(),
        concat_batches(&schema, &expected).unwrap()
    );
    assert_eq!(gpu_sort_metric(&plan, "device_splits"), 1);
    assert_eq!(
        gpu_sort_metric(&plan, "gpu_fallbacks"),
        0,
        "the halves sort on the device"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
#[ignore = "needs a CUDA GPU"]
async fn sixteen_queries_child() {
    if !is_child("budget::sixteen_queries_child") {
        return;
    }
    let rt = device().unwrap();
    let limit = 512 << 20;
    rt.reset_device_memory_peak();
    let report =
        concurrent_queries_equal_datafusion(Cuda, 2 << 20, 3, DeviceMemoryLimit::Bytes(limit))
            .await;
    let memory = rt.device_memory();
    println!(
        "{CONCURRENT_QUERIES} at once, {} queries: 0 mismatches, device peak {} of {limit} \
         bytes, {} refused allocations, {report:?}",
        report.queries, memory.peak, memory.refused
    );
    assert!(memory.peak <= limit, "{memory:?}");
    assert!(memory.peak > 0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn idle_device_memory_goes_back_to_the_driver() {
    if device().is_some() {
        in_child("budget::idle_memory_child");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn idle_memory_child() {
    if !is_child("budget::idle_memory_child") {
        return;
    }
    let rt = device().unwrap();
    let keys = faults::encoded(1 << 22, "idle");
    let backend = CudaBackend::new().unwrap();
    let run = backend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    assert!(!run.fell_back);
    drop(run);
    let kept = rt.device.pool_reserved_bytes().unwrap();
    let in_use = rt.device_memory().used as u64;
    assert!(
        kept > in_use,
        "the pool keeps freed blocks: {kept} reserved, {in_use} in use"
    );
    rt.release_idle_memory().unwrap();
    let after = rt.device.pool_reserved_bytes().unwrap();
    assert!(
        after < kept,
        "{after} reserved after the release, {kept} before"
    );
    assert!(
        after <= in_use + (64 << 20),
        "{after} reserved for {in_use} in use"
    );
    println!("idle release: device peak unchanged, pool {kept} -> {after} bytes ({in_use} in use)");
}
