//! Sorts that keep their input's partitioning, sorted as one (`combined_partitions`):
//! every output partition must equal the stable sort of its own input partition, in any
//! order the consumer reads the partitions, when executed again, when the input outgrows
//! a run or the memory limit, and within key-prefix segments. Sorts that read the input of
//! a hash repartition themselves (hash routed) must put every row where `RepartitionExec`
//! puts it.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayData, Int32Array, Int64Array, RecordBatch};
use datafusion::arrow::compute::{concat_batches, lexsort_to_indices, take_record_batch};
use datafusion::arrow::compute::{SortColumn, SortOptions};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::config::SpillCompression;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{collect, displayable, ExecutionPlan, Partitioning};
use datafusion::prelude::{SessionConfig, SessionContext};
use gpusort::backend::resolve_backend;
use gpusort::exec::{GpuSortOptions, HashRouting};
use gpusort::sort::SortBackend;
use gpusort::{AlgorithmChoice, BackendChoice, GpuSortConfig, GpuSortExec};
use rand::rngs::StdRng;
use rand::Rng;

use super::compare::assert_same_sort;
use super::data::case_rng;
use super::seed;

/// Columns: `g` (Int32, few values, nulls), `k` (Int64, ties, nulls), `rid` (Int64, the
/// row's position in its partition).
fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int32, true),
        Field::new("k", DataType::Int64, true),
        Field::new("rid", DataType::Int64, false),
    ]))
}

/// One partition of `rows` rows in batches of at most `batch_rows`; `g` ascending (nulls
/// last) when `ordered_by_g`.
fn partition(
    rng: &mut StdRng,
    rows: usize,
    batch_rows: usize,
    ordered_by_g: bool,
) -> Vec<RecordBatch> {
    let mut g: Vec<Option<i32>> = (0..rows)
        .map(|_| rng.random_bool(0.9).then(|| rng.random_range(0..20)))
        .collect();
    if ordered_by_g {
        g.sort_by_key(|v| (v.is_none(), *v));
    }
    let k: Vec<Option<i64>> = (0..rows)
        .map(|_| rng.random_bool(0.95).then(|| rng.random_range(-500..500)))
        .collect();
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int32Array::from(g)),
            Arc::new(Int64Array::from(k)),
            Arc::new(Int64Array::from_iter_values(0..rows as i64)),
        ],
    )
    .unwrap();
    (0..rows)
        .step_by(batch_rows.max(1))
        .map(|at| batch.slice(at, batch_rows.min(rows - at)))
        .collect()
}

/// The sort keys `g ASC NULLS LAST, k DESC NULLS FIRST`.
fn keys(schema: &Schema) -> LexOrdering {
    let g = SortOptions {
        descending: false,
        nulls_first: false,
    };
    let k = SortOptions {
        descending: true,
        nulls_first: true,
    };
    LexOrdering::new(vec![
        PhysicalSortExpr::new(col("g", schema).unwrap(), g),
        PhysicalSortExpr::new(col("k", schema).unwrap(), k),
    ])
    .unwrap()
}

/// What output partition `p` must hold: its input's stable sort (ties in `rid` order).
fn expected(partition: &[RecordBatch], fetch: Option<usize>) -> RecordBatch {
    let batch = concat_batches(&schema(), partition).unwrap();
    let sort_keys = keys(&schema());
    let mut columns: Vec<SortColumn> = sort_keys
        .iter()
        .map(|e| SortColumn {
            values: e
                .expr
                .evaluate(&batch)
                .unwrap()
                .into_array(batch.num_rows())
                .unwrap(),
            options: Some(e.options),
        })
        .collect();
    columns.push(SortColumn {
        values: batch.column(2).clone(),
        options: None,
    });
    let indices = lexsort_to_indices(&columns, fetch).unwrap();
    take_record_batch(&batch, &indices).unwrap()
}

