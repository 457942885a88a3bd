//! Several GPUs in one host: a session's `gpu_sort.devices`, each run on the least busy
//! device of the set, and a device that fails left out while the others sort. Tests that
//! need two devices say so and return on a host of one.

use super::*;
use gpusort::{DeviceMemoryLimit, DeviceSelection};

use common::load::gpu_sort_metric;
use faults::{is_child, run_child};

/// Whether this host has at least two devices (said when not).
fn two_devices() -> bool {
    let count = cuda::selected_ordinals(DeviceSelection::All).len();
    if count < 2 {
        eprintln!("skipped: needs 2 CUDA devices, this host has {count}");
    }
    count >= 2
}

/// A session forcing gpusort on the CUDA backend over `devices`, runs of at most
/// `run_rows` rows, the faults of `faults` injected.
fn session(
    devices: &str,
    run_rows: usize,
    faults: FaultScope,
) -> datafusion::prelude::SessionContext {
    let mut gpu = gpusort::GpuSortConfig::forced_cpu();
    gpu.backend = Cuda;
    gpu.devices = devices.parse().unwrap();
    gpu.run_rows = run_rows;
    gpu.fault_scope = faults.id();
    gpusort::gpu_sort_context_with(common::session_config(4, 8192), gpu)
}

/// `rows` rows of `k` (Int64, random, with repeats) and `rid` (the row's position), in 4
/// partitions.
fn table(rows: usize, label: &str) -> Vec<Vec<RecordBatch>> {
    let keys = random_keys(rows, label, |x| (x % 100_000) as i64);
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("rid", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(keys)),
            Arc::new(Int64Array::from_iter_values(0..rows as i64)),
        ],
    )
    .unwrap();
    let per = rows / 4;
    (0..4).map(|p| vec![batch.slice(p * per, per)]).collect()
}

/// Runs `sql` on `ctx` and on stock DataFusion over `table`: the answers must be equal
/// (the queries order by `rid` last, since DataFusion's own sort does not keep ties in
/// input order). Returns the plan, with its metrics, and its text.
async fn same_as_datafusion(
    ctx: &datafusion::prelude::SessionContext,
    table: &[Vec<RecordBatch>],
    sql: &str,
) -> (Arc<dyn datafusion::physical_plan::ExecutionPlan>, String) {
    let stock = common::stock_context(common::session_config(4, 8192));
    common::register(&[&stock, ctx], "t", table.to_vec());
    let expected = stock.sql(sql).await.unwrap().collect().await.unwrap();
    let plan = common::physical_plan(ctx, sql).await.unwrap();
    let actual = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx())
        .await
        .unwrap();
    let schema = expected[0].schema();
    assert_eq!(
        datafusion::arrow::compute::concat_batches(&schema, &actual).unwrap(),
        datafusion::arrow::compute::concat_batches(&schema, &expected).unwrap(),
        "{sql}"
    );
    let text = common::plan_text(&plan);
    (plan, text)
}

/// Runs sorted on each of the first `devices` devices (`device<N>_runs`).
fn runs_by_device(
    plan: &Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    devices: usize,
) -> Vec<usize> {
    (0..devices)
        .map(|d| gpu_sort_metric(plan, &format!("device{d}_runs")))
        .collect()
}

// A run sorted while another's state holds memory on one device goes to a device that
// holds less. Both orders are the CPU's.
gpu_test!(a_second_run_goes_to_the_idle_device, |_rt| {
    if !two_devices() {
        return;
    }
    let backend = CudaBackend::on_devices(DeviceMemoryLimit::Auto, DeviceSelection::All).unwrap();
    let ordinals = backend.device_ordinals();
    assert!(ordinals.len() >= 2, "{ordinals:?}");
    let (keys, other) = (
        faults::encoded(1 << 20, "devices first"),
        faults::encoded(1 << 20, "devices second"),
    );
    let first = backend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    let at = first.device.ordinal.expect("sorted on a device");
    let used = |d: usize| cuda::runtime_of(d).unwrap().device_memory().used;
    let idle = *ordinals.iter().find(|&&d| d != at).unwrap();
    assert!(
        used(idle) < used(at),
        "the first run's state keeps its order on device {at}: {} bytes there, {} on {idle}",
        used(at),
        used(idle)
    );
    let second = backend.sort(&other, AlgorithmChoice::Auto, None).unwrap();
    let next = second.device.ordinal.expect("sorted on a device");
    assert_ne!(
        next, at,
        "device {at} holds the first run: another is less busy"
    );
    for (run, keys) in [(&first, &keys), (&second, &other)] {
        let expected = CpuBackend.sort(keys, AlgorithmChoice::Auto, None).unwrap();
        assert!(!run.fell_back);
        assert_eq!(run.permutation, expected.permutation);
    }
});

