//! The segmented and locality strategies on the CPU backend (in CI), against DataFusion's
//! own sort (cases in `common/strategies.rs`; `tests/gpu/` runs them on CUDA).

mod common;

use common::strategies as cases;
use gpusort::BackendChoice::Cpu;

#[tokio::test]
async fn segment_lengths_and_suffixes() {
    cases::segment_lengths_and_suffixes(Cpu, 120_000).await;
}

#[tokio::test]
async fn window_over_ordered_input() {
    cases::window_over_ordered_input(Cpu, 60_000).await;
}

#[tokio::test]
async fn nearly_sorted_inputs_with_the_locality_setting() {
    cases::nearly_sorted_inputs(Cpu, 50_000, "locality", |_, _| true).await;
}

#[tokio::test]
async fn nearly_sorted_inputs_with_auto_use_the_radix_sort_on_the_cpu() {
    cases::nearly_sorted_inputs(Cpu, 50_000, "auto", |_, _| false).await;
}
