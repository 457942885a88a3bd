//! `StableMergeExec`: the coordinator's merge, ties taken partition by partition, on all
//! cores.
//!
//! DataFusion's `SortPreservingMergeExec` breaks ties between its inputs round robin (for
//! even progress when many rows are equal), so equal rows of two workers' shares come out
//! interleaved. It can break them by input partition instead, but that setting does not
//! survive a change of children with recomputed properties, which datafusion-distributed
//! makes when it cuts the plan and again when it starts the query. So, once the plan is
//! cut, the merges of the head stage (the coordinator's, never sent to a worker) become
//! this node, with the same keys, fetch and output properties. Each partition's rows were
//! sorted stably by its `GpuSortExec`, so ties leave in input order: partition by
//! partition, each in the order its worker read them.
//!
//! The merge itself is `parallel_merge`: in steps, on all of the coordinator's cores,
//! where DataFusion's merge uses one (it was most of a distributed sort's time). Every
//! input is read ahead (`read_ahead`), so a worker's connection budget never holds back the
//! partition the merge waits for.
//!
//! ```text
//!  worker stream ─► per-partition channels ─► read-ahead queues ─► parallel merge ─► out
//! ```

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr};
use datafusion::physical_plan::execution_plan::apply_expression_roots;
use datafusion::physical_plan::limit::LimitStream;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties,
};

use crate::parallel_merge::{parallel_merge, MergeSettings};
use crate::read_ahead::read_ahead_stream;

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
        let settings = MergeSettings {
            schema: self.schema(),
            expr: self.expr.clone(),
            batch_size: context.session_config().batch_size(),
            fetch: self.fetch,
            metrics,
            reservation: MemoryConsumer::new("StableMergeExec").register(context.memory_pool()),
        };
        parallel_merge(streams, settings)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn fetch(&self) -> Option<usize> {
        self.fetch
    }
}
