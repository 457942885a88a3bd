//! Window columns that pick one row's value (`kernels/window_values.cu`): `lag`, `lead`,
//! `first_value`, `last_value` and `nth_value`, and `min` and `max` over frames.
//!
//! `min` and `max` order each value as an unsigned key (floats in IEEE total order, as
//! arrow's kernels and the host's `extremes.rs` compare them), inverted for `max`, so both
//! are a minimum of keys:
//! - frames of at most `w` rows (both ends an offset or the current row): a sparse table of
//!   `⌊log2 w⌋ + 1` levels, each frame the lesser of two overlapping entries;
//! - frames from their partition's first row, or to its last: a running minimum that
//!   restarts at each partition (a segmented prefix scan), read at the frame's far end.

use arrow::array::ArrayRef;
use datafusion::arrow;

use super::{
    array_of, download, nulls_of, scan, valid_counts, FrameSpec, RunLayout, Runs, SortedColumn,
    WindowDevice, KEY_WIDTHS, THREADS,
};
use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::DeviceBuffer;
use crate::cuda::module::{arg, launch};
use crate::gather::{ordered_of, FrameEnd, Ordered, WindowColumn, WindowKind};

/// The types `window_key_*` and `window_unkey_*` order, in the order of their kernels.
pub(super) const ORDERED: [&str; 11] = [
    "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64", "d128",
];

/// Sparse tables larger than this many bytes are left to the host, unless they have at
/// most [`FEW_LEVELS`] levels.
const TABLE_BYTES: usize = 4 << 30;
const FEW_LEVELS: usize = 4;

/// `lag`, `lead`, `first_value`, `last_value` or `nth_value` of `argument`; `None` for a
/// width the kernels do not take.
pub(super) fn value_of(
    at: &mut WindowDevice<'_>,
    column: &WindowColumn,
    argument: &SortedColumn,
    layout: RunLayout,
    frame: FrameSpec,
    rows: usize,
) -> CudaResult<Option<ArrayRef>> {
    let Some(which) = KEY_WIDTHS.iter().position(|&w| w == argument.width) else {
        return Ok(None);
    };
    let (kind, param) = match column.kind {
        WindowKind::Shifted { back } => (0u32, back),
        WindowKind::First => (1, 0),
        WindowKind::Last => (2, 0),
        WindowKind::Nth(n) => (3, n),
        other => unreachable!("{other:?} is not a value function"),
    };
    let mut default = [0u8; 16];
    let has_default = match &column.default {
        Some(bytes) if bytes.len() == argument.width => {
            default[..bytes.len()].copy_from_slice(bytes);
            1u32
        }
        Some(_) => return Ok(None),
        None => 0,
    };
    let device = at.device;
    let width = argument.width;
    let out = device.alloc::<u8>(rows * width, "window values")?;
    let words = rows.div_ceil(32);
    let validity = device.alloc::<u8>(words * 4, "window values validity")?;
    let (mut layout, mut frame, mut n, mut kind, mut param) =
        (layout, frame, rows as u32, kind, param);
    let (mut values, mut valid) = (
        argument.values.ptr(),
        argument.validity.as_ref().map_or(0, |v| v.ptr()),
    );
    let mut default_lo = u64::from_le_bytes(default[..8].try_into().expect("8 bytes"));
    let mut default_hi = u64::from_le_bytes(default[8..].try_into().expect("8 bytes"));
    let (mut has_default, mut out_at, mut valid_at) = (has_default, out.ptr(), validity.ptr());
    let mut params = [
        arg(&mut layout),
        arg(&mut frame),
        arg(&mut n),
        arg(&mut kind),
        arg(&mut param),
        arg(&mut values),
        arg(&mut valid),
        arg(&mut default_lo),
        arg(&mut default_hi),
        arg(&mut has_default),
        arg(&mut out_at),
        arg(&mut valid_at),
    ];
    let grid = at.kernels.grid_for(rows.next_multiple_of(32));
    let kernel = at.kernels.value[which];
    launch(device, kernel, grid, THREADS, &mut params, rows)?;
    let values = download(at, &out, rows * width)?;
    let nulls = nulls_of(at, &validity, rows)?;
    array_of(column.output.clone(), rows, values, nulls).map(Some)
}

/// The kernels' slot of an ordered type (an index into [`ORDERED`]).
fn slot_of(ordered: Ordered) -> Option<usize> {
    let power = |width: usize| [1, 2, 4, 8].iter().position(|&w| w == width);
    match ordered {
        Ordered::Signed(16) => Some(10),
        Ordered::Signed(width) => power(width),
        Ordered::Unsigned(width) => power(width).map(|p| 4 + p),
        Ordered::Float(4) => Some(8),
        Ordered::Float(8) => Some(9),
        Ordered::Float(_) => None,
    }
}

/// How a frame's extreme is read.
enum Reading {
    /// A sparse table of this many levels (frames of bounded length).
    Table(usize),
    /// A running minimum, scanned forward (false) or from each partition's end (true).
    Running(bool),
}

/// How frames of `column` are read over `rows` rows, if the device reads them.
fn reading_of(column: &WindowColumn, rows: usize, key_width: usize) -> Option<Reading> {
    let frame = column.frame;
    if frame.start == FrameEnd::UnboundedPreceding {
        return Some(Reading::Running(false));
    }
    if frame.end == FrameEnd::UnboundedFollowing {
        return Some(Reading::Running(true));
    }
    let longest = frame.most_rows()?;
    let longest = longest.min(rows as u64).max(1);
    let levels = (63 - longest.leading_zeros()) as usize + 1;
    let bytes = levels * rows * key_width;
    (levels <= FEW_LEVELS || bytes <= TABLE_BYTES).then_some(Reading::Table(levels))
}

