//! Where the scan of a Parquet input spends its time, by the steps a decoder on the GPU
//! would take over: the column chunks' bytes read from the file, their pages decompressed,
//! and the values decoded into Arrow arrays. Each step runs over every row group of the
//! input on THREADS threads (row groups handed out in turn), as the sort's scan runs on
//! every core; each includes the ones before it, so the differences are each step's cost.
//!
//! Issue 54 asks whether decoding the input on the device pays: what it could take off the
//! scan is what decompressing and decoding cost here, less the time to send the compressed
//! bytes across (docs/performance.md, "Parquet files", 2026-12-01 session 27).
//!
//! ```text
//! cargo run --profile device --features cli --example 06_scan_cost -- FILE_OR_DIR [THREADS..]
//! ```

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use datafusion::parquet::column::page::PageReader;
use datafusion::parquet::errors::Result as ParquetResult;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::parquet::file::reader::{ChunkReader, Length};
use datafusion::parquet::file::serialized_reader::SerializedPageReader;

/// The allocator `gpusort` runs with (built with `--features cli`), so that the memory the
/// decode touches first behaves as in the job.
#[cfg(feature = "cli")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One row group of one input file.
struct Unit {
    file: usize,
    row_group: usize,
}

/// An input file and its footer.
struct Input {
    path: PathBuf,
    metadata: ArrowReaderMetadata,
}

impl Input {
    fn parquet(&self) -> &ParquetMetaData {
        self.metadata.metadata()
    }
}

/// What one step moved, added over the row groups.
#[derive(Default, Clone, Copy)]
struct Moved {
    /// Column chunk bytes read from the file (compressed).
    read: u64,
    /// Page bytes after decompression.
    pages: u64,
    /// Rows decoded.
    rows: u64,
}

