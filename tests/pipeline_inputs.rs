//! Bad inputs and faults of the file pipeline (`gpusort sort`, `gpusort::pipeline`): each
//! case ends in a correct output or a clear error, never in a wrong output, and leaves
//! nothing behind. Inputs whose columns differ, paths with glob characters, tie order
//! across files given out of alphabetical order, an output among the inputs, the row
//! count, spill limits and what a killed job left.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::file_jobs::{files_under, job, listing};
use datafusion::arrow::array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::compute::concat_batches;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use gpusort::pipeline::{sort_files, Progress};

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let mut writer =
        ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), None).unwrap();
    // Row groups of 5 000 rows: a file is read in several pieces.
    for offset in (0..batch.num_rows()).step_by(5_000) {
        writer
            .write(&batch.slice(offset, 5_000.min(batch.num_rows() - offset)))
            .unwrap();
        writer.flush().unwrap();
    }
    writer.close().unwrap();
}

fn read(path: &Path) -> RecordBatch {
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut batches = Vec::new();
    for file in files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(file).unwrap())
            .unwrap()
            .build()
            .unwrap();
        batches.extend(reader.map(|b| b.unwrap()));
    }
    concat_batches(&batches[0].schema(), &batches).unwrap()
}

fn ints(values: impl IntoIterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(values))
}

fn texts(values: impl IntoIterator<Item = String>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

/// `rows` rows of a scattered key `k` and 46 bytes of text each: under a 16 MiB memory
/// limit, a sort of them spills.
fn write_spilling_table(path: &Path, rows: i64) {
    write_parquet(
        path,
        vec![
            ("k", ints((0..rows).map(|r| (r * 7919) % 100_003))),
            ("pad", texts((0..rows).map(|r| format!("row {r:>40}")))),
        ],
    );
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> &'a T {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap()
}

/// `a.parquet` (k, x) with `b.parquet` (k, x, y): refused by default, naming both files and
/// `y`; with `union_by_name`, every column, `y` null for `a`'s rows, and `x` widened from
/// Int32 in `c.parquet` to Int64.
#[tokio::test]
async fn inputs_whose_columns_differ_are_refused_or_merged_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a.parquet"),
        dir.path().join("b.parquet"),
        dir.path().join("c.parquet"),
    );
    write_parquet(&a, vec![("k", ints([3, 1])), ("x", ints([30, 10]))]);
    write_parquet(
        &b,
        vec![
            ("k", ints([2])),
            ("x", ints([20])),
            ("y", texts(["why".to_string()])),
        ],
    );
    let x32: ArrayRef = Arc::new(Int32Array::from(vec![40]));
    write_parquet(&c, vec![("x", x32), ("k", ints([4]))]);
    let out = dir.path().join("out.parquet");
    let err = sort_files(&job(&[&a, &b], &out, "k"), &Progress::new())
        .await
        .unwrap_err()
        .to_string();
    for part in [
        a.display().to_string(),
        format!("'{}': column 'y' (Utf8", b.display()),
        "--union-by-name".into(),
    ] {
        assert!(err.contains(&part), "'{part}' not in: {err}");
    }
    assert!(!out.exists());
    let err = sort_files(&job(&[&a, &c], &out, "k"), &Progress::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("column 'x' is Int32"), "{err}");

    let mut merged = job(&[&a, &b, &c], &out, "k");
    merged.union_by_name = true;
    sort_files(&merged, &Progress::new()).await.unwrap();
    let got = read(&out);
    let schema = got.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["k", "x", "y"]);
    assert_eq!(
        column::<Int64Array>(&got, "k").values().to_vec(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        column::<Int64Array>(&got, "x").values().to_vec(),
        vec![10, 20, 30, 40]
    );
    let y = got.column_by_name("y").unwrap();
    assert_eq!(
        (0..4).map(|i| y.is_null(i)).collect::<Vec<_>>(),
        [true, false, true, true]
    );

    // Types that no one type holds exactly: refused even by name.
    let d = dir.path().join("d.parquet");
    write_parquet(&d, vec![("k", texts(["5".to_string()]))]);
    let mut clash = job(&[&a, &d], &out, "k");
    clash.union_by_name = true;
    clash.overwrite = true;
    let err = sort_files(&clash, &Progress::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("column 'k' is Int64 in"), "{err}");
    assert_eq!(read(&out).num_rows(), 4, "the earlier output is untouched");
}

