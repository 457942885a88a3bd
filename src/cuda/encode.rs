//! Launcher of `kernels/encode.cu`: fixed-width sort keys encoded on the device from the
//! raw Arrow buffers, so only the key columns cross PCIe.
//!
//! ```text
//!  per key column: values buffer (+ validity bitmap) ──pinned, chunked──► device
//!                  (wide integer-like values narrowed across: `columns/narrow.rs`)
//!                  byte-like: views (+ validity) and the data buffers   (`views.rs`)
//!    byte-like:    encode_field_stats of the length and the first chunks → the window
//!                  (`keys::bytes::choose_window`, as the host encoder chooses it, but
//!                  up to every chunk: `DEVICE_LIVE_CHUNKS`)
//!  per field (null flag, limbs):  encode_field_stats → min, max, OR, AND   (32 B back)
//!  host: the same reductions and word placements as the host encoder (src/keys/)
//!  per field part:                encode_pack_field  → packed key words, on the device
//!  with a partition id table (a routed sort, `crate::exec::id_table`): before the fields,
//!    encode_field_stats of the routing key's limb → its range, and the host's table over
//!    it (none when too wide: the caller hashes the rows instead);
//!    encode_partition_ids: each row's id looked up from the routing key's limb, and the
//!    rows per partition (back to the host); the ids are the leading field
//! ```
//!
//! A byte-like column with values longer than its window leaves ties the window cannot
//! order: the encoding also hands over its fields ([`TieFields`]), with which the device
//! orders those ties after the sort (`refine.rs`).
//!
//! The result is the input of the OneSweep launcher: one u32 word per row when the key has
//! at most 32 significant bits, else 64-bit words, most significant first.

use arrow::array::Array;
use arrow::datatypes::DataType;
use cudarc::driver::sys::CUdeviceptr;
use datafusion::arrow;

use crate::cuda::columns::narrow::Narrowing;
use crate::cuda::columns::views::{is_view_type, worth_encoding_on_device};
use crate::cuda::columns::{upload_raw_column, DeviceColumn, PayloadLayout, RawColumn};
use crate::cuda::error::{CudaError, CudaResult};

use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, ENCODE};
use crate::cuda::tuning::{
    Tuning, ENCODE_THREADS as THREADS, FIELD_NULL_FLAG, LIMB_VIEW_CHUNK, LIMB_VIEW_LENGTH,
};
use crate::keys::bytes::{choose_window, DEVICE_LIVE_CHUNKS, MAX_CHUNKS};
use crate::keys::{
    limb_sources, low_mask, placements, FieldStats, KeyColumn, LimbKind, LimbSource, LongKey,
    Reduction,
};
use crate::sort::{IdTableMaker, PartitionIdTable};

/// Mirrors `struct FieldSource` of `fields.cuh` (kernel parameter, passed by value).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct FieldSource {
    values: CUdeviceptr,
    valid: CUdeviceptr,
    stride: u32,
    offset: u32,
    width: u32,
    kind: u32,
    descending: u32,
    nulls_first: u32,
    data: CUdeviceptr,
    buffer_starts: CUdeviceptr,
}

/// Packed key words of a run, on the device.
#[derive(Debug)]
pub enum DeviceKeys {
    /// Every row has the same key: the order is the identity.
    Constant,
    /// One 32-bit word per row.
    U32(DeviceBuffer<u32>),
    /// 64-bit words per row, most significant first.
    Words(Vec<DeviceBuffer<u64>>),
}

/// The encoded keys and the bytes uploaded for them.
pub struct Encoded {
    /// The packed words.
    pub keys: DeviceKeys,
    /// Bytes copied host → device (values and bitmaps of the key columns).
    pub h2d_bytes: usize,
    /// The key columns' raw buffers, left on the device for the payload gather.
    pub columns: Vec<DeviceColumn>,
    /// The byte-like key columns with values longer than their window, and the fields
    /// that order their ties on the device (empty when every value fits its window).
    pub ties: TieFields,
    /// Rows per partition, when the leading field was made from a partition id table.
    pub partition_counts: Option<Vec<usize>>,
}

/// What the device refinement of long-string ties (`refine.rs`) needs from the key
/// encoding.
#[derive(Debug, Clone, Default)]
pub struct TieFields {
    /// Every field of the key columns (not reduced), with the key column it belongs to, in
    /// key order.
    pub(super) fields: Vec<(FieldSource, usize)>,
    /// The long byte-like key columns, in key order, each with its column's view source.
    pub(super) long_keys: Vec<(LongKey, FieldSource)>,
}

