//! Buffering a sort's input within its memory reservation, spilling sorted runs when full.
//!
//! Input partitions are drained concurrently, each by a task of its own. Each batch is
//! accounted in the reservation together with the working memory its rows need when they
//! are sorted. When the reservation cannot grow, every partition's buffered batches are
//! sorted as runs and written to disk ([`RunSpiller`]), the reservation is freed, and
//! buffering goes on.
//! Runs are kept per input partition in arrival order, so the order of the runs
//! (partition, then arrival) is the input order, and merging them with ties broken by run
//! index keeps the sort stable.
//!
//! With an early copy of some columns (a backend's [`EarlyColumns`], `gather/early.rs`),
//! each admitted batch is handed to it as well; the first spill lets it go. Where the
//! consumer allows it (`ResidentRequest::allow_holding_input`), a full reservation first
//! hands the host's copy of those columns to the device ([`EarlyColumns::take_over`]):
//! the buffered batches keep stand-ins of them (`gather/hollow.rs`), the reservation
//! shrinks to what they still hold, and buffering goes on without a spill. The input then
//! cannot be spilled any more: a reservation full again fails the sort.
//!
//! With a [`HashRouting`] (a sort that reads the input of a hash repartition itself), the
//! rows are spilled by output partition: each spill splits the buffered batches into the
//! hash partitions first, so every output partition finds its own sorted runs on disk.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayData, RecordBatch};
use arrow::datatypes::SchemaRef;
use datafusion::arrow;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryLimit, MemoryReservation};
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::hash_routing::HashRouting;
use super::resources::SortResources;
use super::run::{split_runs, SortSpec};
use super::spill::{spill_batch_rows, SpilledRun};
use crate::gather::EarlyColumns;
use crate::keys::working_limbs;

/// The whole input, once every partition is drained.
pub(super) enum Buffered {
    /// Everything fit: the batches in input order.
    InMemory(Vec<RecordBatch>),
    /// Some runs went to disk (then so did the rest): sorted runs in input order.
    OnDisk(Vec<SpilledRun>),
}

/// Every input partition drained, for a sort of several partitions at once.
pub(super) enum Drained {
    /// Nothing was spilled: each input partition's batches, in arrival order.
    InMemory(Vec<Vec<RecordBatch>>),
    /// Runs went to disk (then so did the rest): the sorted runs of each output partition
    /// (the input partitions themselves, or the routing's hash partitions), in input order.
    OnDisk(Vec<Vec<SpilledRun>>),
}

/// The input of one partition's sort while it is being drained.
pub(super) struct InputBuffer {
    /// The sort's properties and execution resources.
    resources: SortResources,
    /// Accounts the buffered batches (and the working memory of their sort).
    reservation: MemoryReservation,
    /// Buffered batches of each input partition, in arrival order.
    buffered: Vec<Vec<RecordBatch>>,
    /// Sorted runs on disk of each output partition, each with the input partition its
    /// rows came from, in arrival order.
    spilled: Vec<Vec<(usize, SpilledRun)>>,
    /// Where rows go when they are spilled; `None`: each stays in its input partition.
    routing: Option<Arc<HashRouting>>,
    /// The key limbs of the last schema seen (every batch of a stream shares one).
    limbs: Option<(SchemaRef, usize)>,
    /// The buffers the buffered batches hold, each accounted once.
    held: HeldBuffers,
    /// The backend's copy of some columns, made as batches are admitted (`gather/early.rs`);
    /// let go at the first spill.
    early: Option<Arc<dyn EarlyColumns>>,
    /// The payload bytes expected, where the copy may take over the host's columns when
    /// the reservation is full; `None` once it could not.
    hold: Option<u64>,
    /// The copy took over some columns: the input cannot be spilled any more.
    held_input: bool,
}

impl InputBuffer {
    /// An empty buffer for `partitions` input partitions.
    pub(super) fn new(
        partitions: usize,
        resources: SortResources,
        reservation: MemoryReservation,
    ) -> Self {
        Self {
            resources,
            reservation,
            buffered: (0..partitions).map(|_| Vec::new()).collect(),
            spilled: (0..partitions).map(|_| Vec::new()).collect(),
            routing: None,
            limbs: None,
            held: HeldBuffers::default(),
            early: None,
            hold: None,
            held_input: false,
        }
    }

