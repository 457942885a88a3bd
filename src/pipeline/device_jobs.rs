//! The device's share of a Parquet file's row groups: the leaves of each row group whose
//! pages the device builds ([`device_chunks`]), gathered as the rows arrive and encoded in
//! one job per row group, on [`WORKERS`] threads of the file's own: a job's host work (its
//! columns made contiguous, statistics, headers) overlaps the device work of the others,
//! which take turns on the device. Where the
//! device cannot (none, its kernels missing, a failure), the job encodes the same leaves
//! with the CPU writers the row group made for them, so the file is always written.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{FieldRef, SchemaRef};
use datafusion::parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter,
};
use datafusion::parquet::errors::{ParquetError, Result};
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::parquet::schema::types::{ColumnDescPtr, SchemaDescriptor};
use rayon::prelude::*;

use super::device_chunks::{self, DeviceChunk, DeviceLayout, DeviceLeaf};
use super::write_memory::WriteMemory;
use crate::gather::{ResidentColumns, ResidentPart};

/// A leaf's column chunk, from a CPU writer or built on the device.
pub(super) enum EncodedLeaf {
    Cpu(ArrowColumnChunk),
    Device(DeviceChunk),
}

/// Column chunks of an output (every file) whose pages the device was asked to build, by
/// column: how many it built, and how many the CPU encoded instead.
#[derive(Debug, Default)]
pub(super) struct PageCounts {
    /// By leaf (in schema order): its path and its chunks.
    columns: Mutex<Vec<Option<(String, ColumnPageCounts)>>>,
}

/// One column's chunks whose pages the device was asked to build.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ColumnPageCounts {
    /// Built on the device.
    pub device: u64,
    /// Of those, with a dictionary.
    pub dictionary: u64,
    /// Of those, built from the sort's own copy of the column on the device (the rows
    /// never came to the host).
    pub resident: u64,
    /// Encoded by the CPU instead (no device, or a failure).
    pub host: u64,
}

impl PageCounts {
    /// Chunks built on the device.
    pub(super) fn device(&self) -> u64 {
        self.by_column().iter().map(|(_, c)| c.device).sum()
    }

    /// Chunks built on the device from the sort's copy of their column there.
    pub(super) fn resident(&self) -> u64 {
        self.by_column().iter().map(|(_, c)| c.resident).sum()
    }

    /// Chunks the device was to build and the CPU encoded (no device, or a failure).
    pub(super) fn host(&self) -> u64 {
        self.by_column().iter().map(|(_, c)| c.host).sum()
    }

    /// The columns the device was asked to build pages of, in schema order.
    pub(super) fn by_column(&self) -> Vec<(String, ColumnPageCounts)> {
        let columns = self.columns.lock().unwrap_or_else(|e| e.into_inner());
        columns.iter().flatten().cloned().collect()
    }

    /// Counts one chunk of `slot`'s leaf: built on the device (with a dictionary or not)
    /// or by the CPU.
    fn count(&self, slot: &DeviceSlot, chunk: Option<&DeviceChunk>) {
        let mut columns = self.columns.lock().unwrap_or_else(|e| e.into_inner());
        if columns.len() <= slot.leaf {
            columns.resize(slot.leaf + 1, None);
        }
        let (_, counts) = columns[slot.leaf]
            .get_or_insert_with(|| (slot.descr.path().string(), Default::default()));
        match chunk {
            Some(chunk) => {
                counts.device += 1;
                if chunk.close.metadata.dictionary_page_offset().is_some() {
                    counts.dictionary += 1;
                }
                if chunk.resident {
                    counts.resident += 1;
                }
            }
            None => counts.host += 1,
        }
    }
}

/// Threads running one file's device jobs.
const WORKERS: usize = 4;

/// The channel to a file's device threads, and the threads.
type Workers = (Sender<Arc<DeviceJob>>, Vec<JoinHandle<()>>);

/// The leaves of a file the device may take, and the threads its jobs run on.
pub(super) struct DevicePages {
    /// Per leaf: its field, column and layout where the device takes its type.
    pub(super) leaves: Vec<Option<(FieldRef, ColumnDescPtr, DeviceLayout)>>,
    worker: Option<Workers>,
    /// Counted as each job ends.
    counts: Arc<PageCounts>,
}