impl TieFields {
    /// Whether some key leaves ties to refine.
    pub fn is_empty(&self) -> bool {
        self.long_keys.is_empty()
    }
}

/// The loaded encode kernels of one device.
#[derive(Debug)]
pub struct Encoder {
    _module: Module,
    stats: Kernel,
    pack: Kernel,
    partition_ids: Kernel,
    grid: u32,
}

/// Whether every column can be encoded on the device: a fixed-width layout, or a
/// byte-like type whose data buffers are worth uploading.
pub(super) fn encodable_on_device(columns: &[KeyColumn]) -> bool {
    columns.iter().all(|c| match c.arrays.first() {
        None => true,
        Some(a) if is_view_type(a.data_type()) => worth_encoding_on_device(&c.arrays),
        Some(a) => limb_sources(a.data_type()).is_some(),
    })
}

/// One column's buffers on the device (none when it has no rows or is all `Null`) and how
/// its limbs are read from them (a byte-like column's limbs come from its window).
#[derive(Default)]
struct ColumnOnDevice {
    sources: Vec<LimbSource>,
    raw: Option<RawColumn>,
}

impl Encoder {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(ENCODE, device.arch, tuning)?;
        Ok(Self {
            stats: module.kernel("encode_field_stats")?,
            pack: module.kernel("encode_pack_field")?,
            partition_ids: module.kernel("encode_partition_ids")?,
            grid: device.sm_count * 8,
            _module: module,
        })
    }

    /// Encodes the `rows` rows of `columns` (all encodable) into packed key words; with
    /// `ids`, each row's partition id (looked up on the device in the table of `ids` over
    /// the range of its key column, found on the device) leads the key, and `None` says
    /// that range was too wide for a table. With `narrowing`, wide integer-like columns go
    /// up narrowed where their values allow it.
    pub fn encode(
        &self,
        device: &Device,
        staging: &mut Staging,
        columns: &[KeyColumn],
        rows: usize,
        ids: Option<&dyn IdTableMaker>,
        narrowing: Option<&Narrowing>,
    ) -> CudaResult<Option<Encoded>> {
        let mut h2d_bytes = 0;
        let mut on_device = Vec::with_capacity(columns.len());
        // Each field, and the key column it belongs to.
        let mut fields: Vec<(FieldSource, usize)> = Vec::new();
        // Byte-like columns with values longer than their window: (column, window).
        let mut longer = Vec::new();
        // The partition id table, made as soon as its column is up: over a range too wide
        // for one, nothing else is uploaded.
        let mut table = None;
        for (index, column) in columns.iter().enumerate() {
            let started = std::time::Instant::now();
            let (buffers, bytes) = upload_column(device, staging, column, narrowing)?;
            h2d_bytes += bytes;
            crate::trace::event(|| {
                format!(
                    "  key column {index}: {:.0} MB up in {:.1} ms",
                    bytes as f64 / 1e6,
                    started.elapsed().as_secs_f64() * 1e3
                )
            });
            let base = base_source(column, &buffers);
            if let Some(maker) = ids.filter(|m| m.column() == index) {
                match self.table_for(device, maker, &buffers.sources, base, rows)? {
                    Some(made) => table = Some(made),
                    // Too wide a range for a table: the caller hashes the rows.
                    None => return Ok(None),
                }
            }
            let views = buffers.raw.as_ref().and_then(|r| r.view_data.as_ref());
            let column_fields = match views {
                Some(_) => {
                    let (column_fields, window, longest) =
                        self.window_fields(device, base, rows)?;
                    if longest > window {
                        longer.push((index, window));
                    }
                    column_fields
                }
                None => fixed_fields(base, &buffers.sources),
            };
            fields.extend(column_fields.into_iter().map(|f| (f, index)));
            on_device.push((buffers, base));
        }
        // The key columns' own fields, before a partition id field leads them.
        let column_fields = fields.clone();
        // Kept until the words are packed (the free is in stream order after them).
        let mut partition_ids = None;
        if let Some(maker) = ids {
            let column = maker.column();
            let (Some((buffers, base)), Some(table)) = (on_device.get(column), &table) else {
                return Err(inconsistent(format!(
                    "partition ids from key column {column} of {}",
                    columns.len()
                )));
            };
            let (made, counts) =
                self.partition_ids(device, table, &buffers.sources, *base, rows)?;
            fields.insert(0, (id_field(&made), 0));
            partition_ids = Some((made, counts));
        }
        let sources: Vec<FieldSource> = fields.iter().map(|(f, _)| *f).collect();
        let stats = self.field_stats(device, &sources, rows)?;
        crate::trace::event(|| format!("  {rows} rows: key field statistics read"));
        let reduced: Vec<_> = fields
            .iter()
            .zip(&stats)
            .filter_map(|((field, column), stats)| stats.reduction().map(|r| (*field, r, *column)))
            .collect();
        let long_keys = longer
            .into_iter()
            .map(|(column, window)| {
                let long = LongKey {
                    column,
                    window,
                    bits_end: reduced
                        .iter()
                        .filter(|(_, _, c)| *c <= column)
                        .map(|(_, r, _)| r.width)
                        .sum(),
                    descending: columns[column].options.descending,
                };
                (long, on_device[column].1)
            })
            .collect();
        let ties = TieFields {
            fields: column_fields,
            long_keys,
        };
        let reduced: Vec<_> = reduced.into_iter().map(|(f, r, _)| (f, r)).collect();
        let widths: Vec<u32> = reduced.iter().map(|(_, r)| r.width).collect();
        let total_bits: u32 = widths.iter().sum();
        let keys = if total_bits == 0 {
            DeviceKeys::Constant
        } else if total_bits <= 32 {
            let word = device.alloc::<u32>(rows, "u32 key words")?;
            self.pack_word(device, &reduced, &widths, 0, 32, &word, rows)?;
            DeviceKeys::U32(word)
        } else {
            let mut words = Vec::new();
            for w in 0..total_bits.div_ceil(64) as usize {
                let word = device.alloc::<u64>(rows, "key words")?;
                self.pack_word(device, &reduced, &widths, w, 64, &word, rows)?;
                words.push(word);
            }
            DeviceKeys::Words(words)
        };
        let partition_counts = partition_ids.map(|(_, counts)| counts);
        let columns = on_device
            .into_iter()
            .zip(columns)
            .filter_map(|((buffers, _), column)| {
                Some(DeviceColumn {
                    arrays: column.arrays.clone(),
                    raw: buffers.raw?,
                })
            })
            .collect();
        Ok(Some(Encoded {
            keys,
            h2d_bytes,
            columns,
            ties,
            partition_counts,
        }))
    }

    /// The table of `maker` over the range of its key column (`limbs`, its one integer
    /// limb; `base`, its null flag field), read on the device; `None` when the range is too
    /// wide for a table (or no row is valid).
    fn table_for(
        &self,
        device: &Device,
        maker: &dyn IdTableMaker,
        limbs: &[LimbSource],
        base: FieldSource,
        rows: usize,
    ) -> CudaResult<Option<PartitionIdTable>> {
        let (source, signed) = routing_limb(limbs, base)?;
        let stats = self.field_stats(device, &[source], rows)?;
        let range = stats.first().filter(|s| s.min <= s.max).map(|stats| {
            // A signed limb holds the value with its sign bit flipped (`partition_ids`).
            let value = |limb: u64| match signed {
                true => (limb ^ (1 << 63)) as i64 as i128,
                false => limb as i128,
            };
            (value(stats.min), value(stats.max))
        });
        let table = maker
            .table_over(range)
            .map_err(|e| CudaError::HostStep(format!("the partition id table: {e}")))?;
        match table {
            Some(table) if table.column != maker.column() => Err(inconsistent(format!(
                "a table of column {} for ids from column {}",
                table.column,
                maker.column()
            ))),
            other => Ok(other),
        }
    }

    /// Each row's partition id, looked up on the device in `table` from the limb of the
    /// routing key (`limbs`, its one integer limb; `base`, its null flag field), and the
    /// rows per partition.
    fn partition_ids(
        &self,
        device: &Device,
        table: &PartitionIdTable,
        limbs: &[LimbSource],
        base: FieldSource,
        rows: usize,
    ) -> CudaResult<(DeviceBuffer<u16>, Vec<usize>)> {
        let (mut source, signed) = routing_limb(limbs, base)?;
        let first = match signed {
            true => (table.first as i64 as u64) ^ (1 << 63),
            false => table.first as u64,
        };
        let table_ids = device.alloc::<u16>(table.ids.len(), "partition id table")?;
        // SAFETY: `table.ids` outlives the copy: `download_now` below synchronizes.
        unsafe { device.upload(&table_ids, 0, &table.ids)? };
        let ids = device.alloc::<u16>(rows, "partition ids")?;
        let counts = device.alloc::<u32>(table.partitions, "rows per partition")?;
        device.zero(&counts)?;
        let mut n = rows as u32;
        let (mut first, mut table_ptr) = (first, table_ids.ptr());
        let mut table_len = table.ids.len() as u32;
        let mut null_id = u32::from(table.null_id);
        let mut partitions = table.partitions as u32;
        let (mut ids_ptr, mut counts_ptr) = (ids.ptr(), counts.ptr());
        let mut params = [
            arg(&mut source),
            arg(&mut n),
            arg(&mut first),
            arg(&mut table_ptr),
            arg(&mut table_len),
            arg(&mut null_id),
            arg(&mut partitions),
            arg(&mut ids_ptr),
            arg(&mut counts_ptr),
        ];
        launch(
            device,
            self.partition_ids,
            self.grid,
            THREADS,
            &mut params,
            rows,
        )?;
        let counts: Vec<usize> = device
            .download_now(&counts)?
            .into_iter()
            .map(|c| c as usize)
            .collect();
        let counted: usize = counts.iter().sum();
        if counted != rows {
            return Err(inconsistent(format!(
                "partition ids counted {counted} of {rows} rows (a value outside the table)"
            )));
        }
        Ok((ids, counts))
    }

    /// The fields of a byte-like column read through its views (`base`): one statistics
    /// pass over its length and first chunks chooses the window as the host would; then
    /// the null flag (when some row is null), the chunks that vary and the length marker.
    /// Also the window's bytes and the longest valid value's.
    fn window_fields(
        &self,
        device: &Device,
        base: FieldSource,
        rows: usize,
    ) -> CudaResult<(Vec<FieldSource>, usize, usize)> {
        let limb = |kind, offset| FieldSource {
            kind,
            offset,
            ..base
        };
        let length = FieldSource {
            descending: 0,
            ..limb(LIMB_VIEW_LENGTH, u32::MAX - 1)
        };
        let scan: Vec<FieldSource> = std::iter::once(length)
            .chain((0..MAX_CHUNKS).map(|c| limb(LIMB_VIEW_CHUNK, 8 * c as u32)))
            .collect();
        let stats = self.field_stats(device, &scan, rows)?;
        let longest = if stats[0].min <= stats[0].max {
            stats[0].max as usize
        } else {
            0
        };
        let (live, window) = choose_window(&stats[1..], longest, DEVICE_LIVE_CHUNKS);
        let flag = (base.valid != 0).then_some(base);
        let chunks = live
            .iter()
            .map(|&(chunk, _)| limb(LIMB_VIEW_CHUNK, 8 * chunk as u32));
        let marker = limb(LIMB_VIEW_LENGTH, window as u32);
        let fields = flag.into_iter().chain(chunks).chain([marker]).collect();
        Ok((fields, window, longest))
    }

    /// The statistics of every field (one small download for all of them).
    fn field_stats(
        &self,
        device: &Device,
        fields: &[FieldSource],
        rows: usize,
    ) -> CudaResult<Vec<FieldStats>> {
        if fields.is_empty() {
            return Ok(Vec::new());
        }
        let empty = FieldStats::EMPTY;
        let init: Vec<u64> = fields
            .iter()
            .flat_map(|_| [empty.min, empty.max, empty.or, empty.and])
            .collect();
        let stats = device.alloc::<u64>(init.len(), "key field statistics")?;
        // SAFETY: `init` outlives the copy: `download_now` below synchronizes.
        unsafe { device.upload(&stats, 0, &init)? };
        for (i, field) in fields.iter().enumerate() {
            let mut source = *field;
            let mut n = rows as u32;
            let mut out = stats.ptr() + (i * 32) as u64;
            let mut params = [arg(&mut source), arg(&mut n), arg(&mut out)];
            launch(device, self.stats, self.grid, THREADS, &mut params, rows)?;
        }
        let flat = device.download_now(&stats)?;
        Ok(flat
            .chunks(4)
            .map(|s| FieldStats {
                min: s[0],
                max: s[1],
                or: s[2],
                and: s[3],
            })
            .collect())
    }

    /// Zeroes key word `w` (of `word_bits` bits: 32 is the top half of 64-bit word 0) and
    /// ORs every field part that lands in it.
    #[allow(clippy::too_many_arguments)]
    fn pack_word<T>(
        &self,
        device: &Device,
        reduced: &[(FieldSource, Reduction)],
        widths: &[u32],
        w: usize,
        word_bits: u32,
        word: &DeviceBuffer<T>,
        rows: usize,
    ) -> CudaResult<()> {
        device.zero(word)?;
        for part in placements(widths, w) {
            let (mut source, reduction) = reduced[part.field];
            let mut n = rows as u32;
            let (mut lo, mut shift) = (reduction.lo, reduction.shift);
            let (mut drop_low, mut mask) = (part.drop_low, low_mask(part.bits));
            let mut place = part.place - (64 - word_bits);
            let (mut word_bits, mut words) = (word_bits, word.ptr());
            let mut params = [
                arg(&mut source),
                arg(&mut n),
                arg(&mut lo),
                arg(&mut shift),
                arg(&mut drop_low),
                arg(&mut mask),
                arg(&mut place),
                arg(&mut word_bits),
                arg(&mut words),
            ];
            launch(device, self.pack, self.grid, THREADS, &mut params, rows)?;
        }
        Ok(())
    }
}