    /// Spills rows into the output partitions of `routing` instead of their input's.
    pub(super) fn with_routing(mut self, routing: Arc<HashRouting>) -> Self {
        self.spilled = (0..routing.partitions()).map(|_| Vec::new()).collect();
        self.routing = Some(routing);
        self
    }

    /// This buffer handing each admitted batch to `early` (the backend's copy of some
    /// columns) until it spills.
    pub(super) fn with_early(mut self, early: Option<Arc<dyn EarlyColumns>>) -> Self {
        self.hold = match &early {
            Some(_) => self
                .resources
                .spec
                .resident
                .as_ref()
                .and_then(|request| request.holding_input()),
            None => None,
        };
        self.early = early;
        self
    }

    /// The backend's copy of some columns, once the input is drained: `None` when the
    /// buffer spilled (the copy was let go then) or had none.
    pub(super) fn take_early(&mut self) -> Option<Arc<dyn EarlyColumns>> {
        self.early.take()
    }

    /// The reservation the buffered batches are accounted in.
    pub(super) fn reservation(&self) -> &MemoryReservation {
        &self.reservation
    }

    /// Drains every input stream, buffering or spilling each batch. Each stream is polled
    /// by a task of its own (producing a batch, e.g. a memory table's projection, costs
    /// microseconds: 12 000 batches polled one after another took 30 ms), which hands its
    /// batches over in groups of up to [`FILL_GROUP_BATCHES`]; they are admitted here one by
    /// one, in each partition's order. Batches waiting to be admitted are counted in the
    /// pool (a reservation of the sort's consumer), and where the pool has a limit they
    /// hold at most a [`TRANSIT_SHARE`]th of it (and one more batch per input): a drain
    /// task hands its group over and waits before it takes more.
    pub(super) async fn fill(&mut self, inputs: Vec<SendableRecordBatchStream>) -> Result<()> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(inputs.len().max(1) * 2);
        let room = match self.resources.spiller.pool().memory_limit() {
            MemoryLimit::Finite(limit) => Some(TransitRoom::new(limit / TRANSIT_SHARE)),
            MemoryLimit::Infinite | MemoryLimit::Unknown => None,
        };
        let transit = Arc::new(self.reservation.new_empty());
        let mut drains = tokio::task::JoinSet::new();
        for (partition, stream) in inputs.into_iter().enumerate() {
            let group = Group {
                partition,
                transit: Arc::clone(&transit),
                room: room.clone(),
            };
            drains.spawn(drain_in_groups(group, stream, tx.clone()));
        }
        drop(tx);
        while let Some((partition, group)) = rx.recv().await {
            let batches = group?.take();
            for batch in batches {
                self.admit(partition, batch, &transit).await?;
            }
        }
        // Every sender is gone: each drain ended, or panicked (reported here).
        while let Some(ended) = drains.join_next().await {
            ended.map_err(|e| DataFusionError::External(Box::new(e)))?;
        }
        Ok(())
    }

    /// The drained input: in memory if nothing was spilled, else every run on disk; with
    /// the reservation that accounts what stays in memory (the buffered batches and their
    /// sort's working memory; nothing once every run is on disk). The caller holds it
    /// until the sorted output has been handed over, so the pool never grants that memory
    /// to another operator while the batches are still here.
    pub(super) async fn finish(mut self) -> Result<(Buffered, MemoryReservation)> {
        if self.spilled.iter().all(Vec::is_empty) {
            let batches = std::mem::take(&mut self.buffered)
                .into_iter()
                .flatten()
                .collect();
            return Ok((Buffered::InMemory(batches), self.reservation.take()));
        }
        self.spill_buffered().await?;
        let runs = std::mem::take(&mut self.spilled)
            .into_iter()
            .flatten()
            .map(|(_, run)| run)
            .collect();
        Ok((Buffered::OnDisk(runs), self.reservation.take()))
    }

    /// The drained input of each partition on its own, and the reservation its buffered
    /// batches are accounted in.
    pub(super) async fn finish_partitions(mut self) -> Result<(Drained, MemoryReservation)> {
        if self.spilled.iter().all(Vec::is_empty) {
            let buffered = std::mem::take(&mut self.buffered);
            return Ok((Drained::InMemory(buffered), self.reservation));
        }
        self.spill_buffered().await?;
        let spilled = std::mem::take(&mut self.spilled)
            .into_iter()
            .map(|mut runs| {
                // Input order: by input partition (stable: arrival order within one).
                runs.sort_by_key(|(input, _)| *input);
                runs.into_iter().map(|(_, run)| run).collect()
            })
            .collect();
        Ok((Drained::OnDisk(spilled), self.reservation))
    }

    async fn admit(
        &mut self,
        partition: usize,
        batch: RecordBatch,
        transit: &MemoryReservation,
    ) -> Result<()> {
        let limbs = match &self.limbs {
            Some((schema, limbs)) if Arc::ptr_eq(schema, batch.schema_ref()) => *limbs,
            _ => {
                let limbs = key_limbs(&self.resources.spec, batch.schema_ref());
                self.limbs = Some((batch.schema(), limbs));
                limbs
            }
        };
        let mut bytes = self.held.add(&batch) + self.working_bytes(batch.num_rows(), limbs);
        let mut granted = self.reservation.try_grow(bytes);
        if granted.is_err()
            && !self.buffered.iter().all(Vec::is_empty)
            && self.hand_over_to_device().await?
        {
            bytes = self.held.add(&batch) + self.working_bytes(batch.num_rows(), limbs);
            granted = self.reservation.try_grow(bytes);
        }
        if granted.is_err() && !self.buffered.iter().all(Vec::is_empty) {
            self.spill_buffered().await?;
            bytes = self.held.add(&batch) + self.working_bytes(batch.num_rows(), limbs);
            granted = self.reservation.try_grow(bytes);
        }
        if let Err(refused) = granted {
            // Nothing is buffered. Where batches waiting in transit (counted in the pool,
            // see `fill`) are what leaves no room, this one goes in all the same: they are
            // admitted (or spilled) next, and the sort must make progress.
            if transit.size() == 0 {
                return Err(refused.context(
                    "gpusort: buffering the sort's input (one batch and its working memory \
                     exceed the memory the pool grants)",
                ));
            }
            self.reservation.grow(bytes);
        }
        if let Some(early) = &self.early {
            early.add(partition, &batch);
        }
        self.buffered[partition].push(batch);
        Ok(())
    }

    /// Sorts every partition's buffered batches as runs, writes them to disk, frees the
    /// reservation. The runs are written in batches sized from the memory the reservation
    /// held, shared by the output partitions ([`spill_batch_rows`]), so that they merge
    /// within the limit that forced the spill.
    ///
    /// The runs are sorted and written concurrently, up to one per core
    /// ([`concurrent_spills`]): writing a run (Arrow IPC, compressed when the session asks)
    /// takes one thread, and one run at a time left the other cores idle while the input
    /// waited. They gather on the host, so that no more than the buffered batches and the
    /// batches being written are held (a device gather stages a window of the run in host
    /// memory outside the pool).
    async fn spill_buffered(&mut self) -> Result<()> {
        if self.held_input {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "gpusort: the sort's input does not fit its memory even with its payload \
                 columns held on the device: the key columns and the sort's working memory \
                 of {} rows need more than the {} bytes the pool grants it. Rerun with a \
                 larger memory limit, or by key range (`--key-ranges on`)",
                self.held.rows,
                self.reservation.size()
            )));
        }
        if let Some(early) = self.early.take() {
            early.abandon();
        }
        // Each output partition merges its own runs, all of them at once.
        let batch_rows = spill_batch_rows(
            self.reservation.size() / self.spilled.len().max(1),
            self.held.bytes_per_row(),
            self.resources.spec.batch_size,
        );
        let mut jobs = vec![];
        for input in 0..self.buffered.len() {
            let batches = std::mem::take(&mut self.buffered[input]);
            for (partition, batches) in self.output_partitions(input, batches).await? {
                for run in split_runs(batches, self.resources.spec.run_rows) {
                    jobs.push((input, partition, run));
                }
            }
        }
        let (runs, held) = (jobs.len(), self.reservation.size());
        crate::trace::event(|| {
            let rows: usize = jobs
                .iter()
                .flat_map(|(_, _, run)| run.iter().map(RecordBatch::num_rows))
                .sum();
            format!("spill: {runs} runs, {rows} rows, {held} bytes held")
        });
        let spec = Arc::new(SortSpec {
            device_gather_min_rows: usize::MAX,
            ..self.resources.spec.as_ref().clone()
        });
        let spills = jobs.into_iter().map(|(input, partition, run)| {
            let SortResources {
                metrics, spiller, ..
            } = self.resources.clone();
            let spec = Arc::clone(&spec);
            async move {
                let cancel = spec.cancel.clone();
                let spilled = cancel
                    .blocking(move || spiller.sort_to_disk(&spec, run, batch_rows, &metrics))
                    .await?;
                Ok::<_, DataFusionError>((input, partition, spilled))
            }
        });
        // In order, so each output partition's runs stay in arrival order.
        let spilled: Vec<_> = futures::stream::iter(spills)
            .buffered(concurrent_spills())
            .try_collect()
            .await?;
        for (input, partition, run) in spilled {
            self.spilled[partition].extend(run.map(|run| (input, run)));
        }
        crate::trace::event(|| format!("spill: {runs} runs written"));
        self.reservation.free();
        self.held.clear();
        Ok(())
    }

    /// Working memory of a run of `rows` rows whose keys have `limbs` value limbs: less
    /// once the input is held on the device, whose sort encodes the keys there.
    fn working_bytes(&self, rows: usize, limbs: usize) -> usize {
        match self.held_input {
            true => rows.saturating_mul(HELD_WORKING_BYTES_PER_ROW),
            false => working_bytes(rows, limbs),
        }
    }

    /// Hands the host's copy of the early copy's columns over to it
    /// ([`EarlyColumns::take_over`]), where the consumer allows it: the buffered batches
    /// keep stand-ins, and the reservation shrinks to what they still hold (with the
    /// working memory of a sort that encodes its keys on the device). `false` where nothing
    /// was handed over (the caller spills then, unless some was before).
    async fn hand_over_to_device(&mut self) -> Result<bool> {
        let (Some(early), Some(payload)) = (self.early.clone(), self.hold) else {
            return Ok(false);
        };
        let mut buffered = std::mem::take(&mut self.buffered);
        let cancel = self.resources.spec.cancel.clone();
        let (buffered, replaced) = cancel
            .blocking(move || {
                let replaced = early.take_over(&mut buffered, payload);
                Ok((buffered, replaced))
            })
            .await?;
        self.buffered = buffered;
        if replaced == 0 {
            if !self.held_input {
                self.hold = None;
            }
            return Ok(false);
        }
        self.held_input = true;
        self.resources.metrics.held_arrays.add(replaced);
        self.held = HeldBuffers::default();
        for batch in self.buffered.iter().flatten() {
            self.held.add(batch);
        }
        let size = self.held.bytes + self.held.rows * HELD_WORKING_BYTES_PER_ROW;
        self.reservation.resize(size);
        crate::trace::event(|| {
            format!(
                "buffer: {replaced} arrays held on the device; {} rows buffered in {size} bytes",
                self.held.rows
            )
        });
        Ok(true)
    }

    /// The batches of input partition `input` by output partition.
    async fn output_partitions(
        &self,
        input: usize,
        batches: Vec<RecordBatch>,
    ) -> Result<Vec<(usize, Vec<RecordBatch>)>> {
        let Some(routing) = self.routing.clone() else {
            return Ok(vec![(input, batches)]);
        };
        let cancel = &self.resources.spec.cancel;
        let parts = cancel.blocking(move || routing.split(batches)).await?;
        Ok(parts.into_iter().enumerate().collect())
    }
}

