//! Sorting files in batch pipelines: Parquet or CSV inputs → one sorted Parquet file, or a
//! directory of them. `gpusort sort` is this module behind a command line.
//!
//! ```text
//! inputs (files, dirs, globs) ──resolve, read footers──► DataFusion scan (all cores)
//!   ──► ORDER BY through gpusort's operator (GPU when usable; spills past --memory-limit,
//!       by default half the memory the process may use)
//!   ──► [LIMIT] ──batches──► writer thread: Parquet (sorting_columns declared), temp name
//!   ──► rename into place on success; removed on any error
//! ```
//!
//! - `order_by`: the `--by` text.
//! - `inputs`: input paths → files; the output is never one of them.
//! - `schemas`: the inputs' columns compared, or merged by name.
//! - `files_table`: the files as one table, read in input order.
//! - `spill`: where a job spills and how much.
//! - `ranged_job`: a job larger than its memory sorted by key range, one range after another.
//! - `key_ranges`: the ranges' splitters, from a sample of the keys; each row's range.
//! - `range_spill`: the input's rows spilled into their ranges' files.
//! - `range_table`: one range's files read back as a table, in input order.
//! - `leftovers`: temporary names, and what killed jobs left.
//! - `output`: the atomic Parquet writer.
//! - `row_groups`: one Parquet file, columns and row groups encoded in parallel.
//! - `device_chunks`: column chunks whose pages the device built: headers, metadata,
//!   statistics and page index written here.
//! - `device_jobs`: the device's share of each row group, encoded on a thread of its own
//!   (on the CPU where the device cannot).
//! - `encodings`: the columns' fallback encodings, and dictionaries given up.
//! - `write_memory`: what the writer holds, counted in the session's memory pool.
//! - `writeback`: output files sent to disk while they are written.
//! - `memory`: the default memory limit.
//! - `progress`: live row counts read from the running plan's metrics.
//! - `error`: [`PipelineError`], one variant per way a job fails.

mod device_bytes;
mod device_chunks;
mod device_jobs;
mod encodings;
mod error;
mod files_table;
mod held_input;
mod inputs;
mod key_ranges;
mod leftovers;
pub mod memory;
mod order_by;
mod output;
mod progress;
mod range_spill;
mod range_table;
mod ranged_job;
mod row_groups;
mod schemas;
mod spill;
mod splice;
mod write_memory;
mod writeback;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::SpillCompression;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Column;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::{Expr, SortExpr};
use datafusion::parquet::basic::Compression;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;

pub use device_jobs::ColumnPageCounts;
pub use encodings::with_integer_deltas;
pub use error::PipelineError;
pub use held_input::HOLD_INPUT_VAR;
pub use inputs::{check_output_not_input, resolve_inputs, InputFormat, Inputs};
pub use order_by::{parse_order_by, resolve_columns, SortKey};
pub use output::{OutputOptions, ParquetOutput, WrittenOutput};
pub use progress::{Progress, ProgressSnapshot};
pub use ranged_job::{range_count, KeyRangeChoice};
#[doc(hidden)]
pub use row_groups::write_with_device_pages;
pub use schemas::widen;

use crate::gather::ResidentRequest;
use crate::{
    BackendChoice, DeviceSelection, GpuSortConfig, GpuSortExec, GpuSortRule, SessionStateBuilderExt,
};
use held_input::{hold_on_device, HoldQuestion};

/// Limits up to this many rows keep DataFusion's TopK heap (cheaper than sorting all rows);
/// larger ones sort on gpusort's operator with the limit applied to each run.
pub const TOPK_MAX_ROWS: usize = 10_000;

/// Default rows per row group (Parquet's own default).
pub const DEFAULT_ROW_GROUP_ROWS: usize = 1024 * 1024;

