//! `gpusort.GpuSortError`: the exception every failure of a query or a sort job raises,
//! with the message the Rust API and the `gpusort` command give for it.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;

create_exception!(
    gpusort,
    GpuSortError,
    PyException,
    "A query, a registration or a sort job failed; the message is DataFusion's or gpusort's."
);

/// `error` as a `GpuSortError` with the same message.
pub fn to_py_err(error: impl std::fmt::Display) -> PyErr {
    GpuSortError::new_err(error.to_string())
}