impl DevicePages {
    /// The leaves of `schema` (whose Parquet columns are `columns`) the device takes:
    /// top-level columns of one leaf whose type has a [`DeviceLayout`].
    pub(super) fn new(
        schema: &SchemaRef,
        columns: &SchemaDescriptor,
        counts: Arc<PageCounts>,
    ) -> Self {
        let mut leaves = vec![None; columns.num_columns()];
        let mut leaf = 0;
        for field in schema.fields() {
            let first = leaf;
            while leaf < columns.num_columns()
                && columns.column(leaf).path().parts()[0] == *field.name()
            {
                leaf += 1;
            }
            if leaf == first + 1 {
                let descr = columns.column(first);
                if descr.path().parts().len() == 1 {
                    leaves[first] = device_chunks::device_layout(field.data_type(), &descr)
                        .map(|layout| (Arc::clone(field), descr, layout));
                }
            }
        }
        Self {
            leaves,
            worker: None,
            counts,
        }
    }

    /// Hands `job` to the file's device threads (started the first time), which take the
    /// jobs in order; where no thread can start, runs it here.
    pub(super) fn submit(&mut self, job: Arc<DeviceJob>) {
        if self.worker.is_none() {
            let (sender, receiver) = channel::<Arc<DeviceJob>>();
            let receiver = Arc::new(Mutex::new(receiver));
            let threads: Vec<JoinHandle<()>> = (0..WORKERS)
                .filter_map(|_| {
                    let (receiver, counts) = (Arc::clone(&receiver), Arc::clone(&self.counts));
                    std::thread::Builder::new()
                        .name("gpusort-device-pages".into())
                        .spawn(move || loop {
                            let next = receiver.lock().unwrap_or_else(|e| e.into_inner()).recv();
                            match next {
                                Ok(job) => job.run(&counts),
                                Err(_) => return,
                            }
                        })
                        .ok()
                })
                .collect();
            if !threads.is_empty() {
                self.worker = Some((sender, threads));
            }
        }
        match &self.worker {
            Some((sender, _)) => {
                if let Err(returned) = sender.send(job) {
                    returned.0.run(&self.counts);
                }
            }
            None => job.run(&self.counts),
        }
    }
}

/// The top-level columns of `schema` (whose Parquet columns are `columns`) whose pages the
/// device builds under `properties` from a sorted run's own copy on the device: those it
/// takes (`src/cuda/payload/resident.rs`; a run holds fixed-width and view columns there), byte
/// arrays only with `byte_arrays`.
pub(super) fn resident_columns(
    schema: &SchemaRef,
    columns: &SchemaDescriptor,
    properties: &WriterProperties,
    byte_arrays: bool,
) -> Vec<usize> {
    let pages = DevicePages::new(schema, columns, Arc::default());
    let mut taken = Vec::new();
    let mut leaf = 0;
    for (index, field) in schema.fields().iter().enumerate() {
        let first = leaf;
        while leaf < columns.num_columns()
            && columns.column(leaf).path().parts()[0] == *field.name()
        {
            leaf += 1;
        }
        if leaf != first + 1 {
            continue;
        }
        if let Some((_, descr, layout)) = pages.leaves[first].as_ref() {
            if (byte_arrays || !layout.byte_array())
                && device_chunks::properties_allow(properties, descr)
            {
                taken.push(index);
            }
        }
    }
    taken
}

impl Drop for DevicePages {
    fn drop(&mut self) {
        if let Some((sender, threads)) = self.worker.take() {
            drop(sender);
            for thread in threads {
                let _ = thread.join();
            }
        }
    }
}

/// A leaf of one row group that goes to the device, with that row group's properties.
#[derive(Debug, Clone)]
pub(super) struct DeviceSlot {
    pub(super) leaf: usize,
    pub(super) field: FieldRef,
    pub(super) descr: ColumnDescPtr,
    pub(super) layout: DeviceLayout,
    pub(super) properties: WriterProperties,
}

/// The device leaves of one row group: their arrays as they arrive, then their chunks.
pub(super) struct DeviceJob {
    slots: Vec<DeviceSlot>,
    /// Each slot's CPU writer, for when the device cannot take the job.
    writers: Mutex<Vec<Option<ArrowColumnWriter>>>,
    state: Mutex<JobState>,
    memory: Arc<WriteMemory>,
}

/// Rows of a slot's column as they arrived: arrays, or ranges of a run that left the
/// column on the device.
#[derive(Debug, Clone)]
enum SlotPart {
    Array(ArrayRef),
    Resident(ResidentPart),
}