/// One sort of files.
#[derive(Debug, Clone)]
pub struct SortJob {
    /// Files, directories or glob patterns, in input order.
    pub inputs: Vec<String>,
    /// Output file, or directory with `max_rows_per_file`.
    pub output: PathBuf,
    /// `<col> [ASC|DESC] [NULLS FIRST|LAST], ...`
    pub by: String,
    /// Keep only the first rows.
    pub limit: Option<usize>,
    /// Write a directory of files of at most this many rows.
    pub max_rows_per_file: Option<usize>,
    /// Rows per row group.
    pub row_group_rows: usize,
    /// `zstd(1)`, `snappy`, `lz4`, `gzip(6)`, `brotli(4)`, `uncompressed`, ...
    pub compression: String,
    /// Memory limit in bytes (sorts spill beyond it); by default
    /// [`memory::default_memory_limit`], half the memory this process may use; `None`: no
    /// limit. The session's pool is this limit, less what the process holds outside the
    /// pool ([`memory::pool_bytes`]).
    pub memory_limit: Option<usize>,
    /// Compression of the runs a sort spills (DataFusion's spill files). LZ4 frames by
    /// default: the runs of a spill are written (and compressed) on all cores at once, so
    /// compression costs little time and halves the disk a spill takes
    /// (docs/performance.md, session 24).
    pub spill_compression: SpillCompression,
    /// Match the inputs' columns by name: every column of any file, nulls where a file has
    /// none, types widened where that is exact (DuckDB's `union_by_name`). Off, inputs
    /// whose columns differ are refused.
    pub union_by_name: bool,
    /// Where spills go (a folder of the job's own is made there); `None`: `$TMPDIR`, or
    /// `/tmp`.
    pub spill_dir: Option<PathBuf>,
    /// The most bytes the job may spill; `None`: 90 % of the free space on the spill
    /// directory's disk when the job starts.
    pub max_spill: Option<u64>,
    /// Replace an existing output.
    pub overwrite: bool,
    /// Flush the output to disk before it is renamed into place (default); see
    /// [`OutputOptions::sync`].
    pub sync: bool,
    /// Sort backend.
    pub backend: BackendChoice,
    /// The GPUs the sort uses (`gpu_sort.devices`): `all` by default.
    pub devices: DeviceSelection,
    /// Where the data pages of the columns the device can build are encoded.
    pub page_encoding: PageEncoding,
    /// Whether a job larger than its memory is sorted by key range (each range sorted in
    /// memory and written in turn) or by the operator's sorted runs merged at the end
    /// (the default, [`KeyRangeChoice::Auto`]: by key range where a device sorts).
    pub key_ranges: KeyRangeChoice,
    /// Partitions of the scan (default: the number of cores, fewer where a quarter of the
    /// memory limit cannot hold a row group being read per core: see
    /// [`memory::scan_partitions`]).
    pub target_partitions: Option<usize>,
    /// With device pages: which of the sort's columns stay on the device, their pages
    /// built from that copy (`src/cuda/payload/resident.rs`); by default all of them
    /// ([`RESIDENT_PAGES_VAR`] chooses fewer, to measure against).
    #[doc(hidden)]
    pub resident_pages: KeepOnDevice,
    /// Test hook: fail the write once this many rows are written, as a full disk (ENOSPC)
    /// would.
    #[doc(hidden)]
    pub inject_write_failure_after: Option<u64>,
    /// Test hook: the first batch with rows never reaches the writer, as a bug losing rows
    /// would.
    #[doc(hidden)]
    pub inject_lost_batch: bool,
}

impl SortJob {
    /// A job with default options.
    pub fn new(inputs: Vec<String>, output: impl Into<PathBuf>, by: impl Into<String>) -> Self {
        Self {
            inputs,
            output: output.into(),
            by: by.into(),
            limit: None,
            max_rows_per_file: None,
            row_group_rows: DEFAULT_ROW_GROUP_ROWS,
            compression: "zstd(1)".into(),
            memory_limit: memory::default_memory_limit(),
            spill_compression: SpillCompression::Lz4Frame,
            union_by_name: false,
            spill_dir: None,
            max_spill: None,
            overwrite: false,
            sync: true,
            backend: BackendChoice::Auto,
            devices: DeviceSelection::All,
            page_encoding: PageEncoding::Host,
            key_ranges: KeyRangeChoice::Auto,
            target_partitions: None,
            resident_pages: KeepOnDevice::from_env(),
            inject_write_failure_after: None,
            inject_lost_batch: false,
        }
    }
}

/// Where a job's Parquet data pages are built.
///
/// `Device`: the pages of top-level columns of 4- and 8-byte values (integers, floats,
/// dates, times, timestamps, decimals of up to 18 digits) and of strings and binaries,
/// uncompressed or Snappy, are built and compressed on the GPU (their dictionaries too,
/// else `PLAIN`, or `DELTA_BINARY_PACKED` for integers); the host writes their headers,
/// statistics and page index. Every other column, and every
/// column where no device can take the work, is encoded on the CPU as with `Host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageEncoding {
    /// Every page encoded on the CPU.
    #[default]
    Host,
    /// The pages the device can build, on the device.
    Device,
}

impl std::str::FromStr for PageEncoding {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "host" | "cpu" => Ok(Self::Host),
            "device" | "gpu" => Ok(Self::Device),
            other => Err(format!("page encoding {other:?}: expected host or device")),
        }
    }
}

/// What a finished job did.
#[derive(Debug, Clone)]
pub struct SortSummary {
    /// Rows written.
    pub rows: u64,
    /// Bytes of the input files.
    pub input_bytes: u64,
    /// The files written, in row order, and their bytes.
    pub output: WrittenOutput,
    /// Wall time of the whole job.
    pub elapsed: Duration,
    /// Which sort ran: `cuda`, `cpu`, or `datafusion (<why gpusort declined>)`.
    pub backend: String,
    /// Algorithms of the sorted runs, e.g. `onesweep`, with spills and fallbacks noted.
    pub algorithm: String,
    /// Where the time went.
    pub stages: StageTimes,
    /// The most resident memory the process held until the job ended (Linux; the whole
    /// process's, so a library caller's own memory too).
    pub peak_memory: Option<u64>,
}

