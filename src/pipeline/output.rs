//! Atomic Parquet output: one file, or a directory of files of at most N rows.
//!
//! Everything is written under a temporary name beside the target (same file system),
//! flushed to disk (fsync; unless [`OutputOptions::sync`] is off) and renamed into place by
//! [`ParquetOutput::commit`], which then flushes the directory; dropping an uncommitted output removes what it wrote, so an
//! error, a panic or a cancelled job leaves no partial output. An existing target is
//! replaced only when asked, and only once the new output is complete: a file by one
//! atomic rename over it, a directory of files by moving the old one aside first.
//!
//! Columns and row groups are encoded in parallel ([`ParallelFileWriter`]), within memory
//! counted in the session's pool ([`WriteMemory`]). Every file's metadata
//! declares the sort order (`sorting_columns`), so that DataFusion
//! (and other readers) reading it back know it is sorted.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, RecordBatch};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::execution::memory_pool::MemoryPool;
use datafusion::parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::metadata::{ParquetMetaDataReader, SortingColumn};
use datafusion::parquet::file::properties::WriterProperties;

use super::device_jobs::{resident_columns, ColumnPageCounts, PageCounts};
use super::encodings::with_integer_deltas;
use super::error::PipelineError;
use super::leftovers::{parent_dir, remove_path, temp_sibling, JobLock};
use super::order_by::SortKey;
use super::row_groups::ParallelFileWriter;
use super::write_memory::WriteMemory;
use super::writeback::WritebackFile;
use super::KeepOnDevice;
use crate::gather::{ResidentColumns, ResidentRequest};

/// Where and how the sorted rows are written.
#[derive(Debug, Clone)]
pub struct OutputOptions {
    /// The output file, or directory when `max_rows_per_file` is set.
    pub path: PathBuf,
    /// Write a directory of files of at most this many rows.
    pub max_rows_per_file: Option<usize>,
    /// Rows per row group.
    pub row_group_rows: usize,
    /// Column compression.
    pub compression: Compression,
    /// Replace an existing output.
    pub overwrite: bool,
    /// Flush every file to disk (fsync) before the output is renamed into place, so that
    /// once the job has succeeded a crash cannot lose or truncate it. Off, the output is
    /// still renamed into place whole and atomically, but its bytes may sit in the page
    /// cache when the job ends, as DuckDB's and DataFusion's `COPY` leave theirs.
    pub sync: bool,
    /// Build the pages the device can on the device ([`super::PageEncoding::Device`]).
    pub device_pages: bool,
}

impl OutputOptions {
    /// Fails early (before any sorting) when the target cannot be written as asked.
    pub fn check_target(&self) -> Result<(), PipelineError> {
        let bad = |message: &str| PipelineError::BadOutput {
            path: self.path.clone(),
            message: message.to_string(),
        };
        if self.path.file_name().is_none() {
            return Err(bad("names no file"));
        }
        let parent = parent_dir(&self.path);
        if !parent.is_dir() {
            return Err(bad("its directory does not exist"));
        }
        match (
            self.path.exists(),
            self.path.is_dir(),
            self.max_rows_per_file,
        ) {
            (false, _, _) => Ok(()),
            (true, true, None) => Err(bad(
                "is a directory; pass --max-rows-per-file to write a directory of files",
            )),
            (true, false, Some(_)) => Err(bad(
                "is a file; --max-rows-per-file writes a directory of files",
            )),
            (true, _, _) if !self.overwrite => Err(bad("exists; pass --overwrite to replace it")),
            (true, _, _) => Ok(()),
        }
    }
}

/// Facts about a committed output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenOutput {
    /// The files written, in row order.
    pub files: Vec<PathBuf>,
    /// Rows written.
    pub rows: u64,
    /// Bytes of all files.
    pub bytes: u64,
    /// Column chunks whose pages the device built, and those it was to build that the
    /// CPU encoded (both 0 unless [`OutputOptions::device_pages`]).
    pub device_chunks: u64,
    /// See `device_chunks`.
    pub device_chunks_on_host: u64,
    /// Of `device_chunks`, those built from the sort's own copy of their column on the
    /// device (its rows never came to the host).
    pub device_chunks_resident: u64,
    /// The same by column, in schema order: the columns whose pages the device was asked
    /// to build (every other column's pages are the CPU's).
    pub device_columns: Vec<(String, ColumnPageCounts)>,
}

