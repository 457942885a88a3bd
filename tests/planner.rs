//! Planner tests: which sorts `GpuSortRule` replaces, the reason for each one it keeps,
//! SQL `SET gpu_sort.*` and `SHOW`, and memory released after queries.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int32Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::MemTable;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{CsvReadOptions, SessionConfig, SessionContext};
use gpusort::{DeclineReason, GpuSortConfig, GpuSortRule, SessionStateBuilderExt};

fn table(rows: usize, partitions: usize) -> MemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int32, false),
        Field::new("k", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]));
    let per = rows.div_ceil(partitions);
    let parts = (0..partitions)
        .map(|p| {
            let range = (p * per).min(rows)..((p + 1) * per).min(rows);
            let g = Int32Array::from_iter_values(range.clone().map(|i| (i % 7) as i32));
            let k = Int64Array::from_iter_values(range.clone().map(|i| (i as i64 * 7919) % 1000));
            let s = StringArray::from_iter_values(range.map(|i| format!("s{i}")));
            vec![
                RecordBatch::try_new(schema.clone(), vec![Arc::new(g), Arc::new(k), Arc::new(s)])
                    .unwrap(),
            ]
        })
        .collect();
    MemTable::try_new(schema, parts).unwrap()
}

fn session(config: GpuSortConfig, target_partitions: usize) -> (SessionContext, Arc<GpuSortRule>) {
    let rule = Arc::new(GpuSortRule::new());
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(target_partitions))
        .with_default_features()
        .with_gpu_sort_rule(config, Arc::clone(&rule))
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.register_table("t", Arc::new(table(1000, target_partitions)))
        .unwrap();
    (ctx, rule)
}

async fn plan_of(ctx: &SessionContext, sql: &str) -> String {
    common::plan_text(&common::physical_plan(ctx, sql).await.unwrap())
}

/// The result of `sql` as a printed table.
async fn result_text(ctx: &SessionContext, sql: &str) -> String {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string()
}

/// The plan of `sql`'s text, after asserting that no merge of several partitions stands
/// above a `GpuSortExec` in it.
async fn merge_free_plan_of(ctx: &SessionContext, sql: &str) -> String {
    let plan = common::physical_plan(ctx, sql).await.unwrap();
    common::parquet_cases::assert_no_merge_of_partitions_above_gpu_sort(&plan, sql);
    common::plan_text(&plan)
}

fn declined(rule: &GpuSortRule) -> Vec<DeclineReason> {
    rule.last_decisions()
        .into_iter()
        .filter_map(|d| d.outcome.err())
        .collect()
}

#[tokio::test]
async fn replaces_merge_of_partition_sorts_by_one_sort() {
    let (ctx, rule) = session(GpuSortConfig::forced_cpu(), 4);
    let plan = plan_of(&ctx, "SELECT * FROM t ORDER BY k DESC, g").await;
    assert!(plan.contains("GpuSortExec: expr=[k@1 DESC, g@0 ASC NULLS LAST], preserve_partitioning=[false], backend=cpu"), "{plan}");
    assert!(
        !plan.contains("SortPreservingMergeExec") && !plan.contains(" SortExec:"),
        "{plan}"
    );
    assert_eq!(rule.last_decisions().len(), 1);
    assert_eq!(rule.last_decisions()[0].outcome, Ok("cpu"));
}

#[tokio::test]
async fn window_sort_keeps_its_partitioning() {
    let (ctx, _) = session(GpuSortConfig::forced_cpu(), 4);
    let sql = "SELECT g, k, row_number() OVER (PARTITION BY g ORDER BY k) AS rn FROM t";
    let plan = plan_of(&ctx, sql).await;
    assert!(plan.contains("GpuSortExec: expr=[g@0 ASC NULLS LAST, k@1 ASC NULLS LAST], preserve_partitioning=[true]"), "{plan}");
    let stock = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    stock.register_table("t", Arc::new(table(1000, 4))).unwrap();
    let ordered = format!("SELECT * FROM ({sql}) ORDER BY g, k, rn");
    let a = ctx.sql(&ordered).await.unwrap().collect().await.unwrap();
    let b = stock.sql(&ordered).await.unwrap().collect().await.unwrap();
    assert_eq!(a, b);
}

