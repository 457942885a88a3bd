//! Window columns from the runs and from prefix sums: the ranking functions, and `count`,
//! `sum` and `avg` over frames (`kernels/window.cu`): integers and decimals in wrapping
//! arithmetic, floats (and averages of integers) in double-double, as `src/window/sums.rs`
//! computes them on the host.

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use datafusion::arrow;

use super::{
    array_of, download, nulls_of, scan, valid_counts, FrameSpec, RunLayout, SortedColumn,
    WindowDevice, THREADS,
};
use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::DeviceBuffer;
use crate::cuda::module::{arg, launch};
use crate::gather::{WindowColumn, WindowKind};

/// A ranking function: `UInt64`, or `Float64` for `percent_rank` and `cume_dist`.
pub(super) fn ranking(
    at: &mut WindowDevice<'_>,
    column: &WindowColumn,
    layout: RunLayout,
    rows: usize,
) -> CudaResult<ArrayRef> {
    let device = at.device;
    let out = device.alloc::<u8>(rows * 8, "window ranks")?;
    let (kind, param, data_type) = match column.kind {
        WindowKind::RowNumber => (0u32, 0u64, DataType::UInt64),
        WindowKind::Rank => (1, 0, DataType::UInt64),
        WindowKind::DenseRank => (2, 0, DataType::UInt64),
        WindowKind::PercentRank => (3, 0, DataType::Float64),
        WindowKind::CumeDist => (4, 0, DataType::Float64),
        WindowKind::Ntile(n) => (5, n.max(1), DataType::UInt64),
        other => unreachable!("{other:?} is not a ranking function"),
    };
    let (mut layout, mut n, mut kind, mut param, mut dst) =
        (layout, rows as u32, kind, param, out.ptr());
    let mut params = [
        arg(&mut layout),
        arg(&mut n),
        arg(&mut kind),
        arg(&mut param),
        arg(&mut dst),
    ];
    let grid = at.kernels.grid_for(rows);
    launch(device, at.kernels.ranking, grid, THREADS, &mut params, rows)?;
    let values = download(at, &out, rows * 8)?;
    array_of(data_type, rows, values, None)
}

