//! `GpuSortExec` on the wire: its message, and how it is written and read back.
//!
//! ```text
//!  GpuSortExecProto
//!    format                  FORMAT (a reader of another format refuses the plan, saying so)
//!    expr                    sort keys (DataFusion's PhysicalSortExprNode)
//!    fetch                   LIMIT per output partition
//!    preserve_partitioning   one sort per partition, or one of all partitions
//!    routing                 hash routing (exprs, partitions) of a sort that replaced a
//!                            RepartitionExec
//!    run_batch_rows          rows per output batch for a whole-partition window above
//!    options                 run_rows, algorithm, device_gather_min_rows, input_batch_rows,
//!                            combine_partitions; the writer's backend, for messages
//!    partition_top           the window partitions' top rows, when a filter above bounds
//!                            a ranking window
//! ```
//!
//! Nothing bound to the writer's process travels: the backend (and with it the GPU) is
//! resolved where the plan is read, from the `gpu_sort.*` settings of the reader's session.
//! With `gpu_sort.backend = auto`, a reader with a usable GPU sorts on it and one without
//! sorts on the CPU; with `cuda`, a reader without a GPU fails the query, saying why.

use std::sync::Arc;

use datafusion::common::Result;
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
use prost::Message;

use super::{check_format, codec_error, to_usize, FORMAT};
use crate::backend::resolve_backend;
use crate::config::{AlgorithmChoice, GpuSortConfig};
use crate::exec::{GpuSortExec, GpuSortOptions, HashRouting, PartitionTop, TopRanking};

/// A `GpuSortExec` on the wire.
#[derive(Clone, PartialEq, Message)]
pub struct GpuSortExecProto {
    /// [`FORMAT`] of the gpusort that wrote it.
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
    /// The rows of each window partition it needs to emit, when a filter above bounds a
    /// ranking window.
    #[prost(message, optional, tag = "8")]
    pub partition_top: Option<PartitionTopProto>,
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
    /// The backend the writer planned with (`cpu` or `cuda`): for messages only, the
    /// reader resolves its own.
    #[prost(string, tag = "5")]
    pub planned_backend: String,
    /// The input is read in batches of at least this many rows (0, as from a writer
    /// before it: the session's).
    #[prost(uint64, tag = "6")]
    pub input_batch_rows: u64,
}

/// [`PartitionTop`]: the leading keys that are the window's `PARTITION BY` and
/// `ORDER BY`, and the highest rank kept.
#[derive(Clone, PartialEq, Message)]
pub struct PartitionTopProto {
    /// Leading sort keys that are the window's `PARTITION BY`.
    #[prost(uint64, tag = "1")]
    pub partition_keys: u64,
    /// Sort keys after them that are its `ORDER BY`.
    #[prost(uint64, tag = "2")]
    pub order_keys: u64,
    /// `row_number`, `rank` or `dense_rank`.
    #[prost(string, tag = "3")]
    pub ranking: String,
    /// The highest rank kept.
    #[prost(uint64, tag = "4")]
    pub k: u64,
}

impl PartitionTopProto {
    fn of(top: &PartitionTop) -> Self {
        Self {
            partition_keys: top.partition_keys as u64,
            order_keys: top.order_keys as u64,
            ranking: match top.ranking {
                TopRanking::RowNumber => "row_number",
                TopRanking::Rank => "rank",
                TopRanking::DenseRank => "dense_rank",
            }
            .to_string(),
            k: top.k as u64,
        }
    }

    fn read(&self) -> Result<PartitionTop> {
        let ranking = match self.ranking.as_str() {
            "row_number" => TopRanking::RowNumber,
            "rank" => TopRanking::Rank,
            "dense_rank" => TopRanking::DenseRank,
            other => return Err(codec_error(format!("unknown ranking {other:?}"))),
        };
        Ok(PartitionTop {
            partition_keys: to_usize(self.partition_keys)?,
            order_keys: to_usize(self.order_keys)?,
            ranking,
            k: to_usize(self.k)?,
        })
    }
}

/// `exec` as its protobuf message.
pub(super) fn sort_to_proto(
    exec: &GpuSortExec,
    codec: &dyn PhysicalExtensionCodec,
    proto_converter: &dyn PhysicalProtoConverterExtension,
) -> Result<GpuSortExecProto> {
    let routing = match exec.routing() {
        Some(routing) => Some(HashRoutingProto {
            exprs: serialize_physical_exprs(routing.exprs(), codec, proto_converter)?,
            partitions: routing.partitions() as u64,
        }),
        None => None,
    };
    let options = exec.options();
    Ok(GpuSortExecProto {
        format: FORMAT,
        expr: serialize_physical_sort_exprs(exec.expr().iter().cloned(), codec, proto_converter)?,
        fetch: exec.fetch().map(|f| f as u64),
        preserve_partitioning: exec.preserve_partitioning(),
        routing,
        run_batch_rows: exec.run_batch_rows().map(|r| r as u64),
        options: Some(SortOptionsProto {
            run_rows: options.run_rows as u64,
            algorithm: options.algorithm.to_string(),
            device_gather_min_rows: options.device_gather_min_rows as u64,
            input_batch_rows: options.input_batch_rows as u64,
            combine_partitions: options.combine_partitions,
            planned_backend: options.backend.name().to_string(),
        }),
        partition_top: exec.partition_top().map(PartitionTopProto::of),
    })
}

/// The `GpuSortExec` of `proto` over `input`, sorting with the backend that `ctx`'s
/// `gpu_sort.*` settings resolve to in this process.
pub(super) fn sort_from_proto(
    proto: &GpuSortExecProto,
    input: Arc<dyn ExecutionPlan>,
    ctx: &TaskContext,
    codec: &dyn PhysicalExtensionCodec,
    proto_converter: &dyn PhysicalProtoConverterExtension,
) -> Result<GpuSortExec> {
    check_format("GpuSortExec", proto.format)?;
    let decode_ctx = PhysicalPlanDecodeContext::new(ctx, codec);
    let schema = input.schema();
    let expr = parse_physical_sort_exprs(&proto.expr, &decode_ctx, &schema, proto_converter)?;
    let expr = LexOrdering::new(expr).ok_or_else(|| codec_error("a sort without keys"))?;
    let options = proto
        .options
        .as_ref()
        .ok_or_else(|| codec_error("GpuSortExec without options"))?;
    let settings = GpuSortConfig::from_options(ctx.session_config().options())?;
    let backend = resolve_backend(&settings).map_err(|why| {
        codec_error(format!(
            "this process cannot run the plan's GpuSortExec (planned on {}): {why}",
            options.planned_backend
        ))
    })?;
    let options = GpuSortOptions {
        backend,
        run_rows: to_usize(options.run_rows)?,
        algorithm: options.algorithm.parse::<AlgorithmChoice>()?,
        device_gather_min_rows: to_usize(options.device_gather_min_rows)?,
        input_batch_rows: to_usize(options.input_batch_rows)?,
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
    let exec = match proto.run_batch_rows {
        Some(rows) => exec.with_run_batch_rows(to_usize(rows)?),
        None => exec,
    };
    Ok(match &proto.partition_top {
        Some(top) => exec.with_partition_top(top.read()?),
        None => exec,
    })
}