#[tokio::test]
async fn set_enabled_false_restores_datafusion_plan() {
    let (ctx, rule) = session(GpuSortConfig::forced_cpu(), 4);
    ctx.sql("SET gpu_sort.enabled = false").await.unwrap();
    let plan = plan_of(&ctx, "SELECT * FROM t ORDER BY k").await;
    let stock = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    stock.register_table("t", Arc::new(table(1000, 4))).unwrap();
    assert_eq!(plan, plan_of(&stock, "SELECT * FROM t ORDER BY k").await);
    assert_eq!(declined(&rule), vec![DeclineReason::Disabled]);
}

#[tokio::test]
async fn limit_keeps_topk_unless_asked() {
    let mut config = GpuSortConfig::forced_cpu();
    config.topk = false;
    let (ctx, rule) = session(config, 1);
    let plan = plan_of(&ctx, "SELECT * FROM t ORDER BY k LIMIT 5").await;
    assert!(plan.contains("SortExec: TopK(fetch=5)"), "{plan}");
    assert_eq!(
        declined(&rule),
        vec![DeclineReason::TopKKept {
            fetch: 5,
            min_fetch: 250
        }]
    );
    ctx.sql("SET gpu_sort.topk = true").await.unwrap();
    let plan = plan_of(&ctx, "SELECT * FROM t ORDER BY k LIMIT 5").await;
    assert!(plan.contains("GpuSortExec: fetch=5"), "{plan}");
    let rows = ctx
        .sql("SELECT k FROM t ORDER BY k LIMIT 5")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 5);
}

/// Without `topk`, a LIMIT goes to gpusort by cost: from `topk_min_fetch` rows (four times
/// as many on a string key), and from a quarter of the estimated input.
#[tokio::test]
async fn large_limits_go_to_gpusort_by_cost() {
    let mut config = GpuSortConfig::forced_cpu();
    config.topk = false;
    config.topk_min_fetch = 40;
    let (ctx, rule) = session(config, 1);
    for (sql, replaced) in [
        ("SELECT * FROM t ORDER BY k LIMIT 39", false),
        ("SELECT * FROM t ORDER BY k LIMIT 40", true),
        ("SELECT * FROM t ORDER BY s LIMIT 159", false),
        ("SELECT * FROM t ORDER BY k, s LIMIT 160", true),
    ] {
        let plan = plan_of(&ctx, sql).await;
        assert_eq!(plan.contains("GpuSortExec"), replaced, "{sql}\n{plan}");
        let text = rule.last_decisions_text();
        assert_eq!(
            text.contains("keeps DataFusion's TopK heap"),
            !replaced,
            "{text}"
        );
    }
    ctx.sql("SET gpu_sort.topk_min_fetch = 100000")
        .await
        .unwrap();
    // 1000 rows estimated: a LIMIT of a quarter of them is nearly a full sort.
    let plan = plan_of(&ctx, "SELECT * FROM t ORDER BY k LIMIT 250").await;
    assert!(plan.contains("GpuSortExec: fetch=250"), "{plan}");
    let plan = plan_of(&ctx, "SELECT * FROM t ORDER BY k LIMIT 249").await;
    assert!(!plan.contains("GpuSortExec"), "{plan}");
}