impl WrittenOutput {
    /// Which columns' pages the device built, chunks by column (`l_orderkey 60, l_tax 60
    /// (60 with a dictionary)`), or `None` where it was asked for none.
    pub fn device_pages(&self) -> Option<String> {
        if self.device_columns.is_empty() {
            return None;
        }
        let columns: Vec<String> = self
            .device_columns
            .iter()
            .map(|(name, counts)| {
                let mut notes = Vec::new();
                if counts.dictionary > 0 {
                    notes.push(format!("{} with a dictionary", counts.dictionary));
                }
                if counts.resident > 0 {
                    notes.push(format!("{} from the sort's copy", counts.resident));
                }
                if counts.host > 0 {
                    notes.push(format!("{} more by the CPU", counts.host));
                }
                match notes.is_empty() {
                    true => format!("{name} {}", counts.device),
                    false => format!("{name} {} ({})", counts.device, notes.join(", ")),
                }
            })
            .collect();
        Some(columns.join(", "))
    }
}

/// An output being written.
pub struct ParquetOutput {
    options: OutputOptions,
    schema: SchemaRef,
    properties: WriterProperties,
    /// The temporary file (single-file output) or directory being written.
    temp: PathBuf,
    /// Held on `temp` while the output lives: a later job does not take it for a killed
    /// job's leftover.
    _lock: Option<JobLock>,
    writer: Option<ParallelFileWriter<BufWriter<WritebackFile>>>,
    /// Bytes written to every file so far, for the progress display.
    written_bytes: Arc<AtomicU64>,
    /// Files of a directory output still being finished (their last row groups encoded,
    /// the footer written, the file flushed) on threads of their own while the next file
    /// fills.
    closing: Vec<std::thread::JoinHandle<Result<(), PipelineError>>>,
    /// What the writer holds, in the pool; shared by every file.
    memory: Arc<WriteMemory>,
    /// Chunks whose pages the device built (or was to build), every file's.
    page_counts: Arc<PageCounts>,
    rows_in_file: usize,
    /// With device pages: the columns whose pages the writer would build from a sorted
    /// run's copy on the device, and the rows of each run that left them there taken so
    /// far (`gather/resident.rs`).
    resident: Option<Arc<ResidentRequest>>,
    resident_rows: HashMap<u64, usize>,
    /// Finished or open files, relative to `temp` (directory output).
    file_names: Vec<String>,
    rows: u64,
    committed: bool,
}