/// CSV columns are matched by header name, never by position.
#[tokio::test]
async fn csv_columns_are_matched_by_header_name() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
    std::fs::write(&a, "k,x\n3,30\n1,10\n2,11\n").unwrap();
    std::fs::write(&b, "x,k,z\n20,2,zed\n21,2,zz\n").unwrap();
    let out = dir.path().join("out.parquet");
    let err = sort_files(&job(&[&a, &b], &out, "k"), &Progress::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("column 'z'"), "{err}");
    assert!(!out.exists());
    let mut merged = job(&[&a, &b], &out, "k");
    merged.union_by_name = true;
    sort_files(&merged, &Progress::new()).await.unwrap();
    let got = read(&out);
    assert_eq!(
        column::<Int64Array>(&got, "k").values().to_vec(),
        vec![1, 2, 2, 2, 3]
    );
    // Ties of k = 2 in input order: a's row, then b's two.
    assert_eq!(
        column::<Int64Array>(&got, "x").values().to_vec(),
        vec![10, 11, 20, 21, 30]
    );
    let z = column::<StringArray>(&got, "z");
    assert_eq!(
        (0..5)
            .map(|i| z.is_valid(i).then(|| z.value(i)))
            .collect::<Vec<_>>(),
        [None, None, Some("zed"), Some("zz"), None]
    );
}

/// A file named `run[1].parquet` beside `run1.parquet` is read as itself; a pattern that
/// names no file is a glob, its matches in sorted order.
#[tokio::test]
async fn a_path_is_literal_and_only_a_missing_one_is_a_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let bracket = dir.path().join("run[1].parquet");
    let plain = dir.path().join("run1.parquet");
    write_parquet(&bracket, vec![("k", ints([1, 2])), ("src", ints([7, 7]))]);
    write_parquet(
        &plain,
        vec![("k", ints([1, 2, 3])), ("src", ints([9, 9, 9]))],
    );
    let out = dir.path().join("out.parquet");
    sort_files(&job(&[&bracket], &out, "k"), &Progress::new())
        .await
        .unwrap();
    let got = read(&out);
    assert_eq!(column::<Int64Array>(&got, "src").values().to_vec(), [7, 7]);
    let pattern = dir.path().join("run*.parquet");
    let mut globbed = job(&[&pattern], &out, "k");
    globbed.overwrite = true;
    sort_files(&globbed, &Progress::new()).await.unwrap();
    let got = read(&out);
    // `run1.parquet` sorts before `run[1].parquet` ('1' < '['): ties keep that order.
    assert_eq!(
        column::<Int64Array>(&got, "src").values().to_vec(),
        [9, 7, 9, 7, 9]
    );
}

/// Ties keep the order the inputs are given in, files named out of alphabetical order,
/// each file's rows in their own order, across the scan's partitions.
#[tokio::test]
async fn ties_keep_the_order_the_inputs_are_given_in() {
    let dir = tempfile::tempdir().unwrap();
    let rows = 20_000;
    let names = ["m.parquet", "b.parquet", "z.parquet", "a.parquet"];
    let paths: Vec<PathBuf> = names.iter().map(|n| dir.path().join(n)).collect();
    for (i, path) in paths.iter().enumerate() {
        write_parquet(
            path,
            vec![
                ("k", ints((0..rows).map(|r| (r * 7919) % 13))),
                ("src", ints(std::iter::repeat_n(i as i64, rows as usize))),
                ("row", ints(0..rows)),
            ],
        );
    }
    let out = dir.path().join("sorted").join("out.parquet");
    std::fs::create_dir(out.parent().unwrap()).unwrap();
    let inputs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    for (partitions, descending) in [(1, false), (3, false), (4, true)] {
        let mut sort = job(&inputs, &out, if descending { "k DESC" } else { "k" });
        sort.target_partitions = Some(partitions);
        sort.overwrite = true;
        sort_files(&sort, &Progress::new()).await.unwrap();
        let got = read(&out);
        let (k, src, row) = (
            column::<Int64Array>(&got, "k"),
            column::<Int64Array>(&got, "src"),
            column::<Int64Array>(&got, "row"),
        );
        assert_eq!(got.num_rows(), 4 * rows as usize);
        for i in 1..got.num_rows() {
            let (before, here) = (k.value(i - 1), k.value(i));
            let ordered = if descending {
                before > here
            } else {
                before < here
            };
            let tie_in_order = before == here
                && (src.value(i - 1), row.value(i - 1)) < (src.value(i), row.value(i));
            assert!(
                ordered || tie_in_order,
                "{partitions} partitions, row {i}: ({}, {}, {}) then ({here}, {}, {})",
                before,
                src.value(i - 1),
                row.value(i - 1),
                src.value(i),
                row.value(i)
            );
        }
    }
}

