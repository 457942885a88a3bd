//! Sorting one run: evaluate keys → (segments) → encode → backend sort → gather.
//!
//! When the input is ordered by the first `prefix` sort keys (the planner knows it from
//! DataFusion's equivalence properties), runs of rows with equal prefix values are
//! *segments*: only the remaining keys are encoded, and the backend sorts within segments.
//! Should the rows not be in prefix order after all (checked at every segment boundary),
//! the run is sorted by all keys.
//!
//! Runs on a blocking thread (never on the async runtime). A run is at most
//! `gpu_sort.run_rows` rows of buffered input; [`split_runs`] cuts the input into runs
//! in input order, so merging sorted runs with ties broken by run index stays stable.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::SortOptions;
use datafusion::arrow;
use datafusion::common::{internal_err, Result};
use datafusion::physical_expr::LexOrdering;

use super::cancel::Cancel;
use super::hash_routing::{id_arrays, total_counts, HashRouting};
use super::metrics::SortMetrics;
use super::partition_top::{keep_top_rows, PartitionTop};
use crate::config::AlgorithmChoice;
use crate::gather::{
    append_window_columns, gather_sorted_columns, EarlyColumns, PayloadGather, ResidentRequest,
    RunRows, Views, WindowRequest,
};
use crate::keys::{encode_keys, EncodedKeys, KeyColumn};
use crate::sort::{
    identity, refine_long_ties, segment_starts, Algorithm, KeySort, Permutation, RunState,
    Segments, SortBackend, SortedRun,
};

/// What every run of one `GpuSortExec` partition is sorted by and with.
#[derive(Debug, Clone)]
pub(super) struct SortSpec {
    /// The sort keys.
    pub exprs: LexOrdering,
    /// Emit at most this many rows.
    pub fetch: Option<usize>,
    /// Keep only each window partition's top rows of a run (`partition_top.rs`).
    pub partition_top: Option<PartitionTop>,
    /// Window columns to compute where a run's rows are, for a run that is its
    /// partition's whole output ([`RunSorter::sort_final_run`]).
    pub windows: Option<Arc<WindowRequest>>,
    /// Columns the consumer takes where a run is (`gather/resident.rs`), for a run that
    /// is its partition's whole output and is gathered on a device.
    pub resident: Option<Arc<ResidentRequest>>,
    /// Rows per output batch of a merge of runs.
    pub batch_size: usize,
    /// Rows per output batch of one sorted run (the batches its gather builds): the
    /// session's batch size, or larger for a consumer that concatenates them anyway.
    pub run_batch_rows: usize,
    /// Most rows per run.
    pub run_rows: usize,
    /// Requested algorithm.
    pub algorithm: AlgorithmChoice,
    /// Leading sort keys the input is already ordered by (0: none): the segmented
    /// strategy sorts only within runs of equal values of those.
    pub prefix: usize,
    /// Runs of at least this many rows may gather columns on the backend's device.
    pub device_gather_min_rows: usize,
    /// The backend that sorts.
    pub backend: Arc<dyn SortBackend>,
    /// Set when the sort's consumers went away; its blocking jobs stop at the next stage.
    pub cancel: Cancel,
    /// How the view arrays of a run's output hold their values: shared with the input,
    /// or copied where the input must be let go (a merge's windows of spilled runs).
    pub views: Views,
}

/// Cuts `batches` into runs of at most `run_rows` rows, in input order; batches larger
/// than a run are sliced.
pub(super) fn split_runs(batches: Vec<RecordBatch>, run_rows: usize) -> Vec<Vec<RecordBatch>> {
    let run_rows = run_rows.clamp(1, u32::MAX as usize);
    let mut runs = vec![];
    let mut current = vec![];
    let mut current_rows = 0;
    for batch in batches {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let take = (batch.num_rows() - offset).min(run_rows - current_rows);
            // A batch that fits whole is not sliced (slicing 12 000 batches costs ms).
            current.push(if take == batch.num_rows() {
                batch.clone()
            } else {
                batch.slice(offset, take)
            });
            current_rows += take;
            offset += take;
            if current_rows == run_rows {
                runs.push(std::mem::take(&mut current));
                current_rows = 0;
            }
        }
    }
    if current_rows > 0 {
        runs.push(current);
    }
    runs
}

