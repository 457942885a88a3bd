//! `GpuSortRule`: the physical optimizer rule that puts `GpuSortExec` in place of
//! DataFusion's sorts, and the reasons it keeps them.
//!
//! Rewrites, top down:
//!
//! ```text
//!  SortPreservingMergeExec(row-wise chain(SortExec{preserve_partitioning: true}))
//!                                                ──►  GpuSortExec(row-wise chain) (1 partition)
//!  SortExec(row-wise chain(CoalescePartitionsExec(input)))
//!                                                ──►  GpuSortExec(row-wise chain(input))
//!  SortExec{fetch: None}                                           ──►  GpuSortExec (same partitioning)
//!  SortExec{fetch: Some(n)}  (n ≥ gpu_sort.topk_min_fetch, or topk) ──►  GpuSortExec{fetch: n}
//!  SortExec{preserve_partitioning: true}(RepartitionExec(Hash(e, N))(input))
//!                 (gpu_sort.combine_partitions and absorb_repartition) ──►  GpuSortExec(input),
//!                                                           hash routed to Hash(e, N)
//! ```
//!
//! The first two shapes are where DataFusion gathers partitions into one ordered stream
//! (`shapes.rs`): one sort that reads every partition in parallel replaces the
//! per-partition sorts and the one-thread merge above them (`gpu_sort.gather_partitions`;
//! when false, each sort below is replaced on its own and the merge stays).
//!
//! [`GpuSortRule::partition_local`], for plans a distributed engine cuts into stages at
//! their merges and repartitions, replaces each sort where it stands (the shapes above
//! are left alone).
//!
//! A sort with a LIMIT is replaced by cost: DataFusion's TopK heap costs more per row the
//! larger its limit, and it is slower on string keys (each row is converted to arrow's row
//! format to be compared), while gpusort's sort costs the same whatever the limit. So a
//! LIMIT of at least `gpu_sort.topk_min_fetch` rows (four times as many where a key is a
//! string or binary column, whose sort costs gpusort more too), or of at least a quarter
//! of the estimated input, goes to gpusort;
//! smaller ones keep the heap, which also prunes Parquet row groups through its dynamic
//! filter (`gpu_sort.topk = true` replaces every one).
//!
//! A sort is kept, for a [`DeclineReason`], when the rule is disabled, the sort has a LIMIT
//! below that threshold, no backend is usable, a key type is unsupported, or the input is
//! estimated below `gpu_sort.min_rows` (an unknown size counts as large). Each decision is
//! logged at info level as `gpusort: kept <sort>: <reason>` or `gpusort: replaced <sort>`,
//! and [`GpuSortRule::last_decisions`] returns those of the last planned query.

use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::displayable;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, StatisticsArgs, StatisticsContext};

use crate::backend::{resolve_backend, resolve_planning_backend};
use crate::config::GpuSortConfig;
use crate::exec::{GpuSortExec, GpuSortOptions, HashRouting};
use crate::keys::unsupported_reason;
use crate::window::{tops_into_sorts, windows_over_sorts, WindowDecision, WindowDecline};
use shapes::{merge_over_partition_sorts, sort_over_coalesce, GatheredSort};

mod shapes;

/// Why a sort kept DataFusion's operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclineReason {
    /// `gpu_sort.enabled = false`.
    Disabled,
    /// The sort has a LIMIT below the threshold where gpusort's sort beats DataFusion's
    /// TopK heap, and `gpu_sort.topk = false`.
    TopKKept {
        /// The LIMIT.
        fetch: usize,
        /// The smallest LIMIT gpusort takes for these keys.
        min_fetch: usize,
    },
    /// No backend is usable (the text says why).
    NoBackend(String),
    /// A sort key's type cannot be encoded.
    UnsupportedKey {
        /// The key expression.
        expr: String,
        /// What is wrong with its type.
        reason: String,
    },
    /// A window over a gpusort sort: `gpu_sort.window_functions = false`.
    WindowFunctionsOff,
    /// A window over a gpusort sort has an expression gpusort does not compute.
    UnsupportedWindow(String),
    /// The input is estimated smaller than `gpu_sort.min_rows`.
    TooSmall {
        /// The estimate.
        estimated_rows: usize,
        /// The threshold.
        min_rows: usize,
    },
}