#[tokio::test]
async fn unsupported_key_type_is_declined_with_reason() {
    let (ctx, rule) = session(GpuSortConfig::forced_cpu(), 1);
    let plan = plan_of(&ctx, "SELECT k, make_array(k, g) AS l FROM t ORDER BY l").await;
    assert!(plan.contains("SortExec"), "{plan}");
    match declined(&rule).as_slice() {
        [DeclineReason::UnsupportedKey { expr, reason }] => {
            assert!(expr.contains('l'), "{expr}");
            assert!(
                reason.contains("List") && reason.contains("not supported"),
                "{reason}"
            );
        }
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[tokio::test]
async fn string_and_dictionary_keys_are_replaced() {
    let (ctx, rule) = session(GpuSortConfig::forced_cpu(), 1);
    for sql in [
        "SELECT * FROM t ORDER BY s DESC",
        "SELECT * FROM t ORDER BY arrow_cast(s, 'Dictionary(Int32, Utf8)'), k",
        "SELECT * FROM t ORDER BY arrow_cast(s, 'Utf8View'), arrow_cast(s, 'Binary')",
    ] {
        let plan = plan_of(&ctx, sql).await;
        assert!(plan.contains("GpuSortExec"), "{sql}:\n{plan}");
        assert!(declined(&rule).is_empty(), "{sql}");
    }
}

#[tokio::test]
async fn cuda_backend_without_device_is_declined_with_reason() {
    let (ctx, rule) = session(GpuSortConfig::forced_cpu(), 1);
    ctx.sql("SET gpu_sort.backend = 'cuda'").await.unwrap();
    let plan = plan_of(&ctx, "SELECT * FROM t ORDER BY k").await;
    assert!(plan.contains("SortExec"), "{plan}");
    assert!(
        matches!(declined(&rule).as_slice(), [DeclineReason::NoBackend(why)] if why.contains("CUDA"))
    );
}

#[tokio::test]
async fn small_inputs_keep_datafusion_sort_unknown_sizes_do_not() {
    let mut config = GpuSortConfig::forced_cpu();
    config.min_rows = 5000;
    let (ctx, rule) = session(config, 1);
    plan_of(&ctx, "SELECT * FROM t ORDER BY k").await;
    assert_eq!(
        declined(&rule),
        vec![DeclineReason::TooSmall {
            estimated_rows: 1000,
            min_rows: 5000
        }]
    );
    let dir = std::env::temp_dir().join(format!("gpusort-planner-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("x.csv");
    std::fs::write(&csv, "a,b\n3,x\n1,y\n2,z\n").unwrap();
    ctx.register_csv("c", csv.to_str().unwrap(), CsvReadOptions::new())
        .await
        .unwrap();
    let plan = plan_of(&ctx, "SELECT * FROM c ORDER BY a").await;
    assert!(
        plan.contains("GpuSortExec"),
        "unknown size must count as large:\n{plan}"
    );
    let text = result_text(&ctx, "SELECT a FROM c ORDER BY a").await;
    assert!(
        text.find('1') < text.find('2') && text.find('2') < text.find('3'),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn settings_are_visible_and_validated_in_sql() {
    let (ctx, _) = session(GpuSortConfig::default(), 1);
    ctx.sql("SET gpu_sort.algorithm = 'locality'")
        .await
        .unwrap();
    ctx.sql("SET gpu_sort.min_rows = 0").await.unwrap();
    let plan = plan_of(&ctx, "SELECT * FROM t ORDER BY k").await;
    assert!(plan.contains("algorithm=locality"), "{plan}");
    let err = ctx
        .sql("SET gpu_sort.backend = 'tpu'")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected one of"), "{err}");
}

/// The (name, value) rows of `sql`, whose first two columns are strings.
async fn name_values(ctx: &SessionContext, sql: &str) -> Vec<(String, String)> {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut rows = Vec::new();
    for batch in batches {
        let column =
            |i: usize| datafusion::arrow::compute::cast(batch.column(i), &DataType::Utf8).unwrap();
        let (names, values) = (column(0), column(1));
        let names = names.as_any().downcast_ref::<StringArray>().unwrap();
        let values = values.as_any().downcast_ref::<StringArray>().unwrap();
        for row in 0..batch.num_rows() {
            let value = values.is_valid(row).then(|| values.value(row).to_string());
            rows.push((names.value(row).to_string(), value.unwrap_or_default()));
        }
    }
    rows
}

#[test]
fn settings_doc_lists_every_setting() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/settings.md")).unwrap();
    // Rows of its table: | `gpu_sort.name` | `default` | meaning |
    let documented: Vec<(String, String)> = doc
        .lines()
        .filter_map(|line| {
            let mut cells = line.split(" | ");
            let name = cells.next()?.strip_prefix("| `")?.strip_suffix('`')?;
            let default = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_string(), default.to_string()))
        })
        .collect();
    let settings: Vec<(String, String)> =
        datafusion::common::config::ExtensionOptions::entries(&GpuSortConfig::default())
            .into_iter()
            .map(|e| (e.key, e.value.unwrap_or_default()))
            .collect();
    for setting in &settings {
        assert!(
            documented.contains(setting),
            "{setting:?} is not in docs/settings.md as `name` | `default`: {documented:?}"
        );
    }
    assert_eq!(documented.len(), settings.len(), "{documented:?}");
}

#[tokio::test]
async fn settings_are_listed_where_datafusion_lists_its_own() {
    let rule = Arc::new(GpuSortRule::new());
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_information_schema(true))
        .with_default_features()
        .with_gpu_sort_rule(GpuSortConfig::default(), rule)
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.sql("SET gpu_sort.device_memory_limit = '50%'")
        .await
        .unwrap();
    let shown = name_values(&ctx, "SHOW gpu_sort.device_memory_limit").await;
    let expected = (
        "gpu_sort.device_memory_limit".to_string(),
        "50%".to_string(),
    );
    assert_eq!(shown, [expected]);
    let verbose = result_text(&ctx, "SHOW gpu_sort.min_rows VERBOSE").await;
    assert!(verbose.contains("keep DataFusion's sort"), "{verbose}");
    // Every setting, with its value, in SHOW ALL and in information_schema.df_settings.
    let all = name_values(&ctx, "SHOW ALL").await;
    let listed = name_values(
        &ctx,
        "SELECT name, value FROM information_schema.df_settings WHERE name LIKE 'gpu_sort.%'",
    )
    .await;
    let mut config = GpuSortConfig::default();
    config.device_memory_limit = gpusort::DeviceMemoryLimit::Share(0.5);
    let entries: Vec<(String, String)> =
        datafusion::common::config::ExtensionOptions::entries(&config)
            .into_iter()
            .map(|e| (e.key, e.value.unwrap_or_default()))
            .collect();
    assert!(entries.len() >= 16, "{entries:?}");
    assert_eq!(listed.len(), entries.len(), "{listed:?}");
    for entry in &entries {
        assert!(
            all.contains(entry),
            "{entry:?} missing from SHOW ALL: {all:?}"
        );
        assert!(
            listed.contains(entry),
            "{entry:?} missing from df_settings: {listed:?}"
        );
    }
    let err = ctx
        .sql("SHOW gpu_sort.no_such_setting")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("gpu_sort.no_such_setting"), "{err}");
}

#[tokio::test]
async fn memory_pool_is_back_to_zero_and_limits_give_clear_errors() {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(64 << 20, 1.0)
        .build_arc()
        .unwrap();
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(2))
        .with_runtime_env(Arc::clone(&runtime))
        .with_default_features()
        .with_gpu_sort(GpuSortConfig::forced_cpu())
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.register_table("t", Arc::new(table(100_000, 2)))
        .unwrap();
    let out = ctx
        .sql("SELECT * FROM t ORDER BY k, g")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 100_000);
    drop(out);
    assert_eq!(runtime.memory_pool.reserved(), 0);

    let tiny = RuntimeEnvBuilder::new()
        .with_memory_limit(64 << 10, 1.0)
        .build_arc()
        .unwrap();
    let state = SessionStateBuilder::new()
        .with_runtime_env(Arc::clone(&tiny))
        .with_default_features()
        .with_gpu_sort(GpuSortConfig::forced_cpu())
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.register_table("t", Arc::new(table(100_000, 1)))
        .unwrap();
    let err = ctx
        .sql("SELECT * FROM t ORDER BY k")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("Resources exhausted") && err.to_string().contains("gpusort"),
        "{err}"
    );
    assert_eq!(tiny.memory_pool.reserved(), 0);
}

