//! Column chunks already encoded (the device's pages) written to the file in one call each.
//!
//! parquet takes an encoded chunk through `SerializedRowGroupWriter::append_column`, which
//! copies it with `std::io::copy`: 8 KiB at a time into a buffer on the stack, then through
//! the file writer's buffers, tens of thousands of calls for a row group. The one appender
//! of a one-file output spends most of its time there. Instead, the appender announces each
//! chunk to the [`SpliceSink`] under the file writer, with the file offset it lands at
//! ([`Splices::expect`]), and hands parquet a [`Placeholder`] of the same length, whose reads
//! fill nothing. When the first of those bytes reaches the sink, the sink writes the chunk's
//! own bytes in one call; it drops the placeholder's bytes as they come. parquet counts the
//! bytes and records the chunk's offsets as `append_column` always does, so the footer is
//! the one it would write.
//!
//! `GPUSORT_SPLICE_CHUNKS=0` appends them through `append_column` instead, as before.
//!
//! What keeps a file from going wrong: the sink refuses a chunk whose offset it has passed
//! without writing it, and one announced but never reached when the file ends; the
//! appender checks each row group's recorded offsets against the ones it announced
//! ([`check_offsets`]). Either is an error of the job, never a file with bytes out of place.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use datafusion::parquet::column::writer::ColumnCloseResult;
use datafusion::parquet::errors::{ParquetError, Result};
use datafusion::parquet::file::metadata::{ColumnChunkMetaData, RowGroupMetaData};
use datafusion::parquet::file::reader::{ChunkReader, Length};
use datafusion::parquet::file::writer::SerializedRowGroupWriter;

/// A chunk announced to the sink: its bytes go to the file at `start`.
struct Span {
    start: u64,
    bytes: Bytes,
    /// Its bytes are written; what is left of the placeholder's is dropped.
    written: bool,
}

/// The chunks announced to a file and not yet written, in file order; shared by the
/// appender (which announces them) and the file's [`SpliceSink`].
#[derive(Default)]
pub(super) struct Splices {
    spans: Mutex<VecDeque<Span>>,
}

impl Splices {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Span>> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Announces that the next `bytes.len()` bytes the file writer writes at offset
    /// `start` are a placeholder for `bytes`.
    pub(super) fn expect(&self, start: u64, bytes: Bytes) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut spans = self.lock();
        if let Some(last) = spans.back() {
            if start < last.start + last.bytes.len() as u64 {
                return Err(ParquetError::General(format!(
                    "gpusort: a column chunk announced at offset {start}, inside the one before it"
                )));
            }
        }
        spans.push_back(Span {
            start,
            bytes,
            written: false,
        });
        Ok(())
    }
}

/// Whether device chunks are written whole by the sink: unless `GPUSORT_SPLICE_CHUNKS=0`.
pub(super) fn enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED
        .get_or_init(|| std::env::var("GPUSORT_SPLICE_CHUNKS").map_or(true, |v| v.trim() != "0"))
}

/// The chunk bytes `append_column` would copy for `close`'s metadata out of `bytes` (the
/// chunk as it was encoded): from its first page, its compressed size.
fn chunk_bytes(bytes: &Bytes, metadata: &ColumnChunkMetaData) -> Result<Bytes> {
    let first = metadata
        .dictionary_page_offset()
        .unwrap_or_else(|| metadata.data_page_offset());
    let (Ok(first), Ok(length)) = (
        usize::try_from(first),
        usize::try_from(metadata.compressed_size()),
    ) else {
        return Err(ParquetError::General(
            "gpusort: a column chunk with a negative offset or size".into(),
        ));
    };
    match first.checked_add(length) {
        Some(end) if end <= bytes.len() => Ok(bytes.slice(first..end)),
        _ => Err(ParquetError::General(format!(
            "gpusort: a column chunk of {} bytes says its pages take {first} .. {first} + {length}",
            bytes.len()
        ))),
    }
}