/// A `GpuSortExec` keeping the partitions of `partitions` (declared ordered by `g` when
/// `ordered_by_g`), on `backend`.
fn sort_exec(
    partitions: &[Vec<RecordBatch>],
    ordered_by_g: bool,
    backend: BackendChoice,
    combine: bool,
    run_rows: usize,
    fetch: Option<usize>,
) -> Arc<GpuSortExec> {
    let backend = resolve_backend(&settings_on(backend)).unwrap();
    sort_exec_on(partitions, ordered_by_g, backend, combine, run_rows, fetch)
}

/// [`sort_exec`] on a backend of the test's own.
fn sort_exec_on(
    partitions: &[Vec<RecordBatch>],
    ordered_by_g: bool,
    backend: Arc<dyn SortBackend>,
    combine: bool,
    run_rows: usize,
    fetch: Option<usize>,
) -> Arc<GpuSortExec> {
    let schema = schema();
    let mut source = MemorySourceConfig::try_new(partitions, Arc::clone(&schema), None).unwrap();
    if ordered_by_g {
        let by_g = LexOrdering::new(vec![keys(&schema)[0].clone()]).unwrap();
        source = source.try_with_sort_information(vec![by_g]).unwrap();
    }
    let input = DataSourceExec::from_data_source(source);
    let options = GpuSortOptions {
        backend,
        run_rows,
        algorithm: AlgorithmChoice::Auto,
        device_gather_min_rows: 0,
        input_batch_rows: 0,
        combine_partitions: combine,
    };
    Arc::new(GpuSortExec::try_new(input, keys(&schema), fetch, true, options).unwrap())
}

/// Executes `plan`'s partitions in `order`, each read to its end before the next one is
/// executed; the outputs by partition.
async fn read_in_order(
    plan: &Arc<GpuSortExec>,
    order: &[usize],
    context: &Arc<TaskContext>,
) -> Vec<Vec<RecordBatch>> {
    use futures::StreamExt;
    let partitions = plan.properties().partitioning.partition_count();
    let mut outputs = vec![Vec::new(); partitions];
    for &p in order {
        let mut stream = plan.execute(p, Arc::clone(context)).unwrap();
        while let Some(batch) = stream.next().await {
            outputs[p].push(batch.unwrap());
        }
    }
    outputs
}

fn check_partitions(
    inputs: &[Vec<RecordBatch>],
    outputs: &[Vec<RecordBatch>],
    fetch: Option<usize>,
    context: &str,
) {
    assert_eq!(inputs.len(), outputs.len(), "{context}");
    let expected: Vec<RecordBatch> = inputs.iter().map(|p| expected(p, fetch)).collect();
    check_sorted(&expected, outputs, context);
}

/// Every output partition equals its expected batch (`rid` among the compared keys: equal
/// order means a stable sort).
fn check_sorted(expected: &[RecordBatch], outputs: &[Vec<RecordBatch>], context: &str) {
    for (p, (expected, output)) in expected.iter().zip(outputs).enumerate() {
        assert_same_sort(
            std::slice::from_ref(expected),
            output,
            &[0, 1, 2],
            &format!("partition {p}: {context}"),
        );
    }
}

/// Partition sizes with empty partitions, one row, and uneven large ones.
/// The bytes `batches` hold, each buffer once: batches sliced from one array share its
/// buffers, and the sort accounts them once too. A limit of twice this size leaves too
/// little room for the sort's working memory (several times the input), so it must
/// spill, and enough for merging the spilled runs.
fn held_bytes<'a>(batches: impl Iterator<Item = &'a RecordBatch>) -> usize {
    fn add(data: &ArrayData, seen: &mut HashSet<usize>) -> usize {
        let nulls = data.nulls().map(|n| n.buffer());
        let own: usize = data
            .buffers()
            .iter()
            .chain(nulls)
            .filter(|b| seen.insert(b.data_ptr().as_ptr() as usize))
            .map(|b| b.capacity())
            .sum();
        own + data
            .child_data()
            .iter()
            .map(|c| add(c, seen))
            .sum::<usize>()
    }
    let mut seen = HashSet::new();
    batches
        .flat_map(|b| b.columns().iter().map(|c| c.to_data()))
        .map(|data| add(&data, &mut seen))
        .sum()
}