/// A session sorting on the CPU backend under `pool`, in batches of 100 rows, with `t` a
/// memory table of `rows` rows in `partitions` partitions; and its runtime (to read the
/// pool from).
fn pooled_session(
    pool: Arc<dyn datafusion::execution::memory_pool::MemoryPool>,
    partitions: usize,
    rows: usize,
) -> (SessionContext, Arc<RuntimeEnv>) {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(pool)
        .build_arc()
        .unwrap();
    // A window's sort hands over batches of the session's size (DataFusion's window over
    // it, not gpusort's, which takes 128 Ki-row batches), so a consumer that stalls at
    // the first one leaves the rest buffered in the sort.
    let mut settings = GpuSortConfig::forced_cpu();
    settings.window_batch_rows = 0;
    settings.window_functions = false;
    let state = SessionStateBuilder::new()
        .with_config(
            SessionConfig::new()
                .with_batch_size(100)
                .with_target_partitions(partitions),
        )
        .with_runtime_env(Arc::clone(&runtime))
        .with_default_features()
        .with_gpu_sort(settings)
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.register_table("t", Arc::new(table(rows, partitions)))
        .unwrap();
    (ctx, runtime)
}

/// The buffered input, its sorted copies and the permutation stay in the session's pool
/// while a slow consumer reads the sort's output, and leave it when the output is done:
/// for an ORDER BY and a window's sort (combined over 16 partitions, hash routed), over 1
/// and 16 partitions, under an unbounded pool and a fair one.
///
/// The test reads the `GpuSortExec`'s own output streams. Read through the whole plan, the
/// operators above the sort (a window, the coalescing of partitions) may take every output
/// batch into their own buffers before the first row reaches the test, and the sort's
/// memory is then rightly released: whether it was depended on the scheduling.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buffered_input_stays_accounted_until_the_output_is_read() {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool, UnboundedMemoryPool};
    use futures::StreamExt;
    let rows = 200_000;
    for partitions in [1, 16] {
        for (sql, what) in [
            ("SELECT * FROM t ORDER BY k", "ORDER BY"),
            (
                "SELECT g, k, s, ROW_NUMBER() OVER (PARTITION BY g ORDER BY k) AS rn FROM t",
                "a window's sort",
            ),
        ] {
            let pools: [(&str, Arc<dyn MemoryPool>); 2] = [
                ("unbounded", Arc::new(UnboundedMemoryPool::default())),
                ("fair", Arc::new(FairSpillPool::new(1 << 30))),
            ];
            for (pool_name, pool) in pools {
                let case = format!("{what}, {partitions} partitions, {pool_name} pool");
                let (ctx, runtime) = pooled_session(pool, partitions, rows);
                let frame = ctx.sql(sql).await.unwrap();
                let task = Arc::new(frame.task_ctx());
                let plan = frame.create_physical_plan().await.unwrap();
                let mut sort = None;
                plan.apply(|node| {
                    if node.downcast_ref::<gpusort::GpuSortExec>().is_some() {
                        sort = Some(Arc::clone(node));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
                .unwrap();
                let sort = sort.unwrap_or_else(|| panic!("{case}: no GpuSortExec in the plan"));
                let outputs = sort.properties().partitioning.partition_count();
                let mut streams: Vec<_> = (0..outputs)
                    .map(|p| sort.execute(p, Arc::clone(&task)).unwrap())
                    .collect();
                // Reads up to the first batch with rows; the consumer stalls there.
                let mut read = 0;
                for stream in &mut streams {
                    match stream.next().await {
                        Some(batch) => read += batch.unwrap().num_rows(),
                        None => continue,
                    }
                    if read > 0 {
                        break;
                    }
                }
                assert!(read > 0, "{case}: the sort's output is empty");
                // The int columns alone are 12 bytes a row.
                let held = runtime.memory_pool.reserved();
                assert!(
                    held >= 12 * rows,
                    "{case}: {held} bytes reserved while {rows} buffered rows wait for a \
                     stalled consumer"
                );
                for stream in &mut streams {
                    while let Some(batch) = stream.next().await {
                        read += batch.unwrap().num_rows();
                    }
                }
                assert_eq!(read, rows, "{case}");
                drop(streams);
                assert_pool_drains(&runtime, &format!("{case}, after the output was read")).await;
            }
        }
    }
}

/// A memory table's scan hands out slices of its arrays at the session's batch size; the
/// sort accounts each shared buffer once, so a 4 MiB table read in 100-row batches sorts
/// in memory under a 256 MiB pool, fair or greedy, over 1 or 16 partitions (counted per
/// slice, it was 8 GiB and spilled up to 40 times). The pool is back to zero afterwards.
#[tokio::test]
async fn sliced_input_batches_are_accounted_once() {
    use datafusion::execution::memory_pool::{FairSpillPool, GreedyMemoryPool, MemoryPool};
    for partitions in [1, 16] {
        let pools: [(&str, Arc<dyn MemoryPool>); 2] = [
            ("fair", Arc::new(FairSpillPool::new(256 << 20))),
            ("greedy", Arc::new(GreedyMemoryPool::new(256 << 20))),
        ];
        for (name, pool) in pools {
            let (ctx, runtime) = pooled_session(pool, partitions, 200_000);
            let text = result_text(&ctx, "EXPLAIN ANALYZE SELECT * FROM t ORDER BY k, g").await;
            let label = format!("{name} pool, {partitions} partitions");
            assert!(text.contains("GpuSortExec"), "{label}: {text}");
            assert!(text.contains("spill_count=0,"), "{label}: spilled\n{text}");
            drop(ctx);
            assert_eq!(runtime.memory_pool.reserved(), 0, "{label}");
        }
    }
}

#[tokio::test]
async fn dropping_a_query_mid_sort_releases_memory() {
    use futures::StreamExt;
    let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_batch_size(100))
        .with_runtime_env(Arc::clone(&runtime))
        .with_default_features()
        .with_gpu_sort(GpuSortConfig::forced_cpu())
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.register_table("t", Arc::new(table(200_000, 1)))
        .unwrap();
    let mut stream = ctx
        .sql("SELECT * FROM t ORDER BY k")
        .await
        .unwrap()
        .execute_stream()
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.num_rows(), 100);
    drop(stream);
    assert_pool_drains(&runtime, "after the query was dropped").await;
}

