//! `GpuSortExec`: the `ExecutionPlan` that replaces DataFusion's sorts.
//!
//! ```text
//!            GpuSortExec  (preserve_partitioning = false: 1 output partition)
//!                 ▲
//!   ┌─────────────┼─────────────┐     every input partition drained into one buffer,
//!   │ partition 0 │ partition 1 │ …   sorted as one run (or runs, merged), emitted in
//!   └─────────────┴─────────────┘     batches of `batch_size`
//!
//!            GpuSortExec  (preserve_partitioning = true: N output partitions)
//!   partition i ──► sort of partition i ──► output partition i
//!   or, `gpu_sort.combine_partitions` (`combined_partitions=N` in EXPLAIN):
//!   partitions 0..N ──► one sort, each partition a segment ──► output partition i gets
//!                       partition i's rows (see `combined.rs`)
//!
//!            GpuSortExec  (hash routed, `repartition=Hash([g], N)` in EXPLAIN)
//!   in place of SortExec(RepartitionExec(Hash([g], N))): reads the repartition's input
//!   partitions 0..M ──► one sort by (hash partition, keys) ──► output partition i gets the
//!                       rows RepartitionExec would have sent to i (see `hash_routing.rs`)
//! ```
//!
//! Its plan properties (partitioning, ordering, equivalences, boundedness) are computed by
//! DataFusion's own `SortExec` for the same keys, fetch and partitioning (over the
//! `RepartitionExec` it replaces, when hash routed), so the rest of the plan sees exactly
//! what the replaced sort promised.
//!
//! When each stream it sorts is already ordered by the first keys (`segmented_prefix` in
//! EXPLAIN; from the input's equivalence properties), runs are sorted only within runs of
//! equal values of those keys: the segmented strategy.

use std::fmt;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{LexOrdering, PhysicalExpr};
use datafusion::physical_plan::execution_plan::apply_expression_roots;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet, SpillMetrics};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties, SendableRecordBatchStream,
};

use super::buffer::TRANSIT_SHARE;
use super::cancel::Cancel;
use super::combined::{CombinedSort, CombinedSorts};
use super::hash_routing::HashRouting;
use super::metrics::SortMetrics;
use super::partition_top::PartitionTop;
use super::resources::SortResources;
use super::run::SortSpec;
use super::spill::RunSpiller;
use super::stream::{sort_stream, SortTask};
use crate::config::AlgorithmChoice;
use crate::gather::Views;
use crate::gather::{ResidentRequest, WindowRequest};
use crate::sort::SortBackend;

/// How a `GpuSortExec` sorts: settings taken from `GpuSortConfig` at plan time.
#[derive(Debug, Clone)]
pub struct GpuSortOptions {
    /// The backend that sorts each run.
    pub backend: Arc<dyn SortBackend>,
    /// Most rows per run.
    pub run_rows: usize,
    /// Requested algorithm.
    pub algorithm: AlgorithmChoice,
    /// Runs of at least this many rows may gather columns on the backend's device.
    pub device_gather_min_rows: usize,
    /// The input is read in batches of at least this many rows (0: the session's).
    pub input_batch_rows: usize,
    /// Sort every partition in one sort when partitioning is kept.
    pub combine_partitions: bool,
}

/// Sorts its input on the GPU (or the CPU backend) by `expr`.
#[derive(Debug, Clone)]
pub struct GpuSortExec {
    // What it computes.
    /// The plan whose rows are sorted.
    input: Arc<dyn ExecutionPlan>,
    /// Sort keys.
    expr: LexOrdering,
    /// Emit at most this many rows (per output partition).
    fetch: Option<usize>,
    /// Sort each input partition separately (true) or all of them into one (false).
    preserve_partitioning: bool,
    /// Plan properties, as DataFusion's `SortExec` computes them.
    cache: Arc<PlanProperties>,
    /// Leading keys that every stream it sorts is already ordered by.
    prefix: usize,
    /// The shared sorts of all partitions, when they are sorted at once.
    combined: Arc<CombinedSorts>,
    /// Blocking jobs (runs being sorted or gathered) of its executions still running.
    jobs: Arc<AtomicUsize>,
    /// The hash partitioning it produces from its input itself, in place of a repartition.
    routing: Option<Arc<HashRouting>>,
    /// Rows per output batch of a sorted run, when not the session's batch size.
    run_batch_rows: Option<usize>,
    /// Only each window partition's top rows are needed above (`partition_top.rs`).
    partition_top: Option<PartitionTop>,
    /// Window columns the window above asks to have computed where a run's rows are
    /// (`gather/windows.rs`); handed on only through
    /// [`execute_with_windows`](Self::execute_with_windows).
    windows: Option<Arc<WindowRequest>>,
    /// Columns its consumer takes where a run is (`gather/resident.rs`): set by
    /// [`with_resident`](Self::with_resident).
    resident: Option<Arc<ResidentRequest>>,
    // How.
    /// Backend, run size, algorithm.
    options: GpuSortOptions,
    // State.
    /// Execution metrics.
    metrics: ExecutionPlanMetricsSet,
}

