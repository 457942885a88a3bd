//! The early copy of a sort's columns (`gather/early.rs`): which columns a backend is asked
//! to copy while the input is read, that every admitted batch reaches it, and that it is
//! let go when the input will not be one run in memory (several runs, a spill). A backend
//! that sorts on the CPU and records what its copy receives stands in for the device's.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringViewArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Result;
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionConfig;
use gpusort::exec::GpuSortOptions;
use gpusort::gather::{EarlyColumns, ResidentRequest};
use gpusort::keys::{EncodedKeys, KeyColumn};
use gpusort::sort::{CpuBackend, KeySort, Segments, SortBackend, SortedRun};
use gpusort::{AlgorithmChoice, GpuSortExec};

use super::data::{keyed_input, keyed_schema, source_by_k};

/// What the copies a backend made received.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Received {
    /// The columns each copy was asked for (index and type).
    pub asked: Vec<Vec<(usize, DataType)>>,
    /// Rows of the batches added, and the partitions they came from.
    pub rows: usize,
    pub partitions: BTreeSet<usize>,
    /// Calls of `input_ended` and `abandon`.
    pub ended: usize,
    pub abandoned: usize,
}

/// One copy: records into the backend's [`Received`].
#[derive(Debug)]
struct Recorder(Arc<Mutex<Received>>);

impl EarlyColumns for Recorder {
    fn add(&self, partition: usize, batch: &RecordBatch) {
        let mut received = self.0.lock().unwrap();
        received.rows += batch.num_rows();
        received.partitions.insert(partition);
    }

    fn input_ended(&self) {
        self.0.lock().unwrap().ended += 1;
    }

    fn abandon(&self) {
        self.0.lock().unwrap().abandoned += 1;
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The CPU backend, with copies that record what they receive.
#[derive(Debug, Default)]
struct RecordingBackend {
    received: Arc<Mutex<Received>>,
}

impl SortBackend for RecordingBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn sort(
        &self,
        keys: &EncodedKeys,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<SortedRun> {
        CpuBackend.sort(keys, algorithm, segments)
    }

    fn sort_or_split(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<KeySort> {
        CpuBackend.sort_or_split(columns, algorithm, segments)
    }

    fn early_columns(&self, columns: &[(usize, DataType)]) -> Option<Arc<dyn EarlyColumns>> {
        self.received.lock().unwrap().asked.push(columns.to_vec());
        Some(Arc::new(Recorder(Arc::clone(&self.received))))
    }
}

fn schema() -> SchemaRef {
    let mut fields = keyed_schema().fields().to_vec();
    fields.push(Arc::new(Field::new("s", DataType::Utf8View, true)));
    Arc::new(Schema::new(fields))
}

/// `partitions` input partitions of `rows` rows each, in batches of 1000: the keyed input
/// and a string column made from the key, some null.
fn input(partitions: usize, rows: usize) -> Vec<Vec<RecordBatch>> {
    let with_strings = |batch: RecordBatch| {
        let k = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let s = StringViewArray::from_iter(
            k.values()
                .iter()
                .map(|k| (k % 5 != 0).then(|| format!("value {k} of the input"))),
        );
        let mut columns = batch.columns().to_vec();
        columns.push(Arc::new(s) as ArrayRef);
        RecordBatch::try_new(schema(), columns).unwrap()
    };
    keyed_input(partitions, rows, 1000)
        .into_iter()
        .map(|batches| batches.into_iter().map(with_strings).collect())
        .collect()
}

/// How the sort under test goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One run in memory, its columns asked to stay where it is sorted.
    OneRun,
    /// The same, cut into several runs.
    SeveralRuns,
    /// The same, spilled under a memory limit.
    Spilled,
    /// One run, no column asked to stay.
    NotResident,
}

/// Sorts `partitions` partitions of `rows` rows by `k` as `shape` says; returns what the
/// copies received. The output is checked: every row, in key order.
pub async fn early_copy_of(shape: Shape, partitions: usize, rows: usize) -> Received {
    let input = input(partitions, rows);
    let total: usize = input.iter().flatten().map(RecordBatch::num_rows).sum();
    let bytes: usize = input
        .iter()
        .flatten()
        .map(RecordBatch::get_array_memory_size)
        .sum();
    let backend = Arc::new(RecordingBackend::default());
    let (source, keys) = source_by_k(&input, schema());
    let options = GpuSortOptions {
        backend: Arc::clone(&backend) as _,
        run_rows: match shape {
            Shape::SeveralRuns => total / 4,
            _ => 1 << 28,
        },
        algorithm: AlgorithmChoice::Auto,
        device_gather_min_rows: 0,
        input_batch_rows: 0,
        combine_partitions: false,
    };
    let mut exec = GpuSortExec::try_new(source, keys, None, false, options).unwrap();
    if shape != Shape::NotResident {
        exec = exec.with_resident(Arc::new(ResidentRequest::new(vec![0, 1, 2])));
    }
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(match shape {
        Shape::Spilled => bytes / 3,
        _ => usize::MAX / 2,
    }));
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(pool)
        .build_arc()
        .unwrap();
    let context = Arc::new(
        TaskContext::default()
            .with_session_config(SessionConfig::new().with_batch_size(1000))
            .with_runtime(runtime),
    );
    let output = collect(Arc::new(exec) as Arc<dyn ExecutionPlan>, context)
        .await
        .unwrap();
    let keys: Vec<i64> = output
        .iter()
        .flat_map(|b| {
            let k = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            k.values().to_vec()
        })
        .collect();
    assert_eq!(keys.len(), total, "{shape:?}: every row");
    assert!(keys.is_sorted(), "{shape:?}: in key order");
    let received = backend.received.lock().unwrap().clone();
    received
}