impl ParquetOutput {
    /// Starts an output of `schema` sorted by `keys`, its memory counted in `pool` (the
    /// session's, so that the sort and the writer share one limit), adding the bytes its
    /// files receive to `written_bytes` (for a progress display).
    pub fn create(
        options: OutputOptions,
        schema: SchemaRef,
        keys: &[SortKey],
        pool: &Arc<dyn MemoryPool>,
        written_bytes: Arc<AtomicU64>,
    ) -> Result<Self, PipelineError> {
        check_writable(&schema)?;
        let columns = ArrowSchemaConverter::new()
            .convert(&schema)
            .map_err(write_error)?;
        let properties = with_integer_deltas(WriterProperties::builder(), &columns)
            .set_max_row_group_row_count(Some(options.row_group_rows))
            .set_compression(options.compression)
            .set_sorting_columns(Some(sorting_columns(&schema, keys)))
            .build();
        let temp = temp_sibling(&options.path, "tmp");
        if options.max_rows_per_file.is_some() {
            std::fs::create_dir(&temp).map_err(PipelineError::io("creating", &temp))?;
        } else {
            File::create(&temp).map_err(PipelineError::io("creating", &temp))?;
        }
        let lock = JobLock::hold(&temp).ok();
        let mut output = Self {
            resident: None,
            resident_rows: HashMap::new(),
            memory: Arc::new(WriteMemory::new(pool)),
            page_counts: Arc::new(PageCounts::default()),
            options,
            schema,
            properties,
            temp,
            _lock: lock,
            writer: None,
            written_bytes,
            closing: Vec::new(),
            rows_in_file: 0,
            file_names: Vec::new(),
            rows: 0,
            committed: false,
        };
        output.open_next_file()?;
        Ok(output)
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The columns (those `keep` names) whose pages this output builds from a sorted run's
    /// copy on the device, where it builds pages there: for the sort that feeds it
    /// ([`GpuSortExec::with_resident`](crate::exec::GpuSortExec::with_resident)).
    pub fn resident_request(&mut self, keep: KeepOnDevice) -> Option<Arc<ResidentRequest>> {
        let byte_arrays = match keep {
            KeepOnDevice::Off => return None,
            KeepOnDevice::FixedWidth => false,
            KeepOnDevice::All => true,
        };
        if !self.options.device_pages {
            return None;
        }
        let columns = ArrowSchemaConverter::new().convert(&self.schema).ok()?;
        let columns = resident_columns(&self.schema, &columns, &self.properties, byte_arrays);
        self.resident = (!columns.is_empty()).then(|| Arc::new(ResidentRequest::new(columns)));
        self.resident.clone()
    }

    /// Appends `batch`, starting new files at the row limit.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), PipelineError> {
        let run = match &self.resident {
            Some(request) => request
                .run_of(batch)
                .map_err(PipelineError::execution("writing"))?,
            None => None,
        };
        let first = run
            .as_ref()
            .map_or(0, |(id, _)| *self.resident_rows.entry(*id).or_default());
        self.write_rows(batch, run.as_ref().map(|(_, run)| (run, first)))?;
        if let Some((id, run)) = run {
            let taken = first + batch.num_rows();
            if taken > run.rows() {
                return Err(PipelineError::execution("writing")(
                    datafusion::error::DataFusionError::Internal(format!(
                        "gpusort: {taken} rows of a sorted run of {}",
                        run.rows()
                    )),
                ));
            }
            self.resident_rows.insert(id, taken);
            if taken == run.rows() {
                // The row groups that hold its rows keep what they need of it.
                if let Some(request) = &self.resident {
                    request.release(id);
                }
            }
        }
        Ok(())
    }

