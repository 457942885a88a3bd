//! Spilling on every path of the sort: a plain ORDER BY over several partitions, a
//! window's sort over one partition, the whole-partition window's hash-routed sort, the
//! combined sort of several partitions below a whole-partition and a streaming window.
//! Each runs under a memory pool (greedy and fair) of half its input's size, at the
//! session's own batch size, must spill, must answer what DataFusion answers without a
//! limit, and must leave the pool empty.

use std::sync::Arc;

use datafusion::arrow::array::{Int32Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::compute::SortColumn;
use datafusion::arrow::compute::{concat_batches, lexsort_to_indices, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::memory_pool::{FairSpillPool, GreedyMemoryPool, MemoryPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use gpusort::{BackendChoice, GpuSortConfig, SessionStateBuilderExt};
use rand::Rng;

use super::compare::assert_same_sort;
use super::data::case_rng;
use super::seed;

/// Input partitions of `rows` rows in all: `g` (Int32, 40 values, nulls), `ts` (Int64,
/// unique, so (g, ts) orders every row), `s` (Utf8, 8 to 40 bytes), in batches of 1000
/// rows that own their buffers.
fn partitions(rows: usize, count: usize) -> Vec<Vec<RecordBatch>> {
    let mut rng = case_rng(seed(), "spill everywhere");
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int32, true),
        Field::new("ts", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
    ]));
    let per = rows / count;
    (0..count)
        .map(|p| {
            (0..per)
                .step_by(1000)
                .map(|first| {
                    let n = 1000.min(per - first);
                    let g: Vec<Option<i32>> = (0..n)
                        .map(|_| rng.random_bool(0.97).then(|| rng.random_range(0..40)))
                        .collect();
                    let ts = Int64Array::from_iter_values((first..first + n).map(|i| {
                        ((i * count + p) as i64).wrapping_mul(0x9E37_79B9) % 1_000_000_007
                    }));
                    let s: Vec<Option<String>> = (0..n)
                        .map(|_| {
                            let len = rng.random_range(8..40);
                            rng.random_bool(0.95).then(|| "x".repeat(len))
                        })
                        .collect();
                    RecordBatch::try_new(
                        Arc::clone(&schema),
                        vec![
                            Arc::new(Int32Array::from(g)),
                            Arc::new(ts),
                            Arc::new(StringArray::from(s)),
                        ],
                    )
                    .unwrap()
                })
                .collect()
        })
        .collect()
}

/// A gpusort session on `backend` whose memory pool is `pool`.
fn limited_context(
    config: SessionConfig,
    backend: BackendChoice,
    pool: Arc<dyn MemoryPool>,
) -> (SessionContext, Arc<RuntimeEnv>) {
    let mut gpu = GpuSortConfig::forced_cpu();
    gpu.backend = backend;
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(pool)
        .build_arc()
        .unwrap();
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(Arc::clone(&runtime))
        .with_default_features()
        .with_gpu_sort(gpu)
        .build();
    (SessionContext::new_with_state(state), runtime)
}

/// Every path spills under a pool of half the input's bytes, and answers as DataFusion
/// does without one (DataFusion's own sort fails under such a pool: it sets aside
/// `sort_spill_reservation_bytes`, 10 MiB, for its merge).
pub async fn spill_everywhere_within_the_limit(backend: BackendChoice, rows: usize) {
    // No ORDER BY above the window: a merge of the window's partitions would have to hold
    // a whole partition (the whole-partition window emits each as one batch) in the pool.
    let window = "SELECT g, ts, s, row_number() OVER (PARTITION BY g ORDER BY ts) AS rn, \
                  lag(s) OVER (PARTITION BY g ORDER BY ts) AS prev FROM t";
    let order_by = "SELECT * FROM t ORDER BY s DESC, ts";
    // (label, SQL, input partitions, settings, what the plan must show)
    let cases: [(&str, &str, usize, &[&str], &str); 5] = [
        ("order by", order_by, 4, &[], "GpuSortExec"),
        ("window, one partition", window, 1, &[], "GpuSortExec"),
        ("window, routed", window, 4, &[], "repartition=Hash"),
        (
            "window, combined",
            window,
            4,
            &["SET gpu_sort.absorb_repartition = false"],
            "combined_partitions=4",
        ),
        (
            "window, streamed",
            window,
            4,
            &[
                "SET gpu_sort.window_functions = false",
                "SET gpu_sort.whole_partition_windows = false",
            ],
            "BoundedWindowAggExec",
        ),
    ];
    let bytes: usize = partitions(rows, 1)
        .iter()
        .flatten()
        .map(RecordBatch::get_array_memory_size)
        .sum();
    let limit = bytes / 2;
    for (label, sql, count, settings, shown) in cases {
        let config = super::session_config(count, 8192);
        let stock = super::stock_context(config.clone());
        super::register(&[&stock], "t", partitions(rows, count));
        let (expected, _) = super::run(&stock, sql).await.unwrap();
        let expected = by_g_and_ts(&expected);
        let pools: [(&str, Arc<dyn MemoryPool>); 2] = [
            ("greedy", Arc::new(GreedyMemoryPool::new(limit))),
            ("fair", Arc::new(FairSpillPool::new(limit))),
        ];
        for (pool_name, pool) in pools {
            let context = format!(
                "seed={} {label}, {pool_name} pool of {limit} bytes, input {bytes} bytes, \
                 {rows} rows: {sql}",
                seed()
            );
            let (ctx, runtime) = limited_context(config.clone(), backend, pool);
            super::register(&[&ctx], "t", partitions(rows, count));
            for setting in settings {
                super::run(&ctx, setting).await.unwrap();
            }
            let (actual, plan, spills) = super::run_counting_spills(&ctx, sql)
                .await
                .unwrap_or_else(|e| panic!("{e}: {context}"));
            assert!(plan.contains(shown), "{shown} not in\n{plan}\n{context}");
            assert!(spills > 0, "nothing spilled:\n{plan}\n{context}");
            let columns: Vec<usize> = (0..expected[0].num_columns()).collect();
            assert_same_sort(&expected, &by_g_and_ts(&actual), &columns, &context);
            drop((actual, ctx));
            assert_eq!(
                runtime.memory_pool.reserved(),
                0,
                "pool not empty: {context}"
            );
        }
    }
}

/// `batches` as one batch ordered by `g` (nulls first), then `ts` (unique).
fn by_g_and_ts(batches: &[RecordBatch]) -> Vec<RecordBatch> {
    let all = concat_batches(&batches[0].schema(), batches).unwrap();
    let keys: Vec<SortColumn> = [0, 1]
        .iter()
        .map(|&c| SortColumn {
            values: Arc::clone(all.column(c)),
            options: None,
        })
        .collect();
    let order = lexsort_to_indices(&keys, None).unwrap();
    vec![take_record_batch(&all, &order).unwrap()]
}
