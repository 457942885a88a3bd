//! One Parquet file whose column chunks are encoded in parallel as the rows arrive.
//!
//! Encoding and compressing the columns is most of a Parquet writer's work. Every column of
//! every open row group has an encoder of its own (a [`ColumnEncoder`] around parquet's
//! `ArrowColumnWriter`) with a queue. Each batch is cut into its leaf columns and each leaf
//! is queued on its column's encoder, which runs on the rayon pool whenever it has work:
//! columns encode in parallel, and so do row groups, since a full row group goes on
//! encoding what is queued while the next one fills. A thread of its own (the appender)
//! appends full row groups to the file in order, each once all its encoders have closed, so
//! that copying encoded bytes into the file never holds up the thread queueing batches
//! (on 16 cores that copy took 1.3 s of a 2.3 GiB file's 2.9 s of writing).
//!
//! Nothing waits for a whole row group of rows: a leaf is dropped once it is encoded, and
//! the memory held is what is queued plus the encoded pages of the open row groups, both
//! counted in the output's [`WriteMemory`] (in the session's pool), which decides when the
//! next batch may be queued. The file's bytes are those a sequential writer would write,
//! except where a column that gave its dictionary up in an earlier row group goes without
//! one ([`DictionaryChoice`]). Which row groups those are depends on how far the appender
//! had got when each started, so two runs may encode such a column differently (never its
//! values).

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn,
    ArrowRowGroupWriterFactory,
};
use datafusion::parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
use datafusion::parquet::errors::{ParquetError, Result};
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::parquet::file::writer::SerializedFileWriter;

use super::device_chunks;
use super::device_jobs::{DeviceJob, DevicePages, DeviceSlot, EncodedLeaf, PageCounts};
use super::encodings::DictionaryChoice;
use super::splice::{self, SpliceSink, Splices};
use super::write_memory::WriteMemory;
use crate::exec::views::array_memory;
use crate::gather::{resident_part, ResidentColumns};

/// A Parquet file being written; columns and row groups encoded in parallel, appended in
/// order by a thread of its own.
pub(super) struct ParallelFileWriter<W: Write + Send + 'static> {
    factory: ArrowRowGroupWriterFactory,
    /// Which leaves try a dictionary in the next row group (learnt by the appender).
    dictionaries: Arc<DictionaryChoice>,
    /// The leaves last written without a dictionary, and a factory of their writers.
    without_dictionary: Option<(Vec<usize>, ArrowRowGroupWriterFactory)>,
    schema: SchemaRef,
    row_group_rows: usize,
    memory: Arc<WriteMemory>,
    /// The row group receiving rows, and its rows so far.
    filling: Option<RowGroupEncoders>,
    filling_rows: usize,
    /// Full row groups go to the appender, which writes them to the file in order.
    appender: Appender<W>,
    /// Row groups started so far.
    row_groups: usize,
    /// Time spent waiting for room in the memory to queue a batch.
    memory_wait: Duration,
    /// The file's properties (a row group whose leaves gave their dictionary up uses
    /// [`DictionaryChoice::properties_without`] instead).
    properties: WriterProperties,
    /// Leaves whose pages the device may build, and the thread that has it build them;
    /// `None`: every page is encoded on the CPU.
    device: Option<DevicePages>,
}