fn sizes(scale: usize) -> Vec<usize> {
    vec![0, 1, 50 * scale, 7, 0, 200 * scale, 13 * scale, 3]
}

/// Every output partition equals the stable sort of its input partition, combined or
/// not, with and without a fetch, the partitions read concurrently.
pub async fn combined_partitions_equal_each_partition_sorted(backend: BackendChoice, scale: usize) {
    let label = format!("combined {scale}");
    let mut rng = case_rng(seed(), &label);
    let inputs: Vec<Vec<RecordBatch>> = sizes(scale)
        .iter()
        .map(|&rows| partition(&mut rng, rows, 4096, false))
        .collect();
    let context = Arc::new(TaskContext::default());
    for (combine, fetch) in [
        (true, None),
        (false, None),
        (true, Some(10)),
        (true, Some(0)),
    ] {
        let plan = sort_exec(&inputs, false, backend, combine, 1 << 28, fetch);
        let text = displayable(plan.as_ref()).one_line().to_string();
        let case = format!("seed={} {label} combine={combine} fetch={fetch:?}", seed());
        assert_eq!(
            text.contains(&format!("combined_partitions={}", inputs.len())),
            combine,
            "{text} {case}"
        );
        // All partitions read at once (coalesced), then one by one concurrently.
        let merged = collect(Arc::clone(&plan) as _, Arc::clone(&context))
            .await
            .unwrap();
        let rows: usize = inputs.iter().map(|p| expected(p, fetch).num_rows()).sum();
        assert_eq!(
            merged.iter().map(RecordBatch::num_rows).sum::<usize>(),
            rows,
            "{case}"
        );
        let outputs =
            datafusion::physical_plan::collect_partitioned(plan as _, Arc::clone(&context))
                .await
                .unwrap();
        check_partitions(&inputs, &outputs, fetch, &case);
    }
}

/// Partitions read one after another in any order, and read again (a new execution),
/// give the same results.
pub async fn combined_partitions_in_any_order_and_again(backend: BackendChoice, scale: usize) {
    let label = format!("order {scale}");
    let mut rng = case_rng(seed(), &label);
    let inputs: Vec<Vec<RecordBatch>> = sizes(scale)
        .iter()
        .map(|&rows| partition(&mut rng, rows, 1000, false))
        .collect();
    let context = Arc::new(TaskContext::default());
    let plan = sort_exec(&inputs, false, backend, true, 1 << 28, None);
    let case = format!("seed={} {label}", seed());
    let reversed: Vec<usize> = (0..inputs.len()).rev().collect();
    let outputs = read_in_order(&plan, &reversed, &context).await;
    check_partitions(&inputs, &outputs, None, &format!("reversed {case}"));
    let again = read_in_order(&plan, &reversed, &context).await;
    check_partitions(&inputs, &again, None, &format!("again {case}"));
    // Half of the partitions, then all of them: the second round starts a new execution
    // at the first partition read twice.
    let half: Vec<usize> = (0..inputs.len()).step_by(2).collect();
    let partial = read_in_order(&plan, &half, &context).await;
    for &p in &half {
        assert_same_sort(
            &[expected(&inputs[p], None)],
            &partial[p],
            &[0, 1, 2],
            &case,
        );
    }
    let all: Vec<usize> = (0..inputs.len()).collect();
    let outputs = read_in_order(&plan, &all, &context).await;
    check_partitions(&inputs, &outputs, None, &format!("after half {case}"));
}

