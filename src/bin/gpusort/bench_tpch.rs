//! `gpusort bench tpch`: DataFusion's own sort benchmark (the eleven `sort_tpch` queries
//! over TPC-H `lineitem`) from Parquet files, with gpusort's rule on and off.
//!
//! ```text
//!  tpchgen ──► lineitem at scale factor SF, `--files` parts generated in parallel
//!          ──► DIR/sf<SF>/lineitem/part-<i>.parquet (kept: a later run reuses them)
//!  one session (target_partitions = cores) with `lineitem` registered as a Parquet table
//!  per query: the `bench sql` protocol (first run cold, then median of `--reps`, rule on
//!  and off, results fingerprinted and compared; stage breakdown of the gpusort run)
//! ```
//!
//! `benches/sort_tpch_duckdb.py` times DuckDB on the same files.

use std::path::{Path, PathBuf};
use std::time::Instant;

use datafusion::common::{DataFusionError, Result};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::ParquetReadOptions;
use rayon::prelude::*;
use tpchgen::generators::LineItemGenerator;
use tpchgen_arrow::LineItemArrow;

use crate::bench_sql::{apply_settings, report, run_queries, selected, Query, SqlBench};
use crate::session::new_session;

/// Options of `gpusort bench tpch`.
#[derive(Debug, Clone)]
pub struct TpchBench {
    /// TPC-H scale factor (lineitem has about 6 M rows per unit).
    pub scale_factor: f64,
    /// Where the Parquet files are written (and found by later runs).
    pub data_dir: PathBuf,
    /// Files lineitem is written as.
    pub files: usize,
    /// Rows per Parquet row group.
    pub row_group_rows: usize,
    /// Everything else, as for `bench sql` (reps, queries, backend, settings, JSON, …).
    pub sql: SqlBench,
}

/// DataFusion's `sort_tpch` queries (benchmarks/src/sort_tpch.rs), by their numbers there.
const QUERIES: [Query; 11] = [
    Query {
        name: "Q1",
        sql: "SELECT l_linenumber, l_partkey FROM lineitem ORDER BY l_linenumber",
        ordered_by: &["l_linenumber"],
    },
    Query {
        name: "Q2",
        sql: "SELECT l_orderkey, l_partkey FROM lineitem ORDER BY l_orderkey",
        ordered_by: &["l_orderkey"],
    },
    Query {
        name: "Q3",
        sql: "SELECT l_comment, l_partkey FROM lineitem ORDER BY l_comment",
        ordered_by: &["l_comment"],
    },
    Query {
        name: "Q4",
        sql: "SELECT l_orderkey, l_linenumber, l_partkey FROM lineitem \
              ORDER BY l_orderkey, l_linenumber",
        ordered_by: &["l_orderkey", "l_linenumber"],
    },
    Query {
        name: "Q5",
        sql: "SELECT l_linenumber, l_suppkey, l_orderkey FROM lineitem \
              ORDER BY l_linenumber, l_suppkey, l_orderkey",
        ordered_by: &["l_linenumber", "l_suppkey", "l_orderkey"],
    },
    Query {
        name: "Q6",
        sql: "SELECT l_linenumber, l_suppkey, l_orderkey, l_partkey FROM lineitem \
              ORDER BY l_linenumber, l_suppkey, l_orderkey",
        ordered_by: &["l_linenumber", "l_suppkey", "l_orderkey"],
    },
    Query {
        name: "Q7",
        sql: "SELECT l_linenumber, l_suppkey, l_orderkey, l_partkey, l_quantity, \
              l_extendedprice, l_discount, l_tax, l_returnflag, l_linestatus, l_shipdate, \
              l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode FROM lineitem \
              ORDER BY l_linenumber, l_suppkey, l_orderkey",
        ordered_by: &["l_linenumber", "l_suppkey", "l_orderkey"],
    },
    Query {
        name: "Q8",
        sql: "SELECT l_orderkey, l_suppkey, l_linenumber, l_comment FROM lineitem \
              ORDER BY l_orderkey, l_suppkey, l_linenumber, l_comment",
        ordered_by: &["l_orderkey", "l_suppkey", "l_linenumber", "l_comment"],
    },
    Query {
        name: "Q9",
        sql: "SELECT l_orderkey, l_suppkey, l_linenumber, l_comment, l_partkey FROM lineitem \
              ORDER BY l_orderkey, l_suppkey, l_linenumber, l_comment",
        ordered_by: &["l_orderkey", "l_suppkey", "l_linenumber", "l_comment"],
    },
    Query {
        name: "Q10",
        sql: "SELECT l_orderkey, l_suppkey, l_linenumber, l_comment, l_partkey, l_quantity, \
              l_extendedprice, l_discount, l_tax, l_returnflag, l_linestatus, l_shipdate, \
              l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode FROM lineitem \
              ORDER BY l_orderkey, l_suppkey, l_linenumber, l_comment",
        ordered_by: &["l_orderkey", "l_suppkey", "l_linenumber", "l_comment"],
    },
    Query {
        name: "Q11",
        sql: "SELECT l_shipmode, l_comment, l_partkey FROM lineitem ORDER BY l_shipmode",
        ordered_by: &["l_shipmode"],
    },
];