/// Where a job's time went. Reading and sorting overlap (the scan feeds the sort's buffer),
/// and so do emitting sorted batches and writing them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimes {
    /// Resolving inputs, reading footers, planning.
    pub plan: Duration,
    /// From starting the plan to its first sorted batch: reading, decoding, sorting.
    pub read_and_sort: Duration,
    /// Of which the sort operator's own work (key encoding, device or CPU sort, gather).
    pub sort: Duration,
    /// From the first sorted batch to the committed output: writing Parquet.
    pub write: Duration,
}

impl std::fmt::Display for StageTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plan {:.3} s, read+sort {:.3} s (sort operator {:.3} s), write {:.3} s",
            self.plan.as_secs_f64(),
            self.read_and_sort.as_secs_f64(),
            self.sort.as_secs_f64(),
            self.write.as_secs_f64()
        )
    }
}

impl std::fmt::Display for SortSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sorted {} rows: {} in, {} out ({} file{}) in {:.2} s (plan {:.2}, read+sort {:.2}, \
             write {:.2}); backend {}, algorithm {}",
            self.rows,
            human_bytes(self.input_bytes),
            human_bytes(self.output.bytes),
            self.output.files.len(),
            if self.output.files.len() == 1 {
                ""
            } else {
                "s"
            },
            self.elapsed.as_secs_f64(),
            self.stages.plan.as_secs_f64(),
            self.stages.read_and_sort.as_secs_f64(),
            self.stages.write.as_secs_f64(),
            self.backend,
            self.algorithm
        )?;
        let (device, host) = (self.output.device_chunks, self.output.device_chunks_on_host);
        if device + host > 0 {
            write!(f, "; pages of {device} column chunks built on the device")?;
            let resident = self.output.device_chunks_resident;
            if resident > 0 {
                write!(f, " ({resident} from the sort's copy there)")?;
            }
            if host > 0 {
                write!(f, " ({host} more encoded on the host: no device could)")?;
            }
        }
        match self.peak_memory {
            Some(bytes) => write!(f, "; peak memory {}", human_bytes(bytes)),
            None => Ok(()),
        }
    }
}