    /// [`Self::write`] of a batch whose columns `resident`'s run holds are its rows from
    /// `first` on.
    fn write_rows(
        &mut self,
        batch: &RecordBatch,
        resident: Option<(&Arc<dyn ResidentColumns>, usize)>,
    ) -> Result<(), PipelineError> {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let room = match self.options.max_rows_per_file {
                Some(limit) if self.rows_in_file >= limit => {
                    self.close_file()?;
                    self.open_next_file()?;
                    limit
                }
                Some(limit) => limit - self.rows_in_file,
                None => usize::MAX,
            };
            let take = room.min(batch.num_rows() - offset);
            let writer = self.writer.as_mut().expect("an open file while writing");
            let resident = resident.map(|(run, first)| (run, first + offset));
            writer
                .write_rows(&batch.slice(offset, take), resident)
                .map_err(write_error)?;
            self.rows_in_file += take;
            self.rows += take as u64;
            offset += take;
        }
        Ok(())
    }

    /// Finishes the last file and moves the output into place: files flushed to disk
    /// first (and, for a directory of files, the directory), then one rename over the
    /// target (where Linux can swap two names at once, a directory too: a reader sees the
    /// old output or the new one), then the parent directory's entry flushed. Where the
    /// names cannot be swapped, an old directory is moved aside first and put back if the
    /// rename fails. The old output is removed before this returns, whatever happens.
    pub fn commit(mut self) -> Result<WrittenOutput, PipelineError> {
        self.close_file()?;
        self.finish_closing()?;
        self.check_footers()?;
        let target = self.options.path.clone();
        if self.options.sync && self.options.max_rows_per_file.is_some() {
            sync_directory(&self.temp)
                .map_err(PipelineError::io("flushing the directory", &self.temp))?;
        }
        let replaced = replace(&self.temp, &target)?;
        self.committed = true;
        crate::trace::event(|| "output: renamed into place".to_string());
        let flushed = if self.options.sync {
            sync_directory(&parent_dir(&target))
        } else {
            Ok(())
        };
        if let Some(old) = replaced {
            let _ = remove_path(&old);
            crate::trace::event(|| "output: the replaced output removed".to_string());
        }
        flushed.map_err(|e| PipelineError::BadOutput {
            path: target.clone(),
            message: format!(
                "the new output is in place (the old one is removed), but flushing its \
                 directory entry to disk failed, so a crash now could still lose it: {e}"
            ),
        })?;
        crate::trace::event(|| "output: directory flushed".to_string());
        let files: Vec<PathBuf> = if self.options.max_rows_per_file.is_some() {
            self.file_names.iter().map(|n| target.join(n)).collect()
        } else {
            vec![target]
        };
        let mut bytes = 0;
        for file in &files {
            bytes += std::fs::metadata(file)
                .map_err(PipelineError::io("reading the size of", file))?
                .len();
        }
        Ok(WrittenOutput {
            files,
            rows: self.rows,
            bytes,
            device_chunks: self.page_counts.device(),
            device_chunks_on_host: self.page_counts.host(),
            device_chunks_resident: self.page_counts.resident(),
            device_columns: self.page_counts.by_column(),
        })
    }

    /// The rows the finished files' footers hold must be the rows handed to the writer.
    fn check_footers(&self) -> Result<(), PipelineError> {
        let files: Vec<PathBuf> = match self.options.max_rows_per_file {
            Some(_) => self.file_names.iter().map(|n| self.temp.join(n)).collect(),
            None => vec![self.temp.clone()],
        };
        let mut rows = 0u64;
        for file in &files {
            let opened = File::open(file).map_err(PipelineError::io("reading back", file))?;
            let footer = ParquetMetaDataReader::new()
                .parse_and_finish(&opened)
                .map_err(write_error)?;
            rows += footer.file_metadata().num_rows().max(0) as u64;
        }
        if rows != self.rows {
            return Err(PipelineError::RowCountMismatch {
                written: rows,
                expected: self.rows,
            });
        }
        Ok(())
    }

    fn open_next_file(&mut self) -> Result<(), PipelineError> {
        if self.options.max_rows_per_file.is_some() {
            let name = format!("part-{:05}.parquet", self.file_names.len());
            self.file_names.push(name);
        }
        let path = self.open_path();
        // A one-file output's temporary file was made by `create` (empty, and locked);
        // the parts of a directory output are new files. Neither is truncated on opening:
        // ext4 flushes every dirty page of a file truncated to nothing when it is closed
        // (`auto_da_alloc`), which made the close of a `--no-fsync` job's 1.8 GB file take
        // 0.7 to 0.9 s.
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(PipelineError::io("creating", &path))?;
        let writer = ParallelFileWriter::try_new(
            // parquet buffers the small writes (page headers, metadata) itself; pages
            // this size or larger go to the file without a copy in between.
            BufWriter::with_capacity(
                64 << 10,
                WritebackFile::new(file, Arc::clone(&self.written_bytes), self.options.sync),
            ),
            Arc::clone(&self.schema),
            self.properties.clone(),
            Arc::clone(&self.memory),
            self.options
                .device_pages
                .then(|| Arc::clone(&self.page_counts)),
        )
        .map_err(write_error)?;
        self.writer = Some(writer);
        self.rows_in_file = 0;
        Ok(())
    }

    /// Finishes the open file and flushes it to disk (so that the rename in `commit` never
    /// publishes a file whose bytes a crash could still lose; unless `sync` is off), on a
    /// thread of its own; [`Self::finish_closing`] waits for it.
    fn close_file(&mut self) -> Result<(), PipelineError> {
        if let Some(writer) = self.writer.take() {
            let path = self.open_path();
            let sync = self.options.sync;
            let closing = std::thread::Builder::new()
                .name("gpusort-close-file".into())
                .spawn({
                    let path = path.clone();
                    move || close_and_flush(writer, &path, sync)
                })
                .map_err(PipelineError::io("starting a thread to close", path))?;
            self.closing.push(closing);
        }
        Ok(())
    }

    /// Waits for every file being closed; the first error.
    fn finish_closing(&mut self) -> Result<(), PipelineError> {
        let mut result = Ok(());
        for closing in self.closing.drain(..) {
            let closed = closing.join().unwrap_or_else(|_| {
                Err(PipelineError::Execution {
                    stage: "writing Parquet",
                    source: datafusion::error::DataFusionError::Internal(
                        "gpusort: closing an output file panicked".into(),
                    ),
                })
            });
            if result.is_ok() {
                result = closed;
            }
        }
        result
    }

    /// Where the file being written (the last one opened) is: the temporary file, or the
    /// last part in the temporary directory.
    pub(super) fn open_path(&self) -> PathBuf {
        match self.file_names.last() {
            Some(name) if self.options.max_rows_per_file.is_some() => self.temp.join(name),
            _ => self.temp.clone(),
        }
    }
}

