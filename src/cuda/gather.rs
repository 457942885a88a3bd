//! The kernels of `kernels/gather.cu` (a run's payload columns gathered on the device in
//! sorted order) and which column types they take; `payload.rs` uses them.
//!
//! The host gather reads each output row's values from wherever the row sat in the input:
//! one DRAM miss per row and column, which at 10⁸ rows costs more than the whole device
//! sort. Here a column crosses PCIe twice, sequentially, and the random reads happen in
//! device memory:
//!
//! ```text
//!  once per run (device lock held):  permutation, each gathered column's values
//!                                    (+ validity bitmap when a row is null) ──pinned──► device
//!                                    (the sort's permutation and key columns, still on the
//!                                    device, are reused: Q1's key `k` never goes up twice)
//!  per window of output batches (lock held for that window only, never while emitting):
//!     gather_w<width> / gather_bits ─► window buffer ──pinned──► each batch's own buffers
//! ```
//!
//! Gathered on the device: primitive columns (integers, floats, decimals, dates, times,
//! timestamps, durations, intervals), `FixedSizeBinary` of 1, 2, 4, 8, 16 or 32 bytes,
//! `Boolean`, and `Utf8View` and `BinaryView` (their views and data buffers go up, and
//! each output batch comes back with its own compact data buffer: `views.rs`). Columns that do not fit in device memory, and every other type, stay with
//! the host gather. A failure part way hands the rest of the run back to the host gather.

use arrow::datatypes::DataType;
use datafusion::arrow;

use crate::cuda::columns::PayloadLayout;
use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::Device;
use crate::cuda::module::{load_module, Kernel, Module, GATHER};
use crate::cuda::tuning::Tuning;

/// Value widths with a kernel of their own, in the order of [`Gatherer::values`].
pub(super) const WIDTHS: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// How `data_type` is gathered on the device, or `None` when the host gathers it.
pub(super) fn payload_layout(data_type: &DataType) -> Option<PayloadLayout> {
    let width = match data_type {
        DataType::Boolean => return Some(PayloadLayout::Bits),
        DataType::Utf8View | DataType::BinaryView => return Some(PayloadLayout::Views),
        DataType::FixedSizeBinary(width) => usize::try_from(*width).ok()?,
        other if other.is_primitive() => other.primitive_width()?,
        _ => return None,
    };
    WIDTHS
        .contains(&width)
        .then_some(PayloadLayout::Fixed(width))
}

/// The loaded gather kernels of one device.
#[derive(Debug)]
pub struct Gatherer {
    _module: Module,
    pub(super) values: [Kernel; 6],
    pub(super) bits: Kernel,
    pub(super) views: Kernel,
    pub(super) scan_view_bytes: Kernel,
    pub(super) copy_view_bytes: Kernel,
    pub(super) grid: u32,
}

impl Gatherer {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(GATHER, device.arch, tuning)?;
        let kernel = |name| module.kernel(name);
        Ok(Self {
            values: [
                kernel("gather_w1")?,
                kernel("gather_w2")?,
                kernel("gather_w4")?,
                kernel("gather_w8")?,
                kernel("gather_w16")?,
                kernel("gather_w32")?,
            ],
            bits: kernel("gather_bits")?,
            views: kernel("gather_views")?,
            scan_view_bytes: kernel("scan_view_bytes")?,
            copy_view_bytes: kernel("copy_view_bytes")?,
            grid: device.sm_count * 16,
            _module: module,
        })
    }
}
