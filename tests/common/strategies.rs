//! Differential cases of the segmented and locality strategies, on a given backend:
//! `tests/strategies.rs` runs them on the CPU backend (in CI), `tests/gpu/routing.rs` on CUDA.
//!
//! Segmented: tables declared (and generated) ordered by a prefix `g` (segment lengths all
//! 1, 2–16, 100, 112, 113, 1 000, 100 000, one segment, a power-law mix), sorted by `g`
//! and suffix keys of several widths (u32, u64, two words, strings with long shared
//! prefixes); a window `PARTITION BY g ORDER BY k` over them. Locality: nearly sorted keys
//! (noise 0, 1, 64, 4 096, reversed runs). Every case compares with DataFusion's own sort,
//! checks that ties keep input order, and checks which algorithm the plan and its metrics
//! name.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::SortExpr;
use datafusion::physical_plan::displayable;
use datafusion::prelude::{col, SessionContext};
use rand::rngs::StdRng;
use rand::Rng;

use super::compare::{assert_same_sort, assert_stable};
use super::data::case_rng;
use super::{forced_context_on, seed, session_config, stock_context};
use gpusort::{BackendChoice, GpuSortExec};

/// How segment lengths are drawn.
#[derive(Debug, Clone, Copy)]
pub enum Lengths {
    /// Every segment this long (the last one shorter).
    Fixed(usize),
    /// Uniform in 2..=16.
    Short,
    /// One segment.
    One,
    /// Power law: many short segments, a few very long ones.
    PowerLaw,
}

/// The segment lengths of `rows` rows.
pub fn segment_lengths(rng: &mut StdRng, rows: usize, lengths: Lengths) -> Vec<usize> {
    let mut out = Vec::new();
    let mut left = rows;
    while left > 0 {
        let len = match lengths {
            Lengths::Fixed(n) => n,
            Lengths::Short => rng.random_range(2..=16),
            Lengths::One => rows,
            Lengths::PowerLaw => {
                let u: f64 = rng.random_range(0.0001..1.0);
                (1.0 / (u * u)) as usize
            }
        }
        .clamp(1, left);
        out.push(len);
        left -= len;
    }
    out
}

/// The suffix keys of a segmented case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suffix {
    /// `k` INT in 0..50 (ties; a u32 key on the device).
    SmallInt,
    /// `k` BIGINT over its whole range (a 64-bit key).
    WideInt,
    /// `k` BIGINT whole range, then `x` DOUBLE (two key words).
    TwoKeys,
    /// `s` VARCHAR with a 40-byte shared prefix (ties refined past the packed window).
    LongStrings,
}

/// Columns: g (segment; the first segment null, or the last with `nulls_last`), k, w,
/// x, s, rid.
fn segmented_table(
    rng: &mut StdRng,
    rows: usize,
    lengths: Lengths,
    nulls_last: bool,
) -> RecordBatch {
    let mut g: Vec<Option<i64>> = Vec::with_capacity(rows);
    let lengths = segment_lengths(rng, rows, lengths);
    let null_segment = if nulls_last { lengths.len() - 1 } else { 0 };
    for (s, len) in lengths.into_iter().enumerate() {
        let value = (s != null_segment).then(|| s as i64 * 3 - 7);
        g.extend(std::iter::repeat_n(value, len));
    }
    let k: Vec<i32> = (0..rows).map(|_| rng.random_range(0..50)).collect();
    let wide: Vec<i64> = (0..rows).map(|_| rng.random()).collect();
    let x: Vec<Option<f64>> = (0..rows)
        .map(|_| (!rng.random_bool(0.1)).then(|| rng.random_range(-4..4) as f64 * 0.5))
        .collect();
    let prefix = "https://example.com/a/rather/long/path/";
    let s: Vec<String> = (0..rows)
        .map(|_| format!("{prefix}{}", rng.random_range(0..300)))
        .collect();
    let schema = Schema::new(vec![
        Field::new("g", DataType::Int64, true),
        Field::new("k", DataType::Int32, false),
        Field::new("w", DataType::Int64, false),
        Field::new("x", DataType::Float64, true),
        Field::new("s", DataType::Utf8, false),
        Field::new("rid", DataType::Int64, false),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(g)),
        Arc::new(Int32Array::from(k)),
        Arc::new(Int64Array::from(wide)),
        Arc::new(Float64Array::from(x)),
        Arc::new(StringArray::from(s)),
        Arc::new(Int64Array::from_iter_values(0..rows as i64)),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).unwrap()
}

