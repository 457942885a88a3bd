//! Column chunks whose pages the device built (`src/cuda/parquet.rs`): the host cuts the
//! column into pages, computes their statistics from the Arrow values, and writes the page
//! headers, the chunk's metadata and its page index the way parquet's own column writer
//! does (a `PLAIN` dictionary page and `RLE_DICTIONARY` data pages where the chunk keeps a
//! dictionary, else `PLAIN` or `DELTA_BINARY_PACKED` values; `RLE` definition levels; data
//! pages of version 1), so that the appender splices them into the file like chunks
//! encoded on the CPU.
//!
//! Taken: top-level columns of one level at most (required or optional, not nested) whose
//! values Parquet stores as 4 or 8 bytes taken from the low bytes of Arrow's, or as byte
//! arrays (strings and binaries, [`device_bytes`]) ([`DeviceLayout`]), written without a
//! bloom filter, uncompressed or Snappy, as data pages of version 1. A chunk whose dictionary would pass the properties' dictionary page limit
//! gives it up for the whole chunk (parquet's writer gives it up part way, keeping the
//! pages it wrote before): the values are the same, the pages fewer.

use std::cmp::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::buffer::{Buffer, NullBuffer};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::parquet::basic::{
    BoundaryOrder, Compression, Encoding, EncodingMask, PageType, Type as PhysicalType,
};
use datafusion::parquet::column::page::{CompressedPage, Page, PageWriter};
use datafusion::parquet::column::writer::ColumnCloseResult;
use datafusion::parquet::data_type::ByteArray;
use datafusion::parquet::errors::{ParquetError, Result};
use datafusion::parquet::file::metadata::{
    ColumnChunkMetaData, ColumnIndexBuilder, LevelHistogram, OffsetIndexBuilder, PageEncodingStats,
};
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use datafusion::parquet::file::statistics::{Statistics, ValueStatistics};
use datafusion::parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use datafusion::parquet::schema::types::ColumnDescPtr;

use rayon::prelude::*;

use super::device_bytes;
use crate::cuda::{
    ColumnPages, PageColumn, PageCut, ResidentPageSpec, ResidentPages, ResidentRun, StatisticsOrder,
};
use crate::gather::ResidentColumns;

/// How the device writes one Arrow column's values: bytes of each as Arrow holds them, in
/// the page (its low bytes), and how Parquet orders them for statistics (byte arrays: 0
/// and 0, [`ValueOrder::Bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DeviceLayout {
    /// Bytes of a value in the Arrow array.
    pub(super) in_width: u32,
    /// Bytes of a value in the page.
    pub(super) out_width: u32,
    order: ValueOrder,
}

/// How statistics compare a column's page values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueOrder {
    Int32,
    UInt32,
    Int64,
    UInt64,
    Float,
    Double,
    /// Byte arrays, compared byte by byte, unsigned.
    Bytes,
}

impl DeviceLayout {
    /// Whether the values are byte arrays.
    pub(super) fn byte_array(&self) -> bool {
        self.order == ValueOrder::Bytes
    }

    /// The order the device finds each page's extremes in (of the page's values, their
    /// low `out_width` bytes).
    fn statistics_order(&self) -> StatisticsOrder {
        match self.order {
            ValueOrder::Int32 | ValueOrder::Int64 => StatisticsOrder::Signed,
            ValueOrder::UInt32 | ValueOrder::UInt64 => StatisticsOrder::Unsigned,
            ValueOrder::Float | ValueOrder::Double => StatisticsOrder::Float,
            ValueOrder::Bytes => StatisticsOrder::Bytes,
        }
    }
}

/// A column chunk ready for the appender: its bytes (page headers and pages, from offset
/// 0) and what its writer would have closed with.
#[derive(Debug)]
pub(super) struct DeviceChunk {
    pub(super) bytes: Bytes,
    pub(super) close: ColumnCloseResult,
    /// Whether the chunk gave up the dictionary it tried; `None` where it tried none, or
    /// had no value to put in one.
    pub(super) gave_up_dictionary: Option<bool>,
    /// Built from the sort's copy of the column on the device ([`encode_resident`]).
    pub(super) resident: bool,
}

/// The layout the device writes `data_type` in as the leaf `descr`, or `None` where its
/// pages are the CPU's: nested or repeated columns, and types whose Parquet values are not
/// the low bytes of Arrow's.
pub(super) fn device_layout(data_type: &DataType, descr: &ColumnDescPtr) -> Option<DeviceLayout> {
    if descr.max_rep_level() > 0 || descr.max_def_level() > 1 {
        return None;
    }
    use ValueOrder::*;
    let (in_width, out_width, order) = match (data_type, descr.physical_type()) {
        (DataType::Int32 | DataType::Date32, PhysicalType::INT32) => (4, 4, Int32),
        (DataType::Time32(TimeUnit::Millisecond), PhysicalType::INT32) => (4, 4, Int32),
        (DataType::UInt32, PhysicalType::INT32) => (4, 4, UInt32),
        (DataType::Int64, PhysicalType::INT64) => (8, 8, Int64),
        (
            DataType::Timestamp(
                TimeUnit::Millisecond | TimeUnit::Microsecond | TimeUnit::Nanosecond,
                _,
            )
            | DataType::Time64(TimeUnit::Microsecond | TimeUnit::Nanosecond),
            PhysicalType::INT64,
        ) => (8, 8, Int64),
        (DataType::UInt64, PhysicalType::INT64) => (8, 8, UInt64),
        (DataType::Float32, PhysicalType::FLOAT) => (4, 4, Float),
        (DataType::Float64, PhysicalType::DOUBLE) => (8, 8, Double),
        (DataType::Decimal128(..), PhysicalType::INT32) => (16, 4, Int32),
        (DataType::Decimal128(..), PhysicalType::INT64) => (16, 8, Int64),
        (t, PhysicalType::BYTE_ARRAY) if device_bytes::is_byte_array(t) => (0, 0, Bytes),
        _ => return None,
    };
    Some(DeviceLayout {
        in_width,
        out_width,
        order,
    })
}

/// The encoding of `descr`'s values in the pages the device writes under `properties`
/// without a dictionary (where none is tried, or once it is given up), or `None` where the
/// device does not write them: `PLAIN` (no other encoding asked for) or
/// `DELTA_BINARY_PACKED` (of integers), without a bloom filter, uncompressed or Snappy, in
/// pages of version 1.
pub(super) fn values_encoding(
    properties: &WriterProperties,
    descr: &ColumnDescPtr,
) -> Option<Encoding> {
    let path = descr.path();
    let allowed = properties.writer_version() == WriterVersion::PARQUET_1_0
        && properties.bloom_filter_properties(path).is_none()
        && matches!(
            properties.compression(path),
            Compression::UNCOMPRESSED | Compression::SNAPPY
        );
    let integer = matches!(
        descr.physical_type(),
        PhysicalType::INT32 | PhysicalType::INT64
    );
    match properties.encoding(path) {
        _ if !allowed => None,
        None | Some(Encoding::PLAIN) => Some(Encoding::PLAIN),
        Some(Encoding::DELTA_BINARY_PACKED) if integer => Some(Encoding::DELTA_BINARY_PACKED),
        Some(_) => None,
    }
}

/// The most bytes of `descr`'s dictionary page under `properties`, where it tries one.
pub(super) fn dictionary_limit(
    properties: &WriterProperties,
    descr: &ColumnDescPtr,
) -> Option<usize> {
    let path = descr.path();
    properties
        .dictionary_enabled(path)
        .then(|| properties.column_dictionary_page_size_limit(path))
}

/// Whether the device writes `descr`'s pages under `properties`.
pub(super) fn properties_allow(properties: &WriterProperties, descr: &ColumnDescPtr) -> bool {
    values_encoding(properties, descr).is_some()
}

/// The pages of a column of `rows` rows (`nulls` its validity), where parquet's writer
/// would close them: after the first whole write batch (1024 rows by default) that
/// reaches the properties' row count or page size; always a multiple of 8 rows (the
/// device copies validity bytes).
pub(super) fn cut_pages(
    rows: usize,
    nulls: Option<&NullBuffer>,
    layout: DeviceLayout,
    properties: &WriterProperties,
    descr: &ColumnDescPtr,
) -> Vec<PageCut> {
    let batch = properties.write_batch_size().max(1);
    let by_rows = properties.data_page_row_count_limit().max(1);
    let by_bytes =
        (properties.column_data_page_size_limit(descr.path()) / layout.out_width as usize).max(1);
    let per_page = (by_rows.min(by_bytes).div_ceil(batch) * batch).div_ceil(8) * 8;
    (0..rows)
        .step_by(per_page)
        .map(|first_row| {
            let page_rows = per_page.min(rows - first_row);
            let values = match nulls {
                Some(nulls) => page_rows - nulls.slice(first_row, page_rows).null_count(),
                None => page_rows,
            };
            PageCut {
                first_row,
                rows: page_rows,
                values,
            }
        })
        .collect()
}