/// Runs `job`, publishing live counts in `progress`. On error nothing of the output remains,
/// and an output it replaces is untouched.
pub async fn sort_files(job: &SortJob, progress: &Progress) -> Result<SortSummary, PipelineError> {
    let started = Instant::now();
    let mut keys = parse_order_by(&job.by)?;
    let output_options = output_options(job)?;
    output_options.check_target()?;
    let inputs = resolve_inputs(&job.inputs)?;
    check_output_not_input(&inputs, &job.output, job.max_rows_per_file.is_some())?;
    let spill_root = job.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
    leftovers::clean(&job.output, &spill_root);
    // Where none can be made in the default place (a read-only `$TMPDIR`), a job that never
    // spills still runs.
    let spill_folder = match spill::SpillFolder::create(&spill_root) {
        Ok(folder) => Some(folder),
        Err(e) if job.spill_dir.is_none() => {
            log::warn!("gpusort: {e}; a sort that must spill will fail");
            None
        }
        Err(e) => return Err(e),
    };
    let spill_path = spill_folder
        .as_ref()
        .map_or(spill_root.clone(), |folder| folder.path().to_path_buf());
    let max_spill = job
        .max_spill
        .unwrap_or_else(|| spill::default_max_spill(&spill_root));
    let backend = backend_for(job.backend, inputs.rows);
    // Opening the CUDA device (driver, context, kernels, pinned staging) takes 0.3 to 0.4 s
    // in a fresh process, longer than planning and half the scan of 2.3 GiB: it starts now
    // (the footers just read) on a thread of its own, and with `auto` the plan's sort
    // waits for it only at its first device sort.
    if backend != BackendChoice::Cpu {
        crate::cuda::start_opening(job.devices);
    }
    progress.set_total(
        inputs.rows.map(|rows| match job.limit {
            Some(limit) => rows.min(limit as u64),
            None => rows,
        }),
        inputs.bytes(),
    );
    crate::trace::event(|| {
        format!(
            "plan: {} input files resolved, footers read",
            inputs.files.len()
        )
    });
    let rule = Arc::new(GpuSortRule::new());
    // The pool leaves room for what the CUDA backend holds outside it on each device that
    // may be in use (one still being counted or opened counts; without a driver, or where
    // it lists no GPU, opening has already failed).
    let cuda = backend != BackendChoice::Cpu
        && !matches!(
            crate::cuda::open_state(job.devices),
            crate::cuda::OpenState::Unusable(_)
        );
    // Bounded without waiting for the driver where the opening thread has not counted yet.
    let devices = match cuda {
        true => crate::cuda::selected_count_bound(job.devices).max(1),
        false => 0,
    };
    let pool = job
        .memory_limit
        .map(|limit| memory::pool_bytes(limit, devices));
    let partitions = job.target_partitions.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        memory::scan_partitions(pool, inputs.max_row_group_bytes, cores)
    });
    let bytes_per_row = inputs
        .decoded_bytes
        .zip(inputs.rows)
        .map(|(bytes, rows)| bytes / rows.max(1));
    let batch_rows = memory::batch_rows(pool, bytes_per_row, partitions);
    let ctx = session(
        job,
        backend,
        pool,
        partitions,
        batch_rows,
        (&spill_path, max_spill),
        Arc::clone(&rule),
    )?;
    // What the scan fetches is counted in the pool until the sort has read it all.
    let scan = MemoryConsumer::new("gpusort sort: Parquet row groups being read")
        .register(&ctx.runtime_env().memory_pool);
    if let Some(bytes) = inputs.max_row_group_bytes {
        scan.grow(memory::scan_bytes(pool, bytes, partitions));
    }
    let input = files_table::read_files(&ctx, &inputs, job.union_by_name).await?;
    crate::trace::event(|| "plan: inputs registered".to_string());
    let schema = Arc::new(input.schema().as_arrow().clone());
    resolve_columns(&mut keys, &schema)?;
    let sort: Vec<SortExpr> = keys.iter().map(sort_expr).collect();
    let sorted = input
        .clone()
        .sort(sort.clone())
        .and_then(|df| df.limit(0, job.limit))
        .map_err(PipelineError::execution("planning the sort"))?;
    let plan = sorted
        .create_physical_plan()
        .await
        .map_err(PipelineError::execution("planning the sort"))?;
    crate::trace::event(|| {
        format!(
            "plan: physical plan made\n{}",
            datafusion::physical_plan::displayable(plan.as_ref()).indent(true)
        )
    });
    let mut output = ParquetOutput::create(
        output_options,
        plan.schema(),
        &keys,
        &ctx.runtime_env().memory_pool,
        progress.written_bytes_counter(),
    )?;
    let resident = output.resident_request(job.resident_pages);
    let plan = leave_on_device(plan, resident.as_ref());
    progress.watch(Arc::clone(&plan));
    let planned = started.elapsed();
    crate::trace::event(|| "plan: output opened".to_string());
    // Parquet footers give the rows the output must hold (CSV: the rows read, once known).
    let expected = inputs
        .rows
        .map(|rows| job.limit.map_or(rows, |limit| rows.min(limit as u64)));
    let ranges = range_count(
        job.key_ranges,
        pool,
        (inputs.decoded_bytes, inputs.rows, schema.fields().len()),
        job.limit,
        (partitions, cuda),
    );
    // Resolved above: every key names a column.
    let key_columns: Vec<usize> = keys
        .iter()
        .filter_map(|key| schema.index_of(&key.column).ok())
        .collect();
    let key_types: Vec<DataType> = key_columns
        .iter()
        .map(|&c| schema.field(c).data_type().clone())
        .collect();
    let held = hold_on_device(&HoldQuestion {
        choice: job.key_ranges,
        resident: resident.as_ref().is_some_and(|request| {
            (0..schema.fields().len())
                .all(|c| request.columns().contains(&c) || key_columns.contains(&c))
        }),
        devices,
        pool,
        ranges,
        rows: inputs.rows,
        decoded_bytes: inputs.decoded_bytes,
        columns: schema.fields().len(),
        key_types: &key_types,
    });
    // Held on the device, the input is sorted as one run in memory: no key ranges.
    let ranges = match (held, &resident) {
        (Some(payload), Some(request)) => {
            request.allow_holding_input(payload);
            crate::trace::event(|| "plan: the input is held on the device".to_string());
            1
        }
        _ => ranges,
    };
    let spill_failed = |e: PipelineError| match e {
        // The sort's errors, not the writer's (its disk may be full too).
        PipelineError::Execution {
            stage: "sorting" | "reading and sorting" | "reading and spilling by key range",
            ref source,
        } => spill::spill_error(source, &spill_root, max_spill).unwrap_or(e),
        e => e,
    };
    let ranged = match (ranges > 1, inputs.rows) {
        (true, Some(rows)) => ranged_job::plan_ranges(
            &ctx,
            &input,
            (&keys, &sort),
            ranged_job::RangeSizes {
                rows,
                bytes_per_row,
                pool,
                ranges,
                batch_rows,
                compression: job.spill_compression,
            },
            progress,
        )
        .await
        .map_err(spill_failed)?,
        _ => None,
    };
    // The scan has read everything once the rows are spilled by range.
    let scan = ranged.is_none().then_some(scan);
    let (plans, ahead) = match &ranged {
        // A key range's sort leaves nothing on the device: its run's input would stay
        // held until its last row group is written, while the next range is read.
        Some(ranged) => (ranged.plans.clone(), ranged.ahead.clone()),
        None => (vec![Arc::clone(&plan)], vec![false]),
    };
    let sorted = PlanOutputs::new(&plans, &ahead, &ctx);
    let (written, first_batch) =
        run_and_write(job, &plans, sorted, output, expected, scan, progress)
            .await
            .map_err(spill_failed)?;
    drop(spill_folder);
    let (backend, mut algorithm, sort) = describe_sort(&plans, &rule);
    if let Some(ranged) = &ranged {
        algorithm = format!("{algorithm}, {}", ranged.describe());
    }
    let done = started.elapsed();
    let first_batch = first_batch.map_or(done, |t| t.duration_since(started));
    let stages = StageTimes {
        plan: planned,
        read_and_sort: first_batch.saturating_sub(planned),
        sort,
        write: done.saturating_sub(first_batch),
    };
    Ok(SortSummary {
        rows: written.rows,
        input_bytes: inputs.bytes(),
        output: written,
        elapsed: started.elapsed(),
        backend,
        algorithm,
        stages,
        peak_memory: memory::peak_resident_bytes(),
    })
}

