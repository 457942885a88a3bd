//! Differential tests on the CPU backend: gpusort against DataFusion's own `SortExec` over
//! the test matrix for every supported key type (the cases live in `common/differential.rs`;
//! `tests/gpu/differential.rs` runs the same cases on the CUDA backend).

mod common;

use common::differential as cases;
use gpusort::BackendChoice::Cpu;

#[tokio::test]
async fn every_type_every_direction() {
    cases::every_type_every_direction(Cpu).await;
}

#[tokio::test]
async fn memory_limited_sorts_spill() {
    cases::memory_limited_sorts_spill(Cpu).await;
}

#[tokio::test]
async fn every_distribution() {
    cases::every_distribution(Cpu).await;
}

#[tokio::test]
async fn sizes_around_tiles_and_large() {
    cases::sizes_around_tiles_and_large(Cpu).await;
}

#[tokio::test]
async fn null_fractions() {
    cases::null_fractions(Cpu).await;
}

#[tokio::test]
async fn one_to_four_mixed_keys() {
    cases::one_to_four_mixed_keys(Cpu).await;
}

#[tokio::test]
async fn partitions_and_batch_sizes() {
    cases::partitions_and_batch_sizes(Cpu).await;
}

#[tokio::test]
async fn many_runs_merged_stay_stable() {
    cases::many_runs_merged_stay_stable(Cpu).await;
}

#[tokio::test]
async fn negative_zero_and_nan_bitwise() {
    cases::negative_zero_and_nan_bitwise(Cpu).await;
}

#[tokio::test]
async fn string_keys_every_type_and_shape() {
    cases::string_keys_every_type_and_shape(Cpu).await;
}

#[tokio::test]
async fn string_keys_mixed_with_other_keys() {
    cases::string_keys_mixed_with_other_keys(Cpu).await;
}

#[tokio::test]
async fn string_keys_in_runs_partitions_and_spills() {
    cases::string_keys_in_runs_partitions_and_spills(Cpu).await;
}

#[tokio::test]
async fn parquet_sources() {
    cases::parquet_sources(Cpu).await;
}

#[tokio::test]
async fn copy_to_parquet() {
    cases::copy_to_parquet(Cpu).await;
}

/// Sixteen queries at once in one process (sorts, windows, strings, a LIMIT, a spill under
/// a memory limit), each twice: every answer equals DataFusion's (`common/load.rs`; the
/// GPU version is `tests/gpu/budget.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_queries_at_once_equal_datafusion() {
    let report = common::load::concurrent_queries_equal_datafusion(
        Cpu,
        60_000,
        2,
        gpusort::DeviceMemoryLimit::Auto,
    )
    .await;
    println!("{report:?}");
    assert!(report.spills > 0);
}