/// A slice of a run's fixed-width key columns on one device of a sort spread over several
/// (`multi_gpu/`): uploaded, with the fields the whole run's columns have, so that every
/// device packs its slice by the same reductions into comparable words.
pub(crate) struct SliceUpload {
    fields: Vec<FieldSource>,
    /// The buffers `fields` read, kept until the words are packed.
    _columns: Vec<ColumnOnDevice>,
    /// Bytes uploaded.
    pub h2d_bytes: usize,
}

impl Encoder {
    /// Uploads the `rows` rows of `columns` (fixed-width; a slice of a run whose column `c`
    /// has a null somewhere when `nullable[c]`) and reads their fields' statistics, which
    /// the caller merges over every slice for [`Self::pack_slice`].
    pub(crate) fn upload_slice(
        &self,
        device: &Device,
        staging: &mut Staging,
        columns: &[KeyColumn],
        nullable: &[bool],
        rows: usize,
        narrowing: Option<&Narrowing>,
    ) -> CudaResult<(SliceUpload, Vec<FieldStats>)> {
        let mut upload = SliceUpload {
            fields: Vec::new(),
            _columns: Vec::with_capacity(columns.len()),
            h2d_bytes: 0,
        };
        for (column, &nullable) in columns.iter().zip(nullable) {
            let (buffers, bytes) = upload_column(device, staging, column, narrowing)?;
            if buffers.raw.as_ref().is_some_and(|r| r.view_data.is_some()) {
                return Err(inconsistent(
                    "a byte-like key in a sort spread over devices".to_string(),
                ));
            }
            upload.h2d_bytes += bytes;
            let base = base_source(column, &buffers);
            let fields = fields_with_flag(base, &buffers.sources, nullable);
            upload.fields.extend(fields);
            upload._columns.push(buffers);
        }
        let stats = self.field_stats(device, &upload.fields, rows)?;
        Ok((upload, stats))
    }

