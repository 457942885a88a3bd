//! What encoding each column costs: the CPU time of parquet's `ArrowWriter` (the encoder
//! `gpusort sort` runs on every core) per column of a Parquet input, on one thread, under
//! the writer settings that change it (dictionary, statistics, compression).
//!
//! The write stage of a wide sort is bound by this work (docs/performance.md, session 28),
//! so these are the figures to start from when judging a change of writer settings.
//!
//! ```text
//! cargo run --profile device --example 04_parquet_encode_cost -- DIR_OR_FILE [MAX_ROWS]
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::Schema;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let input = PathBuf::from(
        args.next()
            .ok_or("usage: 04_parquet_encode_cost DIR_OR_FILE [MAX_ROWS]")?,
    );
    let max_rows: usize = args.next().map_or(Ok(2_000_000), |n| n.parse())?;
    let batches = read(&input, max_rows)?;
    let schema = batches.first().ok_or("no rows")?.schema();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    println!(
        "{rows} rows, {} columns; ms of one thread per column",
        schema.fields().len()
    );
    let snappy = || WriterProperties::builder().set_compression(Compression::SNAPPY);
    let settings = [
        ("snappy (gpusort's setting)", snappy().build()),
        (
            "no dictionary",
            snappy().set_dictionary_enabled(false).build(),
        ),
        (
            "no statistics",
            snappy()
                .set_statistics_enabled(EnabledStatistics::None)
                .build(),
        ),
        ("delta integers", delta_integers(snappy(), &schema)?.build()),
        (
            "delta integers, byte stream split floats",
            split_floats(delta_integers(snappy(), &schema)?, &schema).build(),
        ),
        (
            "uncompressed",
            WriterProperties::builder()
                .set_compression(Compression::UNCOMPRESSED)
                .build(),
        ),
    ];
    for (name, properties) in settings {
        let mut total = 0.0;
        let mut cells = Vec::new();
        for (c, field) in schema.fields().iter().enumerate() {
            let one = Arc::new(Schema::new(vec![Arc::clone(field)]));
            let mut out = Vec::new();
            let started = Instant::now();
            let mut writer =
                ArrowWriter::try_new(&mut out, Arc::clone(&one), Some(properties.clone()))?;
            for batch in &batches {
                writer.write(&RecordBatch::try_new(
                    Arc::clone(&one),
                    vec![Arc::clone(batch.column(c))],
                )?)?;
            }
            writer.close()?;
            let ms = started.elapsed().as_secs_f64() * 1e3;
            total += ms;
            cells.push(format!(
                "{} {ms:.0} ({:.1} MB)",
                field.name(),
                out.len() as f64 / 1e6
            ));
        }
        println!(
            "{name}: total {total:.0} ms, {:.0} ns a row\n  {}",
            total * 1e6 / rows as f64,
            cells.join(", ")
        );
    }
    Ok(())
}

/// `builder` with the integer columns' fallback encoding `gpusort sort` gives them.
fn delta_integers(
    builder: datafusion::parquet::file::properties::WriterPropertiesBuilder,
    schema: &Schema,
) -> Result<
    datafusion::parquet::file::properties::WriterPropertiesBuilder,
    Box<dyn std::error::Error>,
> {
    let columns = datafusion::parquet::arrow::ArrowSchemaConverter::new().convert(schema)?;
    Ok(gpusort::pipeline::with_integer_deltas(builder, &columns))
}

/// `builder` with BYTE_STREAM_SPLIT as the encoding of every float column.
fn split_floats(
    mut builder: datafusion::parquet::file::properties::WriterPropertiesBuilder,
    schema: &Schema,
) -> datafusion::parquet::file::properties::WriterPropertiesBuilder {
    use datafusion::arrow::datatypes::DataType::*;
    for field in schema.fields() {
        if matches!(field.data_type(), Float32 | Float64) {
            builder = builder.set_column_encoding(
                field.name().as_str().into(),
                datafusion::parquet::basic::Encoding::BYTE_STREAM_SPLIT,
            );
        }
    }
    builder
}

/// Up to `max_rows` rows of the file, or of a directory's files in name order.
fn read(input: &Path, max_rows: usize) -> Result<Vec<RecordBatch>, Box<dyn std::error::Error>> {
    let mut files = vec![input.to_path_buf()];
    if input.is_dir() {
        files = std::fs::read_dir(input)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        files.sort();
    }
    let mut batches = Vec::new();
    let mut rows = 0;
    for file in files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&file)?)?
            .with_batch_size(64 * 1024)
            .build()?;
        for batch in reader {
            let batch = batch?;
            let take = batch.num_rows().min(max_rows - rows);
            rows += take;
            batches.push(batch.slice(0, take));
            if rows == max_rows {
                return Ok(batches);
            }
        }
    }
    Ok(batches)
}