impl fmt::Display for DeclineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Disabled => write!(f, "gpu_sort.enabled = false"),
            Self::TopKKept { fetch, min_fetch } => write!(
                f,
                "LIMIT {fetch} keeps DataFusion's TopK heap, faster below {min_fetch} rows for \
                 these keys (gpu_sort.topk_min_fetch; set gpu_sort.topk = true to replace it)"
            ),
            Self::NoBackend(why) => write!(f, "no usable sort backend: {why}"),
            Self::UnsupportedKey { expr, reason } => write!(f, "key {expr}: {reason}"),
            Self::WindowFunctionsOff => write!(f, "gpu_sort.window_functions = false"),
            Self::UnsupportedWindow(reason) => write!(f, "{reason}"),
            Self::TooSmall {
                estimated_rows,
                min_rows,
            } => write!(
                f,
                "input estimated at {estimated_rows} rows, below gpu_sort.min_rows = {min_rows}"
            ),
        }
    }
}

/// What the rule did with one sort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortDecision {
    /// The sort as EXPLAIN prints it.
    pub sort: String,
    /// The backend that will sort it, or why DataFusion's sort was kept.
    pub outcome: std::result::Result<&'static str, DeclineReason>,
}

impl fmt::Display for SortDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Ok(backend) => write!(f, "replaced {} (backend {backend})", self.sort),
            Err(reason) => write!(f, "kept {}: {reason}", self.sort),
        }
    }
}

impl SortDecision {
    /// The decision on a window over a gpusort sort, logged.
    fn of_window(window: WindowDecision) -> Self {
        let decision = Self {
            sort: window.window,
            outcome: window.outcome.map_err(|decline| match decline {
                WindowDecline::Off => DeclineReason::WindowFunctionsOff,
                WindowDecline::Unsupported(reason) => DeclineReason::UnsupportedWindow(reason),
            }),
        };
        log::info!("gpusort: {decision}");
        decision
    }
}

/// A sort the rule may replace.
struct Candidate {
    input: Arc<dyn ExecutionPlan>,
    expr: LexOrdering,
    fetch: Option<usize>,
    preserve_partitioning: bool,
    /// The input of a hash repartition directly below a sort that keeps partitioning,
    /// and its routing.
    below_repartition: Option<(Arc<dyn ExecutionPlan>, HashRouting)>,
    /// A merge of partition sorts: when declined, the sorts below are decided on their own.
    is_merge: bool,
    text: String,
}

impl Candidate {
    fn from_plan(node: &Arc<dyn ExecutionPlan>, settings: &GpuSortConfig) -> Result<Option<Self>> {
        let text = || {
            displayable(node.as_ref())
                .one_line()
                .to_string()
                .trim()
                .to_string()
        };
        if let Some(merge) = node.downcast_ref::<SortPreservingMergeExec>() {
            if !settings.gather_partitions {
                return Ok(None);
            }
            let Some(gathered) = merge_over_partition_sorts(merge)? else {
                return Ok(None);
            };
            let text = format!("{} over {} partition sorts", text(), gathered.replaced);
            return Ok(Some(Self::gathering(gathered, true, text)));
        }
        let Some(sort) = node.downcast_ref::<SortExec>() else {
            return Ok(None);
        };
        let gathered = match settings.gather_partitions {
            true => sort_over_coalesce(sort)?,
            false => None,
        };
        if let Some(gathered) = gathered {
            let text = format!("{} over {} coalesced partitions", text(), gathered.replaced);
            return Ok(Some(Self::gathering(gathered, false, text)));
        }
        let below_repartition = sort
            .input()
            .downcast_ref::<RepartitionExec>()
            .filter(|_| sort.preserve_partitioning())
            .and_then(|repartition| {
                let routing = HashRouting::of(repartition.partitioning())?;
                Some((Arc::clone(repartition.input()), routing))
            });
        Ok(Some(Self {
            input: Arc::clone(sort.input()),
            expr: sort.expr().clone(),
            fetch: sort.fetch(),
            preserve_partitioning: sort.preserve_partitioning(),
            below_repartition,
            is_merge: false,
            text: text(),
        }))
    }

