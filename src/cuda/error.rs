//! `CudaError`: every failure of the CUDA backend, with the context to act on it.
//!
//! [`CudaError::is_fatal`] separates sticky errors (the context is corrupt: an illegal
//! address, a failed launch, an uncorrectable ECC error) from recoverable ones (device out of
//! memory, a kernel that did not compile). A fatal error disables the device for the process
//! (see [`super::disable_device`]); a recoverable one only sends that run to the CPU backend.

use cudarc::driver::sys::CUresult;
use cudarc::driver::DriverError;
use datafusion::common::DataFusionError;

/// An error of the CUDA backend.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// libcuda (or NVRTC) cannot be loaded on this machine.
    #[error("{library} is not installed or cannot be loaded")]
    LibraryMissing {
        /// The library that is missing.
        library: &'static str,
    },
    /// A driver call outside a kernel launch failed.
    #[error("CUDA call {call} failed: {}", driver_text(*.code))]
    Driver {
        /// The driver function.
        call: &'static str,
        /// Its result code.
        code: CUresult,
    },
    /// A kernel launch (or the work it queued) failed.
    #[error(
        "kernel {kernel} (grid {grid}, block {block}, {rows} rows) failed: {}",
        driver_text(*.code)
    )]
    Launch {
        /// The kernel's entry point.
        kernel: &'static str,
        /// Blocks launched.
        grid: u32,
        /// Threads per block.
        block: u32,
        /// Rows the launch covered.
        rows: usize,
        /// Its result code.
        code: CUresult,
    },
    /// Device memory ran out.
    #[error("device out of memory allocating {bytes} bytes for {what}")]
    OutOfMemory {
        /// The size asked for.
        bytes: usize,
        /// What the buffer was for.
        what: &'static str,
    },
    /// An allocation would pass the device memory limit of the sort holding the device.
    #[error(
        "allocating {bytes} bytes for {what} would pass gpu_sort.device_memory_limit \
         ({used} of {limit} bytes in use)"
    )]
    OverBudget {
        /// The size asked for.
        bytes: usize,
        /// What the buffer was for.
        what: &'static str,
        /// Device memory of this process in use.
        used: usize,
        /// The limit.
        limit: usize,
    },
    /// NVRTC failed to compile a kernel file.
    #[error("NVRTC could not compile {file} for sm_{arch}: {log}")]
    Compile {
        /// The kernel file.
        file: &'static str,
        /// The target architecture, e.g. 90.
        arch: u32,
        /// The compiler's log or error.
        log: String,
    },
    /// The device is unusable for this process (an earlier fatal error, or none found).
    #[error("CUDA device unavailable: {0}")]
    Unavailable(String),
    /// The run is larger than the backend can sort in one piece.
    #[error("a run of {rows} rows is too large for the CUDA backend (at most {max})")]
    TooLarge {
        /// Rows in the run.
        rows: usize,
        /// The most rows one run may have.
        max: usize,
    },
    /// The device's result disagrees with what the host knows of the input.
    #[error("inconsistent device result: {0}")]
    Inconsistent(String),
    /// A step the host does for the device's work failed (a partition id table).
    #[error("a host step of a device sort failed: {0}")]
    HostStep(String),
    /// An output batch of gathered views would need a data buffer past what views address.
    #[error("an output batch holds {bytes} bytes of long values (views address at most 4 GiB)")]
    BatchTooLarge {
        /// Bytes of the batch's long values.
        bytes: u64,
    },
}

/// Result of the CUDA backend.
pub type CudaResult<T> = std::result::Result<T, CudaError>;

impl CudaError {
    /// Wraps the error of driver call `call`, classifying out-of-memory.
    pub fn driver(call: &'static str, error: DriverError) -> Self {
        Self::Driver {
            call,
            code: error.0,
        }
    }

    /// Whether the error leaves the CUDA context unusable (sticky): the device must not be
    /// used again by this process.
    pub fn is_fatal(&self) -> bool {
        match self {
            Self::Driver { code, .. } | Self::Launch { code, .. } => is_sticky(*code),
            _ => false,
        }
    }

    /// Whether the error is the device running out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Self::OutOfMemory { .. } | Self::OverBudget { .. } => true,
            Self::Driver { code, .. } | Self::Launch { code, .. } => {
                *code == CUresult::CUDA_ERROR_OUT_OF_MEMORY
            }
            _ => false,
        }
    }
}

/// The CUDA errors after which the context cannot be used again.
fn is_sticky(code: CUresult) -> bool {
    use CUresult::*;
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUDA_ERROR_UNKNOWN
    )
}

fn driver_text(code: CUresult) -> String {
    let error = DriverError(code);
    match (error.error_name(), error.error_string()) {
        (Ok(name), Ok(text)) => format!("{} ({})", name.to_string_lossy(), text.to_string_lossy()),
        _ => format!("{code:?}"),
    }
}

impl From<CudaError> for DataFusionError {
    fn from(error: CudaError) -> Self {
        if error.is_out_of_memory() {
            DataFusionError::ResourcesExhausted(format!(
                "gpusort: {error}; lower gpu_sort.run_rows to sort in smaller runs, or raise \
                 gpu_sort.device_memory_limit"
            ))
        } else {
            DataFusionError::External(Box::new(error))
        }
    }
}
