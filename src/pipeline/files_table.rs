//! The input files as one table, read in the order given.
//!
//! DataFusion's listing tables are not used: they take their schema from the first file,
//! parse every path as a URL with glob characters (`run[1].parquet` would read
//! `run1.parquet`), and list files in path order. Here:
//!
//! - each file's schema is read as DataFusion's scan reads it ([`file_schemas`]) and the
//!   table's is the one [`common_schema`](super::schemas::common_schema) allows;
//! - files are named by their absolute paths, literally;
//! - the scan's partitions take the files in input order, contiguous runs of them (a file
//!   split by byte ranges keeps its ranges in order), so that a sort that keeps ties in
//!   partition order keeps them in input order.
//!
//! A CSV file is read by position under its own header's schema, so CSV inputs whose
//! headers differ (`--union-by-name`) are read one file at a time, each projected by
//! column name onto the merged schema, and concatenated in input order ([`read_files`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchemaBuilder;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{cast, lit, Expr};
use datafusion::object_store::path::Path as StorePath;
use datafusion::object_store::ObjectStoreExt;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionContext};

use super::error::PipelineError;
use super::inputs::{InputFormat, Inputs};
use super::schemas::common_schema;

/// One input file: where, and its bytes.
#[derive(Debug, Clone)]
struct InputFile {
    location: StorePath,
    bytes: u64,
}

/// The inputs as a DataFrame of their common schema (see the module doc), rows in input
/// order.
pub(super) async fn read_files(
    ctx: &SessionContext,
    inputs: &Inputs,
    union_by_name: bool,
) -> Result<DataFrame, PipelineError> {
    let state = ctx.state();
    let format = file_format(&state, inputs.format);
    let files = inputs
        .files
        .iter()
        .zip(&inputs.resolved)
        .zip(&inputs.file_bytes)
        .map(|((path, resolved), &bytes)| input_file(path, resolved, bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let schemas = file_schemas(&state, &format, inputs.format, &inputs.files, &files).await?;
    let named: Vec<(PathBuf, SchemaRef)> = inputs.files.iter().cloned().zip(schemas).collect();
    let read = |files: Vec<InputFile>, schema: SchemaRef| {
        ctx.read_table(Arc::new(OrderedFiles {
            schema,
            format: Arc::clone(&format),
            files,
        }))
        .map_err(PipelineError::execution("reading inputs"))
    };
    if inputs.format == InputFormat::Parquet {
        let schema = common_schema(&named, union_by_name)?;
        return read(files, schema);
    }
    // CSV: headers compared by name (types are inferred, not stored).
    let headers: Vec<(PathBuf, SchemaRef)> = named
        .iter()
        .map(|(path, schema)| (path.clone(), names_only(schema)))
        .collect();
    let same_headers = common_schema(&headers, false);
    if same_headers.is_ok() || !union_by_name {
        same_headers?;
        // One scan, its types inferred over every file as DataFusion does.
        let joint = infer(&state, &format, inputs.format, &inputs.files[0], &files).await?;
        return read(files, nulls_as_text(&joint));
    }
    let schema = common_schema(&named, true)?;
    // CSV files with other headers: each under its own, its columns taken by name. A
    // projection that casts would be spread over partitions by a round-robin repartition
    // (losing the file's row order): none is planned.
    ctx.state_ref()
        .write()
        .config_mut()
        .options_mut()
        .optimizer
        .enable_round_robin_repartition = false;
    let mut all: Option<DataFrame> = None;
    for (file, (_, own)) in files.into_iter().zip(named) {
        let columns = schema
            .fields()
            .iter()
            .map(|field| {
                let value = match own.field_with_name(field.name()) {
                    Ok(theirs) if theirs.data_type() == field.data_type() => {
                        Expr::Column(Column::new_unqualified(field.name()))
                    }
                    Ok(_) => cast(
                        Expr::Column(Column::new_unqualified(field.name())),
                        field.data_type().clone(),
                    ),
                    Err(_) => lit(ScalarValue::try_from(field.data_type())?),
                };
                Ok(value.alias(field.name()))
            })
            .collect::<Result<Vec<Expr>>>()
            .map_err(PipelineError::execution("reading inputs"))?;
        let one = read(vec![file], own)?
            .select(columns)
            .map_err(PipelineError::execution("reading inputs"))?;
        all = Some(match all {
            None => one,
            Some(before) => before
                .union(one)
                .map_err(PipelineError::execution("reading inputs"))?,
        });
    }
    all.ok_or_else(|| PipelineError::NoInputFiles(String::new()))
}

/// `schema` with every column `Utf8`: only the names compared.
fn names_only(schema: &SchemaRef) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ))
}

/// A CSV schema whose columns inferred as `Null` (empty in every row looked at, the first
/// 1,000 by default) read as text: read as `Null`, any value further down would be lost.
fn nulls_as_text(schema: &SchemaRef) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Null => Field::new(f.name(), DataType::Utf8, true),
                _ => f.as_ref().clone(),
            })
            .collect::<Vec<_>>(),
    ))
}

