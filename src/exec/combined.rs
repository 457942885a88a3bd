//! One sort for all partitions of a `GpuSortExec` that keeps its input's partitioning.
//!
//! ```text
//!  execute(0) ──┐                        the first call starts one shared task:
//!  execute(1) ──┼──► CombinedSort ──►    drain all N input partitions into one buffer
//!  …            │   (one per execution)  ├ fits one run: sort every row at once, each
//!  execute(N-1)─┘                        │   partition a segment (rows never leave it)
//!                                        └ else: each partition keeps its own input
//!  with a hash routing (the sort reads the input of a hash repartition, `hash_routing.rs`):
//!    M input partitions drained; one run: every row sorted by (hash partition, keys), so
//!    output partition i is a contiguous slice; else the rows are split into the N hash
//!    partitions (spilled runs already are) and each sorts its own
//!  output partition i: awaits the shared result, then gathers its slice of the
//!  permutation (in parallel with the other partitions), or sorts its own input as a
//!  partition sorted alone would (runs, spills, merge)
//! ```
//!
//! Why: below a hash repartition (a window's `PARTITION BY`) N separate sorts would each
//! upload, sort and gather their share while holding the device in turn; one sort does
//! one upload and one device sort for all of them. Reading the repartition's input
//! directly also saves the repartition's copy of every row into per-partition batches.
//!
//! Any consumer order works: the shared task drains every input partition itself, so
//! partition i can be read to its end before partition j is even executed. A partition
//! executed a second time starts a new execution (and so a new shared sort); the shared
//! task ends, aborted and its blocking jobs cancelled, when the last of its output streams
//! is dropped.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::future::{BoxFuture, Shared};
use futures::FutureExt;
use rayon::prelude::*;
use tokio::sync::mpsc::Sender;
use tokio::sync::oneshot;

use super::buffer::{Buffered, Drained, InputBuffer};
use super::cancel::Cancel;
use super::hash_routing::HashRouting;
use super::metrics::SortMetrics;
use super::partition_top::{PartitionTop, TopCut};
use super::resources::SortResources;
use super::run::{Apart, RunSorter, SortSpec, WindowColumns};
use super::spill::MergeMemory;
use super::stream::{emit_buffered, OUTPUT_CHANNEL_BATCHES};
use crate::gather::{PayloadGather, PayloadStats, RunRows};
use crate::sort::{Permutation, Segments};
use crate::trace;

/// The shared sorts of one `GpuSortExec`: which execution each partition joins.
#[derive(Debug, Default)]
pub(super) struct CombinedSorts {
    current: Mutex<Option<Claims>>,
}

/// The execution being joined and which of its output partitions were executed.
#[derive(Debug)]
struct Claims {
    sort: Arc<CombinedSort>,
    claimed: Vec<bool>,
}

impl CombinedSorts {
    /// The shared sort output `partition` (of `partitions`) reads from: the current one,
    /// or one made by `start` when there is none or `partition` was already read from it.
    pub(super) fn claim(
        &self,
        partition: usize,
        partitions: usize,
        start: impl FnOnce() -> Result<Arc<CombinedSort>>,
    ) -> Result<Arc<CombinedSort>> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(&*current, Some(claims) if !claims.claimed[partition]) {
            *current = Some(Claims {
                sort: start()?,
                claimed: vec![false; partitions],
            });
        }
        let claims = current.as_mut().expect("set above");
        claims.claimed[partition] = true;
        let sort = Arc::clone(&claims.sort);
        if claims.claimed.iter().all(|&c| c) {
            *current = None;
        }
        Ok(sort)
    }
}

/// What the shared task hands every output partition.
type SharedResult = Result<Arc<Combined>, Arc<DataFusionError>>;

/// One execution's shared task and its result.
pub(super) struct CombinedSort {
    result: Shared<BoxFuture<'static, SharedResult>>,
    /// Aborted when the last output stream (and the exec's claim) lets go of it.
    _task: SpawnedTask<()>,
    /// Cancels the shared sort's blocking jobs then too.
    cancel: Cancel,
}

impl Drop for CombinedSort {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl std::fmt::Debug for CombinedSort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CombinedSort")
    }
}

/// The input of every partition, drained; sorted at once when it fit one run.
enum Combined {
    /// Every row sorted at once.
    Sorted(Arc<SortedTogether>),
    /// Too large for one run, or spilled: each partition sorts its own input.
    Separate {
        inputs: Mutex<Vec<Option<Buffered>>>,
        reservation: MemoryReservation,
    },
}