struct JobState {
    arrays: Vec<Vec<SlotPart>>,
    /// Bytes of `arrays`, counted as queued in the memory.
    queued: usize,
    /// Each slot's chunk once the job ran (taken by the appender).
    outcome: Option<Vec<Option<Result<EncodedLeaf>>>>,
    /// Bytes the chunks hold, counted as encoded in the memory.
    encoded: usize,
}

impl DeviceJob {
    pub(super) fn new(
        taken: Vec<(DeviceSlot, ArrowColumnWriter)>,
        memory: Arc<WriteMemory>,
    ) -> Self {
        let (slots, writers): (Vec<_>, Vec<_>) = taken
            .into_iter()
            .map(|(slot, writer)| (slot, Some(writer)))
            .unzip();
        Self {
            state: Mutex::new(JobState {
                arrays: vec![Vec::new(); slots.len()],
                queued: 0,
                outcome: None,
                encoded: 0,
            }),
            slots,
            writers: Mutex::new(writers),
            memory,
        }
    }

    fn lock(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds rows of slot `slot`'s column (`bytes` of them, already counted as queued).
    pub(super) fn push(&self, slot: usize, array: ArrayRef, bytes: usize) {
        let mut state = self.lock();
        state.arrays[slot].push(SlotPart::Array(array));
        state.queued += bytes;
    }

    /// Adds rows of slot `slot`'s column that a run kept on the device.
    pub(super) fn push_resident(&self, slot: usize, part: ResidentPart) {
        self.lock().arrays[slot].push(SlotPart::Resident(part));
    }

    /// Encodes the row group's device leaves: on the device, else with their CPU writers.
    pub(super) fn run(&self, counts: &PageCounts) {
        let (arrays, queued) = {
            let mut state = self.lock();
            (std::mem::take(&mut state.arrays), state.queued)
        };
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| self.encode(arrays)))
            .unwrap_or_else(|_| {
                let error = || {
                    Err(ParquetError::General(
                        "gpusort: encoding device pages panicked".into(),
                    ))
                };
                self.slots.iter().map(|_| error()).collect()
            });
        for (slot, chunk) in self.slots.iter().zip(&outcome) {
            let device = match chunk {
                Ok(EncodedLeaf::Device(chunk)) => Some(chunk),
                _ => None,
            };
            counts.count(slot, device);
        }
        let encoded = outcome
            .iter()
            .map(|chunk| match chunk {
                Ok(EncodedLeaf::Device(chunk)) => chunk.bytes.len(),
                Ok(EncodedLeaf::Cpu(chunk)) => chunk.close().bytes_written as usize,
                Err(_) => 0,
            })
            .sum();
        // The memory counts the chunks as encoded before the appender can see them (it
        // lets go of what it appended as soon as it has).
        self.memory.leaf_done(queued, 0, encoded);
        {
            let mut state = self.lock();
            state.outcome = Some(outcome.into_iter().map(Some).collect());
            state.encoded = encoded;
            state.queued = 0;
        }
        self.memory.encoder_done();
    }

    fn encode(&self, mut parts: Vec<Vec<SlotPart>>) -> Vec<Result<EncodedLeaf>> {
        let mut outcome: Vec<Option<Result<EncodedLeaf>>> =
            (0..parts.len()).map(|_| None).collect();
        // The slots whose rows a run kept on the device: their pages built from there.
        if let Some((run, first, rows, taken)) = resident_range(&parts) {
            let leaves: Vec<(ColumnDescPtr, DeviceLayout, usize)> = taken
                .iter()
                .map(|&(slot, column)| {
                    let slot = &self.slots[slot];
                    (Arc::clone(&slot.descr), slot.layout, column)
                })
                .collect();
            let properties = &self.slots[0].properties;
            match device_chunks::encode_resident(run.as_ref(), first, rows, &leaves, properties) {
                Ok(chunks) => {
                    for (&(slot, _), chunk) in taken.iter().zip(chunks) {
                        outcome[slot] = Some(Ok(EncodedLeaf::Device(chunk)));
                    }
                }
                Err(reason) => crate::trace::event(|| {
                    format!("writer: resident rows' pages not built on the device ({reason})")
                }),
            }
        }
        // The others (and those, where the device could not) from arrays on the host.
        let rest: Vec<usize> = (0..parts.len())
            .filter(|&slot| outcome[slot].is_none())
            .collect();
        if !rest.is_empty() {
            let rest_parts = rest
                .iter()
                .map(|&slot| std::mem::take(&mut parts[slot]))
                .collect();
            for (&slot, result) in rest.iter().zip(self.encode_arrays(&rest, rest_parts)) {
                outcome[slot] = Some(result);
            }
        }
        outcome
            .into_iter()
            .map(|o| o.expect("every slot encoded"))
            .collect()
    }

    /// The chunks of slots `taken` (in order), whose rows are `parts` (resident ones
    /// brought to the host first): pages built on the device, else with their CPU writers.
    fn encode_arrays(
        &self,
        taken: &[usize],
        parts: Vec<Vec<SlotPart>>,
    ) -> Vec<Result<EncodedLeaf>> {
        let properties = &self.slots[0].properties;
        let slots: Vec<&DeviceSlot> = taken.iter().map(|&slot| &self.slots[slot]).collect();
        let arrays = match materialize(parts) {
            Ok(arrays) => arrays,
            Err(e) => {
                return slots
                    .iter()
                    .map(|_| Err(ParquetError::General(e.to_string())))
                    .collect()
            }
        };
        let started = std::time::Instant::now();
        let columns: Result<Vec<ArrayRef>> = arrays
            .par_iter()
            .map(|parts| {
                let parts: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
                concat(&parts).map_err(|e| ParquetError::General(e.to_string()))
            })
            .collect();
        let columns = match columns {
            Ok(columns) => columns,
            Err(e) => {
                return slots
                    .iter()
                    .map(|_| Err(ParquetError::General(e.to_string())))
                    .collect()
            }
        };
        let leaves: Vec<DeviceLeaf> = slots
            .iter()
            .zip(&columns)
            .map(|(slot, array)| DeviceLeaf {
                array: Arc::clone(array),
                descr: Arc::clone(&slot.descr),
                layout: slot.layout,
            })
            .collect();
        crate::trace::event(|| {
            format!(
                "writer: {} arrays of {} leaves concatenated in {:.1} ms",
                arrays.iter().map(Vec::len).sum::<usize>(),
                arrays.len(),
                started.elapsed().as_secs_f64() * 1e3
            )
        });
        match device_chunks::encode_on_device(&leaves, properties) {
            Ok(chunks) => {
                crate::trace::event(|| {
                    format!(
                        "writer: {} column chunks' pages built on the device",
                        chunks.len()
                    )
                });
                chunks
                    .into_iter()
                    .map(|c| Ok(EncodedLeaf::Device(c)))
                    .collect()
            }
            Err(reason) => {
                crate::trace::event(|| format!("writer: pages encoded on the host ({reason})"));
                let writers: Vec<Option<ArrowColumnWriter>> = {
                    let mut writers = self.writers.lock().unwrap_or_else(|e| e.into_inner());
                    taken.iter().map(|&slot| writers[slot].take()).collect()
                };
                // The columns at once, as the CPU's encoders of a row group run.
                slots
                    .par_iter()
                    .zip(writers)
                    .zip(&columns)
                    .map(|((slot, writer), array)| {
                        let mut writer = writer.ok_or_else(|| {
                            ParquetError::General("gpusort: a column writer went missing".into())
                        })?;
                        for leaf in compute_leaves(&slot.field, array)? {
                            writer.write(&leaf)?;
                        }
                        writer.close().map(EncodedLeaf::Cpu)
                    })
                    .collect()
            }
        }
    }

    /// Waits until the job ran; slot `slot`'s chunk or error.
    pub(super) fn wait(&self, slot: usize) -> Result<EncodedLeaf> {
        loop {
            let seen = self.memory.changes();
            {
                let mut state = self.lock();
                if let Some(outcome) = state.outcome.as_mut() {
                    return outcome[slot].take().unwrap_or_else(|| {
                        Err(ParquetError::General(
                            "gpusort: a device chunk taken twice".into(),
                        ))
                    });
                }
            }
            self.memory.wait_for_change(seen);
        }
    }

    /// Bytes the job's chunks hold.
    pub(super) fn encoded(&self) -> usize {
        self.lock().encoded
    }
}

