//! Sorted runs on disk.
//!
//! When a sort's input outgrows its memory reservation, the buffered rows are sorted as runs
//! (on the backend, like any run) and written through DataFusion's `SpillManager`: Arrow IPC
//! files in the runtime's temporary directory, counted in the operator's spill metrics and
//! the disk manager's limit. At the end every run is read back as a stream (`spill_read`)
//! and merged.
//!
//! Merging many runs at once needs a few batches of each in memory. Runs are written in
//! batches sized from the memory the sort held when it spilled ([`spill_batch_rows`]), so
//! that many of them merge within the limit that forced the spill, whatever the batch size
//! the consumer asked for (a whole-partition window asks for 16 Mi rows). When the pool
//! cannot hold a merge of every run, the first runs that fit are merged into one longer run
//! on disk, put back in their place, and so on until the rest fits: consecutive runs merged
//! with ties broken by run index, so the sort stays stable (DataFusion's own multi-level
//! merge appends merged runs at the end, which would reorder ties).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::arrow;
use datafusion::common::config::SpillCompression;
use datafusion::common::{resources_err, Result};
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation, UnboundedMemoryPool,
};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SpillFile;
use datafusion::physical_plan::common::spawn_buffered;
use datafusion::physical_plan::metrics::SpillMetrics;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet};
use datafusion::physical_plan::sorts::streaming_merge::StreamingMergeBuilder;
use datafusion::physical_plan::spill::SpillManager;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;

use super::metrics::SortMetrics;
use super::run::{RunSorter, SortSpec};
use super::spill_read::read_trusted;
use super::views::{compact_views, memory_when_compact};
use super::window_merge::{merge_by_windows, WindowRun};

/// A spilled batch takes at most this share of the memory the sort held when it spilled.
/// A merge keeps about [`MERGE_BATCHES_PER_RUN`] batches of each run in memory, so runs
/// written at this size merge 16 at a time within that memory.
const SPILL_BATCH_SHARE: usize = 64;

/// Spilled batches are not cut smaller than this many bytes (unless one row is larger).
const MIN_SPILL_BATCH_BYTES: usize = 1 << 10;

/// Batches of one run a merge holds at once, each accounted at its size in memory: the
/// batch being read, the one its cursor walks (with the cursor's row-encoded keys, about
/// 0.7 times the batch again), and earlier ones whose rows wait in the output being built.
const MERGE_BATCHES_PER_RUN: usize = 4;

/// Batches of a spilled run read ahead of the merge, on a task of their own.
const READ_AHEAD_BATCHES: usize = 1;

/// Rows per batch of runs spilled by a sort that held `held` bytes, of about
/// `bytes_per_row` bytes a row: a [`SPILL_BATCH_SHARE`]th of `held`, and no more than the
/// consumer's `batch_size`.
pub(super) fn spill_batch_rows(held: usize, bytes_per_row: usize, batch_size: usize) -> usize {
    let bytes = (held / SPILL_BATCH_SHARE).max(MIN_SPILL_BATCH_BYTES);
    (bytes / bytes_per_row.max(1)).clamp(1, batch_size.max(1))
}

/// One sorted run written to disk.
pub(super) struct SpilledRun {
    /// The IPC file.
    file: Arc<dyn SpillFile>,
    /// Rows per batch written (the last one may have fewer).
    batch_rows: usize,
    /// The sizes of its batches in memory.
    sizes: RunSizes,
}

/// The sizes of the batches written to one spill file, in memory once read back.
#[derive(Debug, Default, Clone, Copy)]
struct RunSizes {
    /// The largest batch (for a merge's plan).
    max_batch_memory: usize,
    /// The most memory a row of one batch took on average (for a merge's output).
    max_row_memory: usize,
}

impl RunSizes {
    fn add(&mut self, batch: &RecordBatch) {
        let memory = memory_when_compact(batch);
        self.max_batch_memory = self.max_batch_memory.max(memory);
        self.max_row_memory = self
            .max_row_memory
            .max(memory.div_ceil(batch.num_rows().max(1)));
    }

    fn run(self, file: Arc<dyn SpillFile>, batch_rows: usize) -> SpilledRun {
        SpilledRun {
            file,
            batch_rows,
            sizes: self,
        }
    }
}

/// Writes sorted runs of one partition's sort to disk and reads them back.
#[derive(Clone)]
pub(super) struct RunSpiller {
    manager: Arc<SpillManager>,
    /// The pool merges plan their memory in.
    pool: Arc<dyn MemoryPool>,
}