/// Inputs larger than one run (each partition sorted in runs and merged) and larger than
/// the memory limit (spilled) still sort every partition on its own.
pub async fn combined_partitions_in_runs_and_spilled(backend: BackendChoice, scale: usize) {
    let label = format!("runs {scale}");
    let mut rng = case_rng(seed(), &label);
    let inputs: Vec<Vec<RecordBatch>> = sizes(scale)
        .iter()
        .map(|&rows| partition(&mut rng, rows, 512, false))
        .collect();
    let case = format!("seed={} {label}", seed());
    let context = Arc::new(TaskContext::default());
    let plan = sort_exec(&inputs, false, backend, true, 100 * scale, None);
    let outputs = datafusion::physical_plan::collect_partitioned(plan as _, context)
        .await
        .unwrap();
    check_partitions(&inputs, &outputs, None, &format!("runs {case}"));

    let bytes = held_bytes(inputs.iter().flatten());
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(2 * bytes, 1.0)
        .build_arc()
        .unwrap();
    // Spilled uncompressed, then with the session's spill compression: the same rows, in
    // fewer bytes on disk.
    let mut spilled_bytes = Vec::new();
    for compression in [SpillCompression::Uncompressed, SpillCompression::Lz4Frame] {
        let config = SessionConfig::new().with_spill_compression(compression);
        let limited = SessionContext::new_with_config_rt(config, Arc::clone(&runtime)).task_ctx();
        let plan = sort_exec(&inputs, false, backend, true, 1 << 28, None);
        let outputs =
            datafusion::physical_plan::collect_partitioned(Arc::clone(&plan) as _, limited)
                .await
                .unwrap();
        check_partitions(
            &inputs,
            &outputs,
            None,
            &format!("spilled {compression:?} {case}"),
        );
        let metrics = plan.metrics().unwrap();
        let spills = metrics.spill_count().unwrap_or(0);
        assert!(spills > 0, "the memory limit forced no spill: {case}");
        spilled_bytes.push(metrics.spilled_bytes().unwrap_or(0));
    }
    assert!(
        spilled_bytes[1] < spilled_bytes[0],
        "compressed spills of {} bytes, uncompressed {}: {case}",
        spilled_bytes[1],
        spilled_bytes[0]
    );
}

/// Partitions each ordered by `g` (declared): sorted within the `g` segments of each
/// partition, in one sort.
pub async fn combined_partitions_with_ordered_prefix(backend: BackendChoice, scale: usize) {
    let label = format!("prefix {scale}");
    let mut rng = case_rng(seed(), &label);
    let inputs: Vec<Vec<RecordBatch>> = sizes(scale)
        .iter()
        .map(|&rows| partition(&mut rng, rows, 700, true))
        .collect();
    let case = format!("seed={} {label}", seed());
    let plan = sort_exec(&inputs, true, backend, true, 1 << 28, None);
    let text = displayable(plan.as_ref()).one_line().to_string();
    assert!(
        text.contains("segmented_prefix=1") && text.contains("combined_partitions=8"),
        "{text} {case}"
    );
    let outputs =
        datafusion::physical_plan::collect_partitioned(plan as _, Arc::new(TaskContext::default()))
            .await
            .unwrap();
    check_partitions(&inputs, &outputs, None, &case);
}