/// Environment variable that sets [`SortJob::resident_pages`] (`--page-encoding device`
/// only): `0` none, `fixed` the fixed-width columns only, anything else the default (all).
pub const RESIDENT_PAGES_VAR: &str = "GPUSORT_RESIDENT_PAGES";

/// Which columns of a sort whose pages the device builds stay on the device for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepOnDevice {
    /// None: every column comes back to the host and goes up again in its page job.
    Off,
    /// The fixed-width ones: byte-like columns come to the host and go up again.
    FixedWidth,
    /// Byte-like (view) columns too, as their bytes and offsets (the default: on SF10
    /// `lineitem` the fastest and the least host CPU).
    All,
}

impl KeepOnDevice {
    /// From [`RESIDENT_PAGES_VAR`]: `0` [`Self::Off`], `fixed` [`Self::FixedWidth`], else
    /// [`Self::All`].
    pub fn from_env() -> Self {
        match std::env::var(RESIDENT_PAGES_VAR).as_deref() {
            Ok("0") => Self::Off,
            Ok("fixed") => Self::FixedWidth,
            _ => Self::All,
        }
    }
}

/// `plan`, whose sort (its root) leaves `request`'s columns on the device for the writer
/// where a run of it is gathered there (`gather/resident.rs`); unchanged without a request
/// or where its root is not gpusort's sort.
fn leave_on_device(
    plan: Arc<dyn ExecutionPlan>,
    request: Option<&Arc<ResidentRequest>>,
) -> Arc<dyn ExecutionPlan> {
    let Some(request) = request else {
        return plan;
    };
    match plan.downcast_ref::<GpuSortExec>() {
        Some(sort) => {
            crate::trace::event(|| {
                format!(
                    "plan: the sort may leave {} columns on the device for the writer",
                    request.columns().len()
                )
            });
            Arc::new(sort.clone().with_resident(Arc::clone(request)))
        }
        None => {
            crate::trace::event(|| {
                format!(
                    "plan: {} above the sort: nothing left on the device",
                    plan.name()
                )
            });
            plan
        }
    }
}

fn output_options(job: &SortJob) -> Result<OutputOptions, PipelineError> {
    if job.row_group_rows == 0 {
        return Err(PipelineError::BadOption(
            "--row-group-rows must be at least 1".into(),
        ));
    }
    if job.max_rows_per_file == Some(0) {
        return Err(PipelineError::BadOption(
            "--max-rows-per-file must be at least 1".into(),
        ));
    }
    Ok(OutputOptions {
        path: job.output.clone(),
        max_rows_per_file: job.max_rows_per_file,
        row_group_rows: job.row_group_rows,
        compression: parse_compression(&job.compression)?,
        overwrite: job.overwrite,
        sync: job.sync,
        device_pages: job.page_encoding == PageEncoding::Device,
    })
}

/// `zstd`, `gzip` and `brotli` without a level get a fast default level.
fn parse_compression(text: &str) -> Result<Compression, PipelineError> {
    let lower = text.trim().to_ascii_lowercase();
    let with_level = match lower.as_str() {
        "zstd" => "zstd(1)".to_string(),
        "gzip" => "gzip(6)".to_string(),
        "brotli" => "brotli(1)".to_string(),
        "none" => "uncompressed".to_string(),
        _ => lower,
    };
    with_level.parse().map_err(|e| {
        PipelineError::BadOption(format!(
            "--compression '{text}': {e} (one of uncompressed, snappy, lz4, lz4_raw, zstd(1..22), \
             gzip(0..9), brotli(0..11))"
        ))
    })
}

/// Inputs of fewer rows than this sort on the CPU backend when the choice is `auto`: the
/// host sorts them in milliseconds, while a fresh process needs 0.3 s to open the device
/// and 0.12 s to close it (docs/performance.md, session 29). The planner's own threshold
/// for sorts in SQL (`gpu_sort.min_rows`).
const SMALL_INPUT_ROWS: u64 = 100_000;

