//! `GpuSortCodec` round trips every variant of `GpuSortExec`, alone and inside a whole
//! plan composed with other codecs, and refuses what it cannot decode, saying why.

use std::sync::Arc;

use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{internal_err, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{binary, cast, col, lit};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{displayable, ExecutionPlan, Partitioning};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
};
use datafusion_proto::physical_plan::{
    ComposedPhysicalExtensionCodec, DefaultPhysicalProtoConverter, PhysicalExtensionCodec,
    PhysicalProtoConverterExtension,
};
use gpusort::backend::resolve_backend;
use gpusort::exec::{GpuSortOptions, HashRouting};
use gpusort::{AlgorithmChoice, BackendChoice, GpuSortConfig, GpuSortExec};
use gpusort_distributed::{GpuSortCodec, GpuSortNode, GpuSortNodeProto, FORMAT};
use prost::Message;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("g", DataType::Int32, false),
        Field::new("s", DataType::Utf8View, true),
        Field::new("f", DataType::Float64, false),
    ]))
}

/// Four partitions of nothing: the sorts' input (its rows don't matter to the codec).
fn input() -> Arc<dyn ExecutionPlan> {
    let empty = Arc::new(EmptyExec::new(schema()));
    Arc::new(RepartitionExec::try_new(empty, Partitioning::RoundRobinBatch(4)).unwrap())
}

fn key(expr: Arc<dyn PhysicalExpr>, descending: bool, nulls_first: bool) -> PhysicalSortExpr {
    PhysicalSortExpr::new(
        expr,
        SortOptions {
            descending,
            nulls_first,
        },
    )
}

fn keys() -> LexOrdering {
    let s = schema();
    let k_plus_g = binary(
        col("k", &s).unwrap(),
        Operator::Plus,
        cast(col("g", &s).unwrap(), &s, DataType::Int64).unwrap(),
        &s,
    )
    .unwrap();
    LexOrdering::new(vec![
        key(col("s", &s).unwrap(), false, true),
        key(k_plus_g, true, false),
        key(col("f", &s).unwrap(), true, true),
        key(
            binary(col("g", &s).unwrap(), Operator::Modulo, lit(3i32), &s).unwrap(),
            false,
            false,
        ),
    ])
    .unwrap()
}

fn options(algorithm: AlgorithmChoice, combine: bool) -> GpuSortOptions {
    GpuSortOptions {
        backend: resolve_backend(&GpuSortConfig::forced_cpu()).unwrap(),
        run_rows: 123_456,
        algorithm,
        device_gather_min_rows: 789,
        input_batch_rows: 4321,
        combine_partitions: combine,
    }
}

/// Every variant the rule can plan.
fn variants() -> Vec<(&'static str, GpuSortExec)> {
    let s = schema();
    let routing = || HashRouting::try_new(vec![col("g", &s).unwrap()], 5).unwrap();
    vec![
        (
            "one sort of all partitions",
            GpuSortExec::try_new(
                input(),
                keys(),
                None,
                false,
                options(AlgorithmChoice::Auto, true),
            )
            .unwrap(),
        ),
        (
            "one sort with a LIMIT",
            GpuSortExec::try_new(
                input(),
                keys(),
                Some(10),
                false,
                options(AlgorithmChoice::Onesweep, true),
            )
            .unwrap(),
        ),
        (
            "per-partition sorts, combined",
            GpuSortExec::try_new(
                input(),
                keys(),
                None,
                true,
                options(AlgorithmChoice::Segmented, true),
            )
            .unwrap(),
        ),
        (
            "per-partition sorts, each its own, with a LIMIT",
            GpuSortExec::try_new(
                input(),
                keys(),
                Some(3),
                true,
                options(AlgorithmChoice::Locality, false),
            )
            .unwrap(),
        ),
        (
            "hash routed",
            GpuSortExec::try_new_routed(
                input(),
                keys(),
                None,
                routing(),
                options(AlgorithmChoice::Auto, true),
            )
            .unwrap(),
        ),
        (
            "hash routed, batches for a whole-partition window",
            GpuSortExec::try_new_routed(
                input(),
                keys(),
                Some(1),
                routing(),
                options(AlgorithmChoice::Auto, true),
            )
            .unwrap()
            .with_run_batch_rows(1 << 20),
        ),
        (
            "per-partition sorts, batches for a whole-partition window",
            GpuSortExec::try_new(
                input(),
                keys(),
                None,
                true,
                options(AlgorithmChoice::Auto, true),
            )
            .unwrap()
            .with_run_batch_rows(4096),
        ),
    ]
}

fn task_context(config: GpuSortConfig) -> Arc<TaskContext> {
    SessionContext::new_with_config(SessionConfig::new().with_option_extension(config)).task_ctx()
}