/// Generates (or finds) the files, runs the queries, prints the table.
pub async fn run(options: &TpchBench) -> Result<()> {
    let dir = lineitem_dir(options);
    if !dir.join("_complete").exists() {
        write_lineitem(options, &dir)?;
    }
    let partitions = options
        .sql
        .partitions
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let session = new_session(options.sql.backend);
    apply_settings(&session.ctx, partitions, &options.sql.settings).await?;
    let read = ParquetReadOptions::default();
    session
        .ctx
        .register_parquet("lineitem", dir.display().to_string(), read)
        .await?;
    eprintln!(
        "lineitem: scale factor {}, {} files under {}",
        options.scale_factor,
        options.files,
        dir.display()
    );
    let queries = QUERIES.iter().filter(|q| selected(q, &options.sql.only));
    let outcomes = run_queries(&session.ctx, queries, &options.sql).await?;
    report(&outcomes, partitions, &options.sql)
}

/// `DIR/sf<SF>-<files>/lineitem`.
fn lineitem_dir(options: &TpchBench) -> PathBuf {
    options
        .data_dir
        .join(format!("sf{}-{}", options.scale_factor, options.files))
        .join("lineitem")
}

/// Generates lineitem as `files` parts in parallel, each written as one Parquet file
/// (Snappy, `row_group_rows` per row group), then marks the folder complete.
fn write_lineitem(options: &TpchBench, dir: &Path) -> Result<()> {
    let io = |what: &str, path: &Path, e: std::io::Error| {
        DataFusionError::Execution(format!("{what} {}: {e}", path.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    let started = Instant::now();
    let files = options.files.max(1);
    let rows: usize = (1..=files)
        .into_par_iter()
        .map(|part| -> Result<usize> {
            let generator = LineItemGenerator::new(options.scale_factor, part as i32, files as i32);
            let path = dir.join(format!("part-{part:03}.parquet"));
            let file = std::fs::File::create(&path).map_err(|e| io("creating", &path, e))?;
            let properties = WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .set_max_row_group_row_count(Some(options.row_group_rows))
                .build();
            let schema = LineItemArrow::schema_ref();
            let mut writer = ArrowWriter::try_new(file, schema, Some(properties))?;
            let mut rows = 0;
            for batch in LineItemArrow::new(generator).with_batch_size(65_536) {
                let batch = batch?;
                rows += batch.num_rows();
                writer.write(&batch)?;
            }
            let file = writer.into_inner()?;
            file.sync_all().map_err(|e| io("syncing", &path, e))?;
            Ok(rows)
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .sum();
    let marker = dir.join("_complete");
    std::fs::write(&marker, format!("{rows}\n")).map_err(|e| io("writing", &marker, e))?;
    eprintln!(
        "generated lineitem ({rows} rows) as {files} Parquet files in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