/// Appends the chunk `bytes`, encoded with `close`, as the next column of `writer`, whose
/// file is at `offset`: announced to `splices` (those of `writer`'s sink), parquet handed a
/// placeholder. The file's offset after it.
pub(super) fn append_chunk<W: Write + Send>(
    writer: &mut SerializedRowGroupWriter<'_, SpliceSink<W>>,
    splices: &Splices,
    offset: u64,
    bytes: &Bytes,
    close: ColumnCloseResult,
) -> Result<u64> {
    let chunk = chunk_bytes(bytes, &close.metadata)?;
    let end = offset + chunk.len() as u64;
    splices.expect(offset, chunk)?;
    writer.append_column(&Placeholder::new(bytes.len()), close)?;
    Ok(end)
}

/// Checks that each column of `row_group` that was announced (`announced`: column index,
/// offset) starts where it was announced.
pub(super) fn check_offsets(
    row_group: &RowGroupMetaData,
    announced: &[(usize, u64)],
) -> Result<()> {
    for &(column, start) in announced {
        let metadata = row_group.column(column);
        let recorded = metadata
            .dictionary_page_offset()
            .unwrap_or_else(|| metadata.data_page_offset());
        if u64::try_from(recorded).ok() != Some(start) {
            return Err(ParquetError::General(format!(
                "gpusort: column {column} of a row group was written at offset {start} but the \
                 file records {recorded}"
            )));
        }
    }
    Ok(())
}

/// What the file writer writes to: passes its bytes on to `inner`, except that announced
/// chunks' placeholders are replaced by the chunks' own bytes, each written in one call.
pub(super) struct SpliceSink<W: Write> {
    inner: W,
    /// Bytes the file writer has written through this sink: the file offset of the next.
    position: u64,
    splices: Arc<Splices>,
}

impl<W: Write> SpliceSink<W> {
    pub(super) fn new(inner: W, splices: Arc<Splices>) -> Self {
        Self {
            inner,
            position: 0,
            splices,
        }
    }

    /// The file's writer, once every announced chunk has been written.
    pub(super) fn into_inner(self) -> io::Result<W> {
        let left = self.splices.lock().len();
        if left > 0 {
            return Err(io::Error::other(format!(
                "gpusort: {left} column chunks announced to the file were never written"
            )));
        }
        Ok(self.inner)
    }
}