/// Window columns computed where a sort's rows were, for every row of its order.
pub(super) struct WindowColumns {
    /// What they compute, and the schema of the batches they join.
    pub request: Arc<WindowRequest>,
    /// One column per window function, a row per row of the order.
    pub columns: Vec<ArrayRef>,
}

impl WindowColumns {
    /// The columns from row `offset` of the order on.
    pub(super) fn at(&self, offset: usize) -> WindowsAt<'_> {
        WindowsAt {
            columns: self,
            offset,
        }
    }
}

/// Window columns from one row of their order on: what joins the batches of a slice of it.
pub(super) struct WindowsAt<'a> {
    columns: &'a WindowColumns,
    offset: usize,
}

/// The sorted order of a run's rows.
pub(super) struct RunOrder {
    /// Row ids in sorted order.
    pub permutation: Permutation,
    /// The backend's state for gathering this order on its device.
    pub state: Option<Box<dyn RunState>>,
}

impl RunOrder {
    /// The order of no rows.
    pub(super) fn empty() -> Self {
        Self {
            permutation: Permutation::default(),
            state: None,
        }
    }
}

/// A run's order, or that the backend's device cannot hold the run now.
pub(super) enum Ordered {
    /// Sorted.
    Done(RunOrder),
    /// Sort the run in pieces of at most `rows` rows (`pieces.rs`); between `segments`
    /// (when the sort has them) pieces need no merge.
    Split {
        /// The most rows of one piece.
        rows: usize,
        /// The segments the run would have been sorted within.
        segments: Option<Segments>,
    },
}

/// How the rows of several partitions sorted at once are kept apart.
pub(super) enum Apart<'a> {
    /// One partition: nothing to keep apart.
    No,
    /// Each segment is a partition; rows never leave it.
    Segments(&'a Segments),
    /// A partition id per row, sorted by first (rows of a partition end up contiguous,
    /// partitions in id order). The spec's ordered prefix must be 0.
    ByKey(KeyColumn),
}

/// The runs of equal `prefix` values inside each partition (partitions begin at batch
/// boundaries of `rows`); `None` when some partition is not ordered by the prefix.
fn segments_within(
    prefix: &[KeyColumn],
    rows: &RunRows,
    partitions: &Segments,
) -> Result<Option<Segments>> {
    let batch_starts = rows.batch_starts();
    let mut starts = Vec::new();
    for range in partitions.ranges() {
        let first = batch_starts.partition_point(|&s| s < range.start);
        let end = batch_starts.partition_point(|&s| s < range.end);
        let slice: Vec<KeyColumn> = prefix
            .iter()
            .map(|c| KeyColumn {
                arrays: c.arrays[first..end].to_vec(),
                options: c.options,
            })
            .collect();
        let Some(within) = segment_starts(&slice)? else {
            return Ok(None);
        };
        starts.extend(within.starts().iter().map(|&s| s + range.start as u32));
    }
    Ok(Some(Segments::new(starts, rows.rows())))
}

/// What a run that is its partition's whole output may come with.
#[derive(Default)]
struct Extras<'a> {
    /// Columns the consumer takes where the run is.
    resident: Option<&'a Arc<ResidentRequest>>,
    /// The backend's copy of some of the run's columns, made while its input arrived.
    early: Option<Arc<dyn EarlyColumns>>,
}

/// Sorts runs of one partition: what every run is sorted by and with (`spec`), and where
/// its stages are recorded (`metrics`). One run goes through `sort_run`: keys evaluated,
/// segments found, keys encoded and sorted by the backend, ties of long strings refined,
/// payload gathered (on the device when the run's state offers it), batches emitted.
pub(super) struct RunSorter<'a> {
    /// What every run is sorted by and with.
    pub spec: &'a SortSpec,
    /// Where the stages are recorded.
    pub metrics: &'a SortMetrics,
}

impl<'a> RunSorter<'a> {
    /// A sorter of runs by `spec`, recording into `metrics`.
    pub(super) fn new(spec: &'a SortSpec, metrics: &'a SortMetrics) -> Self {
        Self { spec, metrics }
    }

