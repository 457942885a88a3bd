//! `gpusort.SessionContext`: a DataFusion session with gpusort's rule, built as
//! `gpusort::SessionStateBuilderExt::with_gpu_sort_rule` builds one for Rust callers, and
//! the tables it reads (Parquet, CSV, any Arrow data).
//!
//! Arrow data registered from Python (a `pyarrow.Table`, a datafusion-python `DataFrame`)
//! is not copied: its C stream's batches become a `MemTable`, cut without copies into one
//! contiguous slice of rows per partition, so the table's row order stays the input order
//! that ties keep.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchReader};
use datafusion::catalog::MemTable;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionConfig, SessionContext};
use gpusort::backend::resolve_backend;
use gpusort::{parse_bytes, BackendChoice, GpuSortConfig, GpuSortRule, SessionStateBuilderExt};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrow_stream::import_stream;
use crate::blocking::wait_for;
use crate::dataframe::PyDataFrame;
use crate::errors::to_py_err;

/// A DataFusion session whose sorts gpusort runs.
#[pyclass(name = "SessionContext", module = "gpusort._gpusort", frozen)]
pub struct PySessionContext {
    ctx: SessionContext,
    rule: Arc<GpuSortRule>,
}

#[pymethods]
impl PySessionContext {
    /// A session with DataFusion's defaults and gpusort, then `settings` (option name →
    /// value, e.g. `{"gpu_sort.backend": "cpu", "datafusion.execution.batch_size":
    /// "65536"}`); `memory_limit` (bytes, or a size such as `"4G"`) bounds its memory pool,
    /// beyond which sorts spill.
    #[new]
    #[pyo3(signature = (settings = None, memory_limit = None))]
    fn new(
        settings: Option<HashMap<String, String>>,
        memory_limit: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rule = Arc::new(GpuSortRule::new());
        let mut builder = SessionStateBuilder::new()
            .with_config(SessionConfig::new().with_information_schema(true))
            .with_default_features()
            .with_gpu_sort_rule(GpuSortConfig::default(), Arc::clone(&rule));
        if let Some(limit) = memory_limit
            .map(|limit| size_in_bytes(&limit))
            .transpose()?
        {
            let runtime = RuntimeEnvBuilder::new()
                .with_memory_limit(limit, 1.0)
                .build_arc()
                .map_err(to_py_err)?;
            builder = builder.with_runtime_env(runtime);
        }
        let mut state = builder.build();
        for (key, value) in settings.unwrap_or_default() {
            state
                .config_mut()
                .options_mut()
                .set(&key, &value)
                .map_err(to_py_err)?;
        }
        Ok(Self {
            ctx: SessionContext::new_with_state(state),
            rule,
        })
    }

    /// Plans `query` (DDL such as `SET` or `CREATE` runs now); the result runs when it is
    /// collected or streamed.
    fn sql(&self, py: Python<'_>, query: String) -> PyResult<PyDataFrame> {
        let ctx = self.ctx.clone();
        let frame = wait_for(py, async move { ctx.sql(&query).await })?.map_err(to_py_err)?;
        Ok(PyDataFrame::new(frame, Arc::clone(&self.rule)))
    }

    /// Registers Parquet files (a file, a directory or a glob) as table `name`.
    fn register_parquet(&self, py: Python<'_>, name: String, path: String) -> PyResult<()> {
        let ctx = self.ctx.clone();
        wait_for(py, async move {
            ctx.register_parquet(&name, &path, ParquetReadOptions::default())
                .await
        })?
        .map_err(to_py_err)
    }

