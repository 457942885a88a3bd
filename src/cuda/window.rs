//! The kernels of `kernels/window.cu` and the window columns they compute over a run's
//! sorted rows on the device ([`compute_windows`]), for `DevicePayload::windows`
//! (`payload.rs`).
//!
//! ```text
//!  key columns, gathered in sorted order ─► flags: row starts a window partition / peer group
//!  flags ─► inclusive scans ─► each row's run id; the runs' first rows (scatter)
//!  per column:  row_number / rank / dense_rank  from the run starts
//!               count / sum over the frame      differences of prefix sums (scanned here)
//!  ─► downloaded once, whole, into host buffers the output batches slice
//! ```
//!
//! Results equal the host's (`src/window/`): ranks from the same runs, and wrapping
//! integer and decimal sums, whose differences of wrapped prefixes are exact. The columns
//! are downloaded whole before the first batch is emitted, so a device failure later in
//! the run's gather cannot leave a batch without them.

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
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, WINDOW};
use crate::cuda::tuning::{Tuning, WINDOW_SCAN_ITEMS, WINDOW_THREADS as THREADS};
use crate::gather::{FrameEnd, WindowColumn, WindowKind, WindowRequest};

/// Key widths with a comparison kernel of their own, in the order of [`Windower::distinct`].
const KEY_WIDTHS: [usize; 5] = [1, 2, 4, 8, 16];

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
    grid: u32,
}

