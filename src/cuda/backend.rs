//! [`CudaBackend`]: the sort contract (`crate::sort::SortBackend`) on the device, and its
//! fallback policy.
//!
//! ```text
//!  CudaBackend::sort*(..)   one sort at a time per device (the staging lock)
//!     error: fatal (sticky) → device disabled for the process; any error → this run is
//!            sorted by the CPU backend instead (same result, counted in `gpu_fallbacks`),
//!            with a run state that still lets the device gather its payload
//! ```

use std::sync::Arc;

use datafusion::common::Result;

use crate::config::AlgorithmChoice;
use crate::cuda::encode::encodable_on_device;
use crate::cuda::error::CudaError;
use crate::cuda::payload::DeviceRun;
use crate::cuda::runtime::{
    count_fallback, disabled_reason, note_failure_of, runtime, CudaRuntime,
};
use crate::cuda::sort_run;
use crate::cuda::tuning::switches;
use crate::keys::{column_rows, encode_keys, limb_sources, EncodedKeys, KeyColumn};
use crate::sort::{CpuBackend, PartitionIdTable, RunState, Segments, SortBackend, SortedRun};

/// Sorts on the GPU; any failure sorts that run on the CPU backend instead.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    runtime: Arc<CudaRuntime>,
}

impl CudaBackend {
    /// The backend over the process's device, or why there is none.
    pub fn new() -> std::result::Result<Self, String> {
        runtime().map(|runtime| Self { runtime })
    }

    /// A run state that keeps nothing on the device: its payload gather uploads the
    /// permutation and every column (for runs the device did not sort, and for tests).
    pub fn empty_run_state(&self) -> Box<dyn RunState> {
        Box::new(DeviceRun::empty(Arc::clone(&self.runtime)))
    }

    /// `run` (sorted by the CPU backend after the device failed or was disabled) with a
    /// state that still lets the device gather its payload.
    fn with_empty_state(&self, mut run: SortedRun) -> SortedRun {
        run.state = Some(self.empty_run_state());
        run
    }
}

impl SortBackend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn sort(
        &self,
        keys: &EncodedKeys,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<SortedRun> {
        if let Some(reason) = disabled_reason() {
            log::debug!("gpusort: CUDA disabled ({reason}); sorting on the CPU");
            return cpu_fallback(keys, algorithm, segments);
        }
        match sort_run::sort_rows(&self.runtime, keys, algorithm, segments) {
            Ok(run) => Ok(run),
            Err(error) => {
                note_failure(&error, keys.rows);
                Ok(self.with_empty_state(cpu_fallback(keys, algorithm, segments)?))
            }
        }
    }

    fn sort_key_columns(
        &self,
        columns: &[KeyColumn],
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<Option<SortedRun>> {
        if disabled_reason().is_some() || !encodable_on_device(columns) {
            return Ok(None);
        }
        let rows = columns.first().map_or(0, column_rows);
        match sort_run::sort_columns(&self.runtime, columns, rows, algorithm, segments) {
            Ok(run) => Ok(Some(run)),
            Err(error) => {
                note_failure(&error, rows);
                let keys = encode_keys(columns)?;
                let mut run = self.with_empty_state(cpu_fallback(&keys, algorithm, segments)?);
                run.refine_keys = (!keys.long_keys.is_empty()).then_some(keys);
                Ok(Some(run))
            }
        }
    }

    fn sort_key_columns_by_ids(
        &self,
        columns: &[KeyColumn],
        ids: &PartitionIdTable,
        algorithm: AlgorithmChoice,
    ) -> Result<Option<(SortedRun, Vec<usize>)>> {
        let rows = columns.first().map_or(0, column_rows);
        // Byte-like keys may leave ties for the host to refine, which needs the ids as a
        // host column: those keep the host's ids.
        let fixed_width = columns.iter().all(|c| {
            c.arrays
                .first()
                .is_none_or(|a| limb_sources(a.data_type()).is_some())
        });
        // For measurement (`bench sql --variant env:GPUSORT_HOST_PARTITION_IDS=1`): keep the
        // host's hashing.
        let host_ids = switches().host_partition_ids();
        if disabled_reason().is_some() || rows < 2 || !fixed_width || host_ids {
            return Ok(None);
        }
        match sort_run::sort_columns_by_ids(&self.runtime, columns, rows, ids, algorithm) {
            Ok(sorted) => Ok(Some(sorted)),
            Err(error) => {
                note_failure_of(
                    "partition id sort",
                    "hashing the rows on the host",
                    &error,
                    rows,
                );
                Ok(None)
            }
        }
    }
}

/// Logs a failed device sort; a fatal error disables the device for the process.
fn note_failure(error: &CudaError, rows: usize) {
    note_failure_of("sort", "sorting this run on the CPU", error, rows);
}

fn cpu_fallback(
    keys: &EncodedKeys,
    algorithm: AlgorithmChoice,
    segments: Option<&Segments>,
) -> Result<SortedRun> {
    count_fallback();
    let mut run = CpuBackend.sort(keys, algorithm, segments)?;
    run.fell_back = true;
    Ok(run)
}