/// `gpu_sort.devices` picks the devices a session sorts on: EXPLAIN names them, and every
/// run sorted on a device is counted under that device; the answers are DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn a_session_sorts_on_the_devices_it_names() {
    if device().is_none() || !two_devices() {
        return;
    }
    let count = cuda::selected_ordinals(DeviceSelection::All).len();
    let table = table(1 << 21, "devices session");
    let sql = "SELECT k, rid FROM t ORDER BY k DESC, rid";
    let window = "SELECT k, rid, ROW_NUMBER() OVER (PARTITION BY k % 7 ORDER BY k, rid) AS rn \
                  FROM t ORDER BY rid";
    for (query, every_run_on_a_device) in [(sql, true), (window, false)] {
        // Device 1 alone.
        let ctx = session("1,", 1 << 19, FaultScope::default());
        let (plan, text) = same_as_datafusion(&ctx, &table, query).await;
        assert!(text.contains("devices=[1]"), "{text}");
        let by_device = runs_by_device(&plan, count);
        let runs = gpu_sort_metric(&plan, "runs");
        assert_eq!(gpu_sort_metric(&plan, "gpu_fallbacks"), 0, "{query}");
        assert_eq!(by_device[0], 0, "{query}: device 0 is not in the set");
        assert!(by_device[1] > 0, "{query}: {by_device:?} of {runs} runs");
        // Every device: each run counted once, on the device that sorted it.
        let ctx = session("all", 1 << 19, FaultScope::default());
        let (plan, text) = same_as_datafusion(&ctx, &table, query).await;
        let all: Vec<String> = (0..count).map(|d| d.to_string()).collect();
        assert!(
            text.contains(&format!("devices=[{}]", all.join(","))),
            "{text}"
        );
        let by_device = runs_by_device(&plan, count);
        let runs = gpu_sort_metric(&plan, "runs");
        let on_devices = by_device.iter().sum::<usize>();
        assert!(
            on_devices > 0 && on_devices <= runs,
            "{query}: {by_device:?}"
        );
        if every_run_on_a_device {
            // 2 Mi rows in runs of 512 Ki: four runs, each sorted on some device.
            assert_eq!((runs, on_devices), (4, 4), "{query}: {by_device:?}");
        }
        println!("{query}: {runs} runs, by device {by_device:?}");
    }
}

