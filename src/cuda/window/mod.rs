//! The kernels of `kernels/window.cu` and `kernels/window_values.cu`, and the window
//! columns they compute over a run's sorted rows on the device ([`compute_windows`]), for
//! `DevicePayload::windows` (`payload/`).
//!
//! ```text
//!  key columns, gathered in sorted order ─► flags: row starts a window partition / peer group
//!  flags ─► inclusive scans ─► each row's run id; the runs' first rows (scatter)
//!  per column:  ranking functions                from the run starts   (aggregates.rs)
//!               count / sum / avg over the frame differences of prefix sums (floats in
//!                                                double-double)
//!               lag .. nth_value                 another row's value   (values.rs)
//!               min / max over the frame         sparse table or running minimum
//!  ─► downloaded once, whole, into host buffers the output batches slice
//! ```
//!
//! Results equal the host's (`src/window/`): ranks from the same runs, wrapping integer
//! and decimal sums, whose differences of wrapped prefixes are exact, DataFusion's decimal
//! averages, and extremes in the same total order. The columns are downloaded whole
//! before the first batch is emitted, so a device failure later in the run's gather cannot
//! leave a batch without them.

mod aggregates;
mod range;
mod values;

use std::sync::Arc;

use arrow::array::{make_array, ArrayData, ArrayRef};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::DataType;
use datafusion::arrow;

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::download::download_into_buffers;
use crate::cuda::memory::host_memory::HostRegions;
use crate::cuda::memory::transfer::Staging;
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, WINDOW, WINDOW_VALUES};
use crate::cuda::tuning::{Tuning, WINDOW_SCAN_ITEMS, WINDOW_THREADS as THREADS};
use crate::gather::{FrameEnd, FrameRange, WindowKind, WindowRequest};

/// Key widths with a comparison kernel of their own, in the order of [`Windower::distinct`].
const KEY_WIDTHS: [usize; 5] = [1, 2, 4, 8, 16];

/// The argument types `window_load_float_*` convert to doubles, in the order of their
/// kernels.
const FLOAT_SOURCES: [&str; 10] = [
    "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64",
];

/// Flag bit of a row that starts a window partition (and so a peer group).
const PARTITION_MARK: u32 = 1;
/// Flag bit of a row that starts a peer group.
const PEER_MARK: u32 = 2;

/// Prefix-scan kernels over one element type.
#[derive(Debug, Clone, Copy)]
struct Scan {
    reduce: Kernel,
    tiles: Kernel,
    apply: Kernel,
    /// Bytes of an element.
    width: usize,
}

/// The loaded window kernels of one device.
#[derive(Debug)]
pub struct Windower {
    _module: Module,
    _values_module: Module,
    distinct: [Kernel; 5],
    mark_rows: Kernel,
    load_flags: Kernel,
    load_count: Kernel,
    /// `window_load_i8 .. i64`, then `u8 .. u64`.
    load_ints: [Kernel; 8],
    load_d128: Kernel,
    scan_u32: Scan,
    scan_u64: Scan,
    scan_u128: Scan,
    starts: Kernel,
    ranking: Kernel,
    frame_u64: Kernel,
    frame_u128: Kernel,
    average_d128: Kernel,
    /// `window_load_float_i8 .. i64`, `u8 .. u64`, then `f32` and `f64`.
    load_floats: [Kernel; 10],
    scan_dd: Scan,
    frame_dd: Kernel,
    /// `window_value_w1 .. w16`, in the order of [`KEY_WIDTHS`].
    value: [Kernel; 5],
    /// `window_key_*` and `window_unkey_*`, in the order of [`values::ORDERED`].
    key: [Kernel; 11],
    unkey: [Kernel; 11],
    sparse_u64: Kernel,
    sparse_u128: Kernel,
    segments_u64: Kernel,
    segments_u128: Kernel,
    scan_seg_u64: Scan,
    scan_seg_u128: Scan,
    extreme_u64: Kernel,
    extreme_u128: Kernel,
    /// `window_range_bound_w1 .. w8`.
    range_bound: [Kernel; 4],
    grid: u32,
}