fn round_trip(exec: &GpuSortExec, ctx: &TaskContext) -> Result<GpuSortExec> {
    let converter = DefaultPhysicalProtoConverter {};
    let mut buf = Vec::new();
    GpuSortCodec.try_encode(Arc::new(exec.clone()), &mut buf, &converter)?;
    let decoded = GpuSortCodec.try_decode(&buf, &[Arc::clone(exec.input())], ctx, &converter)?;
    match decoded.downcast_ref::<GpuSortExec>() {
        Some(exec) => Ok(exec.clone()),
        None => internal_err!("decoded {}", decoded.name()),
    }
}

fn assert_same_sort(a: &GpuSortExec, b: &GpuSortExec, what: &str) {
    let line = |e: &GpuSortExec| displayable(e).one_line().to_string();
    assert_eq!(line(a), line(b), "{what}");
    assert_eq!(a.expr(), b.expr(), "{what}");
    assert_eq!(a.fetch(), b.fetch(), "{what}");
    assert_eq!(
        a.preserve_partitioning(),
        b.preserve_partitioning(),
        "{what}"
    );
    assert_eq!(
        a.hash_routing().map(|p| p.to_string()),
        b.hash_routing().map(|p| p.to_string()),
        "{what}"
    );
    assert_eq!(a.run_batch_rows(), b.run_batch_rows(), "{what}");
    assert_eq!(a.ordered_prefix(), b.ordered_prefix(), "{what}");
    assert_eq!(a.combined_partitions(), b.combined_partitions(), "{what}");
    let (x, y) = (a.options(), b.options());
    assert_eq!(
        (
            x.run_rows,
            x.algorithm,
            x.device_gather_min_rows,
            x.input_batch_rows,
            x.combine_partitions
        ),
        (
            y.run_rows,
            y.algorithm,
            y.device_gather_min_rows,
            y.input_batch_rows,
            y.combine_partitions
        ),
        "{what}"
    );
    assert_eq!(
        a.properties().partitioning.partition_count(),
        b.properties().partitioning.partition_count(),
        "{what}"
    );
    assert_eq!(
        a.properties().output_ordering(),
        b.properties().output_ordering(),
        "{what}"
    );
}

#[test]
fn every_variant_round_trips() -> Result<()> {
    let ctx = task_context(GpuSortConfig::forced_cpu());
    for (what, exec) in variants() {
        let decoded = round_trip(&exec, &ctx)?;
        assert_same_sort(&exec, &decoded, what);
        assert_eq!(decoded.backend_name(), "cpu");
    }
    Ok(())
}

#[test]
fn whole_plans_round_trip_with_the_codec_composed_with_others() -> Result<()> {
    /// Another user's codec, that knows nothing of gpusort.
    #[derive(Debug)]
    struct Unrelated;
    impl PhysicalExtensionCodec for Unrelated {
        fn try_decode(
            &self,
            _: &[u8],
            _: &[Arc<dyn ExecutionPlan>],
            _: &TaskContext,
            _: &dyn PhysicalProtoConverterExtension,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            internal_err!("not mine")
        }
        fn try_encode(
            &self,
            _: Arc<dyn ExecutionPlan>,
            _: &mut Vec<u8>,
            _: &dyn PhysicalProtoConverterExtension,
        ) -> Result<()> {
            internal_err!("not mine")
        }
    }
    let composed =
        ComposedPhysicalExtensionCodec::new(vec![Arc::new(Unrelated), Arc::new(GpuSortCodec)]);
    let ctx = task_context(GpuSortConfig::forced_cpu());
    for (what, exec) in variants() {
        // A sort above a sort: codecs are asked for each node of the tree.
        let inner: Arc<dyn ExecutionPlan> = Arc::new(exec);
        let outer = GpuSortExec::try_new(
            Arc::clone(&inner),
            keys(),
            Some(5),
            false,
            options(AlgorithmChoice::Auto, true),
        )?;
        let plan: Arc<dyn ExecutionPlan> = Arc::new(outer);
        let bytes = physical_plan_to_bytes_with_extension_codec(Arc::clone(&plan), &composed)?;
        let decoded = physical_plan_from_bytes_with_extension_codec(&bytes, &ctx, &composed)?;
        assert_eq!(
            displayable(plan.as_ref()).indent(true).to_string(),
            displayable(decoded.as_ref()).indent(true).to_string(),
            "{what}"
        );
    }
    Ok(())
}

