//! Shared helpers of the integration tests: seeded data generation for every fixed-width
//! key type, sessions with and without gpusort, and the comparison against DataFusion.

#![allow(dead_code)]

pub mod cancel;
pub mod compare;
pub mod data;
pub mod differential;
pub mod early;
pub mod file_jobs;
pub mod load;
pub mod parquet;
pub mod parquet_cases;
pub mod partitions;
pub mod pieces;
pub mod spill;
pub mod strategies;
pub mod strings;
pub mod windows;

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::datasource::MemTable;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::{displayable, ExecutionPlan};
use datafusion::prelude::{SessionConfig, SessionContext};
use gpusort::{
    gpu_sort_context_with, BackendChoice, GpuSortConfig, GpuSortExec, SessionStateBuilderExt,
};

/// The seed of this run: `GPUSORT_SEED` or a fixed default. Printed by every failure.
pub fn seed() -> u64 {
    std::env::var("GPUSORT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_2026)
}

/// Session config used on both sides of a comparison.
pub fn session_config(target_partitions: usize, batch_size: usize) -> SessionConfig {
    SessionConfig::new()
        .with_target_partitions(target_partitions)
        .with_batch_size(batch_size)
}

/// DataFusion alone.
pub fn stock_context(config: SessionConfig) -> SessionContext {
    SessionContext::new_with_config(config)
}

/// DataFusion with gpusort forced on every sort, on `backend`.
pub fn forced_context_on(config: SessionConfig, backend: BackendChoice) -> SessionContext {
    let mut gpu = GpuSortConfig::forced_cpu();
    gpu.backend = backend;
    gpu_sort_context_with(config, gpu)
}

/// Like [`forced_context_on`], with a memory pool of `limit` bytes (sorts must spill).
pub fn memory_limited_context_on(
    config: SessionConfig,
    backend: BackendChoice,
    limit: usize,
) -> SessionContext {
    let mut gpu = GpuSortConfig::forced_cpu();
    gpu.backend = backend;
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(limit, 1.0)
        .build_arc()
        .unwrap();
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_gpu_sort(gpu)
        .build();
    SessionContext::new_with_state(state)
}

/// DataFusion with gpusort forced on every sort (CPU backend unless `GPUSORT_BACKEND`).
pub fn forced_context(config: SessionConfig) -> SessionContext {
    let mut gpu = GpuSortConfig::forced_cpu();
    if let Ok(backend) = std::env::var("GPUSORT_BACKEND") {
        gpu.backend = backend.parse().expect("GPUSORT_BACKEND: auto, cuda or cpu");
    }
    gpu_sort_context_with(config, gpu)
}

/// Registers `partitions` as table `name` in both contexts.
pub fn register(ctxs: &[&SessionContext], name: &str, partitions: Vec<Vec<RecordBatch>>) {
    let schema = partitions
        .iter()
        .flatten()
        .next()
        .map(|b| b.schema())
        .expect("at least one batch (possibly empty) to take the schema from");
    for ctx in ctxs {
        let table = MemTable::try_new(Arc::clone(&schema), partitions.clone()).unwrap();
        ctx.deregister_table(name).unwrap();
        ctx.register_table(name, Arc::new(table)).unwrap();
    }
}

/// The physical plan of `sql` in `ctx`.
pub async fn physical_plan(ctx: &SessionContext, sql: &str) -> Result<Arc<dyn ExecutionPlan>> {
    ctx.sql(sql).await?.create_physical_plan().await
}

/// A plan's text, as EXPLAIN prints it.
pub fn plan_text(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).indent(true).to_string()
}

/// Runs `sql`, returning the batches, the physical plan's text and how many runs the
/// plan's `GpuSortExec`s spilled.
pub async fn run_counting_spills(
    ctx: &SessionContext,
    sql: &str,
) -> Result<(Vec<RecordBatch>, String, usize)> {
    let plan = physical_plan(ctx, sql).await?;
    let text = plan_text(&plan);
    let batches = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx()).await?;
    let mut spills = 0;
    plan.apply(|node| {
        if node.downcast_ref::<GpuSortExec>().is_some() {
            spills += node.metrics().and_then(|m| m.spill_count()).unwrap_or(0);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok((batches, text, spills))
}

/// Runs `sql`, returning the batches and the physical plan's text.
pub async fn run(ctx: &SessionContext, sql: &str) -> Result<(Vec<RecordBatch>, String)> {
    let plan = physical_plan(ctx, sql).await?;
    let text = plan_text(&plan);
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await?;
    Ok((batches, text))
}
