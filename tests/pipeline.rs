//! The file-sorting pipeline (`gpusort sort`, `gpusort::pipeline`) end to end on generated
//! Parquet and CSV files: output equal to DataFusion's own `COPY (... ORDER BY ...)`,
//! declared sort order, file splitting, atomic output, and the message of each bad input.
//! Also `COPY (SELECT ... ORDER BY ...)` through `gpusort sql` uses gpusort's operator.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::compare::{assert_same_sort, assert_stable};
use common::data::{base_values, case_rng, fixed_width_types, make_column, Distribution};
use common::file_jobs::{files_under, job, listing};
use common::seed;
use datafusion::arrow::array::{new_null_array, ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use datafusion::physical_plan::displayable;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use gpusort::pipeline::{sort_files, KeyRangeChoice, Progress};

/// Fixed-width types Parquet can store (the others are the unwritable-type case).
fn writable_types() -> Vec<DataType> {
    fixed_width_types().into_iter().filter(writable).collect()
}

/// Whether Parquet stores `dt`: one null row written to memory.
fn writable(dt: &DataType) -> bool {
    let schema = Arc::new(Schema::new(vec![Field::new("c", dt.clone(), true)]));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![new_null_array(dt, 1)]).unwrap();
    ArrowWriter::try_new(Vec::new(), schema, None)
        .and_then(|mut w| w.write(&batch).and_then(|_| w.close()))
        .is_ok()
}

/// Columns: `k0` (Int16, 40 values, nulls), `k1` (Float64, nulls), `c<i>` one per
/// writable fixed-width type (nulls), `rid` (input order).
fn table(rows: usize, label: &str) -> RecordBatch {
    let mut rng = case_rng(seed(), label);
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    let mut add = |name: String, dt: DataType, dist: Distribution, rng: &mut _| {
        let base = base_values(rng, rows, dist);
        columns.push(make_column(rng, &dt, &base, 0.1));
        fields.push(Field::new(name, dt, true));
    };
    add(
        "k0".into(),
        DataType::Int16,
        Distribution::Distinct(40),
        &mut rng,
    );
    add(
        "k1".into(),
        DataType::Float64,
        Distribution::Distinct(256),
        &mut rng,
    );
    for (i, dt) in writable_types().into_iter().enumerate() {
        add(format!("c{i}"), dt, Distribution::Distinct(1000), &mut rng);
    }
    columns.push(Arc::new(Int64Array::from_iter_values(0..rows as i64)));
    fields.push(Field::new("rid", DataType::Int64, false));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

/// Writes `batch` as `files` Parquet files of consecutive rows, named in row order.
fn write_parquet_files(dir: &Path, batch: &RecordBatch, files: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let per_file = batch.num_rows().div_ceil(files);
    (0..files)
        .map(|i| {
            let path = dir.join(format!("part-{i}.parquet"));
            let start = (i * per_file).min(batch.num_rows());
            let len = per_file.min(batch.num_rows() - start);
            let mut writer =
                ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
            // Several batches and row groups per file (each batch ends a row group): the
            // order of row groups within a file is input order too.
            for offset in (0..len).step_by(7_000) {
                writer
                    .write(&batch.slice(start + offset, 7_000.min(len - offset)))
                    .unwrap();
                writer.flush().unwrap();
            }
            writer.close().unwrap();
            path
        })
        .collect()
}

fn read_parquet(path: &Path) -> Vec<RecordBatch> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    reader.map(|b| b.unwrap()).collect()
}

fn metadata(path: &Path) -> ParquetMetaData {
    ParquetMetaDataReader::new()
        .parse_and_finish(&File::open(path).unwrap())
        .unwrap()
}

