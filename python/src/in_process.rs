//! The codecs gpusort installs on a datafusion-python session: plans that cross between
//! the host's DataFusion and this library's never leave the process, so what DataFusion's
//! protobuf cannot write (a table provider or a plan node of the host's own, defined in
//! Python, or reached through another FFI library) crosses by reference.
//!
//! ```text
//!  encode: node ──▶ REFERENCES[id] = node      payload: REFERENCE, id
//!  decode: payload ──▶ REFERENCES.remove(id)   (rebuilt over the decoded children)
//! ```
//!
//! gpusort's own operators cross as the `GpuSortSubplanExec` leaves that hold them
//! (subplan.rs). A payload is decoded once, right after it is written, by the other side
//! of the same planner call. One that is never decoded (the host failed to write the rest
//! of the plan, as for a `COPY`, or wrote it for itself: datafusion-python's `to_bytes`)
//! is dropped by the first write more than [`UNREAD_LIFETIME`] after it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result, TableReference};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Extension, LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_plan::{replace_children_if_necessary, ExecutionPlan};
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

/// The first byte of a payload: a reference (the id follows).
const REFERENCE: u8 = 1;

/// What a reference can name.
enum Referenced {
    Plan(Arc<dyn ExecutionPlan>),
    Table(Arc<dyn TableProvider>),
    Logical(Arc<dyn UserDefinedLogicalNode>),
}

/// How long a payload's node waits to be read before a later write drops it: far longer
/// than the one plan encoding that separates a write from its read.
const UNREAD_LIFETIME: Duration = Duration::from_secs(60);

static REFERENCES: LazyLock<Mutex<HashMap<u64, (Instant, Referenced)>>> =
    LazyLock::new(Mutex::default);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn reference_error(message: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(format!("gpusort (datafusion-python): {}", message.into()))
}

/// Keeps `node` and writes the payload that names it.
fn write_reference(node: Referenced, buf: &mut Vec<u8>) -> Result<()> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let mut references = REFERENCES
        .lock()
        .map_err(|_| reference_error("the reference table is poisoned"))?;
    references.retain(|_, (written, _)| now.duration_since(*written) < UNREAD_LIFETIME);
    references.insert(id, (now, node));
    buf.push(REFERENCE);
    buf.extend_from_slice(&id.to_le_bytes());
    Ok(())
}

/// The node a reference payload names, taken out of the table.
fn take_reference(buf: &[u8]) -> Result<Referenced> {
    let id = match buf {
        [REFERENCE, id @ ..] if id.len() == 8 => u64::from_le_bytes(id.try_into().unwrap()),
        _ => {
            return Err(reference_error(
                "not a payload of gpusort's in-process codec",
            ))
        }
    };
    REFERENCES
        .lock()
        .map_err(|_| reference_error("the reference table is poisoned"))?
        .remove(&id)
        .map(|(_, node)| node)
        .ok_or_else(|| {
            reference_error(format!(
                "plan reference {id} was already read, expired or never written: plans \
                 encoded by gpusort's in-process codec are read once, at once, in the process \
                 that wrote them"
            ))
        })
}

/// Nodes written and not read yet (tests: every query reads all it writes).
pub fn unread_references() -> usize {
    REFERENCES.lock().map(|r| r.len()).unwrap_or(0)
}

/// Plan nodes by reference.
#[derive(Debug, Default)]
pub struct InProcessPhysicalCodec;

impl PhysicalExtensionCodec for InProcessPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match take_reference(buf)? {
            Referenced::Plan(node) if inputs.is_empty() => Ok(node),
            Referenced::Plan(node) => replace_children_if_necessary(node, inputs.to_vec()),
            _ => Err(reference_error("a plan reference names no plan node")),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        write_reference(Referenced::Plan(node), buf)
    }
}

/// Table providers and logical extension nodes by reference.
#[derive(Debug, Default)]
pub struct InProcessLogicalCodec;

impl LogicalExtensionCodec for InProcessLogicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[LogicalPlan],
        _ctx: &TaskContext,
    ) -> Result<Extension> {
        match take_reference(buf)? {
            Referenced::Logical(node) => {
                let node = if inputs.is_empty() {
                    node
                } else {
                    node.with_exprs_and_inputs(node.expressions(), inputs.to_vec())?
                };
                Ok(Extension { node })
            }
            _ => Err(reference_error(
                "a logical node reference names no logical node",
            )),
        }
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> Result<()> {
        write_reference(Referenced::Logical(Arc::clone(&node.node)), buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        _schema: SchemaRef,
        _ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        match take_reference(buf)? {
            Referenced::Table(table) => Ok(table),
            _ => Err(reference_error(format!(
                "the reference for table {table_ref} names no table"
            ))),
        }
    }

    fn try_encode_table_provider(
        &self,
        _table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        write_reference(Referenced::Table(node), buf)
    }
}
