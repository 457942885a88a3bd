//! The output stream of one `GpuSortExec` partition.
//!
//! ```text
//!  input partitions ──(concurrently, accounted in the MemoryPool)──► buffered batches
//!        │                 (and to the backend's early copy of the payload, if any)
//!        │                 reservation full: sort buffered runs ──► spill files (buffer.rs)
//!        ▼  split into runs of ≤ run_rows                  (partition order, then arrival)
//!  one run:    spawn_blocking(sort_run) ──batches──► channel ──► consumer
//!  many runs:  spawn_blocking(sort_run) per run ─► DataFusion's streaming merge
//!  spilled:    rest spilled too; spill files read back ─► streaming merge
//!              (ties broken by run index: stable) ──────────────► channel ──► consumer
//! ```
//!
//! Dropping the stream aborts the collecting task and cancels the sort (`cancel.rs`): a
//! blocking sort stops at its next stage or output batch. The memory reservation is
//! released when the task ends either way.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow;
use datafusion::common::Result;
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;
use tokio::sync::mpsc::Sender;

use super::buffer::{Buffered, InputBuffer};
use super::metrics::SortMetrics;
use super::resources::SortResources;
use super::run::{split_runs, RunSorter, SortSpec};
use super::spill::{merge_runs, MergeMemory};
use crate::gather::EarlyColumns;

/// Everything one partition's sort owns while it runs.
pub(super) struct SortTask {
    /// Input streams, in partition order.
    pub inputs: Vec<SendableRecordBatchStream>,
    /// Memory accounted for the buffered input and the sort's working memory.
    pub reservation: MemoryReservation,
    /// The sort's properties and execution resources.
    pub resources: SortResources,
}

/// Output batches that may wait in the channel. A run's gather builds a window of batches
/// at once, so batches waiting here cost no memory beyond that window (merged output: at
/// most this many batches more); a deeper channel lets the sort hand them over without
/// waiting for the consumer to wake up for each one.
pub(super) const OUTPUT_CHANNEL_BATCHES: usize = 32;

/// Starts the sort of one partition; its batches arrive on the returned stream.
pub(super) fn sort_stream(task: SortTask) -> SendableRecordBatchStream {
    let mut builder = RecordBatchReceiverStream::builder(
        Arc::clone(&task.resources.schema),
        OUTPUT_CHANNEL_BATCHES,
    );
    let tx = builder.tx();
    builder.spawn(async move { run_task(task, tx).await });
    builder.build()
}

async fn run_task(task: SortTask, tx: Sender<Result<RecordBatch>>) -> Result<()> {
    let SortTask {
        inputs,
        reservation,
        resources,
    } = task;
    let mut buffer = InputBuffer::new(inputs.len(), resources.clone(), reservation)
        .with_early(early_columns(&resources));
    let metrics = &resources.metrics;
    let collecting = metrics.collect_time.timer();
    buffer.fill(inputs).await?;
    let early = buffer.take_early();
    if let Some(early) = &early {
        early.input_ended();
    }
    let merge_memory = MergeMemory {
        reservation: buffer.reservation().new_empty(),
        sharers: 1,
    };
    let (buffered, input_reservation) = buffer.finish().await?;
    collecting.done();
    crate::trace::event(|| "input collected".to_string());
    emit_buffered(buffered, &resources, merge_memory, early, tx).await?;
    // The input and its sorted copies stay accounted until the last batch is handed over.
    drop(input_reservation);
    metrics.baseline.done();
    Ok(())
}

/// Sorts a drained input and sends its batches: one run straight through (with `early`,
/// the backend's copy of some of its columns), several runs (or spilled ones) through
/// DataFusion's streaming merge, within `merge_memory`.
pub(super) async fn emit_buffered(
    buffered: Buffered,
    resources: &SortResources,
    merge_memory: MergeMemory,
    early: Option<Arc<dyn EarlyColumns>>,
    tx: Sender<Result<RecordBatch>>,
) -> Result<()> {
    let SortResources {
        schema,
        spec,
        metrics,
        spiller,
    } = resources;
    match buffered {
        Buffered::InMemory(batches) => {
            let mut runs = split_runs(batches, spec.run_rows);
            if runs.len() <= 1 {
                if let Some(run) = runs.pop() {
                    sort_run_into(Arc::clone(spec), run, early, metrics.clone(), tx).await?;
                }
            } else {
                if let Some(early) = early {
                    early.abandon();
                }
                let sorted = sort_runs_in_memory(runs, schema, spec, metrics, &tx).await?;
                if sorted.is_empty() {
                    return Ok(());
                }
                let merged = merge_runs(
                    sorted,
                    Arc::clone(schema),
                    spec,
                    spec.batch_size,
                    merge_memory.reservation,
                )?;
                send_merged(merged, metrics, tx).await;
            }
        }
        Buffered::OnDisk(runs) if runs.is_empty() => {}
        Buffered::OnDisk(runs) => {
            let merge = spiller.merge(runs, spec, &merge_memory, metrics).await?;
            send_merged(merge.stream, metrics, tx).await;
        }
    }
    Ok(())
}