/// Runs one spill sorts and writes at once: one per core.
fn concurrent_spills() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Batches a drain task collects before handing them over (fewer when the room for
/// batches in transit runs out).
const FILL_GROUP_BATCHES: usize = 32;

/// Batches waiting to be admitted hold at most this share of a pool's limit (and one more
/// batch per input).
pub(super) const TRANSIT_SHARE: usize = 32;

/// The room batches in transit may take where the pool has a limit: a semaphore of KiB.
#[derive(Clone)]
struct TransitRoom {
    kib: Arc<Semaphore>,
    total_kib: u32,
}

impl TransitRoom {
    fn new(bytes: usize) -> Self {
        let total_kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS as u32);
        Self {
            kib: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }

    /// The KiB a batch of `bytes` takes (all of the room at most, so one always fits).
    fn kib(&self, bytes: usize) -> u32 {
        u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.total_kib)
    }
}

/// How one input partition's drain task groups its batches.
struct Group {
    partition: usize,
    /// Where the batches of groups not yet admitted are counted.
    transit: Arc<MemoryReservation>,
    /// The room they may take; `None`: no limit.
    room: Option<TransitRoom>,
}

/// Batches on their way to being admitted: counted in the pool and holding their room
/// until they are taken (or dropped).
struct InTransit {
    batches: Vec<RecordBatch>,
    bytes: usize,
    transit: Arc<MemoryReservation>,
    room: Option<OwnedSemaphorePermit>,
}