/// DataFusion alone: `COPY (SELECT * FROM <dir> ORDER BY <order>) TO <out>`.
async fn datafusion_copy(
    input_dir: &Path,
    order: &str,
    limit: &str,
    out: &Path,
) -> Vec<RecordBatch> {
    let ctx = SessionContext::new();
    ctx.register_parquet(
        "t",
        input_dir.to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let sql = format!(
        "COPY (SELECT * FROM t ORDER BY {order} {limit}) TO '{}' STORED AS PARQUET",
        out.display()
    );
    ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    read_parquet(out)
}

#[tokio::test]
async fn sorts_parquet_files_like_datafusion_copy() {
    let dir = tempfile::tempdir().unwrap();
    let batch = table(60_000, "pipeline-equal");
    let input = dir.path().join("in");
    write_parquet_files(&input, &batch, 3);
    for (by, sql_order, limit) in [
        ("k0 DESC, k1", "k0 DESC, k1 ASC NULLS LAST", None),
        (
            "k1 nulls first, k0 asc nulls last",
            "k1 ASC NULLS FIRST, k0 ASC NULLS LAST",
            None,
        ),
        // With a limit, rid makes the order total: which rows of a tie group cut by the
        // limit are kept is up to each sort (DataFusion's TopK is not stable).
        (
            "k0, k1 DESC NULLS LAST, rid",
            "k0 ASC NULLS LAST, k1 DESC NULLS LAST, rid",
            Some(12_345),
        ),
        ("k1 DESC, rid", "k1 DESC NULLS FIRST, rid", Some(100)),
    ] {
        let context = format!("seed={} by={by} limit={limit:?}", seed());
        let expected_path = dir.path().join("expected.parquet");
        let limit_sql = limit.map(|n| format!("LIMIT {n}")).unwrap_or_default();
        let expected = datafusion_copy(&input, sql_order, &limit_sql, &expected_path).await;
        let output = dir.path().join("out.parquet");
        let mut job = job(&[&input], &output, by);
        job.limit = limit;
        job.overwrite = true;
        let summary = sort_files(&job, &Progress::new()).await.unwrap();
        let actual = read_parquet(&output);
        assert_same_sort(&expected, &actual, &[0, 1], &context);
        let rid = batch.num_columns() - 1;
        assert_stable(&actual, &[0, 1], rid, &context);
        assert_eq!(summary.rows, limit.unwrap_or(60_000) as u64, "{context}");
        if limit.is_some_and(|n| n <= gpusort::pipeline::TOPK_MAX_ROWS) {
            assert!(
                summary.backend.contains("keeps DataFusion's TopK"),
                "{context}"
            );
        } else {
            assert_eq!(summary.backend, "cpu", "{context}");
        }
        assert_eq!(
            listing(dir.path()),
            ["expected.parquet", "in", "out.parquet"]
        );
    }
}

#[tokio::test]
async fn output_declares_its_order_and_datafusion_reads_it_as_sorted() {
    let dir = tempfile::tempdir().unwrap();
    let batch = table(20_000, "pipeline-order");
    let input = write_parquet_files(&dir.path().join("in"), &batch, 2);
    let output = dir.path().join("sorted.parquet");
    let job = job(&[&input[0], &input[1]], &output, "k1 DESC NULLS LAST, k0");
    sort_files(&job, &Progress::new()).await.unwrap();
    let meta = metadata(&output);
    for row_group in meta.row_groups() {
        let columns = row_group
            .sorting_columns()
            .expect("sorting_columns written");
        let declared: Vec<(i32, bool, bool)> = columns
            .iter()
            .map(|c| (c.column_idx, c.descending, c.nulls_first))
            .collect();
        assert_eq!(declared, [(1, true, false), (0, false, false)]);
    }
    let ctx = SessionContext::new();
    ctx.register_parquet("s", output.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    let plan = ctx
        .sql("SELECT * FROM s ORDER BY k1 DESC NULLS LAST, k0 ASC NULLS LAST")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let text = displayable(plan.as_ref()).indent(true).to_string();
    assert!(
        !text.contains("SortExec:"),
        "DataFusion sorts the sorted file again:\n{text}"
    );
}

#[tokio::test]
async fn directory_output_splits_files_row_groups_and_compression() {
    let dir = tempfile::tempdir().unwrap();
    let batch = table(25_000, "pipeline-split");
    let input = dir.path().join("in");
    write_parquet_files(&input, &batch, 2);
    let single = dir.path().join("single.parquet");
    sort_files(&job(&[&input], &single, "k0, k1"), &Progress::new())
        .await
        .unwrap();
    let split = dir.path().join("split");
    let mut job = job(&[&input], &split, "k0, k1");
    job.max_rows_per_file = Some(10_000);
    job.row_group_rows = 3_000;
    job.compression = "snappy".into();
    let summary = sort_files(&job, &Progress::new()).await.unwrap();
    assert_eq!(
        listing(&split),
        [
            "part-00000.parquet",
            "part-00001.parquet",
            "part-00002.parquet"
        ]
    );
    assert_eq!(summary.output.files.len(), 3);
    let mut rows_per_file = Vec::new();
    let mut concatenated = Vec::new();
    for file in &summary.output.files {
        let meta = metadata(file);
        assert!(meta.row_groups().iter().all(|rg| rg.num_rows() <= 3_000));
        let codec = meta.row_group(0).column(0).compression();
        assert_eq!(codec, datafusion::parquet::basic::Compression::SNAPPY);
        let batches = read_parquet(file);
        rows_per_file.push(batches.iter().map(|b| b.num_rows()).sum::<usize>());
        concatenated.extend(batches);
    }
    assert_eq!(rows_per_file, [10_000, 10_000, 5_000]);
    // The files in name order are the single-file output, row for row.
    let whole = read_parquet(&single);
    let all: Vec<usize> = (0..batch.num_columns()).collect();
    assert_same_sort(&whole, &concatenated, &all, "split vs single");
    // Without the flush to disk the files are the same, byte for byte, and nothing is
    // left beside them.
    let unsynced = dir.path().join("unsynced");
    job.output = unsynced.clone();
    job.sync = false;
    let summary_unsynced = sort_files(&job, &Progress::new()).await.unwrap();
    assert_eq!(listing(&unsynced), listing(&split));
    for (synced, unsynced) in summary
        .output
        .files
        .iter()
        .zip(&summary_unsynced.output.files)
    {
        assert!(
            std::fs::read(synced).unwrap() == std::fs::read(unsynced).unwrap(),
            "{} differs from {}",
            unsynced.display(),
            synced.display()
        );
    }
    assert_eq!(
        listing(dir.path()),
        ["in", "single.parquet", "split", "unsynced"]
    );
}

#[tokio::test]
async fn csv_inputs_by_glob() {
    let dir = tempfile::tempdir().unwrap();
    for (i, rows) in ["3,c\n1,a\n", "2,b\n1,z\n"].iter().enumerate() {
        std::fs::write(
            dir.path().join(format!("in-{i}.csv")),
            format!("n,s\n{rows}"),
        )
        .unwrap();
    }
    let output = dir.path().join("out.parquet");
    let pattern = dir.path().join("in-*.csv");
    let job = job(&[&pattern], &output, "n");
    let summary = sort_files(&job, &Progress::new()).await.unwrap();
    assert_eq!(summary.rows, 4);
    let batches = read_parquet(&output);
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    // Ties (n = 1) keep the input order: in-0.csv before in-1.csv.
    let order: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split('|').nth(2))
        .map(str::trim)
        .collect();
    assert_eq!(order, ["s", "a", "z", "b", "c"], "{text}");
}

#[tokio::test]
async fn a_failed_write_leaves_no_output_and_keeps_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let batch = table(30_000, "pipeline-atomic");
    let input = dir.path().join("in");
    write_parquet_files(&input, &batch, 2);
    for split in [None, Some(4_000)] {
        let output = dir.path().join(if split.is_some() {
            "outdir"
        } else {
            "out.parquet"
        });
        let mut failing = job(&[&input], &output, "k0");
        failing.max_rows_per_file = split;
        failing.inject_write_failure_after = Some(10_000);
        let err = sort_files(&failing, &Progress::new()).await.unwrap_err();
        assert!(err.to_string().contains("No space left on device"), "{err}");
        assert_eq!(
            listing(dir.path()),
            ["in"],
            "leftovers after a failed job ({split:?})"
        );

        // An existing output survives a failed --overwrite, then a good one replaces it.
        let mut good = job(&[&input], &output, "k1");
        good.max_rows_per_file = split;
        sort_files(&good, &Progress::new()).await.unwrap();
        let before = listing(dir.path());
        failing.overwrite = true;
        sort_files(&failing, &Progress::new()).await.unwrap_err();
        assert_eq!(listing(dir.path()), before);
        let without_overwrite = sort_files(&good, &Progress::new()).await.unwrap_err();
        assert!(
            without_overwrite
                .to_string()
                .contains("exists; pass --overwrite"),
            "{without_overwrite}"
        );
        good.overwrite = true;
        good.by = "k0".into();
        sort_files(&good, &Progress::new()).await.unwrap();
        assert_eq!(listing(dir.path()), before);
        let _ = std::fs::remove_dir_all(&output);
        let _ = std::fs::remove_file(&output);
    }
}

