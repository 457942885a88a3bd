//! `gpusort.DataFrame`: a planned query of a gpusort session, run when Python asks for its
//! rows, either collected (the GIL released, Ctrl-C cancels the query) or streamed batch by
//! batch through the Arrow PyCapsule interface.

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchReader};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use datafusion::dataframe::DataFrame;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::{collect, displayable};
use futures::StreamExt;
use gpusort::GpuSortRule;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::arrow_stream::{export_reader, CollectedBatches};
use crate::blocking::{runtime, wait_for, TICK};
use crate::errors::to_py_err;

/// A query planned by a [`crate::session::PySessionContext`].
#[pyclass(name = "DataFrame", module = "gpusort._gpusort", frozen)]
pub struct PyDataFrame {
    frame: DataFrame,
    /// The session's rule, whose decisions `explain` reports.
    rule: Arc<GpuSortRule>,
}

impl PyDataFrame {
    /// `frame`, planned in a session whose gpusort rule is `rule`.
    pub fn new(frame: DataFrame, rule: Arc<GpuSortRule>) -> Self {
        Self { frame, rule }
    }
}

#[pymethods]
impl PyDataFrame {
    /// Runs the query and keeps every result batch (exported to pyarrow without copies).
    fn collect(&self, py: Python<'_>) -> PyResult<CollectedBatches> {
        let frame = self.frame.clone();
        let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
        let batches = wait_for(py, async move {
            let task = Arc::new(frame.task_ctx());
            let plan = frame.create_physical_plan().await?;
            collect(plan, task).await
        })?
        .map_err(to_py_err)?;
        Ok(CollectedBatches::new(schema, batches))
    }

    /// Rows of the result.
    fn count(&self, py: Python<'_>) -> PyResult<usize> {
        let frame = self.frame.clone();
        wait_for(py, async move { frame.count().await })?.map_err(to_py_err)
    }

    /// The physical plan and gpusort's decision for each sort in it.
    pub fn explain(&self, py: Python<'_>) -> PyResult<String> {
        let frame = self.frame.clone();
        let plan =
            wait_for(py, async move { frame.create_physical_plan().await })?.map_err(to_py_err)?;
        Ok(format!(
            "{}{}",
            displayable(plan.as_ref()).indent(true),
            self.rule.last_decisions_text()
        ))
    }

    /// The Arrow PyCapsule stream protocol: the query starts now and each batch is computed
    /// when the consumer asks for it.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let frame = self.frame.clone();
        let stream =
            wait_for(py, async move { frame.execute_stream().await })?.map_err(to_py_err)?;
        let reader = BlockingStream {
            schema: stream.schema(),
            stream: Some(stream),
        };
        export_reader(py, Box::new(reader), requested_schema.as_ref())
    }
}

/// A DataFusion stream read by a thread outside the runtime, one batch per `next`.
///
/// A batch may take long to come (a sort's first one comes once all its input is sorted):
/// every [`TICK`] of waiting, Python's signal handlers run. When one raises (Ctrl-C), the
/// query is dropped (its sort cancelled, its memory and spill files let go) and the stream
/// ends in an error that says so. An Arrow C stream can carry only a message, so the
/// consumer raises its own error type (pyarrow: `OSError`) with that message, not
/// `KeyboardInterrupt`.
struct BlockingStream {
    schema: SchemaRef,
    /// `None` once ended or stopped.
    stream: Option<SendableRecordBatchStream>,
}

impl Iterator for BlockingStream {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let stream = self.stream.as_mut()?;
        // Inside the runtime's context, so operators may spawn their tasks while polled,
        // and the wait's timer runs.
        let _context = runtime().enter();
        let mut next = stream.next();
        let next = loop {
            let waited = futures::executor::block_on(tokio::time::timeout(TICK, &mut next));
            if let Ok(next) = waited {
                break next;
            }
            // Signal handlers run on the main thread only; a consumer on another thread
            // never takes the GIL here (its caller may hold it while waiting for it).
            if !on_main_thread() {
                continue;
            }
            if let Err(raised) = Python::attach(|py| {
                py.check_signals().map_err(|e| match e.get_type(py).name() {
                    Ok(name) => name.to_string(),
                    Err(_) => e.to_string(),
                })
            }) {
                drop(next);
                self.stream = None;
                return Some(Err(ArrowError::ExternalError(
                    format!("gpusort: the query was stopped by a signal ({raised})").into(),
                )));
            }
        };
        match next {
            None => {
                self.stream = None;
                None
            }
            Some(batch) => Some(batch.map_err(|e| ArrowError::ExternalError(Box::new(e)))),
        }
    }
}

/// Whether the calling thread is the process's first one (Python's main thread).
fn on_main_thread() -> bool {
    // SAFETY: both calls only read the caller's ids.
    unsafe { libc::getpid() == libc::gettid() }
}

impl RecordBatchReader for BlockingStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}
