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
    /// Which queries: `sort` (DataFusion's sort_tpch) or `windows` (window functions and
    /// large LIMITs over the same table, with the plain ORDER BY they build on).
    /// `limits`: ORDER BY .. LIMIT k for k from 10^3 to 10^6 on a fixed-width and on a
    /// string key, where DataFusion's TopK heap and gpusort's sort cross over.
    #[arg(long, default_value = "sort", value_parser = ["sort", "windows", "limits"])]
    pub suite: String,
    /// How the queries are run.
    #[command(flatten)]
    pub runs: QueryRuns,
}

/// Window functions and LIMITs over `lineitem` (`--suite windows`): the shapes users run,
/// and the plain sorts they build on (W0, W9, W14: W10's seven columns), to set each
/// window beside.
const WINDOW_QUERIES: [Query; 15] = [
    Query {
        name: "W0",
        sql: "SELECT l_orderkey, l_linenumber, l_shipdate, l_extendedprice FROM lineitem \
              ORDER BY l_shipdate, l_orderkey, l_linenumber",
        ordered_by: &["l_shipdate", "l_orderkey", "l_linenumber"],
    },
    Query {
        name: "W1",
        sql: "SELECT l_suppkey, l_orderkey, l_linenumber, l_extendedprice, rank() OVER \
              (PARTITION BY l_suppkey ORDER BY l_extendedprice DESC) AS w FROM lineitem",
        ordered_by: &[],
    },
    Query {
        name: "W2",
        sql: "SELECT * FROM (SELECT l_partkey, l_orderkey, l_linenumber, l_extendedprice, \
              row_number() OVER (PARTITION BY l_partkey ORDER BY l_extendedprice DESC, \
              l_orderkey, l_linenumber) AS w FROM lineitem) WHERE w <= 3",
        ordered_by: &[],
    },
    Query {
        name: "W3",
        sql: "SELECT l_orderkey, l_linenumber, l_shipdate, sum(l_extendedprice) OVER \
              (ORDER BY l_shipdate, l_orderkey, l_linenumber ROWS BETWEEN 6 PRECEDING AND \
              CURRENT ROW) AS w FROM lineitem",
        ordered_by: &[],
    },
    Query {
        name: "W4",
        sql: "SELECT l_orderkey, l_linenumber, lag(l_extendedprice) OVER (PARTITION BY \
              l_orderkey ORDER BY l_linenumber) AS w FROM lineitem",
        ordered_by: &[],
    },
    Query {
        name: "W5",
        sql: "SELECT l_orderkey, l_extendedprice FROM lineitem \
              ORDER BY l_extendedprice DESC, l_orderkey LIMIT 100",
        ordered_by: &["l_extendedprice", "l_orderkey"],
    },
    Query {
        name: "W6",
        sql: "SELECT l_comment, l_orderkey, l_linenumber FROM lineitem ORDER BY l_comment, l_orderkey, l_linenumber LIMIT 1000000",
        ordered_by: &["l_comment", "l_orderkey", "l_linenumber"],
    },
    Query {
        name: "W7",
        sql: "SELECT l_orderkey, l_linenumber, l_shipdate, sum(l_extendedprice) OVER \
              (ORDER BY l_shipdate, l_orderkey, l_linenumber ROWS UNBOUNDED PRECEDING) AS w \
              FROM lineitem",
        ordered_by: &[],
    },
    Query {
        name: "W8",
        sql: "SELECT l_orderkey, l_linenumber, l_shipdate, row_number() OVER \
              (ORDER BY l_shipdate, l_orderkey, l_linenumber) AS w FROM lineitem",
        ordered_by: &[],
    },
    Query {
        name: "W9",
        sql: "SELECT l_suppkey, l_orderkey, l_linenumber, l_shipdate, l_extendedprice \
              FROM lineitem ORDER BY l_suppkey, l_shipdate, l_orderkey, l_linenumber",
        ordered_by: &["l_suppkey", "l_shipdate", "l_orderkey", "l_linenumber"],
    },
    Query {
        name: "W10",
        sql: "SELECT l_suppkey, l_orderkey, l_linenumber, \
              sum(l_quantity) OVER w AS s, avg(l_extendedprice) OVER w AS a, \
              min(l_discount) OVER w AS mn, max(l_extendedprice) OVER w AS mx, \
              count(*) OVER w AS c FROM lineitem WINDOW w AS (PARTITION BY l_suppkey \
              ORDER BY l_shipdate, l_orderkey, l_linenumber ROWS BETWEEN 10 PRECEDING AND \
              CURRENT ROW)",
        ordered_by: &[],
    },
    Query {
        name: "W11",
        sql: "SELECT l_orderkey, l_linenumber, l_shipdate, sum(l_quantity) OVER \
              (PARTITION BY l_shipmode ORDER BY l_shipdate) AS w FROM lineitem",
        ordered_by: &[],
    },
    Query {
        name: "W12",
        sql: "SELECT l_suppkey, l_orderkey, l_linenumber, l_shipdate, sum(l_extendedprice) \
              OVER (PARTITION BY l_suppkey ORDER BY l_shipdate RANGE BETWEEN INTERVAL \
              '30 days' PRECEDING AND CURRENT ROW) AS w FROM lineitem",
        ordered_by: &[],
    },
    Query {
        name: "W13",
        sql: "SELECT l_orderkey, l_linenumber, l_shipdate, avg(l_quantity) OVER \
              (ORDER BY l_shipdate RANGE BETWEEN INTERVAL '7 days' PRECEDING AND CURRENT \
              ROW) AS w FROM lineitem",
        ordered_by: &[],
    },
    Query {
        name: "W14",
        sql: "SELECT l_suppkey, l_orderkey, l_linenumber, l_shipdate, l_quantity, \
              l_extendedprice, l_discount FROM lineitem \
              ORDER BY l_suppkey, l_shipdate, l_orderkey, l_linenumber",
        ordered_by: &["l_suppkey", "l_shipdate", "l_orderkey", "l_linenumber"],
    },
];

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

