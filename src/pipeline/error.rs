//! What can go wrong in a file-sorting pipeline, each error naming what and where.

use std::path::PathBuf;

use datafusion::arrow::datatypes::DataType;
use datafusion::error::DataFusionError;

/// An error of [`sort_files`](super::sort_files). No partial output remains after any of
/// them.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are what each message prints
pub enum PipelineError {
    /// An input path that does not exist.
    #[error("input '{}' does not exist", .0.display())]
    MissingInput(PathBuf),
    /// A glob or directory that names no Parquet or CSV file.
    #[error("input '{0}' matches no .parquet or .csv file")]
    NoInputFiles(String),
    /// A file whose format cannot be told from its name.
    #[error("input '{}' is neither Parquet (.parquet, .parq, .pq) nor CSV (.csv)", .0.display())]
    UnknownFormat(PathBuf),
    /// Parquet and CSV inputs in one job.
    #[error("inputs mix Parquet and CSV files ('{}' and '{}'): sort one format at a time", .0.display(), .1.display())]
    MixedFormats(PathBuf, PathBuf),
    /// A glob pattern that does not parse.
    #[error("input pattern '{pattern}' is not a valid glob: {message}")]
    BadPattern { pattern: String, message: String },
    /// A Parquet file whose footer cannot be read.
    #[error("'{}' is not a readable Parquet file: {message}", .path.display())]
    CorruptParquet { path: PathBuf, message: String },
    /// Inputs whose columns differ, without `--union-by-name`.
    #[error(
        "inputs differ in their columns; the first file '{}' has: {columns}\n  {differing}\n\
         Pass --union-by-name (union_by_name=True in Python) to match columns by name, \
         missing ones read as nulls",
        .first.display()
    )]
    SchemaMismatch {
        first: PathBuf,
        columns: String,
        differing: String,
    },
    /// A column whose types in two files no one type holds exactly (`--union-by-name`).
    #[error(
        "column '{column}' is {first_type} in '{}' but {data_type} in '{}', and no type holds \
         both exactly",
        .first.display(),
        .path.display()
    )]
    IncompatibleColumn {
        column: String,
        first: PathBuf,
        first_type: DataType,
        path: PathBuf,
        data_type: DataType,
    },
    /// The output, or where it is written, would be read as an input.
    #[error(
        "output '{}' would also be read as an input ('{}', listed from '{spec}'): write the \
         output elsewhere, or name the inputs without it",
        .output.display(),
        .input.display()
    )]
    OutputIsInput {
        output: PathBuf,
        input: PathBuf,
        spec: String,
    },
    /// Fewer or more rows written than the inputs hold.
    #[error(
        "wrote {written} rows where {expected} were expected (the inputs' footers, the rows \
         read, or the rows handed to the writer): the output was not put in place (this is \
         a bug in gpusort; please report it)"
    )]
    RowCountMismatch { written: u64, expected: u64 },
    /// Spilling needed more disk than allowed.
    #[error(
        "the sort needed more than {limit} of spill space in {dir}: raise --max-spill \
         (max_spill= in Python), give more memory (--memory-limit), or point --spill-dir at \
         a larger disk; the output was not touched"
    )]
    SpillLimit { limit: String, dir: String },
    /// The spill directory's disk is full.
    #[error(
        "the spill directory {dir} ran out of space: point --spill-dir (spill_dir= in Python) \
         at a larger disk, or give more memory (--memory-limit); the output was not touched"
    )]
    SpillDiskFull { dir: String },
    /// A CSV file whose header or rows cannot be read.
    #[error("'{}' is not a readable CSV file: {message}", .path.display())]
    UnreadableCsv { path: PathBuf, message: String },
    /// A `--by` text that does not parse.
    #[error("--by '{text}': {message}")]
    BadOrderBy { text: String, message: String },
    /// A sort column the inputs do not have.
    #[error("unknown column '{column}' in --by; the inputs have: {available}")]
    UnknownColumn { column: String, available: String },
    /// A column of a type Parquet cannot store.
    #[error(
        "column '{column}' has type {data_type}, which cannot be written to Parquet: {message}"
    )]
    UnwritableType {
        column: String,
        data_type: DataType,
        message: String,
    },
    /// An option value out of range.
    #[error("{0}")]
    BadOption(String),
    /// The output path is unusable.
    #[error("output '{}': {message}", .path.display())]
    BadOutput { path: PathBuf, message: String },
    /// Reading, sorting or writing failed.
    #[error("{stage}: {source}")]
    Execution {
        stage: &'static str,
        #[source]
        source: DataFusionError,
    },
    /// A file-system operation failed.
    #[error("{action} '{}': {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl PipelineError {
    /// Wraps a DataFusion error of `stage` ("reading inputs", "sorting", "writing").
    pub fn execution(stage: &'static str) -> impl FnOnce(DataFusionError) -> Self {
        move |source| Self::Execution { stage, source }
    }

    /// Wraps an I/O error of `action` on `path`.
    pub fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}
