//! Window functions computed by gpusort against DataFusion's own window operators, on the
//! CPU backend (the cases live in `common/windows.rs`; `tests/gpu/windows.rs` runs them on
//! the CUDA backend).

mod common;

use common::windows as cases;
use gpusort::BackendChoice::Cpu;

#[tokio::test]
async fn every_function_frame_and_type_over_one_partition() {
    cases::every_function_frame_and_type_over_one_partition(Cpu).await;
}

#[tokio::test]
async fn every_function_frame_and_type_over_routed_partitions() {
    cases::every_function_frame_and_type_over_routed_partitions(Cpu).await;
}

#[tokio::test]
async fn long_partitions_cross_pieces() {
    cases::long_partitions_cross_pieces(Cpu).await;
}

#[tokio::test]
async fn range_offsets_over_every_key_type() {
    cases::range_offsets_over_every_key_type(Cpu).await;
}

#[tokio::test]
async fn top_per_partition_keeps_what_the_filter_keeps() {
    cases::top_per_partition_keeps_what_the_filter_keeps(Cpu).await;
}

#[tokio::test]
async fn special_floats_in_keys_and_extremes() {
    cases::special_floats_in_keys_and_extremes(Cpu).await;
}

#[tokio::test]
async fn float_sums_within_the_stated_bound() {
    cases::float_sums_within_the_stated_bound(Cpu).await;
}

#[tokio::test]
async fn unsupported_windows_keep_datafusion_and_say_why() {
    cases::unsupported_windows_keep_datafusion_and_say_why(Cpu).await;
}

#[tokio::test]
async fn empty_input_and_the_setting() {
    cases::empty_input_and_the_setting(Cpu).await;
}

#[tokio::test]
async fn device_window_functions_on_the_host() {
    cases::device_window_functions(Cpu, false).await;
}

#[tokio::test]
async fn device_range_offsets_on_the_host() {
    cases::device_range_offsets(Cpu, false).await;
}
