//! Metrics of `GpuSortExec`: DataFusion's baseline metrics plus the sort's own stages.
//!
//! Shown by `EXPLAIN ANALYZE`, stage by stage: `collect_time` (wall time until the whole
//! input was buffered), `encode_time` (host key encoding), `h2d_time` (keys to the device,
//! device encoding overlapped), `device_sort_time` (the backend's sort itself), `d2h_time`
//! (the permutation back), `tie_refine_time` (ordering ties of strings longer than their
//! encoded prefix, with `tie_groups` the groups it ordered), `gather_time` (building output
//! batches, with the device's gather of fixed-width columns), all summed over runs;
//! `gather_h2d_time` and `gather_d2h_time` (the device gather's part of it: uploads, and
//! windows gathered and copied back), `device_gathered_columns` (columns of runs gathered
//! on the GPU), `early_columns` (of those, columns put on the device while the input was
//! read), `held_arrays` (input arrays whose host copy was handed to the device when the
//! memory ran out: `buffer.rs`);
//! `h2d_bytes` / `d2h_bytes` (bytes that crossed PCIe; 0 on the CPU backend), `runs`, one
//! `algorithm_<name>` count per algorithm that sorted a run, and `gpu_fallbacks`;
//! `device_peak_bytes` (the most device memory in use at once, every query's, while this
//! sort held the device), `device_wait_time` (waiting for the device: other work on it, or
//! memory held by other runs) and `device_splits` (runs the device could not hold whole,
//! sorted in pieces instead); `device<N>_runs` (runs sorted on device N, one count per
//! device that sorted any, where a sort spreads its runs over several GPUs).

use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, Gauge, MetricBuilder, Time,
};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::gather::PayloadStats;
use crate::sort::{Algorithm, SortedRun};

/// The metrics of one output partition.
#[derive(Debug, Clone)]
pub struct SortMetrics {
    /// Output rows, elapsed compute.
    pub baseline: BaselineMetrics,
    /// Waiting for and buffering the input.
    pub collect_time: Time,
    /// Key evaluation and encoding.
    pub encode_time: Time,
    /// Keys host → device (with device encoding).
    pub h2d_time: Time,
    /// The backend's sort.
    pub sort_time: Time,
    /// Permutation device → host.
    pub d2h_time: Time,
    /// Ordering the ties of long byte-like keys.
    pub tie_refine_time: Time,
    /// Tie groups of long byte-like keys ordered.
    pub tie_groups: Count,
    /// Building output batches.
    pub gather_time: Time,
    /// Within `gather_time`: the device gather's uploads (permutation and columns not on
    /// the device yet).
    pub gather_h2d_time: Time,
    /// Within `gather_time`: the device gather's windows (kernels and copies back into
    /// the output batches).
    pub gather_d2h_time: Time,
    /// Columns of runs gathered on the device (summed over runs).
    pub device_gathered_columns: Count,
    /// Of those, columns the backend put on the device while the input was read.
    pub early_columns: Count,
    /// Input arrays whose host copy was handed to the device's copy (`buffer.rs`).
    pub held_arrays: Count,
    /// Bytes host → device.
    pub h2d_bytes: Count,
    /// Bytes device → host.
    pub d2h_bytes: Count,
    /// Sorted runs (more than one: the runs were merged).
    pub runs: Count,
    /// Runs sorted by each [`Algorithm`] (in the order of [`Algorithm::ALL`]):
    /// `algorithm_onesweep`, `algorithm_locality`, `algorithm_segmented`.
    pub algorithm_runs: [Count; 3],
    /// Runs that fell back from the GPU to the CPU.
    pub gpu_fallbacks: Count,
    /// The most device memory in use at once while this sort held the device.
    pub device_peak_bytes: Gauge,
    /// Waiting for the device.
    pub device_wait_time: Time,
    /// Runs (or pieces) the device could not hold whole, sorted in pieces.
    pub device_splits: Count,
    /// Rows whose window columns the backend computed where the run was (the device).
    pub device_window_rows: Count,
    /// Columns a run left on the device for its consumer (`gather/resident.rs`).
    pub resident_columns: Count,
    /// Runs sorted on each device, registered as `device<N>_runs` at its first run.
    pub(super) device_runs: DeviceRuns,
}

/// The `device<N>_runs` counters of one output partition, made when device N sorts its
/// first run (a sort names only the devices it used).
#[derive(Debug, Clone)]
pub(super) struct DeviceRuns {
    set: ExecutionPlanMetricsSet,
    partition: usize,
    counts: Arc<Mutex<Vec<(usize, Count)>>>,
}

