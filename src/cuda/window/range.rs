//! `RANGE` frames with value offsets on the device (`window_range_bound_*` in
//! `kernels/window.cu`): each row's bound is a binary search for its target (its key plus
//! or minus the offset; floats in their own precision, compared in total order) within its
//! window partition, as `src/window/range.rs` finds it on
//! the host, then raised to the largest bound before it in the partition (a segmented
//! running maximum: DataFusion searches each bound from the row before's, so a bound never
//! moves back). The frame kernels read the result (`BOUND_SEARCHED`).

use super::{scan, RunLayout, SortedColumn, WindowDevice, THREADS};
use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::DeviceBuffer;
use crate::cuda::module::{arg, launch};
use crate::gather::{FrameEnd, RangeKey};

/// One end's search, as the kernels' `RangeSearch` parameter.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct RangeSearch {
    offset: u64,
    min_key: u64,
    max_key: u64,
    adds: u32,
    preceding: u32,
    is_end: u32,
    descending: u32,
    nulls_first: u32,
    is_signed: u32,
    clamps: u32,
    is_float: u32,
}

/// `value` as the kernels' unsigned key in ascending order.
fn ordered(value: i128, signed: bool) -> u64 {
    match signed {
        true => (value as i64 as u64) ^ (1 << 63),
        false => value as u64,
    }
}

/// Each row's bound for `end` (exclusive when `is_end`), over the sorted `key` column, as
/// the frame kernels read it; `None` when `end` is no offset or the key's width has no
/// kernel.
pub(super) fn searched_bound(
    at: &mut WindowDevice<'_>,
    range: &RangeKey,
    key: &SortedColumn,
    layout: RunLayout,
    end: FrameEnd,
    is_end: bool,
    rows: usize,
) -> CudaResult<Option<DeviceBuffer<u8>>> {
    let (offset, preceding) = match end {
        FrameEnd::ValuePreceding(offset) => (offset, true),
        FrameEnd::ValueFollowing(offset) => (offset, false),
        _ => return Ok(None),
    };
    let Some(which) = [1, 2, 4, 8].iter().position(|&w| w == key.width) else {
        return Ok(None);
    };
    let search = RangeSearch {
        offset,
        min_key: ordered(range.min, range.signed),
        max_key: ordered(range.max, range.signed),
        // PRECEDING subtracts on an ascending key, FOLLOWING on a descending one.
        adds: u32::from(preceding == range.descending),
        preceding: u32::from(preceding),
        is_end: u32::from(is_end),
        descending: u32::from(range.descending),
        nulls_first: u32::from(range.nulls_first),
        is_signed: u32::from(range.signed),
        clamps: u32::from(!range.signed && !range.float),
        is_float: u32::from(range.float),
    };
    let device = at.device;
    let kernels = at.kernels.scan_seg_u64;
    let out = device.alloc::<u8>(rows * kernels.width, "window range bounds")?;
    let (mut layout, mut n, mut keys, mut valid, mut search, mut out_at) = (
        layout,
        rows as u32,
        key.values.ptr(),
        key.validity.as_ref().map_or(0, |v| v.ptr()),
        search,
        out.ptr(),
    );
    let mut params = [
        arg(&mut layout),
        arg(&mut n),
        arg(&mut keys),
        arg(&mut valid),
        arg(&mut search),
        arg(&mut out_at),
    ];
    let grid = at.kernels.grid_for(rows);
    let kernel = at.kernels.range_bound[which];
    launch(device, kernel, grid, THREADS, &mut params, rows)?;
    scan(at, kernels, &out, rows)?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_keys_keep_the_order_of_values() {
        assert!(ordered(-1, true) < ordered(0, true));
        assert!(ordered(i64::MIN.into(), true) < ordered(i64::MAX.into(), true));
        assert_eq!(ordered(i8::MIN.into(), true), (1u64 << 63) - 128);
        assert_eq!(ordered(u64::MAX.into(), false), u64::MAX);
    }
}
