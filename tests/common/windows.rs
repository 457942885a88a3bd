//! The window cases: window functions computed by gpusort (`SortedWindowExec`) against
//! DataFusion's own
//! window operators (`tests/windows.rs` on the CPU backend, `tests/gpu/windows.rs` on the
//! CUDA backend): every function × frame kind × argument type × nulls, over no
//! `PARTITION BY`, a few large partitions and thousands of tiny ones, in plans of one and
//! several partitions.
//!
//! Integer, decimal, date, ranking and offset results must be equal. Float `sum` and
//! `avg` may differ by summation order only: gpusort's error is at most
//! `u·|S| + 4·n·u²·Σ|x|` (`sums.rs`) and DataFusion's, adding and retracting rows one at
//! a time in `f64`, at most about `(rows it has added and retracted) · u · Σ|x|`; the test
//! allows `2^-30 · (1 + Σ|x| over the partition)`, far above both and far below any real
//! mistake.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int32Array,
    Int64Array, Int8Array, RecordBatch, TimestampMicrosecondArray, TimestampSecondArray,
    UInt8Array,
};
use datafusion::arrow::compute::{concat_batches, sort_to_indices, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use gpusort::{BackendChoice, GpuSortConfig, GpuSortExec, GpuSortRule, SessionStateBuilderExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{physical_plan, plan_text, register, seed};

/// How rows fall into window partitions.
#[derive(Debug, Clone, Copy)]
enum Partitioning {
    /// No `PARTITION BY`.
    None,
    /// Five partitions.
    Few,
    /// Partitions of one to four rows.
    Tiny,
}

impl Partitioning {
    fn clause(self) -> &'static str {
        match self {
            Partitioning::None => "",
            Partitioning::Few => "PARTITION BY few",
            Partitioning::Tiny => "PARTITION BY tiny",
        }
    }
}

/// A table of `rows` rows: `rid` (unique), partition keys, an order key with ties and
/// nulls, and arguments of each type with nulls (all null in `nul`).
fn table(rows: usize, rng: &mut StdRng) -> RecordBatch {
    let null = |rng: &mut StdRng| rng.random_bool(0.15);
    let ints: Int32Array = (0..rows)
        .map(|_| (!null(rng)).then(|| rng.random_range(-1000..1000)))
        .collect();
    let floats: Float64Array = (0..rows)
        .map(|_| (!null(rng)).then(|| rng.random_range(-1e3..1e3)))
        .collect();
    let decimals = Decimal128Array::from(
        (0..rows)
            .map(|_| (!null(rng)).then(|| rng.random_range(-99_999_999i128..99_999_999)))
            .collect::<Vec<_>>(),
    )
    .with_precision_and_scale(12, 2)
    .unwrap();
    let dates: Date32Array = (0..rows)
        .map(|_| (!null(rng)).then(|| rng.random_range(-3000..20000)))
        .collect();
    let order: Int32Array = (0..rows)
        .map(|_| (!rng.random_bool(0.05)).then(|| rng.random_range(0..40)))
        .collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "rid",
            Arc::new(Int64Array::from_iter_values(0..rows as i64)),
        ),
        (
            "few",
            Arc::new(Int32Array::from_iter_values(
                (0..rows).map(|_| rng.random_range(0..5)),
            )),
        ),
        (
            "tiny",
            Arc::new(Int64Array::from_iter_values(
                (0..rows).map(|i| (i / 3) as i64 + rng.random_range(0..2)),
            )),
        ),
        ("o", Arc::new(order)),
        ("i", Arc::new(ints)),
        ("f", Arc::new(floats)),
        ("d", Arc::new(decimals)),
        ("dt", Arc::new(dates)),
        ("nul", Arc::new(Int32Array::from(vec![None::<i32>; rows]))),
    ];
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, a)| Field::new(*name, a.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .unwrap()
}

/// The table split into `parts` partitions of uneven batches.
fn partitions(batch: &RecordBatch, parts: usize) -> Vec<Vec<RecordBatch>> {
    let mut out = vec![Vec::new(); parts];
    let mut offset = 0;
    let mut k = 0;
    while offset < batch.num_rows() {
        let len = (97 + 613 * k % 1500).min(batch.num_rows() - offset);
        out[k % parts].push(batch.slice(offset, len));
        offset += len;
        k += 1;
    }
    out
}

fn contexts(
    backend: BackendChoice,
    target_partitions: usize,
) -> (SessionContext, SessionContext, Arc<GpuSortRule>) {
    let config = SessionConfig::new()
        .with_target_partitions(target_partitions)
        .with_batch_size(1000);
    let stock = SessionContext::new_with_config(config.clone());
    let rule = Arc::new(GpuSortRule::new());
    let mut settings = GpuSortConfig::forced_cpu();
    settings.backend = backend;
    let state = datafusion::execution::SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_gpu_sort_rule(settings, Arc::clone(&rule))
        .build();
    (stock, SessionContext::new_with_state(state), rule)
}

/// Runs `sql` (which selects `rid` first) in both contexts and compares every column,
/// rows matched by `rid`; `float_columns` are compared within the float bound, scaled
/// by `scale` (Σ|x| of the largest partition).
async fn assert_same_windows(
    stock: &SessionContext,
    gpu: &SessionContext,
    sql: &str,
    float_columns: &[usize],
    scale: f64,
) -> Arc<dyn ExecutionPlan> {
    let plan = physical_plan(gpu, sql).await.unwrap();
    let text = plan_text(&plan);
    assert!(
        text.contains("SortedWindowExec"),
        "not computed by gpusort: {sql}\n{text}"
    );
    let expected = sql_by_rid(stock, sql).await;
    let got = by_rid(
        &plan.schema(),
        datafusion::physical_plan::collect(Arc::clone(&plan), gpu.task_ctx())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
    );
    assert_eq!(got.num_rows(), expected.num_rows(), "{sql}");
    for c in 0..expected.num_columns() {
        let (a, b) = (got.column(c), expected.column(c));
        assert_eq!(a.data_type(), b.data_type(), "{sql}: column {c}");
        if float_columns.contains(&c) && a.data_type() == &DataType::Float64 {
            assert_close(a, b, scale, sql, c);
        } else {
            assert_eq!(a, b, "{sql}: column {c} (seed {})", seed());
        }
    }
    plan
}

