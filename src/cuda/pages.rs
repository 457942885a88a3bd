//! Parquet pages built on the process's device ([`PageEncoder`] of the runtime), for the
//! writer: the pages, or why not, with a failure handled as a failed sort is.

use crate::cuda::error::CudaError;
use crate::cuda::parquet::{ColumnPages, PageColumn};
use crate::cuda::runtime::{note_failure_of, runtime};

/// The pages of `columns` encoded on the process's device (Snappy-compressed where
/// `snappy`), or why not: no device, its page kernels not loaded, or a failure (logged; a
/// fatal one disables the device for the process, as a failed sort does). The caller
/// encodes the columns on the host instead.
pub fn encode_on_device(
    columns: &[PageColumn<'_>],
    snappy: bool,
) -> Result<Vec<ColumnPages>, String> {
    let runtime = runtime()?;
    let Some(encoder) = runtime.pages.as_ref() else {
        return Err("the Parquet page kernels did not load".to_string());
    };
    let rows: usize = columns.iter().map(|c| c.rows()).sum();
    runtime
        .with_device(|device, staging| encoder.encode(device, staging, columns, snappy))
        .map_err(|error: CudaError| {
            note_failure_of(
                runtime.ordinal(),
                "Parquet page encoding",
                "encoding on the host",
                &error,
                rows,
            );
            error.to_string()
        })
}