    /// One sort of every partition of the gathered input.
    fn gathering(gathered: GatheredSort, is_merge: bool, text: String) -> Self {
        Self {
            input: gathered.input,
            expr: gathered.expr,
            fetch: gathered.fetch,
            preserve_partitioning: false,
            below_repartition: None,
            is_merge,
            text,
        }
    }

    /// The replacement: hash routed over the repartition's input when the settings allow.
    fn into_exec(self, options: GpuSortOptions, settings: &GpuSortConfig) -> Result<GpuSortExec> {
        match self.below_repartition {
            Some((input, routing))
                if settings.combine_partitions && settings.absorb_repartition =>
            {
                GpuSortExec::try_new_routed(input, self.expr, self.fetch, routing, options)
            }
            _ => GpuSortExec::try_new(
                self.input,
                self.expr,
                self.fetch,
                self.preserve_partitioning,
                options,
            ),
        }
    }
}

/// Replaces DataFusion's sorts by [`GpuSortExec`]; see the module docs.
#[derive(Debug, Default)]
pub struct GpuSortRule {
    last_decisions: Mutex<Vec<SortDecision>>,
    /// Every sort stays within the partitions it sorts (see [`GpuSortRule::partition_local`]).
    partition_local: bool,
}

impl GpuSortRule {
    /// A new rule; its settings come from the session's `gpu_sort.*` options.
    pub fn new() -> Self {
        Self::default()
    }

    /// A rule for plans that a distributed engine cuts into stages at its merges,
    /// coalesces and hash repartitions (datafusion-distributed puts its network boundaries
    /// there): each sort is replaced where it stands, by a `GpuSortExec` of the same
    /// partitioning, and those operators are kept, whatever `gpu_sort.gather_partitions`
    /// and `gpu_sort.absorb_repartition` say. The sorts below a merge then run where the
    /// partitions they sort run (on the workers), and the merge stays above them. It plans
    /// with the backend this process would use, or the CPU backend where it has no usable
    /// device, even for `gpu_sort.backend = cuda`: the workers resolve their own.
    /// DataFusion's merge breaks ties round robin between its inputs; where ties must keep
    /// input order across partitions too, the engine's merge must break them by input
    /// partition (gpusort-distributed puts such a merge on its coordinator).
    pub fn partition_local() -> Self {
        Self {
            partition_local: true,
            ..Self::default()
        }
    }

    /// Whether this rule keeps every sort within its partitions
    /// ([`partition_local`](Self::partition_local)).
    pub fn is_partition_local(&self) -> bool {
        self.partition_local
    }

    /// The decisions taken while planning the last query this rule optimized.
    pub fn last_decisions(&self) -> Vec<SortDecision> {
        self.last_decisions
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default()
    }