/// `ORDER BY .. LIMIT 10^k` over `lineitem` (`--suite limits`): L on a fixed-width key,
/// S on a string key (with the row's identity after it, so that ties at the cut do not
/// make the engines' answers differ).
const LIMIT_QUERIES: [Query; 8] = [
    Query {
        name: "L3",
        sql: "SELECT l_orderkey, l_extendedprice FROM lineitem ORDER BY l_extendedprice DESC, l_orderkey LIMIT 1000",
        ordered_by: &["l_extendedprice", "l_orderkey"],
    },
    Query {
        name: "L4",
        sql: "SELECT l_orderkey, l_extendedprice FROM lineitem ORDER BY l_extendedprice DESC, l_orderkey LIMIT 10000",
        ordered_by: &["l_extendedprice", "l_orderkey"],
    },
    Query {
        name: "L5",
        sql: "SELECT l_orderkey, l_extendedprice FROM lineitem ORDER BY l_extendedprice DESC, l_orderkey LIMIT 100000",
        ordered_by: &["l_extendedprice", "l_orderkey"],
    },
    Query {
        name: "L6",
        sql: "SELECT l_orderkey, l_extendedprice FROM lineitem ORDER BY l_extendedprice DESC, l_orderkey LIMIT 1000000",
        ordered_by: &["l_extendedprice", "l_orderkey"],
    },
    Query {
        name: "S3",
        sql: "SELECT l_comment, l_orderkey, l_linenumber FROM lineitem ORDER BY l_comment, l_orderkey, l_linenumber LIMIT 1000",
        ordered_by: &["l_comment", "l_orderkey", "l_linenumber"],
    },
    Query {
        name: "S4",
        sql: "SELECT l_comment, l_orderkey, l_linenumber FROM lineitem ORDER BY l_comment, l_orderkey, l_linenumber LIMIT 10000",
        ordered_by: &["l_comment", "l_orderkey", "l_linenumber"],
    },
    Query {
        name: "S5",
        sql: "SELECT l_comment, l_orderkey, l_linenumber FROM lineitem ORDER BY l_comment, l_orderkey, l_linenumber LIMIT 100000",
        ordered_by: &["l_comment", "l_orderkey", "l_linenumber"],
    },
    Query {
        name: "S6",
        sql: "SELECT l_comment, l_orderkey, l_linenumber FROM lineitem ORDER BY l_comment, l_orderkey, l_linenumber LIMIT 1000000",
        ordered_by: &["l_comment", "l_orderkey", "l_linenumber"],
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
    let suite: &[Query] = match options.suite.as_str() {
        "windows" => &WINDOW_QUERIES,
        "limits" => &LIMIT_QUERIES,
        _ => &QUERIES,
    };
    let queries = suite.iter().filter(|q| selected(q, &runs.only));
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