impl<W: Write> Write for SpliceSink<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut spans = self.splices.lock();
        let Some(span) = spans.front_mut().filter(|s| s.start <= self.position) else {
            // Plain bytes, up to the next chunk's offset.
            let room = spans
                .front()
                .map_or(buf.len() as u64, |s| s.start - self.position);
            let take = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            let n = self.inner.write(&buf[..take])?;
            self.position += n as u64;
            return Ok(n);
        };
        if !span.written {
            if span.start != self.position {
                return Err(io::Error::other(format!(
                    "gpusort: a column chunk announced at offset {} reached the file at {}",
                    span.start, self.position
                )));
            }
            self.inner.write_all(&span.bytes)?;
            span.written = true;
        }
        // The placeholder's bytes, dropped: the chunk's are written.
        let end = span.start + span.bytes.len() as u64;
        let n = buf
            .len()
            .min(usize::try_from(end - self.position).unwrap_or(usize::MAX));
        self.position += n as u64;
        if self.position == end {
            spans.pop_front();
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Stands in for a chunk's bytes in `append_column`: `len` bytes whose reads fill
/// nothing (the [`SpliceSink`] drops them).
struct Placeholder {
    len: u64,
}

impl Placeholder {
    fn new(len: usize) -> Self {
        Self { len: len as u64 }
    }
}

impl Length for Placeholder {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for Placeholder {
    type T = PlaceholderRead;

    fn get_read(&self, start: u64) -> Result<Self::T> {
        Ok(PlaceholderRead {
            left: self.len.saturating_sub(start),
        })
    }

    fn get_bytes(&self, _start: u64, _length: usize) -> Result<Bytes> {
        Err(ParquetError::General(
            "gpusort: a spliced chunk's placeholder has no bytes to read".into(),
        ))
    }
}

/// The reads of a [`Placeholder`]: each says it filled what it was given, and leaves it.
struct PlaceholderRead {
    left: u64,
}

impl Read for PlaceholderRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the calls made to it.
    #[derive(Default)]
    struct Calls {
        bytes: Vec<u8>,
        calls: usize,
    }

    impl Write for Calls {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.bytes.extend_from_slice(buf);
            self.calls += 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn placeholders_become_the_chunks_bytes_in_one_write() {
        let splices = Arc::new(Splices::default());
        let mut sink = SpliceSink::new(Calls::default(), Arc::clone(&splices));
        sink.write_all(b"PAR1").unwrap();
        let chunk: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        splices.expect(4, Bytes::from(chunk.clone())).unwrap();
        splices.expect(20_010, Bytes::from_static(b"xyz")).unwrap();
        // The placeholder arrives in pieces, the last one with the bytes after it.
        let mut read = PlaceholderRead { left: 20_000 };
        let mut piece = [0xEEu8; 8192];
        let mut sent = 0;
        while sent < 20_000 - 4_000 {
            let n = read.read(&mut piece).unwrap();
            sink.write_all(&piece[..n]).unwrap();
            sent += n;
        }
        let mut tail = vec![0xEE; 20_000 - sent];
        tail.extend_from_slice(b"header");
        tail.extend_from_slice(&[0xEE; 3]);
        tail.extend_from_slice(b"end");
        sink.write_all(&tail).unwrap();
        let calls = sink.inner.calls;
        let written = sink.into_inner().unwrap().bytes;
        let mut expected = b"PAR1".to_vec();
        expected.extend_from_slice(&chunk);
        expected.extend_from_slice(b"headerxyzend");
        assert_eq!(written, expected);
        // "PAR1", the chunk, "header", "xyz", "end".
        assert_eq!(calls, 5);
    }

    #[test]
    fn a_chunk_never_reached_or_passed_is_an_error() {
        let splices = Arc::new(Splices::default());
        let mut sink = SpliceSink::new(Vec::new(), Arc::clone(&splices));
        splices.expect(8, Bytes::from_static(b"chunk")).unwrap();
        sink.write_all(b"PAR1").unwrap();
        assert!(sink.into_inner().is_err(), "announced, never reached");

        let splices = Arc::new(Splices::default());
        let mut sink = SpliceSink::new(Vec::new(), Arc::clone(&splices));
        sink.write_all(b"PAR1").unwrap();
        // Announced behind the sink's position: its offset was already passed.
        splices.expect(2, Bytes::from_static(b"chunk")).unwrap();
        assert!(sink.write_all(b"more").is_err());
        // Announced overlapping the one before.
        let splices = Splices::default();
        splices.expect(10, Bytes::from_static(b"chunk")).unwrap();
        assert!(splices.expect(12, Bytes::from_static(b"next")).is_err());
    }

    #[test]
    fn chunk_bytes_are_the_pages_the_metadata_names() {
        use datafusion::parquet::basic::Type as PhysicalType;
        use datafusion::parquet::schema::types::{ColumnDescriptor, ColumnPath, Type};
        let leaf = Type::primitive_type_builder("v", PhysicalType::INT64)
            .build()
            .unwrap();
        let descr = Arc::new(ColumnDescriptor::new(
            Arc::new(leaf),
            0,
            0,
            ColumnPath::from("v"),
        ));
        let metadata = ColumnChunkMetaData::builder(descr)
            .set_data_page_offset(3)
            .set_total_compressed_size(4)
            .build()
            .unwrap();
        let bytes = Bytes::from_static(b"abcdefgh");
        assert_eq!(&chunk_bytes(&bytes, &metadata).unwrap()[..], b"defg");
        let short = Bytes::from_static(b"abcde");
        assert!(chunk_bytes(&short, &metadata).is_err());
    }
}
