//! Columns of a sorted run that stay where the run was sorted (the device), for a
//! consumer that takes them there: the Parquet writer builds their pages from the device's
//! copy instead of having them gathered, brought back, and sent up again.
//!
//! The consumer says which of the sort's columns it would take ([`ResidentRequest`]). A
//! run that is its partition's whole output and whose payload is gathered on a device
//! hands those of them it holds there to the request ([`ResidentRequest::register`], an
//! object of the backend: [`ResidentColumns`]); its batches then carry the other columns
//! only, in a schema whose metadata names the run ([`RESIDENT_RUN_KEY`]). The consumer
//! counts the rows of each run's batches as they come, and asks the run for its columns'
//! rows by range ([`resident_part`]).

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow;
use datafusion::common::{DataFusionError, Result};

/// Metadata key of the schema of a run's batches that leave its resident columns out: the
/// run's number in its [`ResidentRequest`].
pub const RESIDENT_RUN_KEY: &str = "gpusort.resident_run";

/// A sorted run's order (row ids of its rows, in sorted order), shared with the run's
/// resident columns.
pub type SharedOrder = Arc<dyn std::ops::Deref<Target = Vec<u32>> + Send + Sync>;

/// A run's columns kept where it was sorted.
pub trait ResidentColumns: Send + Sync + std::fmt::Debug {
    /// The sort's columns it holds (indices in the sort's schema), in order.
    fn columns(&self) -> &[usize];

    /// Rows of the run.
    fn rows(&self) -> usize;

    /// Its column `column` (a place in [`Self::columns`]) for rows `first .. first + rows`
    /// of the run's order, as an Arrow array on the host: for a consumer that cannot take
    /// it where it is.
    fn column(&self, column: usize, first: usize, rows: usize) -> Result<ArrayRef>;

    /// The backend's own type, for a consumer that works with it there.
    fn as_any(&self) -> &dyn Any;
}

/// The columns a consumer would take where a run is, and the runs that handed theirs.
#[derive(Debug)]
pub struct ResidentRequest {
    /// The sort's columns it takes (indices in the sort's schema).
    columns: Vec<usize>,
    runs: Mutex<HashMap<u64, Arc<dyn ResidentColumns>>>,
    next: AtomicU64,
    /// The payload bytes the job expects, where its sort may hold the input's copy of
    /// these columns on the device in place of the host's (`early.rs`); 0: it may not.
    hold_bytes: AtomicU64,
}

impl ResidentRequest {
    /// A request for the sort's columns `columns`.
    pub fn new(columns: Vec<usize>) -> Self {
        Self {
            columns,
            runs: Mutex::default(),
            next: AtomicU64::new(0),
            hold_bytes: AtomicU64::new(0),
        }
    }

    /// Lets the sort, when its memory runs out, keep the columns it copies to the device
    /// there only and drop their host copies instead of spilling ([`EarlyColumns::take_over`]),
    /// for an input of about `payload_bytes` of them. Only a job that checked that its keys
    /// and what stays on the host fit its memory may ask for it: once the host copies are
    /// gone the input cannot be spilled any more.
    ///
    /// [`EarlyColumns::take_over`]: super::EarlyColumns::take_over
    pub fn allow_holding_input(&self, payload_bytes: u64) {
        self.hold_bytes
            .store(payload_bytes.max(1), Ordering::Relaxed);
    }

    /// The payload bytes expected where the sort may hold the input on the device
    /// ([`Self::allow_holding_input`]).
    pub fn holding_input(&self) -> Option<u64> {
        Some(self.hold_bytes.load(Ordering::Relaxed)).filter(|&b| b > 0)
    }

    /// The sort's columns the consumer takes.
    pub fn columns(&self) -> &[usize] {
        &self.columns
    }

