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
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::ParquetReadOptions;
use rayon::prelude::*;
use tpchgen::generators::LineItemGenerator;
use tpchgen_arrow::LineItemArrow;

use crate::bench_sql::{
    apply_settings, create_dir, report, run_queries, selected, write_parquet_file, Query, QueryRuns,
};
use crate::session::new_session;

/// Options of `gpusort bench tpch`.
#[derive(Debug, Clone, clap::Args)]
pub struct TpchBench {
    /// TPC-H scale factor (lineitem has about 6 M rows per unit).
    #[arg(long = "sf", default_value_t = 1.0)]
    pub scale_factor: f64,
    /// Where the Parquet files go (DIR/sf<SF>-<FILES>/lineitem; reused when there).
    #[arg(long = "data", value_name = "DIR", default_value = "bench-data")]
    pub data_dir: PathBuf,
    /// Files lineitem is written as (generated in parallel).
    #[arg(long, default_value_t = 16)]
    pub files: usize,
    /// Rows per Parquet row group.
    #[arg(long, default_value_t = 1_048_576)]
    pub row_group_rows: usize,
    /// How the queries are run.
    #[command(flatten)]
    pub runs: QueryRuns,
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
    let runs = &options.runs;
    let dir = lineitem_dir(options);
    let marker = dir.join("_complete");
    let rows = match std::fs::read_to_string(&marker) {
        Ok(rows) => rows.trim().parse().unwrap_or(0),
        Err(_) => write_lineitem(options, &dir, &marker)?,
    };
    let partitions = runs.partitions();
    let session = new_session(runs.backend);
    apply_settings(&session.ctx, partitions, &runs.settings).await?;
    let read = ParquetReadOptions::default();
    session
        .ctx
        .register_parquet("lineitem", dir.display().to_string(), read)
        .await?;
    eprintln!(
        "lineitem: scale factor {}, {rows} rows in {} files under {}",
        options.scale_factor,
        options.files,
        dir.display()
    );
    let queries = QUERIES.iter().filter(|q| selected(q, &runs.only));
    let outcomes = run_queries(&session.ctx, queries, runs).await?;
    report(&outcomes, partitions, rows, runs)
}

/// `DIR/sf<SF>-<files>/lineitem`.
fn lineitem_dir(options: &TpchBench) -> PathBuf {
    options
        .data_dir
        .join(format!("sf{}-{}", options.scale_factor, options.files))
        .join("lineitem")
}

/// Generates lineitem as `files` parts in parallel, each written as one Parquet file
/// (Snappy, `row_group_rows` per row group), then writes the row count to `marker`, which
/// marks the folder complete; returns the row count.
fn write_lineitem(options: &TpchBench, dir: &Path, marker: &Path) -> Result<usize> {
    create_dir(dir)?;
    let started = Instant::now();
    let files = options.files.max(1);
    let rows: usize = (1..=files)
        .into_par_iter()
        .map(|part| {
            let generator = LineItemGenerator::new(options.scale_factor, part as i32, files as i32);
            let batches = LineItemArrow::new(generator)
                .with_batch_size(65_536)
                .map(|batch| batch.map_err(DataFusionError::from));
            let properties = WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .set_max_row_group_row_count(Some(options.row_group_rows))
                .build();
            let path = dir.join(format!("part-{part:03}.parquet"));
            write_parquet_file(
                &path,
                LineItemArrow::schema_ref(),
                Some(properties),
                batches,
            )
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .sum();
    std::fs::write(marker, format!("{rows}\n"))
        .map_err(|e| DataFusionError::Execution(format!("writing {}: {e}", marker.display())))?;
    eprintln!(
        "generated lineitem ({rows} rows) as {files} Parquet files in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(rows)
}