    /// Sorts one run and hands its output batches, in order, to `emit` (which returns
    /// `false` to stop: the consumer went away). A run the backend's device cannot hold is
    /// sorted in pieces (`pieces.rs`).
    pub(super) fn sort_run(
        &self,
        batches: Vec<RecordBatch>,
        mut emit: impl FnMut(RecordBatch) -> bool,
    ) -> Result<()> {
        self.sort_run_or_stop(batches, &mut emit).map(|_| ())
    }

    /// [`Self::sort_run`] for a run that is its partition's whole output: the spec's
    /// window columns, when the backend computes them where the run is, are appended to
    /// each batch (in the request's schema); without them, the columns of the spec's
    /// resident request that the device keeps are handed to it, and left out of the
    /// batches (`gather/resident.rs`).
    pub(super) fn sort_final_run(
        &self,
        batches: Vec<RecordBatch>,
        early: Option<Arc<dyn EarlyColumns>>,
        mut emit: impl FnMut(RecordBatch) -> bool,
    ) -> Result<()> {
        let resident = match self.spec.windows {
            Some(_) => None,
            None => self.spec.resident.as_ref(),
        };
        let (windows, extra) = (self.spec.windows.as_ref(), Extras { resident, early });
        self.sort_one(batches, &mut emit, windows, extra)
            .map(|_| ())
    }

