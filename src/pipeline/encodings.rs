//! How the output's columns are encoded where parquet's defaults leave work or bytes on the
//! table.
//!
//! Parquet's writer starts every column chunk with a dictionary and gives it up (falls
//! back) once the dictionary outgrows its page limit (1 MiB), writing the rest of the chunk
//! in the column's fallback encoding. Two choices are made here:
//!
//! - **Integers fall back to `DELTA_BINARY_PACKED`** instead of `PLAIN` (every INT32 and
//!   INT64 leaf: integers, dates, times, timestamps, decimals of up to 18 digits). Sorted
//!   output puts close values side by side, and even random ones seldom fill 64 bits: the
//!   deltas pack into fewer bits, so there are fewer bytes to compress and to write. On
//!   one thread (`examples/04_parquet_encode_cost.rs`), sorted SF1 `lineitem` shrank from
//!   68.7 to 58.0 MB with snappy and encoded 7 % faster; three random 8-byte columns sorted
//!   by the first shrank by 17 % and encoded 30 % faster.
//! - **A dictionary that was given up is not tried again at once.** A column of mostly
//!   distinct values hashes every value it puts in the dictionary before the writer gives
//!   it up, in every row group (up to half of the encoding time of such columns). Once a
//!   column's chunk is known to have fallen back, the row groups started after that
//!   encode it without a dictionary, except every [`PROBE_EVERY`]th, which tries again in
//!   case the values changed; a probe that keeps its dictionary turns dictionaries back on.
//!
//! Both change only encodings, never values. Which row groups go without a dictionary
//! depends on when the appender learnt of the fallback, so it may differ between runs.
//! `DELTA_BINARY_PACKED` has been in the format since version 2.0 of its specification;
//! pyarrow, DuckDB, DataFusion and Spark from 3.3 read it (Spark's vectorized reader
//! before 3.3 did not).

use datafusion::parquet::basic::{Encoding, PageType, Type as PhysicalType};
use datafusion::parquet::file::metadata::ColumnChunkMetaData;
use datafusion::parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use datafusion::parquet::schema::types::{ColumnPath, SchemaDescriptor};
use std::sync::atomic::{AtomicBool, Ordering};

/// A column that gave its dictionary up tries one again in every this many row groups.
pub(super) const PROBE_EVERY: usize = 8;

/// `builder` with `DELTA_BINARY_PACKED` as the fallback encoding of every INT32 and INT64
/// leaf of `columns` (public for tools that measure the writer's settings).
pub fn with_integer_deltas(
    mut builder: WriterPropertiesBuilder,
    columns: &SchemaDescriptor,
) -> WriterPropertiesBuilder {
    for column in columns.columns() {
        if matches!(
            column.physical_type(),
            PhysicalType::INT32 | PhysicalType::INT64
        ) {
            builder =
                builder.set_column_encoding(column.path().clone(), Encoding::DELTA_BINARY_PACKED);
        }
    }
    builder
}

/// Which leaf columns of one file try a dictionary in the next row group: shared by the
/// thread starting row groups ([`Self::without_dictionary`]) and the one appending them
/// ([`Self::observe`]).
pub(super) struct DictionaryChoice {
    /// The file's properties.
    base: WriterProperties,
    /// The leaf columns, in order.
    paths: Vec<ColumnPath>,
    /// Leaves whose last chunk that tried a dictionary gave it up.
    given_up: Vec<AtomicBool>,
}

impl DictionaryChoice {
    /// Every leaf of `columns` trying its dictionary as `base` says.
    pub(super) fn new(base: WriterProperties, columns: &SchemaDescriptor) -> Self {
        let paths: Vec<ColumnPath> = columns.columns().iter().map(|c| c.path().clone()).collect();
        let given_up = paths.iter().map(|_| AtomicBool::new(false)).collect();
        Self {
            base,
            paths,
            given_up,
        }
    }

    /// The leaves that go without a dictionary in row group `index`: those that gave
    /// theirs up, unless this row group probes them again.
    pub(super) fn without_dictionary(&self, index: usize) -> Vec<usize> {
        if index.is_multiple_of(PROBE_EVERY) {
            return Vec::new();
        }
        (0..self.given_up.len())
            .filter(|&leaf| self.given_up[leaf].load(Ordering::Relaxed))
            .collect()
    }

    /// The file's properties without a dictionary for `leaves`.
    pub(super) fn properties_without(&self, leaves: &[usize]) -> WriterProperties {
        let mut builder = self.base.clone().into_builder();
        for &leaf in leaves {
            builder = builder.set_column_dictionary_enabled(self.paths[leaf].clone(), false);
        }
        builder.build()
    }

    /// Learns from the encoded chunk of leaf `leaf` whether its dictionary held.
    pub(super) fn observe(&self, leaf: usize, chunk: &ColumnChunkMetaData) {
        if let Some(gave_up) = dictionary_given_up(chunk) {
            self.learn(leaf, gave_up);
        }
    }

    /// Learns that leaf `leaf`'s last chunk that tried a dictionary gave it up, or kept it
    /// (a chunk built on the device, which gives a dictionary up for the whole chunk, says
    /// so itself).
    pub(super) fn learn(&self, leaf: usize, gave_up: bool) {
        if let Some(flag) = self.given_up.get(leaf) {
            flag.store(gave_up, Ordering::Relaxed);
        }
    }
}