#[tokio::test]
async fn bad_inputs_say_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let batch = table(1_000, "pipeline-errors");
    let good = write_parquet_files(&dir.path().join("in"), &batch, 1).remove(0);
    let corrupt = dir.path().join("corrupt.parquet");
    std::fs::write(&corrupt, b"PAR1 this is not a parquet file PAR1").unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    let csv = dir.path().join("x.csv");
    std::fs::write(&csv, "k0\n1\n").unwrap();
    let empty_dir = dir.path().join("empty");
    std::fs::create_dir(&empty_dir).unwrap();
    let missing = dir.path().join("missing.parquet");
    let out = dir.path().join("out.parquet");
    let cases: Vec<(Vec<&Path>, &str, String)> = vec![
        (
            vec![&missing],
            "k0",
            format!("input '{}' does not exist", missing.display()),
        ),
        (
            vec![&corrupt],
            "k0",
            format!("'{}' is not a readable Parquet file", corrupt.display()),
        ),
        (
            vec![&good],
            "nope",
            "unknown column 'nope' in --by; the inputs have: k0, k1,".into(),
        ),
        (
            vec![&good],
            "k0 upward",
            "--by 'k0 upward': after column 'k0'".into(),
        ),
        (
            vec![&text],
            "k0",
            "is neither Parquet (.parquet, .parq, .pq) nor CSV".into(),
        ),
        (
            vec![&good, &csv],
            "k0",
            "inputs mix Parquet and CSV files".into(),
        ),
        (
            vec![&empty_dir],
            "k0",
            "matches no .parquet or .csv file".into(),
        ),
        (vec![&good], "k0", "its directory does not exist".into()),
    ];
    for (i, (inputs, by, message)) in cases.into_iter().enumerate() {
        let output = if i == 7 {
            dir.path().join("no/such/dir/out.parquet")
        } else {
            out.clone()
        };
        let err = sort_files(&job(&inputs, &output, by), &Progress::new())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&message),
            "case {i}: expected '{message}' in '{err}'"
        );
        assert!(!out.exists(), "case {i} left output");
    }
}

