//! Reading a spilled run back: the Arrow IPC stream DataFusion's spill writer wrote, decoded
//! without validating the arrays again.
//!
//! DataFusion's own spill reader means to skip the validation (it reads only what it wrote)
//! and asks arrow's `StreamDecoder` to, but arrow-ipc 59 passes that request on to the
//! decoder of dictionary batches only, not to that of record batches. Every string read
//! back from a spill file was checked for UTF-8 once more: 4 % of a spilled job's CPU
//! (docs/performance.md, session 30). Here the stream's messages are framed by hand and
//! decoded by arrow's `FileDecoder`, which honours the request:
//!
//! ```text
//!  file chunks ─► pending bytes ─► the whole messages among them, slices of one buffer:
//!    [0xFFFFFFFF][metadata length][metadata (flatbuffer)][body: bodyLength bytes]
//!    schema: skipped (the spiller's schema is known) · dictionary: kept by the decoder
//!    record batch: decoded, handed out · length 0: end of the stream
//! ```

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::buffer::{Buffer, MutableBuffer};
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::FileDecoder;
use arrow::ipc::{root_as_message, Block, MessageHeader, MetadataVersion};
use datafusion::arrow;
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::execution::SpillFile;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::{Stream, StreamExt};

/// The marker before each message's metadata length.
const CONTINUATION: [u8; 4] = [0xFF; 4];

/// The record batches of spill `file` (written with `schema`), in the order written.
pub(crate) fn read_trusted(
    file: Arc<dyn SpillFile>,
    schema: SchemaRef,
) -> Result<SendableRecordBatchStream> {
    let chunks = file.read_stream()?;
    let reader = Reader::new(file, Arc::clone(&schema), chunks);
    let batches = futures::stream::unfold(reader, |mut reader| async move {
        match reader.next_batch().await {
            Ok(Some(batch)) => Some((Ok(batch), reader)),
            Ok(None) => None,
            Err(e) => {
                reader.ended = true;
                Some((Err(e), reader))
            }
        }
    });
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
}

/// One spill file being read, its bytes coming in `chunks`.
struct Reader<C> {
    /// Kept until the stream is dropped: the file is deleted with it.
    _file: Arc<dyn SpillFile>,
    chunks: C,
    /// Bytes read but not yet cut into messages: the start of the next one. Arrow's own
    /// allocation (64-byte aligned), so the arrays decoded from a message need no copy to
    /// be aligned.
    pending: MutableBuffer,
    /// Whole messages cut from the bytes read, not yet decoded.
    ready: VecDeque<Message>,
    decoder: FileDecoder,
    /// The end marker was read (or the bytes ended between two messages).
    ended: bool,
}

