//! Sorted runs on disk.
//!
//! When a sort's input outgrows its memory reservation, the buffered rows are sorted as runs
//! (on the backend, like any run) and written through DataFusion's `SpillManager`: Arrow IPC
//! files in the runtime's temporary directory, counted in the operator's spill metrics and
//! the disk manager's limit. At the end every run is read back as a stream and merged.
//!
//! Merging many runs at once needs a batch of each in memory. When the pool cannot hold
//! that, the first runs that fit are merged into one longer run on disk, put back in their
//! place, and so on until the rest fits: consecutive runs merged with ties broken by run
//! index, so the sort stays stable (DataFusion's own multi-level merge appends merged runs
//! at the end, which would reorder ties).

use std::sync::Arc;

use arrow::array::{Array, AsArray, GenericByteViewArray, RecordBatch};
use arrow::datatypes::{ByteViewType, DataType, SchemaRef};
use datafusion::arrow;
use datafusion::common::{resources_err, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SpillFile;
use datafusion::physical_plan::metrics::SpillMetrics;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet};
use datafusion::physical_plan::sorts::streaming_merge::StreamingMergeBuilder;
use datafusion::physical_plan::spill::SpillManager;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;

use super::metrics::SortMetrics;
use super::run::{RunSorter, SortSpec};

/// One sorted run written to disk.
pub(super) struct SpilledRun {
    /// The IPC file.
    file: Arc<dyn SpillFile>,
    /// The largest batch written, in memory (for the reader's estimates).
    max_batch_memory: usize,
}

/// Writes sorted runs of one partition's sort to disk and reads them back.
#[derive(Clone)]
pub(super) struct RunSpiller {
    manager: Arc<SpillManager>,
}

impl RunSpiller {
    /// A spiller writing batches of `schema` into `env`'s temporary files.
    pub(super) fn new(env: Arc<RuntimeEnv>, metrics: SpillMetrics, schema: SchemaRef) -> Self {
        Self {
            manager: Arc::new(SpillManager::new(env, metrics, schema)),
        }
    }

    /// Sorts `batches` (consecutive input rows) as one run and writes the sorted rows to a
    /// spill file, batch by batch; `None` when the run is empty. Blocking.
    pub(super) fn sort_to_disk(
        &self,
        spec: &SortSpec,
        batches: Vec<RecordBatch>,
        metrics: &SortMetrics,
    ) -> Result<Option<SpilledRun>> {
        let mut file = self
            .manager
            .create_in_progress_file("GpuSortExec: a sorted run")?;
        let mut max_batch_memory = 0;
        let mut write_error = None;
        RunSorter::new(spec, metrics).sort_run(batches, |batch| {
            max_batch_memory = max_batch_memory.max(memory_when_read(&batch));
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
        Ok(file.finish()?.map(|file| SpilledRun {
            file,
            max_batch_memory,
        }))
    }

    /// The rows of `run`, in sorted order.
    pub(super) fn read(&self, run: SpilledRun) -> Result<SendableRecordBatchStream> {
        self.manager
            .read_spill_as_stream(run.file, Some(run.max_batch_memory))
    }

    /// Streams of `runs` (in input order) that one merge can take within the memory the
    /// pool grants `reservation`'s consumer, merging leading runs on disk until it can.
    pub(super) async fn streams_within_memory(
        &self,
        mut runs: Vec<SpilledRun>,
        spec: &SortSpec,
        reservation: &MemoryReservation,
    ) -> Result<Vec<SendableRecordBatchStream>> {
        loop {
            let fitting = runs_that_fit(&runs, reservation);
            if fitting >= runs.len() {
                return runs.into_iter().map(|run| self.read(run)).collect();
            }
            if fitting < 2 {
                return resources_err!(
                    "gpusort: merging sorted runs needs a batch of two runs in memory \
                     ({} bytes each), more than the memory pool grants",
                    runs.iter().map(|r| r.max_batch_memory).max().unwrap_or(0)
                );
            }
            let rest = runs.split_off(fitting);
            let merged = self.merge_to_disk(runs, spec, reservation).await?;
            runs = merged.into_iter().chain(rest).collect();
        }
    }

    /// Merges consecutive `runs` into one run on disk.
    async fn merge_to_disk(
        &self,
        runs: Vec<SpilledRun>,
        spec: &SortSpec,
        reservation: &MemoryReservation,
    ) -> Result<Option<SpilledRun>> {
        let streams = runs
            .into_iter()
            .map(|run| self.read(run))
            .collect::<Result<Vec<_>>>()?;
        let schema = Arc::clone(self.manager.schema());
        let mut merged = merge_runs(streams, schema, spec, reservation.new_empty())?;
        let mut file = self
            .manager
            .create_in_progress_file("GpuSortExec: merged sorted runs")?;
        let mut max_batch_memory = 0;
        while let Some(batch) = merged.next().await {
            let batch = batch?;
            max_batch_memory = max_batch_memory.max(memory_when_read(&batch));
            file.append_batch(&batch)?;
        }
        Ok(file.finish()?.map(|file| SpilledRun {
            file,
            max_batch_memory,
        }))
    }
}

/// The memory `batch` takes once written and read back. The spill writer compacts string
/// and binary views (a view array made by a gather shares the input's whole data buffers,
/// which `get_array_memory_size` would count in full): views, nulls and the bytes of the
/// values not inlined in their view.
fn memory_when_read(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|array| match array.data_type() {
            DataType::Utf8View => view_memory(array.as_string_view()),
            DataType::BinaryView => view_memory(array.as_binary_view()),
            _ => array.get_array_memory_size(),
        })
        .sum()
}

fn view_memory<T: ByteViewType + ?Sized>(array: &GenericByteViewArray<T>) -> usize {
    let nulls = array.nulls().map_or(0, |n| n.buffer().capacity());
    16 * array.len() + nulls + array.total_buffer_bytes_used()
}

/// How many leading `runs` one merge can take, as far as the pool grants the memory now:
/// two output batches, and per run three batches (the reader's, the cursor's, one kept by
/// rows not yet emitted) — the merge accounts a read batch at about 1.7 times its size
/// when written, cursor rows included.
fn runs_that_fit(runs: &[SpilledRun], reservation: &MemoryReservation) -> usize {
    let probe = reservation.new_empty();
    let largest = runs.iter().map(|r| r.max_batch_memory).max().unwrap_or(0);
    if probe.try_grow(2 * largest).is_err() {
        return 0;
    }
    runs.iter()
        .take_while(|run| probe.try_grow(3 * run.max_batch_memory).is_ok())
        .count()
}

/// Merges sorted `streams` (runs in input order) with DataFusion's streaming merge, ties
/// broken by run index so the result stays stable.
pub(super) fn merge_runs(
    streams: Vec<SendableRecordBatchStream>,
    schema: SchemaRef,
    spec: &SortSpec,
    reservation: MemoryReservation,
) -> Result<SendableRecordBatchStream> {
    StreamingMergeBuilder::new()
        .with_streams(streams)
        .with_schema(schema)
        .with_expressions(&spec.exprs)
        .with_metrics(BaselineMetrics::new(&ExecutionPlanMetricsSet::new(), 0))
        .with_batch_size(spec.batch_size)
        .with_fetch(spec.fetch)
        .with_reservation(reservation)
        .with_round_robin_tie_breaker(false)
        .build()
}