#[tokio::test]
async fn unwritable_types_are_named() {
    let Some(dt) = fixed_width_types().into_iter().find(|dt| !writable(dt)) else {
        return; // every fixed-width type is writable by this Parquet version
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.parquet");
    // No input file can carry such a type; the output's check is what names the column.
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("weird", dt.clone(), true),
    ]));
    let err = gpusort::pipeline::ParquetOutput::create(
        gpusort::pipeline::OutputOptions {
            path: out.clone(),
            max_rows_per_file: None,
            row_group_rows: 10,
            compression: datafusion::parquet::basic::Compression::SNAPPY,
            overwrite: false,
            sync: true,
            device_pages: false,
        },
        schema,
        &gpusort::pipeline::parse_order_by("k").unwrap(),
        &(Arc::new(datafusion::execution::memory_pool::UnboundedMemoryPool::default()) as _),
        Default::default(),
    )
    .err()
    .expect("an unwritable type is refused")
    .to_string();
    assert!(
        err.contains(&format!("column 'weird' has type {dt}")),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn the_command_line_sorts_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let batch = table(5_000, "pipeline-cli");
    let input = dir.path().join("in");
    write_parquet_files(&input, &batch, 2);
    let output = dir.path().join("out.parquet");
    // Its own temporary directory: other tests' jobs spilling at the same time are none of
    // its business (their files would be reported on stderr, which must stay empty).
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gpusort"))
            .args(args)
            .env("TMPDIR", &tmp)
            .output()
            .unwrap()
    };
    let glob = format!("{}/*.parquet", input.display());
    let ok = run(&[
        "sort",
        &glob,
        "-o",
        output.to_str().unwrap(),
        "--by",
        "k0 DESC",
        "--backend",
        "cpu",
    ]);
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(stdout.starts_with("sorted 5000 rows:"), "{stdout}");
    assert!(
        stdout.contains("backend cpu, algorithm lsd radix"),
        "{stdout}"
    );
    if cfg!(target_os = "linux") {
        assert!(stdout.contains("; peak memory "), "{stdout}");
    }
    // Not a terminal: no progress drawn on stderr.
    assert!(
        ok.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let output_path = output.to_str().unwrap();
    let sort_quietly = |extra: &[&str]| {
        let mut args = vec![
            "sort",
            &glob,
            "-o",
            output_path,
            "--by",
            "k0",
            "--overwrite",
            "-q",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let quiet = sort_quietly(&[]);
    assert!(quiet.status.success() && quiet.stdout.is_empty());
    // A device set: any set sorts (on the CPU where there is no GPU); a set that names no
    // device is refused before anything is read.
    let sort_on = |devices: &str| sort_quietly(&["--devices", devices]);
    for devices in ["all", "1", "0,1", "1,"] {
        let sorted = sort_on(devices);
        assert!(
            sorted.status.success(),
            "--devices {devices}: {}",
            String::from_utf8_lossy(&sorted.stderr)
        );
    }
    let refused = sort_on("0");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("gpu_sort.devices"), "{stderr}");
    // Under a small limit the allocator purges freed memory at once and maps no huge
    // pages (read back from mimalloc under GPUSORT_TRACE); a limit below what the process
    // can keep its peak near still runs, with a warning. Up to 8 GiB it purges after
    // 100 ms; a large limit changes nothing.
    let limited = |limit: &str| {
        let run = Command::new(env!("CARGO_BIN_EXE_gpusort"))
            .args(["sort", &glob, "-o", output.to_str().unwrap(), "--by", "k0"])
            .args([
                "--overwrite",
                "--backend",
                "cpu",
                "-q",
                "--memory-limit",
                limit,
            ])
            .env("GPUSORT_TRACE", "1")
            .env("RUST_LOG", "warn")
            .env_remove("MIMALLOC_PURGE_DELAY")
            .env_remove("MIMALLOC_RESET_DELAY")
            .env_remove("MIMALLOC_ALLOW_THP")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert!(run.status.success(), "{stderr}");
        stderr
    };
    let tiny = limited("16M");
    assert!(
        tiny.contains("memory limit of 16 MiB is below the 400 MiB"),
        "{tiny}"
    );
    assert!(
        tiny.contains("process: mimalloc purge_delay 0 ms, allow_thp 0"),
        "{tiny}"
    );
    let medium = limited("4G");
    assert!(
        medium.contains("process: mimalloc purge_delay 100 ms, allow_thp 0"),
        "{medium}"
    );
    let large = limited("64G");
    assert!(!large.contains("is below the"), "{large}");
    assert!(
        large.contains("process: mimalloc purge_delay 1000 ms, allow_thp 1"),
        "{large}"
    );
    let bad = run(&[
        "sort",
        &glob,
        "-o",
        output.to_str().unwrap(),
        "--by",
        "zz",
        "--overwrite",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.starts_with("gpusort: error: unknown column 'zz'"),
        "{stderr}"
    );
}

/// `gpusort sort` of `inputs` into `output` by `k0, k1` on the CPU backend under a 16 MiB
/// limit (so it spills), quiet, with its temporary files under `tmp`.
fn spilling_sort(inputs: &str, output: &Path, tmp: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpusort"));
    command
        .args(["sort", inputs, "-o", output.to_str().unwrap()])
        .args([
            "--by",
            "k0, k1",
            "--backend",
            "cpu",
            "--memory-limit",
            "16M",
            "-q",
        ])
        .env("TMPDIR", tmp);
    command
}

/// SIGTERM or SIGINT while `gpusort sort` spills: it stops, exits with 128 + the signal,
/// and leaves neither its temporary output nor its spill files (nor their directory).
#[test]
fn a_signal_leaves_no_temporary_or_spill_files() {
    let dir = tempfile::tempdir().unwrap();
    let batch = table(300_000, "pipeline-signal");
    let input = dir.path().join("in");
    write_parquet_files(&input, &batch, 4);
    let output = dir.path().join("out.parquet");
    let glob = format!("{}/*.parquet", input.display());
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = spilling_sort(&glob, &output, tmp.path()).spawn().unwrap();
        // Signalled once it has spilled.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while files_under(tmp.path()).iter().all(|p| p.is_dir()) {
            assert!(
                child.try_wait().unwrap().is_none(),
                "ended before it spilled"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "no spill file appeared"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // SAFETY: sends a signal to our own child.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(128 + signal), "signal {signal}");
        assert_eq!(
            files_under(tmp.path()),
            Vec::<PathBuf>::new(),
            "signal {signal}"
        );
        assert_eq!(
            listing(dir.path()),
            vec!["in".to_string()],
            "signal {signal}"
        );
    }
}

/// A small tmpfs mounted for a test (needs the right to mount: root, outside most
/// containers' limits); unmounted when dropped.
struct SmallFs(tempfile::TempDir);

impl SmallFs {
    fn mount(bytes: usize) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .ok()?;
        mounted.status.success().then_some(Self(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).output();
    }
}

/// A full disk (a real ENOSPC, on a 1 MiB tmpfs) under the output or under the spill
/// files: the job fails and says so, and leaves no output, no temporary file and no spill
/// file. Where no tmpfs can be mounted, the injected ENOSPC of
/// `a_failed_write_leaves_no_output_and_keeps_the_old_one` stands in.
#[test]
fn a_full_disk_fails_cleanly() {
    let (Some(out_fs), Some(spill_fs)) = (SmallFs::mount(1 << 20), SmallFs::mount(1 << 20)) else {
        eprintln!("skipped: no tmpfs can be mounted here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let batch = table(200_000, "pipeline-enospc");
    let input = dir.path().join("in");
    write_parquet_files(&input, &batch, 2);
    let glob = format!("{}/*.parquet", input.display());
    let sort = |output: &Path, tmp: &Path| spilling_sort(&glob, output, tmp).output().unwrap();
    // The output's disk fills up.
    let ran = sort(&out_fs.path().join("out.parquet"), dir.path());
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(files_under(out_fs.path()), Vec::<PathBuf>::new());
    // The spill files' disk fills up: the default --max-spill (90 % of the free space)
    // or the disk itself stops the job, and either message names where to spill instead.
    let ran = sort(&dir.path().join("out.parquet"), spill_fs.path());
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--spill-dir"), "{stderr}");
    assert_eq!(files_under(spill_fs.path()), Vec::<PathBuf>::new());
    assert_eq!(listing(dir.path()), vec!["in".to_string()]);
}

#[tokio::test]
async fn memory_limited_sort_spills_and_matches() {
    let dir = tempfile::tempdir().unwrap();
    let batch = table(80_000, "pipeline-spill");
    let input = dir.path().join("in");
    write_parquet_files(&input, &batch, 2);
    let expected_path = dir.path().join("expected.parquet");
    let expected = datafusion_copy(
        &input,
        "k0 ASC NULLS LAST, k1 ASC NULLS LAST",
        "",
        &expected_path,
    )
    .await;
    let output = dir.path().join("out.parquet");
    let mut job = job(&[&input], &output, "k0, k1");
    job.memory_limit = Some(16 << 20);
    // The operator's own spilling (the default on the CPU backend; by key range: the
    // next test).
    assert_eq!(job.key_ranges, KeyRangeChoice::Auto);
    let summary = sort_files(&job, &Progress::new()).await.unwrap();
    assert!(
        summary.algorithm.contains("spill files"),
        "{}",
        summary.algorithm
    );
    let actual = read_parquet(&output);
    assert_same_sort(&expected, &actual, &[0, 1], "memory-limited");
    assert_stable(&actual, &[0, 1], batch.num_columns() - 1, "memory-limited");
}

/// `batch`'s keys `k0`, `k1`, its first three payload columns and `rid` (a job's writer
/// holds about a page buffer per column, which the small limits below cannot spare for
/// every type).
fn narrow(batch: &RecordBatch) -> RecordBatch {
    let last = batch.num_columns() - 1;
    batch.project(&[0, 1, 2, 3, 4, last]).unwrap()
}

/// Sorts `input` with `ranges` under `limit` and checks the output against DataFusion's
/// sort by `order` (keys `keys`, ties by `rid` = column `rid`); the job's summary.
async fn ranged_job(
    input: &Path,
    out: &Path,
    (by, order, keys, rid): (&str, &str, &[usize], usize),
    ranges: KeyRangeChoice,
    limit: Option<usize>,
) -> gpusort::pipeline::SortSummary {
    let context = format!("--by {by} with {ranges:?} under {limit:?}");
    let expected = datafusion_copy(input, order, "", &out.with_extension("expected")).await;
    let mut job = job(&[input], out, by);
    job.memory_limit = limit;
    job.key_ranges = ranges;
    let summary = sort_files(&job, &Progress::new())
        .await
        .unwrap_or_else(|e| panic!("{context}: {e}"));
    let actual = read_parquet(out);
    assert_same_sort(&expected, &actual, keys, &context);
    assert_stable(&actual, keys, rid, &context);
    summary
}

/// Jobs sorted by key range: the keys sampled, every row spilled into its range, each range
/// sorted and written in turn. The output equals DataFusion's sort, ties in input order,
/// for every direction and null order, with `on` under a small limit and with a forced
/// number of ranges; keys of few values make fewer ranges (or none), and a range larger
/// than the memory spills inside its own sort.
#[tokio::test]
async fn key_ranges_sort_like_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let wide = table(40_000, "pipeline-ranges");
    let input = dir.path().join("in");
    write_parquet_files(&input, &wide, 3);
    let rid = wide.num_columns() - 1;
    let forced: [(&str, &str, &[usize], KeyRangeChoice, bool); 4] = [
        (
            "k1 DESC NULLS LAST, k0 NULLS FIRST",
            "k1 DESC NULLS LAST, k0 ASC NULLS FIRST",
            &[1, 0],
            KeyRangeChoice::Ranges(7),
            true,
        ),
        (
            "k0 DESC",
            "k0 DESC NULLS FIRST",
            &[0],
            KeyRangeChoice::Ranges(5),
            true,
        ),
        // 40 values and nulls in 64 ranges: fewer ranges.
        (
            "k0",
            "k0 ASC NULLS LAST",
            &[0],
            KeyRangeChoice::Ranges(64),
            true,
        ),
        // One range: the job sorts in one piece.
        (
            "rid",
            "rid ASC NULLS LAST",
            &[rid],
            KeyRangeChoice::Ranges(1),
            false,
        ),
    ];
    for (i, (by, order, keys, ranges, ranged)) in forced.into_iter().enumerate() {
        let out = dir.path().join(format!("forced{i}.parquet"));
        let summary = ranged_job(&input, &out, (by, order, keys, rid), ranges, None).await;
        assert_eq!(
            summary.algorithm.contains("key ranges"),
            ranged,
            "{by}: {}",
            summary.algorithm
        );
        assert_eq!(summary.rows, wide.num_rows() as u64, "{by}");
    }
    // `on` (as `auto` where a device sorts), under a limit the input outgrows.
    let small = narrow(&table(600_000, "pipeline-ranges-auto"));
    let input = dir.path().join("auto");
    write_parquet_files(&input, &small, 3);
    let rid = small.num_columns() - 1;
    let out = dir.path().join("auto.parquet");
    let by = (
        "k0, k1",
        "k0 ASC NULLS LAST, k1 ASC NULLS LAST",
        &[0, 1][..],
        rid,
    );
    let summary = ranged_job(&input, &out, by, KeyRangeChoice::On, Some(64 << 20)).await;
    assert!(
        summary.algorithm.contains("key ranges"),
        "{}",
        summary.algorithm
    );
    // A key of two values in ranges larger than the memory: two ranges, each sorted by
    // spilling and merging within its own sort.
    let halves = narrow(&table(300_000, "pipeline-ranges-two"));
    let two: ArrayRef = Arc::new(datafusion::arrow::array::Int16Array::from_iter_values(
        (0..halves.num_rows()).map(|r| (r % 2) as i16),
    ));
    let mut columns = halves.columns().to_vec();
    columns[0] = two;
    let halves = RecordBatch::try_new(halves.schema(), columns).unwrap();
    let input = dir.path().join("two");
    write_parquet_files(&input, &halves, 2);
    let out = dir.path().join("two.parquet");
    let by = ("k0", "k0 ASC NULLS LAST", &[0][..], rid);
    let summary = ranged_job(&input, &out, by, KeyRangeChoice::Ranges(4), Some(32 << 20)).await;
    assert!(
        summary.algorithm.contains("2 key ranges"),
        "{}",
        summary.algorithm
    );
    assert!(
        summary.algorithm.contains("spill files"),
        "{}",
        summary.algorithm
    );
}

#[tokio::test]
async fn copy_through_gpusort_sql_uses_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let batch = table(3_000, "pipeline-copy");
    let input = dir.path().join("in");
    write_parquet_files(&input, &batch, 1);
    let out = dir.path().join("copied.parquet");
    let sql = format!(
        "SET gpu_sort.min_rows = 0; \
         COPY (SELECT * FROM t ORDER BY k0 DESC, rid) TO '{}' STORED AS PARQUET",
        out.display()
    );
    let table = format!("t={}", input.display());
    let stdout = gpusort_ok(&[
        "sql",
        &sql,
        "--explain",
        "--backend",
        "cpu",
        "--table",
        &table,
    ]);
    assert!(stdout.contains("DataSinkExec"), "{stdout}");
    assert!(stdout.contains("GpuSortExec"), "{stdout}");
    let expected_path = dir.path().join("expected.parquet");
    let expected = datafusion_copy(&input, "k0 DESC, rid", "", &expected_path).await;
    let rid = batch.num_columns() - 1;
    assert_same_sort(
        &expected,
        &read_parquet(&out),
        &[0, rid],
        "COPY through gpusort sql",
    );
}

/// The standard output of `gpusort args`, which must succeed.
fn gpusort_ok(args: &[&str]) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_gpusort"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8_lossy(&run.stdout).into_owned()
}

#[test]
fn the_command_line_shows_the_settings() {
    let stdout = gpusort_ok(&[
        "sql",
        "SET gpu_sort.min_rows = 4321; SHOW gpu_sort.min_rows; SHOW ALL",
        "--backend",
        "cpu",
        "--max-rows",
        "1000",
    ]);
    let line = stdout
        .lines()
        .find(|l| l.contains("gpu_sort.min_rows"))
        .unwrap_or_else(|| panic!("no gpu_sort.min_rows in {stdout}"));
    assert!(line.contains("4321"), "{line}");
    for name in [
        "gpu_sort.enabled",
        "gpu_sort.device_memory_limit",
        "datafusion.execution.batch_size",
    ] {
        assert!(stdout.contains(name), "{name} missing from {stdout}");
    }
}
