//! Dropping a query stops every path of the sort within one run: a single run, several
//! runs merged, runs spilled under a memory limit, the combined sort of all partitions and
//! the hash-routed sort. A backend whose sorts wait at a gate holds the first run while
//! the query is dropped; once the gate opens, no other run may start, nothing more may be
//! gathered, every blocking job of the sort must end and the memory pool must be empty.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use futures::StreamExt;
use gpusort::exec::{GpuSortOptions, HashRouting};
use gpusort::keys::{EncodedKeys, KeyColumn};
use gpusort::sort::{IdTableMaker, KeySort, Segments, SortBackend, SortedRun};
use gpusort::{AlgorithmChoice, GpuSortExec};

use super::data::{keyed_input, keyed_schema, source_by_k};

/// A backend that sorts on `inner`, every sort then waiting until the test opens the gate
/// (calls that leave the sort to the caller pass straight through).
#[derive(Debug)]
pub struct GateBackend {
    inner: Arc<dyn SortBackend>,
    started: AtomicUsize,
    open: Mutex<bool>,
    opened: Condvar,
}

impl GateBackend {
    /// A gate, closed, in front of `inner`.
    pub fn new(inner: Arc<dyn SortBackend>) -> Self {
        Self {
            inner,
            started: AtomicUsize::new(0),
            open: Mutex::new(false),
            opened: Condvar::new(),
        }
    }

    /// Sorts that reached the gate.
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// Lets every sort through, now and later.
    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        self.started.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }
}

