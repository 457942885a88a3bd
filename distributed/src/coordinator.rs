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
//! The merges of the head stage keep ties in input order and never stall a worker's
//! connection (`stable_merge.rs`); that holds for every distributed plan of the session,
//! DataFusion's own sorts' too. `WorkerErrorsExec` sits above `DistributedExec`, through
//! which every error of the query passes (a worker's errors arrive both in the head
//! stage's streams and when `DistributedExec` collects its background tasks, whichever
//! first), when the query ships a `GpuSortExec`; `explain_distributed` draws the plan
//! below it.
//!
//! Plans that are not distributed are left as they are.

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

/// `plan` with the merges of every head stage stable (one per `DistributedExec`: a query's,
/// or the one `EXPLAIN ANALYZE` runs), and with a worker's missing codec explained when
/// the query ships a `GpuSortExec`. A plan not cut into stages yet (datafusion-distributed's
/// `dynamic_task_count` cuts it while it runs) is left alone: its merges are where the
/// stages will be cut.
fn adjust_head_stage(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if !plan.exists(|node| Ok(node.is_network_boundary()))? {
        return Ok(plan);
    }
    let plan = plan
        .transform_down(|node| {
            if !node.is::<DistributedExec>() {
                return Ok(Transformed::no(node));
            }
            let [head] = node.children().try_into().map_err(|_| {
                DataFusionError::Internal("DistributedExec without its head stage".to_string())
            })?;
            let head = stable_merges(Arc::clone(head))?;
            let node = node.replace_children(
                vec![head],
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
            )?;
            Ok(Transformed::new(node, true, TreeNodeRecursion::Jump))
        })?
        .data;
    match plan.is::<DistributedExec>() && plan.exists(|node| Ok(node.is::<GpuSortExec>()))? {
        true => Ok(Arc::new(WorkerErrorsExec::new(plan))),
        false => Ok(plan),
    }
}

/// `head` (a head stage) with its merges made `StableMergeExec`, down to the network
/// boundaries below which the workers' stages start.
fn stable_merges(head: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(head
        .transform_down(|node| {
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
        .data)
}
