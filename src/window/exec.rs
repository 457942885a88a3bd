//! `SortedWindowExec`: window functions computed by gpusort over the rows its sort has
//! just ordered, on all cores, in place of DataFusion's window operators.
//!
//! ```text
//!   BoundedWindowAggExec / WindowAggExec         SortedWindowExec (same expressions,
//!            GpuSortExec                  ───►       GpuSortExec     schema and promises)
//! ```
//!
//! Each output partition buffers its sorted input (accounted in the memory pool) and, once
//! it holds [`FLUSH_ROWS`] rows, a share of the pool's limit ([`FLUSH_SHARE_OF_LIMIT`])
//! or the pool is full, computes the window partitions it
//! holds whole (all but the last, which may go on in the next batch) on a blocking thread
//! with rayon (`evaluate.rs`), and streams those rows, in pieces, with the window columns
//! appended; the rest when the input ends. So memory is bounded by the largest window
//! partition, as in DataFusion's streaming window, and output starts before the input
//! ends. Without `PARTITION BY` the whole input is one window partition, held whole. A
//! window partition larger than the pool's room is held all the same (counted past the
//! limit, so that other consumers spill), as DataFusion's window operators hold it.
//!
//! The working memory of a computation (the concatenated arguments, prefix sums and output
//! columns: up to about 40 bytes per row and function of the rows computed at once) is not
//! counted in the pool; the buffered input is. DataFusion's window operators evaluate a window without
//! `PARTITION BY` on one thread, and a sliding frame one row at a time; here every
//! function is a prefix scan or an index computation over pieces of rows in parallel.
//!
//! The node keeps the DataFusion window it replaced: its expressions for display and
//! serialization, and its input requirements and output properties, which it repeats.

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::kernels::cmp::distinct;
use arrow::datatypes::SchemaRef;
use datafusion::arrow;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::projection::ProjectionMapping;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr_common::sort_expr::OrderingRequirements;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time,
};
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::windows::WindowExpr;
use datafusion::physical_plan::{
    replace_children_if_necessary, DisplayAs, DisplayFormatType, ExecutionPlan,
    ExecutionPlanProperties, InputDistributionRequirements, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;
use tokio::sync::mpsc::Sender;

use super::device::device_request;
use super::evaluate::evaluate_partition;
use super::layout::Runs;
use super::spec::WindowFunction;
use crate::exec::GpuSortExec;
use crate::gather::DEVICE_WINDOWS_KEY;

/// Rows buffered before the whole window partitions among them are computed.
pub(crate) const FLUSH_ROWS: usize = 1 << 22;

/// Under a pool with a limit, the share of it one output partition's buffer of whole
/// window partitions may hold before they are computed: `limit / (this × partitions)`.
/// The sorts below (their merges) and the other partitions' windows need the rest.
const FLUSH_SHARE_OF_LIMIT: usize = 4;

/// Output batches that may wait for the consumer.
const OUTPUT_CHANNEL_BATCHES: usize = 16;

/// Window functions over sorted input, computed by gpusort; see the module docs.
#[derive(Debug)]
pub struct SortedWindowExec {
    /// The sorted input.
    input: Arc<dyn ExecutionPlan>,
    /// The DataFusion window node this replaces (over the same input).
    replaced: Arc<dyn ExecutionPlan>,
    /// How each window expression is computed, in output column order.
    functions: Arc<[WindowFunction]>,
    /// The window expressions, as DataFusion planned them.
    window_expr: Vec<Arc<dyn WindowExpr>>,
    /// Whether the sort below computes the window columns where its rows are (the
    /// device), or why not (`device.rs`).
    device: std::result::Result<(), String>,
    /// `gpu_sort.device_window_functions`.
    device_allowed: bool,
    /// The input columns its output keeps, in order (`None`: all): those its consumer
    /// reads. The sort below hands only these on when it computes the window columns.
    keep: Option<Vec<usize>>,
    /// Input columns, then one column per function: what the functions are computed
    /// over on all cores.
    full_schema: SchemaRef,
    /// The kept input columns, then one column per function.
    schema: SchemaRef,
    /// The replaced node's properties, emitting once a partition is read.
    cache: Arc<PlanProperties>,
    /// Output rows, compute time and the time spent computing window columns.
    metrics: ExecutionPlanMetricsSet,
}

impl SortedWindowExec {
    /// Replaces `replaced` (a `WindowAggExec` or `BoundedWindowAggExec` whose window
    /// expressions are `window_expr`) over `input`; `Err` says why it cannot.
    pub(crate) fn try_new(
        replaced: Arc<dyn ExecutionPlan>,
        window_expr: Vec<Arc<dyn WindowExpr>>,
        input: Arc<dyn ExecutionPlan>,
        device_allowed: bool,
        keep: Option<Vec<usize>>,
    ) -> std::result::Result<Self, String> {
        let input_schema = input.schema();
        let functions: Vec<WindowFunction> = window_expr
            .iter()
            .map(|expr| WindowFunction::of(expr, &input_schema))
            .collect::<std::result::Result<_, _>>()?;
        let schema = replaced.schema();
        let expected: Vec<_> = input_schema
            .fields()
            .iter()
            .cloned()
            .chain(functions.iter().map(|f| Arc::clone(&f.output)))
            .collect();
        if schema.fields().iter().cloned().collect::<Vec<_>>() != expected {
            return Err("the window's columns differ from what gpusort computes".to_string());
        }
        if let Some(keep) = &keep {
            let in_order = keep.windows(2).all(|w| w[0] < w[1]);
            if !in_order
                || keep
                    .last()
                    .is_some_and(|&c| c >= input_schema.fields().len())
            {
                return Err(format!("kept columns {keep:?} out of order or range"));
            }
        }
        let (input, device) = match input.downcast_ref::<GpuSortExec>() {
            _ if !device_allowed => (
                input,
                Err("gpu_sort.device_window_functions = false".to_string()),
            ),
            Some(sort) => match device_request(&functions, &input_schema, keep.as_deref()) {
                Ok(request) => {
                    let sort = sort.clone().with_windows(Arc::new(request));
                    (Arc::new(sort) as Arc<dyn ExecutionPlan>, Ok(()))
                }
                Err(reason) => (input, Err(reason)),
            },
            None => (input, Err("the input is not a gpusort sort".to_string())),
        };
        let replaced = replace_children_if_necessary(replaced, vec![Arc::clone(&input)])
            .map_err(|e| e.to_string())?;
        let full_schema = schema;
        let (schema, properties) = match &keep {
            None => (
                Arc::clone(&full_schema),
                PlanProperties::clone(replaced.properties()),
            ),
            Some(keep) => {
                kept_properties(&replaced, keep, functions.len()).map_err(|e| e.to_string())?
            }
        };
        let cache = Arc::new(properties.with_emission_type(EmissionType::Final));
        Ok(Self {
            input,
            replaced,
            functions: functions.into(),
            window_expr,
            device,
            device_allowed,
            keep,
            full_schema,
            schema,
            cache,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// This window with only the input columns `keep` (in order) in its output, the
    /// window columns after them; `Err` says why not.
    pub(crate) fn keeping(&self, keep: Vec<usize>) -> std::result::Result<Self, String> {
        let sort = match self.input.downcast_ref::<GpuSortExec>() {
            // The sort as it was before this window's request joined it.
            Some(sort) => Arc::new(sort.clone().without_windows()) as Arc<dyn ExecutionPlan>,
            None => Arc::clone(&self.input),
        };
        Self::try_new(
            Arc::clone(&self.replaced),
            self.window_expr.clone(),
            sort,
            self.device_allowed,
            Some(keep),
        )
    }

    /// The input columns its output keeps (`None`: all of them).
    pub fn kept_columns(&self) -> Option<&[usize]> {
        self.keep.as_deref()
    }

    /// The window expressions it computes.
    pub fn window_expr(&self) -> &[Arc<dyn WindowExpr>] {
        &self.window_expr
    }

    /// The input.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// The DataFusion window node it replaced (over the same input).
    pub fn replaced(&self) -> &Arc<dyn ExecutionPlan> {
        &self.replaced
    }

    /// Whether it may compute its columns on the device
    /// (`gpu_sort.device_window_functions` when it was planned).
    pub fn device_allowed(&self) -> bool {
        self.device_allowed
    }
}

impl DisplayAs for SortedWindowExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<String> = self
            .window_expr
            .iter()
            .map(|e| {
                let frame = e.get_window_frame();
                format!("{}: frame {frame}", e.name())
            })
            .collect();
        let kept = match &self.keep {
            Some(keep) => format!(
                ", keeps {} of {} input columns",
                keep.len(),
                self.full_schema.fields().len() - self.functions.len()
            ),
            None => String::new(),
        };
        match t {
            DisplayFormatType::TreeRender => write!(f, "select_list={}", names.join(", ")),
            _ => match &self.device {
                Ok(()) => write!(
                    f,
                    "SortedWindowExec: wdw=[{}], on=device where its sort is one run, else all \
                     cores{kept}",
                    names.join(", ")
                ),
                Err(reason) => write!(
                    f,
                    "SortedWindowExec: wdw=[{}], on=all cores (not on the device: \
                     {reason}){kept}",
                    names.join(", ")
                ),
            },
        }
    }
}

impl ExecutionPlan for SortedWindowExec {
    fn name(&self) -> &'static str {
        "SortedWindowExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.cache
    }

    fn input_distribution_requirements(&self) -> InputDistributionRequirements {
        self.replaced.input_distribution_requirements()
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        self.replaced.required_input_ordering()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        self.replaced.benefits_from_input_partitioning()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        // The replaced window holds the same expressions.
        self.replaced.apply_expressions(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [child] = children.try_into().map_err(|_| {
            DataFusionError::Internal("SortedWindowExec takes exactly one child".to_string())
        })?;
        let exec = Self::try_new(
            Arc::clone(&self.replaced),
            self.window_expr.clone(),
            child,
            self.device_allowed,
            self.keep.clone(),
        )
        .map_err(DataFusionError::Plan)?;
        Ok(Arc::new(exec))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition >= self.cache.partitioning.partition_count() {
            return internal_err!("SortedWindowExec has no partition {partition}");
        }
        let input = match self.input.downcast_ref::<GpuSortExec>() {
            Some(sort) if self.device.is_ok() => {
                sort.execute_with_windows(partition, Arc::clone(&context))?
            }
            _ => self.input.execute(partition, Arc::clone(&context))?,
        };
        let pool = context.memory_pool();
        let reservation =
            MemoryConsumer::new(format!("SortedWindowExec[{partition}]")).register(pool);
        let partitions = self.cache.partitioning.partition_count();
        let flush_bytes = match pool.memory_limit() {
            MemoryLimit::Finite(limit) => limit / (FLUSH_SHARE_OF_LIMIT * partitions).max(1),
            MemoryLimit::Infinite | MemoryLimit::Unknown => usize::MAX,
        };
        let input_columns = self.full_schema.fields().len() - self.functions.len();
        let output_columns = self.keep.as_ref().map(|keep| {
            keep.iter()
                .copied()
                .chain(input_columns..self.full_schema.fields().len())
                .collect()
        });
        let task = WindowTask {
            flush_bytes,
            functions: Arc::clone(&self.functions),
            full_schema: Arc::clone(&self.full_schema),
            output_columns,
            schema: Arc::clone(&self.schema),
            baseline: BaselineMetrics::new(&self.metrics, partition),
            window_time: MetricBuilder::new(&self.metrics).subset_time("window_time", partition),
        };
        let mut builder =
            RecordBatchReceiverStream::builder(Arc::clone(&self.schema), OUTPUT_CHANNEL_BATCHES);
        let tx = builder.tx();
        builder.spawn(async move { task.run(input, reservation, tx).await });
        Ok(builder.build())
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// What one output partition's computation owns.
struct WindowTask {
    /// Buffered bytes at which the whole window partitions held are computed.
    flush_bytes: usize,
    functions: Arc<[WindowFunction]>,
    /// The input's columns and the window columns, as computed on all cores.
    full_schema: SchemaRef,
    /// The columns of `full_schema` in the output (`None`: all).
    output_columns: Option<Vec<usize>>,
    /// The output's.
    schema: SchemaRef,
    baseline: BaselineMetrics,
    window_time: Time,
}

/// A buffered input batch and the bytes reserved for it.
type Held = (RecordBatch, usize);

/// Sorted input batches not computed yet, and the bytes reserved for each.
#[derive(Default)]
struct Pending {
    batches: Vec<Held>,
    rows: usize,
    bytes: usize,
    /// The bytes held at which to look for whole window partitions again, after a look
    /// found none (so one long window partition is not scanned again at every batch).
    look_again_at: usize,
}

impl WindowTask {
    /// Reads the input partition, computing whole window partitions as they are held.
    async fn run(
        self,
        mut input: SendableRecordBatchStream,
        mut reservation: MemoryReservation,
        tx: Sender<Result<RecordBatch>>,
    ) -> Result<()> {
        let mut pending = Pending::default();
        while let Some(batch) = input.next().await {
            let batch = batch?;
            if batch.schema().metadata().contains_key(DEVICE_WINDOWS_KEY) {
                // The sort computed the window columns where its rows were, and handed on
                // only the columns kept.
                if !pending.batches.is_empty() {
                    return internal_err!(
                        "SortedWindowExec: window columns computed for part of a partition"
                    );
                }
                let batch =
                    RecordBatch::try_new(Arc::clone(&self.schema), batch.columns().to_vec())?;
                self.baseline.record_output(batch.num_rows());
                if tx.send(Ok(batch)).await.is_err() {
                    return Ok(());
                }
                continue;
            }
            let bytes = batch.get_array_memory_size();
            if reservation.try_grow(bytes).is_err() {
                // Make room by computing the window partitions held whole.
                self.flush(&mut pending, &mut reservation, &tx, false)
                    .await?;
                if reservation.try_grow(bytes).is_err() {
                    // One window partition must be held whole, as DataFusion's streaming
                    // window holds it: its batch is taken past the pool's limit, and
                    // counted, so that the consumers that can spill do.
                    reservation.grow(bytes);
                }
            }
            pending.rows += batch.num_rows();
            pending.bytes += bytes;
            pending.batches.push((batch, bytes));
            if pending.rows >= FLUSH_ROWS || pending.bytes >= self.flush_bytes {
                self.flush(&mut pending, &mut reservation, &tx, false)
                    .await?;
            }
        }
        self.flush(&mut pending, &mut reservation, &tx, true)
            .await?;
        self.baseline.done();
        Ok(())
    }

    /// Computes and sends the pending rows up to the last window partition (all of them
    /// when `all`), releasing the reservation of the batches computed whole.
    async fn flush(
        &self,
        pending: &mut Pending,
        reservation: &mut MemoryReservation,
        tx: &Sender<Result<RecordBatch>>,
        all: bool,
    ) -> Result<()> {
        if !all && pending.bytes < pending.look_again_at {
            return Ok(());
        }
        let split = match all {
            true => Split {
                batch: pending.batches.len(),
                row: 0,
            },
            false => match last_partition_start(&pending.batches, &self.functions[0])? {
                Some(split) => split,
                None => {
                    pending.look_again_at = pending.bytes.saturating_mul(2);
                    return Ok(());
                }
            },
        };
        let (done, rest) = split_at(std::mem::take(&mut pending.batches), split);
        let released: usize = done.iter().map(|(_, bytes)| bytes).sum();
        pending.rows = rest.iter().map(|(b, _)| b.num_rows()).sum();
        pending.bytes -= released;
        pending.look_again_at = 0;
        pending.batches = rest;
        let batches: Vec<RecordBatch> = done.into_iter().map(|(b, _)| b).collect();
        let timer = self.window_time.clone();
        let functions = Arc::clone(&self.functions);
        let full_schema = Arc::clone(&self.full_schema);
        let output = tokio::task::spawn_blocking(move || {
            let _timing = timer.timer();
            evaluate_partition(batches, &functions, &full_schema)
        })
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))??;
        let output = match &self.output_columns {
            None => output,
            Some(columns) => output
                .into_iter()
                .map(|batch| {
                    let kept = columns
                        .iter()
                        .map(|&c| Arc::clone(batch.column(c)))
                        .collect();
                    RecordBatch::try_new(Arc::clone(&self.schema), kept)
                })
                .collect::<std::result::Result<Vec<_>, _>>()?,
        };
        reservation.shrink(released.min(reservation.size()));
        for batch in output {
            self.baseline.record_output(batch.num_rows());
            if tx.send(Ok(batch)).await.is_err() {
                // The consumer is gone.
                return Ok(());
            }
        }
        Ok(())
    }
}

/// The schema and properties of `replaced` (a window whose last `functions` columns are
/// its window columns) when its output keeps only the input columns `keep` before them:
/// those of a projection of them.
fn kept_properties(
    replaced: &Arc<dyn ExecutionPlan>,
    keep: &[usize],
    functions: usize,
) -> Result<(SchemaRef, PlanProperties)> {
    let full = replaced.schema();
    let inputs = full.fields().len() - functions;
    let columns: Vec<usize> = keep
        .iter()
        .copied()
        .chain(inputs..full.fields().len())
        .collect();
    let schema = Arc::new(full.project(&columns)?);
    let exprs = columns.iter().map(|&c| {
        let name = full.field(c).name().clone();
        (
            Arc::new(Column::new(&name, c)) as Arc<dyn PhysicalExpr>,
            name,
        )
    });
    let mapping = ProjectionMapping::try_new(exprs, &full)?;
    let input_properties = replaced.equivalence_properties();
    let equivalences = input_properties.project(&mapping, Arc::clone(&schema));
    let partitioning = replaced
        .output_partitioning()
        .project(&mapping, input_properties);
    let properties = PlanProperties::new(
        equivalences,
        partitioning,
        replaced.pipeline_behavior(),
        replaced.boundedness(),
    );
    Ok((schema, properties))
}

/// Where the pending batches split before their last window partition (which may go on
/// in the next batch); `None` when they hold one window partition only.
fn last_partition_start(batches: &[Held], function: &WindowFunction) -> Result<Option<Split>> {
    if function.partition_by.is_empty() {
        return Ok(None);
    }
    let keys = |batch: &RecordBatch| -> Result<Vec<ArrayRef>> {
        function
            .partition_by
            .iter()
            .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
            .collect()
    };
    let mut next_first: Option<Vec<ArrayRef>> = None;
    for (index, (batch, _)) in batches.iter().enumerate().rev() {
        if batch.num_rows() == 0 {
            continue;
        }
        let columns = keys(batch)?;
        let rows = batch.num_rows();
        if let Some(first) = &next_first {
            // The batch after this one starts a new partition unless its first row equals
            // this batch's last one.
            let last: Vec<ArrayRef> = columns.iter().map(|c| c.slice(rows - 1, 1)).collect();
            if rows_differ(&last, first)? {
                return Ok(Some(Split {
                    batch: index + 1,
                    row: 0,
                }));
            }
        }
        let runs = Runs::of_equal_rows(&columns, rows)?;
        let last_start = runs.start(runs.len() - 1);
        if last_start > 0 {
            return Ok(Some(Split {
                batch: index,
                row: last_start,
            }));
        }
        next_first = Some(columns.iter().map(|c| c.slice(0, 1)).collect());
    }
    Ok(None)
}

/// Whether two one-row column sets differ.
fn rows_differ(a: &[ArrayRef], b: &[ArrayRef]) -> Result<bool> {
    for (x, y) in a.iter().zip(b) {
        if distinct(x, y)?.value(0) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A cut of the pending batches: batches before `batch` whole, and `row` rows of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Split {
    batch: usize,
    row: usize,
}

/// The batches before `split`, and those from it on. A batch that is cut keeps its
/// reservation with the rest (its buffers are shared by both halves).
fn split_at(mut batches: Vec<Held>, Split { batch, row }: Split) -> (Vec<Held>, Vec<Held>) {
    let mut rest = batches.split_off(batch.min(batches.len()));
    if row > 0 {
        let (head, bytes) = rest.remove(0);
        batches.push((head.slice(0, row), 0));
        rest.insert(0, (head.slice(row, head.num_rows() - row), bytes));
    }
    (batches, rest)
}
