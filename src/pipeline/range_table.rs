//! One key range's spilled rows as a table: its files (one per scan partition of the
//! routing, `range_spill`) read back as the partitions of a scan, in the same order, so
//! that the job's sort over them keeps ties in input order as it does over the files.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, project_schema, Result};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, SpillFile, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;

use crate::exec::read_spilled;

/// A key range's rows: `files[p]` holds what scan partition `p` routed to it.
#[derive(Clone)]
pub(super) struct RangeTable {
    /// The range's number, for display.
    range: usize,
    schema: SchemaRef,
    files: Vec<Option<Arc<dyn SpillFile>>>,
}

impl std::fmt::Debug for RangeTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeTable")
            .field("range", &self.range)
            .field("files", &self.files.len())
            .finish()
    }
}

impl RangeTable {
    pub(super) fn new(
        range: usize,
        schema: SchemaRef,
        files: Vec<Option<Arc<dyn SpillFile>>>,
    ) -> Self {
        Self {
            range,
            schema,
            files,
        }
    }
}

#[async_trait]
impl TableProvider for RangeTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(RangeScanExec::new(
            self.clone(),
            projection.cloned(),
        )?))
    }
}

/// Reads one key range's files, partition `p` the file of routing partition `p`.
#[derive(Debug)]
pub(super) struct RangeScanExec {
    table: RangeTable,
    projection: Option<Vec<usize>>,
    properties: Arc<PlanProperties>,
}

impl RangeScanExec {
    fn new(table: RangeTable, projection: Option<Vec<usize>>) -> Result<Self> {
        let schema = project_schema(&table.schema, projection.as_ref())?;
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(table.files.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Self {
            table,
            projection,
            properties: Arc::new(properties),
        })
    }
}

impl DisplayAs for RangeScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let files = self.table.files.iter().flatten().count();
        write!(
            f,
            "RangeScanExec: key range {}, {files} spill files",
            self.table.range
        )
    }
}

impl ExecutionPlan for RangeScanExec {
    fn name(&self) -> &'static str {
        "RangeScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return internal_err!("RangeScanExec has no children");
        }
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let Some(file) = self.table.files.get(partition) else {
            if partition == 0 {
                return Ok(empty(schema));
            }
            return internal_err!("RangeScanExec has no partition {partition}");
        };
        let Some(file) = file else {
            return Ok(empty(schema));
        };
        let batches = read_spilled(Arc::clone(file), Arc::clone(&self.table.schema))?;
        match self.projection.clone() {
            None => Ok(batches),
            Some(columns) => {
                let projected = batches.map(move |batch| Ok(batch?.project(&columns)?));
                Ok(Box::pin(RecordBatchStreamAdapter::new(schema, projected)))
            }
        }
    }
}

fn empty(schema: SchemaRef) -> SendableRecordBatchStream {
    Box::pin(RecordBatchStreamAdapter::new(
        schema,
        futures::stream::empty(),
    ))
}
