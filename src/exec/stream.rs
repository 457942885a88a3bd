//! The output stream of one `GpuSortExec` partition.
//!
//! ```text
//!  input partitions ──(concurrently, accounted in the MemoryPool)──► buffered batches
//!        │                                               (partition order, then arrival)
//!        ▼  split into runs of ≤ run_rows
//!  one run:    spawn_blocking(sort_run) ──batches──► channel ──► consumer
//!  many runs:  spawn_blocking(sort_run) per run ─► DataFusion's streaming merge
//!              (ties broken by run index: stable) ──────────────► channel ──► consumer
//! ```
//!
//! Dropping the stream aborts the collecting task; a blocking sort sees the closed
//! channel at its next output batch and stops. The memory reservation is released when
//! the task ends either way.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::arrow;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet};
use datafusion::physical_plan::sorts::streaming_merge::StreamingMergeBuilder;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::mpsc::Sender;

use super::metrics::SortMetrics;
use super::sorter::{sort_run, split_runs, working_bytes, SortSpec};

/// Everything one partition's sort owns while it runs.
pub struct SortTask {
    /// Input streams, in partition order.
    pub inputs: Vec<SendableRecordBatchStream>,
    /// Output schema (the input's).
    pub schema: SchemaRef,
    /// Keys, limit, backend.
    pub spec: Arc<SortSpec>,
    /// Memory accounted for the buffered input and the sort's working memory.
    pub reservation: MemoryReservation,
    /// Where stage times and bytes go.
    pub metrics: SortMetrics,
}

/// Starts the sort of one partition; its batches arrive on the returned stream.
pub fn sort_stream(task: SortTask) -> SendableRecordBatchStream {
    let mut builder = RecordBatchReceiverStream::builder(Arc::clone(&task.schema), 2);
    let tx = builder.tx();
    builder.spawn(async move { run_task(task, tx).await });
    builder.build()
}

async fn run_task(task: SortTask, tx: Sender<Result<RecordBatch>>) -> Result<()> {
    let SortTask {
        inputs,
        schema,
        spec,
        reservation,
        metrics,
    } = task;
    let batches = collect_inputs(inputs, &reservation).await?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    reservation
        .try_grow(working_bytes(rows.min(spec.run_rows), spec.exprs.len()))
        .map_err(|e| e.context("gpusort: reserving memory to sort the buffered input"))?;
    let mut runs = split_runs(batches, spec.run_rows);
    if runs.len() <= 1 {
        let Some(run) = runs.pop() else {
            metrics.baseline.done();
            return Ok(());
        };
        sort_run_into(spec, run, metrics.clone(), tx).await?;
    } else {
        merge_runs(runs, schema, spec, &reservation, &metrics, tx).await?;
    }
    metrics.baseline.done();
    drop(reservation);
    Ok(())
}

/// Drains every input partition concurrently; returns the batches in partition order.
async fn collect_inputs(
    inputs: Vec<SendableRecordBatchStream>,
    reservation: &MemoryReservation,
) -> Result<Vec<RecordBatch>> {
    let collect_one = |stream: SendableRecordBatchStream| {
        stream
            .try_filter(|b| futures::future::ready(b.num_rows() > 0))
            .and_then(|batch| {
                let grown = reservation
                    .try_grow(batch.get_array_memory_size())
                    .map(|_| batch)
                    .map_err(|e| e.context("gpusort: buffering the sort's input"));
                futures::future::ready(grown)
            })
    };
    let partitions = futures::future::try_join_all(
        inputs
            .into_iter()
            .map(|s| collect_one(s).try_collect::<Vec<_>>()),
    )
    .await?;
    Ok(partitions.into_iter().flatten().collect())
}

/// Sorts one run on a blocking thread, sending its batches as they are built.
async fn sort_run_into(
    spec: Arc<SortSpec>,
    run: Vec<RecordBatch>,
    metrics: SortMetrics,
    tx: Sender<Result<RecordBatch>>,
) -> Result<()> {
    tokio::task::spawn_blocking(move || {
        sort_run(&spec, run, &metrics, |batch| {
            metrics.baseline.record_output(batch.num_rows());
            tx.blocking_send(Ok(batch)).is_ok()
        })
    })
    .await
    .map_err(|e| DataFusionError::External(Box::new(e)))?
}

/// Sorts every run, then merges them with DataFusion's streaming merge.
async fn merge_runs(
    runs: Vec<Vec<RecordBatch>>,
    schema: SchemaRef,
    spec: Arc<SortSpec>,
    reservation: &MemoryReservation,
    metrics: &SortMetrics,
    tx: Sender<Result<RecordBatch>>,
) -> Result<()> {
    let mut sorted_runs = Vec::with_capacity(runs.len());
    for run in runs {
        let (spec, metrics) = (Arc::clone(&spec), metrics.clone());
        let sorted = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            sort_run(&spec, run, &metrics, |batch| {
                out.push(batch);
                true
            })
            .map(|_| out)
        })
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))??;
        sorted_runs.push(sorted);
        if tx.is_closed() {
            return Ok(());
        }
    }
    let streams = sorted_runs
        .into_iter()
        .map(|run| {
            let stream = MemoryStream::try_new(run, Arc::clone(&schema), None)?;
            Ok(Box::pin(stream) as SendableRecordBatchStream)
        })
        .collect::<Result<Vec<_>>>()?;
    let merge_metrics = BaselineMetrics::new(&ExecutionPlanMetricsSet::new(), 0);
    let mut merged = StreamingMergeBuilder::new()
        .with_streams(streams)
        .with_schema(schema)
        .with_expressions(&spec.exprs)
        .with_metrics(merge_metrics)
        .with_batch_size(spec.batch_size)
        .with_fetch(spec.fetch)
        .with_reservation(reservation.new_empty())
        .with_round_robin_tie_breaker(false)
        .build()?;
    while let Some(batch) = merged.next().await {
        if let Ok(batch) = &batch {
            metrics.baseline.record_output(batch.num_rows());
        }
        if tx.send(batch).await.is_err() {
            break;
        }
    }
    Ok(())
}