impl<W: Write + Send + 'static> ParallelFileWriter<W> {
    /// Starts a file of `schema` on `sink`, its memory counted in `memory`; with
    /// `device_pages`, the pages of the leaves the device takes
    /// ([`device_chunks::device_layout`]) are built on the device where the properties of
    /// their row group allow it, each chunk counted there.
    pub(super) fn try_new(
        sink: W,
        schema: SchemaRef,
        properties: WriterProperties,
        memory: Arc<WriteMemory>,
        device_pages: Option<Arc<PageCounts>>,
    ) -> Result<Self> {
        let row_group_rows = properties.max_row_group_row_count().unwrap_or(1024 * 1024);
        let columns = ArrowSchemaConverter::new()
            .with_coerce_types(properties.coerce_types())
            .convert(&schema)?;
        let dictionaries = Arc::new(DictionaryChoice::new(properties.clone(), &columns));
        let device = device_pages.map(|counts| DevicePages::new(&schema, &columns, counts));
        let splices = Arc::new(Splices::default());
        let sink = SpliceSink::new(sink, Arc::clone(&splices));
        let (file, factory) =
            ArrowWriter::try_new(sink, Arc::clone(&schema), Some(properties.clone()))?
                .into_serialized_writer()?;
        Ok(Self {
            factory,
            without_dictionary: None,
            schema,
            row_group_rows: row_group_rows.max(1),
            appender: Appender::start(
                file,
                splices,
                Arc::clone(&memory),
                Arc::clone(&dictionaries),
            )?,
            dictionaries,
            memory,
            filling: None,
            filling_rows: 0,
            row_groups: 0,
            memory_wait: Duration::ZERO,
            properties,
            device,
        })
    }

    /// Appends the rows of `batch`.
    pub(super) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.write_rows(batch, None)
    }

    /// Appends the rows of `batch`; with `resident`, a batch of a run that left columns on
    /// the device (`gather/resident.rs`): those columns are rows `first ..` of that run,
    /// the batch holds the others.
    pub(super) fn write_rows(
        &mut self,
        batch: &RecordBatch,
        resident: Option<(&Arc<dyn ResidentColumns>, usize)>,
    ) -> Result<()> {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let take = (self.row_group_rows - self.filling_rows).min(batch.num_rows() - offset);
            let resident = resident.map(|(run, first)| (run, first + offset));
            self.queue(&batch.slice(offset, take), resident)?;
            self.filling_rows += take;
            offset += take;
            if self.filling_rows == self.row_group_rows {
                self.finish_filling()?;
            }
        }
        Ok(())
    }

    /// Encodes what is left, appends every row group and writes the footer; the sink.
    pub(super) fn close(mut self) -> Result<W> {
        if self.filling_rows > 0 {
            self.finish_filling()?;
        }
        let memory_wait = self.memory_wait;
        crate::trace::event(|| {
            format!(
                "writer: {} row groups queued; waited {:.0} ms for memory",
                self.row_groups,
                memory_wait.as_secs_f64() * 1e3
            )
        });
        self.appender
            .finish()?
            .into_inner()?
            .into_inner()
            .map_err(|e| ParquetError::External(Box::new(e)))
    }

    /// Queues the leaves of `batch` (rows of the filling row group) on their encoders, once
    /// the memory allows; the columns `resident`'s run holds are its rows from `first` on.
    fn queue(
        &mut self,
        batch: &RecordBatch,
        resident: Option<(&Arc<dyn ResidentColumns>, usize)>,
    ) -> Result<()> {
        if self.filling.is_none() {
            let writers = self.column_writers()?;
            let device = self.device_leaves();
            self.row_groups += 1;
            self.filling = Some(RowGroupEncoders::new(writers, device, &self.memory)?);
        }
        let filling = self.filling.as_ref().expect("a filling row group");
        let mut leaves = Vec::new();
        let mut device_arrays = Vec::new();
        let mut device_resident = Vec::new();
        let mut leaf = 0;
        let mut arrays = batch.columns().iter();
        let rows = batch.num_rows();
        for (index, field) in self.schema.fields().iter().enumerate() {
            let part = resident.and_then(|(run, first)| resident_part(run, index, first, rows));
            let column = match part {
                Some(part) => match filling.device_slot(leaf) {
                    Some(slot) => {
                        device_resident.push((slot, part));
                        leaf += 1;
                        continue;
                    }
                    // A leaf this row group encodes on the CPU: its rows come to the host.
                    None => part
                        .run
                        .column(part.column, part.first, part.rows)
                        .map_err(|e| ParquetError::General(e.to_string()))?,
                },
                None => Arc::clone(arrays.next().ok_or_else(|| {
                    ParquetError::General(format!(
                        "gpusort: a batch of {} columns for a file of {}",
                        batch.num_columns(),
                        self.schema.fields().len()
                    ))
                })?),
            };
            let column = &column;
            let mut bytes = array_memory(column.as_ref());
            if let Some(slot) = filling.device_slot(leaf) {
                device_arrays.push((slot, Arc::clone(column), bytes));
                leaf += 1;
                continue;
            }
            for computed in compute_leaves(field, column)? {
                // A nested column's bytes go with its first leaf.
                leaves.push((leaf, computed, std::mem::take(&mut bytes)));
                leaf += 1;
            }
        }
        if leaf != filling.columns.len() || arrays.next().is_some() {
            return Err(ParquetError::General(format!(
                "gpusort: {leaf} leaf columns for {} column writers",
                filling.columns.len()
            )));
        }
        let total = leaves.iter().map(|(_, _, bytes)| bytes).sum::<usize>()
            + device_arrays
                .iter()
                .map(|(_, _, bytes)| bytes)
                .sum::<usize>();
        self.wait_for_memory(total)?;
        let filling = self.filling.as_ref().expect("a filling row group");
        for (leaf, computed, bytes) in leaves {
            match &filling.columns[leaf] {
                Leaf::Cpu(encoder) => encoder.push(computed, bytes),
                Leaf::Device(_) => unreachable!("device leaves are not computed"),
            }
        }
        if let Some(job) = &filling.device {
            for (slot, array, bytes) in device_arrays {
                job.push(slot, array, bytes);
            }
            for (slot, part) in device_resident {
                job.push_resident(slot, part);
            }
        }
        Ok(())
    }

    /// The leaves of the next row group whose pages the device builds: those it takes
    /// whose properties in that row group (without a dictionary where it was given up)
    /// allow it.
    fn device_leaves(&self) -> Vec<DeviceSlot> {
        let Some(device) = &self.device else {
            return Vec::new();
        };
        let without = self.dictionaries.without_dictionary(self.row_groups);
        let properties = match without.is_empty() {
            true => self.properties.clone(),
            false => self.dictionaries.properties_without(&without),
        };
        device
            .leaves
            .iter()
            .enumerate()
            .filter_map(|(leaf, taken)| {
                let (field, descr, layout) = taken.as_ref()?;
                device_chunks::properties_allow(&properties, descr).then(|| DeviceSlot {
                    leaf,
                    field: Arc::clone(field),
                    descr: Arc::clone(descr),
                    layout: *layout,
                    properties: properties.clone(),
                })
            })
            .collect()
    }

    /// The column writers of the next row group: without a dictionary for the leaves that
    /// gave theirs up.
    fn column_writers(&mut self) -> Result<Vec<ArrowColumnWriter>> {
        let leaves = self.dictionaries.without_dictionary(self.row_groups);
        if leaves.is_empty() {
            return self.factory.create_column_writers(self.row_groups);
        }
        if self.without_dictionary.as_ref().map(|(l, _)| l) != Some(&leaves) {
            // parquet makes writers for a file's properties only: a file that is never
            // written (the sink) lends its factory.
            let properties = self.dictionaries.properties_without(&leaves);
            let (_, factory) =
                ArrowWriter::try_new(std::io::sink(), Arc::clone(&self.schema), Some(properties))?
                    .into_serialized_writer()?;
            self.without_dictionary = Some((leaves, factory));
        }
        let (_, factory) = self.without_dictionary.as_ref().expect("made above");
        factory.create_column_writers(self.row_groups)
    }

    /// Waits until `bytes` more may be queued (the appender frees the memory of the row
    /// groups it appends); the appender's error if it stopped.
    fn wait_for_memory(&mut self, bytes: usize) -> Result<()> {
        let waiting = Instant::now();
        loop {
            let Err(seen) = self.memory.try_queue(bytes) else {
                self.memory_wait += waiting.elapsed();
                return Ok(());
            };
            if self.appender.stopped() {
                return Err(self.appender.error());
            }
            self.memory.wait_for_change(seen);
        }
    }

    /// Closes the filling row group's encoders and hands it to the appender, which holds
    /// at most as many row groups as there are threads to encode them: beyond that this
    /// waits.
    fn finish_filling(&mut self) -> Result<()> {
        let Some(row_group) = self.filling.take() else {
            return Ok(());
        };
        self.filling_rows = 0;
        row_group.close();
        if let (Some(job), Some(device)) = (&row_group.device, &mut self.device) {
            device.submit(Arc::clone(job));
        }
        self.appender.send(row_group)
    }
}

