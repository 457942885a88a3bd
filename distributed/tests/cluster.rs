//! gpusort on datafusion-distributed's in-memory cluster (CPU backend): each worker's
//! share is sorted by its own `GpuSortExec`, the coordinator merges, and every answer
//! equals stock single-process DataFusion's, ties in input order.

mod support;

use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::common::Result;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use gpusort::{GpuSortConfig, GpuSortRule};
use gpusort_distributed::explain_distributed;
use support::{
    coordinator, coordinator_with_budget, reference, register, write_table, InMemoryWorkers,
};

const WORKERS: usize = 3;

/// The data's seed (`GPUSORT_SEED`, else 42), printed so that a failure can be replayed.
fn seed() -> u64 {
    let seed = std::env::var("GPUSORT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42);
    println!("GPUSORT_SEED={seed}");
    seed
}

struct Fixture {
    _dir: tempfile::TempDir,
    dir: std::path::PathBuf,
    distributed: SessionContext,
    rule: Arc<GpuSortRule>,
    stock: SessionContext,
}

async fn fixture() -> Result<Fixture> {
    fixture_with(GpuSortConfig::forced_cpu()).await
}

async fn fixture_with(config: GpuSortConfig) -> Result<Fixture> {
    let dir = tempfile::tempdir()?;
    let table = dir.path().join("t");
    std::fs::create_dir(&table)?;
    write_table(&table, 6, 5000, seed())?;
    let rule = Arc::new(GpuSortRule::partition_local());
    let distributed = coordinator(
        InMemoryWorkers::start(true),
        WORKERS,
        config,
        Arc::clone(&rule),
    )?;
    let stock = reference();
    register(&table, &[&distributed, &stock]).await?;
    Ok(Fixture {
        dir: dir.path().to_path_buf(),
        _dir: dir,
        distributed,
        rule,
        stock,
    })
}

fn concat(batches: &[RecordBatch]) -> RecordBatch {
    let schema = batches[0].schema();
    concat_batches(&schema, batches).expect("batches of one schema")
}

/// Equal row for row: floats by their bits, strings whatever their layout.
fn assert_same(ours: &[RecordBatch], theirs: &[RecordBatch], what: &str) {
    let (ours, theirs) = (concat(ours), concat(theirs));
    assert_eq!(
        ours.num_rows(),
        theirs.num_rows(),
        "{what}: row counts differ"
    );
    assert_eq!(
        ours.num_columns(),
        theirs.num_columns(),
        "{what}: column counts differ"
    );
    for (i, field) in theirs.schema().fields().iter().enumerate() {
        let a = cast(ours.column(i), field.data_type()).expect("castable");
        let b = theirs.column(i);
        if a.as_ref() != b.as_ref() {
            let first = (0..a.len())
                .find(|&r| a.slice(r, 1).as_ref() != b.slice(r, 1).as_ref())
                .unwrap_or(0);
            panic!(
                "{what}: column {} differs first at row {first}: {:?} vs {:?}",
                field.name(),
                a.slice(first, 3),
                b.slice(first, 3)
            );
        }
    }
}

async fn both(
    f: &Fixture,
    ours: &str,
    theirs: &str,
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
    let a = f.distributed.sql(ours).await?.collect().await?;
    let b = f.stock.sql(theirs).await?.collect().await?;
    Ok((a, b))
}

/// The stages of a distributed plan as `explain_distributed` draws them, head first: each
/// one's text from its header line to the next stage's.
fn stages(plan: &str) -> Vec<String> {
    let mut stages: Vec<String> = Vec::new();
    for line in plan.lines() {
        if line.contains("┌─────") {
            stages.push(String::new());
        }
        if let Some(stage) = stages.last_mut() {
            stage.push_str(line);
            stage.push('\n');
        }
    }
    stages
}

async fn check(f: &Fixture, sql: &str) -> Result<()> {
    let (ours, theirs) = both(f, sql, sql).await?;
    assert_same(&ours, &theirs, sql);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_by_sorts_on_the_workers_and_merges_on_the_coordinator() -> Result<()> {
    let f = fixture().await?;
    let sql = "SELECT * FROM t ORDER BY k, row";
    let plan = explain_distributed(&f.distributed, sql).await?;
    // The head stage (the coordinator) merges what a stage of several tasks sorted.
    let stages = stages(&plan);
    assert_eq!(stages.len(), 2, "{plan}");
    // Its merge breaks ties by partition (DataFusion's would take them round robin).
    assert!(stages[0].contains("StableMergeExec"), "{plan}");
    assert!(stages[0].contains("NetworkCoalesceExec"), "{plan}");
    assert!(!stages[0].contains("GpuSortExec"), "{plan}");
    assert!(stages[1].contains("tasks=3"), "{plan}");
    assert!(
        stages[1].contains("GpuSortExec") && stages[1].contains("preserve_partitioning=[true]"),
        "{plan}"
    );
    assert!(
        !plan.replace("GpuSortExec", "").contains("SortExec"),
        "every sort is gpusort's: {plan}"
    );
    let decisions = f.rule.last_decisions_text();
    assert!(decisions.contains("replaced SortExec"), "{decisions}");
    check(&f, sql).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multi_key_and_string_orders_equal_stock_datafusion() -> Result<()> {
    let f = fixture().await?;
    for sql in [
        "SELECT * FROM t ORDER BY g DESC, s NULLS FIRST, f, row",
        "SELECT s, k, row FROM t ORDER BY s DESC NULLS LAST, row",
        "SELECT f, row FROM t ORDER BY f, row DESC",
        "SELECT k + g AS kg, s, row FROM t WHERE g <> 3 ORDER BY kg NULLS FIRST, row",
    ] {
        check(&f, sql).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ties_keep_input_order_within_each_share() -> Result<()> {
    let f = fixture().await?;
    // Each of the stage's partitions reads byte ranges of the files in file order, so its
    // rows arrive in ascending `row`; the coordinator's merge takes ties partition by
    // partition. A stable sort on the workers thus gives every run of equal keys as at
    // most one ascending stretch of `row` per partition (an unstable one, about as many
    // stretches as rows). The rows of each run must be stock DataFusion's.
    for (ours, theirs, keys) in [
        (
            "SELECT k, row FROM t ORDER BY k",
            "SELECT k, row FROM t ORDER BY k, row",
            1,
        ),
        (
            "SELECT s, g, row FROM t ORDER BY s, g DESC",
            "SELECT s, g, row FROM t ORDER BY s, g DESC, row",
            2,
        ),
    ] {
        let plan = explain_distributed(&f.distributed, ours).await?;
        let partitions: usize = plan
            .split("output_partitions=")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no partition count: {plan}"));
        let (a, b) = both(&f, ours, theirs).await?;
        let (a, b) = (concat(&a), concat(&b));
        assert_eq!(a.num_rows(), b.num_rows(), "{ours}");
        let key_of = |batch: &RecordBatch, r: usize| -> Vec<String> {
            (0..keys)
                .map(|c| {
                    datafusion::arrow::util::display::array_value_to_string(batch.column(c), r)
                        .expect("printable")
                })
                .collect()
        };
        let rows = |batch: &RecordBatch| -> Vec<i64> {
            let column = batch.column(keys);
            let column = column
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Int64Array>()
                .expect("row is i64");
            column.values().to_vec()
        };
        let (rows_a, rows_b) = (rows(&a), rows(&b));
        let mut start = 0;
        let mut most_stretches = 0;
        while start < a.num_rows() {
            let key = key_of(&a, start);
            let mut end = start + 1;
            while end < a.num_rows() && key_of(&a, end) == key {
                end += 1;
            }
            assert_eq!(key_of(&b, start), key, "{ours}: keys differ at row {start}");
            let mut ours_sorted = rows_a[start..end].to_vec();
            ours_sorted.sort_unstable();
            assert_eq!(
                ours_sorted,
                rows_b[start..end],
                "{ours}: the rows of the run {key:?}"
            );
            let stretches = 1 + rows_a[start..end]
                .windows(2)
                .filter(|w| w[1] < w[0])
                .count();
            assert!(
                stretches <= partitions,
                "{ours}: the {} rows of {key:?} come in {stretches} ascending stretches, \
                 more than the {partitions} partitions",
                end - start
            );
            most_stretches = most_stretches.max(stretches);
            start = end;
        }
        // The runs are long enough for an unstable sort to show.
        assert!(a.num_rows() / 200 > 4 * partitions, "{ours}");
        println!("{ours}: at most {most_stretches} stretches per run, {partitions} partitions");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn windows_sort_within_the_worker_that_owns_the_hash_partition() -> Result<()> {
    let f = fixture().await?;
    let sql = "SELECT g, k, row, ROW_NUMBER() OVER (PARTITION BY g ORDER BY k, row) AS rn, \
               SUM(k) OVER (PARTITION BY g ORDER BY k, row) AS running \
               FROM t ORDER BY g, rn";
    let plan = explain_distributed(&f.distributed, sql).await?;
    // The window's sort runs in the stage that reads the shuffle by g, in several tasks;
    // the hash repartition stays, at the end of the stage below.
    let stages = stages(&plan);
    let window = stages
        .iter()
        .find(|s| s.contains("SortedWindowExec"))
        .unwrap_or_else(|| panic!("no window: {plan}"));
    assert!(
        window.contains("GpuSortExec") && window.contains("NetworkShuffleExec"),
        "{plan}"
    );
    assert!(window.contains("tasks=3"), "{plan}");
    assert!(
        stages
            .iter()
            .any(|s| s.contains("RepartitionExec: partitioning=Hash([g@")),
        "{plan}"
    );
    check(&f, sql).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_by_limit_equals_stock_datafusion() -> Result<()> {
    let f = fixture().await?;
    for sql in [
        "SELECT * FROM t ORDER BY f DESC, row LIMIT 100",
        "SELECT s, row FROM t ORDER BY s NULLS FIRST, row LIMIT 7",
        "SELECT * FROM t ORDER BY k, row LIMIT 10 OFFSET 2000",
    ] {
        let plan = explain_distributed(&f.distributed, sql).await?;
        assert!(plan.contains("GpuSortExec: fetch="), "{plan}");
        // The oracle is stock DataFusion's full sort, cut: its own TopK drops rows here
        // (its dynamic row-group pruning trusts Parquet statistics, which leave NaN out).
        let (cut, offset, limit) = (
            sql.find(" LIMIT").expect("a LIMIT"),
            offset_of(sql),
            limit_of(sql),
        );
        let ours = f.distributed.sql(sql).await?.collect().await?;
        let full = concat(&f.stock.sql(&sql[..cut]).await?.collect().await?);
        let theirs = full.slice(offset, limit.min(full.num_rows() - offset));
        assert_same(&ours, &[theirs], sql);
    }
    Ok(())
}

fn limit_of(sql: &str) -> usize {
    let after = sql.split(" LIMIT ").nth(1).expect("a LIMIT");
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number")
}

fn offset_of(sql: &str) -> usize {
    sql.split(" OFFSET ")
        .nth(1)
        .and_then(|n| n.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_writes_the_sorted_table() -> Result<()> {
    let f = fixture().await?;
    let out = f.dir.join("sorted.parquet");
    let copy = format!(
        "COPY (SELECT * FROM t ORDER BY s, k DESC, row) TO '{}' STORED AS PARQUET",
        out.display()
    );
    f.distributed.sql(&copy).await?.collect().await?;
    let written = SessionContext::new();
    written
        .register_parquet("w", out.to_str().unwrap(), ParquetReadOptions::default())
        .await?;
    // Read back in file order (one partition), against the stock sort.
    let read_back = written.sql("SELECT * FROM w").await?.collect().await?;
    let theirs = f
        .stock
        .sql("SELECT * FROM t ORDER BY s, k DESC, row")
        .await?
        .collect()
        .await?;
    assert_same(&read_back, &theirs, &copy);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_without_the_codec_fails_the_query_saying_why() -> Result<()> {
    let dir = tempfile::tempdir()?;
    write_table(dir.path(), 4, 3000, seed())?;
    let ctx = coordinator(
        InMemoryWorkers::start(false),
        WORKERS,
        GpuSortConfig::forced_cpu(),
        Arc::new(GpuSortRule::partition_local()),
    )?;
    register(dir.path(), &[&ctx]).await?;
    let result = ctx
        .sql("SELECT * FROM t ORDER BY k, row")
        .await?
        .collect()
        .await;
    let error = result.expect_err("a worker without gpusort's codec cannot run GpuSortExec");
    let message = error.strip_backtrace();
    println!("{message}");
    assert!(
        message.contains("the worker has no gpusort codec"),
        "{message}"
    );
    assert!(message.contains("gpu_sort_worker"), "{message}");
    assert!(!message.contains("bug in DataFusion"), "{message}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_merge_never_waits_on_a_full_connection() -> Result<()> {
    // datafusion-distributed stops pulling a worker's stream while the batches it received
    // but nobody consumed pass the connection's budget. With a budget of one byte, only
    // one batch is ever in flight per worker: a merge that did not read every partition
    // ahead would wait for a batch queued behind those of partitions it does not need yet.
    let dir = tempfile::tempdir()?;
    write_table(dir.path(), 6, 20_000, seed())?;
    let ctx = coordinator_with_budget(
        InMemoryWorkers::start(true),
        2,
        GpuSortConfig::forced_cpu(),
        Arc::new(GpuSortRule::partition_local()),
        Some(1),
    )?;
    let stock = reference();
    register(dir.path(), &[&ctx, &stock]).await?;
    let sql = "SELECT * FROM t ORDER BY k, row";
    let ours = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        ctx.sql(sql).await?.collect().await
    })
    .await
    .expect("the distributed sort finishes")?;
    let theirs = stock.sql(sql).await?.collect().await?;
    assert_same(&ours, &theirs, sql);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cuda_is_decided_by_each_worker_not_by_the_coordinator() -> Result<()> {
    // The coordinator plans GpuSortExec for `cuda` whether or not it has a GPU itself; a
    // worker without one refuses the task, saying why (with one, it sorts on it).
    let mut config = GpuSortConfig::forced_cpu();
    config.backend = gpusort::BackendChoice::Cuda;
    let worker_has_gpu = gpusort::backend::resolve_backend(&config).is_ok();
    let f = fixture_with(config).await?;
    let sql = "SELECT * FROM t ORDER BY k, row";
    let plan = explain_distributed(&f.distributed, sql).await?;
    assert!(plan.contains("GpuSortExec"), "{plan}");
    match worker_has_gpu {
        true => check(&f, sql).await?,
        false => {
            let error = f.distributed.sql(sql).await?.collect().await.unwrap_err();
            let message = error.strip_backtrace();
            assert!(
                message.contains("cannot run the plan's GpuSortExec"),
                "{message}"
            );
            assert!(message.contains("no CUDA device is usable"), "{message}");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn workers_sort_on_their_gpu() -> Result<()> {
    let mut config = GpuSortConfig::forced_cpu();
    config.backend = gpusort::BackendChoice::Cuda;
    let f = fixture_with(config).await?;
    let sql = "SELECT * FROM t ORDER BY s DESC, f, row";
    let plan = explain_distributed(&f.distributed, sql).await?;
    assert!(plan.contains("backend=cuda"), "{plan}");
    check(&f, sql).await?;
    check(
        &f,
        "SELECT g, k, row, ROW_NUMBER() OVER (PARTITION BY g ORDER BY k, row) AS rn \
         FROM t ORDER BY g, rn",
    )
    .await?;
    let sql = "SELECT * FROM t ORDER BY f DESC, row LIMIT 100";
    let ours = f.distributed.sql(sql).await?.collect().await?;
    let full = concat(
        &f.stock
            .sql("SELECT * FROM t ORDER BY f DESC, row")
            .await?
            .collect()
            .await?,
    );
    assert_same(&ours, &[full.slice(0, 100)], sql);
    Ok(())
}
