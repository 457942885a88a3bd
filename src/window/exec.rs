//! `SortedWindowExec`: window functions computed by gpusort over the rows its sort has
//! just ordered, on all cores, in place of DataFusion's window operators.
//!
//! ```text
//!   BoundedWindowAggExec / WindowAggExec         SortedWindowExec (same expressions,
//!            GpuSortExec                  ───►       GpuSortExec     schema and promises)
//! ```
//!
//! Each output partition collects its sorted input partition (accounted in the memory
//! pool, as DataFusion's `WindowAggExec` holds it), computes every window column on a
//! blocking thread with rayon (`evaluate.rs`), and streams the input batches, in pieces,
//! with those columns appended. DataFusion's window operators evaluate a window without
//! `PARTITION BY` on one thread, and a sliding frame one row at a time; here every
//! function is a prefix scan or an index computation over pieces of rows in parallel.
//!
//! The node keeps the DataFusion window it replaced: its expressions for display and
//! serialization, and its input requirements and output properties, which it repeats.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::arrow;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr_common::sort_expr::OrderingRequirements;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::windows::WindowExpr;
use datafusion::physical_plan::{
    replace_children_if_necessary, DisplayAs, DisplayFormatType, ExecutionPlan,
    InputDistributionRequirements, PlanProperties, SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};

use super::evaluate::evaluate_partition;
use super::spec::WindowFunction;

/// Working memory counted per row and window function beyond the buffered input: the
/// concatenated argument, prefix sums or running extremes, and the output column.
const WORKING_BYTES_PER_ROW_AND_FUNCTION: usize = 40;

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
    /// Input columns, then one column per function.
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
        let replaced = replace_children_if_necessary(replaced, vec![Arc::clone(&input)])
            .map_err(|e| e.to_string())?;
        let cache = Arc::new(
            PlanProperties::clone(replaced.properties()).with_emission_type(EmissionType::Final),
        );
        Ok(Self {
            input,
            replaced,
            functions: functions.into(),
            window_expr,
            schema,
            cache,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The window expressions it computes.
    pub fn window_expr(&self) -> &[Arc<dyn WindowExpr>] {
        &self.window_expr
    }

    /// The input.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
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
        match t {
            DisplayFormatType::TreeRender => write!(f, "select_list={}", names.join(", ")),
            _ => write!(
                f,
                "SortedWindowExec: wdw=[{}], on=all cores",
                names.join(", ")
            ),
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
        let mut recursion = TreeNodeRecursion::Continue;
        for expr in &self.window_expr {
            for e in expr.all_expressions().args.iter() {
                recursion = f(e)?;
                if recursion == TreeNodeRecursion::Stop {
                    return Ok(recursion);
                }
            }
        }
        Ok(recursion)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [child] = children.try_into().map_err(|_| {
            DataFusionError::Internal("SortedWindowExec takes exactly one child".to_string())
        })?;
        let exec = Self::try_new(Arc::clone(&self.replaced), self.window_expr.clone(), child)
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
        let input = self.input.execute(partition, Arc::clone(&context))?;
        let reservation = MemoryConsumer::new(format!("SortedWindowExec[{partition}]"))
            .register(context.memory_pool());
        let task = WindowTask {
            functions: Arc::clone(&self.functions),
            schema: Arc::clone(&self.schema),
            baseline: BaselineMetrics::new(&self.metrics, partition),
            window_time: MetricBuilder::new(&self.metrics).subset_time("window_time", partition),
        };
        let stream = futures::stream::once(task.run(input, reservation))
            .map_ok(|(batches, reservation)| {
                futures::stream::iter(batches.into_iter().map(move |batch| {
                    // The reservation lives until the last batch is taken.
                    let _held = &reservation;
                    Ok(batch)
                }))
            })
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// What one output partition's computation owns.
struct WindowTask {
    functions: Arc<[WindowFunction]>,
    schema: SchemaRef,
    baseline: BaselineMetrics,
    window_time: Time,
}

impl WindowTask {
    /// Reads the input partition, then computes its window columns on a blocking thread.
    async fn run(
        self,
        mut input: SendableRecordBatchStream,
        reservation: MemoryReservation,
    ) -> Result<(Vec<RecordBatch>, MemoryReservation)> {
        let mut batches = Vec::new();
        let mut rows = 0;
        while let Some(batch) = input.next().await {
            let batch = batch?;
            reservation.try_grow(batch.get_array_memory_size())?;
            rows += batch.num_rows();
            batches.push(batch);
        }
        drop(input);
        reservation.try_grow(rows * self.functions.len() * WORKING_BYTES_PER_ROW_AND_FUNCTION)?;
        let timer = self.window_time.clone();
        let functions = Arc::clone(&self.functions);
        let schema = Arc::clone(&self.schema);
        let output = tokio::task::spawn_blocking(move || {
            let _timing = timer.timer();
            evaluate_partition(batches, &functions, &schema)
        })
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))??;
        let out_rows: usize = output.iter().map(RecordBatch::num_rows).sum();
        self.baseline.record_output(out_rows);
        self.baseline.done();
        Ok((output, reservation))
    }
}
