//! The window cases of `common/windows.rs` on the CUDA backend: the sorts below the
//! windows run on the device, the windows over their output.

use super::*;

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn every_function_frame_and_type_over_one_partition() {
    if device().is_none() {
        return;
    }
    common::windows::every_function_frame_and_type_over_one_partition(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn every_function_frame_and_type_over_routed_partitions() {
    if device().is_none() {
        return;
    }
    common::windows::every_function_frame_and_type_over_routed_partitions(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn range_offsets_over_every_key_type() {
    if device().is_none() {
        return;
    }
    common::windows::range_offsets_over_every_key_type(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn top_per_partition_keeps_what_the_filter_keeps() {
    if device().is_none() {
        return;
    }
    common::windows::top_per_partition_keeps_what_the_filter_keeps(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn long_partitions_cross_pieces() {
    if device().is_none() {
        return;
    }
    common::windows::long_partitions_cross_pieces(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn special_floats_in_keys_and_extremes() {
    if device().is_none() {
        return;
    }
    common::windows::special_floats_in_keys_and_extremes(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn float_sums_within_the_stated_bound() {
    if device().is_none() {
        return;
    }
    common::windows::float_sums_within_the_stated_bound(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn unsupported_windows_keep_datafusion_and_say_why() {
    if device().is_none() {
        return;
    }
    common::windows::unsupported_windows_keep_datafusion_and_say_why(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn empty_input_and_the_setting() {
    if device().is_none() {
        return;
    }
    common::windows::empty_input_and_the_setting(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn device_window_functions() {
    if device().is_none() {
        return;
    }
    common::windows::device_window_functions(Cuda, true).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn device_windows_over_many_tiles() {
    if device().is_none() {
        return;
    }
    common::windows::device_windows_over_many_tiles(Cuda).await;
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn device_range_offsets() {
    if device().is_none() {
        return;
    }
    common::windows::device_range_offsets(Cuda, true).await;
}