/// Waits up to 2 s for the pool to hold nothing (the sort's task ends after its stream is
/// done or dropped); fails with what is still reserved.
async fn assert_pool_drains(runtime: &RuntimeEnv, when: &str) {
    for _ in 0..100 {
        if runtime.memory_pool.reserved() == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!(
        "{} bytes still reserved {when}",
        runtime.memory_pool.reserved()
    );
}

/// A session over the multi-file, multi-row-group Parquet table `t` (see
/// `common/parquet.rs`), with `repartition_sorts` as given.
async fn parquet_session(
    dir: &std::path::Path,
    target_partitions: usize,
    repartition_sorts: bool,
) -> (SessionContext, Arc<GpuSortRule>) {
    common::parquet::write_table(dir, common::seed(), common::parquet::MULTI_FILE);
    let rule = Arc::new(GpuSortRule::new());
    let config = SessionConfig::new()
        .with_target_partitions(target_partitions)
        .set_bool("datafusion.optimizer.repartition_sorts", repartition_sorts);
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_gpu_sort_rule(GpuSortConfig::forced_cpu(), Arc::clone(&rule))
        .build();
    let ctx = SessionContext::new_with_state(state);
    common::parquet::register_table(&ctx, dir, false).await;
    (ctx, rule)
}

/// Asserts `plan` sorts with one `GpuSortExec` of one output partition, with no
/// DataFusion sort or merge left, and no coalesce of partitions on the sort's input path.
fn assert_one_gathering_sort(plan: &str) {
    assert_eq!(plan.matches("GpuSortExec").count(), 1, "{plan}");
    assert!(plan.contains("preserve_partitioning=[false]"), "{plan}");
    for kept in [" SortExec:", "SortPreservingMergeExec"] {
        assert!(!plan.contains(kept), "{kept} left:\n{plan}");
    }
    // Below the sort, down its first children: no coalesce before a scan or a join.
    let below_sort = plan.lines().skip_while(|l| !l.contains("GpuSortExec"));
    for line in below_sort.skip(1) {
        assert!(
            !line.contains("CoalescePartitionsExec"),
            "coalesce left:\n{plan}"
        );
        if line.contains("DataSourceExec") || line.contains("JoinExec") {
            break;
        }
    }
}

#[tokio::test]
async fn plain_order_by_over_multi_file_parquet_is_one_sort_without_merge() {
    let dir = tempfile::tempdir().unwrap();
    for repartition_sorts in [true, false] {
        let (ctx, rule) = parquet_session(dir.path(), 8, repartition_sorts).await;
        let plan = merge_free_plan_of(&ctx, "SELECT * FROM t ORDER BY k").await;
        assert_one_gathering_sort(&plan);
        // The scan keeps its partitions: the one sort reads them all in parallel.
        assert!(plan.contains("file_groups={8 groups"), "{plan}");
        let decisions = rule.last_decisions();
        assert_eq!(decisions.len(), 1, "{decisions:?}");
        let text = decisions[0].to_string();
        let shape = if repartition_sorts {
            "over 8 partition sorts"
        } else {
            "over 8 coalesced partitions"
        };
        assert!(text.contains(shape), "{text}");
    }
}

#[tokio::test]
async fn merge_over_projection_over_partition_sorts_is_one_sort() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = parquet_session(dir.path(), 4, true).await;
    let plan = merge_free_plan_of(
        &ctx,
        "SELECT k AS key, s, rid, k * 2 + g AS k2 FROM t ORDER BY key, k2",
    )
    .await;
    assert_one_gathering_sort(&plan);
    assert!(
        plan.contains("expr=[key@0 ASC NULLS LAST, k2@3 ASC NULLS LAST]"),
        "{plan}"
    );
}

