//! Input paths → the files to read, in the order given, which is the order ties keep:
//!
//! - a path that names a file or a directory is read as that, literally, whatever
//!   characters it holds (`run[1].parquet` is that file);
//! - a directory is searched recursively, its entries in sorted path order, hidden and
//!   `_`-prefixed entries skipped;
//! - only a path that names nothing is read as a glob pattern (`*`, `?`, `[..]`); its
//!   matches come in sorted path order, and `*` does not match a leading `.`;
//! - a file named twice (however: relative, absolute, through a link) is read once, where
//!   it first came.
//!
//! Every Parquet file's footer is read here, so a corrupt file is reported by name before
//! any work starts; the footers also give the total row count for progress.

use std::fs::File;
use std::path::{Path, PathBuf};

use datafusion::parquet::basic::Type as PhysicalType;
use datafusion::parquet::file::metadata::{ParquetMetaDataReader, RowGroupMetaData};

use super::error::PipelineError;

/// File formats the pipeline reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// `.parquet`, `.parq`, `.pq`
    Parquet,
    /// `.csv`, with a header row
    Csv,
}

impl InputFormat {
    /// The format a file name says, if any.
    pub fn of(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "parquet" | "parq" | "pq" => Some(Self::Parquet),
            "csv" => Some(Self::Csv),
            _ => None,
        }
    }
}

/// The resolved inputs of one job.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Their one format.
    pub format: InputFormat,
    /// Every file, in input order, without repeats.
    pub files: Vec<PathBuf>,
    /// Each file as the file system resolves it (absolute, links and `..` resolved).
    pub resolved: Vec<PathBuf>,
    /// For each file, the input spec (file, directory or pattern) it came from.
    pub listed_from: Vec<String>,
    /// Each file's bytes.
    pub file_bytes: Vec<u64>,
    /// Rows in all files, when the format records it (Parquet).
    pub rows: Option<u64>,
    /// The largest row group's compressed bytes, when the format has row groups (Parquet):
    /// what one scan partition fetches into memory at once.
    pub max_row_group_bytes: Option<u64>,
    /// The rows' bytes once decoded, when the format records it (Parquet: estimated from
    /// the column chunks' uncompressed sizes, each at least its rows × its type's width).
    pub decoded_bytes: Option<u64>,
}

impl Inputs {
    /// Bytes of all files.
    pub fn bytes(&self) -> u64 {
        self.file_bytes.iter().sum()
    }
}

/// Resolves `specs` (files, directories, globs) and checks the files.
pub fn resolve_inputs(specs: &[String]) -> Result<Inputs, PipelineError> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut resolved = Vec::new();
    let mut listed_from = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for spec in specs {
        for file in expand(spec)? {
            // The same file however it is named (relative, absolute, `..`, a link).
            let identity =
                std::fs::canonicalize(&file).map_err(PipelineError::io("resolving", &file))?;
            if seen.insert(identity.clone()) {
                files.push(file);
                resolved.push(identity);
                listed_from.push(spec.clone());
            }
        }
    }
    let Some(first) = files.first() else {
        return Err(PipelineError::NoInputFiles(specs.join(" ")));
    };
    let format =
        InputFormat::of(first).ok_or_else(|| PipelineError::UnknownFormat(first.clone()))?;
    for file in &files {
        match InputFormat::of(file) {
            None => return Err(PipelineError::UnknownFormat(file.clone())),
            Some(f) if f != format => {
                return Err(PipelineError::MixedFormats(first.clone(), file.clone()))
            }
            Some(_) => {}
        }
    }
    let file_bytes = files
        .iter()
        .map(|file| {
            std::fs::metadata(file)
                .map(|m| m.len())
                .map_err(PipelineError::io("reading the size of", file))
        })
        .collect::<Result<Vec<u64>, _>>()?;
    let (rows, max_row_group_bytes, decoded_bytes) = match format {
        InputFormat::Parquet => {
            let (mut rows, mut largest, mut decoded) = (0, 0, 0);
            for file in &files {
                let footer = parquet_footer(file)?;
                rows += footer.rows;
                largest = largest.max(footer.max_row_group_bytes);
                decoded += footer.decoded_bytes;
            }
            (Some(rows), Some(largest), Some(decoded))
        }
        InputFormat::Csv => (None, None, None),
    };
    Ok(Inputs {
        format,
        files,
        resolved,
        listed_from,
        file_bytes,
        rows,
        max_row_group_bytes,
        decoded_bytes,
    })
}

/// The files one spec names.
fn expand(spec: &str) -> Result<Vec<PathBuf>, PipelineError> {
    if spec.contains(['*', '?', '[']) && !Path::new(spec).exists() {
        let options = glob::MatchOptions {
            require_literal_leading_dot: true,
            ..Default::default()
        };
        let matches = glob::glob_with(spec, options).map_err(|e| PipelineError::BadPattern {
            pattern: spec.to_string(),
            message: e.to_string(),
        })?;
        let mut files = Vec::new();
        for entry in matches {
            let path = entry.map_err(|e| PipelineError::Io {
                action: "reading",
                path: e.path().to_path_buf(),
                source: e.into(),
            })?;
            if path.is_dir() {
                files.extend(directory_files(&path)?);
            } else {
                files.push(path);
            }
        }
        if files.is_empty() {
            return Err(PipelineError::NoInputFiles(spec.to_string()));
        }
        return Ok(files);
    }
    let path = PathBuf::from(spec);
    if !path.exists() {
        return Err(PipelineError::MissingInput(path));
    }
    if path.is_dir() {
        let files = directory_files(&path)?;
        if files.is_empty() {
            return Err(PipelineError::NoInputFiles(spec.to_string()));
        }
        return Ok(files);
    }
    Ok(vec![path])
}