/// The backend for a job asking for `choice` over `rows` input rows (`None`: not known,
/// as for CSV).
fn backend_for(choice: BackendChoice, rows: Option<u64>) -> BackendChoice {
    match (choice, rows) {
        (BackendChoice::Auto, Some(rows)) if rows < SMALL_INPUT_ROWS => BackendChoice::Cpu,
        _ => choice,
    }
}

/// The job's session: its memory pool of `pool` bytes (no limit: `None`), its scan in
/// `partitions` partitions, batches of `batch_rows` rows (unless the environment sets
/// `DATAFUSION_EXECUTION_BATCH_SIZE`), spills into `spill.0` up to `spill.1` bytes,
/// gpusort's rule on `backend`.
fn session(
    job: &SortJob,
    backend: BackendChoice,
    pool: Option<usize>,
    partitions: usize,
    batch_rows: usize,
    spill: (&std::path::Path, u64),
    rule: Arc<GpuSortRule>,
) -> Result<SessionContext, PipelineError> {
    let config = GpuSortConfig {
        backend,
        devices: job.devices,
        // The user asked for gpusort: small inputs too.
        min_rows: 0,
        topk: job.limit.is_some_and(|limit| limit > TOPK_MAX_ROWS),
        ..Default::default()
    };
    // DataFusion's options may come from the environment (`DATAFUSION_EXECUTION_BATCH_SIZE`
    // and the like), as in DataFusion's own tools.
    let mut session_config = SessionConfig::from_env()
        .map_err(PipelineError::execution("reading DATAFUSION_* options"))?
        .with_target_partitions(partitions.max(1))
        .with_spill_compression(job.spill_compression);
    if std::env::var_os("DATAFUSION_EXECUTION_BATCH_SIZE").is_none() {
        session_config = session_config.with_batch_size(batch_rows);
    }
    // Ties keep the files' own order, so the scan must deliver it: DataFusion's sort
    // pushdown would read a file's row groups in the order of their statistics (reversed
    // for DESC, to help a TopK stop early), and its work stealing lets a scan partition read
    // a file planned for another one, whichever is idle first (ties then came out in an
    // order that changed from run to run).
    let options = session_config.options_mut();
    options.optimizer.enable_sort_pushdown = false;
    options.execution.enable_file_stream_work_stealing = false;
    let disk = DiskManagerBuilder::default()
        .with_mode(DiskManagerMode::Directories(vec![spill.0.to_path_buf()]))
        .with_max_temp_directory_size(spill.1);
    let mut runtime = RuntimeEnvBuilder::new().with_disk_manager_builder(disk);
    if let Some(pool) = pool {
        runtime = runtime.with_memory_limit(pool, 1.0);
    }
    let runtime = runtime
        .build_arc()
        .map_err(PipelineError::execution("starting the runtime"))?;
    let state = SessionStateBuilder::new()
        .with_config(session_config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_gpu_sort_rule(config, rule)
        .build();
    Ok(SessionContext::new_with_state(state))
}

fn sort_expr(key: &SortKey) -> SortExpr {
    Expr::Column(Column::new_unqualified(&key.column)).sort(!key.descending, key.nulls_first)
}

/// The CPU time this process has used so far, for the timeline.
fn cpu_time() -> String {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    format!(
        "CPU so far {:.2} s user, {:.2} s system",
        seconds(usage.ru_utime),
        seconds(usage.ru_stime)
    )
}

/// The timeline ([`crate::trace`]) marks every this many rows handed to the writer.
const TRACE_ROWS: usize = 10 << 20;

/// Streams the plan's batches to a writer thread; commits the output when both succeed
/// and it holds the `expected` rows (when known). Also returns when the first sorted batch
/// arrived. `scan` (the scan's memory in the pool) is let go then: the sort has read all
/// its input.
async fn run_and_write(
    job: &SortJob,
    plans: &[Arc<dyn ExecutionPlan>],
    mut sorted: PlanOutputs<'_>,
    mut output: ParquetOutput,
    expected: Option<u64>,
    mut scan: Option<MemoryReservation>,
    progress: &Progress,
) -> Result<(WrittenOutput, Option<Instant>), PipelineError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(4);
    let written = progress.written_counter();
    let fail_after = job.inject_write_failure_after;
    let writer = tokio::task::spawn_blocking(move || {
        let mut idle = Duration::ZERO;
        let mut waiting = Instant::now();
        for batch in rx {
            idle += waiting.elapsed();
            output.write(&batch)?;
            waiting = Instant::now();
            written.store(output.rows(), std::sync::atomic::Ordering::Relaxed);
            if fail_after.is_some_and(|n| output.rows() >= n) {
                // As a full disk would fail it.
                let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
                return Err(PipelineError::io("writing (injected)", output.open_path())(
                    full,
                ));
            }
        }
        crate::trace::event(|| {
            format!(
                "writer: waited {:.0} ms for batches",
                idle.as_secs_f64() * 1e3
            )
        });
        Ok(output)
    });
    let mut first_batch = None;
    let mut received = 0;
    let mut lose_one = job.inject_lost_batch;
    let produced = async {
        let (mut awaiting, mut sending) = (Duration::ZERO, Duration::ZERO);
        let mut asked = Instant::now();
        while let Some(batch) = sorted.next().await {
            awaiting += asked.elapsed();
            let batch = batch?;
            if first_batch.is_none() {
                first_batch = Some(Instant::now());
                crate::trace::event(|| format!("pipeline: first batch; {}", cpu_time()));
            }
            scan.take();
            received += batch.num_rows();
            if received / TRACE_ROWS != (received - batch.num_rows()) / TRACE_ROWS {
                crate::trace::event(|| format!("pipeline: {received} rows sorted"));
            }
            if lose_one && batch.num_rows() > 0 {
                lose_one = false;
                continue;
            }
            let handing = Instant::now();
            if tx.send(batch).is_err() {
                break; // the writer failed; its error is reported below
            }
            sending += handing.elapsed();
            asked = Instant::now();
        }
        crate::trace::event(|| {
            format!(
                "pipeline: waited {:.0} ms for batches (the first included), {:.0} ms for the writer",
                awaiting.as_secs_f64() * 1e3,
                sending.as_secs_f64() * 1e3
            )
        });
        Ok::<_, PipelineError>(())
    }
    .await;
    drop(tx);
    crate::trace::event(|| "pipeline: sort output ended".to_string());
    // Wait for the writer either way: its output (and temp files) must be gone or
    // committed before this returns.
    let output = writer.await.map_err(|e| {
        PipelineError::execution("writing")(datafusion::error::DataFusionError::External(Box::new(
            e,
        )))
    })?;
    produced?;
    crate::trace::event(|| format!("pipeline: written; {}", cpu_time()));
    let output = output?;
    let expected = expected.or_else(|| {
        // Every row read must be written (without a limit).
        let [plan] = plans else { return None };
        job.limit.is_none().then(|| scanned_rows(plan)).flatten()
    });
    if let Some(expected) = expected {
        if output.rows() != expected {
            // Dropping the output removes it; an old one stays.
            return Err(PipelineError::RowCountMismatch {
                written: output.rows(),
                expected,
            });
        }
    }
    let committed = output.commit()?;
    crate::trace::event(|| "pipeline: committed".to_string());
    Ok((committed, first_batch))
}