/// Writes what `writer` has left and its footer, then (with `sync`) flushes the file at
/// `path` to disk through the descriptor that wrote it, and closes it, the close's error
/// checked.
fn close_and_flush(
    writer: ParallelFileWriter<BufWriter<WritebackFile>>,
    path: &Path,
    sync: bool,
) -> Result<(), PipelineError> {
    let file = writer
        .close()
        .map_err(write_error)?
        .into_inner()
        .map_err(|e| PipelineError::io("writing", path)(e.into_error()))?;
    crate::trace::event(|| format!("output: {} closed", path.display()));
    file.finish(sync).map_err(PipelineError::io(
        if sync { "flushing" } else { "closing" },
        path,
    ))?;
    if sync {
        crate::trace::event(|| format!("output: {} flushed to disk", path.display()));
    }
    Ok(())
}

/// A Parquet writer's error as the job's.
fn write_error(e: datafusion::parquet::errors::ParquetError) -> PipelineError {
    PipelineError::Execution {
        stage: "writing Parquet",
        source: e.into(),
    }
}

impl Drop for ParquetOutput {
    fn drop(&mut self) {
        if !self.committed {
            drop(self.writer.take());
            // Files being closed still write into the temporary output.
            let _ = self.finish_closing();
            let _ = remove_path(&self.temp);
        }
    }
}

/// The sort order as Parquet `sorting_columns` (leaf column indices); keys that are not
/// top-level leaf columns end the declared prefix.
fn sorting_columns(schema: &Schema, keys: &[SortKey]) -> Vec<SortingColumn> {
    let Ok(descriptor) = ArrowSchemaConverter::new().convert(schema) else {
        return Vec::new();
    };
    let mut columns = Vec::new();
    for key in keys {
        let leaf = descriptor
            .columns()
            .iter()
            .position(|c| c.path().parts() == [key.column.as_str()]);
        let Some(leaf) = leaf.and_then(|i| i32::try_from(i).ok()) else {
            break;
        };
        columns.push(SortingColumn {
            column_idx: leaf,
            descending: key.descending,
            nulls_first: key.nulls_first,
        });
    }
    columns
}

/// Names the first column Parquet cannot store, if any: each column is written as one null
/// row to memory (some types convert to a Parquet schema but fail only when written).
fn check_writable(schema: &Schema) -> Result<(), PipelineError> {
    for field in schema.fields() {
        let one = Arc::new(Schema::new(vec![Arc::new(
            field.as_ref().clone().with_nullable(true),
        )]));
        let written =
            RecordBatch::try_new(Arc::clone(&one), vec![new_null_array(field.data_type(), 1)])
                .map_err(Into::into)
                .and_then(|batch| {
                    let mut writer = ArrowWriter::try_new(Vec::new(), one, None)?;
                    writer.write(&batch)?;
                    writer.close().map(|_| ())
                });
        if let Err(e) = written {
            return Err(PipelineError::UnwritableType {
                column: field.name().clone(),
                data_type: field.data_type().clone(),
                message: e.to_string(),
            });
        }
    }
    Ok(())
}

