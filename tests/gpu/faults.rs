//! Faults: device out of memory and a sticky error (in a child process, since it disables
//! the device for the process) leave every answer correct.

use super::*;

pub(super) fn encoded(n: usize, label: &str) -> EncodedKeys {
    let words = vec![
        random_keys(n, label, |x| x),
        random_keys(n, &format!("{label}2"), |x| x >> 20),
    ];
    EncodedKeys {
        words,
        total_bits: 108,
        rows: n,
        long_keys: Vec::new(),
    }
}

gpu_test!(out_of_memory_falls_back_with_the_same_rows, |rt| {
    let _ = rt;
    let keys = encoded(300_000, "oom");
    let backend = CudaBackend::new().unwrap();
    let expected = CpuBackend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    cuda::inject_fault(Fault::OutOfMemory);
    let run = backend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    assert!(run.fell_back, "an injected device OOM must fall back");
    assert_eq!(run.permutation, expected.permutation);
    assert!(cuda::disabled_reason().is_none(), "OOM is not fatal");
    let run = backend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    assert!(!run.fell_back, "the next run uses the GPU again");
    assert_eq!(run.permutation, expected.permutation);
});

/// A key column of `dt` over `n` rows in uneven, partly sliced arrays.
/// Runs `sticky_error_child` in a child process: a sticky error disables the device for
/// the whole process, which must not leak into the other tests.
#[test]
#[ignore = "needs a CUDA GPU"]
pub(super) fn sticky_error_disables_device_and_queries_stay_correct() {
    if device().is_none() {
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "faults::sticky_error_child",
            "--include-ignored",
            "--nocapture",
        ])
        .env("GPUSORT_STICKY_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && text.contains("1 passed"),
        "child failed:\n{text}"
    );
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn sticky_error_child() {
    if std::env::var("GPUSORT_STICKY_CHILD").is_err() || device().is_none() {
        return;
    }
    let n = 200_000;
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from(random_keys(n, "sticky", |x| {
            x as i64
        })))],
    )
    .unwrap();
    let config = common::session_config(1, 8192);
    let (stock, forced) = (
        common::stock_context(config.clone()),
        common::forced_context_on(config, Cuda),
    );
    common::register(&[&stock, &forced], "t", vec![vec![batch]]);
    let sql = "SELECT * FROM t ORDER BY k DESC";
    let (expected, _) = common::run(&stock, sql).await.unwrap();
    cuda::inject_fault(Fault::StickyError);
    let (actual, plan) = common::run(&forced, sql).await.unwrap();
    assert!(plan.contains("GpuSortExec"), "{plan}");
    assert!(
        cuda::disabled_reason().is_some(),
        "a sticky error disables the device"
    );
    common::compare::assert_same_sort(&expected, &actual, &[0], "after a sticky error");
    // Later queries: `cuda` declines with the reason, `auto` plans the CPU backend.
    let (again, plan) = common::run(&forced, sql).await.unwrap();
    assert!(!plan.contains("backend=cuda"), "{plan}");
    common::compare::assert_same_sort(
        &expected,
        &again,
        &[0],
        "query after the device was disabled",
    );
    assert!(cuda::runtime().unwrap_err().contains("disabled"));
}
