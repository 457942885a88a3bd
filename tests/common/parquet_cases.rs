//! Differential cases over Parquet sources: gpusort on a given backend against DataFusion's
//! own plan for queries over a table of several files and row groups, with projections,
//! filters, unions, joins, subqueries, windows, LIMIT, `COPY`, and DataFusion's sort
//! pushdown (a table declared sorted, read in reverse), each with `repartition_sorts` on
//! and off and several partition counts. `tests/differential.rs` runs them on the CPU
//! backend, `tests/gpu/differential.rs` on the CUDA backend.

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    collect, collect_partitioned, ExecutionPlan, ExecutionPlanProperties,
};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use gpusort::{BackendChoice, GpuSortExec};

use super::compare::{assert_same_sort, assert_stable_by};
use super::parquet::{register_table, write_table, MULTI_FILE};
use super::{
    forced_context_on, physical_plan, plan_text, run, seed, session_config, stock_context,
};

/// DataFusion's setting that lets an idle scan partition read another's files.
const WORK_STEALING: &str = "datafusion.execution.enable_file_stream_work_stealing";

/// One query and how to check it.
struct Query {
    sql: &'static str,
    /// Output columns that the ORDER BY determines.
    keys: &'static [usize],
    /// Output column holding `rid` when ties must keep file order, which a plain scan of
    /// the table gives (no union, join or reversed read).
    stable_rid: Option<usize>,
    /// Whether the gpusort plan must contain a `GpuSortExec`.
    replaced: bool,
}

const QUERIES: &[Query] = &[
    Query {
        sql: "SELECT * FROM t ORDER BY k",
        keys: &[1],
        stable_rid: Some(4),
        replaced: true,
    },
    Query {
        sql: "SELECT k AS key, s, rid, k * 2 + g AS k2 FROM t ORDER BY key DESC NULLS LAST, k2",
        keys: &[0, 3],
        stable_rid: Some(2),
        replaced: true,
    },
    Query {
        sql: "SELECT rid, f, s FROM t WHERE g <> 3 AND rid % 5 <> 1 ORDER BY f DESC",
        keys: &[1],
        stable_rid: Some(0),
        replaced: true,
    },
    Query {
        sql: "SELECT s, k, rid FROM t ORDER BY s NULLS FIRST, k DESC",
        keys: &[0, 1],
        stable_rid: Some(2),
        replaced: true,
    },
    Query {
        sql: "SELECT s, k, rid FROM t WHERE g <> 2 ORDER BY s DESC, k",
        keys: &[0, 1],
        stable_rid: Some(2),
        replaced: true,
    },
    Query {
        sql: "SELECT k, rid FROM t WHERE g < 3 UNION ALL SELECT k + 1, rid FROM t WHERE g >= 3 \
              ORDER BY k, rid",
        keys: &[0, 1],
        stable_rid: None,
        replaced: true,
    },
    Query {
        sql: "SELECT * FROM (SELECT g, k, rid FROM t WHERE k > 0) AS sub ORDER BY g DESC, k",
        keys: &[0, 1],
        stable_rid: Some(2),
        replaced: true,
    },
    Query {
        sql: "SELECT a.rid, a.k, b.s FROM t a JOIN t b ON a.rid = b.rid ORDER BY a.k, b.s",
        keys: &[1, 2],
        stable_rid: None,
        replaced: true,
    },
    Query {
        sql: "SELECT rid, g, k, ROW_NUMBER() OVER (PARTITION BY g ORDER BY k, rid) AS n FROM t \
              ORDER BY rid",
        keys: &[0],
        stable_rid: None,
        replaced: true,
    },
    Query {
        sql: "SELECT g, k, f, rid FROM t ORDER BY f, k LIMIT 777",
        keys: &[2, 1],
        stable_rid: None,
        replaced: true,
    },
];

/// Queries over the table declared `WITH ORDER (rid ASC)`: DataFusion may drop the sort
/// or read row groups in reverse and keep it.
const SORTED_TABLE_QUERIES: &[Query] = &[
    Query {
        sql: "SELECT * FROM t ORDER BY rid DESC",
        keys: &[4],
        stable_rid: None,
        replaced: false,
    },
    Query {
        sql: "SELECT rid, k FROM t ORDER BY rid DESC LIMIT 1234",
        keys: &[0],
        stable_rid: None,
        replaced: false,
    },
    Query {
        sql: "SELECT * FROM t ORDER BY k, rid DESC",
        keys: &[1, 4],
        stable_rid: None,
        replaced: true,
    },
];

/// Every query over the multi-file table, `repartition_sorts` on and off, 1, 3 and 8
/// partitions, against DataFusion's plan for the same query.
pub async fn parquet_sources(backend: BackendChoice) {
    let dir = tempfile::tempdir().unwrap();
    write_table(dir.path(), seed(), MULTI_FILE);
    for target_partitions in [1, 3, 8] {
        for (repartition_sorts, stealing) in [(true, true), (true, false), (false, false)] {
            for (sorted, queries) in [(false, QUERIES), (true, SORTED_TABLE_QUERIES)] {
                let config = session_config(target_partitions, 1000)
                    .set_bool("datafusion.optimizer.repartition_sorts", repartition_sorts)
                    .set_bool(WORK_STEALING, stealing);
                let (stock, forced) = contexts(config, backend);
                register_table(&stock, dir.path(), sorted).await;
                register_table(&forced, dir.path(), sorted).await;
                for query in queries {
                    let context = format!(
                        "seed={} partitions={target_partitions} repartition_sorts=\
                         {repartition_sorts} work_stealing={stealing} declared_sorted={sorted} \
                         sql={}",
                        seed(),
                        query.sql
                    );
                    // Stealing moves row groups between partitions as they are read: input
                    // order across partitions is then whatever arrived first.
                    let stable = !stealing || target_partitions == 1;
                    check(&stock, &forced, query, backend, stable, &context).await;
                }
            }
        }
    }
}