/// `min` or `max` of `argument` over each row's frame; `None` for a type or frame the
/// kernels do not take.
pub(super) fn extreme(
    at: &mut WindowDevice<'_>,
    column: &WindowColumn,
    argument: &SortedColumn,
    partitions: &Runs,
    layout: RunLayout,
    frame: FrameSpec,
    rows: usize,
) -> CudaResult<Option<ArrayRef>> {
    let Some(slot) = ordered_of(&argument.data_type).and_then(slot_of) else {
        return Ok(None);
    };
    let wide = slot == 10;
    let key_width = if wide { 16 } else { 8 };
    let Some(reading) = reading_of(column, rows, key_width) else {
        return Ok(None);
    };
    let invert = u32::from(column.kind == WindowKind::Max);
    let device = at.device;
    let grid = at.kernels.grid_for(rows);
    let levels = match reading {
        Reading::Table(levels) => levels,
        Reading::Running(_) => 1,
    };
    // Level 0 of the table: the keys.
    let table = device.alloc::<u8>(levels * rows * key_width, "window extreme keys")?;
    {
        let valid = argument.validity.as_ref().map_or(0, |v| v.ptr());
        let (mut values, mut valid, mut n, mut invert, mut out) = (
            argument.values.ptr(),
            valid,
            rows as u32,
            invert,
            table.ptr(),
        );
        let mut params = [
            arg(&mut values),
            arg(&mut valid),
            arg(&mut n),
            arg(&mut invert),
            arg(&mut out),
        ];
        launch(
            device,
            at.kernels.key[slot],
            grid,
            THREADS,
            &mut params,
            rows,
        )?;
    }
    let mut running: Option<DeviceBuffer<u8>> = None;
    let mut from_end = 0u32;
    match reading {
        Reading::Table(levels) => {
            let kernel = match wide {
                true => at.kernels.sparse_u128,
                false => at.kernels.sparse_u64,
            };
            for level in 1..levels as u32 {
                let (mut table_at, mut n, mut level) = (table.ptr(), rows as u32, level);
                let mut params = [arg(&mut table_at), arg(&mut n), arg(&mut level)];
                launch(device, kernel, grid, THREADS, &mut params, rows)?;
            }
        }
        Reading::Running(reverse) => {
            let (kernel, scan_kernels) = match wide {
                true => (at.kernels.segments_u128, at.kernels.scan_seg_u128),
                false => (at.kernels.segments_u64, at.kernels.scan_seg_u64),
            };
            let pairs = device.alloc::<u8>(rows * scan_kernels.width, "window running extremes")?;
            from_end = u32::from(reverse);
            let (mut keys, mut ids, mut n, mut reverse, mut out) = (
                table.ptr(),
                partitions.ids.ptr(),
                rows as u32,
                from_end,
                pairs.ptr(),
            );
            let mut params = [
                arg(&mut keys),
                arg(&mut ids),
                arg(&mut n),
                arg(&mut reverse),
                arg(&mut out),
            ];
            launch(device, kernel, grid, THREADS, &mut params, rows)?;
            scan(at, scan_kernels, &pairs, rows)?;
            running = Some(pairs);
        }
    }
    let counts = valid_counts(at, Some(argument), rows)?;
    let keys = device.alloc::<u8>(rows * key_width, "window extremes")?;
    let words = rows.div_ceil(32);
    let validity = device.alloc::<u8>(words * 4, "window extremes validity")?;
    {
        let (mut layout, mut frame, mut n) = (layout, frame, rows as u32);
        let mut counts_at = counts.as_ref().map_or(0, |c| c.ptr());
        let (mut table_at, mut levels) = (table.ptr(), levels as u32);
        let (mut running_at, mut from_end) = (running.as_ref().map_or(0, |r| r.ptr()), from_end);
        let (mut out, mut valid_at) = (keys.ptr(), validity.ptr());
        let mut params = [
            arg(&mut layout),
            arg(&mut frame),
            arg(&mut n),
            arg(&mut counts_at),
            arg(&mut table_at),
            arg(&mut levels),
            arg(&mut running_at),
            arg(&mut from_end),
            arg(&mut out),
            arg(&mut valid_at),
        ];
        let kernel = match wide {
            true => at.kernels.extreme_u128,
            false => at.kernels.extreme_u64,
        };
        let frame_grid = at.kernels.grid_for(rows.next_multiple_of(32));
        launch(device, kernel, frame_grid, THREADS, &mut params, rows)?;
    }
    drop((table, running, counts));
    let width = argument.width;
    let values = device.alloc::<u8>(rows * width, "window extreme values")?;
    {
        let (mut keys_at, mut n, mut invert, mut out) =
            (keys.ptr(), rows as u32, invert, values.ptr());
        let mut params = [
            arg(&mut keys_at),
            arg(&mut n),
            arg(&mut invert),
            arg(&mut out),
        ];
        launch(
            device,
            at.kernels.unkey[slot],
            grid,
            THREADS,
            &mut params,
            rows,
        )?;
    }
    let host_values = download(at, &values, rows * width)?;
    let nulls = nulls_of(at, &validity, rows)?;
    array_of(column.output.clone(), rows, host_values, nulls).map(Some)
}
