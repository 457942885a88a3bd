//! The dictionaries of column chunks (fixed-width values or byte arrays), built on the
//! device for `RLE_DICTIONARY` pages (`kernels/parquet_dictionary.cu`).
//!
//! Each column's values go into a hash table of row ids (one slot per distinct value,
//! holding its first row); where the distinct values' page passes the column's limit, the column
//! gives its dictionary up, as parquet's writer does once the dictionary page reaches its
//! size limit, and its pages are written without one. Otherwise every row gets its value's
//! entry number, entries numbered in order of first appearance (parquet's own order), and
//! the dictionary page's body (the distinct values `PLAIN`) is written where the page
//! encoder placed it. The page kernels then write the numbers as RLE/bit-packed runs.

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, PARQUET_DICTIONARY};
use crate::cuda::tuning::{Tuning, DICT_ITEMS, DICT_THREADS};

/// Rows of one block of the entry numbering.
const TILE: usize = (DICT_THREADS * DICT_ITEMS) as usize;

/// Most blocks of a grid-stride dictionary kernel.
const MOST_BLOCKS: usize = 8192;

/// One column chunk whose dictionary is tried: its values on the device.
#[derive(Debug, Clone, Copy)]
pub(super) struct DictionaryInput {
    /// The values, `in_width` bytes each, every row; for byte arrays, their bytes end to
    /// end.
    pub(super) values: u64,
    /// Byte arrays: their `rows + 1` offsets (`u32`, row `i` from `offsets[i] -
    /// offsets[0]`); 0 for fixed-width values.
    pub(super) offsets: u64,
    /// The validity bitmap (0: no nulls).
    pub(super) validity: u64,
    pub(super) in_width: u32,
    pub(super) out_width: u32,
    pub(super) rows: usize,
    /// Most bytes the dictionary page's body may take.
    pub(super) max_bytes: usize,
}

impl DictionaryInput {
    /// Most entries the dictionary may hold: its page's bytes over the fewest bytes an
    /// entry takes (`out_width`; a byte array's 4-byte length).
    fn max_entries(&self) -> usize {
        let least = if self.offsets != 0 { 4 } else { self.out_width };
        self.max_bytes / least.max(1) as usize
    }

    /// The column as the kernels' `DictColumn`.
    fn column(&self) -> DictColumn {
        DictColumn {
            values: self.values,
            offsets: self.offsets,
            validity: self.validity,
            in_width: self.in_width,
            out_width: self.out_width,
            rows: self.rows as u32,
            unused: 0,
        }
    }
}

/// A dictionary's column, as the kernels' `DictColumn`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DictColumn {
    values: u64,
    offsets: u64,
    validity: u64,
    in_width: u32,
    out_width: u32,
    rows: u32,
    unused: u32,
}

/// Where a dictionary stands after its inserts, as the kernels' `DictStatus`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct DictStatus {
    entries: u32,
    overflow: u32,
    bytes: u64,
}

/// What came of a column's dictionary.
pub(super) enum Tried {
    /// It holds every value.
    Kept(Box<ColumnDictionary>),
    /// Its values passed the limit.
    GaveUp,
    /// The column has no value (every row null, or none).
    NoValues,
}

/// A dictionary the column keeps, on its way to entry numbers.
pub(super) struct ColumnDictionary {
    table: DeviceBuffer<u32>,
    /// Each row's slot, then its entry number.
    work: DeviceBuffer<u32>,
    /// 1 where a row is its value's first, then that row's entry number.
    rank: DeviceBuffer<u32>,
    /// Each tile's first entry.
    tiles: DeviceBuffer<u32>,
    /// Each tile's first entry's place in the dictionary page's body.
    tile_bytes: DeviceBuffer<u32>,
    /// Distinct values.
    pub(super) entries: usize,
    /// Bytes of the dictionary page's body.
    pub(super) bytes: usize,
}

impl ColumnDictionary {
    /// Bits of an entry number in the pages.
    pub(super) fn bit_width(&self) -> u32 {
        entry_bits(self.entries)
    }