/// Ties hold where files are large enough (over DataFusion's 10 MiB) for the scan to read
/// them in byte ranges spread over its partitions.
#[tokio::test]
async fn ties_hold_when_files_are_read_in_byte_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let rows = 1_000_000i64;
    let paths = [dir.path().join("y.parquet"), dir.path().join("x.parquet")];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for (i, path) in paths.iter().enumerate() {
        // Random bits do not compress: each file holds about 16 MB.
        let noise: Vec<i64> = (0..rows)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as i64
            })
            .collect();
        write_parquet(
            path,
            vec![
                ("k", ints((0..rows).map(|r| (r * 7919) % 5))),
                ("src", ints(std::iter::repeat_n(i as i64, rows as usize))),
                ("row", ints(0..rows)),
                ("noise", ints(noise)),
            ],
        );
        assert!(std::fs::metadata(path).unwrap().len() > 12 << 20);
    }
    let out = dir.path().join("out.parquet");
    let inputs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    let mut sort = job(&inputs, &out, "k");
    sort.target_partitions = Some(5);
    sort_files(&sort, &Progress::new()).await.unwrap();
    let got = read(&out);
    let (k, src, row) = (
        column::<Int64Array>(&got, "k"),
        column::<Int64Array>(&got, "src"),
        column::<Int64Array>(&got, "row"),
    );
    assert_eq!(got.num_rows(), 2 * rows as usize);
    for i in 1..got.num_rows() {
        let before = (k.value(i - 1), src.value(i - 1), row.value(i - 1));
        let here = (k.value(i), src.value(i), row.value(i));
        assert!(before < here, "row {i}: {before:?} then {here:?}");
    }
}

/// Sorting a directory into a file inside it, twice: the second run is refused (it would
/// read the first output), and the first output stays. So is an output directory that
/// holds inputs, and a file sorted onto itself.
#[tokio::test]
async fn the_output_is_never_read_as_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let a = data.join("a.parquet");
    write_parquet(&a, vec![("k", ints((0..100).rev()))]);
    let out = data.join("sorted.parquet");
    let mut sort = job(&[&data], &out, "k");
    sort.overwrite = true;
    sort_files(&sort, &Progress::new()).await.unwrap();
    assert_eq!(read(&out).num_rows(), 100);
    let err = sort_files(&sort, &Progress::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "output '{}' would also be read as an input",
            out.display()
        )) && err.contains(&format!("listed from '{}'", data.display())),
        "{err}"
    );
    assert_eq!(read(&out).num_rows(), 100, "the first output is untouched");
    assert_eq!(listing(&data), ["a.parquet", "sorted.parquet"]);

    // A directory of files inside the input directory.
    std::fs::remove_file(&out).unwrap();
    let parts = data.join("parts");
    let mut split = job(&[&data], &parts, "k");
    split.max_rows_per_file = Some(30);
    split.overwrite = true;
    sort_files(&split, &Progress::new()).await.unwrap();
    assert_eq!(read(&parts).num_rows(), 100);
    let err = sort_files(&split, &Progress::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("would also be read as an input"), "{err}");
    assert_eq!(read(&parts).num_rows(), 100);

    // A file onto itself, named another way.
    let again = data.join(".").join("a.parquet");
    let mut onto = job(&[&a], &again, "k");
    onto.overwrite = true;
    let err = sort_files(&onto, &Progress::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("would also be read as an input"), "{err}");
    assert_eq!(read(&a).num_rows(), 100);
}

