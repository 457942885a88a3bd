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