/// The sorted batches of a job's plans, one plan after the other: a plan allowed to start
/// ahead starts (reading and sorting its rows, up to a few batches of output) while the
/// one before it is still handing its batches on; the others when it has ended.
struct PlanOutputs<'a> {
    plans: std::iter::Zip<
        std::slice::Iter<'a, Arc<dyn ExecutionPlan>>,
        std::iter::Copied<std::slice::Iter<'a, bool>>,
    >,
    ctx: &'a SessionContext,
    current: Option<datafusion::physical_plan::SendableRecordBatchStream>,
    next: Option<datafusion::physical_plan::SendableRecordBatchStream>,
    started: bool,
}

/// Batches a plan started ahead may hold before the writer takes them.
const AHEAD_BATCHES: usize = 2;

impl<'a> PlanOutputs<'a> {
    /// `ahead[i]`: whether `plans[i]` may start while `plans[i - 1]` is emitting.
    fn new(
        plans: &'a [Arc<dyn ExecutionPlan>],
        ahead: &'a [bool],
        ctx: &'a SessionContext,
    ) -> Self {
        Self {
            plans: plans.iter().zip(ahead.iter().copied()),
            ctx,
            current: None,
            next: None,
            started: false,
        }
    }

    /// Starts the next plan: as the current one (`ahead` false), or ahead of it where that
    /// plan may start ahead (else it waits for the current one to end).
    fn start(&mut self, ahead: bool) -> datafusion::error::Result<()> {
        if ahead && !self.plans.clone().next().is_some_and(|(_, may)| may) {
            return Ok(());
        }
        let Some((plan, _)) = self.plans.next() else {
            return Ok(());
        };
        let stream = execute_stream(Arc::clone(plan), self.ctx.task_ctx())?;
        if ahead {
            self.next = Some(datafusion::physical_plan::common::spawn_buffered(
                stream,
                AHEAD_BATCHES,
            ));
        } else {
            self.current = Some(stream);
        }
        Ok(())
    }

    async fn next(&mut self) -> Option<Result<RecordBatch, PipelineError>> {
        let wrap = PipelineError::execution("reading and sorting");
        if !self.started {
            self.started = true;
            if let Err(e) = self.start(false).and_then(|_| self.start(true)) {
                return Some(Err(PipelineError::execution("sorting")(e)));
            }
        }
        loop {
            let current = self.current.as_mut()?;
            match current.next().await {
                Some(batch) => return Some(batch.map_err(wrap)),
                None => {
                    self.current = self.next.take();
                    // The next plan, if it could not start ahead, starts now.
                    let started = match self.current {
                        Some(_) => Ok(()),
                        None => self.start(false),
                    };
                    if self.current.is_some() {
                        crate::trace::event(|| "ranges: the next key range's batches".into());
                    }
                    if let Err(e) = started.and_then(|_| self.start(true)) {
                        return Some(Err(PipelineError::execution("sorting")(e)));
                    }
                }
            }
        }
    }
}