/// Every partition's rows sorted at once: output partition `p` is
/// `permutation[ranges[p]]`.
struct SortedTogether {
    rows: RunRows,
    /// Its memory goes back to the backend when every partition is done with it.
    permutation: Permutation,
    ranges: Vec<Range<usize>>,
    /// The backend's device gather of the whole permutation, shared by the partitions.
    payload: Option<SharedPayload>,
    /// Window columns of the whole permutation computed on the device, when asked
    /// (`SortSpec::windows`); each partition's part starts a window partition.
    windows: Option<WindowColumns>,
    /// Accounts the buffered rows until every partition is done with them.
    _reservation: MemoryReservation,
}

impl CombinedSort {
    /// Starts draining `inputs` (every input partition, in order) and sorting them. The
    /// metrics of `resources` (the first partition to claim the sort) take the shared
    /// stages (collection, encoding, the sort itself). With a `routing`, output partition
    /// `p` gets the rows of hash partition `p` (from every input partition) instead of
    /// input partition `p`'s rows.
    pub(super) fn start(
        inputs: Vec<SendableRecordBatchStream>,
        resources: SortResources,
        reservation: MemoryReservation,
        routing: Option<Arc<HashRouting>>,
    ) -> Arc<Self> {
        // The shared sort stops when every partition let go, not when the first one does.
        let mut spec = SortSpec::clone(&resources.spec);
        spec.cancel = spec.cancel.fresh();
        let cancel = spec.cancel.clone();
        let resources = SortResources {
            spec: Arc::new(spec),
            ..resources
        };
        let (tx, rx) = oneshot::channel();
        let task = SpawnedTask::spawn(async move {
            let combined = combine(inputs, resources, reservation, routing).await;
            let _ = tx.send(combined.map(Arc::new).map_err(Arc::new));
        });
        let result = async move {
            rx.await.unwrap_or_else(|_| {
                Err(Arc::new(DataFusionError::Execution(
                    "gpusort: the shared sort of all partitions ended without a result".to_string(),
                )))
            })
        }
        .boxed()
        .shared();
        Arc::new(Self {
            result,
            _task: task,
            cancel,
        })
    }

    /// The output stream of `partition`.
    pub(super) fn partition_stream(
        self: Arc<Self>,
        partition: usize,
        resources: SortResources,
    ) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStream::builder(
            Arc::clone(&resources.schema),
            OUTPUT_CHANNEL_BATCHES,
        );
        let tx = builder.tx();
        let cancel = resources.spec.cancel.clone();
        builder.spawn(async move {
            let output = PartitionOutput {
                partition,
                resources,
            };
            output.emit(self, tx).await
        });
        cancel.on_drop(builder.build())
    }
}

/// Drains every input partition; sorts all rows at once when they fit one run. With a
/// routing, the output partitions are its hash partitions instead of the input's.
async fn combine(
    inputs: Vec<SendableRecordBatchStream>,
    resources: SortResources,
    reservation: MemoryReservation,
    routing: Option<Arc<HashRouting>>,
) -> Result<Combined> {
    let mut buffer = InputBuffer::new(inputs.len(), resources.clone(), reservation);
    let SortResources { spec, metrics, .. } = resources;
    if let Some(routing) = &routing {
        buffer = buffer.with_routing(Arc::clone(routing));
    }
    let collecting = metrics.collect_time.timer();
    buffer.fill(inputs).await?;
    let (drained, reservation) = buffer.finish_partitions().await?;
    collecting.done();
    trace::event(|| "shared sort: input collected".to_string());
    let partitions = match drained {
        Drained::OnDisk(runs) => {
            return Ok(Combined::separate(
                runs.into_iter().map(Buffered::OnDisk).collect(),
                reservation,
            ))
        }
        Drained::InMemory(partitions) => partitions,
    };
    let rows: usize = partitions.iter().flatten().map(RecordBatch::num_rows).sum();
    if rows > spec.run_rows.min(u32::MAX as usize) {
        let partitions = match routing {
            None => partitions,
            Some(routing) => {
                let all = partitions.into_iter().flatten().collect();
                spec.cancel.blocking(move || routing.split(all)).await?
            }
        };
        return Ok(Combined::separate(
            partitions.into_iter().map(Buffered::InMemory).collect(),
            reservation,
        ));
    }
    let cancel = spec.cancel.clone();
    let sorted = cancel
        .blocking(move || {
            sort_together(&spec, partitions, routing.as_deref(), &metrics, reservation)
        })
        .await?;
    Ok(Combined::Sorted(Arc::new(sorted)))
}

impl Combined {
    fn separate(partitions: Vec<Buffered>, reservation: MemoryReservation) -> Self {
        Self::Separate {
            inputs: Mutex::new(partitions.into_iter().map(Some).collect()),
            reservation,
        }
    }
}