/// Refuses an output that is among the inputs: the output file itself (a second run
/// of a job writing into the directory it reads would read its first output), or, for a
/// directory of files, any input inside it. Paths are compared as the file system resolves
/// them (links followed).
pub fn check_output_not_input(
    inputs: &Inputs,
    output: &Path,
    directory: bool,
) -> Result<(), PipelineError> {
    let Some(output_resolved) = resolve(output) else {
        return Ok(());
    };
    let inputs_resolved = inputs.resolved.iter().zip(&inputs.listed_from);
    for ((input, spec), file) in inputs_resolved.zip(&inputs.files) {
        let clash = if directory {
            input.starts_with(&output_resolved)
        } else {
            *input == output_resolved
        };
        if clash {
            return Err(PipelineError::OutputIsInput {
                output: output.to_path_buf(),
                input: file.clone(),
                spec: spec.clone(),
            });
        }
    }
    Ok(())
}

/// `path` with links and `..` resolved; for a path that does not exist yet, its resolved
/// directory joined with its name.
fn resolve(path: &Path) -> Option<PathBuf> {
    if let Ok(path) = std::fs::canonicalize(path) {
        return Some(path);
    }
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(parent).ok()?.join(name))
}

/// Parquet and CSV files under `dir`, recursively, in sorted path order.
fn directory_files(dir: &Path) -> Result<Vec<PathBuf>, PipelineError> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(PipelineError::io("listing", dir))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(PipelineError::io("listing", dir))?;
    entries.sort();
    let mut files = Vec::new();
    for path in entries {
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.') || n.starts_with('_'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            files.extend(directory_files(&path)?);
        } else if InputFormat::of(&path).is_some() {
            files.push(path);
        }
    }
    Ok(files)
}

/// What a Parquet file's footer says of its size.
struct Footer {
    rows: u64,
    max_row_group_bytes: u64,
    /// The row groups' bytes once decoded (estimated).
    decoded_bytes: u64,
}

/// A row group's bytes once decoded into Arrow arrays, estimated from its footer: each
/// column chunk's uncompressed bytes, but no less than its rows at the width of its
/// physical type (a dictionary-encoded chunk's pages hold little more than its indices),
/// and for byte arrays no less than their offsets.
fn decoded_row_group_bytes(group: &RowGroupMetaData) -> u64 {
    let rows = u64::try_from(group.num_rows()).unwrap_or(0);
    group
        .columns()
        .iter()
        .map(|chunk| {
            let width = match chunk.column_type() {
                PhysicalType::BOOLEAN => 1,
                PhysicalType::INT32 | PhysicalType::FLOAT | PhysicalType::BYTE_ARRAY => 4,
                PhysicalType::INT64 | PhysicalType::DOUBLE => 8,
                PhysicalType::INT96 => 12,
                PhysicalType::FIXED_LEN_BYTE_ARRAY => {
                    u64::try_from(chunk.column_descr().type_length()).unwrap_or(0)
                }
            };
            let uncompressed = u64::try_from(chunk.uncompressed_size()).unwrap_or(0);
            uncompressed.max(rows * width)
        })
        .sum()
}

/// Rows and the largest row group's compressed bytes of a Parquet file, from its footer.
fn parquet_footer(path: &Path) -> Result<Footer, PipelineError> {
    let corrupt = |message: String| PipelineError::CorruptParquet {
        path: path.to_path_buf(),
        message,
    };
    let file = File::open(path).map_err(PipelineError::io("opening", path))?;
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&file)
        .map_err(|e| corrupt(e.to_string()))?;
    let rows =
        u64::try_from(metadata.file_metadata().num_rows()).map_err(|e| corrupt(e.to_string()))?;
    let max_row_group_bytes = metadata
        .row_groups()
        .iter()
        .map(|g| u64::try_from(g.compressed_size()).unwrap_or(0))
        .max()
        .unwrap_or(0);
    let decoded_bytes = metadata
        .row_groups()
        .iter()
        .map(decoded_row_group_bytes)
        .sum();
    Ok(Footer {
        rows,
        max_row_group_bytes,
        decoded_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension() {
        assert_eq!(
            InputFormat::of(Path::new("a/b.PARQUET")),
            Some(InputFormat::Parquet)
        );
        assert_eq!(
            InputFormat::of(Path::new("b.pq")),
            Some(InputFormat::Parquet)
        );
        assert_eq!(InputFormat::of(Path::new("b.csv")), Some(InputFormat::Csv));
        assert_eq!(InputFormat::of(Path::new("b.json")), None);
        assert_eq!(InputFormat::of(Path::new("parquet")), None);
    }
}
