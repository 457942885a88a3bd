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
//!  physical plan ◀─ protobuf ─────────────── each GpuSortExec / SortedWindowExec with what
//!  (GpuSortSubplanExec leaves)                 it reads, as one GpuSortSubplanExec leaf
//! ```
//!
//! Every plan goes through the rule after the host's optimizers, as in a gpusort session,
//! where the rule is the last one. What gpusort then runs goes back to the host as
//! `GpuSortSubplanExec` leaves (subplan.rs says why); where such a part would read a node
//! of the host's own, the host's plan is kept whole. `EXPLAIN` renders the physical plan the query runs,
//! and adds one `gpusort: ...` line per sort saying who sorts it or why DataFusion does.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::format::ExplainFormat;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::{
    Explain, LogicalPlan, PlanType, StringifiedPlan, ToStringifiedPlan,
};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::analyze::AnalyzeExec;
use datafusion::physical_plan::explain::ExplainExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::{displayable, ExecutionPlan};
use datafusion_ffi::execution_plan::ForeignExecutionPlan;
use gpusort::{GpuSortConfig, GpuSortExec, GpuSortRule, SortedWindowExec};

use crate::subplan::GpuSortSubplanExec;

/// A plan and gpusort's decisions on its sorts (`gpusort: ...` lines).
struct Planned {
    plan: Arc<dyn ExecutionPlan>,
    decisions: String,
}

/// Whether `plan` sorts anywhere (a sort, a merge of sorted partitions, a window).
fn sorts(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    plan.exists(|node| {
        Ok(node.is::<SortExec>()
            || node.is::<SortPreservingMergeExec>()
            || node.is::<BoundedWindowAggExec>()
            || node.is::<WindowAggExec>())
    })
}

fn is_gpusort(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.is::<GpuSortExec>() || node.is::<SortedWindowExec>()
}

/// The parts of `plan` gpusort runs in its library (see `hand_over`): the whole plan
/// under an `EXPLAIN ANALYZE` that holds a gpusort operator, else each topmost gpusort
/// operator with everything below it.
fn subplans(plan: &Arc<dyn ExecutionPlan>) -> Result<Vec<Arc<dyn ExecutionPlan>>> {
    if plan.is::<AnalyzeExec>() {
        return Ok(match plan.exists(|node| Ok(is_gpusort(node)))? {
            true => vec![Arc::clone(plan)],
            false => vec![],
        });
    }
    let mut found = Vec::new();
    plan.apply(|node| {
        if is_gpusort(node) {
            found.push(Arc::clone(node));
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// The name of a node of the host's (one its protobuf could not write, passed by
/// reference) inside a part of `plan` gpusort would run, if there is one.
fn host_node_in_subplans(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<String>> {
    for subplan in subplans(plan)? {
        let mut name = None;
        subplan.apply(|node| {
            if node.is::<ForeignExecutionPlan>() {
                name = Some(node.name().to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if name.is_some() {
            return Ok(name);
        }
    }
    Ok(None)
}

/// `plan` as the host runs it: each of its `subplans` as one `GpuSortSubplanExec` leaf.
fn hand_over(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if plan.is::<AnalyzeExec>() {
        return Ok(match subplans(&plan)?.is_empty() {
            true => plan,
            false => Arc::new(GpuSortSubplanExec::new(plan)),
        });
    }
    Ok(plan
        .transform_down(|node| {
            if is_gpusort(&node) {
                let leaf: Arc<dyn ExecutionPlan> = Arc::new(GpuSortSubplanExec::new(node));
                return Ok(Transformed::new(leaf, true, TreeNodeRecursion::Jump));
            }
            Ok(Transformed::no(node))
        })?
        .data)
}

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

    /// The host's plan of `logical_plan` with gpusort's rule applied.
    async fn plan(&self, logical_plan: &LogicalPlan, session: &dyn Session) -> Result<Planned> {
        let plan = self
            .fallback
            .create_physical_plan(logical_plan, session)
            .await?;
        self.optimize(plan, session)
    }

    /// `host` (the host's plan) with gpusort's rule applied under the session's settings;
    /// `host` itself where a part gpusort would run holds a node of the host's.
    fn optimize(&self, host: Arc<dyn ExecutionPlan>, session: &dyn Session) -> Result<Planned> {
        // The session's FFI namespace takes any name and value, and cannot unset one: a
        // name that is no setting is passed over (EXPLAIN says so), and a value that does
        // not parse fails only the queries that sort.
        let (settings, unknown) = match self
            .base
            .clone()
            .overridden_by_known(session.config_options())
        {
            Ok(found) => found,
            Err(_) if !sorts(&host)? => {
                return Ok(Planned {
                    plan: host,
                    decisions: "gpusort: no sort in this plan".to_string(),
                })
            }
            Err(error) => return Err(error),
        };
        let ignored: String = unknown
            .iter()
            .map(|name| format!("gpusort: ignored {name}: no such setting\n"))
            .collect();
        let mut options = session.config_options().clone();
        options.extensions.insert(settings);
        // One rule per query: its decisions are this query's, whatever else plans at once.
        let rule = GpuSortRule::new();
        let plan = rule.optimize(Arc::clone(&host), &options)?;
        if let Some(node) = host_node_in_subplans(&plan)? {
            return Ok(Planned {
                plan: host,
                decisions: format!(
                    "{ignored}gpusort: kept DataFusion's sorts: {node}, a node of \
                     datafusion-python's own that its protobuf cannot write, lies below one, \
                     and gpusort runs what it sorts in its own library"
                ),
            });
        }
        Ok(Planned {
            plan,
            decisions: format!("{ignored}{}", rule.last_decisions_text()),
        })
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
                let plan = self.plan(logical, session).await?.plan;
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
                    let Planned { plan, decisions } = self.optimize(Arc::clone(&host), session)?;
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
                            decisions
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
            _ => hand_over(self.plan(logical_plan, session).await?.plan),
        }
    }
}