/// A job whose output lost rows (a test hook drops a batch on its way to the writer) fails,
/// and leaves no output.
#[tokio::test]
async fn rows_out_must_equal_rows_in() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    write_parquet(&a, vec![("k", ints((0..30_000).rev()))]);
    let out = dir.path().join("out.parquet");
    let mut sort = job(&[&a], &out, "k");
    sort.inject_lost_batch = true;
    let err = sort_files(&sort, &Progress::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("wrote 0 rows where 30000 were expected"),
        "{err}"
    );
    assert_eq!(listing(dir.path()), ["a.parquet"]);
    sort.inject_lost_batch = false;
    sort.limit = Some(40_000);
    let summary = sort_files(&sort, &Progress::new()).await.unwrap();
    assert_eq!(summary.rows, 30_000);
}

/// Spills go under `spill_dir`, within `max_spill`: past it the job fails naming the
/// option, and leaves neither output nor spill files.
#[tokio::test]
async fn spills_go_where_and_as_far_as_the_user_says() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    let rows = 300_000;
    write_spilling_table(&a, rows);
    let spill = dir.path().join("spill");
    std::fs::create_dir(&spill).unwrap();
    let out = dir.path().join("out.parquet");
    let mut sort = job(&[&a], &out, "k");
    sort.memory_limit = Some(16 << 20);
    sort.spill_dir = Some(spill.clone());
    sort.max_spill = Some(64 << 10);
    let err = sort_files(&sort, &Progress::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--max-spill") && err.contains(&spill.display().to_string()),
        "{err}"
    );
    assert_eq!(listing(&spill), Vec::<String>::new());
    assert!(!out.exists());
    sort.max_spill = None;
    let summary = sort_files(&sort, &Progress::new()).await.unwrap();
    assert!(
        summary.algorithm.contains("spill files"),
        "{}",
        summary.algorithm
    );
    assert_eq!(listing(&spill), Vec::<String>::new());
    let got = read(&out);
    let k = column::<Int64Array>(&got, "k");
    assert!((1..got.num_rows()).all(|i| k.value(i - 1) <= k.value(i)));
    let err = {
        let mut bad = sort.clone();
        bad.spill_dir = Some(dir.path().join("nowhere"));
        bad.overwrite = true;
        sort_files(&bad, &Progress::new())
            .await
            .unwrap_err()
            .to_string()
    };
    assert!(
        err.contains("--spill-dir") && err.contains("nowhere"),
        "{err}"
    );
}

/// A process id that no process has: a child that has exited and been reaped.
fn gone_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// What a killed job left (its temporary output, a directory moved aside, its spill
/// folder) is removed by the next job on the same target; what a running process holds is
/// left alone; the next job's output is right.
#[tokio::test]
async fn the_next_job_removes_what_a_killed_one_left() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    write_parquet(&a, vec![("k", ints((0..1000).rev()))]);
    let spill = dir.path().join("spill");
    std::fs::create_dir(&spill).unwrap();
    let gone = gone_pid();
    let leftovers = [
        dir.path()
            .join(format!(".out.parquet.gpusort-tmp-{gone}-1")),
        dir.path()
            .join(format!(".out.parquet.gpusort-old-{gone}-2")),
        spill.join(format!("gpusort-spill-{gone}-3")),
    ];
    std::fs::write(&leftovers[0], b"half a file").unwrap();
    for folder in &leftovers[1..] {
        std::fs::create_dir(folder).unwrap();
        std::fs::write(folder.join("x"), b"x").unwrap();
    }
    // pid 1 runs: its temporary file is not ours to remove.
    let running = dir.path().join(".out.parquet.gpusort-tmp-1-4");
    std::fs::write(&running, b"being written").unwrap();
    let out = dir.path().join("out.parquet");
    let mut sort = job(&[&a], &out, "k");
    sort.spill_dir = Some(spill.clone());
    sort_files(&sort, &Progress::new()).await.unwrap();
    for path in &leftovers {
        assert!(!path.exists(), "{} left", path.display());
    }
    assert!(running.exists());
    assert_eq!(listing(&spill), Vec::<String>::new());
    assert_eq!(read(&out).num_rows(), 1000);
}