#[tokio::test]
async fn merge_over_filter_is_one_sort_with_the_filter_below() {
    let dir = tempfile::tempdir().unwrap();
    for repartition_sorts in [true, false] {
        let (ctx, _) = parquet_session(dir.path(), 4, repartition_sorts).await;
        let plan =
            merge_free_plan_of(&ctx, "SELECT rid, f FROM t WHERE g <> 3 ORDER BY f DESC").await;
        assert_one_gathering_sort(&plan);
        let sort_line = plan
            .lines()
            .position(|l| l.contains("GpuSortExec"))
            .unwrap();
        let filter_line = plan.lines().position(|l| l.contains("FilterExec")).unwrap();
        assert!(filter_line > sort_line, "filter above the sort:\n{plan}");
    }
}

#[tokio::test]
async fn union_all_under_one_order_by_is_one_sort() {
    let dir = tempfile::tempdir().unwrap();
    for repartition_sorts in [true, false] {
        let (ctx, _) = parquet_session(dir.path(), 3, repartition_sorts).await;
        let sql = "SELECT k, rid FROM t WHERE g < 3 UNION ALL SELECT k + 1, rid FROM t \
                   WHERE g >= 3 ORDER BY k, rid";
        let plan = merge_free_plan_of(&ctx, sql).await;
        assert_one_gathering_sort(&plan);
        assert!(plan.contains("UnionExec"), "{plan}");
    }
}