/// Registers `batch` (cut into batches of `batch_rows`) as `t`, declared ordered by
/// `order`, in every context.
fn register_ordered(
    ctxs: &[&SessionContext],
    batch: &RecordBatch,
    batch_rows: usize,
    order: Vec<SortExpr>,
) {
    let batches: Vec<RecordBatch> = (0..batch.num_rows())
        .step_by(batch_rows)
        .map(|at| batch.slice(at, batch_rows.min(batch.num_rows() - at)))
        .collect();
    for ctx in ctxs {
        let mut table = MemTable::try_new(batch.schema(), vec![batches.clone()]).unwrap();
        if !order.is_empty() {
            table = table.with_sort_order(vec![order.clone()]);
        }
        ctx.deregister_table("t").unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
    }
}

/// Runs `sql`: batches, plan text, and the named metric summed over the plan's
/// `GpuSortExec`s.
pub async fn run_with_metric(
    ctx: &SessionContext,
    sql: &str,
    metric: &str,
) -> (Vec<RecordBatch>, String, usize) {
    let plan = ctx
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let text = displayable(plan.as_ref()).indent(true).to_string();
    let batches = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx())
        .await
        .unwrap_or_else(|e| panic!("{e}: {sql}"));
    let mut total = 0;
    plan.apply(|node| {
        if node.downcast_ref::<GpuSortExec>().is_some() {
            total += node
                .metrics()
                .and_then(|m| m.sum_by_name(metric))
                .map_or(0, |v| v.as_usize());
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    (batches, text, total)
}

/// One segmented case: `rows` rows in segments of `lengths`, sorted by `g` then `suffix`.
pub async fn segmented_case(backend: BackendChoice, rows: usize, lengths: Lengths, suffix: Suffix) {
    let label = format!("segmented {rows} {lengths:?} {suffix:?}");
    let mut rng = case_rng(seed(), &label);
    let table = segmented_table(&mut rng, rows, lengths, false);
    let config = session_config(1, 8192);
    let (stock, forced) = (
        stock_context(config.clone()),
        forced_context_on(config, backend),
    );
    register_ordered(
        &[&stock, &forced],
        &table,
        5000,
        vec![col("g").sort(true, true)],
    );
    let (order, keys): (&str, Vec<usize>) = match suffix {
        Suffix::SmallInt => ("k DESC", vec![0, 1]),
        Suffix::WideInt => ("w ASC", vec![0, 2]),
        Suffix::TwoKeys => ("k ASC, x DESC NULLS LAST", vec![0, 1, 3]),
        Suffix::LongStrings => ("s DESC", vec![0, 4]),
    };
    let sql = format!("SELECT * FROM t ORDER BY g ASC NULLS FIRST, {order}");
    let context = format!("seed={} {label} sql={sql}", seed());
    let (expected, _) = super::run(&stock, &sql).await.unwrap();
    let (actual, plan, segmented) = run_with_metric(&forced, &sql, "algorithm_segmented").await;
    assert!(
        plan.contains("segmented_prefix=1"),
        "plan without the segmented strategy:\n{plan}\n{context}"
    );
    assert_eq!(
        segmented, 1,
        "runs sorted by the segmented strategy: {context}"
    );
    assert_same_sort(&expected, &actual, &keys, &context);
    assert_stable(&actual, &keys, 5, &context);
}

/// Every segment shape with every suffix on `rows` rows.
pub async fn segment_lengths_and_suffixes(backend: BackendChoice, rows: usize) {
    let shapes = [
        Lengths::Fixed(1),
        Lengths::Short,
        Lengths::Fixed(100),
        Lengths::Fixed(112),
        Lengths::Fixed(113),
        Lengths::Fixed(1000),
        Lengths::Fixed(100_000),
        Lengths::One,
        Lengths::PowerLaw,
    ];
    for lengths in shapes {
        for suffix in [
            Suffix::SmallInt,
            Suffix::WideInt,
            Suffix::TwoKeys,
            Suffix::LongStrings,
        ] {
            segmented_case(backend, rows, lengths, suffix).await;
        }
    }
}

/// A window `PARTITION BY g ORDER BY w` over input ordered by `g` sorts within segments
/// and numbers rows as DataFusion does.
pub async fn window_over_ordered_input(backend: BackendChoice, rows: usize) {
    let label = format!("window {rows}");
    let mut rng = case_rng(seed(), &label);
    let table = segmented_table(&mut rng, rows, Lengths::PowerLaw, true);
    let config = session_config(1, 4096);
    let (stock, forced) = (
        stock_context(config.clone()),
        forced_context_on(config, backend),
    );
    // DataFusion sorts window partitions NULLS LAST: the input is declared that way.
    register_ordered(
        &[&stock, &forced],
        &table,
        3000,
        vec![col("g").sort(true, false)],
    );
    let sql = "SELECT g, w, row_number() OVER (PARTITION BY g ORDER BY w) AS rn FROM t";
    let context = format!("seed={} {label} sql={sql}", seed());
    let (expected, _) = super::run(&stock, sql).await.unwrap();
    let (actual, plan, segmented) = run_with_metric(&forced, sql, "algorithm_segmented").await;
    assert!(
        plan.contains("segmented_prefix=1"),
        "window sort without the segmented strategy:\n{plan}\n{context}"
    );
    assert_eq!(segmented, 1, "{context}");
    // `w` has no ties within a segment: (g, w) fixes every row, rn included.
    assert_same_sort(&expected, &actual, &[0, 1, 2], &context);
}

/// Nearly sorted keys: `k = i * 1000 + uniform(0 .. noise * 1000)` (ties from a coarse
/// copy `c = k / 4000`; 64-bit keys from `big = k << 20`), or runs of 1 000 in reverse.
fn nearly_sorted_table(rng: &mut StdRng, rows: usize, noise: Option<i64>) -> RecordBatch {
    let k: Vec<i64> = (0..rows as i64)
        .map(|i| match noise {
            Some(0) => i * 1000,
            Some(noise) => i * 1000 + rng.random_range(0..noise * 1000),
            None => (i / 1000) * 1000 + (999 - i % 1000),
        })
        .collect();
    let c: Vec<i64> = k.iter().map(|k| k / 4000).collect();
    let big: Vec<i64> = k.iter().map(|k| k << 20).collect();
    let schema = Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("c", DataType::Int64, false),
        Field::new("big", DataType::Int64, false),
        Field::new("rid", DataType::Int64, false),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from(k)),
            Arc::new(Int64Array::from(c)),
            Arc::new(Int64Array::from(big)),
            Arc::new(Int64Array::from_iter_values(0..rows as i64)),
        ],
    )
    .unwrap()
}