impl InTransit {
    fn new(transit: &Arc<MemoryReservation>) -> Self {
        Self {
            batches: Vec::with_capacity(FILL_GROUP_BATCHES),
            bytes: 0,
            transit: Arc::clone(transit),
            room: None,
        }
    }

    fn push(&mut self, batch: RecordBatch, bytes: usize, room: Option<OwnedSemaphorePermit>) {
        self.transit.grow(bytes);
        self.bytes += bytes;
        self.batches.push(batch);
        match (&mut self.room, room) {
            (Some(held), Some(more)) => held.merge(more),
            (held, more) => *held = held.take().or(more),
        }
    }

    /// The batches, no longer in transit.
    fn take(mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.batches)
    }
}

impl Drop for InTransit {
    fn drop(&mut self) {
        self.transit.shrink(self.bytes);
    }
}

/// A group of batches in transit, or the error that ended the drain.
type GroupMessage = (usize, Result<InTransit>);

/// One input partition's batches, sent in groups (the empty ones dropped); an error ends
/// the drain after it is sent.
async fn drain_in_groups(
    group: Group,
    mut stream: SendableRecordBatchStream,
    tx: tokio::sync::mpsc::Sender<GroupMessage>,
) {
    let mut batches = InTransit::new(&group.transit);
    while let Some(batch) = stream.next().await {
        let batch = match batch {
            Ok(batch) if batch.num_rows() == 0 => continue,
            Ok(batch) => batch,
            Err(error) => {
                let _ = tx.send((group.partition, Err(error))).await;
                return;
            }
        };
        let bytes = memory_once(&batch);
        let mut room = None;
        if let Some(transit_room) = &group.room {
            let kib = transit_room.kib(bytes);
            room = match Arc::clone(&transit_room.kib).try_acquire_many_owned(kib) {
                Ok(permit) => Some(permit),
                Err(_) => {
                    // No room: hand over what this task holds (its room comes back once
                    // admitted), then wait for room.
                    if !hand_over(&group, &mut batches, &tx).await {
                        return;
                    }
                    match Arc::clone(&transit_room.kib).acquire_many_owned(kib).await {
                        Ok(permit) => Some(permit),
                        Err(_) => return,
                    }
                }
            };
        }
        batches.push(batch, bytes, room);
        if batches.batches.len() == FILL_GROUP_BATCHES
            && !hand_over(&group, &mut batches, &tx).await
        {
            return;
        }
    }
    hand_over(&group, &mut batches, &tx).await;
}

