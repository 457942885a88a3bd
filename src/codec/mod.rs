//! `GpuSortCodec`: gpusort's operators (`GpuSortExec`, `SortedWindowExec`) in DataFusion's
//! protobuf physical plans, for whatever ships plans between processes: a distributed
//! engine's coordinator and workers.
//!
//! ```text
//!  GpuSortNodeProto        one per gpusort node (DataFusion's extension node payload)
//!    sort    GpuSortExecProto        (sort.rs)
//!    window  SortedWindowExecProto   (window.rs)
//! ```
//!
//! Register it wherever plans are written and read, composed with other codecs as any
//! `PhysicalExtensionCodec`. A reader of another [`FORMAT`] refuses the plan, saying so.

mod sort;
mod window;

use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;

pub use sort::{GpuSortExecProto, HashRoutingProto, PartitionTopProto, SortOptionsProto};
pub use window::{KeptColumnsProto, SortedWindowExecProto};

use crate::exec::GpuSortExec;
use crate::window::SortedWindowExec;

/// The version of the messages' layout. A reader decodes only its own.
pub const FORMAT: u32 = 2;

/// Encodes and decodes gpusort's operators; see the module docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct GpuSortCodec;

/// One gpusort node on the wire.
#[derive(Clone, PartialEq, Message)]
pub struct GpuSortNodeProto {
    /// Which node, and its fields.
    #[prost(oneof = "GpuSortNode", tags = "1, 2")]
    pub node: Option<GpuSortNode>,
}

/// The node kinds of [`GpuSortNodeProto`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum GpuSortNode {
    /// A `GpuSortExec`.
    #[prost(message, tag = "1")]
    Sort(GpuSortExecProto),
    /// A `SortedWindowExec`.
    #[prost(message, tag = "2")]
    Window(SortedWindowExecProto),
}

/// An error of the codec: what it was given is not what it reads or writes (an
/// `Execution` error, not DataFusion's "internal error", which blames DataFusion).
pub(crate) fn codec_error(message: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(format!("gpusort codec: {}", message.into()))
}

fn check_format(node: &str, format: u32) -> Result<()> {
    if format == FORMAT {
        return Ok(());
    }
    Err(codec_error(format!(
        "the plan's {node} is of format {format}, this process reads format {FORMAT}: run the \
         same gpusort version wherever the plan is written and read"
    )))
}

fn to_usize(value: u64) -> Result<usize> {
    usize::try_from(value).map_err(|_| codec_error(format!("{value} does not fit a usize")))
}

impl GpuSortCodec {
    /// `node` (a `GpuSortExec` or a `SortedWindowExec`) as its protobuf message.
    pub fn to_proto(
        &self,
        node: &dyn ExecutionPlan,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<GpuSortNodeProto> {
        let node = if let Some(sort) = node.downcast_ref::<GpuSortExec>() {
            GpuSortNode::Sort(sort::sort_to_proto(sort, self, proto_converter)?)
        } else if let Some(window) = node.downcast_ref::<SortedWindowExec>() {
            GpuSortNode::Window(window::window_to_proto(window, self, proto_converter)?)
        } else {
            return Err(codec_error(format!(
                "{} is not a GpuSortExec or a SortedWindowExec (gpusort encodes only its own \
                 operators)",
                node.name()
            )));
        };
        Ok(GpuSortNodeProto { node: Some(node) })
    }

    /// The node of `proto` over `input`; a sort resolves its backend from `ctx`'s
    /// `gpu_sort.*` settings in this process.
    pub fn from_proto(
        &self,
        proto: &GpuSortNodeProto,
        input: Arc<dyn ExecutionPlan>,
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(match &proto.node {
            Some(GpuSortNode::Sort(sort)) => Arc::new(sort::sort_from_proto(
                sort,
                input,
                ctx,
                self,
                proto_converter,
            )?),
            Some(GpuSortNode::Window(window)) => Arc::new(window::window_from_proto(
                window,
                input,
                ctx,
                self,
                proto_converter,
            )?),
            None => return Err(codec_error("a gpusort node of no kind known here")),
        })
    }
}

impl PhysicalExtensionCodec for GpuSortCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let proto = GpuSortNodeProto::decode(buf)
            .map_err(|e| codec_error(format!("not a gpusort node: {e}")))?;
        let [input] = inputs else {
            return Err(codec_error(format!(
                "a gpusort node takes one input, the plan gives it {}",
                inputs.len()
            )));
        };
        self.from_proto(&proto, Arc::clone(input), ctx, proto_converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        self.to_proto(node.as_ref(), proto_converter)?
            .encode(buf)
            .map_err(|e| codec_error(format!("encoding: {e}")))
    }
}
