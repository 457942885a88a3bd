//! What one partition's sort works with besides its input and its memory, grouped by role
//! as DataFusion's `ExternalSorter` groups its fields: the properties (output schema, sort
//! spec) and the execution resources (metrics, spiller). The memory reservation is not
//! here: it sits beside the buffer it accounts (`buffer.rs`).

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;

use super::metrics::SortMetrics;
use super::run::SortSpec;
use super::spill::RunSpiller;

/// One partition's sort properties and execution resources; cheap to clone into each task
/// that needs them.
#[derive(Clone)]
pub(super) struct SortResources {
    /// Output schema (the input's).
    pub schema: SchemaRef,
    /// Keys, limit, backend.
    pub spec: Arc<SortSpec>,
    /// Where stage times and bytes go.
    pub metrics: SortMetrics,
    /// Where sorted runs go when the input outgrows the reservation.
    pub spiller: RunSpiller,
}
