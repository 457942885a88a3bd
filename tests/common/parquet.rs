//! Parquet tables as users have them: a seeded table written as several files of several
//! row groups each, registered in a session as `t` (optionally declared sorted by `rid`,
//! so that DataFusion's sort pushdown may read row groups in reverse).
//!
//! Columns: `g` (Int32, 7 groups), `k` (Int64, 1 % nulls, few distinct values: many
//! ties), `f` (Float64 with -0.0, NaN and infinities), `s` (Utf8, 5 % nulls, long shared
//! prefixes), `rid` (Int64, the row's place in the files: 0.. in file order).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::SessionContext;
use rand::Rng;

use super::data::case_rng;

/// How the table is laid out on disk.
#[derive(Debug, Clone, Copy)]
pub struct ParquetLayout {
    /// Number of files.
    pub files: usize,
    /// Rows per file.
    pub rows_per_file: usize,
    /// Rows per row group.
    pub row_group_rows: usize,
}

/// Several files of several row groups: the shape that made DataFusion merge partitions.
pub const MULTI_FILE: ParquetLayout = ParquetLayout {
    files: 4,
    rows_per_file: 5_000,
    row_group_rows: 1_200,
};

/// The table's columns for rows `first..first + rows`.
pub fn table_batch(seed: u64, first: usize, rows: usize) -> RecordBatch {
    let mut rng = case_rng(seed, &format!("parquet rows from {first}"));
    let g = Int32Array::from_iter_values((0..rows).map(|_| rng.random_range(0..7)));
    let k = Int64Array::from_iter(
        (0..rows).map(|_| (!rng.random_bool(0.01)).then(|| rng.random_range(-50..50))),
    );
    let specials = [
        -0.0,
        0.0,
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let f = Float64Array::from_iter_values((0..rows).map(|_| {
        if rng.random_bool(0.1) {
            specials[rng.random_range(0..specials.len())]
        } else {
            rng.random_range(-1e3..1e3)
        }
    }));
    let s = StringArray::from_iter((0..rows).map(|_| {
        (!rng.random_bool(0.05)).then(|| {
            let prefix = "a shared prefix longer than any key window ".repeat(2);
            format!("{prefix}{:04}", rng.random_range(0..3000))
        })
    }));
    let rid = Int64Array::from_iter_values((first..first + rows).map(|i| i as i64));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(g),
        Arc::new(k),
        Arc::new(f),
        Arc::new(s),
        Arc::new(rid),
    ];
    RecordBatch::try_new(schema(), columns).unwrap()
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int32, false),
        Field::new("k", DataType::Int64, true),
        Field::new("f", DataType::Float64, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("rid", DataType::Int64, false),
    ]))
}

/// Writes the table into `dir` as `layout` says: files `part-000.parquet`, ... in `rid`
/// order.
pub fn write_table(dir: &Path, seed: u64, layout: ParquetLayout) {
    for file in 0..layout.files {
        let path = dir.join(format!("part-{file:03}.parquet"));
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(layout.row_group_rows))
            .build();
        let mut writer =
            ArrowWriter::try_new(File::create(path).unwrap(), schema(), Some(properties)).unwrap();
        let first = file * layout.rows_per_file;
        writer
            .write(&table_batch(seed, first, layout.rows_per_file))
            .unwrap();
        writer.close().unwrap();
    }
}

/// Registers the files in `dir` as table `t` in `ctx`; `sorted_by_rid` declares them
/// ordered by `rid` (`WITH ORDER`).
pub async fn register_table(ctx: &SessionContext, dir: &Path, sorted_by_rid: bool) {
    let order = if sorted_by_rid {
        "WITH ORDER (rid ASC)"
    } else {
        ""
    };
    ctx.sql("DROP TABLE IF EXISTS t").await.unwrap();
    let sql = format!(
        "CREATE EXTERNAL TABLE t (g INT NOT NULL, k BIGINT, f DOUBLE NOT NULL, s VARCHAR, \
         rid BIGINT NOT NULL) STORED AS PARQUET {order} LOCATION '{}/'",
        dir.display()
    );
    ctx.sql(&sql).await.unwrap().collect().await.unwrap();
}