impl Windower {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(WINDOW, device.arch, tuning)?;
        let values_module = load_module(WINDOW_VALUES, device.arch, tuning)?;
        let kernel = |name| module.kernel(name);
        let value_kernel = |name: &str| values_module.kernel(name);
        let scan_in = |module: &Module, suffix: &str, width| -> CudaResult<Scan> {
            Ok(Scan {
                reduce: module.kernel(&format!("window_scan_reduce_{suffix}"))?,
                tiles: module.kernel(&format!("window_scan_tiles_{suffix}"))?,
                apply: module.kernel(&format!("window_scan_apply_{suffix}"))?,
                width,
            })
        };
        let scan = |suffix: &str, width| scan_in(&module, suffix, width);
        let each = |prefix: &str| -> CudaResult<[Kernel; 11]> {
            let mut kernels = Vec::with_capacity(11);
            for name in values::ORDERED {
                kernels.push(value_kernel(&format!("{prefix}_{name}"))?);
            }
            Ok(kernels.try_into().expect("eleven ordered types"))
        };
        Ok(Self {
            distinct: [
                kernel("window_distinct_w1")?,
                kernel("window_distinct_w2")?,
                kernel("window_distinct_w4")?,
                kernel("window_distinct_w8")?,
                kernel("window_distinct_w16")?,
            ],
            mark_rows: kernel("window_mark_rows")?,
            load_flags: kernel("window_load_flags")?,
            load_count: kernel("window_load_count")?,
            load_ints: [
                kernel("window_load_i8")?,
                kernel("window_load_i16")?,
                kernel("window_load_i32")?,
                kernel("window_load_i64")?,
                kernel("window_load_u8")?,
                kernel("window_load_u16")?,
                kernel("window_load_u32")?,
                kernel("window_load_u64")?,
            ],
            load_d128: kernel("window_load_d128")?,
            scan_u32: scan("u32", 4)?,
            scan_u64: scan("u64", 8)?,
            scan_u128: scan("u128", 16)?,
            starts: kernel("window_starts")?,
            ranking: kernel("window_ranking")?,
            frame_u64: kernel("window_frame_u64")?,
            frame_u128: kernel("window_frame_u128")?,
            average_d128: kernel("window_average_d128")?,
            load_floats: {
                let mut kernels = Vec::with_capacity(10);
                for name in FLOAT_SOURCES {
                    kernels.push(module.kernel(&format!("window_load_float_{name}"))?);
                }
                kernels.try_into().expect("ten float sources")
            },
            scan_dd: scan("dd", 16)?,
            frame_dd: kernel("window_frame_dd")?,
            value: [
                value_kernel("window_value_w1")?,
                value_kernel("window_value_w2")?,
                value_kernel("window_value_w4")?,
                value_kernel("window_value_w8")?,
                value_kernel("window_value_w16")?,
            ],
            key: each("window_key")?,
            unkey: each("window_unkey")?,
            sparse_u64: value_kernel("window_sparse_u64")?,
            sparse_u128: value_kernel("window_sparse_u128")?,
            segments_u64: value_kernel("window_segments_u64")?,
            segments_u128: value_kernel("window_segments_u128")?,
            scan_seg_u64: scan_in(&values_module, "seg_u64", 16)?,
            scan_seg_u128: scan_in(&values_module, "seg_u128", 32)?,
            extreme_u64: value_kernel("window_extreme_u64")?,
            extreme_u128: value_kernel("window_extreme_u128")?,
            range_bound: [
                kernel("window_range_bound_w1")?,
                kernel("window_range_bound_w2")?,
                kernel("window_range_bound_w4")?,
                kernel("window_range_bound_w8")?,
            ],
            grid: device.sm_count * 16,
            _module: module,
            _values_module: values_module,
        })
    }

    /// Blocks for `threads` threads of work, at most the kernels' grid.
    fn grid_for(&self, threads: usize) -> u32 {
        (threads.div_ceil(THREADS as usize) as u32).clamp(1, self.grid)
    }
}

/// One of the run's columns on the device in sorted order.
pub(super) struct SortedColumn {
    /// The values, `width` bytes each.
    pub values: DeviceBuffer<u8>,
    /// Bit i: row i is valid; `None` when every row is.
    pub validity: Option<DeviceBuffer<u8>>,
    /// Bytes of a value.
    pub width: usize,
    /// The column's type.
    pub data_type: DataType,
}

/// The runs of the sorted rows: each row's run id (from 1, `rows + 1` entries, entry 0
/// being 0) and each run's first row.
struct Runs {
    ids: DeviceBuffer<u8>,
    starts: DeviceBuffer<u8>,
}

/// The window partitions and peer groups, as the kernels' `RunLayout` parameter
/// (`kernels/window.cuh`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct RunLayout {
    part_ids: u64,
    part_starts: u64,
    peer_ids: u64,
    peer_starts: u64,
}