    /// Each row's entry number (rows that are null hold nothing), once
    /// [`DictionaryKernels::finish`] ran.
    pub(super) fn entry_numbers(&self) -> u64 {
        self.work.ptr()
    }
}

/// The kernels of `parquet_dictionary.cu`.
#[derive(Debug)]
pub(super) struct DictionaryKernels {
    insert: Kernel,
    first: Kernel,
    count: Kernel,
    scan: Kernel,
    entries: Kernel,
    ids: Kernel,
    _module: Module,
}

/// Bits of the largest entry number of a dictionary of `entries` values, as parquet's
/// writer sizes them (none for a single entry).
pub(super) fn entry_bits(entries: usize) -> u32 {
    64 - (entries.saturating_sub(1) as u64).leading_zeros()
}

fn blocks_for(rows: usize) -> u32 {
    rows.div_ceil(DICT_THREADS as usize).clamp(1, MOST_BLOCKS) as u32
}

/// Slots of a table for a column of `rows` rows whose dictionary holds at most
/// `max_entries` values: a power of two, at least twice as many as it can hold (no more
/// than one a row), and at most 2²⁷ (512 MiB; a dictionary that fills more gives up at the
/// probe limit).
fn table_slots(max_entries: usize, rows: usize) -> usize {
    let most = max_entries.min(rows).min((1 << 26) - 1);
    (2 * (most + 1)).next_power_of_two().max(1024)
}