impl Windower {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(WINDOW, device.arch, tuning)?;
        let kernel = |name| module.kernel(name);
        let scan = |suffix: &str, width| -> CudaResult<Scan> {
            Ok(Scan {
                reduce: module.kernel(&format!("window_scan_reduce_{suffix}"))?,
                tiles: module.kernel(&format!("window_scan_tiles_{suffix}"))?,
                apply: module.kernel(&format!("window_scan_apply_{suffix}"))?,
                width,
            })
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
            grid: device.sm_count * 16,
            _module: module,
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
    let mut out = Vec::with_capacity(request.columns.len());
    for column in &request.columns {
        let arg = match column.arg {
            Some(index) => match sorted(index)? {
                Some(arg) => Some(arg),
                None => return Ok(None),
            },
            None => None,
        };
        let array = match column.kind {
            WindowKind::RowNumber | WindowKind::Rank | WindowKind::DenseRank => {
                ranking(at, column.kind, &partitions, peers, rows)?
            }
            WindowKind::Count | WindowKind::Sum => {
                match frame_aggregate(at, column, arg.as_ref(), &partitions, peers, rows)? {
                    Some(array) => array,
                    None => return Ok(None),
                }
            }
        };
        out.push(array);
    }
    Ok(Some(out))
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

/// `row_number`, `rank` or `dense_rank`.
fn ranking(
    at: &mut WindowDevice<'_>,
    kind: WindowKind,
    partitions: &Runs,
    peers: &Runs,
    rows: usize,
) -> CudaResult<ArrayRef> {
    let device = at.device;
    let out = device.alloc::<u8>(rows * 8, "window ranks")?;
    let (mut part_ids, mut part_starts, mut peer_ids, mut peer_starts) = (
        partitions.ids.ptr(),
        partitions.starts.ptr(),
        peers.ids.ptr(),
        peers.starts.ptr(),
    );
    let (mut n, mut kind_arg, mut dst) = (
        rows as u32,
        match kind {
            WindowKind::RowNumber => 0u32,
            WindowKind::Rank => 1,
            _ => 2,
        },
        out.ptr(),
    );
    let mut params = [
        arg(&mut part_ids),
        arg(&mut part_starts),
        arg(&mut peer_ids),
        arg(&mut peer_starts),
        arg(&mut n),
        arg(&mut kind_arg),
        arg(&mut dst),
    ];
    let grid = at.kernels.grid_for(rows);
    launch(device, at.kernels.ranking, grid, THREADS, &mut params, rows)?;
    let values = download(at, &out, rows * 8)?;
    array_of(DataType::UInt64, rows, values, None)
}

/// The frame kernel's code and offset for one end of a frame.
fn bound(end: FrameEnd) -> (u32, u64) {
    match end {
        FrameEnd::UnboundedPreceding => (0, 0),
        FrameEnd::Preceding(n) => (1, n),
        FrameEnd::CurrentRow => (2, 0),
        FrameEnd::Following(n) => (3, n),
        FrameEnd::UnboundedFollowing => (4, 0),
    }
}

/// `count` or `sum` over each row's frame; `None` for an argument type it does not sum.
fn frame_aggregate(
    at: &mut WindowDevice<'_>,
    column: &WindowColumn,
    argument: Option<&SortedColumn>,
    partitions: &Runs,
    peers: &Runs,
    rows: usize,
) -> CudaResult<Option<ArrayRef>> {
    let device = at.device;
    let grid = at.kernels.grid_for(rows);
    // Prefix counts of the valid rows, when some row is null.
    let counts = match argument.and_then(|a| a.validity.as_ref()) {
        Some(validity) => {
            let counts = device.alloc::<u8>((rows + 1) * 8, "window counts")?;
            let (mut valid, mut n, mut out) = (validity.ptr(), rows as u32, counts.ptr());
            let mut params = [arg(&mut valid), arg(&mut n), arg(&mut out)];
            launch(
                device,
                at.kernels.load_count,
                grid,
                THREADS,
                &mut params,
                rows,
            )?;
            scan(at, at.kernels.scan_u64, &counts, rows + 1)?;
            Some(counts)
        }
        None => None,
    };
    let sum = column.kind == WindowKind::Sum;
    // Prefix sums of the argument, and their width.
    let (prefix, width) = match (sum, argument) {
        (false, _) => (None, 8),
        (true, None) => return Ok(None),
        (true, Some(argument)) => {
            let (load, width, scan_kernels) = match &argument.data_type {
                DataType::Decimal128(_, _) => (at.kernels.load_d128, 16, at.kernels.scan_u128),
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
    let out = device.alloc::<u8>(rows * width, "window frame values")?;
    let words = rows.div_ceil(32);
    let validity = match sum {
        true => Some(device.alloc::<u8>(words * 4, "window frame validity")?),
        false => None,
    };
    let (start_kind, start_offset) = bound(column.frame.start);
    let (end_kind, end_offset) = bound(column.frame.end);
    let (mut part_ids, mut part_starts, mut peer_ids, mut peer_starts) = (
        partitions.ids.ptr(),
        partitions.starts.ptr(),
        peers.ids.ptr(),
        peers.starts.ptr(),
    );
    let (mut n, mut start_kind, mut start_offset, mut end_kind, mut end_offset) =
        (rows as u32, start_kind, start_offset, end_kind, end_offset);
    let (mut peers_arg, mut mode) = (u32::from(column.frame.peers), u32::from(!sum));
    let mut prefix_at = prefix.as_ref().map_or(0, |p| p.ptr());
    let mut counts_at = counts.as_ref().map_or(0, |c| c.ptr());
    let (mut sums_at, mut counts_out) = match sum {
        true => (out.ptr(), 0),
        false => (0, out.ptr()),
    };
    let mut valid_at = validity.as_ref().map_or(0, |v| v.ptr());
    let mut params = [
        arg(&mut part_ids),
        arg(&mut part_starts),
        arg(&mut peer_ids),
        arg(&mut peer_starts),
        arg(&mut n),
        arg(&mut start_kind),
        arg(&mut start_offset),
        arg(&mut end_kind),
        arg(&mut end_offset),
        arg(&mut peers_arg),
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
    let values = download(at, &out, rows * width)?;
    let nulls = match &validity {
        Some(validity) => {
            let bits = download(at, validity, words * 4)?;
            Some(NullBuffer::new(BooleanBuffer::new(bits, 0, rows))).filter(|n| n.null_count() > 0)
        }
        None => None,
    };
    array_of(column.output.clone(), rows, values, nulls).map(Some)
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