/// Sends the batches `group`'s task holds, if any, and starts an empty group; `false` when
/// the receiver is gone.
async fn hand_over(
    group: &Group,
    batches: &mut InTransit,
    tx: &tokio::sync::mpsc::Sender<GroupMessage>,
) -> bool {
    if batches.batches.is_empty() {
        return true;
    }
    let full = std::mem::replace(batches, InTransit::new(&group.transit));
    tx.send((group.partition, Ok(full))).await.is_ok()
}

/// The buffers that buffered batches hold, by allocation. Batches that share a buffer
/// (slices of one array, as a memory table's scan yields them at the session's batch
/// size) hold it once, so it is accounted once: counting each slice's whole buffer, 2 000
/// slices of a 4 MiB table were accounted as 8 GiB and spilled the sort 40 times under a
/// 256 MiB pool.
/// The bytes of `batch`'s buffers, each counted once: arrays decoded from one IPC message
/// may all be slices of its body (a spill file's small buffers are stored uncompressed),
/// which `get_array_memory_size` would count once per array.
fn memory_once(batch: &RecordBatch) -> usize {
    HeldBuffers::default().add(batch)
}

#[derive(Debug, Default)]
struct HeldBuffers {
    /// The held buffers' addresses.
    buffers: HashSet<usize>,
    /// Their bytes in all.
    bytes: usize,
    /// The rows of the batches holding them.
    rows: usize,
}