/// The slots whose parts are one range of rows of one run, the same for each (the first
/// such slot's): the run, the range, and each slot with its column's place in the run.
#[allow(clippy::type_complexity)]
fn resident_range(
    parts: &[Vec<SlotPart>],
) -> Option<(Arc<dyn ResidentColumns>, usize, usize, Vec<(usize, usize)>)> {
    let mut found: Option<(&Arc<dyn ResidentColumns>, usize, usize)> = None;
    let mut taken = Vec::new();
    for (slot, slot_parts) in parts.iter().enumerate() {
        let Some((run, column, first, rows)) = slot_range(slot_parts) else {
            continue;
        };
        match found {
            None => found = Some((run, first, rows)),
            Some((r, f, n)) if Arc::ptr_eq(r, run) && f == first && n == rows => {}
            Some(_) => continue,
        }
        taken.push((slot, column));
    }
    found.map(|(run, first, rows)| (Arc::clone(run), first, rows, taken))
}

/// The run, column, first row and rows of a slot's parts where they are one range of
/// one column of one run, in order.
fn slot_range(parts: &[SlotPart]) -> Option<(&Arc<dyn ResidentColumns>, usize, usize, usize)> {
    let mut range: Option<(&Arc<dyn ResidentColumns>, usize, usize, usize)> = None;
    for part in parts {
        let SlotPart::Resident(part) = part else {
            return None;
        };
        range = match range {
            None => Some((&part.run, part.column, part.first, part.rows)),
            Some((run, column, first, rows))
                if Arc::ptr_eq(run, &part.run)
                    && column == part.column
                    && first + rows == part.first =>
            {
                Some((run, column, first, rows + part.rows))
            }
            Some(_) => return None,
        };
    }
    range.filter(|(.., rows)| *rows > 0)
}

