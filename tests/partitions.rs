//! Sorts that keep their input's partitioning, all partitions sorted at once, on the CPU
//! backend (the same cases run on the GPU in `gpu/routing.rs`).

mod common;

use common::partitions as cases;
use gpusort::BackendChoice::Cpu;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn combined_partitions_equal_each_partition_sorted() {
    cases::combined_partitions_equal_each_partition_sorted(Cpu, 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn combined_partitions_in_any_order_and_again() {
    cases::combined_partitions_in_any_order_and_again(Cpu, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn combined_partitions_in_runs_and_spilled() {
    cases::combined_partitions_in_runs_and_spilled(Cpu, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn combined_partitions_with_ordered_prefix() {
    cases::combined_partitions_with_ordered_prefix(Cpu, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn window_over_hash_partitions() {
    cases::window_over_hash_partitions(Cpu, 40_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn routed_partitions_equal_repartition_then_sort() {
    cases::routed_partitions_equal_repartition_then_sort(Cpu, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn routed_sort_pairs_with_repartitioned_join_side() {
    cases::routed_sort_pairs_with_repartitioned_join_side(Cpu, 30_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spill_everywhere_within_the_limit() {
    common::spill::spill_everywhere_within_the_limit(Cpu, 200_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_sorted_in_pieces() {
    cases::runs_sorted_in_pieces(20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropping_a_query_stops_every_path() {
    let cpu = std::sync::Arc::new(gpusort::sort::CpuBackend);
    common::cancel::dropping_a_query_stops_every_path(cpu, 100_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn early_copies_get_every_batch_and_are_let_go_when_not_one_run() {
    use common::early::{early_copy_of, Shape};
    use datafusion::arrow::datatypes::DataType;
    // The resident columns but the key `k`, as their types.
    let asked = vec![vec![(0, DataType::Int64), (2, DataType::Utf8View)]];
    let one = early_copy_of(Shape::OneRun, 3, 20_000).await;
    assert_eq!(one.asked, asked);
    assert_eq!(one.rows, 60_000, "{one:?}");
    assert_eq!(one.partitions.len(), 3, "{one:?}");
    // The input ended, then the run (gathered on the host here) let the copy go.
    assert_eq!((one.ended, one.abandoned), (1, 1), "{one:?}");
    let several = early_copy_of(Shape::SeveralRuns, 3, 20_000).await;
    assert_eq!(several.asked, asked);
    assert_eq!((several.ended, several.abandoned), (1, 1), "{several:?}");
    // Let go at the first spill: the input never ends for it, and later batches skip it.
    let spilled = early_copy_of(Shape::Spilled, 3, 20_000).await;
    assert_eq!(spilled.asked, asked);
    assert_eq!((spilled.ended, spilled.abandoned), (0, 1), "{spilled:?}");
    assert!(spilled.rows < 60_000, "{spilled:?}");
    let none = early_copy_of(Shape::NotResident, 2, 5_000).await;
    assert!(none.asked.is_empty(), "{none:?}");
}