/// The key of the `spread_runs` counter among the `device<N>_runs` ones.
const SPREAD: usize = usize::MAX;

impl DeviceRuns {
    fn add(&self, ordinal: usize) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, count)) = counts.iter().find(|(d, _)| *d == ordinal) {
            count.add(1);
            return;
        }
        let name = match ordinal {
            SPREAD => "spread_runs".to_string(),
            d => format!("device{d}_runs"),
        };
        let count = MetricBuilder::new(&self.set).counter(name, self.partition);
        count.add(1);
        counts.push((ordinal, count));
    }

    /// A run spread over the devices of `devices` (bit `d`: device `d`): counted in each
    /// one's `device<N>_runs` and in `spread_runs`.
    fn add_spread(&self, devices: u32) {
        (0..32)
            .filter(|d| devices >> d & 1 == 1)
            .for_each(|d| self.add(d));
        self.add(SPREAD);
    }
}

impl SortMetrics {
    /// Registers the metrics of `partition` in `set`.
    pub fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let counter = |name: &'static str| MetricBuilder::new(set).counter(name, partition);
        let time = |name: &'static str| MetricBuilder::new(set).subset_time(name, partition);
        Self {
            baseline: BaselineMetrics::new(set, partition),
            collect_time: time("collect_time"),
            encode_time: time("encode_time"),
            h2d_time: time("h2d_time"),
            sort_time: time("device_sort_time"),
            d2h_time: time("d2h_time"),
            tie_refine_time: time("tie_refine_time"),
            tie_groups: counter("tie_groups"),
            gather_time: time("gather_time"),
            gather_h2d_time: time("gather_h2d_time"),
            gather_d2h_time: time("gather_d2h_time"),
            device_gathered_columns: counter("device_gathered_columns"),
            early_columns: counter("early_columns"),
            held_arrays: counter("held_arrays"),
            h2d_bytes: counter("h2d_bytes"),
            d2h_bytes: counter("d2h_bytes"),
            runs: counter("runs"),
            algorithm_runs: [
                counter("algorithm_onesweep"),
                counter("algorithm_locality"),
                counter("algorithm_segmented"),
            ],
            gpu_fallbacks: counter("gpu_fallbacks"),
            device_peak_bytes: MetricBuilder::new(set).gauge("device_peak_bytes", partition),
            device_wait_time: time("device_wait_time"),
            device_splits: counter("device_splits"),
            device_window_rows: counter("device_window_rows"),
            resident_columns: counter("resident_columns"),
            device_runs: DeviceRuns {
                set: set.clone(),
                partition,
                counts: Arc::default(),
            },
        }
    }
    /// What a device gather did for a run: bytes and times, and how many of its columns
    /// it gathered.
    pub fn record_payload(&self, stats: PayloadStats, columns: usize) {
        self.h2d_bytes.add(stats.h2d_bytes + stats.early_h2d_bytes);
        self.d2h_bytes.add(stats.d2h_bytes);
        self.early_columns.add(stats.early_columns);
        self.gather_h2d_time.add_duration(stats.upload);
        self.gather_d2h_time.add_duration(stats.windows);
        self.device_gathered_columns.add(columns);
        self.device_peak_bytes.set_max(stats.device_peak_bytes);
        self.device_wait_time.add_duration(stats.device_wait);
    }

    /// Records what sorting one run did; `elapsed` is the wall time of the backend's call,
    /// split into transfers and the sort proper.
    pub fn record_run(&self, run: &SortedRun, elapsed: Duration) {
        let transfers = run.transfer.upload + run.transfer.download;
        self.h2d_time.add_duration(run.transfer.upload);
        self.d2h_time.add_duration(run.transfer.download);
        self.sort_time.add_duration(
            elapsed.saturating_sub(transfers + run.tie_refine.time + run.device.wait),
        );
        self.tie_refine_time.add_duration(run.tie_refine.time);
        self.tie_groups.add(run.tie_refine.groups);
        self.runs.add(1);
        self.h2d_bytes.add(run.h2d_bytes);
        self.d2h_bytes.add(run.d2h_bytes);
        if run.fell_back {
            self.gpu_fallbacks.add(1);
        }
        self.device_peak_bytes.set_max(run.device.peak_bytes);
        self.device_wait_time.add_duration(run.device.wait);
        if let Some(ordinal) = run.device.ordinal {
            self.device_runs.add(ordinal);
        }
        if run.device.spread_devices != 0 {
            self.device_runs.add_spread(run.device.spread_devices);
        }
        let index = Algorithm::ALL
            .iter()
            .position(|a| *a == run.algorithm)
            .expect("every algorithm is listed");
        self.algorithm_runs[index].add(1);
    }
}