impl RunLayout {
    fn of(partitions: &Runs, peers: &Runs) -> Self {
        Self {
            part_ids: partitions.ids.ptr(),
            part_starts: partitions.starts.ptr(),
            peer_ids: peers.ids.ptr(),
            peer_starts: peers.starts.ptr(),
        }
    }
}

/// A frame, as the kernels' `FrameSpec` parameter (`kernels/window.cuh`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct FrameSpec {
    start_offset: u64,
    end_offset: u64,
    start_kind: u32,
    end_kind: u32,
    peers: u32,
    pad: u32,
}

impl FrameSpec {
    /// `frame`, its `RANGE` offsets' bounds searched into `searched` (start, end).
    fn of(frame: FrameRange, searched: [Option<&DeviceBuffer<u8>>; 2]) -> Self {
        let (start_kind, start_offset) = bound(frame.start, searched[0]);
        let (end_kind, end_offset) = bound(frame.end, searched[1]);
        Self {
            start_offset,
            end_offset,
            start_kind,
            end_kind,
            peers: u32::from(frame.peers),
            pad: 0,
        }
    }
}

/// The frame kernels' code and offset for one end of a frame (`kernels/window.cuh`); a
/// `RANGE` offset's is the address of its bounds, `searched`.
fn bound(end: FrameEnd, searched: Option<&DeviceBuffer<u8>>) -> (u32, u64) {
    match (end, searched) {
        (FrameEnd::UnboundedPreceding, _) => (0, 0),
        (FrameEnd::Preceding(n), _) => (1, n),
        (FrameEnd::CurrentRow, _) => (2, 0),
        (FrameEnd::Following(n), _) => (3, n),
        (FrameEnd::UnboundedFollowing, _) => (4, 0),
        (FrameEnd::GroupsPreceding(n), _) => (6, n),
        (FrameEnd::GroupsFollowing(n), _) => (7, n),
        (FrameEnd::ValuePreceding(_) | FrameEnd::ValueFollowing(_), Some(bounds)) => {
            (5, bounds.ptr())
        }
        // Not searched: `compute_windows` searches every offset before it builds a frame.
        (FrameEnd::ValuePreceding(_) | FrameEnd::ValueFollowing(_), None) => {
            unreachable!("a RANGE offset's bounds are searched first")
        }
    }
}

/// What the columns are computed with: the device, its kernels, and where they go.
pub(super) struct WindowDevice<'a> {
    pub device: &'a Device,
    pub staging: &'a mut Staging,
    pub regions: &'a Arc<HostRegions>,
    pub kernels: &'a Windower,
}

