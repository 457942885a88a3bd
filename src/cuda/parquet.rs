//! Parquet data pages of fixed-width and byte-array columns built and compressed on the
//! device (`kernels/parquet_pages.cu`).
//!
//! The host says how each column is cut into pages ([`PageCut`]); the device writes each
//! page's uncompressed body (definition levels, then the non-null values, each cut to its
//! Parquet width, `PLAIN` or `DELTA_BINARY_PACKED` as parquet's writer lays them out, byte
//! arrays `PLAIN` (a 4-byte length, then the bytes), or
//! their entry numbers in the chunk's dictionary, built on the device too
//! ([`parquet_dictionary`](super::parquet_dictionary)), as `RLE_DICTIONARY`), and,
//! for Snappy, compresses each body in pieces of at
//! most [`SnappyShape::piece_bytes`], one warp a piece, and lays the pieces of each page end to
//! end after the room of its length varint. Only the pages come back, with the rows of
//! each page's smallest and largest value where statistics are asked for
//! ([`PageColumn::statistics`]). Page headers, column chunk metadata and the statistics
//! themselves (read from those rows) are the host's (`src/pipeline/device_chunks.rs`).

use bytes::Bytes;

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, PARQUET_PAGES};
use crate::cuda::parquet_dictionary::{
    ColumnDictionary, DictionaryInput, DictionaryKernels, Tried,
};
use crate::cuda::parquet_input::{ColumnParts, InputLayout, PreparedInput};
use crate::cuda::tuning::{
    SnappyShape, Tuning, DICT_CHUNK_VALUES, ORDER_BYTES, ORDER_FLOAT, ORDER_NONE, ORDER_SIGNED,
    ORDER_UNSIGNED, PAGE_THREADS, VALUES_BYTES, VALUES_DELTA, VALUES_DICT, VALUES_PLAIN,
};

/// One page of a column: rows `first_row .. first_row + rows` of its values, `values` of
/// them not null. `first_row` is a multiple of 8 (the definition levels copy validity
/// bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCut {
    /// The page's first row in the column.
    pub first_row: usize,
    /// Rows of the page, nulls included.
    pub rows: usize,
    /// Rows of the page that are not null.
    pub values: usize,
}

/// How a column's statistics order its values (Parquet's order of its physical type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatisticsOrder {
    /// Integers of `out_width` bytes (the low bytes of each value), signed.
    Signed,
    /// The same, unsigned.
    Unsigned,
    /// Floats of `out_width` bytes; NaN counts in no statistic.
    Float,
    /// Byte arrays, byte by byte, unsigned; a prefix first.
    Bytes,
}

impl StatisticsOrder {
    fn code(order: Option<Self>) -> u32 {
        match order {
            None => ORDER_NONE,
            Some(Self::Signed) => ORDER_SIGNED,
            Some(Self::Unsigned) => ORDER_UNSIGNED,
            Some(Self::Float) => ORDER_FLOAT,
            Some(Self::Bytes) => ORDER_BYTES,
        }
    }
}

/// One column chunk to encode: its values as Arrow holds them (`in_width` bytes each,
/// every row, nulls included; or byte arrays, their bytes end to end and their offsets),
/// its validity bitmap (row 0 at bit 0; `None`: no nulls), and its pages.
#[derive(Debug, Clone, Copy)]
pub struct PageColumn<'a> {
    /// The values, `in_width` bytes each; for byte arrays, row `i`'s bytes are
    /// `values[offsets[i] - offsets[0] .. offsets[i + 1] - offsets[0]]`.
    pub values: &'a [u8],
    /// Byte arrays (`BYTE_ARRAY` values): one offset more than the rows (Arrow's, any
    /// first one); `in_width` and `out_width` are then 0.
    pub offsets: Option<&'a [u32]>,
    /// The validity bitmap, row 0 at bit 0.
    pub validity: Option<&'a [u8]>,
    /// Bytes of each value in `values`: 4, 8 or 16 (0 for byte arrays).
    pub in_width: u32,
    /// Bytes of each value in the page (its low bytes): 4 or 8 (0 for byte arrays).
    pub out_width: u32,
    /// Definition levels are written (an optional column of one level).
    pub nullable: bool,
    /// Values `DELTA_BINARY_PACKED` (INT32 for 4-byte values, INT64 for 8), else `PLAIN`.
    pub delta: bool,
    /// The pages, in order.
    pub pages: &'a [PageCut],
    /// Where set, a dictionary is tried first: kept while its page (the distinct values,
    /// `out_width` bytes each, or each byte array's length and bytes) stays under this
    /// many bytes, the data pages then
    /// `RLE_DICTIONARY`; past it, the pages are written as without one (`delta` or
    /// `PLAIN`), as parquet's writer gives a dictionary up.
    pub dictionary_limit: Option<usize>,
    /// Where set, each page's smallest and largest value are found in this order
    /// ([`ColumnPages::extremes`]).
    pub statistics: Option<StatisticsOrder>,
    /// Where set, the column's input is already on the device (nothing goes up): `values`
    /// may then be empty, and `offsets` and `validity` are the host's copies of what it
    /// holds there.
    pub on_device: Option<OnDevice>,
}