/// SQL: windows `PARTITION BY g ORDER BY ts` over hash-partitioned input plan one
/// combined sort with whole-partition windows above it (streaming ones when
/// `gpu_sort.whole_partition_windows` is off); results equal DataFusion's.
pub async fn window_over_hash_partitions(backend: BackendChoice, rows: usize) {
    let label = format!("window partitions {rows}");
    let mut rng = case_rng(seed(), &label);
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int32, true),
        Field::new("ts", DataType::Int64, false),
    ]));
    let partitions: Vec<Vec<RecordBatch>> = (0..4)
        .map(|p| {
            let n = rows / 4;
            let g: Vec<Option<i32>> = (0..n)
                .map(|_| rng.random_bool(0.95).then(|| rng.random_range(0..50)))
                .collect();
            // Unique timestamps: (g, ts) orders every row, `rn` included.
            let ts = Int64Array::from_iter_values(
                (0..n).map(|i| ((i * 4 + p) as i64).wrapping_mul(0x9E37_79B9) % 1_000_000_007),
            );
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Int32Array::from(g)), Arc::new(ts)],
            )
            .unwrap();
            (0..n)
                .step_by(1000)
                .map(|at| batch.slice(at, 1000.min(n - at)))
                .collect()
        })
        .collect();
    let config = super::session_config(4, 1024);
    let (stock, forced) = (
        super::stock_context(config.clone()),
        super::forced_context_on(config, backend),
    );
    super::register(&[&stock, &forced], "t", partitions);
    let sql = "SELECT g, ts, row_number() OVER (PARTITION BY g ORDER BY ts) AS rn, \
               rank() OVER (PARTITION BY g ORDER BY ts DESC) AS r, \
               sum(ts) OVER (PARTITION BY g ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s, \
               lag(ts) OVER (PARTITION BY g ORDER BY ts) AS prev \
               FROM t ORDER BY g, ts";
    let context = format!("seed={} {label} sql={sql}", seed());
    let (expected, _) = super::run(&stock, sql).await.unwrap();
    let (actual, plan) = super::run(&forced, sql).await.unwrap();
    assert!(
        plan.contains("combined_partitions=4") && plan.contains("repartition=Hash([g@0], 4)"),
        "window sort not combined and hash routed:\n{plan}\n{context}"
    );
    assert!(
        !plan.contains("RepartitionExec: partitioning=Hash"),
        "hash repartition kept below the routed sort:\n{plan}\n{context}"
    );
    assert!(
        (plan.contains("WindowAggExec: wdw") || plan.contains("SortedWindowExec: wdw"))
            && !plan.contains("BoundedWindowAggExec"),
        "streaming windows above the sorts kept:\n{plan}\n{context}"
    );
    assert!(
        plan.contains("SortedWindowExec: wdw") && plan.contains("run_batch_rows=131072"),
        "sort below gpusort's window does not hand it batches of 128 Ki rows:\n{plan}\n{context}"
    );
    assert_same_sort(&expected, &actual, &[0, 1, 2, 3, 4, 5], &context);
    for setting in [
        "SET gpu_sort.window_functions = false",
        "SET gpu_sort.whole_partition_windows = false",
    ] {
        super::run(&forced, setting).await.unwrap();
    }
    let (streamed, plan) = super::run(&forced, sql).await.unwrap();
    assert!(
        plan.contains("BoundedWindowAggExec"),
        "streaming windows not kept when asked:\n{plan}\n{context}"
    );
    assert_same_sort(&expected, &streamed, &[0, 1, 2, 3, 4, 5], &context);
    super::run(&forced, "SET gpu_sort.absorb_repartition = false")
        .await
        .unwrap();
    let (repartitioned, plan) = super::run(&forced, sql).await.unwrap();
    assert!(
        plan.contains("RepartitionExec: partitioning=Hash") && !plan.contains("repartition=Hash"),
        "hash repartition not kept when asked:\n{plan}\n{context}"
    );
    assert_same_sort(&expected, &repartitioned, &[0, 1, 2, 3, 4, 5], &context);
    super::run(&forced, "SET gpu_sort.whole_partition_windows = true")
        .await
        .unwrap();
    super::run(&forced, "SET gpu_sort.window_batch_rows = 100000")
        .await
        .unwrap();
    let (whole, plan) = super::run(&forced, sql).await.unwrap();
    assert!(
        plan.contains("run_batch_rows=100000") && plan.contains("WindowAggExec: wdw"),
        "window_batch_rows not applied to the sort below the window:\n{plan}\n{context}"
    );
    assert_same_sort(&expected, &whole, &[0, 1, 2, 3, 4, 5], &context);
}

