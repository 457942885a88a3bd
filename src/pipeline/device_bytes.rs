//! Byte-array columns (`Utf8`, `Binary`, their large and view forms) whose pages the device
//! builds: their values as one run of bytes with 32-bit offsets, how parquet's writer cuts
//! them into pages (by the bytes of their `PLAIN` values), the smallest and largest value of
//! a page, and the truncation parquet's writer applies to those in statistics and the
//! column index.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::parquet::basic::{ConvertedType, LogicalType};
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::parquet::schema::types::ColumnDescPtr;

use crate::cuda::PageCut;

/// Whether the device takes `data_type`'s values as byte arrays.
pub(super) fn is_byte_array(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
    )
}

/// `array` as one run of bytes with 32-bit offsets (`Utf8` for strings, `Binary` for
/// bytes; the others cast, which copies), or why not (more than 2 GiB of values).
pub(super) fn contiguous(array: &ArrayRef) -> Result<ArrayRef, String> {
    let to = match array.data_type() {
        DataType::Utf8 | DataType::Binary => return Ok(Arc::clone(array)),
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        other => return Err(format!("{other} is not a byte array")),
    };
    cast(array, &to).map_err(|e| format!("byte arrays past 32-bit offsets: {e}"))
}

/// The offsets (one more than the rows, Arrow's first one kept) and the bytes from the
/// first offset on of a `Utf8` or `Binary` array.
pub(super) fn offsets_and_bytes(array: &dyn Array) -> (&[u32], &[u8]) {
    let (offsets, values) = match array.data_type() {
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            (a.offsets(), a.values())
        }
        DataType::Binary => {
            let a = array.as_binary::<i32>();
            (a.offsets(), a.values())
        }
        other => panic!("{other} is not a contiguous byte array"),
    };
    let offsets: &[u32] = offsets.inner().inner().typed_data::<u32>();
    let (first, last) = (offsets[0] as usize, offsets[offsets.len() - 1] as usize);
    (offsets, &values.as_slice()[first..last])
}

/// The pages of a byte-array column (`offsets`, `nulls` its validity) where parquet's
/// writer would close them: after the first write batch at which the page's `PLAIN`
/// values (a 4-byte length and the bytes each) reach the properties' page size, or its
/// rows their row count; a batch whose values alone pass the page size goes in parts
/// that each fit it (parquet's writer splits such a batch too, not on the same rows);
/// always a multiple of 8 rows but the last.
pub(super) fn cut_byte_pages(
    offsets: &[u32],
    nulls: Option<&NullBuffer>,
    properties: &WriterProperties,
    descr: &ColumnDescPtr,
) -> Vec<PageCut> {
    let rows = offsets.len() - 1;
    let batch = properties.write_batch_size().max(1).div_ceil(8) * 8;
    let by_rows = properties.data_page_row_count_limit().max(1);
    let by_bytes = properties.column_data_page_size_limit(descr.path()).max(1);
    // Rows `first_row .. first_row + rows` as a stretch of a page, and the bytes of their
    // values `PLAIN`.
    let stretch = |first_row: usize, rows: usize| {
        let null_rows = nulls.map_or(0, |n| n.slice(first_row, rows).null_count());
        let cut = PageCut {
            first_row,
            rows,
            values: rows - null_rows,
        };
        (cut, 4 * cut.values + page_value_bytes(offsets, nulls, &cut))
    };
    let mut cuts = Vec::new();
    let mut first_row = 0;
    while first_row < rows {
        let (mut end, mut bytes, mut values) = (first_row, 0usize, 0usize);
        while end < rows {
            let len = batch.min(rows - end);
            let (mut part, mut part_bytes) = stretch(end, len);
            if part_bytes > by_bytes && len > 8 {
                // The most whole groups of 8 rows that fit the page size, at least one.
                (part, part_bytes) = stretch(end, 8);
                while part.rows < len {
                    let (more, more_bytes) = stretch(end + part.rows, 8.min(len - part.rows));
                    if part_bytes + more_bytes > by_bytes {
                        break;
                    }
                    part.rows += more.rows;
                    part.values += more.values;
                    part_bytes += more_bytes;
                }
            }
            bytes += part_bytes;
            values += part.values;
            end += part.rows;
            if bytes >= by_bytes || end - first_row >= by_rows {
                break;
            }
        }
        cuts.push(PageCut {
            first_row,
            rows: end - first_row,
            values,
        });
        first_row = end;
    }
    cuts
}

