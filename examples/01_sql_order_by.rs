//! 01: turn gpusort on in a `SessionContext` and run an `ORDER BY`.
//!
//! `cargo run --release --example 01_sql_order_by`

use datafusion::common::Result;
use gpusort::{gpu_sort_context, GpuSortConfig};

#[tokio::main]
async fn main() -> Result<()> {
    let ctx = gpu_sort_context(GpuSortConfig::default());
    // Tiny inputs normally keep DataFusion's sort; route this one through gpusort.
    ctx.sql("SET gpu_sort.min_rows = 0")
        .await?
        .collect()
        .await?;
    ctx.sql(
        "CREATE TABLE readings(sensor INT, ts BIGINT, value DOUBLE) AS VALUES \
         (2, 30, 0.5), (1, 10, -0.0), (2, 10, 'NaN'), (1, 20, NULL), (3, 5, 2.5)",
    )
    .await?
    .collect()
    .await?;
    let query = "SELECT * FROM readings ORDER BY value DESC NULLS LAST, ts";
    ctx.sql(&format!("EXPLAIN {query}")).await?.show().await?;
    ctx.sql(query).await?.show().await?;
    Ok(())
}