/// `count`, `sum` or `avg` over each row's frame; `None` for an argument type it does
/// not sum, or an average the host must compute (where DataFusion fails).
pub(super) fn frame_aggregate(
    at: &mut WindowDevice<'_>,
    column: &WindowColumn,
    argument: Option<&SortedColumn>,
    layout: RunLayout,
    frame: FrameSpec,
    rows: usize,
) -> CudaResult<Option<ArrayRef>> {
    let sum = matches!(column.kind, WindowKind::Sum | WindowKind::Avg);
    if sum && column.output == DataType::Float64 {
        return float_aggregate(at, column, argument, layout, frame, rows);
    }
    let device = at.device;
    let grid = at.kernels.grid_for(rows);
    let counts = valid_counts(at, argument, rows)?;
    // Prefix sums of the argument, and their width.
    let (prefix, width) = match (sum, argument) {
        (false, _) => (None, 8),
        (true, None) => return Ok(None),
        (true, Some(argument)) => {
            let (load, width, scan_kernels) = match &argument.data_type {
                DataType::Decimal128(_, _) => (at.kernels.load_d128, 16, at.kernels.scan_u128),
                _ if column.kind == WindowKind::Avg => return Ok(None),
                t => {
                    let bytes = t.primitive_width().unwrap_or(0);
                    let Some(slot) = [1, 2, 4, 8].iter().position(|&w| w == bytes) else {
                        return Ok(None);
                    };
                    let slot = if t.is_signed_integer() {
                        slot
                    } else if t.is_unsigned_integer() {
                        4 + slot
                    } else {
                        return Ok(None);
                    };
                    (at.kernels.load_ints[slot], 8, at.kernels.scan_u64)
                }
            };
            let prefix = device.alloc::<u8>((rows + 1) * width, "window prefix sums")?;
            let valid = argument.validity.as_ref().map_or(0, |v| v.ptr());
            let (mut values, mut valid, mut n, mut out) =
                (argument.values.ptr(), valid, rows as u32, prefix.ptr());
            let mut params = [
                arg(&mut values),
                arg(&mut valid),
                arg(&mut n),
                arg(&mut out),
            ];
            launch(device, load, grid, THREADS, &mut params, rows)?;
            scan(at, scan_kernels, &prefix, rows + 1)?;
            (Some(prefix), width)
        }
    };
    let average = column.kind == WindowKind::Avg;
    let out = device.alloc::<u8>(rows * width, "window frame values")?;
    let frame_counts = match average {
        true => Some(device.alloc::<u8>(rows * 8, "window frame counts")?),
        false => None,
    };
    let words = rows.div_ceil(32);
    let validity = match sum {
        true => Some(device.alloc::<u8>(words * 4, "window frame validity")?),
        false => None,
    };
    let (mut layout, mut frame, mut n, mut mode) = (layout, frame, rows as u32, u32::from(!sum));
    let mut prefix_at = prefix.as_ref().map_or(0, |p| p.ptr());
    let mut counts_at = counts.as_ref().map_or(0, |c| c.ptr());
    let (mut sums_at, mut counts_out) = match (sum, &frame_counts) {
        (true, Some(frame_counts)) => (out.ptr(), frame_counts.ptr()),
        (true, None) => (out.ptr(), 0),
        (false, _) => (0, out.ptr()),
    };
    let mut valid_at = validity.as_ref().map_or(0, |v| v.ptr());
    let mut params = [
        arg(&mut layout),
        arg(&mut frame),
        arg(&mut n),
        arg(&mut mode),
        arg(&mut prefix_at),
        arg(&mut counts_at),
        arg(&mut sums_at),
        arg(&mut counts_out),
        arg(&mut valid_at),
    ];
    let kernel = match width {
        16 => at.kernels.frame_u128,
        _ => at.kernels.frame_u64,
    };
    let frame_grid = at.kernels.grid_for(rows.next_multiple_of(32));
    launch(device, kernel, frame_grid, THREADS, &mut params, rows)?;
    let values = match (&frame_counts, argument) {
        (Some(frame_counts), Some(argument)) => {
            match decimal_averages(at, column, argument, &out, frame_counts, rows)? {
                Some(averages) => download(at, &averages, rows * 16)?,
                None => return Ok(None),
            }
        }
        _ => download(at, &out, rows * width)?,
    };
    let nulls = match &validity {
        Some(validity) => nulls_of(at, validity, rows)?,
        None => None,
    };
    array_of(column.output.clone(), rows, values, nulls).map(Some)
}