/// `batches` written as one Parquet file by the parallel writer under `properties`, with
/// device pages asked for: the file's bytes, then the column chunks the device built and
/// those it was to build that the CPU encoded. For tests of the device's pages (the GPU
/// tests) where a job's dictionary choices would make which chunks go there depend on
/// timing.
#[doc(hidden)]
pub fn write_with_device_pages(
    schema: SchemaRef,
    batches: &[RecordBatch],
    properties: WriterProperties,
) -> Result<(Vec<u8>, u64, u64)> {
    let pool: Arc<dyn datafusion::execution::memory_pool::MemoryPool> =
        Arc::new(datafusion::execution::memory_pool::UnboundedMemoryPool::default());
    let counts = Arc::new(PageCounts::default());
    let mut writer = ParallelFileWriter::try_new(
        Vec::new(),
        schema,
        properties,
        Arc::new(WriteMemory::new(&pool)),
        Some(Arc::clone(&counts)),
    )?;
    for batch in batches {
        writer.write(batch)?;
    }
    let bytes = writer.close()?;
    Ok((bytes, counts.device(), counts.host()))
}

/// The thread that appends full row groups to the file in order, each once its encoders
/// have finished, and lets go of their memory.
struct Appender<W: Write + Send + 'static> {
    sender: Option<SyncSender<RowGroupEncoders>>,
    thread: Option<JoinHandle<Result<SerializedFileWriter<SpliceSink<W>>>>>,
    /// Set when the file is abandoned (dropped unfinished): the appender then drops the
    /// row groups it still gets instead of waiting for their encoders.
    abandoned: Arc<AtomicBool>,
}