/// The format reader with the session's options (CSV: a header row).
fn file_format(state: &dyn Session, format: InputFormat) -> Arc<dyn FileFormat> {
    let options = state.table_options();
    match format {
        InputFormat::Parquet => {
            Arc::new(ParquetFormat::default().with_options(options.parquet.clone()))
        }
        InputFormat::Csv => Arc::new(
            CsvFormat::default()
                .with_options(options.csv.clone())
                .with_has_header(true),
        ),
    }
}

/// The file `path` (`resolved`: absolute, without `..`, as object store paths must be) of
/// `bytes`.
fn input_file(path: &Path, resolved: &Path, bytes: u64) -> Result<InputFile, PipelineError> {
    let location = StorePath::from_absolute_path(resolved).map_err(|e| PipelineError::Io {
        action: "naming",
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    Ok(InputFile { location, bytes })
}

/// Each file's schema as the scan will read it, in input order.
async fn file_schemas(
    state: &dyn Session,
    format: &Arc<dyn FileFormat>,
    kind: InputFormat,
    paths: &[PathBuf],
    files: &[InputFile],
) -> Result<Vec<SchemaRef>, PipelineError> {
    // One file at a time: local footers and headers are read in well under a millisecond
    // each, and `resolve_inputs` has just read every footer (now in the page cache).
    let mut schemas = Vec::with_capacity(files.len());
    for (path, file) in paths.iter().zip(files) {
        let schema = infer(state, format, kind, path, std::slice::from_ref(file)).await?;
        schemas.push(match kind {
            InputFormat::Csv => nulls_as_text(&schema),
            InputFormat::Parquet => schema,
        });
    }
    Ok(schemas)
}

/// The schema `format` infers over `files` (`path` names them in errors).
async fn infer(
    state: &dyn Session,
    format: &Arc<dyn FileFormat>,
    kind: InputFormat,
    path: &Path,
    files: &[InputFile],
) -> Result<SchemaRef, PipelineError> {
    let store = state
        .runtime_env()
        .object_store(ObjectStoreUrl::local_filesystem())
        .map_err(PipelineError::execution("reading inputs"))?;
    let mut metas = Vec::with_capacity(files.len());
    for file in files {
        metas.push(
            store
                .head(&file.location)
                .await
                .map_err(|e| unreadable(path, kind, e.into()))?,
        );
    }
    format
        .infer_schema(state, &store, &metas)
        .await
        .map_err(|e| unreadable(path, kind, e))
}

/// A file whose schema cannot be read, named.
fn unreadable(path: &Path, format: InputFormat, e: DataFusionError) -> PipelineError {
    if format == InputFormat::Parquet {
        PipelineError::CorruptParquet {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    } else {
        PipelineError::UnreadableCsv {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}

/// The files of one job as a table (see the module doc).
#[derive(Debug)]
struct OrderedFiles {
    schema: SchemaRef,
    format: Arc<dyn FileFormat>,
    files: Vec<InputFile>,
}

#[async_trait]
impl TableProvider for OrderedFiles {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let source = self
            .format
            .file_source(TableSchemaBuilder::from(&self.schema).build());
        let groups = contiguous_groups(&self.files, state.config().target_partitions());
        let config = FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), source)
            .with_file_groups(groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .build();
        self.format.create_physical_plan(state, config).await
    }
}

/// `files` in input order as at most `groups` runs of about equal bytes.
fn contiguous_groups(files: &[InputFile], groups: usize) -> Vec<FileGroup> {
    let total: u64 = files.iter().map(|f| f.bytes.max(1)).sum();
    let per_group = total.div_ceil(groups.max(1) as u64).max(1);
    let mut out: Vec<Vec<PartitionedFile>> = vec![Vec::new()];
    let mut in_group = 0;
    for file in files {
        if in_group >= per_group && out.len() < groups {
            out.push(Vec::new());
            in_group = 0;
        }
        let mut partitioned = PartitionedFile::new(String::new(), file.bytes);
        partitioned.object_meta.location = file.location.clone();
        out.last_mut().expect("a group").push(partitioned);
        in_group += file.bytes.max(1);
    }
    out.into_iter().map(FileGroup::new).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_the_files_in_input_order() {
        let files: Vec<InputFile> = ["z", "a", "m", "b", "c"]
            .iter()
            .map(|n| InputFile {
                location: StorePath::from(format!("d/{n}.parquet")),
                bytes: 10,
            })
            .collect();
        let groups = contiguous_groups(&files, 2);
        let names: Vec<Vec<String>> = groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|f| f.object_meta.location.to_string())
                    .collect()
            })
            .collect();
        assert_eq!(
            names,
            vec![
                vec!["d/z.parquet", "d/a.parquet", "d/m.parquet"],
                vec!["d/b.parquet", "d/c.parquet"]
            ]
        );
        assert_eq!(contiguous_groups(&files, 9).len(), 5);
    }
}
