//! `GpuSortCodec`: how a `GpuSortExec` crosses the network inside a distributed plan.
//!
//! The coordinator encodes each `GpuSortExec` of a stage it sends to a worker; the worker
//! decodes it into its own `GpuSortExec` over the decoded input. What travels:
//!
//! ```text
//!  GpuSortExecProto
//!    format                  FORMAT (a worker of another format refuses the plan, saying so)
//!    expr                    sort keys (DataFusion's PhysicalSortExprNode)
//!    fetch                   LIMIT per output partition
//!    preserve_partitioning   one sort per partition, or one of all partitions
//!    routing                 hash routing (exprs, partitions) of a sort that replaced a
//!                            RepartitionExec
//!    run_batch_rows          rows per output batch for a whole-partition window above
//!    options                 run_rows, algorithm, device_gather_min_rows,
//!                            combine_partitions; the coordinator's backend, for messages
//! ```
//!
//! Nothing bound to the coordinator's process travels: the backend (and with it the GPU)
//! is resolved on the worker, from the `gpu_sort.*` settings of the worker's session (the
//! coordinator's, when both sides are set up by this crate: they travel as gRPC headers).
//! With `gpu_sort.backend = auto`, a worker with a usable GPU sorts on it and one without
//! sorts on the CPU; with `cuda`, a worker without a GPU fails the query, saying why.

use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::{
    parse_physical_exprs, parse_physical_sort_exprs,
};
use datafusion_proto::physical_plan::to_proto::{
    serialize_physical_exprs, serialize_physical_sort_exprs,
};
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::{PhysicalExprNode, PhysicalSortExprNode};
use gpusort::backend::resolve_backend;
use gpusort::exec::{GpuSortOptions, HashRouting};
use gpusort::{AlgorithmChoice, GpuSortConfig, GpuSortExec};
use prost::Message;

/// The version of [`GpuSortExecProto`]'s layout. A worker decodes only its own.
pub const FORMAT: u32 = 1;

/// Encodes and decodes `GpuSortExec` for datafusion-distributed (and anything else that
/// ships physical plans through DataFusion's protobuf). Register it on the coordinator
/// and on every worker; compose it with other codecs as any `PhysicalExtensionCodec`.
#[derive(Debug, Default, Clone, Copy)]
pub struct GpuSortCodec;

/// A `GpuSortExec` on the wire.
#[derive(Clone, PartialEq, Message)]
pub struct GpuSortExecProto {
    /// [`FORMAT`] of the coordinator that wrote it.
    #[prost(uint32, tag = "1")]
    pub format: u32,
    /// Sort keys.
    #[prost(message, repeated, tag = "2")]
    pub expr: Vec<PhysicalSortExprNode>,
    /// Most rows per output partition.
    #[prost(uint64, optional, tag = "3")]
    pub fetch: Option<u64>,
    /// One sort per input partition (true) or one of all partitions (false).
    #[prost(bool, tag = "4")]
    pub preserve_partitioning: bool,
    /// The hash partitioning the sort produces itself, in place of a repartition.
    #[prost(message, optional, tag = "5")]
    pub routing: Option<HashRoutingProto>,
    /// Rows per output batch of a sorted run, when not the session's batch size.
    #[prost(uint64, optional, tag = "6")]
    pub run_batch_rows: Option<u64>,
    /// How it sorts.
    #[prost(message, optional, tag = "7")]
    pub options: Option<SortOptionsProto>,
}

/// `Hash(exprs, partitions)`, as a routed `GpuSortExec` produces it.
#[derive(Clone, PartialEq, Message)]
pub struct HashRoutingProto {
    /// The hashed expressions, over the sort's input.
    #[prost(message, repeated, tag = "1")]
    pub exprs: Vec<PhysicalExprNode>,
    /// The number of output partitions.
    #[prost(uint64, tag = "2")]
    pub partitions: u64,
}

/// The process-independent part of `GpuSortOptions`.
#[derive(Clone, PartialEq, Message)]
pub struct SortOptionsProto {
    /// Most rows per run.
    #[prost(uint64, tag = "1")]
    pub run_rows: u64,
    /// `auto`, `onesweep`, `segmented` or `locality`.
    #[prost(string, tag = "2")]
    pub algorithm: String,
    /// Runs of at least this many rows gather on the device.
    #[prost(uint64, tag = "3")]
    pub device_gather_min_rows: u64,
    /// Sort every partition in one sort when partitioning is kept.
    #[prost(bool, tag = "4")]
    pub combine_partitions: bool,
    /// The backend the coordinator planned with (`cpu` or `cuda`): for messages only, the
    /// worker resolves its own.
    #[prost(string, tag = "5")]
    pub planned_backend: String,
}