impl<C, B> Reader<C>
where
    C: Stream<Item = Result<B>> + Unpin,
    B: AsRef<[u8]>,
{
    /// A reader of `file` (written with `schema`), whose bytes come in `chunks`.
    fn new(file: Arc<dyn SpillFile>, schema: SchemaRef, chunks: C) -> Self {
        // SAFETY: the file is a temporary file this process wrote from arrays that were
        // valid (arrow validated them when they were built); nothing else writes it.
        let decoder =
            unsafe { FileDecoder::new(schema, MetadataVersion::V5).with_skip_validation(true) };
        Self {
            _file: file,
            chunks,
            pending: MutableBuffer::new(0),
            ready: VecDeque::new(),
            decoder,
            ended: false,
        }
    }

    /// The next record batch; `None` at the end of the stream.
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            while let Some(message) = self.ready.pop_front() {
                if let Some(batch) = self.decode(message)? {
                    return Ok(Some(batch));
                }
            }
            if self.ended {
                return Ok(None);
            }
            match self.chunks.next().await {
                Some(chunk) => {
                    self.pending.extend_from_slice(chunk?.as_ref());
                    self.cut_messages()?;
                }
                // A stream that ends without its end marker ends here all the same.
                None if self.pending.is_empty() => self.ended = true,
                None => {
                    return Err(exec_datafusion_err!(
                        "gpusort: a spill file ends inside a message ({} bytes left)",
                        self.pending.len()
                    ))
                }
            }
        }
    }

    /// Moves every whole message at the start of the pending bytes to `ready`, each a
    /// slice of one buffer (no copy); only the bytes of a message not yet whole stay
    /// pending (copied once more).
    fn cut_messages(&mut self) -> Result<()> {
        let mut frames = vec![];
        let mut at = 0;
        while let Some(frame) = frame_at(&self.pending[at..])? {
            let Frame::Message {
                meta_bytes,
                body,
                header,
            } = frame
            else {
                self.ended = true;
                break;
            };
            frames.push((at, meta_bytes, body, header));
            at += meta_bytes + body;
        }
        if frames.is_empty() {
            if self.ended {
                self.pending.clear();
            }
            return Ok(());
        }
        // Past the end marker nothing is kept.
        let kept = if self.ended {
            &[][..]
        } else {
            &self.pending[at..]
        };
        let mut rest = MutableBuffer::new(kept.len());
        rest.extend_from_slice(kept);
        let cut: Buffer = std::mem::replace(&mut self.pending, rest).into();
        self.ready.extend(
            frames
                .into_iter()
                .map(|(start, meta_bytes, body, header)| Message {
                    bytes: cut.slice_with_length(start, meta_bytes + body),
                    block: Block::new(0, meta_bytes as i32, body as i64),
                    header,
                }),
        );
        Ok(())
    }

    /// Decodes `message`: a record batch, or `None` for a message that is not one (the
    /// schema, a dictionary).
    fn decode(&mut self, message: Message) -> Result<Option<RecordBatch>> {
        let Message {
            bytes,
            block,
            header,
        } = message;
        match header {
            MessageHeader::Schema => Ok(None),
            MessageHeader::DictionaryBatch => {
                self.decoder.read_dictionary(&block, &bytes)?;
                Ok(None)
            }
            MessageHeader::RecordBatch => Ok(self.decoder.read_record_batch(&block, &bytes)?),
            other => Err(exec_datafusion_err!(
                "gpusort: a spill file holds a message of type {other:?}"
            )),
        }
    }
}

/// What the bytes at the start of a stream's remaining bytes hold.
enum Frame {
    /// A whole message: its prefix and metadata, then its body.
    Message {
        meta_bytes: usize,
        body: usize,
        header: MessageHeader,
    },
    /// The end marker.
    End,
}

/// The frame `bytes` start with; `None` until they hold a whole one.
fn frame_at(bytes: &[u8]) -> Result<Option<Frame>> {
    // DataFusion's writer puts the continuation marker before every length (IPC V5).
    const PREFIX: usize = 8;
    let Some(marker) = bytes.get(..4) else {
        return Ok(None);
    };
    if marker != CONTINUATION {
        return Err(exec_datafusion_err!(
            "gpusort: a spill file's message does not start with the continuation marker"
        ));
    }
    let Some(length) = bytes.get(4..PREFIX) else {
        return Ok(None);
    };
    let meta_length = i32::from_le_bytes(length.try_into().expect("4 bytes"));
    let meta_length = usize::try_from(meta_length).map_err(|_| {
        exec_datafusion_err!("gpusort: a spill file's message has length {meta_length}")
    })?;
    if meta_length == 0 {
        return Ok(Some(Frame::End));
    }
    let meta_bytes = PREFIX + meta_length;
    let Some(metadata) = bytes.get(PREFIX..meta_bytes) else {
        return Ok(None);
    };
    let message = root_as_message(metadata)
        .map_err(|e| exec_datafusion_err!("gpusort: reading a spill file's message: {e}"))?;
    let body = usize::try_from(message.bodyLength())
        .map_err(|_| exec_datafusion_err!("gpusort: a spill file's message has a negative body"))?;
    if bytes.len() < meta_bytes + body {
        return Ok(None);
    }
    Ok(Some(Frame::Message {
        meta_bytes,
        body,
        header: message.header_type(),
    }))
}