impl DictionaryKernels {
    pub(super) fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(PARQUET_DICTIONARY, device.arch, tuning)?;
        Ok(Self {
            insert: module.kernel("dict_insert")?,
            first: module.kernel("dict_first")?,
            count: module.kernel("dict_count")?,
            scan: module.kernel("dict_scan")?,
            entries: module.kernel("dict_entries")?,
            ids: module.kernel("dict_ids")?,
            _module: module,
        })
    }

    /// Each input's dictionary where it keeps one (its page no larger than `max_bytes`),
    /// with every row's first-row flag found and the tiles counted.
    pub(super) fn tables(
        &self,
        device: &Device,
        inputs: &[DictionaryInput],
    ) -> CudaResult<Vec<Tried>> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        for input in inputs {
            assert!(
                input.rows < u32::MAX as usize,
                "a column chunk of {} rows: row ids are 32-bit",
                input.rows
            );
        }
        let status = device.alloc::<DictStatus>(inputs.len(), "dictionary status")?;
        device.zero(&status)?;
        let mut tables = Vec::with_capacity(inputs.len());
        for (index, input) in inputs.iter().enumerate() {
            let slots = table_slots(input.max_entries(), input.rows);
            let table = device.alloc::<u32>(slots, "dictionary table")?;
            device.zero(&table)?;
            // A page's offsets are 32-bit: no dictionary of 4 GiB.
            let (mut column, mut table_at, mut mask, mut most, mut status_at) = (
                input.column(),
                table.ptr(),
                (slots - 1) as u32,
                input.max_bytes.min(u32::MAX as usize) as u64,
                status.ptr() + (std::mem::size_of::<DictStatus>() * index) as u64,
            );
            let mut params = [
                arg(&mut column),
                arg(&mut table_at),
                arg(&mut mask),
                arg(&mut most),
                arg(&mut status_at),
            ];
            if input.rows > 0 {
                launch(
                    device,
                    self.insert,
                    blocks_for(input.rows),
                    DICT_THREADS,
                    &mut params,
                    input.rows,
                )?;
            }
            tables.push(table);
        }
        let status = device.download_now(&status)?;
        let mut kept = Vec::with_capacity(inputs.len());
        for ((input, table), status) in inputs.iter().zip(tables).zip(status) {
            let (entries, bytes) = (status.entries as usize, status.bytes as usize);
            kept.push(if status.overflow != 0 || bytes > input.max_bytes {
                Tried::GaveUp
            } else if entries == 0 {
                Tried::NoValues
            } else {
                Tried::Kept(Box::new(
                    self.first_rows(device, input, table, entries, bytes)?,
                ))
            });
        }
        Ok(kept)
    }

    /// Finds each row's slot and whether it is its value's first, and counts the first
    /// rows of each tile.
    fn first_rows(
        &self,
        device: &Device,
        input: &DictionaryInput,
        table: DeviceBuffer<u32>,
        entries: usize,
        bytes: usize,
    ) -> CudaResult<ColumnDictionary> {
        let rows = input.rows;
        let work = device.alloc::<u32>(rows, "dictionary slots")?;
        let rank = device.alloc::<u32>(rows, "dictionary first rows")?;
        let tile_count = rows.div_ceil(TILE);
        let tiles = device.alloc::<u32>(tile_count.max(1), "dictionary tiles")?;
        let tile_bytes = device.alloc::<u32>(tile_count.max(1), "dictionary tile bytes")?;
        let (mut column, mut table_at, mut mask, mut work_at, mut rank_at) = (
            input.column(),
            table.ptr(),
            (table.len() - 1) as u32,
            work.ptr(),
            rank.ptr(),
        );
        let (mut tiles_at, mut tile_bytes_at) = (tiles.ptr(), tile_bytes.ptr());
        let mut params = [
            arg(&mut column),
            arg(&mut table_at),
            arg(&mut mask),
            arg(&mut work_at),
            arg(&mut rank_at),
        ];
        launch(
            device,
            self.first,
            blocks_for(rows),
            DICT_THREADS,
            &mut params,
            rows,
        )?;
        let mut params = [
            arg(&mut column),
            arg(&mut rank_at),
            arg(&mut tiles_at),
            arg(&mut tile_bytes_at),
        ];
        launch(
            device,
            self.count,
            tile_count as u32,
            DICT_THREADS,
            &mut params,
            rows,
        )?;
        let mut tile_n = tile_count as u32;
        let mut params = [
            arg(&mut tiles_at),
            arg(&mut tile_bytes_at),
            arg(&mut tile_n),
        ];
        launch(device, self.scan, 1, 32, &mut params, tile_count)?;
        Ok(ColumnDictionary {
            table,
            work,
            rank,
            tiles,
            tile_bytes,
            entries,
            bytes,
        })
    }

    /// Numbers the entries, writes the dictionary page's body (`bytes` of it) at `body`,
    /// and gives every row its entry number.
    pub(super) fn finish(
        &self,
        device: &Device,
        input: &DictionaryInput,
        dictionary: &ColumnDictionary,
        body: u64,
    ) -> CudaResult<()> {
        let rows = input.rows;
        let mut column = input.column();
        let (mut tiles_at, mut tile_bytes_at, mut rank_at, mut body_at) = (
            dictionary.tiles.ptr(),
            dictionary.tile_bytes.ptr(),
            dictionary.rank.ptr(),
            body,
        );
        let mut params = [
            arg(&mut column),
            arg(&mut tiles_at),
            arg(&mut tile_bytes_at),
            arg(&mut rank_at),
            arg(&mut body_at),
        ];
        launch(
            device,
            self.entries,
            rows.div_ceil(TILE) as u32,
            DICT_THREADS,
            &mut params,
            rows,
        )?;
        let (mut table_at, mut work_at) = (dictionary.table.ptr(), dictionary.work.ptr());
        let mut params = [
            arg(&mut column),
            arg(&mut table_at),
            arg(&mut rank_at),
            arg(&mut work_at),
        ];
        launch(
            device,
            self.ids,
            blocks_for(rows),
            DICT_THREADS,
            &mut params,
            rows,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_hold_twice_the_entries_in_a_power_of_two() {
        assert_eq!(table_slots(131_071, 1 << 20), 262_144);
        assert_eq!(table_slots(131_072, 1 << 20), 524_288);
        assert_eq!(table_slots(3, 1 << 20), 1024);
        // No more values than rows, however large the limit.
        assert_eq!(table_slots(1 << 28, 100_000), 262_144);
        assert_eq!(table_slots(usize::MAX, usize::MAX), 1 << 27);
    }

    #[test]
    fn bit_widths_are_parquets() {
        // The bits of the largest number, `entries - 1`; none for one entry.
        let expected = [
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (256, 8),
            (257, 9),
            (131_072, 17),
        ];
        for (entries, bits) in expected {
            assert_eq!(entry_bits(entries), bits, "{entries} entries");
        }
    }
}