/// An error of the codec: what it was given is not what it reads or writes (an
/// `Execution` error, not DataFusion's "internal error", which blames DataFusion).
fn codec_error(message: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(format!("gpusort codec: {}", message.into()))
}

impl GpuSortCodec {
    /// `exec` as its protobuf message.
    pub fn to_proto(
        &self,
        exec: &GpuSortExec,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<GpuSortExecProto> {
        let routing = match exec.routing() {
            Some(routing) => Some(HashRoutingProto {
                exprs: serialize_physical_exprs(routing.exprs(), self, proto_converter)?,
                partitions: routing.partitions() as u64,
            }),
            None => None,
        };
        let options = exec.options();
        Ok(GpuSortExecProto {
            format: FORMAT,
            expr: serialize_physical_sort_exprs(
                exec.expr().iter().cloned(),
                self,
                proto_converter,
            )?,
            fetch: exec.fetch().map(|f| f as u64),
            preserve_partitioning: exec.preserve_partitioning(),
            routing,
            run_batch_rows: exec.run_batch_rows().map(|r| r as u64),
            options: Some(SortOptionsProto {
                run_rows: options.run_rows as u64,
                algorithm: options.algorithm.to_string(),
                device_gather_min_rows: options.device_gather_min_rows as u64,
                combine_partitions: options.combine_partitions,
                planned_backend: options.backend.name().to_string(),
            }),
        })
    }

    /// The `GpuSortExec` of `proto` over `input`, sorting with the backend that `ctx`'s
    /// `gpu_sort.*` settings resolve to on this process.
    pub fn from_proto(
        &self,
        proto: &GpuSortExecProto,
        input: Arc<dyn ExecutionPlan>,
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<GpuSortExec> {
        if proto.format != FORMAT {
            return Err(codec_error(format!(
                "the plan's GpuSortExec is of format {}, this worker reads format {FORMAT}: \
                 run the same gpusort version on the coordinator and every worker",
                proto.format
            )));
        }
        let decode_ctx = PhysicalPlanDecodeContext::new(ctx, self);
        let schema = input.schema();
        let expr = parse_physical_sort_exprs(&proto.expr, &decode_ctx, &schema, proto_converter)?;
        let expr = LexOrdering::new(expr).ok_or_else(|| codec_error("a sort without keys"))?;
        let options = proto
            .options
            .as_ref()
            .ok_or_else(|| codec_error("GpuSortExec without options"))?;
        let settings = ctx
            .session_config()
            .options()
            .extensions
            .get::<GpuSortConfig>()
            .cloned()
            .unwrap_or_default();
        let backend = resolve_backend(&settings).map_err(|why| {
            DataFusionError::Execution(format!(
                "gpusort: this worker cannot run the plan's GpuSortExec (planned on {}): {why}",
                options.planned_backend
            ))
        })?;
        let options = GpuSortOptions {
            backend,
            run_rows: to_usize(options.run_rows)?,
            algorithm: options.algorithm.parse::<AlgorithmChoice>()?,
            device_gather_min_rows: to_usize(options.device_gather_min_rows)?,
            combine_partitions: options.combine_partitions,
        };
        let fetch = proto.fetch.map(to_usize).transpose()?;
        let exec = match &proto.routing {
            Some(routing) => {
                let exprs =
                    parse_physical_exprs(&routing.exprs, &decode_ctx, &schema, proto_converter)?;
                let routing = HashRouting::try_new(exprs, to_usize(routing.partitions)?)?;
                GpuSortExec::try_new_routed(input, expr, fetch, routing, options)?
            }
            None => GpuSortExec::try_new(input, expr, fetch, proto.preserve_partitioning, options)?,
        };
        Ok(match proto.run_batch_rows {
            Some(rows) => exec.with_run_batch_rows(to_usize(rows)?),
            None => exec,
        })
    }
}

fn to_usize(value: u64) -> Result<usize> {
    usize::try_from(value).map_err(|_| codec_error(format!("{value} does not fit a usize")))
}

impl PhysicalExtensionCodec for GpuSortCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = inputs else {
            return Err(codec_error(format!(
                "GpuSortExec takes one input, the plan gives it {}",
                inputs.len()
            )));
        };
        let proto = GpuSortExecProto::decode(buf)
            .map_err(|e| codec_error(format!("not a GpuSortExec: {e}")))?;
        let exec = self.from_proto(&proto, Arc::clone(input), ctx, proto_converter)?;
        Ok(Arc::new(exec))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(exec) = node.downcast_ref::<GpuSortExec>() else {
            return Err(codec_error(format!(
                "{} is not a GpuSortExec (gpusort encodes only its own operator)",
                node.name()
            )));
        };
        self.to_proto(exec, proto_converter)?
            .encode(buf)
            .map_err(|e| codec_error(format!("encoding: {e}")))
    }
}