/// A page's (or chunk's) smallest and largest value, as the physical type's bits.
#[derive(Debug, Clone)]
enum MinMax {
    Int32(i32, i32),
    Int64(i64, i64),
    Float(f32, f32),
    Double(f64, f64),
    Bytes(Vec<u8>, Vec<u8>),
}

impl MinMax {
    /// The plain-encoded bytes of the minimum and maximum (the column index's form).
    fn bytes(&self) -> (Vec<u8>, Vec<u8>) {
        match self {
            MinMax::Int32(a, b) => (a.to_le_bytes().to_vec(), b.to_le_bytes().to_vec()),
            MinMax::Int64(a, b) => (a.to_le_bytes().to_vec(), b.to_le_bytes().to_vec()),
            MinMax::Float(a, b) => (a.to_le_bytes().to_vec(), b.to_le_bytes().to_vec()),
            MinMax::Double(a, b) => (a.to_le_bytes().to_vec(), b.to_le_bytes().to_vec()),
            MinMax::Bytes(a, b) => (a.clone(), b.clone()),
        }
    }

    /// The minimum (or, with `maxima`, the maximum) as `order` compares it.
    fn key(&self, order: ValueOrder, maxima: bool) -> OrderKey {
        fn pick<T>(maxima: bool, lo: T, hi: T) -> T {
            if maxima {
                hi
            } else {
                lo
            }
        }
        match (self.clone(), order) {
            (MinMax::Int32(lo, hi), ValueOrder::UInt32) => {
                OrderKey::Int(pick(maxima, lo, hi) as u32 as i128)
            }
            (MinMax::Int32(lo, hi), _) => OrderKey::Int(pick(maxima, lo, hi) as i128),
            (MinMax::Int64(lo, hi), ValueOrder::UInt64) => {
                OrderKey::Int(pick(maxima, lo, hi) as u64 as i128)
            }
            (MinMax::Int64(lo, hi), _) => OrderKey::Int(pick(maxima, lo, hi) as i128),
            (MinMax::Float(lo, hi), _) => OrderKey::Float(pick(maxima, lo, hi) as f64),
            (MinMax::Double(lo, hi), _) => OrderKey::Float(pick(maxima, lo, hi)),
            (MinMax::Bytes(..), _) => unreachable!("byte arrays compare as bytes"),
        }
    }

    /// How two minima (or maxima) of one column compare in its order.
    fn compare(order: ValueOrder, a: &MinMax, b: &MinMax, maxima: bool) -> Ordering {
        if let (MinMax::Bytes(al, ah), MinMax::Bytes(bl, bh)) = (a, b) {
            return match maxima {
                true => ah.cmp(bh),
                false => al.cmp(bl),
            };
        }
        a.key(order, maxima)
            .partial_cmp(&b.key(order, maxima))
            .unwrap_or(Ordering::Equal)
    }

    /// The smaller minimum and larger maximum of two.
    fn merge(order: ValueOrder, a: MinMax, b: MinMax) -> MinMax {
        let lower = MinMax::compare(order, &b, &a, false) == Ordering::Less;
        let higher = MinMax::compare(order, &b, &a, true) == Ordering::Greater;
        let (lo, hi) = match (lower, higher) {
            (true, true) => return b,
            (false, false) => return a,
            (true, false) => (b, a),
            (false, true) => (a, b),
        };
        match (lo, hi) {
            (MinMax::Int32(l, _), MinMax::Int32(_, h)) => MinMax::Int32(l, h),
            (MinMax::Int64(l, _), MinMax::Int64(_, h)) => MinMax::Int64(l, h),
            (MinMax::Float(l, _), MinMax::Float(_, h)) => MinMax::Float(l, h),
            (MinMax::Double(l, _), MinMax::Double(_, h)) => MinMax::Double(l, h),
            (MinMax::Bytes(l, _), MinMax::Bytes(_, h)) => MinMax::Bytes(l, h),
            _ => unreachable!("one column's statistics share a type"),
        }
    }
}

/// A statistic as its column orders it: integers (signed or unsigned) exactly, floats
/// as floats (never NaN: the statistics skip them).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
enum OrderKey {
    Int(i128),
    Float(f64),
}

/// The smallest and largest of the valid `values`, each taken as `to` makes it, where
/// `counts` keeps it; `None` if none does.
fn extremes<S: Copy, T: Copy + PartialOrd>(
    values: &[S],
    valid: impl Fn(usize) -> bool,
    to: impl Fn(S) -> T,
    counts: impl Fn(T) -> bool,
) -> Option<(T, T)> {
    let mut out: Option<(T, T)> = None;
    for (i, v) in values.iter().enumerate() {
        let v = to(*v);
        if !valid(i) || !counts(v) {
            continue;
        }
        out = Some(match out {
            None => (v, v),
            Some((lo, hi)) => (if v < lo { v } else { lo }, if hi < v { v } else { hi }),
        });
    }
    out
}

/// A float minimum written as -0.0 where it is zero, a maximum as +0.0 (parquet's rule).
fn signed_zeros<T: Copy + PartialEq + Default + std::ops::Neg<Output = T>>(
    (lo, hi): (T, T),
) -> (T, T) {
    let zero = T::default();
    (
        if lo == zero { -zero } else { lo },
        if hi == zero { T::default() } else { hi },
    )
}

/// The minimum and maximum of rows `cut` of `array`, as parquet's writer finds them:
/// nulls and NaNs skipped, a zero minimum written as -0.0 and a zero maximum as +0.0.
fn page_min_max(array: &dyn Array, order: ValueOrder, cut: &PageCut) -> Option<MinMax> {
    if order == ValueOrder::Bytes {
        let (offsets, bytes) = device_bytes::offsets_and_bytes(array);
        return device_bytes::page_min_max(offsets, bytes, array.logical_nulls().as_ref(), cut)
            .map(|(lo, hi)| MinMax::Bytes(lo, hi));
    }
    let slice = array.slice(cut.first_row, cut.rows);
    let nulls = slice.logical_nulls();
    let valid = |i: usize| nulls.as_ref().is_none_or(|n| n.is_valid(i));
    // The values in Arrow's width (`buffer` starts at the slice's first row).
    let data = slice.to_data();
    fn all<T>(_: T) -> bool {
        true
    }
    let decimal = matches!(array.data_type(), DataType::Decimal128(..));
    match order {
        ValueOrder::Int32 if decimal => extremes(data.buffer::<i128>(0), valid, |v| v as i32, all)
            .map(|(l, h)| MinMax::Int32(l, h)),
        ValueOrder::Int64 if decimal => extremes(data.buffer::<i128>(0), valid, |v| v as i64, all)
            .map(|(l, h)| MinMax::Int64(l, h)),
        ValueOrder::Int32 => {
            extremes(data.buffer::<i32>(0), valid, |v| v, all).map(|(l, h)| MinMax::Int32(l, h))
        }
        ValueOrder::UInt32 => extremes(data.buffer::<u32>(0), valid, |v| v, all)
            .map(|(l, h)| MinMax::Int32(l as i32, h as i32)),
        ValueOrder::Int64 => {
            extremes(data.buffer::<i64>(0), valid, |v| v, all).map(|(l, h)| MinMax::Int64(l, h))
        }
        ValueOrder::UInt64 => extremes(data.buffer::<u64>(0), valid, |v| v, all)
            .map(|(l, h)| MinMax::Int64(l as i64, h as i64)),
        ValueOrder::Float => extremes(data.buffer::<f32>(0), valid, |v| v, |v: f32| !v.is_nan())
            .map(|m| {
                let (l, h) = signed_zeros(m);
                MinMax::Float(l, h)
            }),
        ValueOrder::Double => extremes(data.buffer::<f64>(0), valid, |v| v, |v: f64| !v.is_nan())
            .map(|m| {
                let (l, h) = signed_zeros(m);
                MinMax::Double(l, h)
            }),
        ValueOrder::Bytes => unreachable!("taken above"),
    }
}

/// The minimum and maximum of a page whose smallest value is at row `lo` and largest at
/// row `hi` (as [`page_min_max`] of the page makes them).
fn rows_min_max(array: &dyn Array, order: ValueOrder, lo: usize, hi: usize) -> Option<MinMax> {
    let at = |row: usize| PageCut {
        first_row: row,
        rows: 1,
        values: 1,
    };
    let smallest = page_min_max(array, order, &at(lo))?;
    let largest = page_min_max(array, order, &at(hi))?;
    Some(MinMax::merge(order, smallest, largest))
}

/// How parquet's writer cuts a column's byte-array minima and maxima: in statistics, in
/// the column index, and whether as UTF-8.
#[derive(Debug, Clone, Copy)]
struct Truncation {
    statistics: Option<usize>,
    column_index: Option<usize>,
    utf8: bool,
}

impl Truncation {
    fn of(properties: &WriterProperties, descr: &ColumnDescPtr) -> Self {
        Self {
            statistics: properties.statistics_truncate_length(),
            column_index: properties.column_index_truncate_length(),
            utf8: device_bytes::is_utf8(descr),
        }
    }

