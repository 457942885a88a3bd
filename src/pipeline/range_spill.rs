//! Every input row spilled, unsorted, into the file of its key range (`key_ranges`).
//!
//! Each scan partition routes its own batches: a row goes to the range its keys fall in,
//! gathered with the partition's other rows of that range into batches of a few thousand
//! rows (the coalescers' memory is counted in the pool; when it cannot grow, what they
//! hold is written at once), and written to the partition's file of that range (Arrow IPC
//! through DataFusion's spill files: the session's spill compression, directory and disk
//! limit). A range is then its files read in partition order: the scan's partitions take
//! the input in order, so a range's rows come back in input order, and a stable sort of
//! them keeps ties as the whole job would.

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::compute::BatchCoalescer;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::config::SpillCompression;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::SpillFile;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, SpillMetrics};
use datafusion::physical_plan::spill::SpillManager;
use datafusion::physical_plan::{execute_stream_partitioned, ExecutionPlan};
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use super::error::PipelineError;
use super::key_ranges::KeyRanges;
use crate::exec::views::array_memory;

/// The spilled rows of a job, by range and scan partition.
pub(super) struct RangeFiles {
    /// `files[range][partition]`: `None` where the partition had no row of the range.
    pub files: Vec<Vec<Option<Arc<dyn SpillFile>>>>,
    /// Rows spilled into each range.
    pub rows: Vec<u64>,
    /// Their bytes in memory (as written, before compression) in each range.
    pub memory: Vec<u64>,
    /// Bytes written to disk.
    pub bytes: u64,
}

/// Runs `plan` (the job's unsorted input) and spills each row into its range's file of its
/// partition, in batches of up to `batch_rows` rows compressed with `compression`.
pub(super) async fn spill_by_range(
    ctx: &SessionContext,
    plan: Arc<dyn ExecutionPlan>,
    ranges: Arc<KeyRanges>,
    batch_rows: usize,
    compression: SpillCompression,
) -> Result<RangeFiles, PipelineError> {
    let schema = plan.schema();
    let env = ctx.runtime_env();
    let metrics = ExecutionPlanMetricsSet::new();
    let count = ranges.count();
    let streams = execute_stream_partitioned(plan, ctx.task_ctx()).map_err(
        PipelineError::execution("reading and spilling by key range"),
    )?;
    let mut tasks = tokio::task::JoinSet::new();
    for (partition, mut stream) in streams.into_iter().enumerate() {
        let manager = Arc::new(
            SpillManager::new(
                Arc::clone(&env),
                SpillMetrics::new(&metrics, partition),
                Arc::clone(&schema),
            )
            .with_compression_type(compression),
        );
        let reservation = MemoryConsumer::new(format!(
            "gpusort sort: rows routed to key ranges [{partition}]"
        ))
        .register(&env.memory_pool);
        let ranges = Arc::clone(&ranges);
        let schema = Arc::clone(&schema);
        tasks.spawn(async move {
            let mut router = Router::new(manager, schema, count, batch_rows, reservation);
            while let Some(batch) = stream.next().await {
                router.add(&batch?, &ranges)?;
            }
            let files = router.finish()?;
            Ok::<_, DataFusionError>((partition, files, router.rows, router.memory))
        });
    }
    let mut spilled = RangeFiles {
        files: vec![Vec::new(); count],
        rows: vec![0; count],
        memory: vec![0; count],
        bytes: 0,
    };
    let mut by_partition = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let done = done
            .map_err(|e| DataFusionError::External(Box::new(e)))
            .and_then(|r| r)
            .map_err(PipelineError::execution(
                "reading and spilling by key range",
            ))?;
        by_partition.push(done);
    }
    // Each range's files in partition order: the input's order.
    by_partition.sort_by_key(|(partition, ..)| *partition);
    for (_, files, rows, memory) in by_partition {
        for (range, file) in files.into_iter().enumerate() {
            spilled.files[range].push(file);
            spilled.rows[range] += rows[range];
            spilled.memory[range] += memory[range];
        }
    }
    spilled.bytes = metrics
        .clone_inner()
        .spilled_bytes()
        .map_or(0, |b| b as u64);
    Ok(spilled)
}