/// Each slot's parts as arrays: the resident ones brought to the host from their run.
fn materialize(parts: Vec<Vec<SlotPart>>) -> datafusion::error::Result<Vec<Vec<ArrayRef>>> {
    parts
        .into_iter()
        .map(|slot| {
            slot.into_iter()
                .map(|part| match part {
                    SlotPart::Array(array) => Ok(array),
                    SlotPart::Resident(part) => part.run.column(part.column, part.first, part.rows),
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Run(Vec<usize>);

    impl ResidentColumns for Run {
        fn columns(&self) -> &[usize] {
            &self.0
        }
        fn rows(&self) -> usize {
            100
        }
        fn column(
            &self,
            _column: usize,
            first: usize,
            rows: usize,
        ) -> datafusion::error::Result<ArrayRef> {
            let values = (first as i64..(first + rows) as i64).collect::<Vec<_>>();
            Ok(Arc::new(datafusion::arrow::array::Int64Array::from(values)))
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    fn part(run: &Arc<dyn ResidentColumns>, column: usize, first: usize, rows: usize) -> SlotPart {
        SlotPart::Resident(ResidentPart {
            run: Arc::clone(run),
            column,
            first,
            rows,
        })
    }

    /// A row group's slots whose rows are one range of one run go to the device together;
    /// a slot of arrays, of another range, of another run or of rows out of order does not.
    #[test]
    fn slots_of_one_range_of_one_run_are_taken_together() {
        let run: Arc<dyn ResidentColumns> = Arc::new(Run(vec![0, 2, 3]));
        let other: Arc<dyn ResidentColumns> = Arc::new(Run(vec![1]));
        let array = || SlotPart::Array(run.column(0, 0, 5).unwrap());
        let parts = vec![
            vec![part(&run, 0, 10, 5), part(&run, 0, 15, 5)],
            vec![array()],
            vec![part(&run, 1, 10, 10)],
            vec![part(&run, 2, 10, 9)],
            vec![part(&other, 0, 10, 10)],
            vec![part(&run, 2, 15, 5), part(&run, 2, 10, 5)],
            vec![part(&run, 2, 10, 5), array()],
        ];
        let (found, first, rows, taken) = resident_range(&parts).unwrap();
        assert!(Arc::ptr_eq(&found, &run));
        assert_eq!((first, rows), (10, 10));
        assert_eq!(taken, vec![(0, 0), (2, 1)]);
        // No resident slot: nothing taken.
        assert!(resident_range(&[vec![array()], vec![]]).is_none());
        let arrays = materialize(vec![vec![part(&run, 1, 3, 2), array()]]).unwrap();
        assert_eq!(
            arrays[0].iter().map(|a| a.len()).collect::<Vec<_>>(),
            [2, 5]
        );
    }
}