/// Float `sum` or `avg` (`Float64`) over each row's frame, from double-double prefix sums
/// of the argument converted to `f64`; `None` for an argument type the kernels do not
/// convert, or a column holding a NaN or an infinity (the host counts those apart), or
/// whose sums overflow.
fn float_aggregate(
    at: &mut WindowDevice<'_>,
    column: &WindowColumn,
    argument: Option<&SortedColumn>,
    layout: RunLayout,
    frame: FrameSpec,
    rows: usize,
) -> CudaResult<Option<ArrayRef>> {
    let Some(argument) = argument else {
        return Ok(None);
    };
    let source = match argument.data_type {
        DataType::Int8 => 0,
        DataType::Int16 => 1,
        DataType::Int32 => 2,
        DataType::Int64 => 3,
        DataType::UInt8 => 4,
        DataType::UInt16 => 5,
        DataType::UInt32 => 6,
        DataType::UInt64 => 7,
        DataType::Float32 => 8,
        DataType::Float64 => 9,
        _ => return Ok(None),
    };
    let device = at.device;
    let counts = valid_counts(at, Some(argument), rows)?;
    let non_finite = device.alloc::<u8>(4, "window float check")?;
    device.zero(&non_finite)?;
    let prefix = device.alloc::<u8>((rows + 1) * 16, "window float prefix sums")?;
    let valid = argument.validity.as_ref().map_or(0, |v| v.ptr());
    let (mut values, mut valid, mut n, mut out, mut flag) = (
        argument.values.ptr(),
        valid,
        rows as u32,
        prefix.ptr(),
        non_finite.ptr(),
    );
    let mut params = [
        arg(&mut values),
        arg(&mut valid),
        arg(&mut n),
        arg(&mut out),
        arg(&mut flag),
    ];
    let grid = at.kernels.grid_for(rows);
    let load = at.kernels.load_floats[source];
    launch(device, load, grid, THREADS, &mut params, rows)?;
    scan(at, at.kernels.scan_dd, &prefix, rows + 1)?;
    let out = device.alloc::<u8>(rows * 8, "window float values")?;
    let validity = device.alloc::<u8>(rows.div_ceil(32) * 4, "window float validity")?;
    let (mut layout, mut frame, mut n) = (layout, frame, rows as u32);
    let mut average = u32::from(column.kind == WindowKind::Avg);
    let (mut prefix_at, mut counts_at, mut out_at, mut valid_at, mut flag) = (
        prefix.ptr(),
        counts.as_ref().map_or(0, |c| c.ptr()),
        out.ptr(),
        validity.ptr(),
        non_finite.ptr(),
    );
    let mut params = [
        arg(&mut layout),
        arg(&mut frame),
        arg(&mut n),
        arg(&mut average),
        arg(&mut prefix_at),
        arg(&mut counts_at),
        arg(&mut out_at),
        arg(&mut valid_at),
        arg(&mut flag),
    ];
    let frame_grid = at.kernels.grid_for(rows.next_multiple_of(32));
    launch(
        device,
        at.kernels.frame_dd,
        frame_grid,
        THREADS,
        &mut params,
        rows,
    )?;
    drop(prefix);
    let flag = download(at, &non_finite, 4)?;
    if flag.as_slice().iter().any(|&b| b != 0) {
        return Ok(None);
    }
    let values = download(at, &out, rows * 8)?;
    let nulls = nulls_of(at, &validity, rows)?;
    array_of(DataType::Float64, rows, values, nulls).map(Some)
}

/// DataFusion's decimal averages of the frames' `sums` and `counts`, in the column's
/// output type; `None` when the change of scale is not a power of ten the kernel takes,
/// or some frame overflows (the host then fails as DataFusion does).
fn decimal_averages(
    at: &mut WindowDevice<'_>,
    column: &WindowColumn,
    argument: &SortedColumn,
    sums: &DeviceBuffer<u8>,
    counts: &DeviceBuffer<u8>,
    rows: usize,
) -> CudaResult<Option<DeviceBuffer<u8>>> {
    let (DataType::Decimal128(_, from), DataType::Decimal128(precision, to)) =
        (&argument.data_type, &column.output)
    else {
        return Ok(None);
    };
    let Some(multiplier) = u32::try_from(i32::from(*to) - i32::from(*from))
        .ok()
        .and_then(|k| 10u64.checked_pow(k))
    else {
        return Ok(None);
    };
    let limit = 10u128.pow(u32::from(*precision).min(38));
    let device = at.device;
    let out = device.alloc::<u8>(rows * 16, "window averages")?;
    let overflow = device.alloc::<u8>(4, "window average overflow")?;
    device.zero(&overflow)?;
    let mut limit = [limit as u64, (limit >> 64) as u64];
    let (mut sums_at, mut counts_at, mut n, mut multiplier, mut out_at, mut overflow_at) = (
        sums.ptr(),
        counts.ptr(),
        rows as u32,
        multiplier,
        out.ptr(),
        overflow.ptr(),
    );
    let mut params = [
        arg(&mut sums_at),
        arg(&mut counts_at),
        arg(&mut n),
        arg(&mut multiplier),
        arg(&mut limit),
        arg(&mut out_at),
        arg(&mut overflow_at),
    ];
    let grid = at.kernels.grid_for(rows);
    launch(
        device,
        at.kernels.average_d128,
        grid,
        THREADS,
        &mut params,
        rows,
    )?;
    let flag = download(at, &overflow, 4)?;
    match flag.as_slice().iter().any(|&b| b != 0) {
        true => Ok(None),
        false => Ok(Some(out)),
    }
}
