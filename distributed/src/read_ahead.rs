//! Each input of the coordinator's merge read ahead: drained as it arrives, on a task of
//! its own, into a queue counted in the memory pool.
//!
//! datafusion-distributed multiplexes all partitions of a worker over one gRPC stream and
//! stops pulling from it while the batches received but not yet consumed pass
//! `distributed.worker_connection_buffer_budget_bytes` (64 MiB by default). A merge
//! consumes the partitions unevenly: when the budget fills with batches of partitions it
//! does not need yet, the batch it waits for never arrives, and the query hangs (100 M rows
//! from two workers of 16 partitions each did, on the GPU host). Draining every partition
//! into a queue of the merge's own, counted as `StableMergeExec[read-ahead]`, means the
//! coordinator holds what the merge has not yet consumed, as it would with an unlimited
//! budget.
//!
//! ```text
//!  worker stream ─► per-partition channels (gated) ─► read-ahead queues ─► merge
//!                    drained at once ───────────────┘  (unbounded, counted)
//! ```

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::metrics::Gauge;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;

/// `input` drained as fast as it arrives, on a task of its own, into an unbounded queue
/// whose batches are counted in `reservation` until the merge takes them. Past the memory
/// pool's limit the stream fails with `ResourcesExhausted`; a panic of the task comes out as
/// an error, never as a shorter stream.
pub(crate) fn read_ahead_stream(
    mut input: SendableRecordBatchStream,
    reservation: Arc<MemoryReservation>,
    peak: Gauge,
) -> SendableRecordBatchStream {
    let schema = input.schema();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let held = Arc::clone(&reservation);
    let task = SpawnedTask::spawn(async move {
        while let Some(batch) = input.next().await {
            let batch = batch.and_then(|batch| {
                held.try_grow(batch.get_array_memory_size()).map_err(|e| {
                    DataFusionError::ResourcesExhausted(format!(
                        "gpusort: the coordinator's merge reads every worker's stream ahead \
                         (docs/distributed.md) and its queues passed the memory pool: {e}"
                    ))
                })?;
                peak.set_max(held.size());
                Ok(batch)
            });
            let failed = batch.is_err();
            if tx.send(batch).is_err() || failed {
                break;
            }
        }
    });
    let state = ReadAhead {
        rx,
        task: Some(task),
        reservation,
    };
    let output = futures::stream::unfold(state, |mut state| async move {
        let batch = match state.rx.recv().await {
            Some(batch) => batch,
            // The queue ended: the task returned, or panicked.
            None => {
                let task = state.task.take()?;
                match task.join().await {
                    Ok(()) => return None,
                    Err(why) => Err(DataFusionError::Execution(format!(
                        "gpusort: the coordinator's read-ahead of a worker's stream failed: {why}"
                    ))),
                }
            }
        };
        if let Ok(batch) = &batch {
            state.reservation.shrink(batch.get_array_memory_size());
        }
        Some((batch, state))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, output))
}

/// The merge's side of one input's read-ahead. Dropping it (the query ended or was
/// cancelled) aborts the reading task.
struct ReadAhead {
    rx: tokio::sync::mpsc::UnboundedReceiver<Result<RecordBatch>>,
    task: Option<SpawnedTask<()>>,
    reservation: Arc<MemoryReservation>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryConsumer, MemoryPool};

    fn batch(values: Vec<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values))]).unwrap()
    }

    fn stream_of(items: Vec<Result<RecordBatch>>) -> SendableRecordBatchStream {
        let schema = batch(vec![]).schema();
        Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::iter(items),
        ))
    }

    fn reservation(pool: &Arc<dyn MemoryPool>) -> Arc<MemoryReservation> {
        Arc::new(MemoryConsumer::new("test").register(pool))
    }

    #[tokio::test]
    async fn batches_pass_in_order_and_their_memory_comes_back() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let input = stream_of(vec![Ok(batch(vec![1, 2])), Ok(batch(vec![3]))]);
        let peak = Gauge::new();
        let out: Vec<_> = read_ahead_stream(input, reservation(&pool), peak.clone())
            .collect()
            .await;
        assert!(peak.value() > 0, "the queued bytes are measured");
        let values: Vec<usize> = out.iter().map(|b| b.as_ref().unwrap().num_rows()).collect();
        assert_eq!(values, vec![2, 1]);
        assert_eq!(pool.reserved(), 0);
    }

    #[tokio::test]
    async fn an_input_error_ends_the_stream_with_it() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let input = stream_of(vec![
            Ok(batch(vec![1])),
            Err(DataFusionError::Execution("worker gone".into())),
            Ok(batch(vec![2])),
        ]);
        let out: Vec<_> = read_ahead_stream(input, reservation(&pool), Gauge::new())
            .collect()
            .await;
        assert_eq!(out.len(), 2);
        assert!(out[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("worker gone"));
    }

    #[tokio::test]
    async fn past_the_pool_the_stream_fails_instead_of_growing() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(16));
        let input = stream_of(vec![Ok(batch((0..1000).collect()))]);
        let out: Vec<_> = read_ahead_stream(input, reservation(&pool), Gauge::new())
            .collect()
            .await;
        let error = out[0].as_ref().unwrap_err().to_string();
        assert!(
            error.contains("reads every worker's stream ahead"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_panicking_input_is_an_error_not_a_shorter_stream() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let schema = batch(vec![]).schema();
        let panicking = futures::stream::iter(vec![Ok(batch(vec![1]))])
            .chain(futures::stream::once(async { panic!("decoder bug") }));
        let input: SendableRecordBatchStream =
            Box::pin(RecordBatchStreamAdapter::new(schema, panicking));
        let out: Vec<_> = read_ahead_stream(input, reservation(&pool), Gauge::new())
            .collect()
            .await;
        assert_eq!(out.len(), 2);
        assert!(out[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("read-ahead"));
    }
}