/// One whole message of the stream.
struct Message {
    /// Its prefix, metadata and body.
    bytes: Buffer,
    /// Where its metadata and body lie in `bytes`.
    block: Block,
    header: MessageHeader,
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, DictionaryArray, Int32Array, Int64Array, StringViewArray};
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};
    use datafusion::common::config::SpillCompression;
    use datafusion::execution::runtime_env::RuntimeEnv;
    use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, SpillMetrics};
    use datafusion::physical_plan::spill::SpillManager;

    fn schema() -> SchemaRef {
        let dictionary = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8View, true),
            Field::new("d", dictionary, true),
        ]))
    }

    /// `rows` rows from `start`: nulls, short and long strings, a dictionary column.
    fn batch(start: i64, rows: i64) -> RecordBatch {
        let keys = Int64Array::from_iter((start..start + rows).map(|i| (i % 7 != 0).then_some(i)));
        let strings = StringViewArray::from_iter((start..start + rows).map(|i| match i % 5 {
            0 => None,
            1 => Some(format!("s{i}")),
            _ => Some(format!("a string longer than twelve bytes, number {i}")),
        }));
        let codes = Int32Array::from_iter(
            (start..start + rows).map(|i| (i % 11 != 0).then_some((i % 3) as i32)),
        );
        let values: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["x", "y", "z"]));
        let dictionary = DictionaryArray::<Int32Type>::try_new(codes, values).unwrap();
        RecordBatch::try_new(
            schema(),
            vec![Arc::new(keys), Arc::new(strings), Arc::new(dictionary)],
        )
        .unwrap()
    }

    /// The batches written: small ones, one of several MiB (more than a chunk of the
    /// file's read stream), and an empty one.
    fn batches() -> Vec<RecordBatch> {
        vec![
            batch(0, 10),
            batch(10, 0),
            batch(10, 100_000),
            batch(100_010, 3),
        ]
    }

    fn spilled(compression: SpillCompression) -> Arc<dyn SpillFile> {
        let env = Arc::new(RuntimeEnv::default());
        let metrics = SpillMetrics::new(&ExecutionPlanMetricsSet::new(), 0);
        let manager = SpillManager::new(env, metrics, schema()).with_compression_type(compression);
        let mut file = manager.create_in_progress_file("a test run").unwrap();
        for batch in batches() {
            file.append_batch(&batch).unwrap();
        }
        file.finish().unwrap().expect("a file")
    }

    fn nonempty(batches: Vec<RecordBatch>) -> Vec<RecordBatch> {
        batches.into_iter().filter(|b| b.num_rows() > 0).collect()
    }

    #[tokio::test]
    async fn reads_back_what_was_spilled_with_every_compression() {
        for compression in [
            SpillCompression::Uncompressed,
            SpillCompression::Lz4Frame,
            SpillCompression::Zstd,
        ] {
            let file = spilled(compression);
            let read: Vec<RecordBatch> = read_trusted(file, schema())
                .unwrap()
                .map(|b| b.unwrap())
                .collect()
                .await;
            assert_eq!(nonempty(read), nonempty(batches()), "{compression:?}");
        }
    }

    /// The file's bytes in chunks of `chunk` bytes, the last `cut` bytes left out.
    fn chunks(file: &Arc<dyn SpillFile>, chunk: usize, cut: usize) -> Vec<Result<Vec<u8>>> {
        let bytes = std::fs::read(file.path().expect("a local file")).unwrap();
        bytes[..bytes.len() - cut]
            .chunks(chunk)
            .map(|c| Ok(c.to_vec()))
            .collect()
    }

    async fn read_all(
        file: &Arc<dyn SpillFile>,
        chunk: usize,
        cut: usize,
    ) -> Result<Vec<RecordBatch>> {
        let stream = futures::stream::iter(chunks(file, chunk, cut));
        let mut reader = Reader::new(Arc::clone(file), schema(), stream);
        let mut read = vec![];
        while let Some(batch) = reader.next_batch().await? {
            read.push(batch);
        }
        Ok(read)
    }

    #[tokio::test]
    async fn messages_split_across_chunks_are_put_together() {
        let file = spilled(SpillCompression::Lz4Frame);
        for chunk in [1, 7, 4096] {
            let read = read_all(&file, chunk, 0).await.unwrap();
            assert_eq!(
                nonempty(read),
                nonempty(batches()),
                "chunks of {chunk} bytes"
            );
        }
    }

    #[tokio::test]
    async fn a_file_cut_inside_a_message_is_an_error() {
        let file = spilled(SpillCompression::Uncompressed);
        // The end marker is 8 bytes: 20 more cut into the last batch's body.
        let error = read_all(&file, 4096, 28).await.unwrap_err();
        assert!(
            error.to_string().contains("ends inside a message"),
            "{error}"
        );
        // Without its end marker the stream still ends after its last batch.
        let read = read_all(&file, 4096, 8).await.unwrap();
        assert_eq!(nonempty(read), nonempty(batches()));
    }
}
