//! `gpusort.sort_parquet`: the `gpusort sort` pipeline (`gpusort::pipeline::sort_files`)
//! from Python, with the same options, the same atomic output and the same errors.
//!
//! The job runs on the runtime while the calling thread waits with the GIL released; every
//! [`TICK`](crate::blocking::TICK) it calls the caller's progress callback with the job's
//! counts and looks at Python's signals. Ctrl-C (or a callback that raises) drops the job,
//! which cancels its sort and removes its temporary output and spill files, before the
//! exception reaches Python.

use std::str::FromStr;
use std::sync::Arc;

use datafusion::common::config::SpillCompression;
use gpusort::pipeline::{
    sort_files, KeyRangeChoice, PageEncoding, Progress, ProgressSnapshot, SortJob, SortSummary,
};
use gpusort::{BackendChoice, DeviceSelection};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::blocking::wait_with_ticks;
use crate::errors::to_py_err;
use crate::session::size_in_bytes;

/// Sorts Parquet or CSV files (`inputs`: files, directories or globs, in input order) by
/// `by` (`"<col> [ASC|DESC] [NULLS FIRST|LAST], ..."`) into the Parquet file (or, with
/// `max_rows_per_file`, the directory) `output`; returns the job's summary as a dict.
#[pyfunction]
#[pyo3(signature = (
    inputs, output, by, *, memory_limit = None, compression = None, limit = None,
    max_rows_per_file = None, row_group_rows = None, spill_compression = None,
    spill_dir = None, max_spill = None, union_by_name = false,
    overwrite = false, fsync = true, backend = None, devices = None, page_encoding = None,
    key_ranges = None, progress = None
))]
#[allow(clippy::too_many_arguments)]
pub fn sort_parquet<'py>(
    py: Python<'py>,
    inputs: Vec<String>,
    output: String,
    by: String,
    memory_limit: Option<Bound<'py, PyAny>>,
    compression: Option<String>,
    limit: Option<usize>,
    max_rows_per_file: Option<usize>,
    row_group_rows: Option<usize>,
    spill_compression: Option<String>,
    spill_dir: Option<std::path::PathBuf>,
    max_spill: Option<Bound<'py, PyAny>>,
    union_by_name: bool,
    overwrite: bool,
    fsync: bool,
    backend: Option<String>,
    devices: Option<String>,
    page_encoding: Option<String>,
    key_ranges: Option<String>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut job = SortJob::new(inputs, output, by);
    if let Some(limit) = memory_limit {
        job.memory_limit = Some(size_in_bytes(&limit)?);
    }
    if let Some(compression) = compression {
        job.compression = compression;
    }
    job.limit = limit;
    job.max_rows_per_file = max_rows_per_file;
    if let Some(rows) = row_group_rows {
        job.row_group_rows = rows;
    }
    if let Some(spill) = spill_compression {
        job.spill_compression = SpillCompression::from_str(&spill)
            .map_err(|e| PyValueError::new_err(format!("spill_compression: {e}")))?;
    }
    job.spill_dir = spill_dir;
    if let Some(max) = max_spill {
        job.max_spill = Some(size_in_bytes(&max)? as u64);
    }
    job.union_by_name = union_by_name;
    job.overwrite = overwrite;
    job.sync = fsync;
    if let Some(backend) = backend {
        job.backend = BackendChoice::from_str(&backend)
            .map_err(|e| PyValueError::new_err(format!("backend: {e}")))?;
    }
    if let Some(devices) = devices {
        job.devices = DeviceSelection::from_str(&devices)
            .map_err(|e| PyValueError::new_err(format!("devices: {e}")))?;
    }
    if let Some(encoding) = page_encoding {
        job.page_encoding = PageEncoding::from_str(&encoding)
            .map_err(|e| PyValueError::new_err(format!("page_encoding: {e}")))?;
    }
    if let Some(ranges) = key_ranges {
        job.key_ranges = KeyRangeChoice::from_str(&ranges)
            .map_err(|e| PyValueError::new_err(format!("key_ranges: {e}")))?;
    }
    let counts = Arc::new(Progress::new());
    let job_counts = Arc::clone(&counts);
    let run = async move { sort_files(&job, &job_counts).await };
    let summary = wait_with_ticks(py, run, |py| match &progress {
        Some(callback) => {
            callback.call1((snapshot_dict(py, &counts.snapshot())?,))?;
            Ok(())
        }
        None => Ok(()),
    })?
    .map_err(to_py_err)?;
    summary_dict(py, &summary)
}

fn snapshot_dict<'py>(py: Python<'py>, s: &ProgressSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("total_rows", s.total)?;
    dict.set_item("read_rows", s.read)?;
    dict.set_item("sorted_rows", s.sorted)?;
    dict.set_item("written_rows", s.written)?;
    dict.set_item("input_bytes", s.input_bytes)?;
    dict.set_item("read_bytes", s.input_bytes_of(s.read))?;
    dict.set_item("sorted_bytes", s.input_bytes_of(s.sorted))?;
    dict.set_item("written_bytes", s.written_bytes)?;
    Ok(dict)
}

fn summary_dict<'py>(py: Python<'py>, summary: &SortSummary) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("rows", summary.rows)?;
    dict.set_item("input_bytes", summary.input_bytes)?;
    dict.set_item("output_bytes", summary.output.bytes)?;
    let files: Vec<String> = summary
        .output
        .files
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    dict.set_item("files", files)?;
    dict.set_item("seconds", summary.elapsed.as_secs_f64())?;
    dict.set_item("backend", &summary.backend)?;
    dict.set_item("algorithm", &summary.algorithm)?;
    let stages = PyDict::new(py);
    stages.set_item("plan", summary.stages.plan.as_secs_f64())?;
    stages.set_item("read_and_sort", summary.stages.read_and_sort.as_secs_f64())?;
    stages.set_item("sort", summary.stages.sort.as_secs_f64())?;
    stages.set_item("write", summary.stages.write.as_secs_f64())?;
    dict.set_item("stages", stages)?;
    dict.set_item("peak_memory", summary.peak_memory)?;
    dict.set_item("device_page_chunks", summary.output.device_chunks)?;
    dict.set_item(
        "device_page_chunks_on_host",
        summary.output.device_chunks_on_host,
    )?;
    dict.set_item("summary", summary.to_string())?;
    Ok(dict)
}