/// Where a column's input lies on the device, when it is there already (a sorted run's
/// column gathered there): device addresses (0: none) and rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnDevice {
    /// The values, `in_width` bytes each (byte arrays: their bytes).
    pub values: u64,
    /// Byte arrays' offsets, one more than the rows.
    pub offsets: u64,
    /// The validity bitmap, row 0 at bit 0.
    pub validity: u64,
    /// Rows of the column.
    pub rows: usize,
}

/// Device addresses of a column's parts in one launch (0: none).
#[derive(Debug, Clone, Copy)]
struct Addresses {
    values: u64,
    offsets: u64,
    validity: u64,
}

impl<'a> PageColumn<'a> {
    /// The column's values, byte arrays' offsets and validity, as the launch's input
    /// holds them.
    pub(super) fn parts(&self) -> ColumnParts<'a> {
        (self.values, self.offsets, self.validity)
    }

    /// Rows of the column, nulls included.
    pub fn rows(&self) -> usize {
        if let Some(on_device) = self.on_device {
            return on_device.rows;
        }
        match self.offsets {
            Some(offsets) => offsets.len().saturating_sub(1),
            None => self.values.len() / self.in_width.max(1) as usize,
        }
    }

    /// Bytes of the values of page `cut` that are not null (byte arrays; 0 otherwise).
    pub fn value_bytes(&self, cut: &PageCut) -> usize {
        let Some(offsets) = self.offsets else {
            return 0;
        };
        let (first, end) = (cut.first_row, cut.first_row + cut.rows);
        let all = (offsets[end] - offsets[first]) as usize;
        match self.validity {
            Some(bits) if cut.values < cut.rows => {
                let null_bytes: usize = (first..end)
                    .filter(|&row| bits[row / 8] >> (row % 8) & 1 == 0)
                    .map(|row| (offsets[row + 1] - offsets[row]) as usize)
                    .sum();
                all - null_bytes
            }
            _ => all,
        }
    }
}

/// A column chunk's pages as the device made them.
#[derive(Debug, Clone)]
pub struct ColumnPages {
    /// The dictionary page (the distinct values `PLAIN`, in order of first appearance) and
    /// how many values it holds, where the column kept a dictionary: its data pages are
    /// then `RLE_DICTIONARY`.
    pub dictionary: Option<(EncodedPage, usize)>,
    /// The column tried a dictionary and gave it up.
    pub gave_up_dictionary: bool,
    /// The data pages, in order.
    pub pages: Vec<EncodedPage>,
    /// Where the column asked for statistics: per data page, the rows (in the column) of
    /// its smallest and largest value, or `None` where no value of it counts (every row
    /// null or NaN).
    pub extremes: Option<Vec<Option<(usize, usize)>>>,
}

/// A page as the device made it.
#[derive(Debug, Clone)]
pub struct EncodedPage {
    /// The page's data as it goes after its header: compressed where asked (Snappy's
    /// length varint included).
    pub data: Bytes,
    /// Bytes of the body before compression.
    pub uncompressed_bytes: usize,
}

/// The kernels of `parquet_pages.cu`.
#[derive(Debug)]
pub struct PageEncoder {
    plain_bodies: Kernel,
    delta_values: Kernel,
    dict_runs: Kernel,
    dict_values: Kernel,
    extremes: Kernel,
    dictionaries: DictionaryKernels,
    compress: Kernel,
    place: Kernel,
    /// The shape the Snappy kernel was compiled for.
    snappy: SnappyShape,
    _module: Module,
}

/// A page without a value its statistics count, in the kernels' extremes (`NO_ROW`).
const NO_ROW: u32 = u32::MAX;

/// One page, as the kernels' `PageSpec`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct PageSpec {
    first_row: u64,
    body_at: u64,
    compact_at: u64,
    rows: u32,
    values: u32,
    levels_bytes: u32,
    column: u32,
}

/// One column, as the kernels' `ColumnSpec`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ColumnSpec {
    values: u64,
    validity: u64,
    offsets: u64,
    in_width: u32,
    out_width: u32,
    encoding: u32,
    bit_width: u32,
}