/// Puts `new` (a finished file or directory) at `target`; where `target` was, returns
/// where the old output now is (to be removed), or `None`.
///
/// Where the file system swaps two names at once (Linux `renameat2` with
/// `RENAME_EXCHANGE`), the new output and the old one swap names: a reader of `target` sees
/// one or the other, never neither, for directories too. For files it is also faster: a
/// plain rename over a file makes ext4 start writing the new file to disk there and then
/// (its `auto_da_alloc`), which held an output written with `--no-fsync` for 0.8 to 1.3 s
/// of 1.8 GB (docs/performance.md, session 29).
fn replace(new: &Path, target: &Path) -> Result<Option<PathBuf>, PipelineError> {
    if !target.exists() {
        std::fs::rename(new, target)
            .map_err(PipelineError::io("renaming the output into", target))?;
        return Ok(None);
    }
    #[cfg(target_os = "linux")]
    if exchange_names(new, target).is_ok() {
        // `new` now names the old output.
        return Ok(Some(new.to_path_buf()));
    }
    if target.is_file() && new.is_file() {
        std::fs::rename(new, target)
            .map_err(PipelineError::io("renaming the output into", target))?;
        return Ok(None);
    }
    let old = temp_sibling(target, "old");
    // Locked while this job moves it: no other job takes it for a leftover meanwhile.
    let _aside = JobLock::hold(target).ok();
    std::fs::rename(target, &old).map_err(PipelineError::io("moving aside", target))?;
    if let Err(e) = std::fs::rename(new, target) {
        let _ = std::fs::rename(&old, target);
        return Err(PipelineError::io("renaming the output into", target)(e));
    }
    Ok(Some(old))
}

