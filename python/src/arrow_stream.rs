//! Arrow data across the Python boundary through the Arrow PyCapsule interface
//! (`__arrow_c_stream__`), which pyarrow, datafusion-python, polars and others speak: no
//! copy of any buffer either way, and no pyarrow needed to build this crate.
//!
//! - In: [`import_stream`] takes any object with `__arrow_c_stream__` (a `pyarrow.Table`,
//!   a `RecordBatchReader`, a datafusion-python `DataFrame`, ...) and moves its C stream
//!   into an [`ArrowArrayStreamReader`].
//! - Out: [`export_reader`] wraps a [`RecordBatchReader`] in an `"arrow_array_stream"`
//!   capsule; [`CollectedBatches`] is a finished result that can be exported again and again.

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow::compute::cast;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ffi::FFI_ArrowSchema;
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::errors::to_py_err;

const STREAM_CAPSULE: &std::ffi::CStr = c"arrow_array_stream";
const SCHEMA_CAPSULE: &std::ffi::CStr = c"arrow_schema";

/// Moves the C stream of `object` (anything with `__arrow_c_stream__`) into a reader.
pub fn import_stream(object: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    if !object.hasattr("__arrow_c_stream__")? {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "expected Arrow data (an object with __arrow_c_stream__, such as a pyarrow.Table, \
             a RecordBatchReader or a DataFrame), got {}",
            object.get_type().name()?
        )));
    }
    let capsule = object.call_method0("__arrow_c_stream__")?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let pointer = capsule.pointer_checked(Some(STREAM_CAPSULE))?;
    // SAFETY: the capsule's name says it holds an `ArrowArrayStream`; `from_raw` moves the
    // stream out and marks the capsule's copy released, so the producer's destructor frees
    // nothing twice.
    unsafe { ArrowArrayStreamReader::from_raw(pointer.as_ptr().cast::<FFI_ArrowArrayStream>()) }
        .map_err(to_py_err)
}

/// `reader` as an `"arrow_array_stream"` capsule, its batches cast to `requested_schema`
/// (an `"arrow_schema"` capsule, as the protocol passes it) when one is asked for and
/// differs.
pub fn export_reader<'py>(
    py: Python<'py>,
    reader: Box<dyn RecordBatchReader + Send>,
    requested_schema: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let reader = match requested_schema {
        Some(requested) if !requested.is_none() => {
            let target = Arc::new(schema_of_capsule(requested)?);
            cast_reader(reader, target).map_err(to_py_err)?
        }
        _ => reader,
    };
    PyCapsule::new_with_value(py, FFI_ArrowArrayStream::new(reader), STREAM_CAPSULE)
}

fn schema_of_capsule(capsule: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let capsule = capsule.cast::<PyCapsule>()?;
    let pointer = capsule.pointer_checked(Some(SCHEMA_CAPSULE))?;
    // SAFETY: the capsule's name says it holds an `ArrowSchema`, which we only read; the
    // producer keeps owning it.
    let schema = unsafe { &*pointer.as_ptr().cast::<FFI_ArrowSchema>() };
    Schema::try_from(schema).map_err(to_py_err)
}

/// `reader` with every batch cast column by column to `target`, or unchanged when its
/// schema is `target` already.
fn cast_reader(
    reader: Box<dyn RecordBatchReader + Send>,
    target: SchemaRef,
) -> Result<Box<dyn RecordBatchReader + Send>, ArrowError> {
    let source = reader.schema();
    if source.fields() == target.fields() {
        return Ok(reader);
    }
    if source.fields().len() != target.fields().len() {
        return Err(ArrowError::SchemaError(format!(
            "the requested schema has {} columns, the result {}",
            target.fields().len(),
            source.fields().len()
        )));
    }
    let schema = Arc::clone(&target);
    let batches = reader.map(move |batch| {
        let batch = batch?;
        let columns = batch
            .columns()
            .iter()
            .zip(schema.fields())
            .map(|(column, field)| cast(column, field.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        RecordBatch::try_new(Arc::clone(&schema), columns)
    });
    Ok(Box::new(RecordBatchIterator::new(batches, target)))
}

/// A finished result: its batches, exported (without copies) each time a consumer asks.
#[pyclass(name = "CollectedBatches", module = "gpusort._gpusort", frozen)]
pub struct CollectedBatches {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl CollectedBatches {
    /// `batches`, all of `schema`.
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        Self { schema, batches }
    }
}

#[pymethods]
impl CollectedBatches {
    /// The Arrow PyCapsule stream protocol.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let batches = self.batches.clone().into_iter().map(Ok);
        let reader = RecordBatchIterator::new(batches, Arc::clone(&self.schema));
        export_reader(py, Box::new(reader), requested_schema.as_ref())
    }

    /// Rows in all batches.
    #[getter]
    fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}