    /// A page's minimum and maximum as the column index holds them.
    fn column_index_bytes(&self, min_max: &MinMax) -> (Vec<u8>, Vec<u8>) {
        match min_max {
            MinMax::Bytes(lo, hi) => (
                device_bytes::truncate_min(lo, self.column_index, self.utf8).0,
                device_bytes::truncate_max(hi, self.column_index, self.utf8).0,
            ),
            other => other.bytes(),
        }
    }
}

/// Parquet statistics of a chunk (or page) of `physical` values with `min_max` and
/// `nulls` (byte arrays cut as `truncation` says).
fn statistics(
    physical: PhysicalType,
    min_max: Option<MinMax>,
    nulls: u64,
    signed: bool,
    truncation: &Truncation,
) -> Statistics {
    fn typed<T>(min_max: Option<(T, T)>, nulls: u64, signed: bool) -> ValueStatistics<T> {
        let (lo, hi) = min_max.unzip();
        ValueStatistics::new(lo, hi, None, Some(nulls), false)
            .with_backwards_compatible_min_max(signed)
    }
    match (physical, min_max) {
        (_, Some(MinMax::Int32(l, h))) => Statistics::Int32(typed(Some((l, h)), nulls, signed)),
        (_, Some(MinMax::Int64(l, h))) => Statistics::Int64(typed(Some((l, h)), nulls, signed)),
        (_, Some(MinMax::Float(l, h))) => Statistics::Float(typed(Some((l, h)), nulls, signed)),
        (_, Some(MinMax::Double(l, h))) => Statistics::Double(typed(Some((l, h)), nulls, signed)),
        (_, Some(MinMax::Bytes(l, h))) => {
            let (lo, lo_cut) =
                device_bytes::truncate_min(&l, truncation.statistics, truncation.utf8);
            let (hi, hi_cut) =
                device_bytes::truncate_max(&h, truncation.statistics, truncation.utf8);
            let min_max = Some((ByteArray::from(lo), ByteArray::from(hi)));
            Statistics::ByteArray(
                typed(min_max, nulls, signed)
                    .with_min_is_exact(!lo_cut)
                    .with_max_is_exact(!hi_cut),
            )
        }
        (PhysicalType::BYTE_ARRAY, None) => Statistics::ByteArray(typed(None, nulls, signed)),
        (PhysicalType::INT64, None) => Statistics::Int64(typed(None, nulls, signed)),
        (PhysicalType::FLOAT, None) => Statistics::Float(typed(None, nulls, signed)),
        (PhysicalType::DOUBLE, None) => Statistics::Double(typed(None, nulls, signed)),
        (_, None) => Statistics::Int32(typed(None, nulls, signed)),
    }
}

/// The chunk of `leaf` (every row of one row group's column) whose pages (cut as `cuts`)
/// the device encoded as `pages`, compressed with `compression`: with their dictionary
/// page where they have one, their values `RLE_DICTIONARY`; else in `fallback`.
pub(super) fn assemble_chunk(
    leaf: &DeviceLeaf,
    properties: &WriterProperties,
    cuts: &[PageCut],
    pages: ColumnPages,
    compression: Compression,
    fallback: Encoding,
    value_bytes: Option<Vec<i64>>,
) -> Result<DeviceChunk> {
    let (array, descr, layout) = (&leaf.array, &leaf.descr, leaf.layout);
    let ColumnPages {
        dictionary,
        gave_up_dictionary,
        pages,
        extremes,
    } = pages;
    let encoding = match dictionary {
        Some(_) => Encoding::RLE_DICTIONARY,
        None => fallback,
    };
    // Only a chunk that tried a dictionary has one, or gave it up.
    let gave_up_dictionary = match (&dictionary, gave_up_dictionary) {
        (Some(_), _) => Some(false),
        (None, true) => Some(true),
        (None, false) => None,
    };
    if cuts.len() != pages.len() {
        return Err(ParquetError::General(format!(
            "gpusort: {} pages encoded for {} cut",
            pages.len(),
            cuts.len()
        )));
    }
    let path = descr.path();
    let stats_level = properties.statistics_enabled(path);
    let signed = descr.sort_order().is_signed();
    let nullable = descr.max_def_level() > 0;
    let truncation = Truncation::of(properties, descr);
    // Byte arrays: the bytes of each page's values (parquet's unencoded bytes), given or
    // from the leaf's own values.
    let value_bytes: Option<Vec<i64>> = layout.byte_array().then(|| {
        value_bytes.unwrap_or_else(|| {
            let (offsets, _) = device_bytes::offsets_and_bytes(array.as_ref());
            let nulls = array.logical_nulls();
            cuts.iter()
                .map(|cut| device_bytes::page_value_bytes(offsets, nulls.as_ref(), cut) as i64)
                .collect()
        })
    });
    if extremes.as_ref().is_some_and(|e| e.len() != cuts.len()) {
        return Err(ParquetError::General(format!(
            "gpusort: the extremes of {} pages found for {} cut",
            extremes.map_or(0, |e| e.len()),
            cuts.len()
        )));
    }
    let page_stats: Vec<Option<MinMax>> = match (stats_level, extremes) {
        (EnabledStatistics::None, _) => vec![None; cuts.len()],
        // The rows the device found: two values a page to read.
        (_, Some(extremes)) => extremes
            .iter()
            .map(|rows| {
                rows.and_then(|(lo, hi)| rows_min_max(array.as_ref(), layout.order, lo, hi))
            })
            .collect(),
        _ => cuts
            .par_iter()
            .map(|cut| page_min_max(array.as_ref(), layout.order, cut))
            .collect(),
    };
    let mut sink = TrackedWrite::new(Vec::new());
    let mut column_index = ColumnIndexBuilder::new(descr.physical_type());
    let mut offset_index = (!properties.offset_index_disabled()).then(OffsetIndexBuilder::new);
    let (mut ascending, mut descending) = (true, true);
    let mut last: Option<MinMax> = None;
    let mut chunk_min_max: Option<MinMax> = None;
    let (mut uncompressed_total, mut nulls_total) = (0u64, 0u64);
    let has_dictionary = dictionary.is_some();
    let mut data_page_offset = 0u64;
    {
        let mut writer = SerializedPageWriter::new(&mut sink);
        if let Some((page, entries)) = dictionary {
            let dictionary_page = Page::DictionaryPage {
                buf: page.data,
                num_values: entries as u32,
                encoding: Encoding::PLAIN,
                is_sorted: false,
            };
            let spec = writer.write_page(CompressedPage::new(
                dictionary_page,
                page.uncompressed_bytes,
            ))?;
            uncompressed_total += spec.uncompressed_size as u64;
            data_page_offset = spec.offset + spec.bytes_written;
        }
        for (index, ((cut, page), stats)) in cuts.iter().zip(pages).zip(&page_stats).enumerate() {
            let nulls = (cut.rows - cut.values) as u64;
            nulls_total += nulls;
            // Parquet's writer puts statistics in a page's header only where it has a
            // minimum and maximum, not marked backwards compatible.
            let header_stats = stats
                .as_ref()
                .filter(|_| {
                    properties.write_page_header_statistics(path)
                        && stats_level == EnabledStatistics::Page
                })
                .map(|m| {
                    let physical = descr.physical_type();
                    statistics(physical, Some(m.clone()), nulls, false, &truncation)
                });
            let data_page = Page::DataPage {
                buf: page.data,
                num_values: cut.rows as u32,
                encoding,
                def_level_encoding: Encoding::RLE,
                rep_level_encoding: Encoding::RLE,
                statistics: header_stats,
            };
            let spec =
                writer.write_page(CompressedPage::new(data_page, page.uncompressed_bytes))?;
            uncompressed_total += spec.uncompressed_size as u64;
            if let Some(builder) = offset_index.as_mut() {
                builder.append_offset_and_size(spec.offset as i64, spec.compressed_size as i32);
                builder.append_row_count(cut.rows as i64);
                let bytes = value_bytes.as_ref().map(|b| b[index]);
                builder.append_unencoded_byte_array_data_bytes(bytes);
            }
            if let Some(m) = stats {
                chunk_min_max = Some(match chunk_min_max {
                    None => m.clone(),
                    Some(c) => MinMax::merge(layout.order, c, m.clone()),
                });
            }
            if stats_level == EnabledStatistics::Page && column_index.valid() {
                if cut.values == 0 {
                    column_index.append(true, vec![], vec![], nulls as i64);
                } else if let Some(m) = stats {
                    if let Some(l) = &last {
                        let o = layout.order;
                        if MinMax::compare(o, l, m, false) == Ordering::Greater
                            || MinMax::compare(o, l, m, true) == Ordering::Greater
                        {
                            ascending = false;
                        }
                        if MinMax::compare(o, m, l, false) == Ordering::Greater
                            || MinMax::compare(o, m, l, true) == Ordering::Greater
                        {
                            descending = false;
                        }
                    }
                    last = Some(m.clone());
                    let (lo, hi) = truncation.column_index_bytes(m);
                    column_index.append(false, lo, hi, nulls as i64);
                } else {
                    column_index.to_invalid();
                }
                if nullable {
                    let histogram = LevelHistogram::from(vec![nulls as i64, cut.values as i64]);
                    column_index.append_histograms(&None, &Some(histogram));
                }
            }
        }
        writer.close()?;
    }
    let bytes_written = sink.bytes_written() as u64;
    let bytes = Bytes::from(sink.into_inner()?);
    let rows = cuts.iter().map(|c| c.rows as u64).sum::<u64>();
    let mut encodings = vec![encoding, Encoding::RLE];
    let mut page_kinds = vec![PageEncodingStats {
        page_type: PageType::DATA_PAGE,
        encoding,
        count: cuts.len() as i32,
    }];
    if has_dictionary {
        encodings.push(Encoding::PLAIN);
        page_kinds.insert(
            0,
            PageEncodingStats {
                page_type: PageType::DICTIONARY_PAGE,
                encoding: Encoding::PLAIN,
                count: 1,
            },
        );
    }
    let mut builder = ColumnChunkMetaData::builder(Arc::clone(descr))
        .set_compression(compression)
        .set_encodings_mask(EncodingMask::new_from_encodings(encodings.iter()))
        .set_page_encoding_stats(page_kinds)
        .set_total_compressed_size(bytes_written as i64)
        .set_total_uncompressed_size(uncompressed_total as i64)
        .set_num_values(rows as i64)
        .set_data_page_offset(data_page_offset as i64)
        .set_dictionary_page_offset(has_dictionary.then_some(0));
    if stats_level != EnabledStatistics::None {
        builder = builder
            .set_statistics(statistics(
                descr.physical_type(),
                chunk_min_max,
                nulls_total,
                signed,
                &truncation,
            ))
            .set_unencoded_byte_array_data_bytes(value_bytes.map(|b| b.iter().sum()))
            .set_repetition_level_histogram(None)
            .set_definition_level_histogram(nullable.then(|| {
                LevelHistogram::from(vec![nulls_total as i64, (rows - nulls_total) as i64])
            }));
    }
    let metadata = builder.build()?;
    let column_index = if stats_level == EnabledStatistics::Page && column_index.valid() {
        column_index.set_boundary_order(match (ascending, descending) {
            (true, _) => BoundaryOrder::ASCENDING,
            (false, true) => BoundaryOrder::DESCENDING,
            (false, false) => BoundaryOrder::UNORDERED,
        });
        Some(column_index.build()?)
    } else {
        None
    };
    Ok(DeviceChunk {
        bytes,
        close: ColumnCloseResult {
            bytes_written,
            rows_written: rows,
            metadata,
            bloom_filter: None,
            column_index,
            offset_index: offset_index.map(|b| b.build()),
        },
        gave_up_dictionary,
        resident: false,
    })
}