/// Input partitions `sizes` with `rid` numbering the rows of all of them in input order
/// (partition 0's first).
fn numbered_partitions(
    rng: &mut StdRng,
    sizes: &[usize],
    batch_rows: usize,
) -> Vec<Vec<RecordBatch>> {
    let mut next = 0i64;
    sizes
        .iter()
        .map(|&rows| {
            partition(rng, rows, batch_rows, false)
                .into_iter()
                .map(|b| {
                    let rid = Int64Array::from_iter_values(next..next + b.num_rows() as i64);
                    next += b.num_rows() as i64;
                    let mut columns = b.columns().to_vec();
                    columns[2] = Arc::new(rid);
                    RecordBatch::try_new(schema(), columns).unwrap()
                })
                .collect()
        })
        .collect()
}

/// What each output partition of a routed sort must hold: the rows DataFusion's
/// `RepartitionExec` sends there, stably sorted (`rid` is the input order).
async fn repartitioned_then_sorted(
    inputs: &[Vec<RecordBatch>],
    partitioning: Partitioning,
    fetch: Option<usize>,
) -> Vec<RecordBatch> {
    let source = MemorySourceConfig::try_new(inputs, schema(), None).unwrap();
    let plan =
        RepartitionExec::try_new(DataSourceExec::from_data_source(source), partitioning).unwrap();
    let outputs = datafusion::physical_plan::collect_partitioned(
        Arc::new(plan),
        Arc::new(TaskContext::default()),
    )
    .await
    .unwrap();
    outputs.iter().map(|p| expected(p, fetch)).collect()
}

/// A sort that reads the input of a hash repartition itself (`try_new_routed`): every
/// output partition holds the rows `RepartitionExec` sends there, stably sorted, for more
/// and fewer output than input partitions, with a fetch, read in any order, in runs and
/// spilled.
pub async fn routed_partitions_equal_repartition_then_sort(backend: BackendChoice, scale: usize) {
    let label = format!("routed {scale}");
    let mut rng = case_rng(seed(), &label);
    let inputs = numbered_partitions(&mut rng, &sizes(scale), 700);
    let rows: usize = inputs.iter().flatten().map(RecordBatch::num_rows).sum();
    let key_exprs = |schema: &Schema| vec![col("g", schema).unwrap(), col("k", schema).unwrap()];
    let context = Arc::new(TaskContext::default());
    let routed = |exprs, partitions, run_rows, fetch| {
        let source = MemorySourceConfig::try_new(&inputs, schema(), None).unwrap();
        let options = GpuSortOptions {
            backend: resolve_backend(&settings_on(backend)).unwrap(),
            run_rows,
            algorithm: AlgorithmChoice::Auto,
            device_gather_min_rows: 0,
            input_batch_rows: 0,
            combine_partitions: true,
        };
        let routing = HashRouting::try_new(exprs, partitions).unwrap();
        Arc::new(
            GpuSortExec::try_new_routed(
                DataSourceExec::from_data_source(source),
                keys(&schema()),
                fetch,
                routing,
                options,
            )
            .unwrap(),
        )
    };
    for (exprs, partitions, run_rows, fetch) in [
        (vec![col("g", &schema()).unwrap()], 5, 1 << 28, None),
        (key_exprs(&schema()), 16, 1 << 28, None),
        (vec![col("g", &schema()).unwrap()], 3, 1 << 28, Some(10)),
        (vec![col("k", &schema()).unwrap()], 4, rows / 3, None),
    ] {
        let partitioning = Partitioning::Hash(exprs.clone(), partitions);
        let case = format!(
            "seed={} {label} {partitioning} run_rows={run_rows} fetch={fetch:?}",
            seed()
        );
        let plan = routed(exprs.clone(), partitions, run_rows, fetch);
        assert_eq!(
            plan.properties().output_partitioning(),
            &partitioning,
            "{case}"
        );
        let text = displayable(plan.as_ref()).one_line().to_string();
        assert!(
            text.contains(&format!("repartition={partitioning}")),
            "{text} {case}"
        );
        let expected = repartitioned_then_sorted(&inputs, partitioning, fetch).await;
        let reversed: Vec<usize> = (0..partitions).rev().collect();
        let outputs = read_in_order(&plan, &reversed, &context).await;
        check_sorted(&expected, &outputs, &case);
    }

    // Spilled: each spill splits the buffered rows into the hash partitions.
    let bytes = held_bytes(inputs.iter().flatten());
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(2 * bytes, 1.0)
        .build_arc()
        .unwrap();
    let limited = SessionContext::new_with_config_rt(SessionConfig::new(), runtime).task_ctx();
    let exprs = vec![col("g", &schema()).unwrap()];
    let partitioning = Partitioning::Hash(exprs.clone(), 6);
    let plan = routed(exprs, 6, 1 << 28, None);
    let outputs = datafusion::physical_plan::collect_partitioned(Arc::clone(&plan) as _, limited)
        .await
        .unwrap();
    let expected = repartitioned_then_sorted(&inputs, partitioning, None).await;
    let case = format!("seed={} {label} spilled", seed());
    check_sorted(&expected, &outputs, &case);
    let spills = plan.metrics().and_then(|m| m.spill_count()).unwrap_or(0);
    assert!(spills > 0, "the memory limit forced no spill: {case}");
}