impl HeldBuffers {
    /// The bytes of `batch`'s buffers that are not held yet; they are held from now on.
    fn add(&mut self, batch: &RecordBatch) -> usize {
        let added = batch
            .columns()
            .iter()
            .map(|column| self.add_data(&column.to_data()))
            .sum();
        self.bytes += added;
        self.rows += batch.num_rows();
        added
    }

    fn add_data(&mut self, data: &ArrayData) -> usize {
        let mut bytes = 0;
        let nulls = data.nulls().map(|n| n.buffer());
        for buffer in data.buffers().iter().chain(nulls) {
            if self.buffers.insert(buffer.data_ptr().as_ptr() as usize) {
                bytes += buffer.capacity();
            }
        }
        bytes
            + data
                .child_data()
                .iter()
                .map(|child| self.add_data(child))
                .sum::<usize>()
    }

    /// The held bytes per buffered row (at least 1).
    fn bytes_per_row(&self) -> usize {
        (self.bytes / self.rows.max(1)).max(1)
    }

    /// Nothing is held any more (the batches were spilled).
    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// Host bytes a row of a run held on the device needs to be sorted beyond its key columns:
/// its keys are encoded on the device, and the host receives its permutation (4 bytes)
/// and ids of the same size.
pub(crate) const HELD_WORKING_BYTES_PER_ROW: usize = 8;

/// Bytes the encode and sort steps of a run of `rows` rows need beyond the buffered input
/// (limbs, packed words, the sort's double buffers), for keys of `limbs` value limbs in all
/// (see [`crate::keys::working_limbs`]).
pub(super) fn working_bytes(rows: usize, limbs: usize) -> usize {
    rows.saturating_mul(8 * (2 * limbs + 4))
}

/// The value limbs of `spec`'s keys over batches of `schema` (1 per key whose type cannot
/// be resolved).
pub(super) fn key_limbs(spec: &SortSpec, schema: &arrow::datatypes::Schema) -> usize {
    spec.exprs
        .iter()
        .map(|e| e.expr.data_type(schema).map_or(1, |t| working_limbs(&t)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array};
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryConsumer, MemoryPool};
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

    #[tokio::test]
    async fn batches_in_transit_are_counted_and_wait_for_room() {
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
        let batch = RecordBatch::try_from_iter([("v", values)]).unwrap();
        let size = memory_once(&batch);
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let transit = Arc::new(MemoryConsumer::new("sort").register(&pool));
        let schema = batch.schema();
        let batches = futures::stream::iter((0..10).map(move |_| Ok(batch.clone())));
        let stream = Box::pin(RecordBatchStreamAdapter::new(schema, batches));
        let (tx, mut rx) = tokio::sync::mpsc::channel(100);
        // Room for two and a half batches.
        let group = Group {
            partition: 3,
            transit: Arc::clone(&transit),
            room: Some(TransitRoom::new(size * 5 / 2)),
        };
        let drain = tokio::spawn(drain_in_groups(group, stream, tx));
        // The task hands over what fits and waits: two batches sent, counted in the pool.
        let (partition, first) = rx.recv().await.unwrap();
        assert_eq!(partition, 3);
        let first = first.unwrap();
        assert_eq!(first.batches.len(), 2);
        tokio::task::yield_now().await;
        assert_eq!(pool.reserved(), 2 * size);
        assert!(!drain.is_finished());
        // Taking them gives their room back; the rest follows two at a time.
        let mut groups = vec![first.take().len()];
        while let Some((_, group)) = rx.recv().await {
            groups.push(group.unwrap().take().len());
        }
        assert_eq!(groups, vec![2, 2, 2, 2, 2]);
        assert_eq!(pool.reserved(), 0);
        drain.await.unwrap();
    }
}