#[test]
fn the_worker_resolves_its_own_backend() -> Result<()> {
    let (_, exec) = variants().remove(0);
    // The coordinator planned on the CPU; a worker told `auto` takes its GPU when it has
    // one, its CPU otherwise.
    let mut auto = GpuSortConfig::default();
    auto.backend = BackendChoice::Auto;
    let expected = resolve_backend(&auto).unwrap().name();
    assert_eq!(
        round_trip(&exec, &task_context(auto))?.backend_name(),
        expected
    );
    // `cuda` on a worker without a usable GPU: the plan is refused, saying why.
    let mut cuda = GpuSortConfig::default();
    cuda.backend = BackendChoice::Cuda;
    match resolve_backend(&cuda) {
        Ok(_) => assert_eq!(
            round_trip(&exec, &task_context(cuda))?.backend_name(),
            "cuda"
        ),
        Err(_) => {
            let error = round_trip(&exec, &task_context(cuda))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("cannot run the plan's GpuSortExec"),
                "{error}"
            );
            assert!(error.contains("no CUDA device is usable"), "{error}");
        }
    }
    Ok(())
}

#[test]
fn refuses_other_formats_and_foreign_nodes() -> Result<()> {
    let converter = DefaultPhysicalProtoConverter {};
    let ctx = task_context(GpuSortConfig::forced_cpu());
    let (_, exec) = variants().remove(0);
    let mut proto = GpuSortCodec.to_proto(&exec, &converter)?;
    match &mut proto.node {
        Some(GpuSortNode::Sort(sort)) => sort.format = FORMAT + 1,
        other => panic!("a sort encoded as {other:?}"),
    }
    let error = GpuSortCodec
        .try_decode(&proto.encode_to_vec(), &[input()], &ctx, &converter)
        .unwrap_err()
        .to_string();
    assert!(error.contains("same gpusort version"), "{error}");

    let error = GpuSortCodec
        .try_decode(&[0xff, 0xff, 0xff], &[input()], &ctx, &converter)
        .unwrap_err()
        .to_string();
    assert!(error.contains("not a gpusort node"), "{error}");

    let error = GpuSortCodec
        .try_decode(
            &GpuSortNodeProto::default().encode_to_vec(),
            &[],
            &ctx,
            &converter,
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("takes one input"), "{error}");

    let mut buf = Vec::new();
    let error = GpuSortCodec
        .try_encode(input(), &mut buf, &converter)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("is not a GpuSortExec or a SortedWindowExec"),
        "{error}"
    );
    Ok(())
}

/// A gpusort session that replaces every sort and computes windows (the CPU backend).
fn window_session() -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(4);
    gpusort::gpu_sort_context_with(config, GpuSortConfig::forced_cpu())
}

#[tokio::test]
async fn window_and_top_n_plans_round_trip_and_give_the_same_rows() -> Result<()> {
    use datafusion::arrow::array::RecordBatch;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::physical_plan::collect;

    let ctx = window_session();
    ctx.sql(
        "CREATE TABLE t AS SELECT value AS row, value % 7 AS g, (value * 37) % 101 AS k, \
         CAST(value % 13 AS DOUBLE) / 3 AS f FROM generate_series(1, 5000)",
    )
    .await?;
    // Each query, and what its plan must hold for the round trip to test something.
    let queries = [
        // A SortedWindowExec over a sort, keeping only the columns read above it.
        (
            "SELECT row, rank() OVER (PARTITION BY g ORDER BY k, row) AS r, \
             sum(f) OVER (PARTITION BY g ORDER BY row ROWS BETWEEN 3 PRECEDING AND CURRENT \
             ROW) AS s FROM t ORDER BY row",
            "SortedWindowExec",
        ),
        // Without PARTITION BY, with a RANGE frame.
        (
            "SELECT row, avg(f) OVER (ORDER BY k RANGE BETWEEN 5 PRECEDING AND 5 FOLLOWING) \
             AS a, lag(row, 2) OVER (ORDER BY k, row) AS l FROM t ORDER BY row",
            "SortedWindowExec",
        ),
        // The top rows per window partition.
        (
            "SELECT * FROM (SELECT g, k, row, row_number() OVER (PARTITION BY g ORDER BY k \
             DESC, row) AS n FROM t) WHERE n <= 3 ORDER BY g, n",
            "partition_top=",
        ),
    ];
    let codec = GpuSortCodec;
    let task = ctx.task_ctx();
    for (query, holds) in queries {
        let plan = ctx.sql(query).await?.create_physical_plan().await?;
        let text = displayable(plan.as_ref()).indent(true).to_string();
        assert!(text.contains(holds), "{holds} in\n{text}");
        let bytes = physical_plan_to_bytes_with_extension_codec(Arc::clone(&plan), &codec)?;
        let decoded = physical_plan_from_bytes_with_extension_codec(&bytes, &task, &codec)?;
        assert_eq!(
            text,
            displayable(decoded.as_ref()).indent(true).to_string(),
            "{query}"
        );
        let rows =
            |batches: Vec<RecordBatch>| pretty_format_batches(&batches).map(|t| t.to_string());
        assert_eq!(
            rows(collect(plan, Arc::clone(&task)).await?)?,
            rows(collect(decoded, Arc::clone(&task)).await?)?,
            "{query}"
        );
    }
    Ok(())
}