/// `request`'s window columns over `rows` sorted rows, whose columns `sorted` puts on the
/// device in sorted order (`None`: a column it cannot), window partitions also starting at
/// rows `starts`; `None` when a column it needs is not there.
pub(super) fn compute_windows(
    at: &mut WindowDevice<'_>,
    request: &WindowRequest,
    rows: usize,
    starts: &[usize],
    sorted: &mut dyn FnMut(usize) -> CudaResult<Option<SortedColumn>>,
) -> CudaResult<Option<Vec<ArrayRef>>> {
    // The kernels index rows in 32 bits, grid-stride loops included.
    if rows == 0 || rows > (u32::MAX / 2) as usize {
        return Ok(None);
    }
    let device = at.device;
    let flags = device.alloc::<u8>(rows, "window flags")?;
    device.zero(&flags)?;
    let starts: Vec<u32> = starts
        .iter()
        .filter(|&&s| s > 0 && s < rows)
        .map(|&s| s as u32)
        .collect();
    if !starts.is_empty() {
        let marked = at.staging.upload::<u32, _>(
            device,
            starts.len(),
            "window partition starts",
            |from, out| out.copy_from_slice(&starts[from..from + out.len()]),
        )?;
        let (mut src, mut count, mut out) = (marked.ptr(), starts.len() as u32, flags.ptr());
        let mut params = [arg(&mut src), arg(&mut count), arg(&mut out)];
        let grid = at.kernels.grid_for(starts.len());
        launch(
            device,
            at.kernels.mark_rows,
            grid,
            THREADS,
            &mut params,
            starts.len(),
        )?;
    }
    let keys = request
        .partition_by
        .iter()
        .map(|&c| (c, PARTITION_MARK | PEER_MARK))
        .chain(request.order_by.iter().map(|&c| (c, PEER_MARK)));
    for (column, mark) in keys {
        let Some(key) = sorted(column)? else {
            return Ok(None);
        };
        let Some(which) = KEY_WIDTHS.iter().position(|&w| w == key.width) else {
            return Ok(None);
        };
        let valid = key.validity.as_ref().map_or(0, |v| v.ptr());
        let (mut values, mut valid, mut n, mut mark, mut out) =
            (key.values.ptr(), valid, rows as u32, mark, flags.ptr());
        let mut params = [
            arg(&mut values),
            arg(&mut valid),
            arg(&mut n),
            arg(&mut mark),
            arg(&mut out),
        ];
        let kernel = at.kernels.distinct[which];
        launch(
            device,
            kernel,
            at.kernels.grid_for(rows),
            THREADS,
            &mut params,
            rows,
        )?;
    }
    let partitions = runs_of(at, &flags, rows, PARTITION_MARK)?;
    let peers = match request.reads_peers() {
        true => Some(runs_of(at, &flags, rows, PEER_MARK)?),
        false => None,
    };
    drop(flags);
    let peers = peers.as_ref().unwrap_or(&partitions);
    let layout = RunLayout::of(&partitions, peers);
    // The `RANGE` key, gathered once for every searched bound.
    let searches = request.columns.iter().any(|c| c.frame.has_value_offset());
    let range_key = match (searches, &request.range_key, request.order_by.first()) {
        (false, _, _) => None,
        (true, Some(range), Some(&key)) => match sorted(key)? {
            Some(key) => Some((range, key)),
            None => return Ok(None),
        },
        (true, _, _) => return Ok(None),
    };
    // Columns taken by argument, so that each argument is gathered once (and only one is
    // held at a time); the arrays go back to their places.
    let mut order: Vec<usize> = (0..request.columns.len()).collect();
    order.sort_by_key(|&c| request.columns[c].arg);
    let mut current: Option<(usize, SortedColumn)> = None;
    let mut out: Vec<Option<ArrayRef>> = vec![None; request.columns.len()];
    for c in order {
        let column = &request.columns[c];
        if let Some(index) = column.arg {
            if current.as_ref().map(|(i, _)| *i) != Some(index) {
                // The last argument is freed before the next is gathered.
                drop(current.take());
                match sorted(index)? {
                    Some(arg) => current = Some((index, arg)),
                    None => return Ok(None),
                }
            }
        }
        let arg = current
            .as_ref()
            .filter(|(i, _)| column.arg == Some(*i))
            .map(|(_, arg)| arg);
        let mut searched = [None, None];
        for (slot, end) in [column.frame.start, column.frame.end]
            .into_iter()
            .enumerate()
        {
            let Some((range, key)) = range_key.as_ref().filter(|_| end.is_value_offset()) else {
                continue;
            };
            let is_end = slot == 1;
            match range::searched_bound(at, range, key, layout, end, is_end, rows)? {
                Some(bounds) => searched[slot] = Some(bounds),
                None => return Ok(None),
            }
        }
        let frame = FrameSpec::of(column.frame, [searched[0].as_ref(), searched[1].as_ref()]);
        let array = match column.kind {
            WindowKind::RowNumber
            | WindowKind::Rank
            | WindowKind::DenseRank
            | WindowKind::PercentRank
            | WindowKind::CumeDist
            | WindowKind::Ntile(_) => Some(aggregates::ranking(at, column, layout, rows)?),
            WindowKind::Count | WindowKind::Sum | WindowKind::Avg => {
                aggregates::frame_aggregate(at, column, arg, layout, frame, rows)?
            }
            WindowKind::Shifted { .. }
            | WindowKind::First
            | WindowKind::Last
            | WindowKind::Nth(_) => match arg {
                Some(arg) => values::value_of(at, column, arg, layout, frame, rows)?,
                None => None,
            },
            WindowKind::Min | WindowKind::Max => match arg {
                Some(arg) => values::extreme(at, column, arg, &partitions, layout, frame, rows)?,
                None => None,
            },
        };
        match array {
            Some(array) => out[c] = Some(array),
            None => return Ok(None),
        }
    }
    Ok(out.into_iter().collect())
}

