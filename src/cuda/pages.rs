//! Parquet pages built on the process's device ([`PageEncoder`] of the runtime), for the
//! writer: the pages, or why not, with a failure handled as a failed sort is.

use std::time::Instant;

use crate::cuda::error::CudaError;
use crate::cuda::parquet::{ColumnPages, PageColumn};
use crate::cuda::parquet_input::PreparedInput;
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
    // The input laid out before the device is taken: the gather and the other jobs do not
    // wait for these copies.
    let started = Instant::now();
    let prepared = PreparedInput::of(columns.iter().map(PageColumn::parts), &runtime.host_regions);
    let waited = Instant::now();
    let mut held = waited;
    let pages = runtime.with_device(|device, staging| {
        held = Instant::now();
        encoder.encode_prepared(device, staging, columns, &prepared, snappy)
    });
    crate::trace::event(|| {
        format!(
            "pages: {} MB laid out in {:.1} ms ({}), waited {:.1} ms for the device, held it {:.1} ms",
            prepared.bytes().len() >> 20,
            (waited - started).as_secs_f64() * 1e3,
            if prepared.locked() { "locked" } else { "not locked" },
            (held - waited).as_secs_f64() * 1e3,
            held.elapsed().as_secs_f64() * 1e3,
        )
    });
    pages.map_err(|error: CudaError| {
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