/// SIGKILL in the middle of `gpusort sort`, then the same command again: the second run
/// succeeds and no file of the first one remains (neither its temporary output nor its
/// spill folder).
#[test]
fn sigkill_then_one_more_run_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    let rows = 400_000;
    write_spilling_table(&a, rows);
    let spill = dir.path().join("spill");
    std::fs::create_dir(&spill).unwrap();
    let out = dir.path().join("out.parquet");
    let sort = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gpusort"));
        command
            .args(["sort", a.to_str().unwrap(), "-o", out.to_str().unwrap()])
            .args([
                "--by",
                "k",
                "--backend",
                "cpu",
                "--memory-limit",
                "16M",
                "-q",
            ])
            .arg("--spill-dir")
            .arg(&spill);
        command
    };
    let mut child = sort().spawn().unwrap();
    // Killed once it has spilled (a file in its spill folder) and its output is open.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let temp_exists = || {
        listing(dir.path())
            .iter()
            .any(|n| n.starts_with(".out.parquet.gpusort-tmp-"))
    };
    let spilled = || files_under(&spill).iter().any(|p| p.is_file());
    while !spilled() || !temp_exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before it spilled"
        );
        assert!(std::time::Instant::now() < deadline, "no spill appeared");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    let killed = status.signal() == Some(libc::SIGKILL);
    if killed {
        assert!(temp_exists(), "SIGKILL left the temporary output");
        assert!(spilled(), "SIGKILL left the spill files");
    } else {
        // It finished between the last look and the kill: nothing was left to find.
        eprintln!("the job ended before SIGKILL reached it: {status}");
    }
    let ran = sort().output().unwrap();
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "{stderr}");
    if killed {
        assert!(stderr.contains("left by a job"), "{stderr}");
    }
    assert_eq!(listing(&spill), Vec::<String>::new());
    assert_eq!(listing(dir.path()), ["a.parquet", "out.parquet", "spill"]);
    assert_eq!(read(&out).num_rows(), rows as usize);
}

/// One file named three ways (relative with `..`, absolute, through a link) is read
/// once: the rows are not doubled, and the footers' count agrees.
#[tokio::test]
async fn a_file_named_several_ways_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let a = dir.path().join("a.parquet");
    write_parquet(&a, vec![("k", ints((0..100).rev()))]);
    let dotted = sub.join("..").join("a.parquet");
    let link = dir.path().join("link.parquet");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let out = dir.path().join("out.parquet");
    let summary = sort_files(&job(&[&dotted, &a, &link], &out, "k"), &Progress::new())
        .await
        .unwrap();
    assert_eq!(summary.rows, 100);
    assert_eq!(read(&out).num_rows(), 100);
}

/// A CSV column empty in the rows DataFusion looks at to infer types (the first 1,000) is
/// read as text: its values further down are kept, not read as nulls.
#[tokio::test]
async fn a_csv_column_empty_at_first_keeps_its_later_values() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.csv");
    let mut text = String::from("k,late\n");
    for k in 0..1500 {
        text.push_str(&format!("{k},\n"));
    }
    text.push_str("1500,here\n");
    std::fs::write(&a, text).unwrap();
    let out = dir.path().join("out.parquet");
    sort_files(&job(&[&a], &out, "k DESC"), &Progress::new())
        .await
        .unwrap();
    let got = read(&out);
    assert_eq!(got.num_rows(), 1501);
    let late = column::<StringArray>(&got, "late");
    assert_eq!(late.value(0), "here");
    assert_eq!(late.null_count(), 1500);
}

/// Reads the same files through DataFusion's own `COPY .. ORDER BY` for one accepted case:
/// gpusort's output equals it (a total order: `k` then `row`).
#[tokio::test]
async fn an_accepted_job_equals_datafusion_copy() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for (i, name) in ["q.parquet", "c.parquet"].iter().enumerate() {
        write_parquet(
            &data.join(name),
            vec![
                ("k", ints((0..10_000).map(|r| (r * 31 + i as i64) % 97))),
                ("row", ints((0..10_000).map(|r| r + 10_000 * i as i64))),
            ],
        );
    }
    let out = dir.path().join("out.parquet");
    sort_files(&job(&[&data], &out, "k DESC, row"), &Progress::new())
        .await
        .unwrap();
    let ctx = SessionContext::new();
    ctx.register_parquet("t", data.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    let expected = ctx
        .sql("SELECT * FROM t ORDER BY k DESC, row")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let expected = concat_batches(&expected[0].schema(), &expected).unwrap();
    let got = read(&out);
    assert_eq!(got.columns(), expected.columns());
}