impl<W: Write + Send + 'static> Appender<W> {
    fn start(
        file: SerializedFileWriter<SpliceSink<W>>,
        splices: Arc<Splices>,
        memory: Arc<WriteMemory>,
        dictionaries: Arc<DictionaryChoice>,
    ) -> Result<Self> {
        // Row groups waiting: as many as can encode at once.
        let (sender, receiver) = sync_channel(rayon::current_num_threads().max(1));
        let abandoned = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&abandoned);
        let thread = std::thread::Builder::new()
            .name("gpusort-append".into())
            .spawn(move || append_in_order(file, &splices, receiver, memory, &dictionaries, &stop))
            .map_err(|e| ParquetError::General(format!("gpusort: starting the appender: {e}")))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
            abandoned,
        })
    }

    /// Hands `row_group` over; waits while the appender holds as many as it may.
    fn send(&mut self, row_group: RowGroupEncoders) -> Result<()> {
        let sent = self.sender.as_ref().map(|s| s.send(row_group));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(self.error()),
        }
    }

    /// The appender stopped early (it failed).
    fn stopped(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Why the appender stopped: waits for it and returns its error.
    fn error(&mut self) -> ParquetError {
        self.sender = None;
        match self.join() {
            Err(e) => e,
            Ok(_) => ParquetError::General("gpusort: the appender stopped early".into()),
        }
    }

    /// No more row groups: waits until every one is appended; the file, to close.
    fn finish(mut self) -> Result<SerializedFileWriter<SpliceSink<W>>> {
        self.sender = None;
        self.join()
    }

    fn join(&mut self) -> Result<SerializedFileWriter<SpliceSink<W>>> {
        let thread = self
            .thread
            .take()
            .ok_or_else(|| ParquetError::General("gpusort: the appender is gone".into()))?;
        thread.join().unwrap_or_else(|_| {
            Err(ParquetError::General(
                "gpusort: the appender panicked".into(),
            ))
        })
    }
}

impl<W: Write + Send + 'static> Drop for Appender<W> {
    fn drop(&mut self) {
        // An abandoned file (a finished one has no thread left): the appender lets go of
        // what it holds and ends.
        if self.thread.is_some() {
            self.abandoned.store(true, Ordering::Relaxed);
        }
        self.sender = None;
        let _ = self.join();
    }
}

