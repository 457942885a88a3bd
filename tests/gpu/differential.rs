//! The differential suite of `common/differential.rs` on the CUDA backend, and recycled
//! permutation memory under later queries.

use super::*;

/// Permutations given back after a query are filled again by later downloads (the same
/// length, cut shorter, too short to reuse): every later sort still equals DataFusion's.
#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn recycled_permutations_keep_later_sorts_correct() {
    if device().is_none() {
        return;
    }
    let n = 3_000_000;
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("id", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(random_keys(n, "recycle", |x| {
                (x >> 44) as i64 - 500_000
            }))),
            Arc::new(Int64Array::from_iter_values(0..n as i64)),
        ],
    )
    .unwrap();
    let config = common::session_config(1, 8192);
    let (stock, forced) = (
        common::stock_context(config.clone()),
        common::forced_context_on(config, Cuda),
    );
    common::register(&[&stock, &forced], "t", vec![vec![batch.clone()]]);
    common::register(
        &[&stock, &forced],
        "half",
        vec![vec![batch.slice(7, n / 2)]],
    );
    let fallbacks = cuda::fallback_count();
    for sql in [
        "SELECT * FROM t ORDER BY k",
        "SELECT * FROM t ORDER BY k",
        "SELECT * FROM half ORDER BY k DESC",
        "SELECT * FROM t ORDER BY k DESC, id",
    ] {
        let (expected, _) = common::run(&stock, sql).await.unwrap();
        let (actual, plan) = common::run(&forced, sql).await.unwrap();
        assert!(plan.contains("GpuSortExec"), "{plan}");
        common::compare::assert_same_sort(&expected, &actual, &[0], sql);
    }
    assert_eq!(
        cuda::fallback_count(),
        fallbacks,
        "every run sorted on the GPU"
    );
}

macro_rules! differential_on_cuda {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        #[ignore = "needs a CUDA GPU"]
        async fn $name() {
            if device().is_none() {
                return;
            }
            let fallbacks = cuda::fallback_count();
            cases::$name(Cuda).await;
            assert_eq!(cuda::fallback_count(), fallbacks, "every run sorted on the GPU");
        }
    )*};
}

differential_on_cuda!(
    every_type_every_direction,
    every_distribution,
    sizes_around_tiles_and_large,
    null_fractions,
    one_to_four_mixed_keys,
    partitions_and_batch_sizes,
    many_runs_merged_stay_stable,
    memory_limited_sorts_spill,
    negative_zero_and_nan_bitwise,
    string_keys_every_type_and_shape,
    string_keys_mixed_with_other_keys,
    string_keys_in_runs_partitions_and_spills,
    parquet_sources,
    copy_to_parquet,
);
