//! Faults leave every answer correct. Out of memory runs in this process: its fault is
//! armed in a scope of the test's own (`FaultScope`), so tests running beside it never see
//! it. Faults that disable the device for the whole process (a sticky error in a sort or in
//! a gather window, a failed kernel launch) and faults of the runtime's opening (a kernel
//! that does not compile, a module that does not load, a corrupt cached kernel) run in a
//! child process each.

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
    let faults = FaultScope::new();
    let backend = CudaBackend::new().unwrap().with_faults(faults);
    let expected = CpuBackend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    faults.arm(Fault::OutOfMemory);
    let run = backend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    assert!(run.fell_back, "an injected device OOM must fall back");
    assert_eq!(run.permutation, expected.permutation);
    assert!(cuda::disabled_reason().is_none(), "OOM is not fatal");
    let run = backend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    assert!(!run.fell_back, "the next run uses the GPU again");
    assert_eq!(run.permutation, expected.permutation);
});

/// Runs test `name` of this binary in a child process with `env`; it must pass.
pub(super) fn run_child(name: &str, env: &[(&str, &str)]) -> String {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--include-ignored", "--nocapture"])
        .env("GPUSORT_FAULT_CHILD", name)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && text.contains("1 passed"),
        "child {name} failed:\n{text}"
    );
    text
}

/// Whether this process is the child that runs test `name`.
pub(super) fn is_child(name: &str) -> bool {
    std::env::var("GPUSORT_FAULT_CHILD").as_deref() == Ok(name)
}

/// The log records of this process at info level and above, as text.
struct Captured;

static CAPTURED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

impl log::Log for Captured {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = format!("{} {}", record.level(), record.args());
            eprintln!("{line}");
            CAPTURED.lock().unwrap().push(line);
        }
    }

    fn flush(&self) {}
}

/// Starts capturing this process's log.
fn capture_log() {
    static LOGGER: Captured = Captured;
    log::set_logger(&LOGGER).unwrap();
    log::set_max_level(log::LevelFilter::Info);
}

/// Captured lines at `level` containing `text`.
fn logged(level: log::Level, text: &str) -> Vec<String> {
    let prefix = format!("{level} ");
    CAPTURED
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with(&prefix) && l.contains(text))
        .cloned()
        .collect()
}

/// `rows` rows of `k` (Int64, random) and `v` (its string), in 4 batches.
fn table(rows: usize, label: &str) -> Vec<Vec<RecordBatch>> {
    let keys = random_keys(rows, label, |x| x as i64);
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
        ])),
        vec![
            Arc::new(Int64Array::from(keys.clone())),
            Arc::new(Int64Array::from_iter_values(keys.iter().map(|k| k >> 7))),
        ],
    )
    .unwrap();
    let per = rows / 4;
    vec![(0..4).map(|b| batch.slice(b * per, per)).collect()]
}

/// A session forcing gpusort on `backend`, the faults of `faults` injected.
fn forced(
    backend: gpusort::BackendChoice,
    faults: FaultScope,
) -> datafusion::prelude::SessionContext {
    let mut gpu = gpusort::GpuSortConfig::forced_cpu();
    gpu.backend = backend;
    gpu.fault_scope = faults.id();
    gpusort::gpu_sort_context_with(common::session_config(1, 8192), gpu)
}

/// Runs `sql` on `ctx` and on stock DataFusion over `table`; the answers must be equal.
/// The plan's text is returned.
async fn answers_as_datafusion(
    ctx: &datafusion::prelude::SessionContext,
    table: &[Vec<RecordBatch>],
    sql: &str,
    what: &str,
) -> String {
    let stock = common::stock_context(common::session_config(1, 8192));
    common::register(&[&stock, ctx], "t", table.to_vec());
    let (expected, _) = common::run(&stock, sql).await.unwrap();
    let (actual, plan) = common::run(ctx, sql).await.unwrap();
    common::compare::assert_same_sort(&expected, &actual, &[0, 1], what);
    plan
}

/// Arms `fault` on device 0 in a session on the CUDA backend and runs a sort whose payload
/// the device gathers (the first run of an idle process goes to device 0): the answer stays
/// right, device 0 is disabled, and the next queries (a new session on `auto`) answer on
/// the host's other devices, or on the CPU where it has none.
async fn fatal_fault_child(fault: Fault) {
    let faults = FaultScope::new();
    let table = table(1 << 21, "fatal");
    let sql = "SELECT k, v FROM t ORDER BY k DESC";
    let ctx = forced(Cuda, faults);
    // Gathered on the device: the gather's fault fires there.
    ctx.sql("SET gpu_sort.device_gather_min_rows = 1")
        .await
        .unwrap();
    faults.arm_on(0, fault);
    let what = format!("{fault:?}");
    let plan = answers_as_datafusion(&ctx, &table, sql, &what).await;
    assert!(plan.contains("GpuSortExec"), "{plan}");
    assert!(!faults.is_armed(fault), "{what} never fired");
    let reason = cuda::disabled_reason_of(0).expect("a sticky error disables the device");
    println!("{what}: device disabled: {reason}");
    let later = forced(gpusort::BackendChoice::Auto, FaultScope::default());
    let plan = answers_as_datafusion(&later, &table, sql, "after").await;
    let others = cuda::selected_ordinals(gpusort::DeviceSelection::All).len() > 1;
    if others {
        // The other devices sort; device 0 is left out of the set.
        assert!(
            plan.contains("backend=cuda") && plan.contains("devices=[1"),
            "{plan}"
        );
    } else {
        assert!(plan.contains("backend=cpu"), "{plan}");
    }
    assert!(cuda::runtime().unwrap_err().contains("disabled"));
}