/// Bytes of the non-null values of page `cut`.
pub(super) fn page_value_bytes(
    offsets: &[u32],
    nulls: Option<&NullBuffer>,
    cut: &PageCut,
) -> usize {
    let (first, end) = (cut.first_row, cut.first_row + cut.rows);
    let all = (offsets[end] - offsets[first]) as usize;
    let null_bytes: usize = match nulls {
        Some(nulls) if cut.values < cut.rows => (first..end)
            .filter(|&row| nulls.is_null(row))
            .map(|row| (offsets[row + 1] - offsets[row]) as usize)
            .sum(),
        _ => 0,
    };
    all - null_bytes
}

/// The smallest and largest of the non-null values of page `cut` (bytes compared
/// unsigned, shorter first where one is a prefix of the other), or `None` if every row is
/// null.
pub(super) fn page_min_max(
    offsets: &[u32],
    bytes: &[u8],
    nulls: Option<&NullBuffer>,
    cut: &PageCut,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let base = offsets[0];
    let value =
        |row: usize| &bytes[(offsets[row] - base) as usize..(offsets[row + 1] - base) as usize];
    let mut out: Option<(&[u8], &[u8])> = None;
    for row in cut.first_row..cut.first_row + cut.rows {
        if nulls.is_some_and(|n| n.is_null(row)) {
            continue;
        }
        let v = value(row);
        out = Some(match out {
            None => (v, v),
            Some((lo, hi)) => (lo.min(v), hi.max(v)),
        });
    }
    out.map(|(lo, hi)| (lo.to_vec(), hi.to_vec()))
}

/// Whether parquet's writer treats `descr`'s values as UTF-8 when it truncates them.
pub(super) fn is_utf8(descr: &ColumnDescPtr) -> bool {
    descr.logical_type_ref() == Some(&LogicalType::String)
        || descr.converted_type() == ConvertedType::UTF8
}

/// A minimum cut to at most `length` bytes (on a character boundary, for UTF-8), and
/// whether it was cut: parquet's writer's rule.
pub(super) fn truncate_min(data: &[u8], length: Option<usize>, utf8: bool) -> (Vec<u8>, bool) {
    let cut = length
        .filter(|l| data.len() > *l)
        .and_then(|l| match std::str::from_utf8(data) {
            Ok(text) if utf8 => (1..=l)
                .rfind(|x| text.is_char_boundary(*x))
                .map(|at| data[..at].to_vec()),
            _ => Some(data[..l].to_vec()),
        });
    match cut {
        Some(cut) => (cut, true),
        None => (data.to_vec(), false),
    }
}

/// A maximum cut to at most `length` bytes and its last byte (or, for UTF-8, character)
/// raised so that it stays an upper bound, and whether it was cut: parquet's writer's
/// rule (kept whole where no such bound exists).
pub(super) fn truncate_max(data: &[u8], length: Option<usize>, utf8: bool) -> (Vec<u8>, bool) {
    let cut = length
        .filter(|l| data.len() > *l)
        .and_then(|l| match std::str::from_utf8(data) {
            Ok(text) if utf8 => (l.saturating_sub(3)..=l)
                .rfind(|x| text.is_char_boundary(*x))
                .and_then(|at| text.get(..at))
                .and_then(increment_utf8),
            _ => increment(data[..l].to_vec()),
        });
    match cut {
        Some(cut) => (cut, true),
        None => (data.to_vec(), false),
    }
}

/// `text` with its last character that can be raised without growing raised by one (the
/// characters after it dropped), or `None` if none can.
fn increment_utf8(text: &str) -> Option<Vec<u8>> {
    for (at, c) in text.char_indices().rev() {
        if let Some(next) = char::from_u32(c as u32 + 1) {
            if next.len_utf8() == c.len_utf8() {
                let mut out = text.as_bytes()[..at + c.len_utf8()].to_vec();
                next.encode_utf8(&mut out[at..]);
                return Some(out);
            }
        }
    }
    None
}