    /// The `rows` rows of `upload` packed into 64-bit key words by the reductions of
    /// `stats` (the whole run's, field by field); none when every key is equal.
    pub(crate) fn pack_slice(
        &self,
        device: &Device,
        upload: &SliceUpload,
        stats: &[FieldStats],
        rows: usize,
    ) -> CudaResult<Vec<DeviceBuffer<u64>>> {
        if stats.len() != upload.fields.len() {
            return Err(inconsistent(format!(
                "{} field statistics for {} fields",
                stats.len(),
                upload.fields.len()
            )));
        }
        let reduced: Vec<(FieldSource, Reduction)> = upload
            .fields
            .iter()
            .zip(stats)
            .filter_map(|(field, stats)| stats.reduction().map(|r| (*field, r)))
            .collect();
        let widths: Vec<u32> = reduced.iter().map(|(_, r)| r.width).collect();
        let total_bits: u32 = widths.iter().sum();
        (0..total_bits.div_ceil(64) as usize)
            .map(|w| {
                let word = device.alloc::<u64>(rows, "key words")?;
                self.pack_word(device, &reduced, &widths, w, 64, &word, rows)?;
                Ok(word)
            })
            .collect()
    }
}

/// The field of partition ids made by `encode_partition_ids` (u16, never null).
fn id_field(ids: &DeviceBuffer<u16>) -> FieldSource {
    FieldSource {
        values: ids.ptr(),
        valid: 0,
        stride: 2,
        offset: 0,
        width: 2,
        kind: LimbKind::Unsigned as u32,
        descending: 0,
        nulls_first: 0,
        data: 0,
        buffer_starts: 0,
    }
}