/// A fatal error on device 1 disables it alone: the query that hit it answers right (on
/// the CPU), and later sessions over every device sort on the others (in a child process:
/// the device stays disabled for the process).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_failed_device_is_left_out_and_the_others_sort() {
    if device().is_none() || !two_devices() {
        return;
    }
    let text = run_child("devices::failed_device_child", &[]);
    assert!(text.contains("device 1 disabled"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn failed_device_child() {
    if !is_child("devices::failed_device_child") || device().is_none() {
        return;
    }
    let count = cuda::selected_ordinals(DeviceSelection::All).len();
    let table = table(1 << 20, "devices fault");
    let sql = "SELECT k, rid FROM t ORDER BY k, rid";
    let faults = FaultScope::new();
    faults.arm_on(1, Fault::LaunchFailure);
    let ctx = session("1,", 1 << 28, faults);
    let (plan, _) = same_as_datafusion(&ctx, &table, sql).await;
    assert!(
        !faults.is_armed(Fault::LaunchFailure),
        "the fault never fired"
    );
    assert_eq!(gpu_sort_metric(&plan, "gpu_fallbacks"), 1);
    let reason = cuda::disabled_reason_of(1).expect("a launch failure disables the device");
    assert!(
        cuda::disabled_reason_of(0).is_none(),
        "device 0 is not touched"
    );
    println!("device 1 disabled: {reason}");
    let later = session("all", 1 << 28, FaultScope::default());
    let (plan, text) = same_as_datafusion(&later, &table, sql).await;
    let others: Vec<String> = (0..count)
        .filter(|&d| d != 1)
        .map(|d| d.to_string())
        .collect();
    assert!(
        text.contains(&format!("devices=[{}]", others.join(","))),
        "{text}"
    );
    let by_device = runs_by_device(&plan, count);
    assert_eq!(gpu_sort_metric(&plan, "gpu_fallbacks"), 0);
    assert_eq!(by_device[1], 0, "{by_device:?}");
    assert_eq!(by_device.iter().sum::<usize>(), 1, "{by_device:?}");
    assert!(cuda::runtime_of(1).unwrap_err().contains("disabled"));
    assert!(cuda::runtime_of(0).is_ok());
}

/// A session whose runs of at least `spread_min_rows` rows are sorted over all its devices
/// at once (`gpu_sort.spread_min_rows`); `devices` as `gpu_sort.devices` takes them.
fn spread_session(devices: &str, spread_min_rows: usize) -> datafusion::prelude::SessionContext {
    spread_session_with(devices, spread_min_rows, FaultScope::default())
}

/// [`spread_session`] with the faults of `faults` injected.
fn spread_session_with(
    devices: &str,
    spread_min_rows: usize,
    faults: FaultScope,
) -> datafusion::prelude::SessionContext {
    let mut gpu = gpusort::GpuSortConfig::forced_cpu();
    gpu.backend = Cuda;
    gpu.devices = devices.parse().unwrap();
    gpu.run_rows = 1 << 22;
    gpu.spread_min_rows = spread_min_rows;
    gpu.fault_scope = faults.id();
    gpusort::gpu_sort_context_with(common::session_config(4, 8192), gpu)
}

/// `rows` rows: `k` (Int64, a null every 13th row, repeats), `d` (Float64 with NaN, -0.0,
/// +0.0 and infinities), `b` (Int32, 5 values), `rid`, `f` (Boolean, a null every 7th
/// row), in 4 partitions.
fn mixed_table(rows: usize, label: &str) -> Vec<Vec<RecordBatch>> {
    use datafusion::arrow::array::{BooleanArray, Float64Array, Int32Array};
    let keys = random_keys(rows, label, |x| x);
    let specials = [
        f64::NAN,
        -0.0,
        0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -f64::NAN,
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("d", DataType::Float64, false),
        Field::new("b", DataType::Int32, false),
        Field::new("rid", DataType::Int64, false),
        Field::new("f", DataType::Boolean, true),
    ]));
    let f = BooleanArray::from_iter((0..rows).map(|i| (i % 7 != 2).then_some(keys[i] & 4 == 0)));
    let k = Int64Array::from_iter(
        (0..rows).map(|i| (i % 13 != 5).then_some((keys[i] % 50_000) as i64 - 25_000)),
    );
    let d = Float64Array::from_iter_values((0..rows).map(|i| match keys[i] % 97 {
        s @ 0..=5 => specials[s as usize],
        v => (v as f64 - 48.0) / 4.0,
    }));
    let b = Int32Array::from_iter_values(keys.iter().map(|x| (x >> 40) as i32 % 5));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(k),
            Arc::new(d),
            Arc::new(b),
            Arc::new(Int64Array::from_iter_values(0..rows as i64)),
            Arc::new(f),
        ],
    )
    .unwrap();
    let per = rows / 4;
    (0..4).map(|p| vec![batch.slice(p * per, per)]).collect()
}

/// The queries of the spread tests; each ends with a unique key, so DataFusion's answer
/// is the one order.
const SPREAD_QUERIES: [&str; 4] = [
    "SELECT * FROM t ORDER BY k NULLS FIRST, d DESC, b, rid",
    "SELECT k, d, f, rid FROM t ORDER BY d, k DESC NULLS LAST, rid",
    "SELECT b, rid FROM t ORDER BY b DESC, rid",
    // A LIMIT: the payload is gathered for a prefix of the order, whose rows lie anywhere.
    "SELECT * FROM t ORDER BY k NULLS FIRST, d DESC, b, rid LIMIT 5000",
];

