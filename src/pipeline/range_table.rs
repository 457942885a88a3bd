//! Consecutive key ranges' spilled rows as a table: their files (one per scan partition
//! of the routing and range, `range_spill`) read back as the partitions of a scan,
//! partition `p` reading routing partition `p`'s files of each range in turn. A range's
//! rows so come back in input order, and the job's sort over them keeps ties (which never
//! cross ranges) in input order as it does over the input files.

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
    DisplayAs, DisplayFormatType, EmptyRecordBatchStream, ExecutionPlan, Partitioning,
    PlanProperties,
};
use futures::StreamExt;

use crate::exec::read_spilled;

/// Key ranges' rows: `files[p]` holds what scan partition `p` routed to them, range by
/// range.
#[derive(Clone)]
pub(super) struct RangeTable {
    /// The ranges' numbers, for display.
    ranges: std::ops::Range<usize>,
    schema: SchemaRef,
    files: Vec<Vec<Arc<dyn SpillFile>>>,
}

impl std::fmt::Debug for RangeTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeTable")
            .field("ranges", &self.ranges)
            .field("files", &self.files.len())
            .finish()
    }
}

impl RangeTable {
    /// The table of `ranges`, whose files are `files[range][partition]`.
    pub(super) fn new(
        ranges: std::ops::Range<usize>,
        schema: SchemaRef,
        files: &[Vec<Option<Arc<dyn SpillFile>>>],
    ) -> Self {
        let partitions = files.iter().map(Vec::len).max().unwrap_or(0);
        let files = (0..partitions)
            .map(|p| {
                ranges
                    .clone()
                    .filter_map(|r| files[r].get(p).cloned().flatten())
                    .collect()
            })
            .collect();
        Self {
            ranges,
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
        let files = self.table.files.iter().map(Vec::len).sum::<usize>();
        write!(
            f,
            "RangeScanExec: key ranges {:?}, {files} spill files",
            self.table.ranges
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
        let Some(files) = self.table.files.get(partition) else {
            if partition == 0 {
                return Ok(Box::pin(EmptyRecordBatchStream::new(schema)));
            }
            return internal_err!("RangeScanExec has no partition {partition}");
        };
        // One file after another, each opened when the one before has ended.
        let full_schema = Arc::clone(&self.table.schema);
        let batches = futures::stream::iter(files.clone())
            .map(
                move |file| match read_spilled(file, Arc::clone(&full_schema)) {
                    Ok(stream) => stream.left_stream(),
                    Err(e) => futures::stream::once(async move { Err(e) }).right_stream(),
                },
            )
            .flatten();
        let batches: SendableRecordBatchStream = Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.table.schema),
            batches,
        ));
        match self.projection.clone() {
            None => Ok(batches),
            Some(columns) => {
                let projected = batches.map(move |batch| Ok(batch?.project(&columns)?));
                Ok(Box::pin(RecordBatchStreamAdapter::new(schema, projected)))
            }
        }
    }
}