/// The field of a routing key's one integer limb as stored, whatever the sort direction
/// (`base`: the column's null flag field), and whether the limb is signed.
fn routing_limb(limbs: &[LimbSource], base: FieldSource) -> CudaResult<(FieldSource, bool)> {
    let (limb, signed) = match limbs {
        [limb] if limb.kind == LimbKind::Signed => (limb, true),
        [limb] if limb.kind == LimbKind::Unsigned => (limb, false),
        _ => {
            return Err(inconsistent(
                "partition ids from a key that is not one integer limb".to_string(),
            ))
        }
    };
    let source = FieldSource {
        stride: limb.stride,
        offset: limb.offset,
        width: limb.width,
        kind: limb.kind as u32,
        descending: 0,
        ..base
    };
    Ok((source, signed))
}

fn inconsistent(what: String) -> CudaError {
    CudaError::Inconsistent(what)
}

/// A column's null flag field, from which its other fields are made.
fn base_source(column: &KeyColumn, buffers: &ColumnOnDevice) -> FieldSource {
    let raw = buffers.raw.as_ref();
    let valid = raw.and_then(|r| r.validity.as_ref());
    let data = raw.and_then(|r| r.view_data.as_ref());
    FieldSource {
        values: raw.map_or(0, |r| r.values.ptr()),
        valid: valid.map_or(0, |b| b.ptr()),
        stride: 0,
        offset: 0,
        width: 0,
        kind: FIELD_NULL_FLAG,
        descending: column.options.descending as u32,
        nulls_first: column.options.nulls_first as u32,
        data: data.map_or(0, |d| d.data.ptr()),
        buffer_starts: data.map_or(0, |d| d.starts.ptr()),
    }
}

