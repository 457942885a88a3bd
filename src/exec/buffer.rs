//! Buffering a sort's input within its memory reservation, spilling sorted runs when full.
//!
//! Input partitions are drained concurrently. Each batch is accounted in the reservation
//! together with the working memory its rows need when they are sorted. When the
//! reservation cannot grow, every partition's buffered batches are sorted as runs and
//! written to disk ([`RunSpiller`]), the reservation is freed, and buffering goes on.
//! Runs are kept per input partition in arrival order, so the order of the runs
//! (partition, then arrival) is the input order, and merging them with ties broken by run
//! index keeps the sort stable.

use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::arrow;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;

use super::metrics::SortMetrics;
use super::sorter::{key_limbs, split_runs, working_bytes, SortSpec};
use super::spill::{RunSpiller, SpilledRun};

/// The whole input, once every partition is drained.
pub enum Buffered {
    /// Everything fit: the batches in input order.
    InMemory(Vec<RecordBatch>),
    /// Some runs went to disk (then so did the rest): sorted runs in input order.
    OnDisk(Vec<SpilledRun>),
}

/// The input of one partition's sort while it is being drained.
pub struct InputBuffer {
    spec: Arc<SortSpec>,
    metrics: SortMetrics,
    reservation: MemoryReservation,
    spiller: RunSpiller,
    /// Buffered batches of each input partition, in arrival order.
    buffered: Vec<Vec<RecordBatch>>,
    /// Sorted runs on disk of each input partition, in arrival order.
    spilled: Vec<Vec<SpilledRun>>,
}

impl InputBuffer {
    /// An empty buffer for `partitions` input partitions.
    pub fn new(
        partitions: usize,
        spec: Arc<SortSpec>,
        metrics: SortMetrics,
        reservation: MemoryReservation,
        spiller: RunSpiller,
    ) -> Self {
        Self {
            spec,
            metrics,
            reservation,
            spiller,
            buffered: (0..partitions).map(|_| Vec::new()).collect(),
            spilled: (0..partitions).map(|_| Vec::new()).collect(),
        }
    }

    /// The reservation the buffered batches are accounted in.
    pub fn reservation(&self) -> &MemoryReservation {
        &self.reservation
    }

    /// Drains every input stream (concurrently), buffering or spilling each batch.
    pub async fn fill(&mut self, inputs: Vec<SendableRecordBatchStream>) -> Result<()> {
        let tagged = inputs
            .into_iter()
            .enumerate()
            .map(|(partition, stream)| stream.map(move |batch| (partition, batch)));
        let mut all = futures::stream::select_all(tagged);
        while let Some((partition, batch)) = all.next().await {
            let batch = batch?;
            if batch.num_rows() > 0 {
                self.admit(partition, batch).await?;
            }
        }
        Ok(())
    }

    /// The drained input: in memory if nothing was spilled, else every run on disk.
    pub async fn finish(mut self) -> Result<Buffered> {
        if self.spilled.iter().all(Vec::is_empty) {
            return Ok(Buffered::InMemory(
                std::mem::take(&mut self.buffered)
                    .into_iter()
                    .flatten()
                    .collect(),
            ));
        }
        self.spill_buffered().await?;
        Ok(Buffered::OnDisk(
            std::mem::take(&mut self.spilled)
                .into_iter()
                .flatten()
                .collect(),
        ))
    }

    /// The drained input of each partition on its own, and the reservation its buffered
    /// batches are accounted in: every partition in memory if nothing was spilled, else
    /// every partition's runs on disk.
    pub async fn finish_partitions(mut self) -> Result<(Vec<Buffered>, MemoryReservation)> {
        let spilled = !self.spilled.iter().all(Vec::is_empty);
        if spilled {
            self.spill_buffered().await?;
        }
        let partitions = if spilled {
            std::mem::take(&mut self.spilled)
                .into_iter()
                .map(Buffered::OnDisk)
                .collect()
        } else {
            std::mem::take(&mut self.buffered)
                .into_iter()
                .map(Buffered::InMemory)
                .collect()
        };
        Ok((partitions, self.reservation))
    }

    async fn admit(&mut self, partition: usize, batch: RecordBatch) -> Result<()> {
        let limbs = key_limbs(&self.spec, &batch.schema());
        let bytes = batch.get_array_memory_size() + working_bytes(batch.num_rows(), limbs);
        if let Err(e) = self.reservation.try_grow(bytes) {
            if self.buffered.iter().all(Vec::is_empty) {
                return Err(e.context(
                    "gpusort: buffering the sort's input (one batch and its working memory \
                     exceed the memory limit)",
                ));
            }
            self.spill_buffered().await?;
            self.reservation
                .try_grow(bytes)
                .map_err(|e| e.context("gpusort: buffering the sort's input after spilling"))?;
        }
        self.buffered[partition].push(batch);
        Ok(())
    }

    /// Sorts every partition's buffered batches as runs, writes them to disk, frees the
    /// reservation.
    async fn spill_buffered(&mut self) -> Result<()> {
        for (partition, batches) in self.buffered.iter_mut().enumerate() {
            for run in split_runs(std::mem::take(batches), self.spec.run_rows) {
                let (spec, metrics, spiller) = (
                    Arc::clone(&self.spec),
                    self.metrics.clone(),
                    self.spiller.clone(),
                );
                let spilled =
                    tokio::task::spawn_blocking(move || spiller.sort_to_disk(&spec, run, &metrics))
                        .await
                        .map_err(|e| DataFusionError::External(Box::new(e)))??;
                self.spilled[partition].extend(spilled);
            }
        }
        self.reservation.free();
        Ok(())
    }
}