impl RunSpiller {
    /// A spiller writing batches of `schema` into `env`'s temporary files, compressed with
    /// `compression` (the session's `datafusion.execution.spill_compression`).
    pub(super) fn new(
        env: Arc<RuntimeEnv>,
        metrics: SpillMetrics,
        schema: SchemaRef,
        compression: SpillCompression,
    ) -> Self {
        Self {
            pool: Arc::clone(&env.memory_pool),
            manager: Arc::new(
                SpillManager::new(env, metrics, schema).with_compression_type(compression),
            ),
        }
    }

    /// The session's memory pool.
    pub(super) fn pool(&self) -> &Arc<dyn MemoryPool> {
        &self.pool
    }

    /// Sorts `batches` (consecutive input rows) as one run and writes the sorted rows to a
    /// spill file in batches of `batch_rows` rows; `None` when the run is empty. Blocking.
    pub(super) fn sort_to_disk(
        &self,
        spec: &SortSpec,
        batches: Vec<RecordBatch>,
        batch_rows: usize,
        metrics: &SortMetrics,
    ) -> Result<Option<SpilledRun>> {
        let mut file = self
            .manager
            .create_in_progress_file("GpuSortExec: a sorted run")?;
        let spec = SortSpec {
            run_batch_rows: batch_rows,
            ..spec.clone()
        };
        let mut sizes = RunSizes::default();
        let mut write_error = None;
        RunSorter::new(&spec, metrics).sort_run(batches, |batch| {
            sizes.add(&batch);
            match file.append_batch(&batch) {
                Ok(_) => true,
                Err(e) => {
                    write_error = Some(e);
                    false
                }
            }
        })?;
        if let Some(e) = write_error {
            return Err(e.context("gpusort: writing a sorted run to disk"));
        }
        Ok(file.finish()?.map(|file| sizes.run(file, batch_rows)))
    }

    /// The rows of `run`, in sorted order, read a batch ahead on a task of their own
    /// (`spill_read`: without validating the arrays again).
    pub(super) fn read(&self, run: SpilledRun) -> Result<SendableRecordBatchStream> {
        let batches = read_trusted(run.file, Arc::clone(self.manager.schema()))?;
        Ok(spawn_buffered(batches, READ_AHEAD_BATCHES))
    }