/// The fields of a fixed-width column, in the host encoder's order: null flag, then limbs.
fn fixed_fields(base: FieldSource, sources: &[LimbSource]) -> Vec<FieldSource> {
    fields_with_flag(base, sources, base.valid != 0)
}

/// [`fixed_fields`], the null flag there when `flag` says (a column with no validity
/// bitmap has every row valid: its flag is constant).
fn fields_with_flag(base: FieldSource, sources: &[LimbSource], flag: bool) -> Vec<FieldSource> {
    let flag = flag.then_some(base);
    let limbs = sources.iter().map(|source| FieldSource {
        stride: source.stride,
        offset: source.offset,
        width: source.width,
        kind: source.kind as u32,
        ..base
    });
    flag.into_iter().chain(limbs).collect()
}

/// Uploads a column's values (and validity, when some row is null); returns the buffers
/// and the bytes copied.
fn upload_column(
    device: &Device,
    staging: &mut Staging,
    column: &KeyColumn,
    narrowing: Option<&Narrowing>,
) -> CudaResult<(ColumnOnDevice, usize)> {
    let data_type = column.arrays.first().map(|a| a.data_type().clone());
    // No rows, or every row null (`Null`): the null flag is constant and no limb exists.
    let (Some(data_type), false) = (&data_type, data_type == Some(DataType::Null)) else {
        return Ok((ColumnOnDevice::default(), 0));
    };
    if is_view_type(data_type) {
        let (raw, bytes) =
            upload_raw_column(device, staging, &column.arrays, PayloadLayout::Views, None)?;
        let buffers = ColumnOnDevice {
            sources: Vec::new(),
            raw: Some(raw),
        };
        return Ok((buffers, bytes));
    }
    let sources = limb_sources(data_type).unwrap_or_default();
    let layout = match sources.first() {
        Some(first) if first.kind == LimbKind::Bit => PayloadLayout::Bits,
        first => PayloadLayout::Fixed(first.map_or(0, |s| s.stride as usize)),
    };
    let (raw, bytes) = upload_raw_column(device, staging, &column.arrays, layout, narrowing)?;
    let buffers = ColumnOnDevice {
        sources,
        raw: Some(raw),
    };
    Ok((buffers, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_source_matches_the_kernel_struct() {
        // Two pointers, six u32, two pointers: 56 bytes, 8-aligned, as `struct FieldSource`.
        assert_eq!(std::mem::size_of::<FieldSource>(), 56);
        assert_eq!(std::mem::align_of::<FieldSource>(), 8);
    }
}