/// `COPY (SELECT .. ORDER BY ..) TO` a Parquet file, read back: the same rows in the same
/// key order as DataFusion's `COPY`.
pub async fn copy_to_parquet(backend: BackendChoice) {
    let dir = tempfile::tempdir().unwrap();
    write_table(dir.path(), seed(), MULTI_FILE);
    let out = tempfile::tempdir().unwrap();
    for repartition_sorts in [true, false] {
        let config = session_config(4, 1000)
            .set_bool("datafusion.optimizer.repartition_sorts", repartition_sorts)
            .set_bool(WORK_STEALING, false);
        let (stock, forced) = contexts(config, backend);
        let mut written = Vec::new();
        for (name, ctx) in [("stock", &stock), ("forced", &forced)] {
            register_table(ctx, dir.path(), false).await;
            let path = out
                .path()
                .join(format!("{name}-{repartition_sorts}.parquet"));
            let copy = format!(
                "COPY (SELECT s, k, rid FROM t WHERE g <> 2 ORDER BY s DESC, k) TO '{}'",
                path.display()
            );
            let (_, plan) = run(ctx, &copy).await.unwrap();
            if name == "forced" {
                assert!(plan.contains("GpuSortExec"), "{plan}");
                assert!(!plan.contains("SortPreservingMergeExec"), "{plan}");
            }
            written.push(read_back(ctx, &path).await);
        }
        let context = format!("seed={} COPY repartition_sorts={repartition_sorts}", seed());
        assert_same_sort(&written[0], &written[1], &[0, 1], &context);
        let select = "SELECT s, k, rid FROM t WHERE g <> 2 ORDER BY s DESC, k";
        let places = input_places(&forced, select, 2).await;
        assert_stable_by(
            &written[1],
            &[0, 1],
            2,
            |rid| places[rid as usize],
            &context,
        );
    }
}

fn contexts(config: SessionConfig, backend: BackendChoice) -> (SessionContext, SessionContext) {
    (
        stock_context(config.clone()),
        forced_context_on(config, backend),
    )
}

async fn read_back(ctx: &SessionContext, path: &std::path::Path) -> Vec<RecordBatch> {
    let path = path.display().to_string();
    ctx.read_parquet(path, ParquetReadOptions::default())
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
}

async fn check(
    stock: &SessionContext,
    forced: &SessionContext,
    query: &Query,
    backend: BackendChoice,
    stable: bool,
    context: &str,
) {
    let (expected, _) = run(stock, query.sql).await.unwrap();
    let plan = physical_plan(forced, query.sql).await.unwrap();
    let text = plan_text(&plan);
    let actual = collect(Arc::clone(&plan), forced.task_ctx())
        .await
        .unwrap_or_else(|e| panic!("{e}: {context}"));
    if query.replaced {
        assert!(
            text.contains("GpuSortExec"),
            "no GpuSortExec:\n{text}\n{context}"
        );
        if backend == BackendChoice::Cuda {
            assert!(
                text.contains("backend=cuda"),
                "not on the GPU:\n{text}\n{context}"
            );
        }
    }
    assert_no_merge_of_partitions_above_gpu_sort(&plan, context);
    assert_same_sort(&expected, &actual, query.keys, context);
    if let Some(rid) = query.stable_rid.filter(|_| stable) {
        let places = input_places(forced, query.sql, rid).await;
        assert_stable_by(&actual, query.keys, rid, |id| places[id as usize], context);
    }
}

/// The place of each `rid` in the input order of the first `GpuSortExec` of `sql`'s plan
/// (whose input has `rid` as column `rid_column`): its input partitions one after another,
/// each in its own order. That is the order the one sort promises for ties; it need not be
/// row-id order (DataFusion's sort pushdown may read row groups in reverse, and a scan's
/// partitions need not hold consecutive row ids). Planned afresh: a scan that has run
/// once has handed out its files.
async fn input_places(ctx: &SessionContext, sql: &str, rid_column: usize) -> Vec<i64> {
    let plan = physical_plan(ctx, sql).await.unwrap();
    let mut input = None;
    plan.apply(|node| {
        if let Some(sort) = node.downcast_ref::<GpuSortExec>() {
            input = Some(Arc::clone(sort.input()));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    let input = input.expect("a GpuSortExec in the plan");
    let partitions = collect_partitioned(input, ctx.task_ctx()).await.unwrap();
    let rids: Vec<i64> = partitions
        .iter()
        .flatten()
        .flat_map(|b| {
            b.column(rid_column)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .collect();
    let mut places = vec![-1; MULTI_FILE.files * MULTI_FILE.rows_per_file];
    for (place, &rid) in rids.iter().enumerate() {
        places[rid as usize] = place as i64;
    }
    places
}

/// No `SortPreservingMergeExec` of several partitions stands above a `GpuSortExec`: the
/// one sort took the merge (one over a single partition merges nothing: DataFusion
/// sometimes leaves one above another).
pub fn assert_no_merge_of_partitions_above_gpu_sort(plan: &Arc<dyn ExecutionPlan>, context: &str) {
    plan.apply(|node| {
        if let Some(merge) = node.downcast_ref::<SortPreservingMergeExec>() {
            let partitions = merge.input().output_partitioning().partition_count();
            let mut sorts_below = 0;
            node.apply(|below| {
                sorts_below += usize::from(below.downcast_ref::<GpuSortExec>().is_some());
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
            assert!(
                partitions == 1 || sorts_below == 0,
                "a merge of {partitions} partitions above a GpuSortExec:\n{}\n{context}",
                plan_text(plan)
            );
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
}