/// The appender's loop: each row group's chunks, once encoded, written to `file` in the
/// order received (and shown to `dictionaries`); the file back once the sender is gone, or
/// the first error. Once `abandoned`, row groups are dropped as they come. The device's
/// chunks are announced to `splices` and written by the file's sink in one call each
/// (`splice.rs`).
fn append_in_order<W: Write + Send>(
    mut file: SerializedFileWriter<SpliceSink<W>>,
    splices: &Splices,
    row_groups: Receiver<RowGroupEncoders>,
    memory: Arc<WriteMemory>,
    dictionaries: &DictionaryChoice,
    abandoned: &AtomicBool,
) -> Result<SerializedFileWriter<SpliceSink<W>>> {
    let (mut waited, mut appending, mut appended) = (Duration::ZERO, Duration::ZERO, 0);
    for row_group in row_groups {
        if abandoned.load(Ordering::Relaxed) {
            // Its encoders finish their queues on their own; the memory goes with the
            // output.
            continue;
        }
        let started = Instant::now();
        let chunks: Vec<_> = row_group
            .columns
            .iter()
            .map(|leaf| row_group.wait(leaf))
            .collect();
        let encoded = Instant::now();
        waited += encoded - started;
        let bytes = row_group.encoded();
        let written = (|| {
            // Where the next chunk lands: parquet writes nothing between appended chunks.
            let mut offset = file.bytes_written() as u64;
            let mut announced = Vec::new();
            let mut writer = file.next_row_group()?;
            for (leaf, chunk) in chunks.into_iter().enumerate() {
                match chunk? {
                    EncodedLeaf::Cpu(chunk) => {
                        dictionaries.observe(leaf, &chunk.close().metadata);
                        offset += chunk.close().metadata.compressed_size() as u64;
                        chunk.append_to_row_group(&mut writer)?;
                    }
                    EncodedLeaf::Device(chunk) => {
                        if let Some(gave_up) = chunk.gave_up_dictionary {
                            dictionaries.learn(leaf, gave_up);
                        }
                        if !splice::enabled() {
                            writer.append_column(&chunk.bytes, chunk.close)?;
                            continue;
                        }
                        announced.push((leaf, offset));
                        offset = splice::append_chunk(
                            &mut writer,
                            splices,
                            offset,
                            &chunk.bytes,
                            chunk.close,
                        )?;
                    }
                }
            }
            let row_group = writer.close()?;
            splice::check_offsets(&row_group, &announced)
        })();
        drop(row_group);
        memory.appended(bytes);
        appending += encoded.elapsed();
        written?;
        appended += 1;
    }
    crate::trace::event(|| {
        format!(
            "appender: {appended} row groups; waited {:.0} ms for encoders, appended in {:.0} ms",
            waited.as_secs_f64() * 1e3,
            appending.as_secs_f64() * 1e3
        )
    });
    Ok(file)
}

/// The encoders of one row group's leaf columns: on the CPU, or in the row group's
/// device job.
struct RowGroupEncoders {
    columns: Vec<Leaf>,
    device: Option<Arc<DeviceJob>>,
}

/// Where one leaf of a row group is encoded.
enum Leaf {
    Cpu(Arc<ColumnEncoder>),
    /// Its slot in the row group's device job.
    Device(usize),
}

impl RowGroupEncoders {
    /// The encoders of a row group: `device` leaves in a job of their own (their writers
    /// kept there, in case the device cannot take them), the others on the CPU.
    fn new(
        writers: Vec<ArrowColumnWriter>,
        device: Vec<DeviceSlot>,
        memory: &Arc<WriteMemory>,
    ) -> Result<Self> {
        let mut slots = device.into_iter().peekable();
        let mut taken = Vec::new();
        let mut columns = Vec::with_capacity(writers.len());
        for (leaf, writer) in writers.into_iter().enumerate() {
            if slots.peek().is_some_and(|slot| slot.leaf == leaf) {
                let slot = slots.next().expect("peeked");
                columns.push(Leaf::Device(taken.len()));
                taken.push((slot, writer));
            } else {
                columns.push(Leaf::Cpu(Arc::new(ColumnEncoder::new(
                    writer,
                    Arc::clone(memory),
                ))));
            }
        }
        if slots.next().is_some() {
            return Err(ParquetError::General(
                "gpusort: a device leaf past the last column".into(),
            ));
        }
        let device =
            (!taken.is_empty()).then(|| Arc::new(DeviceJob::new(taken, Arc::clone(memory))));
        Ok(Self { columns, device })
    }

    /// The device job's slot of `leaf`, if the device encodes it.
    fn device_slot(&self, leaf: usize) -> Option<usize> {
        match self.columns.get(leaf)? {
            Leaf::Device(slot) => Some(*slot),
            Leaf::Cpu(_) => None,
        }
    }

    fn close(&self) {
        for leaf in &self.columns {
            if let Leaf::Cpu(encoder) = leaf {
                encoder.close();
            }
        }
    }