/// Runs `fatal_fault_child` for each fault that disables the device, each in a child
/// process of its own.
#[test]
#[ignore = "needs a CUDA GPU"]
pub(super) fn sticky_errors_disable_the_device_and_queries_stay_correct() {
    if device().is_none() {
        return;
    }
    for child in [
        "faults::sticky_error_in_a_sort_child",
        "faults::sticky_error_in_a_gather_window_child",
        "faults::launch_failure_child",
    ] {
        let text = run_child(child, &[]);
        assert!(text.contains("device disabled"), "{text}");
    }
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn sticky_error_in_a_sort_child() {
    if is_child("faults::sticky_error_in_a_sort_child") && device().is_some() {
        fatal_fault_child(Fault::StickyError).await;
    }
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn sticky_error_in_a_gather_window_child() {
    if is_child("faults::sticky_error_in_a_gather_window_child") && device().is_some() {
        fatal_fault_child(Fault::GatherStickyError).await;
    }
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn launch_failure_child() {
    if is_child("faults::launch_failure_child") && device().is_some() {
        fatal_fault_child(Fault::LaunchFailure).await;
    }
}

/// A kernel that does not compile and a module that does not load, when the runtime
/// opens (each in a child process, with an empty kernel cache): every query answers on the
/// CPU, and the process logs one warning that says why.
#[test]
#[ignore = "needs a CUDA GPU"]
pub(super) fn a_runtime_that_fails_to_open_warns_once_and_sorts_on_the_cpu() {
    if device().is_none() {
        return;
    }
    for (fault, says) in [
        ("compile", "NVRTC could not compile"),
        ("module_load", "cuModuleLoadData"),
    ] {
        let cache = tempfile::tempdir().unwrap();
        let text = run_child(
            "faults::failed_open_child",
            &[
                // One device: opening fails once, and says so once.
                ("GPUSORT_CUDA_DEVICE", "0"),
                ("GPUSORT_INJECT_FAULT", fault),
                ("GPUSORT_KERNEL_CACHE", cache.path().to_str().unwrap()),
                ("GPUSORT_EXPECT_WARNING", says),
            ],
        );
        assert!(text.contains("one warning"), "{fault}: {text}");
    }
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn failed_open_child() {
    if !is_child("faults::failed_open_child") {
        return;
    }
    capture_log();
    let says = std::env::var("GPUSORT_EXPECT_WARNING").unwrap();
    let reason = cuda::runtime().unwrap_err();
    assert!(reason.contains(&says), "{reason}");
    assert!(cuda::runtime().is_err(), "the failure is kept");
    let table = table(1 << 20, "failed open");
    let ctx = forced(gpusort::BackendChoice::Auto, FaultScope::default());
    let plan = answers_as_datafusion(&ctx, &table, "SELECT k, v FROM t ORDER BY k", "open").await;
    assert!(plan.contains("backend=cpu"), "{plan}");
    let warnings = logged(log::Level::Warn, "gpusort");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains(&says), "{warnings:?}");
    println!("one warning: {}", warnings[0]);
}

/// Cached kernels that the driver refuses (garbage in every cache file) are compiled
/// again and the cache is repaired; the device sorts (in a child process, whose runtime
/// opens with that cache).
#[test]
#[ignore = "needs a CUDA GPU"]
pub(super) fn corrupt_cached_kernels_are_compiled_again() {
    let Some(rt) = device() else { return };
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().to_str().unwrap().to_string();
    let tuning = cuda::Tuning::from_lookup(|name| match name {
        "GPUSORT_KERNEL_CACHE" => Some(dir.clone()),
        other => std::env::var(other).ok(),
    });
    let garbage = b"not a cubin".to_vec();
    let paths: Vec<_> = ["onesweep.cu", "encode.cu", "gather.cu"]
        .iter()
        .map(|file| {
            let path = cuda::cached_kernel_path(file, rt.device.arch, &tuning)
                .unwrap_or_else(|| panic!("{file} has a cache path"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &garbage).unwrap();
            path
        })
        .collect();
    let text = run_child(
        "faults::corrupt_cache_child",
        &[("GPUSORT_KERNEL_CACHE", dir.as_str())],
    );
    assert!(text.contains("compiling it again"), "{text}");
    for path in paths {
        let repaired = std::fs::read(&path).unwrap();
        assert!(
            repaired != garbage && repaired.len() > 1000,
            "{}",
            path.display()
        );
    }
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn corrupt_cache_child() {
    if !is_child("faults::corrupt_cache_child") {
        return;
    }
    capture_log();
    assert!(device().is_some(), "the runtime opens from a corrupt cache");
    let table = table(1 << 20, "corrupt cache");
    let ctx = forced(Cuda, FaultScope::default());
    let plan = answers_as_datafusion(&ctx, &table, "SELECT k, v FROM t ORDER BY k", "cache").await;
    assert!(plan.contains("backend=cuda"), "{plan}");
    assert_eq!(cuda::fallback_count(), 0);
    assert_eq!(logged(log::Level::Warn, "compiling it again").len(), 3);
}