    /// Registers CSV files as table `name`.
    #[pyo3(signature = (name, path, has_header = true, delimiter = ","))]
    fn register_csv(
        &self,
        py: Python<'_>,
        name: String,
        path: String,
        has_header: bool,
        delimiter: &str,
    ) -> PyResult<()> {
        let &[delimiter] = delimiter.as_bytes() else {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "delimiter must be one byte, got {delimiter:?}"
            )));
        };
        let ctx = self.ctx.clone();
        wait_for(py, async move {
            let options = CsvReadOptions::new()
                .has_header(has_header)
                .delimiter(delimiter);
            ctx.register_csv(&name, &path, options).await
        })?
        .map_err(to_py_err)
    }

    /// Registers Arrow data (anything with `__arrow_c_stream__`: a `pyarrow.Table`, a
    /// `RecordBatchReader`, a datafusion-python or polars `DataFrame`) as table `name`,
    /// without copying it.
    fn register_arrow(&self, py: Python<'_>, name: &str, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let table = self.mem_table(py, data)?;
        self.ctx.register_table(name, table).map_err(to_py_err)?;
        Ok(())
    }

    /// Arrow data (as [`register_arrow`](Self::register_arrow) takes it) as a DataFrame.
    #[pyo3(name = "from_arrow")]
    fn read_arrow(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<PyDataFrame> {
        let table = self.mem_table(py, data)?;
        let frame = self.ctx.read_table(table).map_err(to_py_err)?;
        Ok(PyDataFrame::new(frame, Arc::clone(&self.rule)))
    }

    /// The registered table `name`.
    fn table(&self, py: Python<'_>, name: String) -> PyResult<PyDataFrame> {
        let ctx = self.ctx.clone();
        let frame = wait_for(py, async move { ctx.table(name.as_str()).await })?;
        Ok(PyDataFrame::new(
            frame.map_err(to_py_err)?,
            Arc::clone(&self.rule),
        ))
    }

    /// Removes table `name`; whether it was there.
    fn deregister_table(&self, name: &str) -> PyResult<bool> {
        Ok(self
            .ctx
            .deregister_table(name)
            .map_err(to_py_err)?
            .is_some())
    }

    /// Sets one option (`gpu_sort.*` or DataFusion's), as SQL's `SET` does.
    fn set(&self, key: &str, value: &str) -> PyResult<()> {
        let state = self.ctx.state_ref();
        let mut state = state.write();
        state
            .config_mut()
            .options_mut()
            .set(key, value)
            .map_err(to_py_err)
    }

    /// Every option and its value (`gpu_sort.*` and DataFusion's), as strings; unset
    /// options are `None`.
    fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self.ctx.state();
        let dict = PyDict::new(py);
        for entry in state.config().options().entries() {
            dict.set_item(entry.key, entry.value)?;
        }
        Ok(dict)
    }

    /// The physical plan of `query` and gpusort's decision for each of its sorts (which
    /// backend runs it, or why DataFusion's sort was kept).
    fn explain(&self, py: Python<'_>, query: String) -> PyResult<String> {
        self.sql(py, query)?.explain(py)
    }

    /// The backend this session's sorts run on now: `cuda`, `cpu`, or why none is usable
    /// (with `gpu_sort.backend = 'cuda'` and no device).
    ///
    /// Opening the device (the first time, a few tenths of a second) runs with the GIL
    /// released.
    #[getter]
    fn backend(&self, py: Python<'_>) -> PyResult<String> {
        let settings = session_gpu_sort_config(&self.ctx);
        py.detach(|| resolve_backend(&settings).map(|backend| backend.name().to_string()))
            .map_err(to_py_err)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "gpusort.SessionContext(backend={})",
            self.backend(py)?
        ))
    }
}

impl PySessionContext {
    /// The Arrow data of `data` as a table of `target_partitions` contiguous partitions.
    fn mem_table(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Arc<MemTable>> {
        let reader = import_stream(data)?;
        let schema = reader.schema();
        // Reading may run the producer's own query (a datafusion-python DataFrame).
        let batches = py
            .detach(|| reader.collect::<Result<Vec<_>, _>>())
            .map_err(to_py_err)?;
        let partitions = self.ctx.copied_config().target_partitions();
        let table = MemTable::try_new(schema, contiguous_partitions(batches, partitions))
            .map_err(to_py_err)?;
        Ok(Arc::new(table))
    }
}

/// `batches` cut (zero-copy slices) into at most `partitions` runs of consecutive rows of
/// about equal size, in order: reading partition 0, then 1, ... gives the input order.
fn contiguous_partitions(batches: Vec<RecordBatch>, partitions: usize) -> Vec<Vec<RecordBatch>> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let per_partition = rows.div_ceil(partitions.max(1)).max(1);
    let mut result = vec![Vec::new()];
    let mut filled = 0;
    for batch in batches {
        let mut offset = 0;
        while offset < batch.num_rows() {
            if filled == per_partition {
                result.push(Vec::new());
                filled = 0;
            }
            let take = (batch.num_rows() - offset).min(per_partition - filled);
            result
                .last_mut()
                .expect("one partition")
                .push(batch.slice(offset, take));
            offset += take;
            filled += take;
        }
    }
    result
}

/// The `gpu_sort` settings of `ctx` as they are now.
fn session_gpu_sort_config(ctx: &SessionContext) -> GpuSortConfig {
    let state = ctx.state();
    let options = state.config().options();
    options
        .extensions
        .get::<GpuSortConfig>()
        .cloned()
        .unwrap_or_default()
}

/// A byte count from Python: an int, or a size such as `"512M"` or `"4G"`.
pub fn size_in_bytes(value: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(bytes) = value.extract::<usize>() {
        return Ok(bytes);
    }
    let text: String = value.extract()?;
    parse_bytes(&text).map_err(pyo3::exceptions::PyValueError::new_err)
}

/// Whether this process can sort on a GPU: `{"gpu": bool, "backend": "cuda" | "cpu",
/// "devices": the usable GPUs' ordinals (`gpu_sort.devices = all`), "reason": why not, or
/// None}`. Opening the devices runs with the GIL released.
#[pyfunction]
pub fn gpu_status(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let mut settings = GpuSortConfig::default();
    settings.backend = BackendChoice::Cuda;
    let status = PyDict::new(py);
    let resolved = py.detach(|| {
        resolve_backend(&settings).map(|backend| {
            let devices: Vec<usize> = backend
                .devices()
                .unwrap_or_default()
                .split(',')
                .filter_map(|d| d.trim().parse().ok())
                .collect();
            (backend.name().to_string(), devices)
        })
    });
    match resolved {
        Ok((backend, devices)) => {
            status.set_item("gpu", true)?;
            status.set_item("backend", backend)?;
            status.set_item("devices", devices)?;
            status.set_item("reason", py.None())?;
        }
        Err(why) => {
            status.set_item("gpu", false)?;
            status.set_item("backend", "cpu")?;
            status.set_item("devices", Vec::<usize>::new())?;
            status.set_item("reason", why)?;
        }
    }
    Ok(status)
}
