//! The kernels of `kernels/gather.cu` (a run's payload columns gathered on the device in
//! sorted order) and which column types they take; `payload/` uses them.
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
//!
//! A run spread over several devices keeps each fixed-width and `Boolean` column in slices,
//! one on each device (`multi_gpu/gather.rs`); the `gather_peer_*` kernels read a row from
//! whichever device holds it, over NVLink or PCIe peer access ([`PeerSlices`]).

use arrow::datatypes::DataType;
use datafusion::arrow;

use crate::cuda::columns::PayloadLayout;
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::Device;
use crate::cuda::module::{load_module, Kernel, Module, GATHER};
use crate::cuda::tuning::{Tuning, GATHER_PEER_SLICES};

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
    /// Gathered views' lengths, and their bytes end to end (byte arrays for the pages).
    pub(super) view_lengths: Kernel,
    pub(super) add_stretch_bases: Kernel,
    pub(super) view_bytes_end_to_end: Kernel,
    /// `values` from a column in slices on several devices ([`PeerSlices`]).
    pub(super) peer_values: [Kernel; 6],
    pub(super) peer_bits: Kernel,
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
            view_lengths: kernel("view_lengths")?,
            add_stretch_bases: kernel("add_stretch_bases")?,
            view_bytes_end_to_end: kernel("view_bytes_end_to_end")?,
            peer_values: [
                kernel("gather_peer_w1")?,
                kernel("gather_peer_w2")?,
                kernel("gather_peer_w4")?,
                kernel("gather_peer_w8")?,
                kernel("gather_peer_w16")?,
                kernel("gather_peer_w32")?,
            ],
            peer_bits: kernel("gather_peer_bits")?,
            grid: device.sm_count * 16,
            _module: module,
        })
    }
}

/// A column (its values, or its validity) cut into slices of consecutive rows, each in
/// the memory of one device of a spread run, as the `gather_peer_*` kernels take it (by
/// value; the layout of gather.cu's `PeerSlices`). The gathering device reads every slice
/// over peer access, so the pools holding them must be shared with it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerSlices {
    ptr: [u64; GATHER_PEER_SLICES],
    start: [u32; GATHER_PEER_SLICES + 1],
    count: u32,
}

impl PeerSlices {
    /// The slices `(device address, first row)` in row order, the first at row 0; an
    /// address of 0 (validity only) reads as every row valid.
    pub(crate) fn new(slices: &[(u64, usize)]) -> CudaResult<Self> {
        let fits = |row: usize| u32::try_from(row).is_ok();
        let ordered = slices.windows(2).all(|w| w[0].1 <= w[1].1);
        let starts_at_zero = slices.first().is_some_and(|s| s.1 == 0);
        if slices.len() > GATHER_PEER_SLICES
            || !ordered
            || !starts_at_zero
            || !slices.iter().all(|s| fits(s.1))
        {
            return Err(CudaError::Inconsistent(format!(
                "a column in slices at rows {:?} (1 to {GATHER_PEER_SLICES} slices from row 0)",
                slices.iter().map(|s| s.1).collect::<Vec<_>>()
            )));
        }
        let mut table = Self {
            ptr: [0; GATHER_PEER_SLICES],
            start: [u32::MAX; GATHER_PEER_SLICES + 1],
            count: slices.len() as u32,
        };
        for (k, &(ptr, start)) in slices.iter().enumerate() {
            table.ptr[k] = ptr;
            table.start[k] = start as u32;
        }
        Ok(table)
    }

    /// The slice holding `row`, and the row's place in it (as the kernels find them).
    #[cfg(test)]
    fn locate(&self, row: u32) -> (usize, u32) {
        let mut found = 0;
        for k in 1..self.count as usize {
            if row >= self.start[k] {
                found = k;
            }
        }
        (found, row - self.start[found])
    }
}

/// A fixed-width or `Boolean` column of a spread run in slices of consecutive rows, one on
/// each of its devices.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlicedColumn {
    /// How each slice holds its rows.
    pub layout: PayloadLayout,
    /// The values (bitmaps for `Boolean`).
    pub values: PeerSlices,
    /// The validity bitmaps; `None` when no row is null.
    pub validity: Option<PeerSlices>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_slices_find_the_slice_of_each_row() {
        let table = PeerSlices::new(&[(100, 0), (200, 8), (300, 8), (400, 24)]).unwrap();
        assert_eq!(table.locate(0), (0, 0));
        assert_eq!(table.locate(7), (0, 7));
        // An empty slice (rows 8 .. 8) is skipped.
        assert_eq!(table.locate(8), (2, 0));
        assert_eq!(table.locate(23), (2, 15));
        assert_eq!(table.locate(1000), (3, 976));
        assert_eq!(
            std::mem::size_of::<PeerSlices>(),
            8 * GATHER_PEER_SLICES + 4 * GATHER_PEER_SLICES + 8
        );
    }

    #[test]
    fn peer_slices_refuse_tables_the_kernels_cannot_read() {
        assert!(PeerSlices::new(&[]).is_err());
        assert!(PeerSlices::new(&[(1, 4)]).is_err());
        assert!(PeerSlices::new(&[(1, 0), (2, 9), (3, 8)]).is_err());
        let many: Vec<(u64, usize)> = (0..=GATHER_PEER_SLICES).map(|k| (1, k)).collect();
        assert!(PeerSlices::new(&many).is_err());
        assert!(PeerSlices::new(&[(1, 0), (2, 1 << 33)]).is_err());
    }
}