    /// Waits for `leaf`'s chunk.
    fn wait(&self, leaf: &Leaf) -> Result<EncodedLeaf> {
        match leaf {
            Leaf::Cpu(encoder) => encoder.wait_chunk().map(EncodedLeaf::Cpu),
            Leaf::Device(slot) => self
                .device
                .as_ref()
                .expect("a device leaf's job")
                .wait(*slot),
        }
    }

    /// Bytes the row group's encoders hold.
    fn encoded(&self) -> usize {
        let cpu: usize = self
            .columns
            .iter()
            .map(|leaf| match leaf {
                Leaf::Cpu(encoder) => encoder.encoded(),
                Leaf::Device(_) => 0,
            })
            .sum();
        cpu + self.device.as_ref().map_or(0, |job| job.encoded())
    }
}

/// One leaf column of one row group: its writer and the leaves queued for it. At most one
/// rayon job drains the queue at a time, so leaves are written in the order queued.
struct ColumnEncoder {
    state: Mutex<EncoderState>,
    memory: Arc<WriteMemory>,
}

struct EncoderState {
    /// The writer; taken by the job draining the queue while it runs.
    writer: Option<ArrowColumnWriter>,
    /// Leaves waiting, with their bytes in the memory.
    queue: VecDeque<(ArrowLeafColumn, usize)>,
    /// A job is draining the queue.
    running: bool,
    /// No more leaves come: close the writer once the queue is empty.
    closing: bool,
    /// The closed column chunk, or the error that stopped this column.
    outcome: Option<Result<ArrowColumnChunk>>,
    /// Bytes the writer holds (its `memory_size` after the last write), counted in the
    /// memory until the row group is appended.
    encoded: usize,
}

impl EncoderState {
    /// All leaves written and the writer closed (or failed with nothing left queued).
    fn finished(&self) -> bool {
        self.closing && !self.running && self.queue.is_empty() && self.outcome.is_some()
    }
}

impl ColumnEncoder {
    fn new(writer: ArrowColumnWriter, memory: Arc<WriteMemory>) -> Self {
        Self {
            state: Mutex::new(EncoderState {
                writer: Some(writer),
                queue: VecDeque::new(),
                running: false,
                closing: false,
                outcome: None,
                encoded: 0,
            }),
            memory,
        }
    }

    fn lock(&self) -> MutexGuard<'_, EncoderState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `leaf` (counted as `bytes` queued); dropped at once if this column failed.
    fn push(self: &Arc<Self>, leaf: ArrowLeafColumn, bytes: usize) {
        let mut state = self.lock();
        if state.outcome.is_some() {
            let encoded = state.encoded;
            drop(state);
            self.memory.leaf_done(bytes, encoded, encoded);
            return;
        }
        state.queue.push_back((leaf, bytes));
        self.start(&mut state);
    }

    /// No more leaves: the writer closes once what is queued is written.
    fn close(self: &Arc<Self>) {
        let mut state = self.lock();
        state.closing = true;
        self.start(&mut state);
    }

    fn start(self: &Arc<Self>, state: &mut EncoderState) {
        if !state.running {
            state.running = true;
            let encoder = Arc::clone(self);
            rayon::spawn(move || encoder.drain());
        }
    }

    /// Writes queued leaves in order until the queue is empty; closes the writer when asked.
    fn drain(&self) {
        let mut writer = self.lock().writer.take();
        loop {
            let mut state = self.lock();
            let Some((leaf, bytes)) = state.queue.pop_front() else {
                if state.closing && state.outcome.is_none() {
                    drop(state);
                    let chunk = match writer.take() {
                        Some(w) => without_panics(|| w.close()),
                        None => Err(ParquetError::General("a column writer went missing".into())),
                    };
                    self.lock().outcome = Some(chunk);
                    continue;
                }
                state.writer = writer;
                state.running = false;
                drop(state);
                self.memory.encoder_done();
                return;
            };
            drop(state);
            let written = match writer.as_mut() {
                Some(w) => without_panics(|| w.write(&leaf)),
                None => Ok(()),
            };
            drop(leaf);
            let now = writer.as_ref().map_or(0, |w| w.memory_size());
            let mut state = self.lock();
            let before = std::mem::replace(&mut state.encoded, now);
            if let Err(e) = written {
                state.outcome = Some(Err(e));
                writer = None;
            }
            drop(state);
            self.memory.leaf_done(bytes, before, now);
        }
    }

