//! Clear errors when a worker cannot decode the plan because it lacks gpusort's codec.
//!
//! A worker whose session has no `GpuSortCodec` fails to decode a stage with a
//! `GpuSortExec` in it, and DataFusion words that as an internal error ("Can't find
//! required codec in codec list ... likely caused by a bug in DataFusion's code"). The
//! coordinator (`coordinator.rs`) puts [`WorkerErrorsExec`] above datafusion-distributed's
//! `DistributedExec`, through which every error of the query passes: it passes every batch
//! through and rewrites that one error into what to do about it. It runs on the
//! coordinator only and is never encoded.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, PlanProperties,
};
use futures::StreamExt;

/// What DataFusion says when a node's codec is missing on the decoding side.
const MISSING_CODEC: &str = "Can't find required codec in codec list";

/// Passes its input through; rewrites a worker's missing-codec error (module docs).
#[derive(Debug)]
pub struct WorkerErrorsExec {
    /// The plan it runs (datafusion-distributed's `DistributedExec`).
    input: Arc<dyn ExecutionPlan>,
}

impl WorkerErrorsExec {
    /// Passes `input` through.
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
    }

    /// The plan it runs: datafusion-distributed's `DistributedExec` (to draw with
    /// `display_plan_ascii`, or to read its metrics).
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

/// `error`, or what to do about it when a worker lacked a codec the plan needs.
fn explained(error: DataFusionError) -> DataFusionError {
    if !error.to_string().contains(MISSING_CODEC) {
        return error;
    }
    // DataFusion picks a node's codec by its position in the list of codecs: the worker's
    // list is shorter than the coordinator's, most likely without gpusort's codec.
    DataFusionError::Execution(format!(
        "gpusort: a worker could not decode its part of the plan, which has gpusort's \
         GpuSortExec in it: the worker's codecs differ from the coordinator's (the worker \
         has no gpusort codec, or its codecs were registered in another order). Build every \
         worker's session with gpusort_distributed (gpu_sort_worker(), gpu_sort_worker_session, \
         or with_gpu_sort_worker in your WorkerSessionBuilder, your other codecs in the \
         coordinator's order), with the gpusort version of the coordinator. The worker said: {}",
        error.strip_backtrace().lines().next().unwrap_or_default()
    ))
}

impl DisplayAs for WorkerErrorsExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "WorkerErrorsExec")
    }
}

impl ExecutionPlan for WorkerErrorsExec {
    fn name(&self) -> &'static str {
        "WorkerErrorsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::UnspecifiedDistribution]
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
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match <[_; 1]>::try_from(children) {
            Ok([input]) => Ok(Arc::new(Self::new(input))),
            Err(_) => internal_err!("WorkerErrorsExec takes one child"),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let stream = self.input.execute(partition, context).map_err(explained)?;
        let schema = stream.schema();
        let stream = stream.map(|batch| batch.map_err(explained));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}