/// SQL: a hash join on `g` above a routed window sort keeps the sort's `Hash([g])`
/// partitioning and repartitions only its other side with DataFusion's own
/// `RepartitionExec`; every row still finds its partner, as with DataFusion's sort.
pub async fn routed_sort_pairs_with_repartitioned_join_side(backend: BackendChoice, rows: usize) {
    let label = format!("routed join {rows}");
    let mut rng = case_rng(seed(), &label);
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int32, true),
        Field::new("ts", DataType::Int64, false),
    ]));
    let partitions: Vec<Vec<RecordBatch>> = (0..3)
        .map(|p| {
            let n = rows / 3;
            let g: Vec<Option<i32>> = (0..n)
                .map(|_| rng.random_bool(0.97).then(|| rng.random_range(0..200)))
                .collect();
            let ts = Int64Array::from_iter_values((0..n).map(|i| (i * 3 + p) as i64));
            vec![RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Int32Array::from(g)), Arc::new(ts)],
            )
            .unwrap()]
        })
        .collect();
    let dims = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int32, false),
        Field::new("w", DataType::Int64, false),
    ]));
    let dim_rows: Vec<i32> = (0..300).collect();
    let dim = RecordBatch::try_new(
        Arc::clone(&dims),
        vec![
            Arc::new(Int32Array::from(dim_rows.clone())),
            Arc::new(Int64Array::from_iter_values(
                dim_rows.iter().map(|&g| g as i64 * 10),
            )),
        ],
    )
    .unwrap();
    let config = super::session_config(4, 512)
        .set_usize(
            "datafusion.optimizer.hash_join_single_partition_threshold",
            0,
        )
        .set_usize(
            "datafusion.optimizer.hash_join_single_partition_threshold_rows",
            0,
        );
    let (stock, forced) = (
        super::stock_context(config.clone()),
        super::forced_context_on(config, backend),
    );
    super::register(&[&stock, &forced], "t", partitions);
    super::register(&[&stock, &forced], "d", vec![vec![dim]]);
    let sql = "SELECT a.g, a.ts, a.rn, d.w FROM                (SELECT g, ts, row_number() OVER (PARTITION BY g ORDER BY ts) AS rn FROM t) a                JOIN d ON a.g = d.g ORDER BY a.g, a.ts";
    let context = format!("seed={} {label} sql={sql}", seed());
    let (expected, _) = super::run(&stock, sql).await.unwrap();
    let (actual, plan) = super::run(&forced, sql).await.unwrap();
    assert!(
        plan.contains("mode=Partitioned") && plan.contains("repartition=Hash([g@0], 4)"),
        "no partitioned join over the routed sort:\n{plan}\n{context}"
    );
    assert_same_sort(&expected, &actual, &[0, 1, 2, 3], &context);
}

