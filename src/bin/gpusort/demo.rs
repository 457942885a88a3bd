//! `gpusort demo`: generate a table, sort it through gpusort and through DataFusion's own
//! sort, print the plan, the backend, both times, and verify order, stability and equality.

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{Array, AsArray, Float64Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::common::{exec_err, Result};
use datafusion::datasource::MemTable;
use datafusion::physical_plan::{collect, displayable};
use gpusort::BackendChoice;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::session::new_session;

const QUERY: &str = "SELECT * FROM t ORDER BY k";
const BATCH_ROWS: usize = 8192;

/// Runs the demo on `rows` generated rows.
pub async fn run(rows: usize, seed: u64, backend: BackendChoice) -> Result<()> {
    let session = new_session(backend);
    let partitions = std::thread::available_parallelism().map_or(4, |n| n.get());
    let table = generate_table(rows, seed, partitions)?;
    session.ctx.register_table("t", Arc::new(table))?;
    println!("table t: {rows} rows (k BIGINT random with ties, v DOUBLE, id BIGINT = input order), {partitions} partitions");
    println!("query: {QUERY}\n");

    let plan = session.ctx.sql(QUERY).await?.create_physical_plan().await?;
    println!("{}", displayable(plan.as_ref()).indent(true));
    println!("{}\n", session.rule.last_decisions_text());

    let started = Instant::now();
    let sorted = collect(plan, session.ctx.task_ctx()).await?;
    let gpusort_secs = started.elapsed().as_secs_f64();
    verify_sorted_and_stable(&sorted, rows)?;
    println!("gpusort:          {gpusort_secs:.3} s, order and stability verified");

    session
        .ctx
        .sql("SET gpu_sort.enabled = false")
        .await?
        .collect()
        .await?;
    let started = Instant::now();
    let reference = session.ctx.sql(QUERY).await?.collect().await?;
    let datafusion_secs = started.elapsed().as_secs_f64();
    println!("DataFusion sort:  {datafusion_secs:.3} s");
    if key_column(&reference) != key_column(&sorted) {
        return exec_err!("gpusort's keys differ from DataFusion's");
    }
    println!(
        "keys identical to DataFusion's; speedup {:.2}x",
        datafusion_secs / gpusort_secs
    );
    Ok(())
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Float64, false),
        Field::new("id", DataType::Int64, false),
    ]))
}

fn generate_table(rows: usize, seed: u64, partitions: usize) -> Result<MemTable> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let key_range = (rows as i64 / 2).max(1);
    let mut parts = vec![Vec::new(); partitions];
    let mut start = 0usize;
    let mut batch_index = 0;
    while start < rows {
        let len = BATCH_ROWS.min(rows - start);
        let k =
            Int64Array::from_iter_values((0..len).map(|_| rng.random_range(-key_range..key_range)));
        let v = Float64Array::from_iter_values((0..len).map(|_| rng.random::<f64>()));
        let id = Int64Array::from_iter_values(start as i64..(start + len) as i64);
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(v), Arc::new(id)])?;
        // Contiguous ranges per partition, so partition order is input order.
        parts[batch_index * partitions / rows.div_ceil(BATCH_ROWS)].push(batch);
        start += len;
        batch_index += 1;
    }
    MemTable::try_new(schema(), parts)
}

fn key_column(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

fn verify_sorted_and_stable(batches: &[RecordBatch], rows: usize) -> Result<()> {
    let keys = key_column(batches);
    let ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(2).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    if keys.len() != rows || batches.iter().any(|b| b.column(0).null_count() > 0) {
        return exec_err!("expected {rows} rows, got {}", keys.len());
    }
    for i in 1..keys.len() {
        if keys[i - 1] > keys[i] {
            return exec_err!("row {i}: key {} after {}", keys[i], keys[i - 1]);
        }
        if keys[i - 1] == keys[i] && ids[i - 1] > ids[i] {
            return exec_err!("row {i}: tie of key {} out of input order", keys[i]);
        }
    }
    Ok(())
}
