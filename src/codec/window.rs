//! `SortedWindowExec` on the wire: the DataFusion window node it replaced, as DataFusion's
//! own protobuf writes it (over a placeholder of its input's schema), and which of its
//! input columns it keeps.
//!
//! ```text
//!  SortedWindowExecProto
//!    format          FORMAT
//!    replaced        the BoundedWindowAggExec / WindowAggExec, over an EmptyExec
//!    device_allowed  gpu_sort.device_window_functions when it was planned
//!    keep            the input columns its output keeps (absent: all)
//! ```
//!
//! Read back, the window is rebuilt over its decoded input (the `GpuSortExec` below it) as
//! the rule built it, so whether it computes on the device is decided again where the plan
//! runs.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec, WindowExpr};
use datafusion::physical_plan::{replace_children_if_necessary, ExecutionPlan};
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalPlanNodeExt,
    PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::PhysicalPlanNode;
use prost::Message;

use super::{check_format, codec_error, to_usize, FORMAT};
use crate::window::SortedWindowExec;

/// A `SortedWindowExec` on the wire.
#[derive(Clone, PartialEq, Message)]
pub struct SortedWindowExecProto {
    /// [`FORMAT`] of the gpusort that wrote it.
    #[prost(uint32, tag = "1")]
    pub format: u32,
    /// The DataFusion window node it replaced, over an `EmptyExec` of its input's schema.
    #[prost(message, optional, boxed, tag = "2")]
    pub replaced: Option<Box<PhysicalPlanNode>>,
    /// Whether it may compute on the device (`gpu_sort.device_window_functions`).
    #[prost(bool, tag = "3")]
    pub device_allowed: bool,
    /// The input columns its output keeps, in order; absent: all of them.
    #[prost(message, optional, tag = "4")]
    pub keep: Option<KeptColumnsProto>,
}

/// Input column indexes, in order.
#[derive(Clone, PartialEq, Message)]
pub struct KeptColumnsProto {
    /// The indexes.
    #[prost(uint64, repeated, tag = "1")]
    pub columns: Vec<u64>,
}

/// `exec` as its protobuf message.
pub(super) fn window_to_proto(
    exec: &SortedWindowExec,
    codec: &dyn PhysicalExtensionCodec,
    proto_converter: &dyn PhysicalProtoConverterExtension,
) -> Result<SortedWindowExecProto> {
    let placeholder: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(exec.input().schema()));
    let replaced = replace_children_if_necessary(Arc::clone(exec.replaced()), vec![placeholder])?;
    let replaced =
        PhysicalPlanNode::try_from_physical_plan_with_converter(replaced, codec, proto_converter)?;
    Ok(SortedWindowExecProto {
        format: FORMAT,
        replaced: Some(Box::new(replaced)),
        device_allowed: exec.device_allowed(),
        keep: exec.kept_columns().map(|keep| KeptColumnsProto {
            columns: keep.iter().map(|&c| c as u64).collect(),
        }),
    })
}

/// The `SortedWindowExec` of `proto` over `input`.
pub(super) fn window_from_proto(
    proto: &SortedWindowExecProto,
    input: Arc<dyn ExecutionPlan>,
    ctx: &TaskContext,
    codec: &dyn PhysicalExtensionCodec,
    proto_converter: &dyn PhysicalProtoConverterExtension,
) -> Result<SortedWindowExec> {
    check_format("SortedWindowExec", proto.format)?;
    let replaced = proto
        .replaced
        .as_ref()
        .ok_or_else(|| codec_error("SortedWindowExec without the window it replaced"))?;
    let decode_ctx = PhysicalPlanDecodeContext::new(ctx, codec);
    let replaced = proto_converter.proto_to_execution_plan(replaced, &decode_ctx)?;
    let window_expr: Vec<Arc<dyn WindowExpr>> =
        if let Some(window) = replaced.downcast_ref::<BoundedWindowAggExec>() {
            window.window_expr().to_vec()
        } else if let Some(window) = replaced.downcast_ref::<WindowAggExec>() {
            window.window_expr().to_vec()
        } else {
            return Err(codec_error(format!(
                "SortedWindowExec replaces a window node, not {}",
                replaced.name()
            )));
        };
    if replaced.children()[0].schema() != input.schema() {
        return Err(codec_error(
            "SortedWindowExec's input differs from the one it was planned over",
        ));
    }
    let keep = match &proto.keep {
        Some(keep) => Some(
            keep.columns
                .iter()
                .map(|&c| to_usize(c))
                .collect::<Result<Vec<_>>>()?,
        ),
        None => None,
    };
    SortedWindowExec::try_new(replaced, window_expr, input, proto.device_allowed, keep)
        .map_err(|why| codec_error(format!("SortedWindowExec: {why}")))
}
