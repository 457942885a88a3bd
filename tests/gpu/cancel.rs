//! Dropping a query on the CUDA backend stops every path within the run being sorted
//! (`common/cancel.rs`), and the device memory its runs held goes back (in a child
//! process, whose device memory is the test's alone).

use super::*;
use faults::{is_child, run_child};

#[test]
#[ignore = "needs a CUDA GPU"]
fn dropping_a_query_stops_every_path_and_frees_the_device() {
    if device().is_some() {
        let text = run_child("cancel::drop_child", &[]);
        for line in text.lines().filter(|l| l.contains("Dropped")) {
            println!("{line}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn drop_child() {
    if !is_child("cancel::drop_child") {
        return;
    }
    let rt = device().unwrap();
    let before = rt.device_memory().used;
    let cuda = Arc::new(CudaBackend::new().unwrap());
    common::cancel::dropping_a_query_stops_every_path(cuda, 1 << 20).await;
    assert_eq!(
        rt.device_memory().used,
        before,
        "device memory held after the drop"
    );
}