/// Flushes the entries of the directory `dir` to disk.
fn sync_directory(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Swaps the names `a` and `b` in one step (both must exist).
#[cfg(target_os = "linux")]
fn exchange_names(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two NUL-terminated paths that outlive the call; the raw system call, as not
    // every C library has a wrapper for it.
    let result = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn device_pages_name_each_column_with_its_chunks() {
        use super::{ColumnPageCounts, WrittenOutput};
        let counts = |device, dictionary, host| ColumnPageCounts {
            device,
            dictionary,
            host,
            resident: 0,
        };
        let mut output = WrittenOutput {
            files: Vec::new(),
            rows: 0,
            bytes: 0,
            device_chunks: 0,
            device_chunks_on_host: 0,
            device_chunks_resident: 0,
            device_columns: Vec::new(),
        };
        assert_eq!(output.device_pages(), None);
        output.device_columns = vec![
            ("l_orderkey".into(), counts(60, 0, 0)),
            ("l_tax".into(), counts(60, 52, 0)),
            ("d".into(), counts(4, 1, 2)),
        ];
        assert_eq!(
            output.device_pages().unwrap(),
            "l_orderkey 60, l_tax 60 (52 with a dictionary), d 4 (1 with a dictionary, 2 more by the CPU)"
        );
    }

    use super::*;
    use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StringViewArray};
    use datafusion::arrow::datatypes::{DataType, Field};

    /// A run's columns held on the host, standing in for a device's copy.
    #[derive(Debug)]
    struct HostRun {
        columns: Vec<usize>,
        arrays: Vec<ArrayRef>,
    }

    impl ResidentColumns for HostRun {
        fn columns(&self) -> &[usize] {
            &self.columns
        }
        fn rows(&self) -> usize {
            self.arrays[0].len()
        }
        fn column(
            &self,
            column: usize,
            first: usize,
            rows: usize,
        ) -> datafusion::error::Result<ArrayRef> {
            Ok(self.arrays[column].slice(first, rows))
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    /// Batches of a run that left its fixed-width columns where it was sorted carry the
    /// others only; the output (files and row groups cutting the batches anywhere, two
    /// runs one after the other, one of them handing full batches) reads back as every
    /// column of every row, and a run is let go once its rows are written.
    #[test]
    fn batches_of_a_run_that_kept_columns_write_every_column() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8View, true),
            Field::new("x", DataType::Float64, true),
        ]));
        let rows = 10_000;
        let k: ArrayRef = Arc::new(Int64Array::from_iter_values((0..rows as i64).rev()));
        let s: ArrayRef = Arc::new(
            (0..rows)
                .map(|i| (i % 7 != 0).then(|| format!("v{}", i % 113)))
                .collect::<StringViewArray>(),
        );
        let x: ArrayRef = Arc::new(
            (0..rows)
                .map(|i| (i % 5 != 0).then_some(i as f64 / 4.0))
                .collect::<Float64Array>(),
        );
        let full = RecordBatch::try_new(Arc::clone(&schema), vec![k, s, x]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let options = OutputOptions {
            path: dir.path().join("out"),
            max_rows_per_file: Some(3_000),
            row_group_rows: 1_000,
            compression: Compression::SNAPPY,
            overwrite: false,
            sync: false,
            device_pages: true,
        };
        let pool: Arc<dyn MemoryPool> =
            Arc::new(datafusion::execution::memory_pool::UnboundedMemoryPool::default());
        let mut output = ParquetOutput::create(
            options,
            Arc::clone(&schema),
            &[],
            &pool,
            Arc::new(AtomicU64::new(0)),
        )
        .unwrap();
        assert_eq!(
            output
                .resident_request(KeepOnDevice::FixedWidth)
                .unwrap()
                .columns(),
            [0, 2]
        );
        assert!(output.resident_request(KeepOnDevice::Off).is_none());
        let request = output.resident_request(KeepOnDevice::All).unwrap();
        assert_eq!(request.columns(), [0, 1, 2]);
        // Rows 0 .. 6 500 come from a run that kept `k` and `x`, the rest in full batches.
        let kept = 6_500;
        let run: Arc<dyn ResidentColumns> = Arc::new(HostRun {
            columns: vec![0, 2],
            arrays: vec![full.column(0).slice(0, kept), full.column(2).slice(0, kept)],
        });
        let (_, reduced) = request.register(Arc::clone(&run), &schema).unwrap();
        let mut at = 0;
        for size in [700, 1_300, 999, 2_001, 1_500] {
            let columns = vec![full.column(1).slice(at, size)];
            output
                .write(&RecordBatch::try_new(Arc::clone(&reduced), columns).unwrap())
                .unwrap();
            at += size;
        }
        assert_eq!(at, kept);
        // Every row of the run taken: the request holds it no more.
        let probe =
            RecordBatch::try_new(Arc::clone(&reduced), vec![full.column(1).slice(0, 1)]).unwrap();
        assert!(request.run_of(&probe).is_err());
        output.write(&full.slice(kept, rows - kept)).unwrap();
        let written = output.commit().unwrap();
        assert_eq!(written.rows, rows as u64);
        assert_eq!(written.files.len(), 4);
        let mut read = Vec::new();
        for file in &written.files {
            let file = File::open(file).unwrap();
            let reader =
                datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(
                    file, 4096,
                )
                .unwrap();
            read.extend(reader.map(|b| b.unwrap()));
        }
        let read = datafusion::arrow::compute::concat_batches(&read[0].schema(), &read).unwrap();
        assert_eq!(read.num_rows(), rows);
        for (c, column) in full.columns().iter().enumerate() {
            let got = datafusion::arrow::compute::cast(read.column(c), column.data_type()).unwrap();
            assert_eq!(&got, column, "column {c}");
        }
    }

    #[test]
    fn replacing_a_file_or_a_directory_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (new, target) = (dir.path().join(".new"), dir.path().join("out.parquet"));
        std::fs::write(&new, b"new").unwrap();
        // No file to replace: a plain rename.
        assert_eq!(replace(&new, &target).unwrap(), None);
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        std::fs::write(&new, b"newer").unwrap();
        if let Some(old) = replace(&new, &target).unwrap() {
            assert_eq!(std::fs::read(&old).unwrap(), b"new");
            let _ = remove_path(&old);
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"newer");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        // Directories.
        let (new, target) = (dir.path().join(".new-dir"), dir.path().join("out"));
        for generation in ["one", "two"] {
            std::fs::create_dir(&new).unwrap();
            std::fs::write(new.join("part-00000.parquet"), generation).unwrap();
            if let Some(old) = replace(&new, &target).unwrap() {
                assert_eq!(
                    std::fs::read(old.join("part-00000.parquet")).unwrap(),
                    b"one"
                );
                let _ = remove_path(&old);
            }
            assert_eq!(
                std::fs::read(target.join("part-00000.parquet")).unwrap(),
                generation.as_bytes()
            );
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "{left:?}");
    }
}