impl SortBackend for GateBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn sort(
        &self,
        keys: &EncodedKeys,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<SortedRun> {
        self.wait();
        self.inner.sort(keys, algorithm, segments)
    }

    fn sort_key_columns(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<Option<SortedRun>> {
        let sorted = self.inner.sort_key_columns(columns, algorithm, segments)?;
        if sorted.is_some() {
            self.wait();
        }
        Ok(sorted)
    }

    fn sort_or_split(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<KeySort> {
        let sorted = self.inner.sort_or_split(columns, algorithm, segments)?;
        if matches!(sorted, KeySort::Sorted(_)) {
            self.wait();
        }
        Ok(sorted)
    }

    fn sort_key_columns_by_ids(
        &self,
        columns: &[KeyColumn],
        ids: &dyn IdTableMaker,
        algorithm: AlgorithmChoice,
    ) -> Result<Option<(SortedRun, Vec<usize>)>> {
        let sorted = self
            .inner
            .sort_key_columns_by_ids(columns, ids, algorithm)?;
        if sorted.is_some() {
            self.wait();
        }
        Ok(sorted)
    }
}

fn schema() -> SchemaRef {
    keyed_schema()
}

/// `partitions` input partitions of `rows` rows each, in batches of 4096.
fn input(partitions: usize, rows: usize) -> Vec<Vec<RecordBatch>> {
    keyed_input(partitions, rows, 4096)
}

/// A path of the sort, and how to build its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    SingleRun,
    MultiRun,
    Spill,
    Combined,
    Routed,
}

fn plan(path: Path, backend: Arc<GateBackend>, input: &[Vec<RecordBatch>]) -> Arc<GpuSortExec> {
    let (source, keys) = source_by_k(input, schema());
    let rows: usize = input.iter().flatten().map(RecordBatch::num_rows).sum();
    let options = GpuSortOptions {
        backend,
        run_rows: match path {
            Path::MultiRun => rows / 8,
            _ => 1 << 28,
        },
        algorithm: AlgorithmChoice::Auto,
        device_gather_min_rows: 0,
        input_batch_rows: 0,
        combine_partitions: path == Path::Combined,
    };
    let exec = match path {
        Path::Routed => {
            let routing = HashRouting::try_new(vec![col("g", &schema()).unwrap()], 4).unwrap();
            GpuSortExec::try_new_routed(source, keys, None, routing, options)
        }
        Path::Combined => GpuSortExec::try_new(source, keys, None, true, options),
        _ => GpuSortExec::try_new(source, keys, None, false, options),
    };
    Arc::new(exec.unwrap())
}

/// What a dropped query left behind.
#[derive(Debug)]
pub struct Dropped {
    /// Sorts that reached the backend.
    pub sorts: usize,
    /// Rows the sort handed out.
    pub output_rows: usize,
    /// Time spent gathering output rows (nanoseconds).
    pub gather_ns: usize,
    /// How long the sort's jobs took to end once the gate opened.
    pub stopped_in: Duration,
}

/// Runs `path` over `rows` rows (per input partition) on `inner` behind a gate: executes
/// every output partition, drops them while the first sort waits at the gate, opens it,
/// and waits for the sort's jobs to end.
async fn drop_mid_sort(path: Path, inner: Arc<dyn SortBackend>, rows: usize) -> Dropped {
    let partitions = match path {
        Path::SingleRun | Path::MultiRun | Path::Spill => 1,
        Path::Combined | Path::Routed => 4,
    };
    let input = input(partitions, rows);
    let bytes: usize = input
        .iter()
        .flatten()
        .map(RecordBatch::get_array_memory_size)
        .sum();
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(match path {
        Path::Spill => bytes / 2,
        _ => usize::MAX / 2,
    }));
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::clone(&pool))
        .build_arc()
        .unwrap();
    let context = Arc::new(
        TaskContext::default()
            .with_session_config(SessionConfig::new().with_batch_size(4096))
            .with_runtime(runtime),
    );
    let gate = Arc::new(GateBackend::new(inner));
    let exec = plan(path, Arc::clone(&gate), &input);
    let outputs = exec.properties().partitioning.partition_count();
    let mut streams: Vec<_> = (0..outputs)
        .map(|p| exec.execute(p, Arc::clone(&context)).unwrap())
        .collect();
    // Poll every stream until the first sort waits at the gate.
    let deadline = Instant::now() + Duration::from_secs(60);
    while gate.started() == 0 {
        assert!(Instant::now() < deadline, "{path:?}: no sort started");
        for stream in &mut streams {
            let _ = tokio::time::timeout(Duration::from_millis(5), stream.next()).await;
        }
    }
    drop(streams);
    // Let the tasks see they were dropped before the gate opens.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let opened = Instant::now();
    gate.open();
    let deadline = opened + Duration::from_secs(60);
    while exec.live_jobs() > 0 || pool.reserved() > 0 {
        assert!(
            Instant::now() < deadline,
            "{path:?}: {} jobs still running, {} bytes reserved",
            exec.live_jobs(),
            pool.reserved()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stopped_in = opened.elapsed();
    let metrics = exec.metrics().unwrap();
    Dropped {
        sorts: gate.started(),
        output_rows: metrics.output_rows().unwrap_or_default(),
        // Each partition's own (a sum of unrecorded times counts 1 ns each).
        gather_ns: metrics
            .iter()
            .filter(|m| m.value().name() == "gather_time")
            .map(|m| m.value().as_usize())
            .max()
            .unwrap_or(0),
        stopped_in,
    }
}

/// Every path stops within the run that was sorting when the query was dropped: no other
/// run starts, nothing is gathered (not even into memory, for a merge), every job ends and
/// the pool is empty.
pub async fn dropping_a_query_stops_every_path(inner: Arc<dyn SortBackend>, rows: usize) {
    for path in [
        Path::SingleRun,
        Path::MultiRun,
        Path::Spill,
        Path::Combined,
        Path::Routed,
    ] {
        let dropped = drop_mid_sort(path, Arc::clone(&inner), rows).await;
        println!("{path:?}: {dropped:?}");
        assert_eq!(dropped.sorts, 1, "{path:?}: a run started after the drop");
        assert_eq!(
            dropped.output_rows, 0,
            "{path:?}: rows handed out after the drop"
        );
        assert_eq!(
            dropped.gather_ns, 0,
            "{path:?}: rows gathered after the drop"
        );
    }
}