    /// Waits until every leaf is written and the writer closed; the chunk or the error.
    fn wait_chunk(&self) -> Result<ArrowColumnChunk> {
        loop {
            let seen = self.memory.changes();
            {
                let mut state = self.lock();
                if state.finished() {
                    return state.outcome.take().expect("a finished encoder's outcome");
                }
            }
            self.memory.wait_for_change(seen);
        }
    }

    fn encoded(&self) -> usize {
        self.lock().encoded
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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        ArrayRef, Float64Array, Int64Array, ListArray, StringViewArray,
    };
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use datafusion::parquet::basic::{Compression, ZstdLevel};
    use datafusion::parquet::file::metadata::RowGroupMetaData;
    use std::sync::mpsc::sync_channel;

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

    /// Batches of a flat and a nested column, with nulls and strings of every length.
    fn batches(count: usize, rows: usize) -> (SchemaRef, Vec<RecordBatch>) {
        let item = Arc::new(Field::new("item", DataType::Int64, true));
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8View, true),
            Field::new("x", DataType::Float64, true),
            Field::new("l", DataType::List(item), true),
        ]));
        let batches = (0..count)
            .map(|b| {
                let base = (b * rows) as i64;
                let k = Int64Array::from_iter_values(base..base + rows as i64);
                let s: StringViewArray = (0..rows)
                    .map(|i| (i % 7 != 0).then(|| "v".repeat((i * 13 + b) % 40)))
                    .collect();
                let x: Float64Array = (0..rows)
                    .map(|i| (i % 5 != 0).then_some(i as f64 * 0.25))
                    .collect();
                let l =
                    ListArray::from_iter_primitive::<Int64Type, _, _>((0..rows).map(|i| {
                        (i % 3 != 0).then(|| (0..(i % 4) as i64).map(|v| Some(v + base)))
                    }));
                let columns: Vec<ArrayRef> =
                    vec![Arc::new(k), Arc::new(s), Arc::new(x), Arc::new(l)];
                RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
            })
            .collect();
        (schema, batches)
    }

    fn properties(row_group_rows: usize) -> WriterProperties {
        WriterProperties::builder()
            .set_max_row_group_row_count(Some(row_group_rows))
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap()))
            .build()
    }

    fn write_parallel(
        schema: &SchemaRef,
        batches: &[RecordBatch],
        row_group_rows: usize,
        pool: &Arc<dyn MemoryPool>,
    ) -> Vec<u8> {
        let memory = Arc::new(WriteMemory::new(pool));
        let mut writer = ParallelFileWriter::try_new(
            Vec::new(),
            Arc::clone(schema),
            properties(row_group_rows),
            memory,
            None,
        )
        .unwrap();
        for batch in batches {
            writer.write(batch).unwrap();
        }
        writer.close().unwrap()
    }

    #[test]
    fn the_file_is_the_one_a_sequential_writer_writes() {
        let (schema, batches) = batches(23, 1000);
        let mut sequential = Vec::new();
        let mut writer =
            ArrowWriter::try_new(&mut sequential, Arc::clone(&schema), Some(properties(4096)))
                .unwrap();
        for batch in &batches {
            writer.write(batch).unwrap();
        }
        writer.close().unwrap();
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let parallel = write_parallel(&schema, &batches, 4096, &pool);
        assert!(parallel == sequential, "the bytes differ");
    }

    #[test]
    fn a_pool_smaller_than_one_batch_still_writes_every_row_and_gives_its_memory_back() {
        let (schema, batches) = batches(9, 3000);
        // Smaller than the writer's floor and than one batch: one batch queued at a time.
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(64 << 10));
        let bytes = write_parallel(&schema, &batches, 5000, &pool);
        // The last encoder job lets go of the memory just after the writer saw it finish.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while pool.reserved() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(pool.reserved(), 0);
        let (read, _) = read_back(&bytes, &schema);
        let written = datafusion::arrow::compute::concat_batches(&schema, &batches).unwrap();
        assert_eq!(read, written);
    }

    /// The rows of the Parquet file `bytes`, in one batch, and its row groups.
    fn read_back(bytes: &[u8], schema: &SchemaRef) -> (RecordBatch, Vec<RowGroupMetaData>) {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        let row_groups = reader.metadata().row_groups().to_vec();
        let read: Vec<RecordBatch> = reader
            .build()
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        let read = datafusion::arrow::compute::concat_batches(schema, &read).unwrap();
        (read, row_groups)
    }

    #[test]
    fn a_column_whose_dictionary_gave_up_goes_without_one_and_reads_back_the_same() {
        // The appender holds at most a thread's worth of row groups, so with several times
        // that many the later ones start knowing what the first ones did.
        let (schema, batches) = batches(64.max(4 * rayon::current_num_threads()), 500);
        // A dictionary of 64 values at most: `k` (distinct) gives it up in every row group.
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(500))
            .set_dictionary_page_size_limit(512)
            .build();
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let mut writer = ParallelFileWriter::try_new(
            Vec::new(),
            Arc::clone(&schema),
            properties,
            Arc::new(WriteMemory::new(&pool)),
            None,
        )
        .unwrap();
        for batch in &batches {
            writer.write(batch).unwrap();
        }
        let (read, row_groups) = read_back(&writer.close().unwrap(), &schema);
        let written = datafusion::arrow::compute::concat_batches(&schema, &batches).unwrap();
        assert_eq!(read, written);
        // The later row groups go without a dictionary for `k`; every probe tries one.
        let k_has_dictionary: Vec<bool> = row_groups
            .iter()
            .map(|g| g.column(0).dictionary_page_offset().is_some())
            .collect();
        assert!(k_has_dictionary
            .iter()
            .step_by(super::super::encodings::PROBE_EVERY)
            .all(|d| *d));
        assert!(k_has_dictionary.iter().any(|d| !d), "{k_has_dictionary:?}");
    }

    /// Device pages asked for where the properties allow them (no dictionary, Snappy):
    /// with a device, its pages; without one (CI), the CPU writers the row group kept. The
    /// file reads back the same either way, and its memory goes back.
    #[test]
    fn device_pages_asked_for_write_every_row_with_or_without_a_device() {
        let (schema, batches) = batches(9, 3000);
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(5000))
            .set_dictionary_enabled(false)
            .set_compression(Compression::SNAPPY)
            .build();
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let counts = Arc::new(PageCounts::default());
        let mut writer = ParallelFileWriter::try_new(
            Vec::new(),
            Arc::clone(&schema),
            properties,
            Arc::new(WriteMemory::new(&pool)),
            Some(Arc::clone(&counts)),
        )
        .unwrap();
        // `k` (Int64), `s` (Utf8View) and `x` (Float64) are the device's; `l` (a list) the
        // CPU's.
        let taken: Vec<bool> = writer
            .device
            .as_ref()
            .unwrap()
            .leaves
            .iter()
            .map(Option::is_some)
            .collect();
        assert_eq!(taken, vec![true, true, true, false]);
        for batch in &batches {
            writer.write(batch).unwrap();
        }
        let (read, row_groups) = read_back(&writer.close().unwrap(), &schema);
        let written = datafusion::arrow::compute::concat_batches(&schema, &batches).unwrap();
        assert_eq!(read, written);
        assert_eq!(row_groups.len(), 6);
        // Three leaves a row group, on the device or (without one) on the CPU.
        assert_eq!(counts.device() + counts.host(), 18);
        if crate::cuda::runtime().is_err() {
            assert_eq!(counts.device(), 0);
        }
        // The same by column: `k`, `s` and `x`, six chunks each, no dictionary asked for.
        let by_column = counts.by_column();
        let names: Vec<&str> = by_column.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, vec!["k", "s", "x"]);
        for (name, column) in &by_column {
            assert_eq!(column.device + column.host, 6, "{name}");
            assert_eq!(column.dictionary, 0, "{name}");
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while pool.reserved() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn a_writer_dropped_unfinished_lets_go_of_its_memory() {
        let (schema, batches) = batches(12, 2000);
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let memory = Arc::new(WriteMemory::new(&pool));
        let mut writer = ParallelFileWriter::try_new(
            Vec::new(),
            Arc::clone(&schema),
            properties(3000),
            memory,
            None,
        )
        .unwrap();
        // Full row groups handed to the appender, and one still filling.
        for batch in &batches[..10] {
            writer.write(batch).unwrap();
        }
        drop(writer);
        // The encoders still draining hold the last references to the memory.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while pool.reserved() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(pool.reserved(), 0);
    }
}