    /// [`Self::sort_run`]; `false` when it stopped early (`emit` asked it to, or a LIMIT
    /// over pieces was reached).
    pub(super) fn sort_run_or_stop(
        &self,
        batches: Vec<RecordBatch>,
        emit: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> Result<bool> {
        self.sort_one(batches, emit, None, Extras::default())
    }

    /// [`Self::sort_run_or_stop`], with the `windows` columns appended where the backend
    /// computes them, or the `extras`' resident request's columns left where the run is.
    fn sort_one(
        &self,
        batches: Vec<RecordBatch>,
        emit: &mut dyn FnMut(RecordBatch) -> bool,
        windows: Option<&Arc<WindowRequest>>,
        extras: Extras<'_>,
    ) -> Result<bool> {
        let (spec, metrics) = (self.spec, self.metrics);
        let Extras { resident, early } = extras;
        spec.cancel.check()?;
        let rows = RunRows::new(batches)
            .with_views(spec.views)
            .with_early(early);
        let rows = Arc::new(rows);
        if rows.rows() == 0 {
            return Ok(true);
        }
        crate::trace::event(|| format!("  {} rows: run laid out", rows.rows()));
        let columns = self.evaluate_keys(&rows)?;
        crate::trace::event(|| format!("  {} rows: keys evaluated", rows.rows()));
        let RunOrder {
            mut permutation,
            mut state,
        } = match self.order_evaluated(&rows, columns, Apart::No, true)? {
            Ordered::Done(order) => order,
            Ordered::Split {
                rows: piece_rows,
                segments,
            } => {
                metrics.device_splits.add(1);
                // The pieces gather on their own: a copy of the run's columns is let go.
                if let Some(early) = rows.early() {
                    early.abandon();
                }
                return self.sort_in_pieces(rows.batches().to_vec(), piece_rows, segments, emit);
            }
        };
        if let Some(fetch) = spec.fetch {
            permutation.truncate(fetch);
        }
        if let Some(top) = &spec.partition_top {
            let _timer = metrics.gather_time.timer();
            let _compute = metrics.baseline.elapsed_compute().timer();
            if keep_top_rows(&rows, &mut permutation, &spec.exprs, top)? {
                if let Some(state) = state.as_mut() {
                    state.order_changed();
                }
            }
        }
        spec.cancel.check()?;
        let permutation = Arc::new(permutation);
        let mut payload = {
            let _timer = metrics.gather_time.timer();
            self.device_payload(&rows, &permutation, state)
        };
        // What the payload gather did not take of a copy made while the input was read
        // (it gathered on the host, or on other devices) is let go now, not with the run.
        if let Some(early) = rows.early() {
            early.abandon();
        }
        let computed = match windows {
            Some(request) => self.device_windows(payload.as_deref_mut(), request, &[])?,
            None => None,
        };
        // The request's columns the device keeps, and the schema of batches without them.
        if let Some(request) = resident {
            crate::trace::event(|| {
                format!(
                    "  {} rows: {} columns asked to stay on the device, the payload {}",
                    rows.rows(),
                    request.columns().len(),
                    match &payload {
                        Some(p) => {
                            let stats = p.stats();
                            let seconds = stats.upload.as_secs_f64();
                            format!(
                                "gathers {} columns there ({:.0} MB up in {:.0} ms, {:.1} GB/s)",
                                p.columns().len(),
                                stats.h2d_bytes as f64 / 1e6,
                                seconds * 1e3,
                                stats.h2d_bytes as f64 / seconds.max(1e-9) / 1e9
                            )
                        }
                        None => "is gathered on the host".to_string(),
                    }
                )
            });
        }
        let kept = match (resident, payload.as_deref_mut()) {
            (Some(request), Some(gatherer)) => gatherer
                .split_resident(request.columns(), &rows, &(Arc::clone(&permutation) as _))
                .map(|run| request.register(run, &rows.batches()[0].schema()))
                .transpose()?,
            _ => None,
        };
        if let Some(emptied) = payload.take_if(|p| p.columns().is_empty()) {
            // Every column it held went to the consumer: what putting them there took is
            // recorded here, as no gather will.
            metrics.record_payload(emptied.stats(), 0);
        }
        let mut open = true;
        let Some((keep, schema)) = kept else {
            self.gather_rows(
                &rows,
                &permutation,
                payload.as_deref_mut(),
                computed.as_ref().map(|c| c.at(0)),
                None,
                |batch| {
                    open = emit(batch);
                    open
                },
            )?;
            return Ok(open);
        };
        metrics
            .resident_columns
            .add(rows.num_columns() - keep.len());
        let mut failed = None;
        self.gather_rows(
            &rows,
            &permutation,
            payload.as_deref_mut(),
            None,
            Some(&keep),
            |batch| {
                let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                let columns = batch.columns().to_vec();
                match RecordBatch::try_new_with_options(Arc::clone(&schema), columns, &options) {
                    Ok(batch) => open = emit(batch),
                    Err(error) => {
                        failed = Some(error);
                        open = false;
                    }
                }
                open
            },
        )?;
        match failed {
            Some(error) => Err(error.into()),
            None => Ok(open),
        }
    }

    /// `request`'s window columns over the rows `payload` gathers, computed on its device
    /// (window partitions also starting at rows `starts`); `None` where it cannot.
    pub(super) fn device_windows(
        &self,
        payload: Option<&mut (dyn PayloadGather + '_)>,
        request: &Arc<WindowRequest>,
        starts: &[usize],
    ) -> Result<Option<WindowColumns>> {
        let Some(payload) = payload else {
            return Ok(None);
        };
        let metrics = self.metrics;
        let _timer = metrics.gather_time.timer();
        let _compute = metrics.baseline.elapsed_compute().timer();
        let columns = payload.windows(request, starts)?;
        Ok(columns.map(|columns| {
            metrics
                .device_window_rows
                .add(columns.first().map_or(0, |c| c.len()));
            WindowColumns {
                request: Arc::clone(request),
                columns,
            }
        }))
    }

    /// Sorts the rows of `rows` by the spec's keys, partitions kept `apart`. A run the
    /// backend's device cannot hold is sorted in pieces between partitions and segments
    /// where it has them, else on the CPU.
    pub(super) fn order_rows(&self, rows: &RunRows, apart: Apart<'_>) -> Result<RunOrder> {
        self.spec.cancel.check()?;
        if rows.rows() == 0 {
            return Ok(RunOrder::empty());
        }
        let columns = self.evaluate_keys(rows)?;
        crate::trace::event(|| format!("  {} rows: keys evaluated", rows.rows()));
        let Apart::Segments(partitions) = apart else {
            return self.order_whole(rows, columns, apart);
        };
        match self.order_evaluated(rows, columns, Apart::Segments(partitions), true)? {
            Ordered::Done(order) => Ok(order),
            Ordered::Split {
                rows: piece_rows,
                segments,
            } => {
                self.metrics.device_splits.add(1);
                let segments = segments.unwrap_or_else(|| partitions.clone());
                self.order_in_pieces(rows, partitions, &segments, piece_rows)
            }
        }
    }

    /// Sorts `rows` (keys evaluated: `columns`) in one piece: on the CPU when the backend's
    /// device cannot hold it.
    pub(super) fn order_whole(
        &self,
        rows: &RunRows,
        columns: Vec<KeyColumn>,
        apart: Apart<'_>,
    ) -> Result<RunOrder> {
        match self.order_evaluated(rows, columns, apart, false)? {
            Ordered::Done(order) => Ok(order),
            Ordered::Split { .. } => internal_err!("gpusort: a run that may not split was split"),
        }
    }

    /// Sorts the rows of `rows` by (hash partition of `routing`, the spec's keys): the order,
    /// and the rows of each partition (contiguous in the order, in partition order). The
    /// backend makes the partition ids itself where it can, from a table of the partition of
    /// every key value (`id_table.rs`); else they are hashed here on all cores.
    pub(super) fn order_routed_rows(
        &self,
        rows: &RunRows,
        routing: &HashRouting,
    ) -> Result<(RunOrder, Vec<usize>)> {
        let (spec, metrics) = (self.spec, self.metrics);
        spec.cancel.check()?;
        if spec.prefix != 0 {
            return internal_err!("gpusort: partition ids sorted before an ordered prefix");
        }
        if rows.rows() == 0 {
            return Ok((RunOrder::empty(), vec![0; routing.partitions()]));
        }
        let columns = self.evaluate_keys(rows)?;
        crate::trace::event(|| format!("  {} rows: keys evaluated", rows.rows()));
        let started = Instant::now();
        let tables = {
            let _timer = metrics.encode_time.timer();
            let _compute = metrics.baseline.elapsed_compute().timer();
            routing.id_tables(&spec.exprs, &columns)?
        };
        if let Some(tables) = tables {
            let on_backend = {
                let _compute = metrics.baseline.elapsed_compute().timer();
                spec.backend
                    .sort_key_columns_by_ids(&columns, &tables, spec.algorithm)?
            };
            if let Some((sorted, counts)) = on_backend {
                metrics.record_run(&sorted, started.elapsed());
                let order = RunOrder {
                    permutation: sorted.permutation,
                    state: sorted.state,
                };
                return Ok((order, counts));
            }
        }
        let routed = {
            let _timer = metrics.encode_time.timer();
            let _compute = metrics.baseline.elapsed_compute().timer();
            routing.route_all(rows.batches())?
        };
        crate::trace::event(|| "  rows routed on the host".to_string());
        let counts = total_counts(&routed, routing.partitions());
        let ids = KeyColumn {
            arrays: id_arrays(routed),
            options: SortOptions::default(),
        };
        let order = self.order_by_ids(rows, columns, ids)?;
        Ok((order, counts))
    }

    /// [`Self::order_rows`] with the keys already evaluated (`columns`, one per sort key);
    /// with `splittable`, a run the backend's device cannot hold comes back `Split`.
    pub(super) fn order_evaluated(
        &self,
        rows: &RunRows,
        mut all_columns: Vec<KeyColumn>,
        apart: Apart<'_>,
        splittable: bool,
    ) -> Result<Ordered> {
        let (spec, metrics) = (self.spec, self.metrics);
        let partitions = match apart {
            Apart::No => None,
            Apart::Segments(segments) => Some(segments),
            Apart::ByKey(ids) => {
                if spec.prefix != 0 {
                    return internal_err!("gpusort: partition ids sorted before an ordered prefix");
                }
                all_columns.insert(0, ids);
                None
            }
        };
        let started = Instant::now();
        let (segments, sorted_keys) = {
            let _timer = metrics.encode_time.timer();
            let _compute = metrics.baseline.elapsed_compute().timer();
            self.find_segments(&all_columns, rows, partitions)?
        };
        let columns = &all_columns[sorted_keys..];
        let (sorted, sort_started, keys) = match &segments {
            // Every key is in the prefix, or every segment is one row: already in order.
            Some(s) if columns.is_empty() || s.len() == rows.rows() => (
                SortedRun::on_host(identity(rows.rows()), Algorithm::Segmented),
                started,
                None,
            ),
            _ => match self.sort_keys(columns, segments.as_ref(), started, splittable)? {
                Keyed::Sorted(sorted, sort_started, keys) => (sorted, sort_started, keys),
                Keyed::Split(rows) => return Ok(Ordered::Split { rows, segments }),
            },
        };
        metrics.record_run(&sorted, sort_started.elapsed());
        let mut permutation = sorted.permutation;
        let mut state = sorted.state;
        if let Some(keys) = keys.filter(|k| !k.long_keys.is_empty()) {
            // The order changes: what the backend kept of its order no longer matches it.
            if let Some(state) = &mut state {
                state.order_changed();
            }
            let _timer = metrics.tie_refine_time.timer();
            let _compute = metrics.baseline.elapsed_compute().timer();
            let groups = refine_long_ties(columns, &keys, segments.as_ref(), &mut permutation)?;
            metrics.tie_groups.add(groups);
        }
        Ok(Ordered::Done(RunOrder { permutation, state }))
    }

    /// The gatherer of some of `rows`' columns on the backend's device for `permutation`
    /// (row ids of `rows`, the order `state`'s sort found, or a prefix of it), when the run
    /// is large enough for it.
    pub(super) fn device_payload(
        &self,
        rows: &RunRows,
        permutation: &[u32],
        state: Option<Box<dyn RunState>>,
    ) -> Option<Box<dyn PayloadGather>> {
        let spec = self.spec;
        let state = state.filter(|_| permutation.len() >= spec.device_gather_min_rows)?;
        state.payload_gatherer(rows, permutation)
    }

    /// Builds the output batches of `permutation` (row ids of `rows`), `payload` gathering
    /// its columns on the device, and hands them, in order, to `emit` (which returns `false`
    /// to stop).
    /// `windows`: window columns computed for these rows, appended to each batch (after
    /// the columns their request keeps).
    pub(super) fn gather_rows(
        &self,
        rows: &RunRows,
        permutation: &[u32],
        mut payload: Option<&mut (dyn PayloadGather + '_)>,
        windows: Option<WindowsAt<'_>>,
        keep: Option<&[usize]>,
        mut emit: impl FnMut(RecordBatch) -> bool,
    ) -> Result<()> {
        let (spec, metrics) = (self.spec, self.metrics);
        spec.cancel.check()?;
        let _timer = metrics.gather_time.timer();
        let _compute = metrics.baseline.elapsed_compute().timer();
        let (mut offset, mut failed) = (windows.as_ref().map_or(0, |w| w.offset), None);
        // With window columns, only the sort's columns the window's consumer reads.
        let keep = keep.or_else(|| {
            windows
                .as_ref()
                .and_then(|w| w.columns.request.keep.as_deref())
        });
        let gathered = gather_sorted_columns(
            rows,
            permutation,
            spec.run_batch_rows,
            payload.as_deref_mut(),
            keep,
            |batch| {
                let batch = match &windows {
                    None => batch,
                    Some(windows) => {
                        let rows = batch.num_rows();
                        let columns = &windows.columns.columns;
                        match append_window_columns(
                            batch,
                            columns,
                            offset,
                            &windows.columns.request,
                        ) {
                            Ok(batch) => {
                                offset += rows;
                                batch
                            }
                            Err(error) => {
                                failed = Some(error);
                                return false;
                            }
                        }
                    }
                };
                !spec.cancel.is_cancelled() && emit(batch)
            },
        );
        if let Some(payload) = &payload {
            metrics.record_payload(payload.stats(), payload.columns().len());
        }
        match failed {
            Some(error) => Err(error),
            None => gathered,
        }
    }

    /// The segments to sort within, and how many leading keys they make redundant: the runs
    /// of equal prefix values when the input is ordered by a prefix of the keys and the
    /// algorithm allows the segmented strategy (within each partition, when given; the prefix
    /// keys are then not sorted by), else the partitions (every key sorted by).
    fn find_segments(
        &self,
        columns: &[KeyColumn],
        rows: &RunRows,
        partitions: Option<&Segments>,
    ) -> Result<(Option<Segments>, usize)> {
        let spec = self.spec;
        let allowed = matches!(
            spec.algorithm,
            AlgorithmChoice::Auto | AlgorithmChoice::Segmented
        );
        if spec.prefix == 0 || !allowed {
            return Ok((partitions.cloned(), 0));
        }
        let prefix = &columns[..spec.prefix.min(columns.len())];
        let segments = match partitions {
            None => segment_starts(prefix)?,
            Some(partitions) => segments_within(prefix, rows, partitions)?,
        };
        match segments {
            Some(segments) => Ok((Some(segments), prefix.len())),
            None => {
                log::warn!(
                    "gpusort: input not ordered by its first {} sort keys as planned; sorting by \
                 all keys",
                    spec.prefix
                );
                Ok((partitions.cloned(), 0))
            }
        }
    }

    /// Encodes `columns` (on the backend's device where it can) and sorts by them, within
    /// `segments` when given; also the host-encoded keys, when the host encoded them. With
    /// `splittable`, a run the device cannot hold comes back as the rows of a piece.
    fn sort_keys(
        &self,
        columns: &[KeyColumn],
        segments: Option<&Segments>,
        started: Instant,
        splittable: bool,
    ) -> Result<Keyed> {
        let (spec, metrics) = (self.spec, self.metrics);
        let on_device = {
            let _compute = metrics.baseline.elapsed_compute().timer();
            match splittable {
                true => spec
                    .backend
                    .sort_or_split(columns, spec.algorithm, segments)?,
                false => KeySort::from(spec.backend.sort_key_columns(
                    columns,
                    spec.algorithm,
                    segments,
                )?),
            }
        };
        match on_device {
            KeySort::Sorted(mut sorted) => {
                let keys = sorted.refine_keys.take();
                return Ok(Keyed::Sorted(sorted, started, keys));
            }
            KeySort::Split { rows } => return Ok(Keyed::Split(rows)),
            KeySort::OnHost => {}
        }
        let keys = {
            let _timer = metrics.encode_time.timer();
            let _compute = metrics.baseline.elapsed_compute().timer();
            encode_keys(columns)?
        };
        let sort_started = Instant::now();
        let _compute = metrics.baseline.elapsed_compute().timer();
        let sorted = spec.backend.sort(&keys, spec.algorithm, segments)?;
        Ok(Keyed::Sorted(sorted, sort_started, Some(keys)))
    }

    pub(super) fn evaluate_keys(&self, rows: &RunRows) -> Result<Vec<KeyColumn>> {
        let spec = self.spec;
        spec.exprs
            .iter()
            .map(|sort_expr| {
                let arrays = rows
                    .batches()
                    .iter()
                    .map(|batch| sort_expr.expr.evaluate(batch)?.into_array(batch.num_rows()))
                    .collect::<Result<Vec<ArrayRef>>>()?;
                Ok(KeyColumn {
                    arrays,
                    options: sort_expr.options,
                })
            })
            .collect::<Result<Vec<_>>>()
            .map_err(|e| e.context("gpusort: evaluating sort keys"))
    }
}

/// A run's keys sorted (with when the sort started and the host-encoded keys, when the
/// host encoded them), or the rows of a piece the device can hold. One per run: its size
/// does not matter.
#[allow(clippy::large_enum_variant)]
enum Keyed {
    Sorted(SortedRun, Instant, Option<EncodedKeys>),
    Split(usize),
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(rows: i32) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int32Array::from_iter_values(0..rows))],
        )
        .unwrap()
    }

    #[test]
    fn split_runs_slices_in_input_order() {
        let runs = split_runs(vec![batch(5), batch(0), batch(4)], 3);
        let sizes: Vec<Vec<usize>> = runs
            .iter()
            .map(|r| r.iter().map(|b| b.num_rows()).collect())
            .collect();
        assert_eq!(sizes, vec![vec![3], vec![2, 1], vec![3]]);
    }
}