/// Sorts one run (with `early`, the backend's copy of some of its columns) on a blocking
/// thread, sending its batches as they are built.
async fn sort_run_into(
    spec: Arc<SortSpec>,
    run: Vec<RecordBatch>,
    early: Option<Arc<dyn EarlyColumns>>,
    metrics: SortMetrics,
    tx: Sender<Result<RecordBatch>>,
) -> Result<()> {
    let cancel = spec.cancel.clone();
    cancel
        .blocking(move || {
            let mut blocked = std::time::Duration::ZERO;
            let sorted = RunSorter::new(&spec, &metrics).sort_final_run(run, early, |batch| {
                metrics.baseline.record_output(batch.num_rows());
                let sending = std::time::Instant::now();
                let open = tx.blocking_send(Ok(batch)).is_ok();
                blocked += sending.elapsed();
                open
            });
            crate::trace::event(|| {
                format!(
                    "run output: waited {:.0} ms for the consumer",
                    blocked.as_secs_f64() * 1e3
                )
            });
            sorted
        })
        .await
}

/// Sorts every run into memory; empty when the consumer went away meanwhile.
async fn sort_runs_in_memory(
    runs: Vec<Vec<RecordBatch>>,
    schema: &SchemaRef,
    spec: &Arc<SortSpec>,
    metrics: &SortMetrics,
    tx: &Sender<Result<RecordBatch>>,
) -> Result<Vec<SendableRecordBatchStream>> {
    let mut sorted_runs = Vec::with_capacity(runs.len());
    for run in runs {
        let (spec, metrics) = (Arc::clone(spec), metrics.clone());
        let cancel = spec.cancel.clone();
        let sorted = cancel
            .blocking(move || {
                let mut out = Vec::new();
                RunSorter::new(&spec, &metrics)
                    .sort_run(run, |batch| {
                        out.push(batch);
                        true
                    })
                    .map(|_| out)
            })
            .await?;
        if tx.is_closed() {
            return Ok(Vec::new());
        }
        let stream = MemoryStream::try_new(sorted, Arc::clone(schema), None)?;
        sorted_runs.push(Box::pin(stream) as SendableRecordBatchStream);
    }
    Ok(sorted_runs)
}

/// Sends the batches of a merge (errors included) until it ends or the consumer goes away.
async fn send_merged(
    mut merged: SendableRecordBatchStream,
    metrics: &SortMetrics,
    tx: Sender<Result<RecordBatch>>,
) {
    while let Some(batch) = merged.next().await {
        if let Ok(batch) = &batch {
            metrics.baseline.record_output(batch.num_rows());
        }
        if tx.send(batch).await.is_err() {
            break;
        }
    }
}

/// The backend's copy of the columns the sort's resident request takes (its keys left out:
/// the key sort puts those on the device itself), made while the input is read, for a sort
/// whose run is gathered whole where it was sorted (`gather/early.rs`); `None` for any
/// other sort.
fn early_columns(resources: &SortResources) -> Option<Arc<dyn EarlyColumns>> {
    let spec = &resources.spec;
    let request = spec.resident.as_ref()?;
    if spec.windows.is_some() || spec.fetch.is_some() || spec.partition_top.is_some() {
        return None;
    }
    // Every column a key reads stays out: the keys are evaluated from the host's arrays,
    // which a copy that takes the host's place (`EarlyColumns::take_over`) replaces.
    let keys: Vec<usize> = spec
        .exprs
        .iter()
        .flat_map(|key| collect_columns(&key.expr))
        .map(|column| column.index())
        .collect();
    let columns: Vec<(usize, DataType)> = request
        .columns()
        .iter()
        .filter(|c| !keys.contains(c))
        .filter_map(|&c| Some((c, resources.schema.fields().get(c)?.data_type().clone())))
        .collect();
    if columns.is_empty() {
        return None;
    }
    spec.backend.early_columns(&columns)
}
