//! The distributed plan of a query as text: its stages, their tasks, and in which stage
//! each `GpuSortExec` runs.
//!
//! DataFusion's `EXPLAIN` prints the plan before datafusion-distributed cuts it into
//! stages (only `EXPLAIN ANALYZE` runs the distributed plan), so this plans the query
//! through the session's query planner and draws the result with datafusion-distributed's
//! `display_plan_ascii`:
//!
//! ```text
//! ┌───── DistributedExec
//! │ StableMergeExec: [k@0 ASC NULLS LAST]                    ← the coordinator merges
//! │   [Stage 1] => NetworkCoalesceExec: output_partitions=8, input_tasks=2
//! └──────────────────────────────────────────────────
//!   ┌───── Stage 1 ── tasks=2, partitions=8
//!   │ GpuSortExec: expr=[k@0 ASC NULLS LAST], preserve_partitioning=[true], …
//!   │   DistributedLeafExec: t0: DataSourceExec …, t1: …     ← each worker sorts its share
//! ```

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::prelude::SessionContext;
use datafusion_distributed::display_plan_ascii;

use crate::worker_errors::WorkerErrorsExec;

/// The distributed plan of `sql` in `ctx`, drawn stage by stage (below the coordinator's
/// `WorkerErrorsExec`, which only rewrites an error).
pub async fn explain_distributed(ctx: &SessionContext, sql: &str) -> Result<String> {
    let plan = ctx.sql(sql).await?.create_physical_plan().await?;
    let plan = match plan.downcast_ref::<WorkerErrorsExec>() {
        Some(errors) => Arc::clone(errors.input()),
        None => plan,
    };
    Ok(display_plan_ascii(plan.as_ref(), false))
}