/// Runs the device cannot hold are sorted in pieces (`exec/pieces.rs`), as the CUDA backend
/// asks when a run passes what is free of its device memory limit: a backend that splits
/// every run above a few hundred rows must give the stable sort of each partition, for
/// unordered input (pieces merged), input ordered by the first key (pieces of whole
/// segments, one after another; a segment longer than a piece merged), partitions sorted
/// together (pieces of whole partitions; a partition longer than a piece sorted whole),
/// with and without a LIMIT.
pub async fn runs_sorted_in_pieces(scale: usize) {
    let label = format!("pieces {scale}");
    let mut rng = case_rng(seed(), &label);
    let context = Arc::new(TaskContext::default());
    for ordered_by_g in [false, true] {
        let inputs: Vec<Vec<RecordBatch>> = sizes(scale)
            .iter()
            .map(|&rows| partition(&mut rng, rows, 300, ordered_by_g))
            .collect();
        for (combine, piece_rows, fetch) in [
            (false, 700, None),
            (false, 100, None),
            (false, 700, Some(1000)),
            (false, 100, Some(7)),
            (true, 700, None),
            (true, 3000, None),
            (true, 700, Some(20)),
        ] {
            let backend = Arc::new(super::pieces::PieceBackend::new(piece_rows));
            let plan = sort_exec_on(
                &inputs,
                ordered_by_g,
                Arc::clone(&backend) as _,
                combine,
                1 << 28,
                fetch,
            );
            let case = format!(
                "seed={} {label} ordered_by_g={ordered_by_g} combine={combine} \
                 piece_rows={piece_rows} fetch={fetch:?}",
                seed()
            );
            let outputs = datafusion::physical_plan::collect_partitioned(
                Arc::clone(&plan) as _,
                Arc::clone(&context),
            )
            .await
            .unwrap();
            check_partitions(&inputs, &outputs, fetch, &case);
            let splits = plan
                .metrics()
                .and_then(|m| m.sum_by_name("device_splits"))
                .map_or(0, |v| v.as_usize());
            assert!(backend.splits() > 0, "{case}");
            assert_eq!(splits, backend.splits(), "{case}");
        }
    }
    // Hash routed: the ids come from the host, the pieces' orders are merged.
    let inputs = numbered_partitions(&mut rng, &sizes(scale), 300);
    for (piece_rows, fetch) in [(700, None), (100, Some(30))] {
        let exprs = vec![col("g", &schema()).unwrap()];
        let backend = Arc::new(super::pieces::PieceBackend::new(piece_rows));
        let options = GpuSortOptions {
            backend: Arc::clone(&backend) as _,
            run_rows: 1 << 28,
            algorithm: AlgorithmChoice::Auto,
            device_gather_min_rows: 0,
            input_batch_rows: 0,
            combine_partitions: true,
        };
        let source = MemorySourceConfig::try_new(&inputs, schema(), None).unwrap();
        let plan = GpuSortExec::try_new_routed(
            DataSourceExec::from_data_source(source),
            keys(&schema()),
            fetch,
            HashRouting::try_new(exprs.clone(), 5).unwrap(),
            options,
        )
        .unwrap();
        let outputs = datafusion::physical_plan::collect_partitioned(
            Arc::new(plan) as _,
            Arc::clone(&context),
        )
        .await
        .unwrap();
        let expected =
            repartitioned_then_sorted(&inputs, Partitioning::Hash(exprs, 5), fetch).await;
        let case = format!("seed={} {label} routed piece_rows={piece_rows}", seed());
        check_sorted(&expected, &outputs, &case);
        assert!(backend.splits() > 0, "{case}");
    }
}

/// The default settings on `backend`.
fn settings_on(backend: BackendChoice) -> GpuSortConfig {
    let mut settings = GpuSortConfig::default();
    settings.backend = backend;
    settings
}
