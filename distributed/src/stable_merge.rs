//! `StableMergeExec`: the coordinator's merge, ties taken partition by partition.
//!
//! DataFusion's `SortPreservingMergeExec` breaks ties between its inputs round robin (for
//! even progress when many rows are equal), so equal rows of two workers' shares come out
//! interleaved. It can break them by input partition instead, but that setting does not
//! survive a change of children with recomputed properties, which datafusion-distributed
//! makes when it cuts the plan and again when it starts the query. So, once the plan is
//! cut, the merges of the head stage (the coordinator's, never sent to a worker) become
//! this node: the same merge (DataFusion's streaming merge, same keys, fetch and output
//! properties) with the tie break fixed to input order. Each partition's rows were sorted
//! stably by its `GpuSortExec`, so ties leave in input order: partition by partition,
//! each in the order its worker read them.
//!
//! It also reads every input ahead of the merge. datafusion-distributed multiplexes all
//! partitions of a worker over one gRPC stream and stops pulling from it while the
//! batches received but not yet consumed pass `distributed.worker_connection_buffer_budget_bytes`
//! (64 MiB by default). A merge consumes the partitions unevenly: when the budget fills
//! with batches of partitions it does not need yet, the batch it waits for never arrives,
//! and the query hangs (100 M rows from two workers of 16 partitions each did, on the GPU
//! host). So each input is drained as it arrives into a queue of the merge's own, counted in
//! the memory pool as `StableMergeExec[read-ahead]`: what the coordinator holds is what the
//! merge has not yet consumed, as it would be with an unlimited budget.
//!
//! ```text
//!  worker stream ─► per-partition channels (gated) ─► read-ahead queues ─► merge ─► out
//!                    drained at once ───────────────┘  (unbounded, counted)
//! ```

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr};
use datafusion::physical_plan::execution_plan::apply_expression_roots;
use datafusion::physical_plan::limit::LimitStream;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, Gauge, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::sorts::streaming_merge::StreamingMergeBuilder;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties,
};
use futures::StreamExt;

/// Merges sorted partitions into one, ties in input-partition order (module docs).
#[derive(Debug)]
pub struct StableMergeExec {
    /// The sorted partitions to merge.
    input: Arc<dyn ExecutionPlan>,
    /// The keys every input partition is sorted by.
    expr: LexOrdering,
    /// Emit at most this many rows.
    fetch: Option<usize>,
    /// The properties DataFusion's merge computes for the same input and keys.
    cache: Arc<PlanProperties>,
    /// Execution metrics.
    metrics: ExecutionPlanMetricsSet,
}

impl StableMergeExec {
    /// The merge `merge` does, with ties broken by input partition.
    pub fn from_merge(merge: &SortPreservingMergeExec) -> Self {
        Self::new(
            Arc::clone(merge.input()),
            merge.expr().clone(),
            merge.fetch(),
        )
    }

    fn new(input: Arc<dyn ExecutionPlan>, expr: LexOrdering, fetch: Option<usize>) -> Self {
        let reference =
            SortPreservingMergeExec::new(expr.clone(), Arc::clone(&input)).with_fetch(fetch);
        Self {
            cache: Arc::clone(reference.properties()),
            input,
            expr,
            fetch,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for StableMergeExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "StableMergeExec: [{}]", self.expr)?;
        if let Some(fetch) = self.fetch {
            write!(f, ", fetch={fetch}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for StableMergeExec {
    fn name(&self) -> &'static str {
        "StableMergeExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.cache
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::UnspecifiedDistribution]
    }

    fn required_input_ordering(
        &self,
    ) -> Vec<Option<datafusion::physical_expr::OrderingRequirements>> {
        vec![Some(self.expr.clone().into())]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        apply_expression_roots(self.expr.iter().map(|e| &e.expr), f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match <[_; 1]>::try_from(children) {
            Ok([input]) => Ok(Arc::new(Self::new(input, self.expr.clone(), self.fetch))),
            Err(_) => internal_err!("StableMergeExec takes one child"),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return internal_err!(
                "StableMergeExec has one output partition, asked for {partition}"
            );
        }
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let inputs = self.input.output_partitioning().partition_count();
        if inputs == 1 {
            let stream = self.input.execute(0, context)?;
            return Ok(match self.fetch {
                Some(fetch) => Box::pin(LimitStream::new(stream, 0, Some(fetch), metrics)),
                None => stream,
            });
        }
        // The most bytes the read-ahead queues held at once (EXPLAIN ANALYZE shows it).
        let peak = MetricBuilder::new(&self.metrics).global_gauge("read_ahead_peak_bytes");
        let read_ahead = Arc::new(
            MemoryConsumer::new("StableMergeExec[read-ahead]").register(context.memory_pool()),
        );
        let streams = (0..inputs)
            .map(|p| {
                let input = self.input.execute(p, Arc::clone(&context))?;
                Ok(read_ahead_stream(
                    input,
                    Arc::clone(&read_ahead),
                    peak.clone(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let reservation = MemoryConsumer::new("StableMergeExec").register(context.memory_pool());
        StreamingMergeBuilder::new()
            .with_streams(streams)
            .with_schema(self.schema())
            .with_expressions(&self.expr)
            .with_metrics(metrics)
            .with_batch_size(context.session_config().batch_size())
            .with_fetch(self.fetch)
            .with_reservation(reservation)
            .with_round_robin_tie_breaker(false)
            .build()
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn fetch(&self) -> Option<usize> {
        self.fetch
    }
}

/// `input` drained as fast as it arrives, on a task of its own, into an unbounded queue
/// whose batches are counted in `reservation` until the merge takes them. Past the memory
/// pool's limit the stream fails with `ResourcesExhausted`; a panic of the task comes out as
/// an error, never as a shorter stream.
fn read_ahead_stream(
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
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};

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