/// One range's file being written: given a batch, appends it; given none, finishes the
/// file (`None`: nothing was written). DataFusion does not name its in-progress spill
/// file's type, so it is held in this closure.
type RangeWriter =
    Box<dyn FnMut(Option<&RecordBatch>) -> Result<Option<Arc<dyn SpillFile>>> + Send>;

fn range_writer(manager: &SpillManager) -> Result<RangeWriter> {
    let mut file = manager.create_in_progress_file("gpusort sort: rows of one key range")?;
    Ok(Box::new(move |batch| match batch {
        Some(batch) => file.append_batch(batch).map(|_| None),
        None => file.finish(),
    }))
}

/// One partition's rows on their way to its range files.
struct Router {
    manager: Arc<SpillManager>,
    coalescers: Vec<BatchCoalescer>,
    writers: Vec<Option<RangeWriter>>,
    /// Row indices of the current batch, by range (kept between batches).
    picks: Vec<Vec<u32>>,
    rows: Vec<u64>,
    /// Bytes of the batches written, by range.
    memory: Vec<u64>,
    reservation: datafusion::execution::memory_pool::MemoryReservation,
}

impl Router {
    fn new(
        manager: Arc<SpillManager>,
        schema: SchemaRef,
        ranges: usize,
        batch_rows: usize,
        reservation: datafusion::execution::memory_pool::MemoryReservation,
    ) -> Self {
        Self {
            manager,
            coalescers: (0..ranges)
                .map(|_| BatchCoalescer::new(Arc::clone(&schema), batch_rows.max(1)))
                .collect(),
            writers: (0..ranges).map(|_| None).collect(),
            picks: vec![Vec::new(); ranges],
            rows: vec![0; ranges],
            memory: vec![0; ranges],
            reservation,
        }
    }

    /// Routes the rows of `batch`, writing every batch of a range that fills up.
    fn add(&mut self, batch: &RecordBatch, ranges: &KeyRanges) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let range_of = ranges.route(batch)?;
        for picks in &mut self.picks {
            picks.clear();
        }
        for (row, &range) in range_of.iter().enumerate() {
            self.picks[range as usize].push(row as u32);
        }
        for range in 0..self.picks.len() {
            let picked = self.picks[range].len();
            if picked == 0 {
                continue;
            }
            self.rows[range] += picked as u64;
            if picked == batch.num_rows() {
                self.coalescers[range].push_batch(batch.clone())?;
            } else {
                let indices = UInt32Array::from(self.picks[range].clone());
                self.coalescers[range].push_batch_with_indices(batch.clone(), &indices)?;
            }
            self.write_completed(range)?;
        }
        let held: usize = self.coalescers.iter().map(BatchCoalescer::size).sum();
        if self.reservation.try_resize(held).is_err() {
            // The pool is full: what is gathered goes to disk now, in smaller batches.
            for range in 0..self.coalescers.len() {
                self.coalescers[range].finish_buffered_batch()?;
                self.write_completed(range)?;
            }
            let held = self.coalescers.iter().map(BatchCoalescer::size).sum();
            self.reservation.resize(held);
        }
        Ok(())
    }

    fn write_completed(&mut self, range: usize) -> Result<()> {
        while let Some(batch) = self.coalescers[range].next_completed_batch() {
            let writer = match &mut self.writers[range] {
                Some(writer) => writer,
                empty => empty.insert(range_writer(&self.manager)?),
            };
            // Bytes the rows take (a coalesced string view's buffers have room to spare).
            self.memory[range] += batch
                .columns()
                .iter()
                .map(|c| array_memory(c.as_ref()) as u64)
                .sum::<u64>();
            writer(Some(&batch))?;
        }
        Ok(())
    }

    /// Writes what is left and closes the files: one per range (`None`: no row).
    fn finish(&mut self) -> Result<Vec<Option<Arc<dyn SpillFile>>>> {
        let mut files = Vec::with_capacity(self.writers.len());
        for range in 0..self.coalescers.len() {
            self.coalescers[range].finish_buffered_batch()?;
            self.write_completed(range)?;
            files.push(match self.writers[range].take() {
                Some(mut writer) => writer(None)?,
                None => None,
            });
        }
        self.reservation.free();
        Ok(files)
    }
}