impl GpuSortExec {
    /// Sorts `input` by `expr`; see the module docs for `preserve_partitioning`.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        expr: LexOrdering,
        fetch: Option<usize>,
        preserve_partitioning: bool,
        options: GpuSortOptions,
    ) -> Result<Self> {
        let reference = SortExec::new(expr.clone(), Arc::clone(&input))
            .with_preserve_partitioning(preserve_partitioning)
            .with_fetch(fetch);
        let prefix = ordered_prefix(&input, &expr, preserve_partitioning)?;
        Ok(Self {
            cache: Arc::clone(reference.properties()),
            prefix,
            combined: Arc::default(),
            jobs: Arc::default(),
            routing: None,
            run_batch_rows: None,
            partition_top: None,
            windows: None,
            resident: None,
            input,
            expr,
            fetch,
            preserve_partitioning,
            options,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// Sorts the rows of `input` into the hash partitions of `routing`, each sorted by
    /// `expr`: what `SortExec(RepartitionExec(input, routing), preserve_partitioning)`
    /// computes, in one sort of all rows (see `combined.rs`).
    pub fn try_new_routed(
        input: Arc<dyn ExecutionPlan>,
        expr: LexOrdering,
        fetch: Option<usize>,
        routing: HashRouting,
        options: GpuSortOptions,
    ) -> Result<Self> {
        // Planned over the repartition it replaces, so its properties are that sort's.
        let repartition = RepartitionExec::try_new(Arc::clone(&input), routing.partitioning())?;
        let mut exec = Self::try_new(Arc::new(repartition), expr, fetch, true, options)?;
        exec.input = input;
        exec.routing = Some(Arc::new(routing));
        // Rows of every input partition are sorted together: no input order holds.
        exec.prefix = 0;
        Ok(exec)
    }

    /// The hash partitioning it produces from its input itself, when it does.
    pub fn hash_routing(&self) -> Option<Partitioning> {
        self.routing.as_ref().map(|r| r.partitioning())
    }

    /// The routing behind [`hash_routing`](Self::hash_routing), when it has one.
    pub fn routing(&self) -> Option<&HashRouting> {
        self.routing.as_deref()
    }

    /// The same sort, emitting the output of a sorted run in batches of up to `rows` rows
    /// (instead of the session's batch size): for a consumer that concatenates its whole
    /// input partition anyway (a whole-partition window), which then copies nothing.
    pub fn with_run_batch_rows(mut self, rows: usize) -> Self {
        self.run_batch_rows = Some(rows.max(1));
        self
    }

    /// The same sort, which may leave out of each sorted run the rows past `top` in their
    /// window partition: for a window whose ranks a filter above bounds. Every row the
    /// filter keeps is still emitted, with every row before it in its window partition.
    pub fn with_partition_top(mut self, top: PartitionTop) -> Self {
        self.partition_top = Some(top);
        self
    }

    /// The rows of each window partition it needs to emit, when set by
    /// [`with_partition_top`](Self::with_partition_top).
    pub fn partition_top(&self) -> Option<&PartitionTop> {
        self.partition_top.as_ref()
    }

    /// The same sort, which computes `request`'s window columns where a run that is its
    /// partition's whole output lies (the CUDA device), for the window above; see
    /// [`execute_with_windows`](Self::execute_with_windows).
    pub fn with_windows(mut self, request: Arc<WindowRequest>) -> Self {
        self.windows = Some(request);
        // Its own shared sorts: one begun by the sort without windows must not hand their
        // batches to this one's consumers, nor the other way round.
        self.combined = Arc::default();
        self
    }

    /// The same sort, whose run that is its partition's whole output and is gathered on a
    /// device leaves `request`'s columns there for the consumer (the Parquet writer of
    /// `gpusort sort`): its batches then carry the other columns only, in a schema that
    /// names the run ([`RESIDENT_RUN_KEY`](crate::gather::RESIDENT_RUN_KEY)). Only for a
    /// consumer that reads the plan's output directly and asks each such run for the
    /// columns it left out.
    pub fn with_resident(mut self, request: Arc<ResidentRequest>) -> Self {
        self.resident = Some(request);
        self.combined = Arc::default();
        self
    }

    /// This sort without window columns.
    pub fn without_windows(mut self) -> Self {
        if self.windows.take().is_some() {
            self.combined = Arc::default();
        }
        self
    }

    /// The window columns set by [`with_windows`](Self::with_windows).
    pub fn windows(&self) -> Option<&WindowRequest> {
        self.windows.as_deref()
    }

    /// Rows per output batch of a sorted run, when set by
    /// [`with_run_batch_rows`](Self::with_run_batch_rows).
    pub fn run_batch_rows(&self) -> Option<usize> {
        self.run_batch_rows
    }

    /// The same sort over another input (plan rewrites), with the same settings.
    fn with_input(&self, input: Arc<dyn ExecutionPlan>, fetch: Option<usize>) -> Result<Self> {
        let (expr, options) = (self.expr.clone(), self.options.clone());
        let mut exec = match &self.routing {
            Some(routing) => {
                Self::try_new_routed(input, expr, fetch, HashRouting::clone(routing), options)?
            }
            None => Self::try_new(input, expr, fetch, self.preserve_partitioning, options)?,
        };
        exec.run_batch_rows = self.run_batch_rows;
        exec.partition_top = self.partition_top;
        exec.windows = self.windows.clone();
        exec.resident = self.resident.clone();
        Ok(exec)
    }

    /// The sorted input.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// The sort keys.
    pub fn expr(&self) -> &LexOrdering {
        &self.expr
    }

    /// Whether each input partition is sorted on its own.
    pub fn preserve_partitioning(&self) -> bool {
        self.preserve_partitioning
    }

    /// Leading sort keys the input is already ordered by (the segmented strategy sorts
    /// within runs of equal values of those); 0 when none.
    pub fn ordered_prefix(&self) -> usize {
        self.prefix
    }

    /// Blocking jobs of its executions still running (a run being sorted, spilled or
    /// gathered): 0 soon after every output stream of a query is dropped.
    pub fn live_jobs(&self) -> usize {
        self.jobs.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How it sorts: backend, run size, algorithm.
    pub fn options(&self) -> &GpuSortOptions {
        &self.options
    }

    /// The backend's name: `cpu` or `cuda`.
    pub fn backend_name(&self) -> &'static str {
        self.options.backend.name()
    }

    fn input_streams(
        &self,
        partition: usize,
        context: &Arc<TaskContext>,
    ) -> Result<Vec<SendableRecordBatchStream>> {
        let context = &self.input_context(context);
        if self.preserve_partitioning {
            return Ok(vec![self.input.execute(partition, Arc::clone(context))?]);
        }
        if partition != 0 {
            return internal_err!("GpuSortExec has one output partition, asked for {partition}");
        }
        (0..self.input.output_partitioning().partition_count())
            .map(|p| self.input.execute(p, Arc::clone(context)))
            .collect()
    }
}

impl GpuSortExec {
    /// The context the input runs in: the session's, with batches of at least
    /// `input_batch_rows` rows ([`input_batch_rows`] under a memory limit).
    fn input_context(&self, context: &Arc<TaskContext>) -> Arc<TaskContext> {
        let config = context.session_config();
        let partitions = self.input.output_partitioning().partition_count();
        let rows = input_batch_rows(
            self.options.input_batch_rows,
            context.memory_pool().memory_limit(),
            &self.input.schema(),
            partitions,
        );
        if rows <= config.batch_size() {
            return Arc::clone(context);
        }
        Arc::new(TaskContext::new(
            context.task_id(),
            context.session_id(),
            config.clone().with_batch_size(rows),
            context.scalar_functions().clone(),
            context.higher_order_functions().clone(),
            context.aggregate_functions().clone(),
            context.window_functions().clone(),
            context.runtime_env(),
        ))
    }

    /// The number of partitions sorted at once (each on its own, as segments of one sort),
    /// when they are.
    pub fn combined_partitions(&self) -> Option<usize> {
        if let Some(routing) = &self.routing {
            return Some(routing.partitions());
        }
        let partitions = self.input.output_partitioning().partition_count();
        (self.preserve_partitioning && self.options.combine_partitions && partitions > 1)
            .then_some(partitions)
    }

    /// Whether runs are sorted within segments: the input is ordered by a prefix of the
    /// keys and the algorithm setting allows it.
    fn uses_segments(&self) -> bool {
        self.prefix > 0
            && matches!(
                self.options.algorithm,
                AlgorithmChoice::Auto | AlgorithmChoice::Segmented
            )
    }
}

/// Rows per input batch for a sort asking for `wanted`: all of them where the pool has no
/// limit; under a limit, only as many as keep a batch of `schema` (estimated from its
/// types) within a small share of what each of the input's `partitions` may hold in
/// transit, so that a small pool still admits a batch and its sort's working memory
/// (the session's batch size stays where that is more). An unknown limit counts as small.
fn input_batch_rows(
    wanted: usize,
    limit: MemoryLimit,
    schema: &Schema,
    partitions: usize,
) -> usize {
    let limit = match limit {
        MemoryLimit::Infinite => return wanted,
        MemoryLimit::Finite(limit) => limit,
        MemoryLimit::Unknown => return 0,
    };
    let row_bytes: usize = schema
        .fields()
        .iter()
        .map(|f| f.data_type().primitive_width().unwrap_or(32))
        .sum::<usize>()
        .max(1);
    let share = limit / (INPUT_BATCH_SHARE * partitions.max(1));
    wanted.min(share / row_bytes)
}

/// Under a memory limit, a batch read for the sort takes at most this share of the limit
/// per input partition: a quarter of what one partition's batches in transit may hold
/// ([`TRANSIT_SHARE`]), so one batch fits beside the others and its sort's working memory.
const INPUT_BATCH_SHARE: usize = TRANSIT_SHARE * 4;

/// How many leading keys of `expr` every stream the sort reads is ordered by: those of
/// each input partition when partitions are sorted separately; when all partitions go
/// into one sort, only a single input partition counts (partitions one after another are
/// not ordered as a whole).
fn ordered_prefix(
    input: &Arc<dyn ExecutionPlan>,
    expr: &LexOrdering,
    preserve_partitioning: bool,
) -> Result<usize> {
    if !preserve_partitioning && input.output_partitioning().partition_count() > 1 {
        return Ok(0);
    }
    let properties = input.equivalence_properties();
    let mut prefix = 0;
    while prefix < expr.len() && properties.ordering_satisfy(expr[..=prefix].to_vec())? {
        prefix += 1;
    }
    Ok(prefix)
}

impl DisplayAs for GpuSortExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(f, "GpuSortExec: ")?;
                if let Some(fetch) = self.fetch {
                    write!(f, "fetch={fetch}, ")?;
                }
                write!(
                    f,
                    "expr=[{}], preserve_partitioning=[{}], backend={}, algorithm={}",
                    self.expr,
                    self.preserve_partitioning,
                    self.options.backend.name(),
                    self.options.algorithm
                )?;
                if let Some(devices) = self.options.backend.devices() {
                    write!(f, ", devices=[{devices}]")?;
                }
                if self.uses_segments() {
                    write!(f, ", segmented_prefix={}", self.prefix)?;
                }
                if let Some(routing) = &self.routing {
                    write!(f, ", repartition={}", routing.partitioning())?;
                }
                if let Some(rows) = self.run_batch_rows {
                    write!(f, ", run_batch_rows={rows}")?;
                }
                if let Some(top) = &self.partition_top {
                    write!(f, ", partition_top={top}")?;
                }
                if let Some(windows) = &self.windows {
                    write!(f, ", device_windows={}", windows.columns.len())?;
                }
                if let Some(partitions) = self.combined_partitions() {
                    write!(f, ", combined_partitions={partitions}")?;
                }
                Ok(())
            }
            DisplayFormatType::TreeRender => {
                writeln!(f, "sort keys=[{}]", self.expr)?;
                writeln!(f, "backend={}", self.options.backend.name())?;
                if let Some(devices) = self.options.backend.devices() {
                    writeln!(f, "devices=[{devices}]")?;
                }
                write!(f, "algorithm={}", self.options.algorithm)?;
                if self.uses_segments() {
                    write!(f, "\nsegmented_prefix={}", self.prefix)?;
                }
                if let Some(routing) = &self.routing {
                    write!(f, "\nrepartition={}", routing.partitioning())?;
                }
                if let Some(rows) = self.run_batch_rows {
                    write!(f, "\nrun_batch_rows={rows}")?;
                }
                if let Some(partitions) = self.combined_partitions() {
                    write!(f, "\ncombined_partitions={partitions}")?;
                }
                Ok(())
            }
        }
    }
}