#[tokio::test]
async fn order_by_over_a_subquery_is_one_sort() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = parquet_session(dir.path(), 4, true).await;
    let sql = "SELECT * FROM (SELECT g, k, rid FROM t WHERE k > 0) AS sub ORDER BY g DESC, k";
    assert_one_gathering_sort(&merge_free_plan_of(&ctx, sql).await);
}

#[tokio::test]
async fn order_by_over_a_join_is_one_sort() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = parquet_session(dir.path(), 4, true).await;
    let sql = "SELECT a.rid, a.k, b.s FROM t a JOIN t b ON a.rid = b.rid ORDER BY a.k, b.s";
    assert_one_gathering_sort(&merge_free_plan_of(&ctx, sql).await);
}

#[tokio::test]
async fn sort_merge_join_sorts_are_replaced_per_partition() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = parquet_session(dir.path(), 4, true).await;
    ctx.sql("SET datafusion.optimizer.prefer_hash_join = false")
        .await
        .unwrap();
    let sql = "SELECT a.rid, a.k, b.s FROM t a JOIN t b ON a.rid = b.rid";
    let plan = plan_of(&ctx, sql).await;
    assert!(plan.contains("SortMergeJoin"), "{plan}");
    assert!(!plan.contains(" SortExec:"), "{plan}");
    assert_eq!(plan.matches("GpuSortExec").count(), 2, "{plan}");
}

#[tokio::test]
async fn copy_of_an_ordered_query_is_one_sort() {
    let dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    for repartition_sorts in [true, false] {
        let (ctx, _) = parquet_session(dir.path(), 4, repartition_sorts).await;
        let sql = format!(
            "COPY (SELECT s, k FROM t ORDER BY s DESC, k) TO '{}/o.parquet'",
            out.path().display()
        );
        assert_one_gathering_sort(&merge_free_plan_of(&ctx, &sql).await);
    }
}

#[tokio::test]
async fn window_over_parquet_sorts_partitions_with_one_sort() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = parquet_session(dir.path(), 4, true).await;
    let sql = "SELECT rid, ROW_NUMBER() OVER (PARTITION BY g ORDER BY k) AS n FROM t";
    let plan = merge_free_plan_of(&ctx, sql).await;
    assert!(!plan.contains(" SortExec:"), "{plan}");
    assert!(plan.contains("GpuSortExec"), "{plan}");
}