    /// Keeps `run` until the consumer lets it go; the columns of `schema` its batches
    /// carry (those it does not hold), and their schema, marked with the run's number.
    pub fn register(
        &self,
        run: Arc<dyn ResidentColumns>,
        schema: &Schema,
    ) -> Result<(Vec<usize>, SchemaRef)> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let keep: Vec<usize> = (0..schema.fields().len())
            .filter(|c| !run.columns().contains(c))
            .collect();
        let mut metadata = schema.metadata().clone();
        metadata.insert(RESIDENT_RUN_KEY.to_string(), id.to_string());
        let reduced = Arc::new(schema.project(&keep)?.with_metadata(metadata));
        self.lock().insert(id, run);
        Ok((keep, reduced))
    }

    /// The run whose batches `batch` is one of, when it left columns out.
    pub fn run_of(&self, batch: &RecordBatch) -> Result<Option<(u64, Arc<dyn ResidentColumns>)>> {
        let Some(id) = batch.schema_ref().metadata().get(RESIDENT_RUN_KEY) else {
            return Ok(None);
        };
        let id: u64 = id
            .parse()
            .map_err(|_| DataFusionError::Internal(format!("gpusort: a resident run '{id}'")))?;
        let run = self.lock().get(&id).cloned().ok_or_else(|| {
            DataFusionError::Internal(format!("gpusort: resident run {id} is not registered"))
        })?;
        Ok(Some((id, run)))
    }

    /// Lets run `id` go (its consumer took every row of it).
    pub fn release(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<dyn ResidentColumns>>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Rows `first .. first + rows` of column `column` (its index in `run.columns()`) of a
/// resident run.
#[derive(Debug, Clone)]
pub struct ResidentPart {
    /// The run.
    pub run: Arc<dyn ResidentColumns>,
    /// The column's place in the run's columns.
    pub column: usize,
    /// The first row, in the run's order.
    pub first: usize,
    /// Rows of the part.
    pub rows: usize,
}

/// The part of sort column `sort_column` in rows `first .. first + rows` of `run`, when
/// the run holds that column.
pub fn resident_part(
    run: &Arc<dyn ResidentColumns>,
    sort_column: usize,
    first: usize,
    rows: usize,
) -> Option<ResidentPart> {
    let column = run.columns().iter().position(|&c| c == sort_column)?;
    Some(ResidentPart {
        run: Arc::clone(run),
        column,
        first,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field};

    #[derive(Debug)]
    struct HostColumns {
        columns: Vec<usize>,
        values: Vec<i64>,
    }

    impl ResidentColumns for HostColumns {
        fn columns(&self) -> &[usize] {
            &self.columns
        }
        fn rows(&self) -> usize {
            self.values.len()
        }
        fn column(&self, column: usize, first: usize, rows: usize) -> Result<ArrayRef> {
            assert_eq!(column, 0);
            let values = self.values[first..first + rows].to_vec();
            Ok(Arc::new(Int64Array::from(values)))
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn batches_of_a_registered_run_name_it_and_leave_its_columns_out() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, true),
            Field::new("c", DataType::Int64, false),
        ]);
        let request = ResidentRequest::new(vec![0, 2]);
        let run: Arc<dyn ResidentColumns> = Arc::new(HostColumns {
            columns: vec![2],
            values: (0..10).collect(),
        });
        let (_, reduced) = request.register(Arc::clone(&run), &schema).unwrap();
        let names: Vec<&str> = reduced.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let batch = RecordBatch::new_empty(Arc::clone(&reduced));
        let (id, found) = request.run_of(&batch).unwrap().unwrap();
        assert!(Arc::ptr_eq(&found, &run));
        let part = resident_part(&found, 2, 3, 4).unwrap();
        assert_eq!((part.column, part.first, part.rows), (0, 3, 4));
        assert!(resident_part(&found, 0, 0, 1).is_none());
        let array = part.run.column(part.column, part.first, part.rows).unwrap();
        let expected = Int64Array::from(vec![3, 4, 5, 6]);
        assert_eq!(array.as_ref(), &expected as &dyn arrow::array::Array);
        // A batch of the plain schema is no run's; a released run is an error.
        let plain = RecordBatch::new_empty(Arc::new(schema));
        assert!(request.run_of(&plain).unwrap().is_none());
        request.release(id);
        assert!(request.run_of(&batch).is_err());
    }
}
