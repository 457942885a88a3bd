//! 02: sort Parquet files into one sorted Parquet file, as `gpusort sort` does.
//!
//! `cargo run --release --example 02_sort_parquet [-- <dir>]`
//!
//! Writes two small Parquet files of sensor readings, sorts them by
//! `sensor, ts DESC` into `sorted.parquet` (the sort order declared in its metadata), and
//! reads the result back with DataFusion, which plans no sort for that order.

use std::path::PathBuf;

use datafusion::prelude::{ParquetReadOptions, SessionContext};
use gpusort::pipeline::{sort_files, Progress, SortJob};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("gpusort-example-02"));
    std::fs::create_dir_all(&dir)?;

    // Two input files, written by DataFusion.
    let ctx = SessionContext::new();
    for (i, rows) in [
        "(2, 30, 0.5), (1, 10, 1.5)",
        "(2, 10, 'NaN'), (1, 20, NULL)",
    ]
    .iter()
    .enumerate()
    {
        let path = dir.join(format!("readings-{i}.parquet"));
        ctx.sql(&format!(
            "COPY (SELECT column1 AS sensor, column2 AS ts, column3 AS value \
             FROM (VALUES {rows})) TO '{}' STORED AS PARQUET",
            path.display()
        ))
        .await?
        .collect()
        .await?;
    }

    // The sort: inputs may be files, directories or globs.
    let output = dir.join("sorted.parquet");
    let mut job = SortJob::new(
        vec![format!("{}/readings-*.parquet", dir.display())],
        &output,
        "sensor, ts DESC",
    );
    job.overwrite = true;
    let summary = sort_files(&job, &Progress::new()).await?;
    println!("{summary}");

    // Reading it back: DataFusion knows the file is sorted.
    ctx.register_parquet(
        "sorted",
        output.to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await?;
    let query = "SELECT * FROM sorted ORDER BY sensor, ts DESC";
    ctx.sql(&format!("EXPLAIN {query}")).await?.show().await?;
    ctx.sql(query).await?.show().await?;
    Ok(())
}