#[tokio::test]
async fn merge_of_sorts_with_a_limit_is_one_sort_with_topk_on() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = parquet_session(dir.path(), 4, true).await;
    let plan = merge_free_plan_of(&ctx, "SELECT k, rid FROM t ORDER BY k LIMIT 10").await;
    assert_one_gathering_sort(&plan);
    assert!(plan.contains("GpuSortExec: fetch=10"), "{plan}");
}

#[tokio::test]
async fn gather_partitions_false_keeps_the_merge_over_replaced_partition_sorts() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = parquet_session(dir.path(), 4, true).await;
    ctx.sql("SET gpu_sort.gather_partitions = false")
        .await
        .unwrap();
    let plan = plan_of(&ctx, "SELECT k AS key, rid FROM t ORDER BY key").await;
    assert!(plan.contains("SortPreservingMergeExec"), "{plan}");
    assert!(plan.contains("preserve_partitioning=[true]"), "{plan}");
    assert!(!plan.contains(" SortExec:"), "{plan}");
}

/// The sort reads its input in batches of `gpu_sort.input_batch_rows` where that is larger
/// than the session's batch size: the scan and the filter below it yield fewer, larger
/// batches, and the answer is the same.
#[tokio::test]
async fn the_sort_reads_its_input_in_batches_of_input_batch_rows() {
    use datafusion::physical_plan::{collect, ExecutionPlan};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    let rows = 100_000;
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from_iter_values(
            (0..rows as i64).map(|i| (i * 7919) % 100_003),
        ))],
    )
    .unwrap();
    let file = std::fs::File::create(&path).unwrap();
    let mut writer =
        datafusion::parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    /// Batches the filter over the scan passed on.
    fn scan_batches(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
        if plan.name() == "FilterExec" {
            use datafusion::physical_plan::metrics::MetricValue;
            return plan.metrics()?.iter().find_map(|m| match m.value() {
                MetricValue::OutputBatches(count) => Some(count.value()),
                _ => None,
            });
        }
        plan.children().into_iter().find_map(scan_batches)
    }
    let mut answers = Vec::new();
    let default = GpuSortConfig::default().input_batch_rows.to_string();
    // (setting, a memory limit, the batches expected). Under a limit the batches stay
    // small beside what the pool holds.
    for (setting, limit, expected) in [
        ("0", None, 13),
        ("32768", None, 4),
        ("4096", None, 13),
        (default.as_str(), None, 2),
        // 8-byte rows: a 1 GiB pool still takes 65 536-row batches, a 4 MiB one not.
        (default.as_str(), Some(1usize << 30), 2),
        (default.as_str(), Some(4usize << 20), 13),
    ] {
        let config = GpuSortConfig::forced_cpu();
        let mut runtime = RuntimeEnvBuilder::new();
        if let Some(limit) = limit {
            runtime = runtime.with_memory_limit(limit, 1.0);
        }
        let state = SessionStateBuilder::new()
            .with_config(
                SessionConfig::new()
                    .with_target_partitions(1)
                    .with_batch_size(8192),
            )
            .with_runtime_env(runtime.build_arc().unwrap())
            .with_default_features()
            .with_gpu_sort_rule(config, Arc::new(GpuSortRule::new()))
            .build();
        let ctx = SessionContext::new_with_state(state);
        ctx.register_parquet("t", path.to_str().unwrap(), Default::default())
            .await
            .unwrap();
        ctx.sql(&format!("SET gpu_sort.input_batch_rows = {setting}"))
            .await
            .unwrap();
        let plan = common::physical_plan(&ctx, "SELECT k FROM t WHERE k + 1 > 0 ORDER BY k")
            .await
            .unwrap();
        let text = common::plan_text(&plan);
        assert!(text.contains("GpuSortExec"), "{text}");
        let out = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
        let batches = scan_batches(&plan).expect("the scan's output_batches metric");
        assert_eq!(
            batches, expected,
            "input_batch_rows = {setting}, memory limit {limit:?}: batches below the sort"
        );
        let sorted: Vec<i64> = out
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(sorted.len(), rows);
        assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
        answers.push(sorted);
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]));
}