/// One leaf of a row group for the device: every row of its column, and how it is laid
/// out.
#[derive(Debug, Clone)]
pub(super) struct DeviceLeaf {
    pub(super) array: ArrayRef,
    pub(super) descr: ColumnDescPtr,
    pub(super) layout: DeviceLayout,
}

/// Whether the leaves `descrs` of one launch are Snappy-compressed under `properties`
/// (else uncompressed); an error where they differ.
fn one_launch_snappy<'a>(
    properties: &WriterProperties,
    mut descrs: impl Iterator<Item = &'a ColumnDescPtr>,
) -> std::result::Result<bool, String> {
    let snappy =
        |descr: &ColumnDescPtr| properties.compression(descr.path()) == Compression::SNAPPY;
    let Some(first) = descrs.next() else {
        return Ok(false);
    };
    let first = snappy(first);
    match descrs.all(|descr| snappy(descr) == first) {
        true => Ok(first),
        false => Err("the leaves differ in compression".to_string()),
    }
}

/// The chunks of `leaves`, their pages built on the device under `properties`; or why
/// not (the caller encodes them on the host).
pub(super) fn encode_on_device(
    leaves: &[DeviceLeaf],
    properties: &WriterProperties,
) -> std::result::Result<Vec<DeviceChunk>, String> {
    encode_with(leaves, properties, crate::cuda::encode_on_device)
}

