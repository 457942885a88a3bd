//! `GpuSortPlanner`: the query planner that gpusort puts around a datafusion-python
//! session's own, through DataFusion's FFI.
//!
//! ```text
//!  datafusion-python (host)                    this library
//!  logical plan ── protobuf ──────────────▶ GpuSortPlanner
//!                                              │ fallback (the host's planner, through
//!                                              │ the FFI: the host's physical optimizers)
//!                                              ▼
//!                                           physical plan, rebuilt with this library's
//!                                           DataFusion types
//!                                              │ GpuSortRule, with the session's gpu_sort.*
//!                                              ▼
//!  physical plan ◀─ protobuf (GpuSortCodec) ─ plan with GpuSortExec / SortedWindowExec
//! ```
//!
//! Every plan goes through the rule after the host's optimizers, as in a gpusort session,
//! where the rule is the last one. `EXPLAIN` renders the physical plan the query runs,
//! and adds one `gpusort: ...` line per sort saying who sorts it or why DataFusion does.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::format::ExplainFormat;
use datafusion::common::Result;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::{
    Explain, LogicalPlan, PlanType, StringifiedPlan, ToStringifiedPlan,
};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::explain::ExplainExec;
use datafusion::physical_plan::{displayable, ExecutionPlan};
use gpusort::{GpuSortConfig, GpuSortRule};

/// gpusort's rule over the plans of the host's planner; see the module docs.
#[derive(Debug)]
pub struct GpuSortPlanner {
    /// The host's planner, as it was before this one was installed.
    fallback: Arc<dyn QueryPlanner + Send + Sync>,
    /// Settings under the session's own `gpu_sort.*` values (those of `gpusort.Extension`).
    base: GpuSortConfig,
}

impl GpuSortPlanner {
    pub fn new(fallback: Arc<dyn QueryPlanner + Send + Sync>, base: GpuSortConfig) -> Self {
        Self { fallback, base }
    }

    /// The host's plan of `logical_plan` with gpusort's rule applied, and the rule (which
    /// holds its decisions).
    async fn plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<(Arc<dyn ExecutionPlan>, GpuSortRule)> {
        let plan = self
            .fallback
            .create_physical_plan(logical_plan, session)
            .await?;
        self.optimize(plan, session)
    }

    /// `plan` with gpusort's rule applied under the session's settings, and the rule.
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        session: &dyn Session,
    ) -> Result<(Arc<dyn ExecutionPlan>, GpuSortRule)> {
        let settings = self.base.clone().overridden_by(session.config_options())?;
        let mut options = session.config_options().clone();
        options.extensions.insert(settings);
        // One rule per query: its decisions are this query's, whatever else plans at once.
        let rule = GpuSortRule::new();
        let plan = rule.optimize(plan, &options)?;
        Ok((plan, rule))
    }

    /// `EXPLAIN` of the plan gpusort runs. The host optimized the logical plan before
    /// handing it over, but its record of the optimizer's steps does not cross the FFI:
    /// the logical plan shown is the optimized one; `VERBOSE` adds the host's physical plan
    /// before gpusort's rule.
    async fn explain(
        &self,
        explain: &Explain,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let config = &session.config_options().explain;
        let show_statistics = explain.show_statistics.unwrap_or(config.show_statistics);
        let verbose = explain.verbose;
        let logical = explain.plan.as_ref();
        let mut plans = Vec::new();
        match explain.explain_format {
            ExplainFormat::PostgresJSON => plans.push(StringifiedPlan::new(
                PlanType::FinalLogicalPlan,
                logical.display_pg_json().to_string(),
            )),
            ExplainFormat::Graphviz => plans.push(StringifiedPlan::new(
                PlanType::FinalLogicalPlan,
                logical.display_graphviz().to_string(),
            )),
            ExplainFormat::Tree => {
                let (plan, _) = self.plan(logical, session).await?;
                plans.push(StringifiedPlan::new(
                    PlanType::FinalPhysicalPlan,
                    displayable(plan.as_ref())
                        .set_tree_maximum_render_width(config.tree_maximum_render_width)
                        .tree_render()
                        .to_string(),
                ));
            }
            ExplainFormat::Indent => {
                if !config.physical_plan_only {
                    plans.push(logical.to_stringified(PlanType::FinalLogicalPlan));
                }
                if !config.logical_plan_only {
                    let host = self.fallback.create_physical_plan(logical, session).await?;
                    let (plan, rule) = self.optimize(Arc::clone(&host), session)?;
                    let indent = |plan: &Arc<dyn ExecutionPlan>, stats: bool, schema: bool| {
                        displayable(plan.as_ref())
                            .set_show_statistics(stats)
                            .set_show_schema(schema)
                            .indent(verbose)
                            .to_string()
                    };
                    if verbose {
                        plans.push(StringifiedPlan::new(
                            PlanType::InitialPhysicalPlan,
                            indent(&host, show_statistics, config.show_schema),
                        ));
                    }
                    plans.push(StringifiedPlan::new(
                        PlanType::FinalPhysicalPlan,
                        format!(
                            "{}{}",
                            indent(&plan, show_statistics, config.show_schema),
                            rule.last_decisions_text()
                        ),
                    ));
                    if verbose && !show_statistics {
                        plans.push(StringifiedPlan::new(
                            PlanType::FinalPhysicalPlanWithStats,
                            indent(&plan, true, config.show_schema),
                        ));
                    }
                    if verbose && !config.show_schema {
                        plans.push(StringifiedPlan::new(
                            PlanType::FinalPhysicalPlanWithSchema,
                            indent(&plan, show_statistics, true),
                        ));
                    }
                }
            }
        }
        Ok(Arc::new(ExplainExec::new(
            Arc::clone(explain.schema.inner()),
            plans,
            verbose,
        )))
    }
}

#[async_trait]
impl QueryPlanner for GpuSortPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match logical_plan {
            LogicalPlan::Explain(explain) => self.explain(explain, session).await,
            _ => Ok(self.plan(logical_plan, session).await?.0),
        }
    }
}
