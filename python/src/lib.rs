//! `gpusort._gpusort`: the extension module under the `gpusort` Python package.
//!
//! ```text
//!  Python (python/gpusort/__init__.py)          Rust (this crate)
//!  gpusort.SessionContext ──────────────────▶ session.rs    a DataFusion session with gpusort
//!      .sql() → gpusort.DataFrame ──────────▶ dataframe.rs  collect / stream / explain
//!  gpusort.sort_parquet() ──────────────────▶ sort_parquet.rs  gpusort::pipeline::sort_files
//!  gpusort.Extension ───────────────────────▶ extension.rs  datafusion-python's own context:
//!                                             planner.rs    settings, codec and planner capsules
//!                                             in_process.rs what protobuf cannot write, by reference
//!                                             subplan.rs    what gpusort runs, as one leaf
//!  pyarrow, datafusion-python, polars ◀────▶ arrow_stream.rs the Arrow PyCapsule stream interface
//!                                             blocking.rs   one tokio runtime; waits with the GIL
//!                                                           released, Ctrl-C cancels the work
//!                                             errors.rs     GpuSortError and its messages
//! ```
//!
//! The crate holds no sorting code: every query runs gpusort's rule and operator exactly as
//! a Rust caller's would.

mod arrow_stream;
mod blocking;
mod dataframe;
mod errors;
mod extension;
mod in_process;
mod planner;
mod session;
mod sort_parquet;
mod subplan;

use pyo3::prelude::*;

/// Plan nodes gpusort's in-process codecs wrote and nobody read yet (for tests).
#[pyfunction]
fn unread_plan_references() -> usize {
    in_process::unread_references()
}

/// The module `gpusort._gpusort`.
#[pymodule]
fn _gpusort(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add(
        "GpuSortError",
        module.py().get_type::<errors::GpuSortError>(),
    )?;
    module.add_class::<session::PySessionContext>()?;
    module.add_class::<dataframe::PyDataFrame>()?;
    module.add_class::<arrow_stream::CollectedBatches>()?;
    module.add_class::<extension::PyExtensionCore>()?;
    module.add_function(wrap_pyfunction!(sort_parquet::sort_parquet, module)?)?;
    module.add_function(wrap_pyfunction!(session::gpu_status, module)?)?;
    module.add_function(wrap_pyfunction!(unread_plan_references, module)?)?;
    Ok(())
}