/// A run at least `spread_min_rows` long is sorted over both devices by key ranges: the
/// answers are DataFusion's (nulls, float order, directions), ties keep input order as on
/// one device, and the run counts on every device and in `spread_runs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn large_runs_spread_over_the_devices() {
    if device().is_none() || !two_devices() {
        return;
    }
    let table = mixed_table((1 << 21) + 12, "spread session");
    let ctx = spread_session("all", 1 << 16);
    for sql in SPREAD_QUERIES {
        let (plan, text) = same_as_datafusion(&ctx, &table, sql).await;
        assert_eq!(gpu_sort_metric(&plan, "gpu_fallbacks"), 0, "{sql}");
        assert!(gpu_sort_metric(&plan, "spread_runs") >= 1, "{sql}: {text}");
        assert!(
            runs_by_device(&plan, 2).iter().all(|&r| r >= 1),
            "{sql}: {text}"
        );
    }
    // Ties without a tiebreak: the input order (one partition, so it is fixed), as one
    // device keeps it.
    let (ctx, one) = (spread_session("all", 1 << 16), spread_session("1", 1 << 16));
    let single_partition: Vec<RecordBatch> = table.iter().flatten().cloned().collect();
    common::register(&[&ctx, &one], "t", vec![single_partition]);
    let sql = "SELECT b, rid FROM t ORDER BY b";
    let spread = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let single = one.sql(sql).await.unwrap().collect().await.unwrap();
    let schema = spread[0].schema();
    assert_eq!(
        datafusion::arrow::compute::concat_batches(&schema, &spread).unwrap(),
        datafusion::arrow::compute::concat_batches(&schema, &single).unwrap(),
    );
}