/// [`encode_on_device`] with `pages` building the pages (tests build them on the host).
fn encode_with(
    leaves: &[DeviceLeaf],
    properties: &WriterProperties,
    pages: impl FnOnce(&[PageColumn<'_>], bool) -> std::result::Result<Vec<ColumnPages>, String>,
) -> std::result::Result<Vec<DeviceChunk>, String> {
    let compression = |leaf: &DeviceLeaf| properties.compression(leaf.descr.path());
    let snappy = one_launch_snappy(properties, leaves.iter().map(|leaf| &leaf.descr))?;
    let started = std::time::Instant::now();
    // Byte arrays as one run of bytes each (their statistics are taken from it too).
    let leaves: Vec<DeviceLeaf> = leaves
        .par_iter()
        .map(|leaf| match leaf.layout.byte_array() {
            true => Ok(DeviceLeaf {
                array: device_bytes::contiguous(&leaf.array)?,
                ..leaf.clone()
            }),
            false => Ok(leaf.clone()),
        })
        .collect::<std::result::Result<_, String>>()?;
    let cuts: Vec<Vec<PageCut>> = leaves
        .iter()
        .map(|leaf| {
            let nulls = leaf.array.logical_nulls();
            match leaf.layout.byte_array() {
                true => device_bytes::cut_byte_pages(
                    device_bytes::offsets_and_bytes(leaf.array.as_ref()).0,
                    nulls.as_ref(),
                    properties,
                    &leaf.descr,
                ),
                false => cut_pages(
                    leaf.array.len(),
                    nulls.as_ref(),
                    leaf.layout,
                    properties,
                    &leaf.descr,
                ),
            }
        })
        .collect();
    let encodings: Vec<Encoding> = leaves
        .iter()
        .map(|leaf| values_encoding(properties, &leaf.descr).unwrap_or(Encoding::PLAIN))
        .collect();
    let data: Vec<_> = leaves.iter().map(|leaf| leaf.array.to_data()).collect();
    let validity: Vec<Option<Buffer>> = leaves
        .iter()
        .map(|leaf| {
            leaf.array
                .logical_nulls()
                .filter(|n| n.null_count() > 0)
                .map(|n| n.inner().sliced())
        })
        .collect();
    let columns: Vec<PageColumn<'_>> = leaves
        .iter()
        .zip(&data)
        .zip(&validity)
        .zip(&cuts)
        .zip(&encodings)
        .map(|((((leaf, data), validity), cuts), encoding)| {
            let (values, offsets) = match leaf.layout.byte_array() {
                true => {
                    let (offsets, bytes) = device_bytes::offsets_and_bytes(leaf.array.as_ref());
                    (bytes, Some(offsets))
                }
                false => {
                    let width = leaf.layout.in_width as usize;
                    let start = data.offset() * width;
                    let end = start + data.len() * width;
                    (&data.buffers()[0].as_slice()[start..end], None)
                }
            };
            PageColumn {
                delta: *encoding == Encoding::DELTA_BINARY_PACKED,
                values,
                offsets,
                validity: validity.as_ref().map(|b| b.as_slice()),
                in_width: leaf.layout.in_width,
                out_width: leaf.layout.out_width,
                nullable: leaf.descr.max_def_level() > 0,
                pages: cuts,
                dictionary_limit: dictionary_limit(properties, &leaf.descr),
                statistics: (properties.statistics_enabled(leaf.descr.path())
                    != EnabledStatistics::None)
                    .then(|| leaf.layout.statistics_order()),
                on_device: None,
            }
        })
        .collect();
    // When the pages were cut (byte arrays made contiguous first), and built.
    let cut_at = started.elapsed();
    let pages = pages(&columns, snappy)?;
    let built_at = started.elapsed();
    let chunks = leaves
        .par_iter()
        .zip(cuts)
        .zip(pages)
        .zip(&encodings)
        .map(|(((leaf, cuts), pages), encoding)| {
            assemble_chunk(
                leaf,
                properties,
                &cuts,
                pages,
                compression(leaf),
                *encoding,
                None,
            )
            .map_err(|e| e.to_string())
        })
        .collect();
    crate::trace::event(|| {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        format!(
            "writer: {} rows' pages: cut in {:.1} ms, built in {:.1} ms, chunks closed in {:.1} ms",
            leaves.first().map_or(0, |leaf| leaf.array.len()),
            ms(cut_at),
            ms(built_at - cut_at),
            ms(started.elapsed() - built_at),
        )
    });
    chunks
}

/// The chunks of columns a sorted run kept on the device (`src/cuda/payload/resident.rs`), for
/// rows `first .. first + rows` of the run: per leaf its column, layout and place among
/// the run's columns. The device gathers the rows and builds the pages there; the values
/// of each page's extremes are read from the run's input on the host. Or why not (the
/// caller then brings the rows to the host and goes on as for any other rows).
pub(super) fn encode_resident(
    run: &dyn ResidentColumns,
    first: usize,
    rows: usize,
    leaves: &[(ColumnDescPtr, DeviceLayout, usize)],
    properties: &WriterProperties,
) -> std::result::Result<Vec<DeviceChunk>, String> {
    let Some(run) = run.as_any().downcast_ref::<ResidentRun>() else {
        return Err("the run's columns are not on a CUDA device".to_string());
    };
    let compression = |descr: &ColumnDescPtr| properties.compression(descr.path());
    let snappy = one_launch_snappy(properties, leaves.iter().map(|(descr, ..)| descr))?;
    let started = std::time::Instant::now();
    let encodings: Vec<Encoding> = leaves
        .iter()
        .map(|(descr, ..)| values_encoding(properties, descr).unwrap_or(Encoding::PLAIN))
        .collect();
    let mut specs = Vec::with_capacity(leaves.len());
    for ((descr, layout, column), encoding) in leaves.iter().zip(&encodings) {
        // Byte arrays are held as views (width 0) and taken as bytes and offsets.
        if run.width(*column) != layout.in_width as usize {
            return Err(format!(
                "column {} is held as {} bytes a value on the device",
                descr.path(),
                run.width(*column)
            ));
        }
        specs.push(ResidentPageSpec {
            column: *column,
            out_width: layout.out_width,
            nullable: descr.max_def_level() > 0,
            delta: *encoding == Encoding::DELTA_BINARY_PACKED,
            dictionary_limit: dictionary_limit(properties, descr),
            statistics: (properties.statistics_enabled(descr.path()) != EnabledStatistics::None)
                .then(|| layout.statistics_order()),
        });
    }
    let cut = |i: usize, nulls: Option<&NullBuffer>, offsets: Option<&[u32]>| {
        let (descr, layout, _) = &leaves[i];
        match offsets {
            Some(offsets) => device_bytes::cut_byte_pages(offsets, nulls, properties, descr),
            None => cut_pages(rows, nulls, *layout, properties, descr),
        }
    };
    let built = run.encode_pages(first, rows, &specs, snappy, &cut)?;
    let built_at = started.elapsed();
    let chunks = leaves
        .par_iter()
        .zip(built)
        .zip(&encodings)
        .map(|(((descr, layout, column), built), encoding)| {
            let ResidentPages {
                cuts,
                pages,
                nulls,
                offsets,
            } = built;
            // Byte arrays: the bytes of each page's values, from the row group's offsets.
            let value_bytes = offsets.map(|offsets| {
                cuts.iter()
                    .map(|cut| device_bytes::page_value_bytes(&offsets, nulls.as_ref(), cut) as i64)
                    .collect()
            });
            // The values at each page's extremes, two a page, read from the host (byte
            // arrays as their bytes end to end, as the statistics read them).
            let (array, pages) = extreme_values(run, *column, first, pages)?;
            let array = match layout.byte_array() {
                true => device_bytes::contiguous(&array).map_err(ParquetError::General)?,
                false => array,
            };
            let leaf = DeviceLeaf {
                array,
                descr: Arc::clone(descr),
                layout: *layout,
            };
            let mut chunk = assemble_chunk(
                &leaf,
                properties,
                &cuts,
                pages,
                compression(descr),
                *encoding,
                value_bytes,
            )?;
            chunk.resident = true;
            Ok(chunk)
        })
        .collect::<Result<Vec<DeviceChunk>>>()
        .map_err(|e| e.to_string());
    crate::trace::event(|| {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        format!(
            "writer: {rows} resident rows' pages built in {:.1} ms, chunks closed in {:.1} ms",
            ms(built_at),
            ms(started.elapsed() - built_at),
        )
    });
    chunks
}

/// The values at `pages`' extremes (rows of the row group that starts at row `first` of
/// `run`), read from the run's input: an array of two values a page that has them, and
/// the pages with their extremes renumbered into it.
fn extreme_values(
    run: &ResidentRun,
    column: usize,
    first: usize,
    mut pages: ColumnPages,
) -> Result<(ArrayRef, ColumnPages)> {
    let mut at = Vec::new();
    if let Some(extremes) = pages.extremes.as_mut() {
        for rows in extremes.iter_mut().flatten() {
            at.extend([first + rows.0, first + rows.1]);
            *rows = (at.len() - 2, at.len() - 1);
        }
    }
    let array = run
        .values_at(column, &at)
        .map_err(|e| ParquetError::General(e.to_string()))?;
    Ok((array, pages))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::EncodedPage;
    use crate::pipeline::splice::{append_chunk, check_offsets, SpliceSink, Splices};
    use datafusion::arrow::array::{
        BinaryArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int32Array,
        Int64Array, LargeStringArray, RecordBatch, StringArray, StringViewArray,
        TimestampMicrosecondArray, UInt64Array,
    };
    use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use datafusion::parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
    use datafusion::parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
    use datafusion::parquet::file::writer::SerializedFileWriter;

    /// The pages of `columns` as the kernels build them, made on the host: definition
    /// levels, then the non-null values cut to their Parquet width, or, where a column
    /// keeps its dictionary, the dictionary page and the values' entry numbers as
    /// RLE/bit-packed runs; Snappy by the `snap` crate.
    pub(crate) fn host_pages(
        columns: &[PageColumn<'_>],
        snappy: bool,
    ) -> std::result::Result<Vec<ColumnPages>, String> {
        let page = |body: Vec<u8>| {
            let data = match snappy {
                true => snap::raw::Encoder::new().compress_vec(&body).unwrap(),
                false => body.clone(),
            };
            EncodedPage {
                data: Bytes::from(data),
                uncompressed_bytes: body.len(),
            }
        };
        Ok(columns
            .iter()
            .map(|column| {
                let tried = column
                    .dictionary_limit
                    .map(|limit| host_dictionary(column, limit));
                match tried {
                    Some(HostDictionary::Kept { entries, numbers }) => {
                        let bits = 64 - (entries.len() as u64 - 1).leading_zeros();
                        ColumnPages {
                            extremes: column.statistics.map(|order| host_extremes(column, order)),
                            dictionary: Some((page(entries.concat()), entries.len())),
                            gave_up_dictionary: false,
                            pages: column
                                .pages
                                .iter()
                                .map(|cut| {
                                    let mut body = host_levels(column, cut);
                                    let page_numbers: Vec<u32> = (cut.first_row
                                        ..cut.first_row + cut.rows)
                                        .filter_map(|row| numbers[row])
                                        .collect();
                                    body.extend(host_hybrid(&page_numbers, bits));
                                    page(body)
                                })
                                .collect(),
                        }
                    }
                    tried => ColumnPages {
                        extremes: column.statistics.map(|order| host_extremes(column, order)),
                        dictionary: None,
                        gave_up_dictionary: matches!(tried, Some(HostDictionary::GaveUp)),
                        pages: column
                            .pages
                            .iter()
                            .map(|cut| page(host_body(column, cut)))
                            .collect(),
                    },
                }
            })
            .collect())
    }

    /// What came of a column's dictionary, built as the device builds it.
    enum HostDictionary {
        /// The distinct values in order of first appearance, and each row's entry number
        /// (`None` for a null).
        Kept {
            entries: Vec<Vec<u8>>,
            numbers: Vec<Option<u32>>,
        },
        GaveUp,
        NoValues,
    }

    fn host_dictionary(column: &PageColumn<'_>, limit: usize) -> HostDictionary {
        let mut index = std::collections::HashMap::<&[u8], u32>::new();
        let mut entries = Vec::new();
        let mut numbers = Vec::with_capacity(column.rows());
        let mut bytes = 0;
        for row in 0..column.rows() {
            if !holds_value(column, row) {
                numbers.push(None);
                continue;
            }
            let value = value_of(column, row);
            let number = *index.entry(value).or_insert_with(|| {
                entries.push(plain_value(column, row));
                bytes += entries[entries.len() - 1].len();
                entries.len() as u32 - 1
            });
            if bytes > limit.saturating_sub(1) {
                return HostDictionary::GaveUp;
            }
            numbers.push(Some(number));
        }
        match entries.is_empty() {
            true => HostDictionary::NoValues,
            false => HostDictionary::Kept { entries, numbers },
        }
    }

    /// Entry numbers of `bits` bits as `dict_page_values` writes them: the bit width, then
    /// each chunk of [`DICT_CHUNK_VALUES`](crate::cuda::DICT_CHUNK_VALUES) numbers in
    /// groups of 8 (the last one short), runs of groups each holding one number (the same)
    /// as RLE runs, runs of other groups bit-packed.
    fn host_hybrid(numbers: &[u32], bits: u32) -> Vec<u8> {
        let mut out = vec![bits as u8];
        for chunk in numbers.chunks(crate::cuda::DICT_CHUNK_VALUES) {
            host_runs(chunk, bits, &mut out);
        }
        out
    }

    /// One chunk's runs.
    fn host_runs(numbers: &[u32], bits: u32, out: &mut Vec<u8>) {
        let groups: Vec<&[u32]> = numbers.chunks(8).collect();
        let constant = |g: &[u32]| g.iter().all(|v| *v == g[0]);
        let mut g = 0;
        while g < groups.len() {
            let mut next = g + 1;
            if constant(groups[g]) {
                let number = groups[g][0];
                let mut count = groups[g].len();
                while next < groups.len() && groups[next][0] == number && constant(groups[next]) {
                    count += groups[next].len();
                    next += 1;
                }
                varint(out, (count as u64) << 1);
                out.extend((0..bits.div_ceil(8)).map(|b| (number >> (8 * b)) as u8));
            } else {
                while next < groups.len() && !constant(groups[next]) {
                    next += 1;
                }
                varint(out, (((next - g) as u64) << 1) | 1);
                for group in &groups[g..next] {
                    let (mut held, mut acc) = (0u32, 0u64);
                    for i in 0..8 {
                        acc |= u64::from(group.get(i).copied().unwrap_or(0)) << held;
                        held += bits;
                        while held >= 8 {
                            out.push(acc as u8);
                            acc >>= 8;
                            held -= 8;
                        }
                    }
                }
            }
            g = next;
        }
    }

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// Row `row`'s Parquet value: the low `out_width` bytes, or a byte array's bytes.
    fn value_of<'a>(column: &PageColumn<'a>, row: usize) -> &'a [u8] {
        match column.offsets {
            Some(offsets) => {
                let base = offsets[0];
                &column.values[(offsets[row] - base) as usize..(offsets[row + 1] - base) as usize]
            }
            None => {
                let (inw, outw) = (column.in_width as usize, column.out_width as usize);
                &column.values[row * inw..row * inw + outw]
            }
        }
    }

    /// Per page of `column`, the rows of its smallest and largest value in `order`, as the
    /// device finds them (nulls and NaNs skipped; of equal values, any).
    fn host_extremes(
        column: &PageColumn<'_>,
        order: StatisticsOrder,
    ) -> Vec<Option<(usize, usize)>> {
        let key = |row: usize| -> Option<KeyOf> {
            let v = value_of(column, row);
            let wide = v.len() == 8;
            Some(match order {
                StatisticsOrder::Bytes => KeyOf::Bytes(v.to_vec()),
                StatisticsOrder::Signed if wide => {
                    KeyOf::Int(i64::from_le_bytes(v.try_into().unwrap()) as i128)
                }
                StatisticsOrder::Signed => {
                    KeyOf::Int(i32::from_le_bytes(v.try_into().unwrap()) as i128)
                }
                StatisticsOrder::Unsigned if wide => {
                    KeyOf::Int(u64::from_le_bytes(v.try_into().unwrap()) as i128)
                }
                StatisticsOrder::Unsigned => {
                    KeyOf::Int(u32::from_le_bytes(v.try_into().unwrap()) as i128)
                }
                StatisticsOrder::Float if wide => {
                    let f = f64::from_le_bytes(v.try_into().unwrap());
                    (!f.is_nan()).then_some(KeyOf::Float(f))?
                }
                StatisticsOrder::Float => {
                    let f = f32::from_le_bytes(v.try_into().unwrap()) as f64;
                    (!f.is_nan()).then_some(KeyOf::Float(f))?
                }
            })
        };
        column
            .pages
            .iter()
            .map(|cut| {
                let mut out: Option<((usize, KeyOf), (usize, KeyOf))> = None;
                for row in cut.first_row..cut.first_row + cut.rows {
                    let Some(k) = holds_value(column, row).then(|| key(row)).flatten() else {
                        continue;
                    };
                    out = Some(match out {
                        None => ((row, k.clone()), (row, k)),
                        Some((lo, hi)) => (
                            if k < lo.1 { (row, k.clone()) } else { lo },
                            if hi.1 < k { (row, k) } else { hi },
                        ),
                    });
                }
                out.map(|(lo, hi)| (lo.0, hi.0))
            })
            .collect()
    }

    /// A value as [`host_extremes`] orders it.
    #[derive(Clone, PartialEq, PartialOrd)]
    enum KeyOf {
        Int(i128),
        Float(f64),
        Bytes(Vec<u8>),
    }

    /// Row `row`'s value `PLAIN`: its bytes, a byte array's after its 4-byte length.
    fn plain_value(column: &PageColumn<'_>, row: usize) -> Vec<u8> {
        let value = value_of(column, row);
        match column.offsets {
            Some(_) => [&(value.len() as u32).to_le_bytes()[..], value].concat(),
            None => value.to_vec(),
        }
    }

    /// Whether row `row` of `column` is not null.
    fn holds_value(column: &PageColumn<'_>, row: usize) -> bool {
        column
            .validity
            .is_none_or(|bits| bits[row / 8] >> (row % 8) & 1 == 1)
    }

    /// One page's definition levels section (empty for a required column).
    fn host_levels(column: &PageColumn<'_>, cut: &PageCut) -> Vec<u8> {
        let valid = |row: usize| holds_value(column, row);
        let mut body = Vec::new();
        if column.nullable {
            let mut levels = Vec::new();
            if cut.values == cut.rows {
                varint(&mut levels, (cut.rows as u64) << 1);
                levels.push(1);
            } else {
                let groups = cut.rows.div_ceil(8);
                varint(&mut levels, ((groups as u64) << 1) | 1);
                for g in 0..groups {
                    let mut byte = 0u8;
                    for b in 0..8 {
                        let i = g * 8 + b;
                        if i < cut.rows && valid(cut.first_row + i) {
                            byte |= 1 << b;
                        }
                    }
                    levels.push(byte);
                }
            }
            body.extend_from_slice(&(levels.len() as u32).to_le_bytes());
            body.extend_from_slice(&levels);
        }
        body
    }

    /// One page's uncompressed body without a dictionary, as `plain_page_bodies` (and
    /// `delta_page_values`) write it.
    pub(crate) fn host_body(column: &PageColumn<'_>, cut: &PageCut) -> Vec<u8> {
        let valid = |row: usize| holds_value(column, row);
        let mut body = host_levels(column, cut);
        let outw = column.out_width as usize;
        let mut values = Vec::new();
        for row in cut.first_row..cut.first_row + cut.rows {
            if valid(row) {
                let bytes = plain_value(column, row);
                let bytes = bytes.as_slice();
                match column.delta {
                    true if outw == 4 => {
                        values.push(i32::from_le_bytes(bytes.try_into().unwrap()) as i64)
                    }
                    true => values.push(i64::from_le_bytes(bytes.try_into().unwrap())),
                    false => body.extend_from_slice(bytes),
                }
            }
        }
        if column.delta {
            body.extend(host_delta(&values, outw == 4));
        }
        body
    }

    /// `values` `DELTA_BINARY_PACKED` as parquet's writer lays them out (blocks of 4
    /// miniblocks of 32 values for INT32, whose deltas wrap in 32 bits, 64 for INT64).
    fn host_delta(values: &[i64], narrow: bool) -> Vec<u8> {
        let zigzag = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
        let per_mini = if narrow { 32 } else { 64 };
        let mut out = Vec::new();
        varint(&mut out, 4 * per_mini as u64);
        varint(&mut out, 4);
        varint(&mut out, values.len() as u64);
        varint(&mut out, zigzag(values.first().copied().unwrap_or(0)));
        let deltas: Vec<i64> = values
            .windows(2)
            .map(|w| match narrow {
                true => (w[1] as i32).wrapping_sub(w[0] as i32) as i64,
                false => w[1].wrapping_sub(w[0]),
            })
            .collect();
        for block in deltas.chunks(4 * per_mini) {
            let least = *block.iter().min().unwrap();
            varint(&mut out, zigzag(least));
            let rel = |d: i64| match narrow {
                true => (d as i32).wrapping_sub(least as i32) as u32 as u64,
                false => d.wrapping_sub(least) as u64,
            };
            let minis: Vec<&[i64]> = block.chunks(per_mini).collect();
            let widths: Vec<u32> = (0..4)
                .map(|i| {
                    minis.get(i).map_or(0, |m| {
                        64 - m.iter().map(|d| rel(*d)).max().unwrap().leading_zeros()
                    })
                })
                .collect();
            out.extend(widths.iter().map(|w| *w as u8));
            for (mini, width) in minis.iter().zip(&widths) {
                let mut bits = vec![0u8; per_mini * *width as usize / 8];
                for (j, d) in mini.iter().enumerate() {
                    let value = rel(*d);
                    for b in 0..*width as usize {
                        if value >> b & 1 == 1 {
                            let at = j * *width as usize + b;
                            bits[at / 8] |= 1 << (at % 8);
                        }
                    }
                }
                out.extend(bits);
            }
        }
        out
    }

    /// Columns of every type the device takes, with nulls (and a column of nulls only),
    /// NaNs, signed zeros, unsigned values past `i64::MAX`, and pages of one null only.
    fn table(rows: usize) -> RecordBatch {
        let nth = |i: usize, k: usize| i.is_multiple_of(k);
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "i32",
                Arc::new(Int32Array::from_iter(
                    (0..rows).map(|i| (!nth(i, 7)).then_some((i as i32).wrapping_mul(-7919))),
                )),
            ),
            (
                "i64",
                Arc::new(Int64Array::from_iter_values(
                    (0..rows).map(|i| i as i64 * 3 - 1000),
                )),
            ),
            (
                "u64",
                // Both sides of 2^63 in every page: signed order would pick other extremes.
                Arc::new(UInt64Array::from_iter((0..rows).map(|i| {
                    (!nth(i, 5)).then_some(match i % 2 {
                        0 => u64::MAX - i as u64 * 977,
                        _ => i as u64 * 7_919,
                    })
                }))),
            ),
            (
                "f32",
                Arc::new(Float32Array::from_iter((0..rows).map(|i| {
                    (!nth(i, 3)).then_some(match i % 11 {
                        1 => f32::NAN,
                        2 => -0.0,
                        4 => 0.0,
                        _ => i as f32 - 50.5,
                    })
                }))),
            ),
            (
                "f64",
                Arc::new(Float64Array::from_iter_values((0..rows).map(|i| {
                    if i % 13 == 0 {
                        f64::NAN
                    } else {
                        (i as f64).sin()
                    }
                }))),
            ),
            (
                "nan_only",
                Arc::new(Float64Array::from_iter_values((0..rows).map(|_| f64::NAN))),
            ),
            (
                "nulls",
                Arc::new(Int64Array::from_iter((0..rows).map(|_| None::<i64>))),
            ),
            (
                "d9",
                Arc::new(
                    Decimal128Array::from_iter(
                        (0..rows).map(|i| (!nth(i, 4)).then_some(i as i128 * 101 - 5000)),
                    )
                    .with_precision_and_scale(9, 2)
                    .unwrap(),
                ),
            ),
            (
                "d18",
                Arc::new(
                    Decimal128Array::from_iter_values(
                        (0..rows).map(|i| i as i128 * 1_000_000_007 - 7),
                    )
                    .with_precision_and_scale(18, 3)
                    .unwrap(),
                ),
            ),
            (
                "date",
                Arc::new(Date32Array::from_iter(
                    (0..rows).map(|i| (!nth(i, 9)).then_some(i as i32 - 20_000)),
                )),
            ),
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from_iter_values(
                    (0..rows).map(|i| i as i64 * 1_000_003),
                )),
            ),
            ("s", Arc::new(StringArray::from(strings(rows)))),
            ("sv", Arc::new(StringViewArray::from(strings(rows)))),
            ("ls", Arc::new(LargeStringArray::from(strings(rows)))),
            (
                "b",
                Arc::new(BinaryArray::from_iter((0..rows).map(|i| {
                    (!nth(i, 6)).then(|| {
                        // Past 64 bytes, some all 0xff there (no shorter upper bound).
                        let len = [0, 3, 70, 90][i % 4];
                        let fill = if i % 8 == 2 { 0xff } else { (i % 251) as u8 };
                        let mut v = vec![fill; len];
                        v.extend((i as u32).to_be_bytes());
                        v
                    })
                }))),
            ),
            (
                "snulls",
                Arc::new(StringArray::from_iter((0..rows).map(|_| None::<&str>))),
            ),
        ];
        let fields: Vec<Field> = columns
            .iter()
            .map(|(name, array)| {
                Field::new(
                    *name,
                    array.data_type().clone(),
                    *name != "i64" && *name != "d18",
                )
            })
            .collect();
        let schema: SchemaRef = Arc::new(Schema::new(fields));
        RecordBatch::try_new(schema, columns.into_iter().map(|(_, a)| a).collect()).unwrap()
    }

    /// Strings with nulls, empty ones, and some longer than 64 bytes whose 64th byte falls
    /// inside a character of 2, 3 or 4 bytes.
    fn strings(rows: usize) -> Vec<Option<String>> {
        (0..rows)
            .map(|i| {
                (i % 5 != 1).then(|| match i % 7 {
                    0 => String::new(),
                    1 => format!("{}é{i}", "x".repeat(63)),
                    2 => format!("{}€{i}", "y".repeat(62)),
                    3 => format!("{}😀{i}", "z".repeat(61)),
                    4 => format!("{}{}", "\u{10ffff}".repeat(17), i),
                    _ => format!("row {}", i * 7919 % 10_007),
                })
            })
            .collect()
    }

    /// Pages of 2048 rows: parquet's writer closes a page after the write batch that
    /// reaches the limit, which for a multiple of its batch is the limit itself.
    fn properties(compression: Compression) -> WriterProperties {
        properties_with(compression, false, None)
    }

    /// [`properties`], with `deltas` the integer columns `DELTA_BINARY_PACKED`, and
    /// dictionaries of at most `dictionary` bytes tried first where set.
    fn properties_with(
        compression: Compression,
        deltas: bool,
        dictionary: Option<usize>,
    ) -> WriterProperties {
        let integers = ["i32", "i64", "u64", "nulls", "d9", "d18", "date", "ts"];
        let mut builder = WriterProperties::builder();
        if deltas {
            for name in integers {
                builder = builder.set_column_encoding(
                    datafusion::parquet::schema::types::ColumnPath::from(name),
                    Encoding::DELTA_BINARY_PACKED,
                );
            }
        }
        builder
            .set_dictionary_enabled(dictionary.is_some())
            .set_dictionary_page_size_limit(dictionary.unwrap_or(1 << 20))
            .set_compression(compression)
            .set_data_page_row_count_limit(2048)
            .set_max_row_group_row_count(Some(1 << 20))
            .build()
    }

    /// The leaves of `batch`'s columns, each one the device takes under `properties`.
    fn leaves(batch: &RecordBatch, properties: &WriterProperties) -> Vec<DeviceLeaf> {
        let columns = ArrowSchemaConverter::new()
            .convert(&batch.schema())
            .unwrap();
        batch
            .columns()
            .iter()
            .zip(batch.schema().fields())
            .enumerate()
            .map(|(i, (array, field))| {
                let descr = columns.column(i);
                let layout =
                    device_layout(field.data_type(), &descr).expect("a type the device takes");
                assert!(properties_allow(properties, &descr));
                DeviceLeaf {
                    array: Arc::clone(array),
                    descr,
                    layout,
                }
            })
            .collect()
    }

    /// The file parquet's own writer makes of `batch`, and the one whose every chunk's
    /// pages came from `pages`.
    fn both_files(
        batch: &RecordBatch,
        properties: &WriterProperties,
        pages: impl Fn(&[PageColumn<'_>], bool) -> std::result::Result<Vec<ColumnPages>, String>,
    ) -> (Vec<u8>, Vec<u8>) {
        let mut cpu = Vec::new();
        let mut writer =
            ArrowWriter::try_new(&mut cpu, batch.schema(), Some(properties.clone())).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        let columns = ArrowSchemaConverter::new()
            .convert(&batch.schema())
            .unwrap();
        let chunks = encode_with(&leaves(batch, properties), properties, pages).unwrap();
        // Appended as the appender does: each chunk written whole by the file's sink.
        let splices = Arc::new(Splices::default());
        let mut file = SerializedFileWriter::new(
            SpliceSink::new(Vec::new(), Arc::clone(&splices)),
            columns.root_schema_ptr(),
            Arc::new(properties.clone()),
        )
        .unwrap();
        let mut offset = file.bytes_written() as u64;
        let mut announced = Vec::new();
        let mut group = file.next_row_group().unwrap();
        for (column, chunk) in chunks.into_iter().enumerate() {
            announced.push((column, offset));
            offset = append_chunk(&mut group, &splices, offset, &chunk.bytes, chunk.close).unwrap();
        }
        let row_group = group.close().unwrap();
        check_offsets(&row_group, &announced).unwrap();
        // The Arrow schema, as ArrowWriter stores it, so the reader gets the same types.
        let cpu_meta = ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(cpu.clone()))
            .unwrap();
        for kv in cpu_meta
            .file_metadata()
            .key_value_metadata()
            .into_iter()
            .flatten()
        {
            file.append_key_value_metadata(kv.clone());
        }
        let device = file.into_inner().unwrap().into_inner().unwrap();
        (cpu, device)
    }

    fn metadata(bytes: &[u8]) -> ParquetMetaData {
        ParquetMetaDataReader::new()
            .with_page_index_policy(datafusion::parquet::file::metadata::PageIndexPolicy::Required)
            .parse_and_finish(&Bytes::from(bytes.to_vec()))
            .unwrap()
    }

    fn read(bytes: &[u8]) -> RecordBatch {
        let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(bytes.to_vec()))
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<RecordBatch> = reader.collect::<std::result::Result<_, _>>().unwrap();
        datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
    }

    /// Files from pages built as the kernels build them read back as parquet's own, with
    /// the same statistics, page index and page layout.
    pub(crate) fn check_against_parquet(
        pages: impl Fn(&[PageColumn<'_>], bool) -> std::result::Result<Vec<ColumnPages>, String> + Copy,
    ) {
        let batch = table(10_007);
        for (compression, deltas, dictionary) in [
            (Compression::UNCOMPRESSED, false, None),
            (Compression::SNAPPY, false, None),
            (Compression::UNCOMPRESSED, true, None),
            (Compression::SNAPPY, true, None),
            (Compression::UNCOMPRESSED, true, Some(1 << 20)),
            (Compression::SNAPPY, false, Some(1 << 20)),
        ] {
            let properties = properties_with(compression, deltas, dictionary);
            let (cpu, device) = both_files(&batch, &properties, pages);
            assert_eq!(read(&device), batch, "{compression}: values");
            assert_eq!(read(&cpu), batch);
            let (a, b) = (metadata(&cpu), metadata(&device));
            let (ga, gb) = (a.row_group(0), b.row_group(0));
            for c in 0..ga.num_columns() {
                let (ca, cb) = (ga.column(c), gb.column(c));
                let name = ca.column_path().string();
                assert_eq!(
                    ca.statistics(),
                    cb.statistics(),
                    "{compression} {name}: statistics"
                );
                assert_eq!(ca.num_values(), cb.num_values(), "{name}");
                assert_eq!(
                    ca.unencoded_byte_array_data_bytes(),
                    cb.unencoded_byte_array_data_bytes(),
                    "{name}: bytes of its values"
                );
                assert_eq!(ca.compression(), cb.compression(), "{name}");
                // Every column with a value keeps its dictionary (10 007 rows of at most
                // 100 bytes: under 1 MiB).
                let has_dictionary = dictionary.is_some() && name != "nulls" && name != "snulls";
                assert_eq!(
                    cb.dictionary_page_offset().is_some(),
                    has_dictionary,
                    "{name}: a dictionary page"
                );
                assert_eq!(
                    cb.encodings().any(|e| e == Encoding::RLE_DICTIONARY),
                    has_dictionary,
                    "{name}: {:?}",
                    cb.encodings().collect::<Vec<_>>()
                );
                assert_eq!(
                    ca.definition_level_histogram(),
                    cb.definition_level_histogram(),
                    "{name}"
                );
            }
            let (ia, ib) = (a.column_index().unwrap(), b.column_index().unwrap());
            assert_eq!(ia, ib, "{compression}: column index");
            let (oa, ob) = (a.offset_index().unwrap(), b.offset_index().unwrap());
            for (x, y) in oa[0].iter().zip(&ob[0]) {
                let rows = |o: &datafusion::parquet::file::page_index::offset_index::OffsetIndexMetaData| {
                    o.page_locations().iter().map(|p| p.first_row_index).collect::<Vec<_>>()
                };
                assert_eq!(rows(x), rows(y), "{compression}: page first rows");
                assert_eq!(
                    x.unencoded_byte_array_data_bytes(),
                    y.unencoded_byte_array_data_bytes(),
                    "{compression}: bytes of each page's values"
                );
            }
        }
    }

    #[test]
    fn chunks_from_kernel_shaped_pages_read_back_as_parquets_own() {
        check_against_parquet(host_pages);
        // Without the rows of each page's extremes, the host scans each page for them.
        check_against_parquet(|columns, snappy| {
            let mut pages = host_pages(columns, snappy)?;
            pages.iter_mut().for_each(|column| column.extremes = None);
            Ok(pages)
        });
    }

    #[test]
    fn chunks_past_their_dictionary_limit_give_it_up_and_say_so() {
        let batch = table(10_007);
        // 4 KiB: 511 values of 8 bytes, 1023 of 4.
        let properties = properties_with(Compression::SNAPPY, true, Some(4096));
        let chunks = encode_with(&leaves(&batch, &properties), &properties, host_pages).unwrap();
        for (chunk, field) in chunks.iter().zip(batch.schema().fields()) {
            let expected = match field.name().as_str() {
                "nan_only" => Some(false),
                "nulls" | "snulls" => None,
                _ => Some(true),
            };
            assert_eq!(chunk.gave_up_dictionary, expected, "{}", field.name());
            assert_eq!(
                chunk.close.metadata.dictionary_page_offset().is_some(),
                expected == Some(false),
                "{}",
                field.name()
            );
        }
        let (cpu, device) = both_files(&batch, &properties, host_pages);
        assert_eq!(read(&device), batch);
        let (a, b) = (metadata(&cpu), metadata(&device));
        for c in 0..batch.num_columns() {
            let (x, y) = (a.row_group(0).column(c), b.row_group(0).column(c));
            assert_eq!(x.statistics(), y.statistics(), "column {c}");
        }
    }

    #[test]
    fn entry_numbers_run_where_groups_repeat_and_pack_elsewhere() {
        // Two groups of 7, one mixed group, 17 of 3 (two whole groups and one number
        // that ends the page): RLE, bit-packed, RLE.
        let mut numbers = vec![7u32; 16];
        numbers.extend([0, 1, 2, 3, 4, 5, 6, 7]);
        numbers.extend([3u32; 17]);
        let section = host_hybrid(&numbers, 3);
        let mut expected = vec![3u8, 32, 7, 3];
        // 0..=7 in 3 bits each, least significant bit first.
        expected.extend([0b1000_1000, 0b1100_0110, 0b1111_1010]);
        expected.extend([34, 3]);
        assert_eq!(section, expected);
        // One entry: no bits, one run.
        assert_eq!(host_hybrid(&[0; 20], 0), vec![0, 40]);
        // Runs end where a thread's chunk of 512 numbers does.
        assert_eq!(
            host_hybrid(&[5; 1000], 3),
            vec![3, 0x80, 0x08, 5, 0xd0, 0x07, 5]
        );
    }

    #[test]
    fn pages_hold_whole_bytes_of_validity_and_respect_both_limits() {
        let properties = WriterProperties::builder()
            .set_data_page_row_count_limit(1000)
            .set_data_page_size_limit(4096)
            .build();
        let columns = ArrowSchemaConverter::new()
            .convert(&Schema::new(vec![Field::new("x", DataType::Int64, true)]))
            .unwrap();
        let descr = columns.column(0);
        let layout = device_layout(&DataType::Int64, &descr).unwrap();
        let nulls = NullBuffer::from_iter((0..1234).map(|i| i % 3 != 0));
        let cuts = cut_pages(1234, Some(&nulls), layout, &properties, &descr);
        // 4096 bytes of 8-byte values (512 rows) and 1000 rows, each reached after the
        // first write batch of 1024 rows.
        assert_eq!(
            cuts.iter().map(|c| c.rows).collect::<Vec<_>>(),
            vec![1024, 210]
        );
        let small_batches = WriterProperties::builder()
            .set_write_batch_size(100)
            .set_data_page_size_limit(4096)
            .build();
        let cuts = cut_pages(1234, Some(&nulls), layout, &small_batches, &descr);
        assert_eq!(
            cuts.iter().map(|c| c.rows).collect::<Vec<_>>(),
            vec![600, 600, 34]
        );
        assert!(cuts.iter().all(|c| c.first_row % 8 == 0));
        assert_eq!(
            cuts.iter().map(|c| c.rows - c.values).sum::<usize>(),
            nulls.null_count()
        );
    }

    #[test]
    fn the_device_takes_what_it_writes_as_low_bytes_only() {
        let columns = ArrowSchemaConverter::new()
            .convert(&Schema::new(vec![
                Field::new("a", DataType::Int8, true),
                Field::new("b", DataType::Decimal128(38, 2), true),
                Field::new("c", DataType::Timestamp(TimeUnit::Second, None), true),
                Field::new("d", DataType::Decimal128(12, 2), true),
            ]))
            .unwrap();
        let layout = |i: usize, t: DataType| device_layout(&t, &columns.column(i));
        assert!(layout(0, DataType::Int8).is_none());
        assert!(layout(1, DataType::Decimal128(38, 2)).is_none());
        assert!(layout(2, DataType::Timestamp(TimeUnit::Second, None)).is_none());
        assert_eq!(
            layout(3, DataType::Decimal128(12, 2)).map(|l| (l.in_width, l.out_width)),
            Some((16, 8))
        );
        // A dictionary the device tries itself; a bloom filter it does not build.
        let dictionary = WriterProperties::builder().build();
        assert!(properties_allow(&dictionary, &columns.column(3)));
        assert_eq!(
            dictionary_limit(&dictionary, &columns.column(3)),
            Some(1 << 20)
        );
        let plain = properties(Compression::SNAPPY);
        assert_eq!(dictionary_limit(&plain, &columns.column(3)), None);
        let bloom = WriterProperties::builder()
            .set_bloom_filter_enabled(true)
            .build();
        assert!(!properties_allow(&bloom, &columns.column(3)));
        let zstd = properties(Compression::ZSTD(Default::default()));
        assert!(!properties_allow(&zstd, &columns.column(3)));
        assert!(properties_allow(
            &properties(Compression::SNAPPY),
            &columns.column(3)
        ));
    }
}