/// Sorts the rows of every input partition at once: each partition a segment of its own,
/// or, with a routing, every row by its hash partition first.
fn sort_together(
    spec: &SortSpec,
    partitions: Vec<Vec<RecordBatch>>,
    routing: Option<&HashRouting>,
    metrics: &SortMetrics,
    reservation: MemoryReservation,
) -> Result<SortedTogether> {
    let mut sizes = Vec::with_capacity(partitions.len());
    let mut all = Vec::new();
    for batches in partitions {
        sizes.push(batches.iter().map(RecordBatch::num_rows).sum::<usize>());
        all.extend(batches);
    }
    // Drops empty batches: the routing below reads `rows.batches()`, aligned with the keys.
    let rows = RunRows::new(all);
    let sorter = RunSorter::new(spec, metrics);
    let (order, ranges) = match routing {
        None => {
            let ranges = ranges_of(&sizes);
            let starts = ranges
                .iter()
                .filter(|r| !r.is_empty())
                .map(|r| r.start as u32)
                .collect();
            let segments = Segments::new(starts, rows.rows());
            let order = sorter.order_rows(&rows, Apart::Segments(&segments))?;
            (order, ranges)
        }
        Some(routing) => {
            let (order, counts) = sorter.order_routed_rows(&rows, routing)?;
            (order, ranges_of(&counts))
        }
    };
    trace::event(|| "shared sort: sorted".to_string());
    let (mut order, mut ranges) = (order, ranges);
    if let Some(top) = &spec.partition_top {
        let _timer = metrics.gather_time.timer();
        let _compute = metrics.baseline.elapsed_compute().timer();
        if cut_to_tops(&rows, &mut order.permutation, &mut ranges, &spec.exprs, top)? {
            if let Some(state) = order.state.as_mut() {
                state.order_changed();
            }
        }
    }
    spec.cancel.check()?;
    let mut payload = {
        let _timer = metrics.gather_time.timer();
        sorter.device_payload(&rows, &order.permutation, order.state)
    };
    trace::event(|| "shared sort: payload on the device".to_string());
    let windows = match &spec.windows {
        // With a limit each part outputs only its first rows, which the columns of the
        // whole part would not describe: the window above computes them.
        Some(request) if spec.fetch.is_none() => {
            let starts: Vec<usize> = ranges.iter().map(|r| r.start).collect();
            sorter.device_windows(payload.as_deref_mut(), request, &starts)?
        }
        _ => None,
    };
    let payload = payload.map(|mut payload| {
        // With window columns, the parts hand on only the columns their request keeps.
        if let Some(keep) = windows.as_ref().and_then(|w| w.request.keep.as_deref()) {
            payload.retain_columns(keep);
        }
        // The partitions record their windows; the uploads are recorded here.
        let mut uploads = payload.stats();
        uploads.windows = Duration::ZERO;
        metrics.record_payload(uploads, 0);
        SharedPayload {
            columns: payload.columns().to_vec(),
            gatherer: Mutex::new(payload),
        }
    });
    Ok(SortedTogether {
        rows,
        permutation: order.permutation,
        ranges,
        payload,
        windows,
        _reservation: reservation,
    })
}

/// Cuts each partition's part (`ranges`, consecutive from 0) of the shared order to the
/// rows within a window partition's top, each part on a core of its own (the cut gathers
/// and compares its part's keys: one thread did W2's 60 M rows in 0.57 s), then keeps the
/// parts consecutive; `false` when every row stays.
fn cut_to_tops(
    rows: &RunRows,
    permutation: &mut Permutation,
    ranges: &mut [Range<usize>],
    exprs: &LexOrdering,
    top: &PartitionTop,
) -> Result<bool> {
    let len = permutation.len();
    let cut = TopCut::new(rows, exprs, top)?;
    let mut parts: Vec<&mut [u32]> = Vec::with_capacity(ranges.len());
    let mut rest: &mut [u32] = &mut permutation[..];
    for range in ranges.iter() {
        let (part, tail) = rest.split_at_mut(range.len());
        parts.push(part);
        rest = tail;
    }
    let kept: Vec<usize> = parts
        .into_par_iter()
        .map(|part| cut.cut(part))
        .collect::<Result<_>>()?;
    let mut written = 0;
    for (range, kept) in ranges.iter_mut().zip(kept) {
        permutation.copy_within(range.start..range.start + kept, written);
        *range = written..written + kept;
        written += kept;
    }
    permutation.truncate(written);
    Ok(written < len)
}