/// `data` plus one as a big-endian number of its length, or `None` where every byte is
/// 0xff.
fn increment(mut data: Vec<u8>) -> Option<Vec<u8>> {
    for byte in data.iter_mut().rev() {
        let (raised, carried) = byte.overflowing_add(1);
        *byte = raised;
        if !carried {
            return Some(data);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{LargeStringArray, StringArray, StringViewArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::parquet::arrow::ArrowSchemaConverter;

    #[test]
    fn every_form_of_strings_becomes_one_run_of_bytes() {
        let values = [
            Some("a"),
            None,
            Some(""),
            Some("a much longer string than twelve"),
        ];
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(values.to_vec())),
            Arc::new(LargeStringArray::from(values.to_vec())),
            Arc::new(StringViewArray::from(values.to_vec())),
        ];
        for array in arrays {
            // A slice: offsets keep Arrow's first one; the bytes start there.
            let sliced = array.slice(1, 3);
            let run = contiguous(&sliced).unwrap();
            let (offsets, bytes) = offsets_and_bytes(run.as_ref());
            assert_eq!(offsets.len(), 4);
            assert_eq!(bytes.len(), (offsets[3] - offsets[0]) as usize);
            assert_eq!(
                &bytes[(offsets[2] - offsets[0]) as usize..],
                values[3].unwrap().as_bytes()
            );
            assert!(run.is_null(0));
        }
    }

    #[test]
    fn pages_close_after_the_batch_that_reaches_a_limit() {
        let descr = ArrowSchemaConverter::new()
            .convert(&Schema::new(vec![Field::new("s", DataType::Utf8, true)]))
            .unwrap()
            .column(0);
        // 1000 values of 12 bytes, every third null (its bytes not counted).
        let values: Vec<Option<String>> = (0..1000)
            .map(|i| (i % 3 != 0).then(|| format!("{i:012}")))
            .collect();
        let array = StringArray::from(values);
        let offsets: &[u32] = array.offsets().inner().inner().typed_data();
        let nulls = array.nulls();
        let properties = WriterProperties::builder()
            .set_write_batch_size(100)
            .set_data_page_size_limit(2000)
            .set_data_page_row_count_limit(250)
            .build();
        let cuts = cut_byte_pages(offsets, nulls, &properties, &descr);
        // 104 rows a batch (a multiple of 8), ~69 values of 16 bytes: 2000 bytes after 2
        // batches; 250 rows after 3 come later.
        assert_eq!(cuts[0].rows, 208);
        assert!(cuts.iter().all(|c| c.first_row % 8 == 0));
        assert_eq!(cuts.iter().map(|c| c.rows).sum::<usize>(), 1000);
        assert_eq!(
            cuts.iter().map(|c| c.rows - c.values).sum::<usize>(),
            array.null_count()
        );
        let (lo, hi) = page_min_max(offsets, offsets_and_bytes(&array).1, nulls, &cuts[0]).unwrap();
        assert_eq!(
            (lo.as_slice(), hi.as_slice()),
            (&b"000000000001"[..], &b"000000000206"[..])
        );
    }

    #[test]
    fn batches_of_values_past_the_page_size_go_in_parts() {
        let descr = ArrowSchemaConverter::new()
            .convert(&Schema::new(vec![Field::new("b", DataType::Utf8, false)]))
            .unwrap()
            .column(0);
        // 100 values of 10 000 bytes, pages of 64 KiB: 6 values (60 024 bytes) fit, but
        // parts hold whole groups of 8 rows; at least one group.
        let array = StringArray::from_iter_values((0..100).map(|i| format!("{i:010000}")));
        let offsets: &[u32] = array.offsets().inner().inner().typed_data();
        let properties = WriterProperties::builder()
            .set_data_page_size_limit(64 << 10)
            .build();
        let cuts = cut_byte_pages(offsets, None, &properties, &descr);
        assert!(
            cuts.iter().all(|c| c.rows == 8 || c.first_row == 96),
            "{cuts:?}"
        );
        assert_eq!(cuts.iter().map(|c| c.rows).sum::<usize>(), 100);
        // Values of 1 000 bytes: parts of 64 rows (64 256 bytes, whole groups of 8); the
        // first leaves the page under 64 KiB, the second closes it (parquet's writer: 65
        // and 65).
        let array = StringArray::from_iter_values((0..1000).map(|i| format!("{i:01000}")));
        let offsets: &[u32] = array.offsets().inner().inner().typed_data();
        let cuts = cut_byte_pages(offsets, None, &properties, &descr);
        assert_eq!(cuts[0].rows, 128);
        assert!(cuts.iter().all(|c| c.first_row % 8 == 0));
    }

    #[test]
    fn truncation_follows_parquets_rule() {
        assert_eq!(
            truncate_min(b"abcdef", Some(3), false),
            (b"abc".to_vec(), true)
        );
        assert_eq!(
            truncate_min(b"abc", Some(3), false),
            (b"abc".to_vec(), false)
        );
        assert_eq!(
            truncate_max(b"abcdef", Some(3), false),
            (b"abd".to_vec(), true)
        );
        assert_eq!(
            truncate_max(b"ab\xff\xffz", Some(4), false),
            (b"ac\0\0".to_vec(), true)
        );
        // Every byte 0xff: no bound shorter, kept whole.
        assert_eq!(
            truncate_max(b"\xff\xff\xff", Some(2), false),
            (b"\xff\xff\xff".to_vec(), false)
        );
        // UTF-8: "é" is 2 bytes; a cut never splits it.
        let text = "aéé".as_bytes();
        assert_eq!(truncate_min(text, Some(2), true), (b"a".to_vec(), true));
        assert_eq!(
            truncate_max(text, Some(4), true),
            ("aê".as_bytes().to_vec(), true)
        );
        assert_eq!(truncate_max(text, None, true), (text.to_vec(), false));
    }
}