/// Nearly sorted inputs under `algorithm` (`auto` or `locality`): results equal
/// DataFusion's; `expect_locality(noise, sql)` says whether the locality sort must have
/// run for that noise and query.
pub async fn nearly_sorted_inputs(
    backend: BackendChoice,
    rows: usize,
    algorithm: &str,
    expect_locality: impl Fn(Option<i64>, &str) -> bool,
) {
    for noise in [Some(0), Some(1), Some(64), Some(4096), None] {
        let label = format!("nearly sorted {rows} {noise:?} {algorithm}");
        let mut rng = case_rng(seed(), &label);
        let table = nearly_sorted_table(&mut rng, rows, noise);
        let config = session_config(1, 8192);
        let (stock, forced) = (
            stock_context(config.clone()),
            forced_context_on(config, backend),
        );
        forced
            .sql(&format!("SET gpu_sort.algorithm = '{algorithm}'"))
            .await
            .unwrap();
        register_ordered(&[&stock, &forced], &table, 8192, vec![]);
        for (sql, keys) in [
            ("SELECT * FROM t ORDER BY k", vec![0]),
            ("SELECT * FROM t ORDER BY c", vec![1]),
            ("SELECT * FROM t ORDER BY big", vec![2]),
            ("SELECT * FROM t ORDER BY big DESC", vec![2]),
        ] {
            let context = format!("seed={} {label} sql={sql}", seed());
            let (expected, _) = super::run(&stock, sql).await.unwrap();
            let (actual, _, locality) = run_with_metric(&forced, sql, "algorithm_locality").await;
            assert_eq!(
                locality == 1,
                expect_locality(noise, sql),
                "locality sort chosen or not: {context}"
            );
            assert_same_sort(&expected, &actual, &keys, &context);
            assert_stable(&actual, &keys, 3, &context);
        }
    }
}
