//! The coordinator's query planner: the session's own (datafusion-distributed's, which
//! cuts the plan into stages), then two changes on the coordinator's side of the plan,
//! which is never sent to a worker:
//!
//! ```text
//!  DistributedExec                          WorkerErrorsExec                (worker_errors.rs)
//!    SortPreservingMergeExec     ──►          DistributedExec
//!      NetworkCoalesceExec                      StableMergeExec             (stable_merge.rs)
//!        stage 1 (workers):                       NetworkCoalesceExec
//!          GpuSortExec                              stage 1: unchanged
//! ```
//!
//! The merges of the head stage keep ties in input order. `WorkerErrorsExec` sits above
//! `DistributedExec`, through which every error of the query passes (a worker's errors
//! arrive both in the head stage's streams and when `DistributedExec` collects its
//! background tasks, whichever first); `explain_distributed` draws the plan below it.
//!
//! Plans that are not distributed, or ship no `GpuSortExec`, are left as they are.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion_distributed::{DistributedExec, NetworkBoundaryExt};
use gpusort::GpuSortExec;

use crate::stable_merge::StableMergeExec;
use crate::worker_errors::WorkerErrorsExec;

/// Plans with the session's planner, then adjusts the head stage (module docs).
pub(crate) struct CoordinatorPlanner {
    /// The planner it wraps (datafusion-distributed's, when set before).
    pub(crate) inner: Option<Arc<dyn QueryPlanner + Send + Sync>>,
}

impl fmt::Debug for CoordinatorPlanner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoordinatorPlanner").finish_non_exhaustive()
    }
}

#[async_trait]
impl QueryPlanner for CoordinatorPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = match &self.inner {
            Some(inner) => inner.create_physical_plan(logical_plan, session).await?,
            None => {
                DefaultPhysicalPlanner::default()
                    .create_physical_plan(logical_plan, session)
                    .await?
            }
        };
        adjust_head_stage(plan)
    }
}

/// `plan` with its head stage's merges stable and a worker's missing codec explained,
/// when it is a distributed plan that ships a `GpuSortExec`.
fn adjust_head_stage(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if !plan.is::<DistributedExec>() || !plan.exists(|node| Ok(node.is::<GpuSortExec>()))? {
        return Ok(plan);
    }
    let [head] = plan.children().try_into().map_err(|_| {
        DataFusionError::Internal("DistributedExec without its head stage".to_string())
    })?;
    let head = Arc::clone(head)
        .transform_down(|node| {
            // Below a network boundary is a stage the workers run: left alone.
            if node.is_network_boundary() {
                return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
            }
            match node.downcast_ref::<SortPreservingMergeExec>() {
                Some(merge) => Ok(Transformed::yes(
                    Arc::new(StableMergeExec::from_merge(merge)) as Arc<dyn ExecutionPlan>,
                )),
                None => Ok(Transformed::no(node)),
            }
        })?
        .data;
    let plan = plan.replace_children(
        vec![head],
        ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
    )?;
    Ok(Arc::new(WorkerErrorsExec::new(plan)))
}