/// How a column's statistics order its values, as the kernels' `OrderSpec`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct OrderSpec {
    values: u64,
    validity: u64,
    offsets: u64,
    in_width: u32,
    out_width: u32,
    order: u32,
    unused: u32,
}

/// A stretch of an `RLE_DICTIONARY` page's entry numbers, as the kernels' `DictChunk`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DictChunk {
    out_at: u64,
    page: u32,
    first: u32,
    count: u32,
    unused: u32,
}

/// One piece of a page's body, as the kernels' `Piece`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Piece {
    in_at: u64,
    out_at: u64,
    len: u32,
    unused: u32,
}

/// Bytes of `value` as a ULEB128 varint.
fn varint_len(mut value: u64) -> usize {
    let mut n = 1;
    while value >= 0x80 {
        value >>= 7;
        n += 1;
    }
    n
}

fn put_varint(out: &mut [u8], mut value: u64) -> usize {
    let mut n = 0;
    while value >= 0x80 {
        out[n] = value as u8 | 0x80;
        value >>= 7;
        n += 1;
    }
    out[n] = value as u8;
    n + 1
}

/// Bytes of a page's definition levels section (its length prefix included), as the
/// kernel writes it: none for a required column; one RLE run where no value is null;
/// else a bit-packed run of whole groups of 8.
fn levels_bytes(nullable: bool, cut: &PageCut) -> usize {
    if !nullable {
        return 0;
    }
    if cut.values == cut.rows {
        return 4 + varint_len((cut.rows as u64) << 1) + 1;
    }
    let groups = cut.rows.div_ceil(8) as u64;
    4 + varint_len((groups << 1) | 1) + groups as usize
}

/// Most bytes of a `DELTA_BINARY_PACKED` values section of `values` values of
/// `width` bytes: its header, and per block of deltas a minimum, 4 widths and 4 miniblocks
/// of at most 64 bits a value.
fn delta_bound(values: usize, width: u32) -> usize {
    let per_block = if width == 4 { 128 } else { 256 };
    let blocks = values.saturating_sub(1).div_ceil(per_block);
    32 + blocks * (14 + per_block * 8)
}

/// Most bytes of an `RLE_DICTIONARY` values section of `values` entry numbers of `bits`
/// bits: the bit width's byte, then per group of 8 numbers at most 6 bytes besides its
/// bits (an RLE run's varint and number, or a bit-packed run's varint).
fn dictionary_bound(values: usize, bits: u32) -> usize {
    1 + values.div_ceil(8) * (bits as usize + 6)
}

/// Most bytes the kernel's Snappy elements take for `len` input bytes.
fn snappy_bound(len: usize) -> usize {
    32 + len + len / 6
}

/// Copies `items` into a new device buffer; the copy is queued on the stream, so `items`
/// must outlive the next synchronization (every caller synchronizes before returning).
fn upload_table<T: Copy>(
    device: &Device,
    items: &[T],
    what: &'static str,
) -> CudaResult<DeviceBuffer<T>> {
    let buffer = device.alloc::<T>(items.len(), what)?;
    if !items.is_empty() {
        // SAFETY: the caller keeps `items` alive and unchanged until it synchronizes.
        unsafe { device.upload(&buffer, 0, items)? };
    }
    Ok(buffer)
}