/// Without peer copies (`GPUSORT_PEER_COPIES=0`, as on a host without peer access) a spread
/// run's ranges and payload go through host memory, with the same answers (in a child
/// process: the switch is the process's).
#[test]
#[ignore = "needs a CUDA GPU"]
fn spread_runs_go_through_host_memory_without_peer_copies() {
    if device().is_none() || !two_devices() {
        return;
    }
    run_child(
        "devices::spread_through_host_child",
        &[("GPUSORT_PEER_COPIES", "0")],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn spread_through_host_child() {
    if !is_child("devices::spread_through_host_child") || device().is_none() {
        return;
    }
    assert!(!cuda::switches().peer_copies());
    let table = mixed_table((1 << 20) + 3, "spread host");
    let ctx = spread_session("all", 1 << 16);
    for sql in SPREAD_QUERIES {
        let (plan, text) = same_as_datafusion(&ctx, &table, sql).await;
        assert!(gpu_sort_metric(&plan, "spread_runs") >= 1, "{sql}: {text}");
        assert_eq!(gpu_sort_metric(&plan, "gpu_fallbacks"), 0, "{sql}");
    }
}

/// A device that fails in a spread sort is disabled; the run is sorted on the device left
/// and the answers stay DataFusion's (in a child process: it disables the device).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_device_failing_in_a_spread_sort_is_left_out() {
    if device().is_none() || !two_devices() {
        return;
    }
    let text = run_child("devices::failed_spread_child", &[]);
    assert!(text.contains("device 1 disabled"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn failed_spread_child() {
    if !is_child("devices::failed_spread_child") || device().is_none() {
        return;
    }
    let table = mixed_table(1 << 20, "spread fault");
    let faults = FaultScope::new();
    faults.arm_on(1, Fault::LaunchFailure);
    let ctx = spread_session_with("all", 1 << 16, faults);
    let (plan, text) = same_as_datafusion(&ctx, &table, SPREAD_QUERIES[0]).await;
    assert!(
        !faults.is_armed(Fault::LaunchFailure),
        "the fault never fired"
    );
    let reason = cuda::disabled_reason_of(1).expect("a launch failure disables the device");
    println!("device 1 disabled: {reason}");
    assert_eq!(gpu_sort_metric(&plan, "spread_runs"), 0, "{text}");
    assert!(gpu_sort_metric(&plan, "device0_runs") >= 1, "{text}");
    // Later sorts leave device 1 out.
    let (plan, text) = same_as_datafusion(&ctx, &table, SPREAD_QUERIES[2]).await;
    assert_eq!(gpu_sort_metric(&plan, "device1_runs"), 0, "{text}");
}

/// A run one device cannot hold within `gpu_sort.device_memory_limit` is sorted over both
/// devices at once (`gpu_sort.spread_large_runs`) and its payload gathered on them, each
/// holding a slice: no pieces, no fallback, every column gathered on the devices, each
/// device within the limit, and DataFusion's answers. Without it the same run is sorted in
/// pieces. In a child process: the limit counts all the process's device memory.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_run_one_device_cannot_hold_is_spread_over_the_devices() {
    if device().is_none() || !two_devices() {
        return;
    }
    let text = run_child("devices::too_large_for_one_child", &[]);
    for line in text.lines().filter(|l| l.contains("device peak")) {
        println!("{line}");
    }
}

/// `table` with `g` (Int64) added: null only in its first 1000 rows, so that some slices
/// of the column have a validity bitmap and others none.
fn with_early_nulls(table: Vec<Vec<RecordBatch>>) -> Vec<Vec<RecordBatch>> {
    let mut first = 0;
    table
        .into_iter()
        .map(|partition| {
            partition
                .into_iter()
                .map(|batch| {
                    let rows = batch.num_rows();
                    let g = Int64Array::from_iter(
                        (first..first + rows).map(|i| (i >= 1000).then_some(i as i64 % 777)),
                    );
                    first += rows;
                    let mut fields = batch.schema().fields().to_vec();
                    fields.push(Arc::new(Field::new("g", DataType::Int64, true)));
                    let mut columns = batch.columns().to_vec();
                    columns.push(Arc::new(g));
                    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
                })
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn too_large_for_one_child() {
    if !is_child("devices::too_large_for_one_child") || device().is_none() {
        return;
    }
    // 2 Mi rows: the first query's keys take about 264 MB by one device's estimate and
    // 132 MB on each of two; the payload about 70 MB, in slices of 35.
    let limit = 200 << 20;
    let table = with_early_nulls(mixed_table(1 << 21, "spread too large"));
    let context = |spread_large_runs: bool| {
        let mut gpu = gpusort::GpuSortConfig::forced_cpu();
        gpu.backend = Cuda;
        gpu.run_rows = 1 << 24;
        gpu.device_memory_limit = DeviceMemoryLimit::Bytes(limit);
        gpu.spread_large_runs = spread_large_runs;
        gpusort::gpu_sort_context_with(common::session_config(4, 8192), gpu)
    };
    let runtimes: Vec<_> = (0..2).map(|d| cuda::runtime_of(d).unwrap()).collect();
    runtimes.iter().for_each(|rt| rt.reset_device_memory_peak());
    let ctx = context(true);
    for (sql, columns) in [
        ("SELECT * FROM t ORDER BY k NULLS FIRST, d DESC, b, rid", 6),
        (
            "SELECT k, d, f, g, rid FROM t ORDER BY d, k DESC NULLS LAST, rid",
            5,
        ),
    ] {
        let (plan, text) = same_as_datafusion(&ctx, &table, sql).await;
        assert!(gpu_sort_metric(&plan, "spread_runs") >= 1, "{sql}: {text}");
        assert_eq!(gpu_sort_metric(&plan, "device_splits"), 0, "{sql}: {text}");
        assert_eq!(gpu_sort_metric(&plan, "gpu_fallbacks"), 0, "{sql}: {text}");
        assert_eq!(
            gpu_sort_metric(&plan, "device_gathered_columns"),
            columns,
            "{sql}: every column gathered on the devices: {text}"
        );
    }
    for (d, rt) in runtimes.iter().enumerate() {
        let memory = rt.device_memory();
        println!("device {d}: device peak {} of {limit} bytes", memory.peak);
        assert!(memory.peak <= limit, "device {d}: {memory:?}");
    }
    // The same run on one device at a time: in pieces.
    let sql = "SELECT * FROM t ORDER BY k NULLS FIRST, d DESC, b, rid";
    let (plan, text) = same_as_datafusion(&context(false), &table, sql).await;
    assert_eq!(gpu_sort_metric(&plan, "spread_runs"), 0, "{text}");
    assert!(gpu_sort_metric(&plan, "device_splits") >= 1, "{text}");
}