    /// [`last_decisions`](Self::last_decisions) as text, one `gpusort: ...` line each (or
    /// a line saying the plan had no sort), as `gpusort sql --explain` prints them.
    pub fn last_decisions_text(&self) -> String {
        let decisions = self.last_decisions();
        if decisions.is_empty() {
            return "gpusort: no sort in this plan".to_string();
        }
        decisions
            .iter()
            .map(|d| format!("gpusort: {d}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn decide(
        &self,
        candidate: &Candidate,
        settings: &GpuSortConfig,
    ) -> std::result::Result<GpuSortOptions, DeclineReason> {
        if !settings.enabled {
            return Err(DeclineReason::Disabled);
        }
        if let Some(fetch) = candidate.fetch.filter(|_| !settings.topk) {
            let min_fetch = topk_min_fetch(candidate, settings);
            if fetch < min_fetch {
                return Err(DeclineReason::TopKKept { fetch, min_fetch });
            }
        }
        // Partition-local plans run on workers that resolve their own backend.
        let backend = match self.partition_local {
            true => resolve_planning_backend(settings),
            false => resolve_backend(settings).map_err(DeclineReason::NoBackend)?,
        };
        let schema = candidate.input.schema();
        for sort_expr in candidate.expr.iter() {
            let data_type =
                sort_expr
                    .expr
                    .data_type(&schema)
                    .map_err(|e| DeclineReason::UnsupportedKey {
                        expr: sort_expr.expr.to_string(),
                        reason: e.to_string(),
                    })?;
            if let Some(reason) = unsupported_reason(&data_type) {
                return Err(DeclineReason::UnsupportedKey {
                    expr: sort_expr.expr.to_string(),
                    reason,
                });
            }
        }
        if let Some(estimated_rows) = estimated_rows(&candidate.input) {
            if estimated_rows < settings.min_rows {
                return Err(DeclineReason::TooSmall {
                    estimated_rows,
                    min_rows: settings.min_rows,
                });
            }
        }
        Ok(GpuSortOptions {
            backend,
            run_rows: settings.run_rows,
            algorithm: settings.algorithm,
            device_gather_min_rows: settings.device_gather_min_rows,
            input_batch_rows: settings.input_batch_rows,
            combine_partitions: settings.combine_partitions,
        })
    }
}

/// The smallest LIMIT of `candidate` that gpusort sorts (see the module docs): the
/// setting's, four times it where a key is variable-width, and at most a quarter of the
/// estimated input.
fn topk_min_fetch(candidate: &Candidate, settings: &GpuSortConfig) -> usize {
    let schema = candidate.input.schema();
    let has_variable_width_key = candidate.expr.iter().any(|sort_expr| {
        sort_expr.expr.data_type(&schema).is_ok_and(|t| {
            matches!(
                t,
                DataType::Utf8
                    | DataType::LargeUtf8
                    | DataType::Utf8View
                    | DataType::Binary
                    | DataType::LargeBinary
                    | DataType::BinaryView
            )
        })
    });
    let min_fetch = match has_variable_width_key {
        true => settings.topk_min_fetch.saturating_mul(4),
        false => settings.topk_min_fetch,
    };
    match estimated_rows(&candidate.input) {
        Some(rows) => min_fetch.min(rows.div_ceil(4).max(1)),
        None => min_fetch,
    }
}

/// Rows the plan is estimated to produce, over all partitions; `None` when unknown.
fn estimated_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    let statistics = StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new());
    match statistics.ok()?.num_rows {
        Precision::Exact(rows) | Precision::Inexact(rows) => Some(rows),
        Precision::Absent => None,
    }
}

impl PhysicalOptimizerRule for GpuSortRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut settings = GpuSortConfig::from_options(config)?;
        if self.partition_local {
            settings.gather_partitions = false;
            settings.absorb_repartition = false;
        }
        let mut decisions = Vec::new();
        let plan = plan
            .transform_down(|node| {
                let Some(candidate) = Candidate::from_plan(&node, &settings)? else {
                    return Ok(Transformed::no(node));
                };
                match self.decide(&candidate, &settings) {
                    Ok(options) => {
                        let decision = SortDecision {
                            sort: candidate.text.clone(),
                            outcome: Ok(options.backend.name()),
                        };
                        log::info!("gpusort: {decision}");
                        decisions.push(decision);
                        let exec = candidate.into_exec(options, &settings)?;
                        Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>))
                    }
                    // The SortExec below a declined merge pair is decided on its own.
                    Err(_) if candidate.is_merge => Ok(Transformed::no(node)),
                    Err(reason) => {
                        let decision = SortDecision {
                            sort: candidate.text,
                            outcome: Err(reason),
                        };
                        log::info!("gpusort: {decision}");
                        decisions.push(decision);
                        Ok(Transformed::no(node))
                    }
                }
            })?
            .data;
        let plan = match settings.enabled {
            true => {
                let mut windows = Vec::new();
                // In a plan a distributed engine cuts into stages too: gpusort's codec
                // carries `SortedWindowExec` to the workers.
                let plan = windows_over_sorts(plan, &settings, &mut windows)?;
                decisions.extend(windows.into_iter().map(SortDecision::of_window));
                match settings.partition_top {
                    true => tops_into_sorts(plan)?,
                    false => plan,
                }
            }
            false => plan,
        };

        if let Ok(mut last) = self.last_decisions.lock() {
            *last = decisions;
        }
        Ok(plan)
    }

    fn name(&self) -> &str {
        "gpu_sort"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