/// Consecutive ranges of the given sizes, from 0.
fn ranges_of(sizes: &[usize]) -> Vec<Range<usize>> {
    let mut next = 0;
    sizes
        .iter()
        .map(|&size| {
            next += size;
            next - size..next
        })
        .collect()
}

/// One output partition of a shared sort.
struct PartitionOutput {
    partition: usize,
    resources: SortResources,
}

impl PartitionOutput {
    /// Waits for the shared result and sends this partition's sorted rows.
    async fn emit(self, sort: Arc<CombinedSort>, tx: Sender<Result<RecordBatch>>) -> Result<()> {
        let combined = sort.result.clone().await.map_err(DataFusionError::Shared)?;
        drop(sort);
        match &*combined {
            Combined::Sorted(sorted) => {
                let sorted = Arc::clone(sorted);
                let metrics = self.resources.metrics.clone();
                let cancel = self.resources.spec.cancel.clone();
                cancel.blocking(move || self.gather(&sorted, &tx)).await?;
                metrics.baseline.done();
            }
            Combined::Separate {
                inputs,
                reservation,
            } => {
                let (taken, sharers) = {
                    let mut inputs = inputs.lock().unwrap_or_else(|e| e.into_inner());
                    (inputs[self.partition].take(), inputs.len())
                };
                if let Some(buffered) = taken {
                    // Every partition may merge its spilled runs at the same time.
                    let memory = MergeMemory {
                        reservation: reservation.new_empty(),
                        sharers,
                    };
                    emit_buffered(buffered, &self.resources, memory, None, tx).await?;
                }
                self.resources.metrics.baseline.done();
            }
        }
        Ok(())
    }

    /// Gathers this partition's slice of the shared permutation.
    fn gather(&self, sorted: &SortedTogether, tx: &Sender<Result<RecordBatch>>) -> Result<()> {
        let SortedTogether {
            rows,
            permutation,
            ranges,
            payload,
            windows,
            ..
        } = sorted;
        let range = ranges[self.partition].clone();
        let SortResources { spec, metrics, .. } = &self.resources;
        let end = match spec.fetch {
            Some(fetch) => range.end.min(range.start + fetch),
            None => range.end,
        };
        trace::event(|| format!("partition {}: gather begins", self.partition));
        let mut payload = payload.as_ref().map(|shared| PartitionPayload {
            shared,
            offset: range.start,
            stats: PayloadStats::default(),
        });
        let gathered = RunSorter::new(spec, metrics).gather_rows(
            rows,
            &permutation[range.start..end],
            payload.as_mut().map(|p| p as &mut dyn PayloadGather),
            windows.as_ref().map(|w| w.at(range.start)),
            None,
            |batch| {
                metrics.baseline.record_output(batch.num_rows());
                tx.blocking_send(Ok(batch)).is_ok()
            },
        );
        trace::event(|| format!("partition {}: gather ends", self.partition));
        gathered
    }
}

/// A device gather of the shared permutation, used by every partition in turn.
struct SharedPayload {
    gatherer: Mutex<Box<dyn PayloadGather>>,
    columns: Vec<usize>,
}

/// One partition's view of the shared device gather: its output row 0 is the shared
/// permutation's row `offset`.
struct PartitionPayload<'a> {
    shared: &'a SharedPayload,
    offset: usize,
    /// What the shared gatherer did for this partition.
    stats: PayloadStats,
}

impl PayloadGather for PartitionPayload<'_> {
    fn columns(&self) -> &[usize] {
        &self.shared.columns
    }

    fn gather(&mut self, start: usize, batch_rows: &[usize]) -> Result<Option<Vec<Vec<ArrayRef>>>> {
        let (gathered, before, after) = {
            let mut gatherer = self
                .shared
                .gatherer
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let before = gatherer.stats();
            let gathered = gatherer.gather(self.offset + start, batch_rows);
            (gathered, before, gatherer.stats())
        };
        trace::event(|| format!("  window at row {} gathered", self.offset + start));
        self.stats.h2d_bytes += after.h2d_bytes - before.h2d_bytes;
        self.stats.d2h_bytes += after.d2h_bytes - before.d2h_bytes;
        self.stats.upload += after.upload.saturating_sub(before.upload);
        self.stats.windows += after.windows.saturating_sub(before.windows);
        gathered
    }

    fn stats(&self) -> PayloadStats {
        self.stats
    }

    fn window_rows(&self, most: usize) -> usize {
        self.shared
            .gatherer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .window_rows(most)
    }

    // The shared gatherer keeps the columns of the windows' request (see `sort_together`):
    // every part's request is the same.
    fn retain_columns(&mut self, _keep: &[usize]) {}
}