impl std::ops::AddAssign for Moved {
    fn add_assign(&mut self, other: Self) {
        self.read += other.read;
        self.pages += other.pages;
        self.rows += other.rows;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let input = PathBuf::from(
        args.next()
            .ok_or("usage: 06_scan_cost FILE_OR_DIR [THREADS..]")?,
    );
    let mut threads: Vec<usize> = args.map(|t| t.parse()).collect::<Result<_, _>>()?;
    if threads.is_empty() {
        threads = vec![1, 16];
    }
    let inputs = open(&input)?;
    let units: Vec<Unit> = inputs
        .iter()
        .enumerate()
        .flat_map(|(file, i)| {
            (0..i.parquet().num_row_groups()).map(move |row_group| Unit { file, row_group })
        })
        .collect();
    let rows: i64 = inputs
        .iter()
        .map(|i| i.parquet().file_metadata().num_rows())
        .sum();
    println!(
        "{}: {} files, {} row groups, {rows} rows; best of 3 runs per step",
        input.display(),
        inputs.len(),
        units.len()
    );
    for &n in &threads {
        for (name, step) in [
            ("chunks read", Step::Read),
            ("+ pages decompressed", Step::Decompress),
            ("+ values decoded (Arrow)", Step::Decode),
            ("+ decoded and kept", Step::Keep),
        ] {
            let mut best: Option<(Duration, Moved)> = None;
            for _ in 0..3 {
                let (took, moved) = run(&inputs, &units, n, step)?;
                if best.is_none_or(|(b, _)| took < b) {
                    best = Some((took, moved));
                }
            }
            let (took, moved) = best.expect("three runs");
            let seconds = took.as_secs_f64();
            println!(
                "{n:>3} threads, {name:<26} {:8.1} ms  read {:7.0} MB ({:5.1} GB/s)  pages {:7.0} MB  rows {}",
                seconds * 1e3,
                moved.read as f64 / 1e6,
                moved.read as f64 / seconds / 1e9,
                moved.pages as f64 / 1e6,
                moved.rows
            );
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Step {
    Read,
    Decompress,
    Decode,
    /// Decoded in batches of 64 Ki rows (as `gpusort sort` reads) and every batch kept
    /// until the step ends, as the sort keeps its whole input: the memory is touched for
    /// the first time, where a decode that drops each batch reuses the same memory.
    Keep,
}

/// The Parquet files of `input` (a file, or a directory's `*.parquet` in name order) and
/// their footers.
fn open(input: &Path) -> Result<Vec<Input>, Box<dyn std::error::Error>> {
    let mut paths = if input.is_dir() {
        std::fs::read_dir(input)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
            .collect()
    } else {
        vec![input.to_path_buf()]
    };
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let metadata =
                ArrowReaderMetadata::load(&File::open(&path)?, ArrowReaderOptions::new())?;
            Ok(Input { path, metadata })
        })
        .collect()
}

thread_local! {
    /// The batches a worker of [`Step::Keep`] decoded, dropped when the worker ends.
    static KEPT: std::cell::RefCell<Vec<datafusion::arrow::array::RecordBatch>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `step` over every unit on `threads` threads: the wall time and what it moved.
fn run(
    inputs: &[Input],
    units: &[Unit],
    threads: usize,
    step: Step,
) -> Result<(Duration, Moved), Box<dyn std::error::Error>> {
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let results: Vec<ParquetResult<(Moved, Duration)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut moved = Moved::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(unit) = units.get(i) else {
                            return Ok((moved, started.elapsed()));
                        };
                        moved += one(&inputs[unit.file], unit.row_group, step)?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
    // Until the last worker's last unit: kept batches are dropped after that, untimed.
    let mut took = Duration::ZERO;
    let mut total = Moved::default();
    for result in results {
        let (moved, done) = result?;
        total += moved;
        took = took.max(done);
    }
    Ok((took, total))
}

/// One row group of `input` through `step`.
fn one(input: &Input, row_group: usize, step: Step) -> ParquetResult<Moved> {
    let mut moved = Moved::default();
    if let Step::Decode | Step::Keep = step {
        let keep = matches!(step, Step::Keep);
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
            File::open(&input.path)?,
            input.metadata.clone(),
        )
        .with_row_groups(vec![row_group])
        .with_batch_size(if keep { 64 * 1024 } else { 8192 })
        .build()?;
        for batch in reader {
            let batch = batch?;
            moved.rows += batch.num_rows() as u64;
            if keep {
                KEPT.with(|k| k.borrow_mut().push(batch));
            }
        }
        let group = input.parquet().row_group(row_group);
        moved.read = group.compressed_size() as u64;
        moved.pages = group.total_byte_size() as u64;
        return Ok(moved);
    }
    let file = File::open(&input.path)?;
    let group = input.parquet().row_group(row_group);
    for column in group.columns() {
        let (start, len) = column.byte_range();
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, start)?;
        moved.read += len;
        if let Step::Decompress = step {
            let chunk = Arc::new(ChunkBytes {
                start,
                bytes: Bytes::from(bytes),
            });
            let mut pages =
                SerializedPageReader::new(chunk, column, group.num_rows() as usize, None)?;
            while let Some(page) = pages.get_next_page()? {
                moved.pages += page.buffer().len() as u64;
            }
        }
    }
    moved.rows = group.num_rows() as u64;
    Ok(moved)
}

/// A column chunk's bytes in memory, read at the file offsets the footer gives.
struct ChunkBytes {
    start: u64,
    bytes: Bytes,
}

impl Length for ChunkBytes {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl ChunkReader for ChunkBytes {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> ParquetResult<Self::T> {
        use bytes::Buf;
        Ok(self
            .get_bytes(start, self.len().saturating_sub(start) as usize)?
            .reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> ParquetResult<Bytes> {
        let from = start.checked_sub(self.start).ok_or_else(|| {
            datafusion::parquet::errors::ParquetError::General(format!(
                "a read at {start}, before the chunk's start {}",
                self.start
            ))
        })? as usize;
        let to = (from + length).min(self.bytes.len());
        Ok(self.bytes.slice(from..to))
    }
}