/// The rows the plan's scans produced (the sum over its leaves), when they count them.
fn scanned_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<u64> {
    let mut total = Some(0u64);
    let _ = plan.apply(|node| {
        if node.children().is_empty() {
            let rows = node.metrics().and_then(|m| m.output_rows());
            total = total.zip(rows).map(|(sum, rows)| sum + rows as u64);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    total
}

/// The backend, algorithms and operator time of the plan's sort, after it ran.
fn describe_sort(
    plans: &[Arc<dyn ExecutionPlan>],
    rule: &GpuSortRule,
) -> (String, String, Duration) {
    let mut backend = None;
    let mut all_metrics = Vec::new();
    for plan in plans {
        crate::trace::event(|| {
            format!(
                "plan with its metrics:\n{}",
                datafusion::physical_plan::display::DisplayableExecutionPlan::with_metrics(
                    plan.as_ref()
                )
                .indent(true)
            )
        });
        let _ = plan.apply(|node| {
            if let Some(exec) = node.downcast_ref::<GpuSortExec>() {
                backend.get_or_insert(exec.backend_name());
                all_metrics.extend(node.metrics());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    let Some(backend) = backend else {
        let why = rule
            .last_decisions()
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        return (
            format!("datafusion ({why})"),
            "datafusion".into(),
            Duration::ZERO,
        );
    };
    let count = |name: &str| {
        all_metrics
            .iter()
            .filter_map(|m| m.sum_by_name(name))
            .map(|v| v.as_usize())
            .sum::<usize>()
    };
    // Radix runs: OneSweep on the GPU, the CPU backend's LSD radix sort elsewhere.
    let radix = if backend == "cuda" {
        "onesweep"
    } else {
        "lsd radix"
    };
    let mut parts: Vec<String> = [
        (radix, "algorithm_onesweep"),
        ("locality", "algorithm_locality"),
        ("segmented", "algorithm_segmented"),
    ]
    .iter()
    .filter(|(_, metric)| count(metric) > 0)
    .map(|(name, _)| name.to_string())
    .collect();
    if parts.is_empty() {
        parts.push("none (no rows)".into());
    }
    // Runs merged inside each plan's sort (a sort of one run merges nothing).
    let runs: usize = all_metrics
        .iter()
        .filter_map(|m| m.sum_by_name("runs"))
        .map(|v| v.as_usize())
        .filter(|&runs| runs > 1)
        .sum();
    if runs > 1 {
        parts.push(format!("{runs} runs merged"));
    }
    let spills: usize = all_metrics.iter().filter_map(|m| m.spill_count()).sum();
    if spills > 0 {
        parts.push(format!("{spills} spill files"));
    }
    let early = count("early_columns");
    if early > 0 {
        parts.push(format!("{early} columns up while read"));
    }
    if count("held_arrays") > 0 {
        parts.push("input held on the device".to_string());
    }
    let fallbacks = count("gpu_fallbacks");
    if fallbacks > 0 {
        parts.push(format!("{fallbacks} runs fell back to the CPU"));
    }
    let nanos: usize = [
        "encode_time",
        "h2d_time",
        "device_sort_time",
        "d2h_time",
        "gather_time",
    ]
    .iter()
    .map(|name| count(name))
    .sum();
    (
        backend.to_string(),
        parts.join(", "),
        Duration::from_nanos(nanos as u64),
    )
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_names_and_default_levels() {
        assert_eq!(
            parse_compression("zstd").unwrap(),
            parse_compression("ZSTD(1)").unwrap()
        );
        assert_eq!(
            parse_compression("none").unwrap(),
            Compression::UNCOMPRESSED
        );
        assert_eq!(parse_compression("snappy").unwrap(), Compression::SNAPPY);
        let err = parse_compression("zip").unwrap_err().to_string();
        assert!(err.contains("--compression 'zip'"), "{err}");
    }

    #[test]
    fn small_inputs_sort_on_the_cpu_unless_the_device_is_asked_for() {
        use BackendChoice::{Auto, Cpu, Cuda};
        assert_eq!(backend_for(Auto, Some(SMALL_INPUT_ROWS - 1)), Cpu);
        assert_eq!(backend_for(Auto, Some(SMALL_INPUT_ROWS)), Auto);
        // Unknown sizes (CSV) count as large.
        assert_eq!(backend_for(Auto, None), Auto);
        assert_eq!(backend_for(Cuda, Some(10)), Cuda);
        assert_eq!(backend_for(Cpu, Some(1 << 40)), Cpu);
        assert_eq!(
            SMALL_INPUT_ROWS,
            GpuSortConfig::default().min_rows as u64,
            "the planner's threshold"
        );
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