/// The runs whose first rows carry `mark` in `flags`.
fn runs_of(
    at: &mut WindowDevice<'_>,
    flags: &DeviceBuffer<u8>,
    rows: usize,
    mark: u32,
) -> CudaResult<Runs> {
    let device = at.device;
    let ids = device.alloc::<u8>((rows + 1) * 4, "window run ids")?;
    let (mut src, mut n, mut mark_arg, mut out) = (flags.ptr(), rows as u32, mark, ids.ptr());
    let mut params = [
        arg(&mut src),
        arg(&mut n),
        arg(&mut mark_arg),
        arg(&mut out),
    ];
    let grid = at.kernels.grid_for(rows);
    launch(
        device,
        at.kernels.load_flags,
        grid,
        THREADS,
        &mut params,
        rows,
    )?;
    scan(at, at.kernels.scan_u32, &ids, rows + 1)?;
    let starts = device.alloc::<u8>(rows * 4, "window run starts")?;
    let (mut src, mut ids_at, mut n, mut mark_arg, mut out) =
        (flags.ptr(), ids.ptr(), rows as u32, mark, starts.ptr());
    let mut params = [
        arg(&mut src),
        arg(&mut ids_at),
        arg(&mut n),
        arg(&mut mark_arg),
        arg(&mut out),
    ];
    launch(device, at.kernels.starts, grid, THREADS, &mut params, rows)?;
    Ok(Runs { ids, starts })
}

/// An inclusive prefix sum of the `len` elements of `data`, in place.
fn scan(
    at: &WindowDevice<'_>,
    kernels: Scan,
    data: &DeviceBuffer<u8>,
    len: usize,
) -> CudaResult<()> {
    let device = at.device;
    let tile = THREADS as usize * WINDOW_SCAN_ITEMS as usize;
    let tiles = len.div_ceil(tile);
    let totals = device.alloc::<u8>(tiles * kernels.width, "window scan tiles")?;
    // The per-tile passes over the data: its tiles' totals, then each tile scanned.
    let over_tiles = |kernel| {
        let (mut src, mut len_arg, mut sums) = (data.ptr(), len as u64, totals.ptr());
        let mut params = [arg(&mut src), arg(&mut len_arg), arg(&mut sums)];
        launch(device, kernel, tiles as u32, THREADS, &mut params, len)
    };
    over_tiles(kernels.reduce)?;
    let (mut sums, mut count) = (totals.ptr(), tiles as u32);
    let mut params = [arg(&mut sums), arg(&mut count)];
    launch(device, kernels.tiles, 1, THREADS, &mut params, len)?;
    over_tiles(kernels.apply)
}

/// Prefix counts of the valid rows of `argument` (`rows + 1` entries, entry 0 being 0),
/// when some row is null.
fn valid_counts(
    at: &mut WindowDevice<'_>,
    argument: Option<&SortedColumn>,
    rows: usize,
) -> CudaResult<Option<DeviceBuffer<u8>>> {
    let Some(validity) = argument.and_then(|a| a.validity.as_ref()) else {
        return Ok(None);
    };
    let device = at.device;
    let counts = device.alloc::<u8>((rows + 1) * 8, "window counts")?;
    let (mut valid, mut n, mut out) = (validity.ptr(), rows as u32, counts.ptr());
    let mut params = [arg(&mut valid), arg(&mut n), arg(&mut out)];
    let grid = at.kernels.grid_for(rows);
    launch(
        device,
        at.kernels.load_count,
        grid,
        THREADS,
        &mut params,
        rows,
    )?;
    scan(at, at.kernels.scan_u64, &counts, rows + 1)?;
    Ok(Some(counts))
}

/// The validity bitmap of `rows` rows, downloaded; `None` when no row is null.
fn nulls_of(
    at: &mut WindowDevice<'_>,
    validity: &DeviceBuffer<u8>,
    rows: usize,
) -> CudaResult<Option<NullBuffer>> {
    let bits = download(at, validity, rows.div_ceil(32) * 4)?;
    Ok(Some(NullBuffer::new(BooleanBuffer::new(bits, 0, rows))).filter(|n| n.null_count() > 0))
}

/// The first `bytes` bytes of `src` in one host buffer.
fn download(at: &mut WindowDevice<'_>, src: &DeviceBuffer<u8>, bytes: usize) -> CudaResult<Buffer> {
    let mut parts = download_into_buffers(at.device, at.staging, at.regions, src, &[bytes])?;
    Ok(parts.remove(0))
}

/// An array of `data_type` over `values`.
fn array_of(
    data_type: DataType,
    rows: usize,
    values: Buffer,
    nulls: Option<NullBuffer>,
) -> CudaResult<ArrayRef> {
    let data = ArrayData::builder(data_type)
        .len(rows)
        .add_buffer(values)
        .nulls(nulls)
        .build()
        .map_err(|e| crate::cuda::error::CudaError::Unavailable(format!("window column: {e}")))?;
    Ok(make_array(data))
}
