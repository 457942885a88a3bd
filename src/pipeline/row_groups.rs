//! One Parquet file written with its row groups encoded in parallel.
//!
//! Encoding (and compressing) the columns is what a single-threaded Parquet writer spends
//! its time on. Here rows are gathered into row groups of `max_row_group_row_count` rows;
//! each full row group is encoded on the rayon pool (all its columns, by parquet's
//! `ArrowColumnWriter`s), and the encoded column chunks are appended to the file in row
//! group order. At most one row group per pool thread is in flight, which bounds memory.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowRowGroupWriterFactory,
};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::errors::{ParquetError, Result};
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::parquet::file::writer::SerializedFileWriter;

type Encoded = Receiver<Result<Vec<ArrowColumnChunk>>>;

/// A Parquet file being written; row groups encoded in parallel, appended in order.
pub(super) struct ParallelFileWriter<W: Write + Send> {
    file: SerializedFileWriter<W>,
    factory: Arc<ArrowRowGroupWriterFactory>,
    schema: SchemaRef,
    row_group_rows: usize,
    /// Rows of the row group being gathered.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    /// Row groups being encoded, oldest first.
    in_flight: VecDeque<Encoded>,
    /// Row groups handed out so far.
    row_groups: usize,
}

impl<W: Write + Send> ParallelFileWriter<W> {
    /// Starts a file of `schema` on `sink`.
    pub(super) fn try_new(
        sink: W,
        schema: SchemaRef,
        properties: WriterProperties,
    ) -> Result<Self> {
        let row_group_rows = properties.max_row_group_row_count().unwrap_or(1024 * 1024);
        let (file, factory) = ArrowWriter::try_new(sink, Arc::clone(&schema), Some(properties))?
            .into_serialized_writer()?;
        Ok(Self {
            file,
            factory: Arc::new(factory),
            schema,
            row_group_rows: row_group_rows.max(1),
            pending: Vec::new(),
            pending_rows: 0,
            in_flight: VecDeque::new(),
            row_groups: 0,
        })
    }

    /// Appends the rows of `batch`.
    pub(super) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let take = (self.row_group_rows - self.pending_rows).min(batch.num_rows() - offset);
            self.pending.push(batch.slice(offset, take));
            self.pending_rows += take;
            offset += take;
            if self.pending_rows == self.row_group_rows {
                self.dispatch()?;
            }
        }
        Ok(())
    }

    /// Encodes what is left, appends every row group and writes the footer.
    pub(super) fn close(mut self) -> Result<()> {
        if self.pending_rows > 0 {
            self.dispatch()?;
        }
        while !self.in_flight.is_empty() {
            self.append_oldest()?;
        }
        self.file.close().map(|_| ())
    }

    /// Sends the gathered row group to the pool; appends finished ones while too many
    /// are in flight.
    fn dispatch(&mut self) -> Result<()> {
        let batches = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        let (factory, schema, index) = (
            Arc::clone(&self.factory),
            Arc::clone(&self.schema),
            self.row_groups,
        );
        self.row_groups += 1;
        let (tx, rx) = sync_channel(1);
        rayon::spawn(move || {
            let encoded = without_panics(|| encode_row_group(&factory, &schema, index, &batches));
            let _ = tx.send(encoded);
        });
        self.in_flight.push_back(rx);
        while self.in_flight.len() > rayon::current_num_threads() {
            self.append_oldest()?;
        }
        Ok(())
    }

    fn append_oldest(&mut self) -> Result<()> {
        let encoded = self.in_flight.pop_front().expect("a row group in flight");
        let chunks = encoded
            .recv()
            .map_err(|_| ParquetError::General("a row group encoder stopped".into()))??;
        let mut row_group = self.file.next_row_group()?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut row_group)?;
        }
        row_group.close().map(|_| ())
    }
}

/// What `encode` returns, or an error where it panicked: a panic in a job of the rayon pool
/// would abort the process.
fn without_panics<T>(encode: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(encode)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        Err(ParquetError::General(format!(
            "gpusort: encoding a row group panicked: {message}"
        )))
    })
}

/// Encodes the columns of one row group.
fn encode_row_group(
    factory: &ArrowRowGroupWriterFactory,
    schema: &SchemaRef,
    index: usize,
    batches: &[RecordBatch],
) -> Result<Vec<ArrowColumnChunk>> {
    let mut writers = factory.create_column_writers(index)?;
    for batch in batches {
        let mut leaf_writers = writers.iter_mut();
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            for leaf in compute_leaves(field, column)? {
                leaf_writers
                    .next()
                    .expect("one column writer per leaf")
                    .write(&leaf)?;
            }
        }
    }
    writers.into_iter().map(|w| w.close()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_encoder_is_an_error() {
        let (tx, rx) = sync_channel(1);
        rayon::spawn(move || {
            let encoded: Result<()> = without_panics(|| panic!("column {} broke", 3));
            let _ = tx.send(encoded);
        });
        let error = rx.recv().unwrap().unwrap_err().to_string();
        assert!(
            error.contains("encoding a row group panicked: column 3 broke"),
            "{error}"
        );
        assert_eq!(without_panics(|| Ok(7)).unwrap(), 7);
    }
}
