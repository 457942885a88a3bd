//! `GpuSortSubplanExec`: a part of a datafusion-python query that runs inside gpusort's
//! library, handed to the host as one leaf.
//!
//! ```text
//!  host (datafusion-python)         gpusort's library
//!  ProjectionExec                   GpuSortSubplanExec ─▶ SortedWindowExec
//!    GpuSortSubplanExec ── FFI ──▶                          GpuSortExec
//!                                                             DataSourceExec (parquet)
//! ```
//!
//! Each library links its own tokio. A node of the host's, polled from gpusort's runtime
//! (where a sort drains its input), finds no runtime of its own and aborts the process
//! when it spawns a task (a repartition does). So a gpusort operator never reads a node of
//! the host's: the planner hands the host each gpusort operator with everything below it
//! as this leaf, and the whole subplan runs here, on gpusort's runtime, over the nodes the
//! host's plan was rebuilt into in this library. Only the leaf's output stream crosses,
//! polled by the host with gpusort's runtime entered.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::{
    displayable, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    SendableRecordBatchStream,
};

/// A subplan run by gpusort's library; see the module docs.
#[derive(Debug)]
pub struct GpuSortSubplanExec {
    subplan: Arc<dyn ExecutionPlan>,
}

impl GpuSortSubplanExec {
    pub fn new(subplan: Arc<dyn ExecutionPlan>) -> Self {
        Self { subplan }
    }
}

impl DisplayAs for GpuSortSubplanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let top = displayable(self.subplan.as_ref()).one_line().to_string();
        match t {
            DisplayFormatType::TreeRender => write!(f, "subplan={}", self.subplan.name()),
            _ => write!(
                f,
                "GpuSortSubplanExec: in gpusort's library: {}",
                top.trim()
            ),
        }
    }
}

impl ExecutionPlan for GpuSortSubplanExec {
    fn name(&self) -> &'static str {
        "GpuSortSubplanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.subplan.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return internal_err!("GpuSortSubplanExec is a leaf");
        }
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.subplan.execute(partition, context)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.subplan.metrics()
    }
}