impl ExecutionPlan for GpuSortExec {
    fn name(&self) -> &'static str {
        "GpuSortExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.cache
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        // Several input partitions are drained into one sort by the operator itself.
        vec![Distribution::UnspecifiedDistribution]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
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
        let [child] = children.try_into().map_err(|_| {
            datafusion::common::DataFusionError::Internal(
                "GpuSortExec takes exactly one child".to_string(),
            )
        })?;
        Ok(Arc::new(self.with_input(child, self.fetch)?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.execute_sort(partition, context, None)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn fetch(&self) -> Option<usize> {
        self.fetch
    }

    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
        let exec = self.with_input(Arc::clone(&self.input), limit);
        exec.ok().map(|e| Arc::new(e) as Arc<dyn ExecutionPlan>)
    }
}

impl GpuSortExec {
    /// [`ExecutionPlan::execute`] for the window above (`SortedWindowExec`): where the
    /// backend computes the window columns of [`with_windows`](Self::with_windows) for a
    /// run that is the partition's whole output, its batches carry them after the sort's
    /// own columns, in the request's schema; the other batches are the sort's.
    pub fn execute_with_windows(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.execute_sort(partition, context, self.windows.clone())
    }

    fn execute_sort(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
        windows: Option<Arc<WindowRequest>>,
    ) -> Result<SendableRecordBatchStream> {
        let spiller = RunSpiller::new(
            context.runtime_env(),
            SpillMetrics::new(&self.metrics, partition),
            self.schema(),
            context.session_config().spill_compression(),
        );
        let batch_size = context.session_config().batch_size();
        let spec = Arc::new(SortSpec {
            exprs: self.expr.clone(),
            fetch: self.fetch,
            partition_top: self.partition_top,
            windows,
            resident: self.resident.clone(),
            batch_size,
            run_batch_rows: self.run_batch_rows.unwrap_or(batch_size),
            run_rows: self.options.run_rows,
            algorithm: self.options.algorithm,
            prefix: if self.uses_segments() { self.prefix } else { 0 },
            device_gather_min_rows: self.options.device_gather_min_rows,
            backend: Arc::clone(&self.options.backend),
            cancel: Cancel::counting(Arc::clone(&self.jobs)),
            views: Views::Shared,
        });
        let resources = SortResources {
            schema: self.schema(),
            spec,
            metrics: SortMetrics::new(&self.metrics, partition),
            spiller,
        };
        if let Some(partitions) = self.combined_partitions() {
            if partition >= partitions {
                return internal_err!(
                    "GpuSortExec has {partitions} output partitions, asked for {partition}"
                );
            }
            let shared = self.combined.claim(partition, partitions, || {
                let input_context = self.input_context(&context);
                let inputs = (0..self.input.output_partitioning().partition_count())
                    .map(|p| self.input.execute(p, Arc::clone(&input_context)))
                    .collect::<Result<Vec<_>>>()?;
                let reservation = MemoryConsumer::new("GpuSortExec[combined]")
                    .with_can_spill(true)
                    .register(context.memory_pool());
                Ok(CombinedSort::start(
                    inputs,
                    resources.clone(),
                    reservation,
                    self.routing.clone(),
                ))
            })?;
            return Ok(shared.partition_stream(partition, resources));
        }
        let inputs = self.input_streams(partition, &context)?;
        let reservation = MemoryConsumer::new(format!("GpuSortExec[{partition}]"))
            .with_can_spill(true)
            .register(context.memory_pool());
        let cancel = resources.spec.cancel.clone();
        let stream = sort_stream(SortTask {
            inputs,
            reservation,
            resources,
        });
        Ok(cancel.on_drop(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field};

    #[test]
    fn input_batches_stay_small_beside_a_small_pool() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]);
        // 8 + 32 estimated bytes a row.
        assert_eq!(
            input_batch_rows(65_536, MemoryLimit::Infinite, &schema, 16),
            65_536
        );
        assert_eq!(
            input_batch_rows(65_536, MemoryLimit::Unknown, &schema, 16),
            0
        );
        let gib = MemoryLimit::Finite(64 << 30);
        assert_eq!(input_batch_rows(65_536, gib, &schema, 16), 65_536);
        // 1 GiB over 16 partitions: 1 GiB / (128 · 16) / 40 = 13 107 rows.
        let small = MemoryLimit::Finite(1 << 30);
        assert_eq!(input_batch_rows(65_536, small, &schema, 16), 13_107);
        assert_eq!(
            input_batch_rows(65_536, MemoryLimit::Finite(1 << 20), &schema, 4),
            51
        );
    }
}