    /// Merges `runs` (in input order) into one sorted stream of batches of up to the
    /// consumer's batch size, within the memory `memory` grants; leading runs are merged
    /// on disk first while a merge of all of them would not fit.
    pub(super) async fn merge(
        &self,
        mut runs: Vec<SpilledRun>,
        spec: &SortSpec,
        memory: &MergeMemory,
        metrics: &SortMetrics,
    ) -> Result<ClaimedMerge> {
        let mut budget = memory.budget(self.pool.as_ref());
        loop {
            let sizes: Vec<RunSizes> = runs.iter().map(|r| r.sizes).collect();
            let plan = MergePlan::within(&sizes, spec.batch_size, budget);
            if plan.runs < 2 && plan.runs < runs.len() {
                return resources_err!(
                    "gpusort: merging sorted runs needs {} batches of two runs in memory \
                     ({} bytes each), more than the {budget} bytes the memory pool grants",
                    MERGE_BATCHES_PER_RUN,
                    sizes.iter().map(|s| s.max_batch_memory).max().unwrap_or(0)
                );
            }
            // A pool may grant less than its free memory (a fair pool's share): plan again
            // with half the budget.
            let Some(claim) = memory.try_claim(plan.bytes) else {
                budget /= 2;
                continue;
            };
            if plan.runs >= runs.len() {
                // Windows hold at most a run's worth of rows.
                let most_rows = runs.iter().map(|r| r.batch_rows).max().unwrap_or(1);
                let depth = plan
                    .depth
                    .min(spec.run_rows / (runs.len() * most_rows).max(1))
                    .max(1);
                let runs = runs
                    .into_iter()
                    .map(|run| {
                        let load_rows = run.batch_rows * depth;
                        Ok(WindowRun::new(self.read(run)?, load_rows))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let schema = Arc::clone(self.manager.schema());
                let merged = merge_by_windows(runs, schema, spec, plan.batch_rows, metrics)?;
                let stream = compacted(merged);
                return Ok(ClaimedMerge {
                    stream,
                    _claim: claim,
                });
            }
            let rest = runs.split_off(plan.runs);
            let merged = self.merge_to_disk(runs, spec, claim).await?;
            runs = merged.into_iter().chain(rest).collect();
            budget = memory.budget(self.pool.as_ref());
        }
    }

    /// The rows of `runs` (in input order) read back and merged into batches of
    /// `batch_rows` rows; the merge counts in a pool of its own (see [`ClaimedMerge`]).
    fn merged(
        &self,
        runs: Vec<SpilledRun>,
        spec: &SortSpec,
        batch_rows: usize,
    ) -> Result<SendableRecordBatchStream> {
        let streams = runs
            .into_iter()
            .map(|run| self.read(run))
            .collect::<Result<Vec<_>>>()?;
        let schema = Arc::clone(self.manager.schema());
        merge_runs(streams, schema, spec, batch_rows, unpooled(SPILLED_MERGE))
    }

    /// Merges consecutive `runs` into one run on disk, in the memory `_claim` holds.
    async fn merge_to_disk(
        &self,
        runs: Vec<SpilledRun>,
        spec: &SortSpec,
        _claim: MemoryReservation,
    ) -> Result<Option<SpilledRun>> {
        // The merged run is written in batches no larger than those it is merged from.
        let batch_rows = runs.iter().map(|r| r.batch_rows).min().unwrap_or(1);
        let mut merged = self.merged(runs, spec, batch_rows)?;
        let mut file = self
            .manager
            .create_in_progress_file("GpuSortExec: merged sorted runs")?;
        let mut sizes = RunSizes::default();
        while let Some(batch) = merged.next().await {
            let batch = batch?;
            sizes.add(&batch);
            file.append_batch(&batch)?;
        }
        Ok(file.finish()?.map(|file| sizes.run(file, batch_rows)))
    }
}

/// `stream` with its batches' view columns compacted: a merge's output points into the
/// spilled batches it read back, and a consumer holding it would keep those alive whole
/// (see `views`).
fn compacted(stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
    let schema = stream.schema();
    let compact = stream.map(|batch| batch.and_then(compact_views));
    Box::pin(RecordBatchStreamAdapter::new(schema, compact))
}

/// The memory a merge of spilled runs may take: the pool's free memory, shared by
/// `sharers` merges that may run at once (the output partitions of one combined sort, each
/// merging its own runs), claimed through `reservation`'s consumer.
pub(super) struct MergeMemory {
    /// The sort's consumer in the pool.
    pub reservation: MemoryReservation,
    /// Merges sharing the consumer's memory.
    pub sharers: usize,
}

impl MergeMemory {
    /// The bytes this merge may plan with: its share of the pool's free memory (of
    /// [`UNLIMITED_BUDGET`] where the pool has no limit or does not say).
    fn budget(&self, pool: &dyn MemoryPool) -> usize {
        let free = match pool.memory_limit() {
            MemoryLimit::Finite(limit) => limit.saturating_sub(pool.reserved()),
            MemoryLimit::Infinite | MemoryLimit::Unknown => UNLIMITED_BUDGET,
        };
        free / self.sharers.max(1)
    }

    /// `bytes` claimed in the pool, if it grants them.
    fn try_claim(&self, bytes: usize) -> Option<MemoryReservation> {
        let claim = self.reservation.new_empty();
        claim.try_grow(bytes).ok().map(|_| claim)
    }
}

/// What a merge plans with where the pool sets no limit.
const UNLIMITED_BUDGET: usize = 1 << 40;

/// A merge of spilled runs and the memory claimed for it in the pool. The merge itself
/// accounts in a pool of its own: the claim already holds its memory in the session's
/// pool (accounting both would count it twice), and the claim is taken before the merge
/// starts, so merges of the partitions of one sort starting together cannot each count on
/// memory another is about to take.
pub(super) struct ClaimedMerge {
    /// The merged rows.
    pub stream: SendableRecordBatchStream,
    /// Held until the merge is done.
    _claim: MemoryReservation,
}

/// One merge of leading runs, fitted to a memory budget.
#[derive(Debug, Clone, Copy)]
struct MergePlan {
    /// How many leading runs it takes.
    runs: usize,
    /// Rows per output batch.
    batch_rows: usize,
    /// The memory it needs: two output batches (the one being built, the one handed on),
    /// [`MERGE_BATCHES_PER_RUN`] batches of each run, and [`WINDOW_COPIES`] more for each
    /// batch of depth beyond the first.
    bytes: usize,
    /// Where it takes every run: batches of each run a window merge loads ahead (see
    /// `window_merge`), at least 1 and at most [`MAX_WINDOW_DEPTH`], as the budget allows.
    depth: usize,
}

/// The copies of a batch of each run that one more batch of window depth costs: the batch
/// loaded, its rows in the window being sorted (keys and working memory), and their
/// gathered output.
const WINDOW_COPIES: usize = 3;

/// The most batches of each run a window merge loads ahead: windows of 100 runs of 8 Ki-row
/// batches then hold millions of rows, enough that a window's fixed costs (a device round
/// trip, one parallel gather) are small against its rows.
const MAX_WINDOW_DEPTH: usize = 8;

impl MergePlan {
    /// The merge of as many leading `runs` as `budget` bytes hold, into batches of up to
    /// `batch_size` rows (fewer when two of those would take over a quarter of the budget).
    fn within(runs: &[RunSizes], batch_size: usize, budget: usize) -> Self {
        let row_memory = runs
            .iter()
            .map(|r| r.max_row_memory)
            .max()
            .unwrap_or(0)
            .max(1);
        let batch_rows = (budget / 8 / row_memory).clamp(1, batch_size.max(1));
        let mut bytes = 2 * batch_rows * row_memory;
        let mut taken = 0;
        for run in runs {
            let more = MERGE_BATCHES_PER_RUN * run.max_batch_memory;
            if bytes + more > budget {
                break;
            }
            bytes += more;
            taken += 1;
        }
        let mut depth = 1;
        if taken == runs.len() && taken > 0 {
            let per_depth = WINDOW_COPIES * runs.iter().map(|r| r.max_batch_memory).sum::<usize>();
            depth = (1 + (budget - bytes) / per_depth.max(1)).min(MAX_WINDOW_DEPTH);
            bytes += (depth - 1) * per_depth;
        }
        Self {
            runs: taken,
            batch_rows,
            bytes,
            depth,
        }
    }
}

/// The name of a merge of spilled runs' reservation.
const SPILLED_MERGE: &str = "GpuSortExec merge of spilled runs (claimed in the session pool)";

/// A reservation named `name` in a pool of its own, without a limit, for a merge whose
/// memory is accounted elsewhere (see [`ClaimedMerge`]).
pub(super) fn unpooled(name: &'static str) -> MemoryReservation {
    let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
    MemoryConsumer::new(name).register(&pool)
}

/// Merges sorted `streams` (runs in input order) into batches of `batch_rows` rows with
/// DataFusion's streaming merge, ties broken by run index so the result stays stable.
pub(super) fn merge_runs(
    streams: Vec<SendableRecordBatchStream>,
    schema: SchemaRef,
    spec: &SortSpec,
    batch_rows: usize,
    reservation: MemoryReservation,
) -> Result<SendableRecordBatchStream> {
    StreamingMergeBuilder::new()
        .with_streams(streams)
        .with_schema(schema)
        .with_expressions(&spec.exprs)
        .with_metrics(BaselineMetrics::new(&ExecutionPlanMetricsSet::new(), 0))
        .with_batch_size(batch_rows)
        .with_fetch(spec.fetch)
        .with_reservation(reservation)
        .with_round_robin_tie_breaker(false)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spilled_batches_are_a_share_of_the_memory_held() {
        // 64 MiB held, 100 bytes a row: 1 MiB batches, about 10 000 rows.
        assert_eq!(spill_batch_rows(64 << 20, 100, 1 << 20), 10_485);
        // Never above the consumer's batch size, never under one row.
        assert_eq!(spill_batch_rows(64 << 20, 100, 8192), 8192);
        assert_eq!(spill_batch_rows(0, 1 << 20, 8192), 1);
        // Tiny limits still write batches of about a KiB.
        assert_eq!(spill_batch_rows(1000, 10, 8192), 102);
    }

    fn sizes(batch: usize, row: usize) -> RunSizes {
        RunSizes {
            max_batch_memory: batch,
            max_row_memory: row,
        }
    }

    #[test]
    fn a_merge_takes_the_leading_runs_its_budget_holds() {
        let runs = vec![sizes(1000, 10); 10];
        // Output: 2 batches of 8192 rows at 10 bytes; 4 batches of each run.
        let plan = MergePlan::within(&runs, 8192, 1 << 20);
        assert_eq!((plan.runs, plan.batch_rows), (10, 8192));
        // Room to spare: windows 8 batches deep, each level 3 batches of every run.
        assert_eq!(plan.depth, 8);
        assert_eq!(
            plan.bytes,
            2 * 8192 * 10 + 10 * 4 * 1000 + 7 * 3 * 10 * 1000
        );
        // Larger batches: just enough for every run is one batch deep, and each level more
        // takes 3 batches of every run.
        let large = vec![sizes(100_000, 10); 10];
        let base = 2 * 8192 * 10 + 10 * 4 * 100_000;
        let plan = MergePlan::within(&large, 8192, base + 2_999_999);
        assert_eq!((plan.runs, plan.depth, plan.bytes), (10, 1, base));
        let plan = MergePlan::within(&large, 8192, base + 3_000_000);
        assert_eq!(
            (plan.runs, plan.depth, plan.bytes),
            (10, 2, base + 3_000_000)
        );
        // A smaller budget: output batches cut to an eighth of it, fewer runs.
        let plan = MergePlan::within(&runs, 8192, 20_000);
        assert_eq!((plan.runs, plan.batch_rows, plan.depth), (3, 250, 1));
        assert!(plan.bytes <= 20_000);
        // Nothing fits.
        assert_eq!(MergePlan::within(&runs, 8192, 100).runs, 0);
    }
}