impl PageEncoder {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(PARQUET_PAGES, device.arch, tuning)?;
        Ok(Self {
            plain_bodies: module.kernel("plain_page_bodies")?,
            delta_values: module.kernel("delta_page_values")?,
            dict_runs: module.kernel("dict_chunk_runs")?,
            dict_values: module.kernel("dict_page_values")?,
            extremes: module.kernel("page_extremes")?,
            dictionaries: DictionaryKernels::load(device, tuning)?,
            compress: module.kernel("snappy_compress")?,
            place: module.kernel("snappy_place")?,
            snappy: tuning.snappy,
            _module: module,
        })
    }

    /// The pages of `columns`, in order, Snappy-compressed where `snappy`; the input goes
    /// up through the staging buffers.
    pub fn encode(
        &self,
        device: &Device,
        staging: &mut Staging,
        columns: &[PageColumn<'_>],
        snappy: bool,
    ) -> CudaResult<Vec<ColumnPages>> {
        self.encode_from(device, staging, columns, None, snappy)
    }

    /// [`Self::encode`], the input already laid out in host memory as `prepared` (made
    /// from the same `columns`): one copy straight from it where it is page-locked.
    pub fn encode_prepared(
        &self,
        device: &Device,
        staging: &mut Staging,
        columns: &[PageColumn<'_>],
        prepared: &PreparedInput,
        snappy: bool,
    ) -> CudaResult<Vec<ColumnPages>> {
        self.encode_from(device, staging, columns, Some(prepared), snappy)
    }

    fn encode_from(
        &self,
        device: &Device,
        staging: &mut Staging,
        columns: &[PageColumn<'_>],
        prepared: Option<&PreparedInput>,
        snappy: bool,
    ) -> CudaResult<Vec<ColumnPages>> {
        let pages = self.encode_queued(device, staging, columns, prepared, snappy);
        if pages.is_err() {
            // A copy from `prepared` may still be queued: none outlives this call (the
            // caller then gives its region back).
            let _ = device.synchronize();
        }
        pages
    }

    /// [`Self::encode_from`], which synchronizes where it returns an error.
    fn encode_queued(
        &self,
        device: &Device,
        staging: &mut Staging,
        columns: &[PageColumn<'_>],
        prepared: Option<&PreparedInput>,
        snappy: bool,
    ) -> CudaResult<Vec<ColumnPages>> {
        for column in columns {
            match column.offsets {
                Some(offsets) => assert!(
                    !offsets.is_empty()
                        && (column.on_device.is_some()
                            || (offsets[offsets.len() - 1] - offsets[0]) as usize
                                <= column.values.len())
                        && !column.delta,
                    "byte arrays past their bytes, or DELTA_BINARY_PACKED"
                ),
                None => assert!(
                    matches!(
                        (column.in_width, column.out_width),
                        (4, 4) | (8, 8) | (16, 8) | (16, 4)
                    ),
                    "no page kernel takes {} byte values to {} bytes",
                    column.in_width,
                    column.out_width
                ),
            }
            let rows = column.rows();
            assert!(
                rows < u32::MAX as usize,
                "a column chunk of {rows} rows: the kernels number rows in 32 bits"
            );
            for cut in column.pages {
                assert!(
                    cut.first_row % 8 == 0 && cut.first_row + cut.rows <= rows && cut.rows > 0,
                    "a page outside its column, or not on a byte of its validity"
                );
                assert!(
                    column.validity.is_some() || cut.values == cut.rows,
                    "nulls in a page of a column without validity"
                );
            }
        }
        let mut laps = crate::trace::Laps::start();
        let on_device = columns.iter().all(|c| c.on_device.is_some());
        assert!(
            on_device || columns.iter().all(|c| c.on_device.is_none()),
            "columns on the device and on the host in one launch"
        );
        assert!(
            !(on_device && prepared.is_some()),
            "an input laid out for columns on the device"
        );
        let layout = match on_device {
            true => InputLayout::of([]),
            false => InputLayout::of(columns.iter().map(PageColumn::parts)),
        };
        let what = "parquet page input";
        if let Some(prepared) = prepared {
            assert_eq!(
                prepared.bytes().len(),
                layout.bytes,
                "an input laid out for other columns"
            );
        }
        let input = match prepared {
            _ if on_device => device.alloc::<u8>(1, what)?,
            Some(prepared) if prepared.locked() => {
                let input = device.alloc::<u8>(layout.bytes.max(1), what)?;
                if !prepared.bytes().is_empty() {
                    // SAFETY: `prepared` outlives this call, which synchronizes before it
                    // returns, on errors too (`encode_from`).
                    unsafe { device.upload(&input, 0, prepared.bytes())? };
                }
                input
            }
            Some(prepared) => staging.upload::<u8, _>(device, layout.bytes.max(1), what, {
                let bytes = prepared.bytes();
                move |start, out| {
                    let from = bytes.get(start..).unwrap_or_default();
                    let n = from.len().min(out.len());
                    out[..n].copy_from_slice(&from[..n]);
                    out[n..].fill(0);
                }
            })?,
            None => staging.upload::<u8, _>(device, layout.bytes.max(1), what, {
                let layout = &layout;
                move |start, out| layout.fill(start, out)
            })?,
        };
        // Where each column's parts are on the device.
        let device_at = |at: Option<usize>| at.map_or(0, |at| input.ptr() + at as u64);
        let addresses: Vec<Addresses> = match on_device {
            true => columns
                .iter()
                .filter_map(|c| c.on_device)
                .map(|d| Addresses {
                    values: d.values,
                    offsets: d.offsets,
                    validity: d.validity,
                })
                .collect(),
            false => layout
                .placed
                .iter()
                .map(|placed| Addresses {
                    values: input.ptr() + placed.values_at as u64,
                    offsets: device_at(placed.offsets_at),
                    validity: device_at(placed.validity_at),
                })
                .collect(),
        };
        // The dictionaries tried, and what came of them.
        let tried_inputs: Vec<(usize, DictionaryInput)> = columns
            .iter()
            .zip(&addresses)
            .enumerate()
            .filter_map(|(index, (column, at))| {
                let limit = column.dictionary_limit?;
                Some((
                    index,
                    DictionaryInput {
                        values: at.values,
                        offsets: at.offsets,
                        validity: at.validity,
                        in_width: column.in_width,
                        out_width: column.out_width,
                        rows: column.rows(),
                        max_bytes: limit.saturating_sub(1),
                    },
                ))
            })
            .collect();
        laps.lap("input up");
        let inputs: Vec<DictionaryInput> = tried_inputs.iter().map(|(_, i)| *i).collect();
        let mut dictionaries: Vec<Option<(ColumnDictionary, DictionaryInput)>> =
            columns.iter().map(|_| None).collect();
        let mut gave_up = vec![false; columns.len()];
        for ((index, input), tried) in tried_inputs
            .into_iter()
            .zip(self.dictionaries.tables(device, &inputs)?)
        {
            match tried {
                Tried::Kept(dictionary) => dictionaries[index] = Some((*dictionary, input)),
                Tried::GaveUp => gave_up[index] = true,
                Tried::NoValues => {}
            }
        }
        laps.lap("dictionaries tried");
        let specs: Vec<ColumnSpec> = columns
            .iter()
            .zip(&addresses)
            .zip(&dictionaries)
            .map(|((column, at), dictionary)| {
                let validity = at.validity;
                match dictionary {
                    Some((dictionary, _)) => ColumnSpec {
                        values: dictionary.entry_numbers(),
                        validity,
                        offsets: 0,
                        in_width: 4,
                        out_width: 4,
                        encoding: VALUES_DICT,
                        bit_width: dictionary.bit_width(),
                    },
                    None => ColumnSpec {
                        values: at.values,
                        validity,
                        offsets: at.offsets,
                        in_width: column.in_width,
                        out_width: column.out_width,
                        encoding: if column.offsets.is_some() {
                            VALUES_BYTES
                        } else if column.delta {
                            VALUES_DELTA
                        } else {
                            VALUES_PLAIN
                        },
                        bit_width: 0,
                    },
                }
            })
            .collect();
        let mut pages = Vec::new();
        let mut body_bytes = 0;
        let mut compact_values = 0;
        // Where each kept dictionary's page body goes: (start, bytes).
        let mut dictionary_spans: Vec<Option<(usize, usize)>> = vec![None; columns.len()];
        for (index, (column, spec)) in columns.iter().zip(&specs).enumerate() {
            if let Some((dictionary, _)) = &dictionaries[index] {
                dictionary_spans[index] = Some((body_bytes, dictionary.bytes));
                body_bytes += dictionary.bytes;
            }
            for cut in column.pages {
                let levels = levels_bytes(column.nullable, cut);
                pages.push(PageSpec {
                    first_row: cut.first_row as u64,
                    body_at: body_bytes as u64,
                    compact_at: compact_values as u64,
                    rows: cut.rows as u32,
                    values: cut.values as u32,
                    levels_bytes: levels as u32,
                    column: index as u32,
                });
                body_bytes += levels
                    + match spec.encoding {
                        VALUES_DICT => dictionary_bound(cut.values, spec.bit_width),
                        VALUES_DELTA => delta_bound(cut.values, column.out_width),
                        VALUES_BYTES => 4 * cut.values + column.value_bytes(cut),
                        _ => cut.values * column.out_width as usize,
                    };
                if matches!(spec.encoding, VALUES_DELTA | VALUES_DICT) {
                    compact_values += cut.values;
                }
            }
        }
        let column_table = upload_table(device, &specs, "parquet page columns")?;
        let page_table = upload_table(device, &pages, "parquet pages")?;
        // 8 bytes past the end: Snappy's 4-byte loads are two aligned words.
        // Every byte of every body is written; the 8 past them are only ever shifted out.
        let bodies = device.alloc::<u8>(body_bytes + 8, "parquet page bodies")?;
        for (dictionary, span) in dictionaries.iter().zip(&dictionary_spans) {
            if let (Some((dictionary, input)), Some((at, _))) = (dictionary, span) {
                self.dictionaries
                    .finish(device, input, dictionary, bodies.ptr() + *at as u64)?;
            }
        }
        let compact = device.alloc::<i64>(compact_values.max(1), "parquet compacted values")?;
        let lengths = device.alloc::<u32>(pages.len().max(1), "parquet page lengths")?;
        if !pages.is_empty() {
            let (mut page_at, mut column_at, mut bodies_at, mut compact_at, mut lengths_at) = (
                page_table.ptr(),
                column_table.ptr(),
                bodies.ptr(),
                compact.ptr(),
                lengths.ptr(),
            );
            let mut params = [
                arg(&mut page_at),
                arg(&mut column_at),
                arg(&mut bodies_at),
                arg(&mut compact_at),
                arg(&mut lengths_at),
            ];
            launch(
                device,
                self.plain_bodies,
                pages.len() as u32,
                PAGE_THREADS,
                &mut params,
                body_bytes,
            )?;
            if specs.iter().any(|c| c.encoding == VALUES_DELTA) {
                let mut params = [
                    arg(&mut page_at),
                    arg(&mut column_at),
                    arg(&mut compact_at),
                    arg(&mut bodies_at),
                    arg(&mut lengths_at),
                ];
                launch(
                    device,
                    self.delta_values,
                    pages.len() as u32,
                    PAGE_THREADS,
                    &mut params,
                    body_bytes,
                )?;
            }
            if specs.iter().any(|c| c.encoding == VALUES_DICT) {
                self.dictionary_values(
                    device,
                    &pages,
                    &specs,
                    &page_table,
                    &column_table,
                    &compact,
                    &bodies,
                    &lengths,
                )?;
            }
        }
        // The rows of each page's extremes, found in the column's own values.
        let extremes = match columns.iter().any(|c| c.statistics.is_some()) && !pages.is_empty() {
            true => {
                let orders: Vec<OrderSpec> = columns
                    .iter()
                    .zip(&addresses)
                    .map(|(column, at)| OrderSpec {
                        values: at.values,
                        validity: at.validity,
                        offsets: at.offsets,
                        in_width: column.in_width,
                        out_width: column.out_width,
                        order: StatisticsOrder::code(column.statistics),
                        unused: 0,
                    })
                    .collect();
                let order_table = upload_table(device, &orders, "parquet statistics orders")?;
                let rows = device.alloc::<u32>(2 * pages.len(), "parquet page extremes")?;
                let (mut page_at, mut order_at, mut rows_at) =
                    (page_table.ptr(), order_table.ptr(), rows.ptr());
                let mut params = [arg(&mut page_at), arg(&mut order_at), arg(&mut rows_at)];
                launch(
                    device,
                    self.extremes,
                    pages.len() as u32,
                    PAGE_THREADS,
                    &mut params,
                    pages.len(),
                )?;
                // The download waits for the stream: `orders` went up before it.
                let rows = device.download_now(&rows)?;
                laps.lap("bodies and extremes");
                drop(orders);
                Some(rows)
            }
            false => None,
        };
        drop(input);
        // Each page's body: from its place, as long as the kernels wrote it; a column's
        // dictionary page first.
        let written = device.download_now(&lengths)?;
        laps.lap("bodies");
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(pages.len() + columns.len());
        let mut data_pages = pages.iter().zip(&written);
        for (column, dictionary) in columns.iter().zip(&dictionary_spans) {
            spans.extend(*dictionary);
            for (page, &len) in data_pages.by_ref().take(column.pages.len()) {
                spans.push((page.body_at as usize, len as usize));
            }
        }
        let encoded = if snappy {
            self.compress_pages(device, staging, &bodies, &spans, &mut laps)?
        } else {
            let host = Bytes::from(download_fresh(device, staging, &bodies, body_bytes)?);
            spans
                .iter()
                .map(|&(start, len)| EncodedPage {
                    data: host.slice(start..start + len),
                    uncompressed_bytes: len,
                })
                .collect()
        };
        device.synchronize()?;
        laps.lap("downloaded");
        crate::trace::event(|| {
            format!(
                "pages: {} pages of {} columns, {body_bytes} bytes of bodies: {}",
                pages.len(),
                columns.len(),
                laps.summary()
            )
        });
        // Back to columns.
        let mut encoded = encoded.into_iter();
        let mut page_extremes = extremes.iter().flat_map(|rows| {
            rows.chunks_exact(2).map(|pair| {
                (pair[0] != NO_ROW && pair[1] != NO_ROW)
                    .then(|| (pair[0] as usize, pair[1] as usize))
            })
        });
        Ok(columns
            .iter()
            .zip(&dictionaries)
            .zip(gave_up)
            .map(|((column, dictionary), gave_up_dictionary)| ColumnPages {
                extremes: {
                    let of_column: Vec<Option<(usize, usize)>> =
                        page_extremes.by_ref().take(column.pages.len()).collect();
                    column.statistics.map(|_| of_column)
                },
                dictionary: dictionary.as_ref().map(|(dictionary, _)| {
                    (
                        encoded.next().expect("a dictionary page"),
                        dictionary.entries,
                    )
                }),
                gave_up_dictionary,
                pages: encoded.by_ref().take(column.pages.len()).collect(),
            })
            .collect())
    }

    /// The values sections of the `RLE_DICTIONARY` pages among `pages`: each page's entry
    /// numbers (in `compact`) cut into chunks of [`DICT_CHUNK_VALUES`], a thread's runs
    /// each, then laid end to end after the page's bit width.
    #[allow(clippy::too_many_arguments)]
    fn dictionary_values(
        &self,
        device: &Device,
        pages: &[PageSpec],
        specs: &[ColumnSpec],
        page_table: &DeviceBuffer<PageSpec>,
        column_table: &DeviceBuffer<ColumnSpec>,
        compact: &DeviceBuffer<i64>,
        bodies: &DeviceBuffer<u8>,
        lengths: &DeviceBuffer<u32>,
    ) -> CudaResult<()> {
        let mut chunks = Vec::new();
        let mut page_chunks = Vec::with_capacity(pages.len() + 1);
        let mut scratch_bytes = 0;
        for (index, page) in pages.iter().enumerate() {
            page_chunks.push(chunks.len() as u32);
            let spec = &specs[page.column as usize];
            if spec.encoding != VALUES_DICT {
                continue;
            }
            for first in (0..page.values as usize).step_by(DICT_CHUNK_VALUES) {
                let count = DICT_CHUNK_VALUES.min(page.values as usize - first);
                chunks.push(DictChunk {
                    out_at: scratch_bytes as u64,
                    page: index as u32,
                    first: first as u32,
                    count: count as u32,
                    unused: 0,
                });
                scratch_bytes += dictionary_bound(count, spec.bit_width);
            }
        }
        page_chunks.push(chunks.len() as u32);
        let chunk_table = upload_table(device, &chunks, "dictionary page chunks")?;
        let page_chunk_table = upload_table(device, &page_chunks, "dictionary page chunk ranges")?;
        let scratch = device.alloc::<u8>(scratch_bytes.max(1), "dictionary page runs")?;
        let chunk_len = device.alloc::<u32>(chunks.len().max(1), "dictionary run bytes")?;
        let (mut chunks_at, mut chunk_count, mut page_at, mut column_at, mut compact_at) = (
            chunk_table.ptr(),
            chunks.len() as u32,
            page_table.ptr(),
            column_table.ptr(),
            compact.ptr(),
        );
        let (mut scratch_at, mut len_at, mut ranges_at, mut bodies_at, mut lengths_at) = (
            scratch.ptr(),
            chunk_len.ptr(),
            page_chunk_table.ptr(),
            bodies.ptr(),
            lengths.ptr(),
        );
        if !chunks.is_empty() {
            let mut params = [
                arg(&mut chunks_at),
                arg(&mut chunk_count),
                arg(&mut page_at),
                arg(&mut column_at),
                arg(&mut compact_at),
                arg(&mut scratch_at),
                arg(&mut len_at),
            ];
            launch(
                device,
                self.dict_runs,
                chunks.len().div_ceil(PAGE_THREADS as usize) as u32,
                PAGE_THREADS,
                &mut params,
                scratch_bytes,
            )?;
        }
        let mut params = [
            arg(&mut page_at),
            arg(&mut column_at),
            arg(&mut chunks_at),
            arg(&mut ranges_at),
            arg(&mut len_at),
            arg(&mut scratch_at),
            arg(&mut bodies_at),
            arg(&mut lengths_at),
        ];
        launch(
            device,
            self.dict_values,
            pages.len() as u32,
            PAGE_THREADS,
            &mut params,
            scratch_bytes,
        )?;
        // The tables are read by the kernels queued above: keep them until they ran.
        device.synchronize()
    }

    /// Each page's body Snappy-compressed, as one stream: its length varint (written
    /// here), then its pieces' elements laid end to end.
    fn compress_pages(
        &self,
        device: &Device,
        staging: &mut Staging,
        bodies: &DeviceBuffer<u8>,
        spans: &[(usize, usize)],
        laps: &mut crate::trace::Laps,
    ) -> CudaResult<Vec<EncodedPage>> {
        let mut pieces = Vec::new();
        let mut scratch_bytes = 0;
        let mut page_pieces = Vec::with_capacity(spans.len());
        let body_bytes: usize = spans.iter().map(|s| s.1).sum();
        for &(start, len) in spans {
            let end = start + len;
            let first = pieces.len();
            let piece_bytes = self.snappy.piece_bytes;
            for at in (start..end).step_by(piece_bytes) {
                let len = piece_bytes.min(end - at);
                pieces.push(Piece {
                    in_at: at as u64,
                    out_at: scratch_bytes as u64,
                    len: len as u32,
                    unused: 0,
                });
                scratch_bytes += snappy_bound(len);
            }
            page_pieces.push((first..pieces.len(), end - start));
        }
        let piece_table = upload_table(device, &pieces, "snappy pieces")?;
        let scratch = device.alloc::<u8>(scratch_bytes.max(1), "snappy scratch")?;
        let piece_bytes = device.alloc::<u32>(pieces.len().max(1), "snappy piece bytes")?;
        if !pieces.is_empty() {
            let (mut table_at, mut n, mut bodies_at, mut scratch_at, mut sizes_at) = (
                piece_table.ptr(),
                pieces.len() as u32,
                bodies.ptr(),
                scratch.ptr(),
                piece_bytes.ptr(),
            );
            let mut params = [
                arg(&mut table_at),
                arg(&mut n),
                arg(&mut bodies_at),
                arg(&mut scratch_at),
                arg(&mut sizes_at),
            ];
            let grid = pieces.len().div_ceil(self.snappy.warps as usize) as u32;
            launch(
                device,
                self.compress,
                grid,
                self.snappy.warps * 32,
                &mut params,
                body_bytes,
            )?;
        }
        let sizes = device.download_now(&piece_bytes)?;
        laps.lap("compressed");
        // Each page: its varint, then its pieces.
        let mut final_at = vec![0u64; pieces.len()];
        let mut page_at = Vec::with_capacity(spans.len());
        let mut out_bytes = 0usize;
        for (range, uncompressed) in &page_pieces {
            page_at.push(out_bytes);
            out_bytes += varint_len(*uncompressed as u64);
            for piece in range.clone() {
                final_at[piece] = out_bytes as u64;
                out_bytes += sizes[piece] as usize;
            }
        }
        let final_table = upload_table(device, &final_at, "snappy piece places")?;
        let out = device.alloc::<u8>(out_bytes.max(1), "snappy pages")?;
        if !pieces.is_empty() {
            let (mut table_at, mut sizes_at, mut final_ptr, mut scratch_at, mut out_at) = (
                piece_table.ptr(),
                piece_bytes.ptr(),
                final_table.ptr(),
                scratch.ptr(),
                out.ptr(),
            );
            let mut params = [
                arg(&mut table_at),
                arg(&mut sizes_at),
                arg(&mut final_ptr),
                arg(&mut scratch_at),
                arg(&mut out_at),
            ];
            launch(
                device,
                self.place,
                pieces.len() as u32,
                PAGE_THREADS,
                &mut params,
                out_bytes,
            )?;
        }
        let mut host = download_fresh(device, staging, &out, out_bytes)?;
        for ((_, uncompressed), &at) in page_pieces.iter().zip(&page_at) {
            put_varint(&mut host[at..], *uncompressed as u64);
        }
        let host = Bytes::from(host);
        let ends = page_at.iter().skip(1).copied().chain([out_bytes]);
        Ok(page_pieces
            .iter()
            .zip(page_at.iter().zip(ends))
            .map(|((_, uncompressed), (&start, end))| EncodedPage {
                data: host.slice(start..end),
                uncompressed_bytes: *uncompressed,
            })
            .collect())
    }
}

/// The first `len` bytes of `src` in a new vector, written once by the download (no
/// zeroing first: fresh memory is the host's slowest part of a page job).
fn download_fresh(
    device: &Device,
    staging: &mut Staging,
    src: &DeviceBuffer<u8>,
    len: usize,
) -> CudaResult<Vec<u8>> {
    let mut host = Vec::<u8>::with_capacity(src.len());
    staging.download_parts(
        device,
        src,
        &mut [&mut host.spare_capacity_mut()[..src.len()]],
    )?;
    device.synchronize()?;
    // SAFETY: `download_parts` wrote every byte of the part, `src.len()` bytes.
    unsafe { host.set_len(src.len()) };
    host.truncate(len);
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_sized_as_the_kernel_writes_them() {
        let cut = |rows, values| PageCut {
            first_row: 0,
            rows,
            values,
        };
        assert_eq!(levels_bytes(false, &cut(100, 90)), 0);
        // One RLE run: 4-byte length, varint(200), the value 1.
        assert_eq!(levels_bytes(true, &cut(100, 100)), 4 + 2 + 1);
        // 13 groups of 8 bits: varint(27), 13 bytes.
        assert_eq!(levels_bytes(true, &cut(100, 90)), 4 + 1 + 13);
    }

    #[test]
    fn varints_are_uleb128() {
        let mut out = [0u8; 10];
        assert_eq!(put_varint(&mut out, 300), 2);
        assert_eq!(&out[..2], &[0xac, 0x02]);
        assert_eq!(varint_len(300), 2);
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(u32::MAX.into()), 5);
    }
}