/// Whether `chunk` started with a dictionary and gave it up (some data pages not
/// dictionary-encoded); `None` when it had no dictionary or does not say. A chunk just
/// encoded lists its pages; one read back from a file may have them as a mask of the data
/// pages' encodings.
fn dictionary_given_up(chunk: &ColumnChunkMetaData) -> Option<bool> {
    chunk.dictionary_page_offset()?;
    let is_dictionary =
        |e: Encoding| matches!(e, Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY);
    if let Some(pages) = chunk.page_encoding_stats() {
        return Some(pages.iter().any(|page| {
            matches!(page.page_type, PageType::DATA_PAGE | PageType::DATA_PAGE_V2)
                && !is_dictionary(page.encoding)
        }));
    }
    let data_pages = chunk.page_encoding_stats_mask()?;
    Some(data_pages.encodings().any(|e| !is_dictionary(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
    use std::sync::Arc;

    fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("distinct", DataType::Int64, false),
            Field::new("few", DataType::Int64, true),
            Field::new("s", DataType::Utf8, false),
        ]))
    }

    /// One row group of `rows`: mostly distinct integers, integers of four values, strings.
    fn write_one(properties: WriterProperties, rows: i64) -> Vec<u8> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(
                (0..rows).map(|i| i * 7919 % 1_000_003 * 1_000_000_007),
            )),
            Arc::new(Int64Array::from_iter(
                (0..rows).map(|i| (i % 5 != 0).then_some(i % 4)),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("v{}", i % 3)),
            )),
        ];
        let batch = RecordBatch::try_new(schema(), columns).unwrap();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, schema(), Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        out
    }

    fn chunks(bytes: Vec<u8>) -> Vec<ColumnChunkMetaData> {
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        reader.metadata().row_group(0).columns().to_vec()
    }

    fn descriptor() -> SchemaDescriptor {
        ArrowSchemaConverter::new().convert(&schema()).unwrap()
    }

    #[test]
    fn integers_fall_back_to_deltas_and_small_dictionaries_stay() {
        let properties = with_integer_deltas(WriterProperties::builder(), &descriptor()).build();
        let chunks = chunks(write_one(properties, 300_000));
        let encodings = |c: &ColumnChunkMetaData| c.encodings().collect::<Vec<_>>();
        assert!(encodings(&chunks[0]).contains(&Encoding::DELTA_BINARY_PACKED));
        assert_eq!(dictionary_given_up(&chunks[0]), Some(true));
        assert_eq!(dictionary_given_up(&chunks[1]), Some(false));
        assert!(!encodings(&chunks[1]).contains(&Encoding::DELTA_BINARY_PACKED));
        assert_eq!(dictionary_given_up(&chunks[2]), Some(false));
    }

    #[test]
    fn going_without_a_dictionary_keeps_every_other_setting() {
        use datafusion::parquet::basic::{Compression, ZstdLevel};
        use datafusion::parquet::file::metadata::SortingColumn;
        let sorting = vec![SortingColumn {
            column_idx: 0,
            descending: true,
            nulls_first: false,
        }];
        let base = with_integer_deltas(WriterProperties::builder(), &descriptor())
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap()))
            .set_max_row_group_row_count(Some(12345))
            .set_sorting_columns(Some(sorting.clone()))
            .build();
        let choice = DictionaryChoice::new(base.clone(), &descriptor());
        let without = choice.properties_without(&[0]);
        let (distinct, few) = (ColumnPath::from("distinct"), ColumnPath::from("few"));
        assert!(!without.dictionary_enabled(&distinct));
        assert!(without.dictionary_enabled(&few));
        for path in [&distinct, &few] {
            assert_eq!(without.compression(path), base.compression(path));
            assert_eq!(without.encoding(path), Some(Encoding::DELTA_BINARY_PACKED));
            assert_eq!(
                without.statistics_enabled(path),
                base.statistics_enabled(path)
            );
        }
        assert_eq!(without.max_row_group_row_count(), Some(12345));
        assert_eq!(without.sorting_columns(), Some(&sorting));
    }

    #[test]
    fn a_column_that_gave_up_its_dictionary_goes_without_until_a_probe_keeps_one() {
        let base = with_integer_deltas(WriterProperties::builder(), &descriptor()).build();
        let choice = DictionaryChoice::new(base, &descriptor());
        assert!(choice.without_dictionary(1).is_empty());
        let first = chunks(write_one(choice.properties_without(&[]), 300_000));
        for (leaf, chunk) in first.iter().enumerate() {
            choice.observe(leaf, chunk);
        }
        // The distinct column goes without a dictionary; the others keep theirs.
        assert_eq!(choice.without_dictionary(1), vec![0]);
        let next = chunks(write_one(choice.properties_without(&[0]), 300_000));
        assert_eq!(next[0].dictionary_page_offset(), None);
        assert_eq!(dictionary_given_up(&next[1]), Some(false));
        assert_eq!(dictionary_given_up(&next[2]), Some(false));
        // A chunk without a dictionary teaches nothing; a probe row group tries again.
        choice.observe(0, &next[0]);
        assert_eq!(choice.without_dictionary(2), vec![0]);
        assert!(choice.without_dictionary(PROBE_EVERY).is_empty());
        let probe = chunks(write_one(choice.properties_without(&[]), 1000));
        assert_eq!(dictionary_given_up(&probe[0]), Some(false));
        choice.observe(0, &probe[0]);
        assert!(choice.without_dictionary(3).is_empty());
    }
}