/// Rows whose window columns the sorts of `plan` computed where their runs were.
fn device_window_rows(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let mut rows = 0;
    plan.apply(|node| {
        if node.downcast_ref::<GpuSortExec>().is_some() {
            rows += node
                .metrics()
                .and_then(|m| m.sum_by_name("device_window_rows"))
                .map_or(0, |v| v.as_usize());
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    rows
}

fn assert_close(a: &ArrayRef, b: &ArrayRef, scale: f64, sql: &str, c: usize) {
    let (a, b) = (
        a.as_primitive::<Float64Type>(),
        b.as_primitive::<Float64Type>(),
    );
    let tolerance = (1.0 + scale) * 2f64.powi(-30);
    for r in 0..a.len() {
        assert_eq!(a.is_null(r), b.is_null(r), "{sql}: column {c} row {r}");
        if a.is_valid(r) {
            let (x, y) = (a.value(r), b.value(r));
            assert!(
                (x - y).abs() <= tolerance,
                "{sql}: column {c} row {r}: {x} against {y} (seed {})",
                seed()
            );
        }
    }
}

/// The batches as one, rows ordered by `rid` (column 0); no batch at all (a filter that
/// kept nothing) is an empty batch of `schema`.
fn by_rid(schema: &SchemaRef, batches: Vec<RecordBatch>) -> RecordBatch {
    let schema = batches
        .first()
        .map_or(Arc::clone(schema), RecordBatch::schema);
    let all = concat_batches(&schema, &batches).unwrap();
    let order = sort_to_indices(all.column(0), None, None).unwrap();
    take_record_batch(&all, &order).unwrap()
}

/// `sql`'s result in `ctx`, rows ordered by `rid`.
async fn sql_by_rid(ctx: &SessionContext, sql: &str) -> RecordBatch {
    let frame = ctx.sql(sql).await.unwrap();
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    by_rid(&schema, frame.collect().await.unwrap())
}

/// Σ|f| over the whole table: a bound on any partition's.
fn float_scale(batch: &RecordBatch) -> f64 {
    let f = batch
        .column_by_name("f")
        .unwrap()
        .as_primitive::<Float64Type>();
    f.iter().flatten().map(f64::abs).sum()
}

const ROWS_FRAMES: [&str; 7] = [
    "ROWS BETWEEN 3 PRECEDING AND CURRENT ROW",
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
    "ROWS BETWEEN 2 FOLLOWING AND 5 FOLLOWING",
    "ROWS BETWEEN 5 PRECEDING AND 2 PRECEDING",
    "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
    "ROWS BETWEEN 100000 PRECEDING AND 100000 FOLLOWING",
    "ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING",
];

const PEER_FRAMES: [&str; 8] = [
    "",
    "RANGE BETWEEN 2 PRECEDING AND CURRENT ROW",
    "RANGE BETWEEN 3 PRECEDING AND 1 FOLLOWING",
    "RANGE BETWEEN 1 FOLLOWING AND 4 FOLLOWING",
    "RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
    "RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING",
    "GROUPS BETWEEN 1 PRECEDING AND 2 FOLLOWING",
    "GROUPS BETWEEN 3 PRECEDING AND 1 PRECEDING",
];

/// The aggregates (and, where rows are ordered without ties, value functions) of `arg`
/// over `frame`.
fn frame_functions(arg: &str, window: &str, with_values: bool) -> Vec<String> {
    let mut list = vec![
        format!("count({arg})"),
        format!("min({arg})"),
        format!("max({arg})"),
    ];
    if arg != "dt" {
        list.push(format!("sum({arg})"));
        list.push(format!("avg({arg})"));
    }
    if with_values {
        list.push(format!("first_value({arg})"));
        list.push(format!("last_value({arg})"));
        list.push(format!("nth_value({arg}, 2)"));
        list.push(format!("nth_value({arg}, -1)"));
    }
    list.iter()
        .map(|f| format!("{f} OVER ({window})"))
        .collect()
}

async fn every_frame_and_type(
    backend: BackendChoice,
    rows: usize,
    parts: usize,
    target_partitions: usize,
) {
    let mut rng = StdRng::seed_from_u64(seed() ^ rows as u64);
    let batch = table(rows, &mut rng);
    let scale = float_scale(&batch);
    let (stock, gpu, _) = contexts(backend, target_partitions);
    register(&[&stock, &gpu], "t", partitions(&batch, parts));
    for partitioning in [Partitioning::None, Partitioning::Few, Partitioning::Tiny] {
        let by = partitioning.clause();
        for (frames, order, with_values) in [
            (&ROWS_FRAMES[..], "ORDER BY o, rid", true),
            (&PEER_FRAMES[..], "ORDER BY o", false),
        ] {
            for frame in frames {
                for arg in ["i", "f", "d", "dt", "nul"] {
                    let window = format!("{by} {order} {frame}");
                    let exprs = frame_functions(arg, &window, with_values);
                    let sql = format!("SELECT rid, {} FROM t", exprs.join(", "));
                    let floats: Vec<usize> = (1..=exprs.len()).collect();
                    assert_same_windows(&stock, &gpu, &sql, &floats, scale).await;
                }
            }
        }
        let ranking = format!(
            "SELECT rid, row_number() OVER w, rank() OVER w, dense_rank() OVER w, \
             percent_rank() OVER w, cume_dist() OVER w, ntile(4) OVER w, ntile(1000) OVER w \
             FROM t WINDOW w AS ({by} ORDER BY o)"
        );
        let ranking = ranking.replace(
            "row_number() OVER w",
            &format!("row_number() OVER ({by} ORDER BY o, rid)"),
        );
        let ranking = ranking.replace(
            "ntile(4) OVER w",
            &format!("ntile(4) OVER ({by} ORDER BY o, rid)"),
        );
        let ranking = ranking.replace(
            "ntile(1000) OVER w",
            &format!("ntile(1000) OVER ({by} ORDER BY o, rid)"),
        );
        assert_same_windows(&stock, &gpu, &ranking, &[], scale).await;
        for (arg, default) in [
            ("i", "7"),
            ("f", "-0.5"),
            ("d", "1.25"),
            ("dt", "DATE '2001-02-03'"),
            ("nul", "3"),
        ] {
            let w = format!("{by} ORDER BY o DESC NULLS LAST, rid");
            let sql = format!(
                "SELECT rid, lag({arg}) OVER ({w}), lead({arg}) OVER ({w}), \
                 lag({arg}, 3) OVER ({w}), lead({arg}, 2, {default}) OVER ({w}), \
                 lag({arg}, -2) OVER ({w}), lag({arg}, 0) OVER ({w}), \
                 row_number() OVER ({w}) FROM t"
            );
            assert_same_windows(&stock, &gpu, &sql, &[], scale).await;
        }
    }
}

pub async fn every_function_frame_and_type_over_one_partition(backend: BackendChoice) {
    every_frame_and_type(backend, 2_000, 3, 1).await;
}

pub async fn every_function_frame_and_type_over_routed_partitions(backend: BackendChoice) {
    every_frame_and_type(backend, 3_000, 4, 4).await;
}

/// Enough rows for several pieces, chunks of the layout and of the scans.
pub async fn long_partitions_cross_pieces(backend: BackendChoice) {
    let mut rng = StdRng::seed_from_u64(seed() ^ 0xB16);
    let batch = table(150_000, &mut rng);
    let scale = float_scale(&batch);
    let (stock, gpu, _) = contexts(backend, 4);
    register(&[&stock, &gpu], "t", partitions(&batch, 4));
    for frame in [
        "ROWS BETWEEN 6 PRECEDING AND CURRENT ROW",
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
        "ROWS BETWEEN 1000 PRECEDING AND 20 FOLLOWING",
        "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
    ] {
        for by in ["", "PARTITION BY few"] {
            let w = format!("{by} ORDER BY o, rid {frame}");
            let sql = format!(
                "SELECT rid, sum(i) OVER ({w}), sum(f) OVER ({w}), avg(f) OVER ({w}), \
                 min(f) OVER ({w}), max(d) OVER ({w}), count(*) OVER ({w}), \
                 first_value(dt) OVER ({w}), row_number() OVER ({w}), \
                 lag(f, 5) OVER ({w}) FROM t"
            );
            assert_same_windows(&stock, &gpu, &sql, &[2, 3], scale).await;
        }
    }
    // A RANGE offset over an order key with nulls, its partitions crossing chunks.
    for by in ["", "PARTITION BY few"] {
        for direction in ["", "DESC NULLS LAST"] {
            let w =
                format!("{by} ORDER BY o {direction} RANGE BETWEEN 3 PRECEDING AND 2 FOLLOWING");
            let sql = format!(
                "SELECT rid, sum(i) OVER ({w}), count(f) OVER ({w}), min(d) OVER ({w}), \
                 max(dt) OVER ({w}) FROM t"
            );
            assert_same_windows(&stock, &gpu, &sql, &[], scale).await;
        }
    }
}

/// `RANGE` frames with value offsets over every key type gpusort searches: integers
/// whose targets leave the type (Int8 near its limits, UInt8 below its offset), floats
/// with ±0.0, ±inf and NaN, decimals, dates and timestamps moved by intervals; ascending
/// and descending, nulls first and last, with and without `PARTITION BY`.
pub async fn range_offsets_over_every_key_type(backend: BackendChoice) {
    let mut rng = StdRng::seed_from_u64(seed() ^ 0x5A17E);
    let rows = 2500;
    let null = |rng: &mut StdRng| rng.random_bool(0.08);
    let specials = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let int8: Int8Array = (0..rows)
        .map(|_| (!null(&mut rng)).then(|| rng.random_range(-128..=127i16) as i8))
        .collect();
    let uint8: UInt8Array = (0..rows)
        .map(|_| (!null(&mut rng)).then(|| rng.random_range(0..=255u16) as u8))
        .collect();
    let float: Float64Array = (0..rows)
        .map(|_| {
            (!null(&mut rng)).then(|| match rng.random_range(0..10) {
                0 => specials[rng.random_range(0..specials.len())],
                _ => (rng.random_range(-400..400) as f64) / 8.0,
            })
        })
        .collect();
    let decimal = Decimal128Array::from(
        (0..rows)
            .map(|_| (!null(&mut rng)).then(|| rng.random_range(-5000i128..5000)))
            .collect::<Vec<_>>(),
    )
    .with_precision_and_scale(9, 2)
    .unwrap();
    let date: Date32Array = (0..rows)
        .map(|_| (!null(&mut rng)).then(|| rng.random_range(10_950..11_400)))
        .collect();
    let hour = 3_600_000_000i64;
    let stamp: TimestampMicrosecondArray = (0..rows)
        .map(|_| (!null(&mut rng)).then(|| rng.random_range(0..300) * hour / 7))
        .collect();
    let x: Int64Array = (0..rows)
        .map(|_| (!null(&mut rng)).then(|| rng.random_range(-1000..1000)))
        .collect();
    let batch = RecordBatch::try_from_iter(vec![
        (
            "rid",
            Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
        ),
        (
            "few",
            Arc::new(Int32Array::from_iter_values(
                (0..rows).map(|_| rng.random_range(0..4)),
            )) as ArrayRef,
        ),
        ("k8", Arc::new(int8) as ArrayRef),
        ("ku8", Arc::new(uint8) as ArrayRef),
        ("kf", Arc::new(float) as ArrayRef),
        ("kd", Arc::new(decimal) as ArrayRef),
        ("kdt", Arc::new(date) as ArrayRef),
        ("kts", Arc::new(stamp) as ArrayRef),
        ("x", Arc::new(x) as ArrayRef),
    ])
    .unwrap();
    let (stock, gpu, _) = contexts(backend, 3);
    register(&[&stock, &gpu], "t", partitions(&batch, 3));
    let cases = [
        ("k8", "5 PRECEDING AND 10 FOLLOWING"),
        ("k8", "100 PRECEDING AND 50 PRECEDING"),
        ("k8", "UNBOUNDED PRECEDING AND 3 PRECEDING"),
        ("ku8", "7 PRECEDING AND 3 FOLLOWING"),
        ("ku8", "2 FOLLOWING AND UNBOUNDED FOLLOWING"),
        ("kf", "1.5 PRECEDING AND 0.5 FOLLOWING"),
        ("kf", "CURRENT ROW AND 4 FOLLOWING"),
        ("kd", "2.50 PRECEDING AND CURRENT ROW"),
        (
            "kdt",
            "INTERVAL '1 month' PRECEDING AND INTERVAL '3 days' FOLLOWING",
        ),
        (
            "kts",
            "INTERVAL '2 hours' PRECEDING AND INTERVAL '30 minutes' FOLLOWING",
        ),
    ];
    for (key, bounds) in cases {
        for direction in [
            "ASC NULLS LAST",
            "DESC NULLS FIRST",
            "ASC NULLS FIRST",
            "DESC NULLS LAST",
        ] {
            for by in ["", "PARTITION BY few"] {
                let w = format!("{by} ORDER BY {key} {direction} RANGE BETWEEN {bounds}");
                let sql = format!(
                    "SELECT rid, count(x) OVER ({w}), sum(x) OVER ({w}), min(x) OVER ({w}), \
                     max(x) OVER ({w}), count(*) OVER ({w}) FROM t"
                );
                assert_same_windows(&stock, &gpu, &sql, &[], 0.0).await;
            }
        }
    }
}

/// A filter on `row_number()`, `rank()` or `dense_rank()` above the window lets the sort
/// drop the rows past it in each sorted run (`partition_top` in the plan): the answers are
/// DataFusion's, over runs much smaller than the input (rows a run keeps but the filter
/// does not are ranked past `k` by the window above, as the proof in
/// `exec/partition_top.rs` says), and the sort emits fewer rows than it reads.
pub async fn top_per_partition_keeps_what_the_filter_keeps(backend: BackendChoice) {
    let mut rng = StdRng::seed_from_u64(seed() ^ 0x70B);
    let rows = 6000;
    let batch = table(rows, &mut rng);
    for target_partitions in [1, 3] {
        let (stock, gpu, _) = contexts(backend, target_partitions);
        register(&[&stock, &gpu], "t", partitions(&batch, 3));
        gpu.sql("SET gpu_sort.run_rows = 700").await.unwrap();
        let taken = [
            "SELECT * FROM (SELECT rid, few, o, row_number() OVER (PARTITION BY few ORDER BY o, rid) AS rn FROM t) WHERE rn <= 3",
            "SELECT * FROM (SELECT rid, tiny, o, rank() OVER (PARTITION BY tiny ORDER BY o) AS rk FROM t) WHERE rk <= 2",
            "SELECT * FROM (SELECT rid, few, o, dense_rank() OVER (PARTITION BY few ORDER BY o DESC NULLS FIRST) AS dr FROM t) WHERE dr < 3",
            "SELECT * FROM (SELECT rid, few, o, dense_rank() OVER w AS dr, rank() OVER w AS rk FROM t WINDOW w AS (PARTITION BY few ORDER BY o)) WHERE rk <= 40",
            "SELECT * FROM (SELECT rid, few, tiny, row_number() OVER (PARTITION BY few, tiny ORDER BY rid) AS rn FROM t) WHERE 1 >= rn",
            "SELECT * FROM (SELECT rid, o, row_number() OVER (ORDER BY o, rid) AS rn FROM t) WHERE rn <= 10 AND rid % 2 = 0",
            // Two windows over different orders are two nodes over two sorts: the filtered
            // one's sort is cut, the other was computed over every row below it.
            "SELECT * FROM (SELECT rid, few, o, dense_rank() OVER (PARTITION BY few ORDER BY rid) AS a, dense_rank() OVER (PARTITION BY few ORDER BY o, rid) AS b FROM t) WHERE b <= 2",
        ];
        for sql in taken {
            let text = plan_text(&physical_plan(&gpu, sql).await.unwrap());
            assert!(text.contains("partition_top="), "{sql}\n{text}");
            assert_same_windows(&stock, &gpu, sql, &[], 0.0).await;
        }
        let kept = [
            "SELECT * FROM (SELECT rid, few, o, row_number() OVER (PARTITION BY few ORDER BY o, rid) AS rn, lead(i) OVER (PARTITION BY few ORDER BY o, rid) AS next FROM t) WHERE rn <= 3",
            "SELECT * FROM (SELECT rid, few, o, row_number() OVER (PARTITION BY few ORDER BY o, rid) AS rn FROM t) WHERE rn > 3",
            "SELECT * FROM (SELECT rid, few, o, count(*) OVER (PARTITION BY few) AS n, row_number() OVER (PARTITION BY few ORDER BY o, rid) AS rn FROM t) WHERE rn <= 3",
            "SELECT * FROM (SELECT rid, few, o, row_number() OVER (PARTITION BY few ORDER BY o, rid) AS rn FROM t) WHERE rn <= 3 OR rid = 5",
        ];
        for sql in kept {
            let text = plan_text(&physical_plan(&gpu, sql).await.unwrap());
            assert!(!text.contains("partition_top="), "{sql}\n{text}");
            assert_same_windows(&stock, &gpu, sql, &[], 0.0).await;
        }
        // The sort emits far fewer rows than it reads: in runs, or in one run of all rows
        // (with several partitions: one shared sort, routed from a hash repartition or
        // combined).
        for settings in [
            [
                "SET gpu_sort.run_rows = 700",
                "SET gpu_sort.absorb_repartition = true",
            ],
            [
                "SET gpu_sort.run_rows = 1000000",
                "SET gpu_sort.absorb_repartition = true",
            ],
            [
                "SET gpu_sort.run_rows = 1000000",
                "SET gpu_sort.absorb_repartition = false",
            ],
        ] {
            for setting in settings {
                gpu.sql(setting).await.unwrap();
            }
            let setting = settings.join("; ");
            let plan = physical_plan(&gpu, taken[0]).await.unwrap();
            datafusion::physical_plan::collect(Arc::clone(&plan), gpu.task_ctx())
                .await
                .unwrap();
            let emitted = sort_output_rows(&plan);
            assert!(
                emitted < rows / 2,
                "the sort emitted {emitted} of {rows} rows: {setting}\n{}",
                plan_text(&plan)
            );
            assert_same_windows(&stock, &gpu, taken[0], &[], 0.0).await;
        }
        gpu.sql("SET gpu_sort.partition_top = false").await.unwrap();
        let text = plan_text(&physical_plan(&gpu, taken[0]).await.unwrap());
        assert!(!text.contains("partition_top="), "{text}");
    }
}

/// Rows the plan's `GpuSortExec`s emitted.
fn sort_output_rows(plan: &Arc<dyn datafusion::physical_plan::ExecutionPlan>) -> usize {
    let own = match plan.name() {
        "GpuSortExec" => plan.metrics().and_then(|m| m.output_rows()).unwrap_or(0),
        _ => 0,
    };
    own + plan
        .children()
        .into_iter()
        .map(sort_output_rows)
        .sum::<usize>()
}

/// Floats whose order or arithmetic is special: both zeros, NaNs of both signs, both
/// infinities.
const SPECIAL_FLOATS: [f64; 6] = [
    0.0,
    -0.0,
    f64::NAN,
    -f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];

/// Special float values: ±0.0, ±inf and NaN in the arguments and the order key.
pub async fn special_floats_in_keys_and_extremes(backend: BackendChoice) {
    let values: Vec<f64> = SPECIAL_FLOATS.into_iter().chain([1.5, -2.5]).collect();
    let mut rng = StdRng::seed_from_u64(seed() ^ 0xF10A7);
    let rows = 3000;
    let pick = |rng: &mut StdRng| -> Option<f64> {
        (!rng.random_bool(0.1)).then(|| values[rng.random_range(0..values.len())])
    };
    let x: Float64Array = (0..rows).map(|_| pick(&mut rng)).collect();
    let k: Float64Array = (0..rows).map(|_| pick(&mut rng)).collect();
    let batch = RecordBatch::try_from_iter(vec![
        (
            "rid",
            Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
        ),
        ("k", Arc::new(k) as ArrayRef),
        ("x", Arc::new(x) as ArrayRef),
    ])
    .unwrap();
    let (stock, gpu, _) = contexts(backend, 2);
    register(&[&stock, &gpu], "t", partitions(&batch, 2));
    for frame in [
        "ORDER BY k",
        "ORDER BY k, rid ROWS BETWEEN 2 PRECEDING AND 2 FOLLOWING",
        "ORDER BY k GROUPS BETWEEN 1 PRECEDING AND CURRENT ROW",
    ] {
        let w = frame;
        let sql = format!(
            "SELECT rid, min(x) OVER ({w}), max(x) OVER ({w}), count(x) OVER ({w}), \
             rank() OVER (ORDER BY k), dense_rank() OVER (PARTITION BY k ORDER BY x) FROM t"
        );
        assert_same_windows(&stock, &gpu, &sql, &[], 0.0).await;
    }
}

/// Float sums against exact sums: values that are multiples of 2^-20 sum exactly in
/// `i128`, so gpusort's rounding can be checked against the bound it states.
pub async fn float_sums_within_the_stated_bound(backend: BackendChoice) {
    let mut rng = StdRng::seed_from_u64(seed() ^ 0x5A5A);
    let rows: usize = 20_000;
    let units: Vec<i64> = (0..rows)
        .map(|_| match rng.random_range(0..4) {
            0 => rng.random_range(-(1i64 << 50)..(1i64 << 50)),
            _ => rng.random_range(-(1i64 << 20)..(1i64 << 20)),
        })
        .collect();
    let x = Float64Array::from_iter_values(units.iter().map(|&u| u as f64 / (1u64 << 20) as f64));
    let batch = RecordBatch::try_from_iter(vec![
        (
            "rid",
            Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
        ),
        ("x", Arc::new(x) as ArrayRef),
    ])
    .unwrap();
    let (_, gpu, _) = contexts(backend, 1);
    register(&[&gpu], "t", vec![vec![batch]]);
    let sql =
        "SELECT rid, sum(x) OVER (ORDER BY rid ROWS BETWEEN 7 PRECEDING AND 3 FOLLOWING) FROM t";
    let plan = physical_plan(&gpu, sql).await.unwrap();
    assert!(plan_text(&plan).contains("SortedWindowExec"));
    let got = by_rid(
        &plan.schema(),
        datafusion::physical_plan::collect(Arc::clone(&plan), gpu.task_ctx())
            .await
            .unwrap(),
    );
    let sums = got.column(1).as_primitive::<Float64Type>();
    let u = 2f64.powi(-53);
    let total_abs: f64 = units.iter().map(|&v| (v as f64).abs()).sum::<f64>() / (1u64 << 20) as f64;
    for r in 0..rows {
        let (lo, hi) = (r.saturating_sub(7), (r + 4).min(rows));
        let exact: i128 = units[lo..hi].iter().map(|&v| v as i128).sum();
        let exact = exact as f64 / (1u64 << 20) as f64;
        let bound = u * exact.abs() + 4.0 * (hi as f64) * u * u * total_abs;
        let error = (sums.value(r) - exact).abs();
        assert!(
            error <= bound,
            "row {r}: {} against exact {exact}",
            sums.value(r)
        );
    }
}

/// What gpusort does not compute keeps DataFusion's window, and says why.
pub async fn unsupported_windows_keep_datafusion_and_say_why(backend: BackendChoice) {
    let mut rng = StdRng::seed_from_u64(seed());
    let batch = table(500, &mut rng);
    let (stock, gpu, rule) = contexts(backend, 2);
    register(&[&stock, &gpu], "t", partitions(&batch, 2));
    for (sql, reason) in [
        ("SELECT rid, count(DISTINCT i) OVER (PARTITION BY few) FROM t", "DISTINCT"),
        ("SELECT rid, sum(i) FILTER (WHERE i > 0) OVER (PARTITION BY few) FROM t", "FILTER"),
        ("SELECT rid, string_agg(CAST(i AS VARCHAR), ',') OVER (PARTITION BY few ORDER BY rid) FROM t", "string_agg"),
        ("SELECT rid, lag(i) IGNORE NULLS OVER (ORDER BY rid) FROM t", "IGNORE NULLS"),
    ] {
        let plan = physical_plan(&gpu, sql).await.unwrap();
        let text = plan_text(&plan);
        assert!(!text.contains("SortedWindowExec"), "{sql}\n{text}");
        let decisions = rule.last_decisions_text();
        assert!(decisions.contains(reason), "{sql}: {decisions}");
        let a = by_rid(
            &plan.schema(),
            datafusion::physical_plan::collect(Arc::clone(&plan), gpu.task_ctx())
                .await
                .unwrap(),
        );
        let b = sql_by_rid(&stock, sql).await;
        assert_eq!(a, b, "{sql}");
    }
}

/// Windows without a row, and the setting that turns gpusort's windows off.
pub async fn empty_input_and_the_setting(backend: BackendChoice) {
    let mut rng = StdRng::seed_from_u64(seed());
    let batch = table(300, &mut rng);
    let (stock, gpu, rule) = contexts(backend, 2);
    register(&[&stock, &gpu], "t", partitions(&batch, 2));
    let sql = "SELECT rid, sum(i) OVER (ORDER BY rid ROWS 2 PRECEDING), rank() OVER (ORDER BY rid) FROM t WHERE i > 5000";
    let plan = physical_plan(&gpu, sql).await.unwrap();
    assert!(plan_text(&plan).contains("SortedWindowExec"));
    let got = datafusion::physical_plan::collect(plan, gpu.task_ctx())
        .await
        .unwrap();
    assert_eq!(got.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    gpu.sql("SET gpu_sort.window_functions = false")
        .await
        .unwrap();
    let sql = "SELECT rid, sum(i) OVER (ORDER BY rid ROWS 2 PRECEDING) FROM t";
    let plan = physical_plan(&gpu, sql).await.unwrap();
    assert!(!plan_text(&plan).contains("SortedWindowExec"));
    assert!(rule
        .last_decisions_text()
        .contains("gpu_sort.window_functions = false"));
    let mut counts = HashMap::new();
    for b in stock.sql(sql).await.unwrap().collect().await.unwrap() {
        *counts.entry("rows").or_insert(0) += b.num_rows();
    }
    assert_eq!(counts["rows"], 300);
}

/// What the CUDA backend computes on the device (`src/window/device.rs`): `count` (and
/// `count(*)`), `sum` of integers, decimals and floats, `avg` of decimals, floats and
/// integers (all-null arguments included), `min` and `max` of integers, decimals, dates
/// and floats, `first_value`, `last_value`, `nth_value`, `lag` and `lead` (with and
/// without defaults), and every ranking function, over `ROWS` frames, `RANGE` frames
/// without offsets and `GROUPS` frames, without
/// `PARTITION BY`, over a few large partitions and over thousands of tiny ones, keys with
/// nulls in both directions. One input partition, so each sort is one run. The results
/// equal DataFusion's; `on_device` says the device must have computed them (the CUDA
/// backend), else the host did.
pub async fn device_window_functions(backend: BackendChoice, on_device: bool) {
    let mut rng = StdRng::seed_from_u64(seed() ^ 0xD3C);
    let batch = table(8_000, &mut rng);
    let peer_frames = [
        "",
        "RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
        "RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING",
    ];
    let aggregates = "count(i) OVER w, sum(i) OVER w, sum(d) OVER w, count(*) OVER w, \
                      sum(nul) OVER w, count(d) OVER w, sum(few) OVER w, avg(d) OVER w, \
                      min(i) OVER w, max(d) OVER w, min(dt) OVER w, max(f) OVER w, \
                      max(nul) OVER w";
    // Functions of one row's value, for orders without ties only.
    let values = "first_value(i) OVER w, last_value(d) OVER w, nth_value(dt, 2) OVER w, \
                  first_value(nul) OVER w, lag(i) OVER w, lead(d, 2) OVER w, \
                  lag(i, 3, -7) OVER w, lag(dt, 2) OVER w, lead(i, 1, 5) OVER w";
    // Float sums and averages (of floats and of integers) lead each query: columns 1 to 3,
    // compared within the float bound.
    let floats = "sum(f) OVER w, avg(f) OVER w, avg(i) OVER w";
    let scale = float_scale(&batch);
    // GROUPS frames: extremes only where one end is unbounded.
    let group_frames = [
        ("GROUPS BETWEEN 1 PRECEDING AND 2 FOLLOWING", ""),
        ("GROUPS BETWEEN 3 PRECEDING AND 1 PRECEDING", ""),
        ("GROUPS BETWEEN 1 FOLLOWING AND 3 FOLLOWING", ""),
        (
            "GROUPS BETWEEN 2 FOLLOWING AND UNBOUNDED FOLLOWING",
            ", min(i) OVER w, max(f) OVER w",
        ),
        (
            "GROUPS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING",
            ", max(d) OVER w, min(dt) OVER w",
        ),
    ];
    let group_aggregates = "count(i) OVER w, sum(i) OVER w, sum(d) OVER w, count(*) OVER w, \
                            sum(nul) OVER w, avg(d) OVER w, avg(nul) OVER w";
    // One partition: each sort is one run. Four: PARTITION BY sorts are shared by the
    // four hash partitions (`combined.rs`), each part its own window partitions.
    for target_partitions in [1, 4] {
        let (stock, gpu, _) = contexts(backend, target_partitions);
        register(&[&stock, &gpu], "t", partitions(&batch, 3));
        let mut queries = Vec::new();
        for partitioning in [Partitioning::None, Partitioning::Few, Partitioning::Tiny] {
            let by = partitioning.clause();
            for frame in ROWS_FRAMES {
                for order in ["ORDER BY o, rid", "ORDER BY o DESC NULLS LAST, rid DESC"] {
                    queries.push(format!(
                        "SELECT rid, {floats}, {aggregates}, row_number() OVER w, \
                         ntile(3) OVER w, {values} FROM t WINDOW w AS ({by} {order} {frame})"
                    ));
                }
            }
            for frame in peer_frames {
                for order in ["ORDER BY o", "ORDER BY o DESC NULLS LAST", "ORDER BY dt, o"] {
                    queries.push(format!(
                        "SELECT rid, {floats}, {aggregates}, rank() OVER w, \
                         dense_rank() OVER w, percent_rank() OVER w, cume_dist() OVER w \
                         FROM t WINDOW w AS ({by} {order} {frame})"
                    ));
                }
            }
            for (frame, extremes) in group_frames {
                for order in ["ORDER BY o", "ORDER BY o DESC NULLS LAST"] {
                    queries.push(format!(
                        "SELECT rid, {floats}, {group_aggregates}{extremes}, rank() OVER w \
                         FROM t WINDOW w AS ({by} {order} {frame})"
                    ));
                }
            }
        }
        for sql in queries {
            let plan = assert_same_windows(&stock, &gpu, &sql, &[1, 2, 3], scale).await;
            let text = plan_text(&plan);
            assert!(
                text.contains("on=device where its sort is one run"),
                "{sql}\n{text}"
            );
            // The query reads `rid` only of the window's input columns: the sort hands on
            // only that one with the window columns.
            assert!(text.contains(", keeps 1 of "), "{sql}\n{text}");
            let rows = device_window_rows(&plan);
            match on_device {
                true => assert_eq!(rows, batch.num_rows(), "{sql}\n{text}"),
                false => assert_eq!(rows, 0, "{sql}"),
            }
        }
    }
}

/// `RANGE` frames with offsets over integer, date, timestamp and float keys, which the
/// CUDA backend searches on the device: keys at the ends of `Int8`'s and `UInt8`'s ranges
/// and of the timestamps arrow's interval arithmetic takes (targets outside them
/// collapse), floats with NaNs of both signs, infinities and zeros, nulls first and last, both directions, one and several window
/// partitions, frames before, around and after the row. The results equal DataFusion's;
/// `on_device` says the device must have computed them.
pub async fn device_range_offsets(backend: BackendChoice, on_device: bool) {
    let mut rng = StdRng::seed_from_u64(seed() ^ 0x2A17);
    let rows = 2500;
    let null = |rng: &mut StdRng| rng.random_bool(0.08);
    let int8: Int8Array = (0..rows)
        .map(|_| (!null(&mut rng)).then(|| rng.random_range(-128..=127i16) as i8))
        .collect();
    let uint8: UInt8Array = (0..rows)
        .map(|_| (!null(&mut rng)).then(|| rng.random_range(0..=255u16) as u8))
        .collect();
    let date: Date32Array = (0..rows)
        .map(|_| (!null(&mut rng)).then(|| rng.random_range(10_950..11_400)))
        .collect();
    // Seconds around 2000, and a few at the ends of the range arrow's interval arithmetic
    // takes (chrono's), where targets fall outside it.
    const LAST_SECOND: i64 = 8_210_266_876_799;
    const FIRST_SECOND: i64 = -8_334_601_228_800;
    let seconds: TimestampSecondArray = (0..rows)
        .map(|_| {
            (!null(&mut rng)).then(|| match rng.random_range(0..20) {
                0 => LAST_SECOND - rng.random_range(0..400_000),
                1 => FIRST_SECOND + rng.random_range(0..400_000),
                _ => 946_684_800 + rng.random_range(0..2_000_000),
            })
        })
        .collect();
    // Floats with ties and every special value.
    let float = |rng: &mut StdRng| {
        (!rng.random_bool(0.08)).then(|| match rng.random_range(0..10) {
            0 => SPECIAL_FLOATS[rng.random_range(0..SPECIAL_FLOATS.len())],
            _ => (rng.random_range(-400..400) as f64) / 8.0,
        })
    };
    let floats: Float64Array = (0..rows).map(|_| float(&mut rng)).collect();
    let floats32: Float32Array = (0..rows)
        .map(|_| float(&mut rng).map(|v| v as f32))
        .collect();
    // Microseconds over a few days, with ties.
    let micros: TimestampMicrosecondArray = (0..rows)
        .map(|_| {
            (!null(&mut rng))
                .then(|| 946_684_800_000_000 + rng.random_range(0..400i64) * 900_000_000)
        })
        .collect();
    let x: Int64Array = (0..rows)
        .map(|_| (!null(&mut rng)).then(|| rng.random_range(-1000..1000)))
        .collect();
    let d = Decimal128Array::from(
        (0..rows)
            .map(|_| (!null(&mut rng)).then(|| rng.random_range(-99_999i128..99_999)))
            .collect::<Vec<_>>(),
    )
    .with_precision_and_scale(10, 2)
    .unwrap();
    let batch = RecordBatch::try_from_iter(vec![
        (
            "rid",
            Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
        ),
        (
            "few",
            Arc::new(Int32Array::from_iter_values(
                (0..rows).map(|_| rng.random_range(0..4)),
            )) as ArrayRef,
        ),
        ("k8", Arc::new(int8) as ArrayRef),
        ("ku8", Arc::new(uint8) as ArrayRef),
        ("kdt", Arc::new(date) as ArrayRef),
        ("ks", Arc::new(seconds) as ArrayRef),
        ("kf", Arc::new(floats) as ArrayRef),
        ("kf32", Arc::new(floats32) as ArrayRef),
        ("kus", Arc::new(micros.with_timezone("UTC")) as ArrayRef),
        ("x", Arc::new(x) as ArrayRef),
        ("d", Arc::new(d) as ArrayRef),
    ])
    .unwrap();
    // (key, frame, whether a frame end is unbounded: min and max read it too)
    let cases = [
        ("k8", "5 PRECEDING AND 10 FOLLOWING", false),
        ("k8", "100 PRECEDING AND 50 PRECEDING", false),
        ("k8", "UNBOUNDED PRECEDING AND 3 PRECEDING", true),
        ("k8", "20 FOLLOWING AND 120 FOLLOWING", false),
        ("ku8", "7 PRECEDING AND 3 FOLLOWING", false),
        ("ku8", "2 FOLLOWING AND UNBOUNDED FOLLOWING", true),
        (
            "kdt",
            "INTERVAL '30 days' PRECEDING AND INTERVAL '3 days' FOLLOWING",
            false,
        ),
        ("kdt", "INTERVAL '7' DAY PRECEDING AND CURRENT ROW", false),
        ("kdt", "CURRENT ROW AND INTERVAL '10' DAY FOLLOWING", false),
        (
            "ks",
            "INTERVAL '3 days' PRECEDING AND INTERVAL '1 hour' FOLLOWING",
            false,
        ),
        (
            "ks",
            "INTERVAL '90' SECOND PRECEDING AND CURRENT ROW",
            false,
        ),
        (
            "ks",
            "INTERVAL '2' DAY FOLLOWING AND UNBOUNDED FOLLOWING",
            true,
        ),
        (
            "kus",
            "INTERVAL '1 hour 30 minutes' PRECEDING AND INTERVAL '0.5' SECOND FOLLOWING",
            false,
        ),
        (
            "kus",
            "UNBOUNDED PRECEDING AND INTERVAL '1' DAY PRECEDING",
            true,
        ),
        ("kf", "1.5 PRECEDING AND 0.5 FOLLOWING", false),
        ("kf", "CURRENT ROW AND 4 FOLLOWING", false),
        ("kf32", "2.25 PRECEDING AND 0.125 PRECEDING", false),
    ];
    for target_partitions in [1, 3] {
        let (stock, gpu, _) = contexts(backend, target_partitions);
        register(&[&stock, &gpu], "t", partitions(&batch, 3));
        for (key, bounds, unbounded) in cases {
            for direction in [
                "ASC NULLS LAST",
                "DESC NULLS FIRST",
                "ASC NULLS FIRST",
                "DESC NULLS LAST",
            ] {
                for by in ["", "PARTITION BY few"] {
                    let extremes = match unbounded {
                        true => ", min(x) OVER w, max(d) OVER w",
                        false => "",
                    };
                    let sql = format!(
                        "SELECT rid, count(x) OVER w, sum(x) OVER w, count(*) OVER w, \
                         sum(d) OVER w, avg(d) OVER w{extremes} FROM t WINDOW w AS \
                         ({by} ORDER BY {key} {direction} RANGE BETWEEN {bounds})"
                    );
                    let plan = assert_same_windows(&stock, &gpu, &sql, &[], 0.0).await;
                    let text = plan_text(&plan);
                    assert!(
                        text.contains("on=device where its sort is one run"),
                        "{sql}\n{text}"
                    );
                    let on = device_window_rows(&plan);
                    match on_device {
                        true => assert_eq!(on, rows, "{sql}\n{text}"),
                        false => assert_eq!(on, 0, "{sql}"),
                    }
                }
            }
        }
    }
}

/// The device's window kernels over more rows than one pass of their grid and one block of
/// scan tiles cover (3 M rows), a few large and a million tiny window partitions: sums,
/// counts, averages, extremes (sparse tables and running scans both ways), values and
/// ranks equal DataFusion's, computed on the device.
pub async fn device_windows_over_many_tiles(backend: BackendChoice) {
    let mut rng = StdRng::seed_from_u64(seed() ^ 0x3E6);
    let batch = table(3_000_000, &mut rng);
    let (stock, gpu, _) = contexts(backend, 1);
    register(&[&stock, &gpu], "t", partitions(&batch, 3));
    for sql in [
        "SELECT rid, sum(d) OVER w, count(i) OVER w, rank() OVER w, dense_rank() OVER w \
         FROM t WINDOW w AS (PARTITION BY few ORDER BY o)",
        "SELECT rid, sum(i) OVER w, count(*) OVER w, row_number() OVER w FROM t \
         WINDOW w AS (ORDER BY o DESC, rid ROWS BETWEEN 5 PRECEDING AND 2 FOLLOWING)",
        "SELECT rid, sum(d) OVER w, count(d) OVER w, row_number() OVER w FROM t \
         WINDOW w AS (PARTITION BY tiny ORDER BY o, rid ROWS UNBOUNDED PRECEDING)",
        "SELECT rid, min(i) OVER w, max(d) OVER w, avg(d) OVER w, lag(d) OVER w, \
         nth_value(i, 3) OVER w FROM t \
         WINDOW w AS (PARTITION BY few ORDER BY o, rid ROWS BETWEEN 20 PRECEDING AND 3 FOLLOWING)",
        "SELECT rid, max(i) OVER w, min(d) OVER w, cume_dist() OVER w FROM t \
         WINDOW w AS (ORDER BY o DESC)",
        "SELECT rid, first_value(dt) OVER w, lead(i, 2, 0) OVER w, ntile(7) OVER w FROM t \
         WINDOW w AS (ORDER BY o DESC, rid)",
        "SELECT rid, min(f) OVER w, max(dt) OVER w, last_value(i) OVER w, \
         percent_rank() OVER w FROM t \
         WINDOW w AS (PARTITION BY few ORDER BY o, rid RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)",
        "SELECT rid, sum(d) OVER w, count(i) OVER w, avg(d) OVER w FROM t WINDOW w AS \
         (PARTITION BY few ORDER BY dt RANGE BETWEEN INTERVAL '20' DAY PRECEDING AND \
         INTERVAL '2' DAY FOLLOWING)",
    ] {
        let plan = assert_same_windows(&stock, &gpu, sql, &[], 0.0).await;
        assert_eq!(device_window_rows(&plan), batch.num_rows(), "{sql}");
    }
}
