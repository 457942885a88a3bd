//! The CUDA backend's early copy of a sort's payload columns ([`EarlyUpload`], an
//! [`EarlyColumns`]): each input partition's batches go up in groups while the input is
//! still being read, so that at the end of the sort the payload is already on the device
//! and only a device-to-device concatenation stands between the sorted permutation and
//! the gather. Without it, SF10 `lineitem`'s 16 payload columns (8.8 GB) crossed PCIe
//! after the scan, in 0.36 s (24 GB/s), while PCIe sat idle during the 1.6 s scan.
//!
//! ```text
//!  add(partition, batch)   the batch joins its partition's pending group; a group of
//!                          GROUP_BYTES goes to the uploader threads (each on a lane of the
//!                          device: `memory/lanes.rs`), one device piece per column
//!  input_ended             every pending group goes
//!  take_columns (the gather's upload, device lease held)
//!                          waits for the uploaders; per column, walks the run's arrays in
//!                          order through the groups that hold them and copies the pieces
//!                          end to end on the device; validity goes up from the host as
//!                          before (a bit per row)
//! ```
//!
//! Fixed-width columns go up whole (not narrowed: their time on PCIe is hidden behind the
//! scan); byte-like columns as views (`Utf8View`, `BinaryView`) numbered across the run as
//! the groups are made, each data buffer once, so the run's buffer table (`ViewData`)
//! points into whichever piece holds it. `Boolean` columns, and every column of a run that
//! spills, sorts in several runs or in pieces, or gathers on the host or another device, go
//! up as before; a backend with several usable devices makes no copy (its memory would send
//! the run to the least busy other one).
//!
//! Device memory: the pieces are charged to the device's budget as they are made, and all
//! of them together may hold at most half the backend's device limit (past it, the copy
//! stops and frees them). At the concatenation a column's pieces are freed once its copy
//! is done, so the peak is the payload and one column more.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::buffer::Buffer;
use datafusion::arrow;

use crate::cuda::columns::narrow::Narrowing;
use crate::cuda::columns::views::{data_buffers, upload_numbered_views, ViewData, VIEW_BYTES};
use crate::cuda::columns::{
    fixed_values, upload_bytes, upload_fixed, upload_validity, PayloadLayout, RawColumn,
};
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;
use crate::cuda::runtime::CudaRuntime;
use crate::cuda::tuning::MAX_EARLY_UPLOADERS;
use crate::gather::{hollow_array, EarlyColumns, RunRows};

/// Payload bytes of one partition's batches that go up as one group: large enough that a
/// group's copies move megabytes, small enough that what is pending when the input ends
/// (at most a group per partition) goes up in a few milliseconds.
const GROUP_BYTES: usize = 64 << 20;

/// Finds the device a copy goes to, with the most device bytes its pieces may hold;
/// `None` where there is none (called by the first uploader, so that the sort's input is
/// read while the device is still being opened).
pub(crate) type DeviceOf = Box<dyn Fn() -> Option<(Arc<CudaRuntime>, usize)> + Send + Sync>;

/// A copy of some input columns on one device, made as the batches arrive.
pub(crate) struct EarlyUpload {
    shared: Arc<Shared>,
    /// Per input partition: its batches not yet sent, and their payload bytes.
    pending: Mutex<Vec<(Vec<RecordBatch>, usize)>>,
    /// Where groups go to the uploaders (`None` once the input ended or the copy stopped).
    jobs: Mutex<Option<Sender<Group>>>,
    uploaders: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for EarlyUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EarlyUpload")
            .field("columns", &self.shared.columns)
            .finish()
    }
}

/// What the adding side and the uploaders share.
struct Shared {
    /// The columns copied: each one's index in the input and its layout (`Fixed`, `Views`).
    columns: Vec<(usize, PayloadLayout)>,
    device_of: DeviceOf,
    /// The device and the most bytes the pieces may hold there, once found.
    device: OnceLock<Option<(Arc<CudaRuntime>, usize)>>,
    state: Mutex<State>,
    /// Told when a group sent is done with (`State::in_flight` fell) or the copy stopped.
    settled: Condvar,
}

#[derive(Default)]
struct State {
    /// Why the copy stopped (nothing of it is used), once it did.
    stopped: Option<String>,
    /// Device bytes of the groups uploaded or being uploaded.
    bytes: usize,
    /// The groups on the device.
    uploaded: Vec<Uploaded>,
    /// Per column: the run numbers of the view data buffers seen so far (since the last
    /// take-over: the buffers named before it may be freed, and their addresses reused).
    numbering: Vec<HashMap<(usize, usize), u32>>,
    /// Per column: the view data buffers numbered in all (the next number).
    numbered: Vec<u32>,
    /// Groups sent to the uploaders and not yet done with.
    in_flight: usize,
    /// The host's copies of some columns were replaced ([`EarlyColumns::take_over`]): the
    /// copy is the only one.
    held: bool,
    /// The stand-ins put in the host's place (by address), not replaced again.
    hollow: HashSet<usize>,
    /// Time the uploaders spent.
    busy: Duration,
}

/// One group of a partition's batches, for the uploaders.
struct Group {
    /// `[column][array]`: each column's arrays, in the partition's order.
    arrays: Vec<Vec<ArrayRef>>,
    /// Device bytes it takes.
    bytes: usize,
    /// `[column][array]`: for view columns, the run numbers of each array's data buffers.
    numbers: Vec<Vec<Vec<u32>>>,
    /// Per column: the data buffers first seen in this group, with their run numbers.
    new_buffers: Vec<Vec<(u32, Buffer)>>,
}

/// A group's columns on the device.
struct Uploaded {
    /// `[column][array]`: the arrays it holds (kept, so that their addresses name them).
    arrays: Vec<Vec<ArrayRef>>,
    pieces: Vec<Piece>,
}

/// One column of a group on the device.
struct Piece {
    /// Fixed-width values, or views, back to back (padded to 8 bytes).
    values: DeviceBuffer<u8>,
    /// Bytes of `values` that are values.
    len: usize,
    /// Bytes that crossed PCIe for it (fewer than `len` where the values went narrowed).
    sent: usize,
    /// Views: the data buffers first seen in the group.
    data: Option<DataPiece>,
}

/// The view data buffers first seen in a group, on the device.
struct DataPiece {
    /// The buffers back to back (padded to 8 bytes).
    bytes: DeviceBuffer<u8>,
    /// Bytes of `bytes` that are the buffers'.
    len: usize,
    /// Each buffer's run number and where it begins in `bytes`.
    starts: Vec<(u32, usize)>,
}

/// The columns [`EarlyUpload::take_columns`] put together, and what that took.
#[derive(Default)]
pub(super) struct Taken {
    /// Each column's index in the run and its buffers.
    pub(super) columns: HashMap<usize, RawColumn>,
    /// Bytes that crossed PCIe early for them.
    pub(super) early_bytes: usize,
    /// Bytes that crossed now (validity).
    pub(super) late_bytes: usize,
    /// Time the take waited for the uploaders.
    pub(super) waited: Duration,
}

/// The address that names an array.
fn address(array: &ArrayRef) -> usize {
    Arc::as_ptr(array) as *const () as usize
}

impl EarlyUpload {
    /// A copy of `columns` (each its index in the input and its layout) on the device that
    /// `device_of` finds.
    pub(crate) fn new(columns: Vec<(usize, PayloadLayout)>, device_of: DeviceOf) -> Self {
        let numbering = vec![HashMap::new(); columns.len()];
        let numbered = vec![0; columns.len()];
        Self {
            shared: Arc::new(Shared {
                columns,
                device_of,
                device: OnceLock::new(),
                state: Mutex::new(State {
                    numbering,
                    numbered,
                    ..State::default()
                }),
                settled: Condvar::new(),
            }),
            pending: Mutex::default(),
            jobs: Mutex::new(None),
            uploaders: Mutex::default(),
        }
    }

    /// The ordinal of the device it copies to, once found.
    pub(super) fn ordinal(&self) -> Option<usize> {
        let (runtime, _) = self.shared.device.get()?.as_ref()?;
        Some(runtime.ordinal())
    }

    /// Sends `batches` (one partition's, in order) to the uploaders as one group, starting
    /// them at the first.
    fn send(&self, batches: Vec<RecordBatch>) {
        let mut state = self.shared.lock();
        if state.stopped.is_some() {
            return;
        }
        let Some(group) = self.shared.group(&mut state, &batches) else {
            drop(state);
            self.stop("a batch without the columns of the first");
            return;
        };
        drop(state);
        let mut jobs = lock(&self.jobs);
        if jobs.is_none() {
            let (tx, rx) = channel();
            let rx = Arc::new(Mutex::new(rx));
            let mut uploaders = lock(&self.uploaders);
            // As many as the tuning may ask for: those past its count end at once.
            for i in 0..MAX_EARLY_UPLOADERS {
                let (shared, rx) = (Arc::clone(&self.shared), Arc::clone(&rx));
                let spawned = std::thread::Builder::new()
                    .name(format!("gpusort-early-{i}"))
                    .spawn(move || upload_groups(&shared, &rx, i));
                match spawned {
                    Ok(handle) => uploaders.push(handle),
                    Err(error) if uploaders.is_empty() => {
                        drop((uploaders, jobs));
                        self.stop(&format!("no uploader thread ({error})"));
                        return;
                    }
                    Err(_) => break,
                }
            }
            *jobs = Some(tx);
        }
        if let Some(tx) = jobs.as_ref() {
            self.shared.lock().in_flight += 1;
            // The uploaders only end once the sender is dropped.
            if tx.send(group).is_err() {
                self.shared.done_with_one();
            }
        }
    }

    /// Stops the copy (nothing of it is used) and frees what it holds on the device.
    fn stop(&self, why: &str) {
        stop_shared(&self.shared, why);
        lock(&self.pending).clear();
        lock(&self.jobs).take();
    }

    /// Waits for the uploaders to finish every group sent.
    fn wait_for_uploaders(&self) {
        lock(&self.jobs).take();
        let uploaders = std::mem::take(&mut *lock(&self.uploaders));
        for uploader in uploaders {
            if uploader.join().is_err() {
                self.stop("an uploader panicked");
            }
        }
    }

    /// The columns of `rows` (the run, on `device`, which holds its lease) of which this
    /// copy holds every array in the run's order, put together on the device; the others
    /// are left out (and go up as before). Only columns of layout `wanted` are taken.
    pub(super) fn take_columns(
        &self,
        device: &Device,
        staging: &mut Staging,
        rows: &RunRows,
        wanted: &[(usize, PayloadLayout)],
    ) -> CudaResult<Taken> {
        let waiting = Instant::now();
        self.input_ended();
        self.wait_for_uploaders();
        let mut taken = Taken {
            waited: waiting.elapsed(),
            ..Taken::default()
        };
        if self.ordinal() != Some(device.ordinal) {
            // The run went to another device (or the copy found none).
            self.stop("the run is sorted on another device");
            return Ok(taken);
        }
        let mut state = self.shared.lock();
        if let Some(why) = &state.stopped {
            crate::trace::event(|| format!("early upload: not used ({why})"));
            if state.held {
                return Err(CudaError::Inconsistent(format!(
                    "the device held the only copy of some input columns, and lost it ({why})"
                )));
            }
            return Ok(taken);
        }
        // Taken once: a later `abandon` finds nothing to let go.
        state.stopped = Some("taken by the run".to_string());
        let uploaded = std::mem::take(&mut state.uploaded);
        let (busy, groups) = (state.busy, uploaded.len());
        let buffers: Vec<usize> = state.numbered.iter().map(|&n| n as usize).collect();
        drop(state);
        let mut groups_of: Vec<Vec<Option<Piece>>> = (0..self.shared.columns.len())
            .map(|_| Vec::with_capacity(uploaded.len()))
            .collect();
        let mut arrays_of: Vec<Vec<Vec<ArrayRef>>> = vec![Vec::new(); self.shared.columns.len()];
        for group in uploaded {
            for (c, (pieces, arrays)) in group.pieces.into_iter().zip(group.arrays).enumerate() {
                groups_of[c].push(Some(pieces));
                arrays_of[c].push(arrays);
            }
        }
        for (c, &(index, layout)) in self.shared.columns.iter().enumerate() {
            if !wanted.contains(&(index, layout)) {
                continue;
            }
            let run_arrays = rows.column_arrays(index);
            // Every group, each once: a view names data that another group may hold.
            let walked = walk(&arrays_of[c], &run_arrays).filter(|o| o.len() == groups);
            let Some(order) = walked else {
                crate::trace::event(|| {
                    format!("early upload: column {index} not in the run's order")
                });
                continue;
            };
            let pieces: Vec<Piece> = order
                .iter()
                .map(|&g| groups_of[c][g].take().expect("each group once"))
                .collect();
            let early: usize = pieces.iter().map(|p| p.sent).sum();
            let built =
                concatenate(device, staging, layout, &pieces, buffers[c]).and_then(|column| {
                    let (validity, bytes) = upload_validity(device, staging, &run_arrays)?;
                    Ok((column, validity, bytes))
                });
            // The pieces are freed on their lanes' streams: the copies out of them first,
            // whether or not all of them were queued.
            let synchronized = device.synchronize();
            drop(pieces);
            let (column, validity, bytes) = match built.and_then(|b| synchronized.map(|_| b)) {
                Ok(built) => built,
                Err(error) if error.is_out_of_memory() => break,
                Err(other) => return Err(other),
            };
            taken.early_bytes += early;
            taken.late_bytes += bytes;
            let (values, view_data) = column;
            taken.columns.insert(
                index,
                RawColumn {
                    layout,
                    values: Arc::new(values),
                    validity,
                    view_data: view_data.map(Arc::new),
                },
            );
        }
        crate::trace::event(|| {
            format!(
                "early upload: {} of {} columns taken ({:.0} MB in {groups} groups, uploaders \
                 busy {:.0} ms; the take waited {:.1} ms for them)",
                taken.columns.len(),
                self.shared.columns.len(),
                taken.early_bytes as f64 / 1e6,
                busy.as_secs_f64() * 1e3,
                taken.waited.as_secs_f64() * 1e3,
            )
        });
        Ok(taken)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A group sent is done with (uploaded, skipped or failed).
    fn done_with_one(&self) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        drop(state);
        self.settled.notify_all();
    }

    /// Waits until every group sent is done with, or the copy stopped.
    fn wait_settled(&self) -> MutexGuard<'_, State> {
        let mut state = self.lock();
        while state.in_flight > 0 && state.stopped.is_none() {
            state = self.settled.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state
    }

    /// The device and the most bytes the pieces may hold there, found at the first call.
    fn device(&self) -> Option<&(Arc<CudaRuntime>, usize)> {
        self.device.get_or_init(|| (self.device_of)()).as_ref()
    }

    /// `batches` as a group of every copied column, numbering their view data buffers.
    /// `None` where a batch lacks a column or its type.
    fn group(&self, state: &mut State, batches: &[RecordBatch]) -> Option<Group> {
        let first = batches.first()?;
        let mut group = Group {
            bytes: 0,
            arrays: Vec::with_capacity(self.columns.len()),
            numbers: Vec::with_capacity(self.columns.len()),
            new_buffers: Vec::with_capacity(self.columns.len()),
        };
        let mut bytes = 0;
        for (c, &(index, layout)) in self.columns.iter().enumerate() {
            let data_type = first.columns().get(index)?.data_type();
            let arrays: Vec<ArrayRef> = batches
                .iter()
                .map(|b| b.columns().get(index).cloned())
                .collect::<Option<_>>()?;
            if arrays.iter().any(|a| a.data_type() != data_type) {
                return None;
            }
            let rows: usize = arrays.iter().map(|a| a.len()).sum();
            let (mut numbers, mut new_buffers) = (Vec::new(), Vec::new());
            match layout {
                PayloadLayout::Fixed(width) => bytes += rows * width,
                PayloadLayout::Views => {
                    bytes += rows * VIEW_BYTES;
                    let numbering = &mut state.numbering[c];
                    for array in &arrays {
                        let mut of_array = Vec::new();
                        for buffer in data_buffers(array) {
                            let key = (buffer.as_ptr() as usize, buffer.len());
                            let next = state.numbered[c];
                            let number = *numbering.entry(key).or_insert(next);
                            if number == next {
                                state.numbered[c] += 1;
                                bytes += buffer.len();
                                new_buffers.push((number, buffer));
                            }
                            of_array.push(number);
                        }
                        numbers.push(of_array);
                    }
                }
                PayloadLayout::Bits => return None,
            }
            group.arrays.push(arrays);
            group.numbers.push(numbers);
            group.new_buffers.push(new_buffers);
        }
        group.bytes = bytes;
        Some(group)
    }
}

impl EarlyColumns for EarlyUpload {
    fn add(&self, partition: usize, batch: &RecordBatch) {
        if batch.num_rows() == 0 || self.shared.lock().stopped.is_some() {
            return;
        }
        let bytes: usize = self
            .shared
            .columns
            .iter()
            .filter_map(|&(index, _)| batch.columns().get(index))
            .map(|a| a.get_buffer_memory_size())
            .sum();
        let full = {
            let mut pending = lock(&self.pending);
            if pending.len() <= partition {
                pending.resize_with(partition + 1, Default::default);
            }
            let (batches, held) = &mut pending[partition];
            batches.push(batch.clone());
            *held += bytes;
            (*held >= GROUP_BYTES).then(|| {
                *held = 0;
                std::mem::take(batches)
            })
        };
        if let Some(batches) = full {
            self.send(batches);
        }
    }

    fn input_ended(&self) {
        let pending = std::mem::take(&mut *lock(&self.pending));
        for (batches, _) in pending {
            if !batches.is_empty() {
                self.send(batches);
            }
        }
    }

    fn abandon(&self) {
        self.stop("not used by the run");
    }

    fn take_over(&self, buffered: &mut [Vec<RecordBatch>], payload_bytes: u64) -> usize {
        // Everything added so far goes up now, and is waited for.
        self.input_ended();
        let mut state = self.shared.wait_settled();
        let Some((_, cap)) = self.shared.device.get().and_then(Option::as_ref) else {
            return 0;
        };
        // The copy may pass its cap where the payload is larger than expected: then it
        // stops, and a held copy fails the sort. The expected payload leaves it room.
        if state.stopped.is_some() || payload_bytes.saturating_mul(2) > *cap as u64 {
            return 0;
        }
        let mut at = HashMap::new();
        for (g, uploaded) in state.uploaded.iter().enumerate() {
            for (c, arrays) in uploaded.arrays.iter().enumerate() {
                for (i, array) in arrays.iter().enumerate() {
                    at.insert((c, address(array)), (g, i));
                }
            }
        }
        let mut replaced = 0;
        for batch in buffered.iter_mut().flatten() {
            let mut columns = batch.columns().to_vec();
            let mut changed = false;
            for (c, &(index, layout)) in self.shared.columns.iter().enumerate() {
                let Some(array) = columns.get(index) else {
                    continue;
                };
                if state.hollow.contains(&address(array)) {
                    continue;
                }
                let Some(&(g, i)) = at.get(&(c, address(array))) else {
                    continue;
                };
                let width = match layout {
                    PayloadLayout::Fixed(width) => width,
                    PayloadLayout::Views => VIEW_BYTES,
                    PayloadLayout::Bits => continue,
                };
                let Some(hollow) = hollow_array(array, width) else {
                    continue;
                };
                state.hollow.insert(address(&hollow));
                state.uploaded[g].arrays[c][i] = Arc::clone(&hollow);
                columns[index] = hollow;
                changed = true;
                replaced += 1;
            }
            if changed {
                let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                match RecordBatch::try_new_with_options(batch.schema(), columns, &options) {
                    Ok(hollowed) => *batch = hollowed,
                    Err(error) => unreachable!("a stand-in of the same type and rows: {error}"),
                }
            }
        }
        if replaced > 0 {
            state.held = true;
            // The data buffers named so far may be freed now, and their addresses reused
            // by later batches' buffers: those are numbered anew.
            for numbering in &mut state.numbering {
                numbering.clear();
            }
        }
        crate::trace::event(|| {
            format!(
                "early upload: took over {replaced} arrays from the host ({} MB on the device)",
                state.bytes >> 20
            )
        });
        replaced
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for EarlyUpload {
    fn drop(&mut self) {
        // The uploaders skip what is still queued and end.
        self.stop("let go");
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Uploader `i`: uploads the groups it receives until the sender goes, each on a lane of
/// the device; a failure, or pieces that would pass the cap, stop the copy (the run's
/// payload then goes up as before, where a failure is met again and handled). Ends at
/// once where the tuning asks for fewer uploaders.
fn upload_groups(shared: &Shared, jobs: &Mutex<Receiver<Group>>, i: usize) {
    let Some((runtime, cap)) = shared.device() else {
        stop_shared(shared, "not one usable device");
        return;
    };
    let uploaders = runtime.tuning.early_uploaders;
    if uploaders == 0 {
        stop_shared(shared, "GPUSORT_EARLY_UPLOAD=0");
    }
    if i >= uploaders.max(1) {
        return;
    }
    loop {
        let received = lock(jobs).recv();
        let Ok(group) = received else {
            return;
        };
        let _done = DoneWithOne(shared);
        upload_one(shared, runtime, *cap, group);
    }
}

/// Tells `take_over`'s wait that a group is done with, whether its upload returned or
/// panicked (a panic stops the copy: an uploader gone would leave the wait to block).
struct DoneWithOne<'a>(&'a Shared);

impl Drop for DoneWithOne<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            stop_shared(self.0, "an uploader panicked");
        }
        self.0.done_with_one();
    }
}

/// Uploads `group` (or skips it, where the copy stopped or it would pass `cap`).
fn upload_one(shared: &Shared, runtime: &Arc<CudaRuntime>, cap: usize, group: Group) {
    {
        let mut state = shared.lock();
        if state.stopped.is_some() {
            return;
        }
        if state.bytes.saturating_add(group.bytes) > cap {
            drop(state);
            let why = format!("the payload passes {} MB of device memory", cap >> 20);
            stop_shared(shared, &why);
            return;
        }
        state.bytes += group.bytes;
    }
    let started = Instant::now();
    let narrowing = &runtime.narrowing;
    let uploaded =
        runtime.on_lane(|device, staging| upload_group(device, staging, narrowing, shared, &group));
    crate::trace::event(|| {
        format!(
            "early upload: a group of {:.0} MB up in {:.1} ms",
            group.bytes as f64 / 1e6,
            started.elapsed().as_secs_f64() * 1e3
        )
    });
    let mut state = shared.lock();
    state.busy += started.elapsed();
    match uploaded {
        Ok(pieces) if state.stopped.is_none() => {
            state.uploaded.push(Uploaded {
                arrays: group.arrays,
                pieces,
            });
        }
        Ok(pieces) => {
            drop(state);
            drop(pieces);
        }
        Err(error) => {
            drop(state);
            log::debug!("gpusort: the early upload of a sort's payload failed ({error})");
            stop_shared(shared, &format!("an upload failed: {error}"));
        }
    }
}

/// Stops the copy (nothing of it is used) and frees the groups on the device.
fn stop_shared(shared: &Shared, why: &str) {
    let mut state = shared.lock();
    if state.stopped.is_none() {
        crate::trace::event(|| format!("early upload: stopped ({why})"));
        state.stopped = Some(why.to_string());
    }
    let uploaded = std::mem::take(&mut state.uploaded);
    drop(state);
    shared.settled.notify_all();
    free_on_device(shared, uploaded);
}

/// Frees the pieces of `uploaded` on a thread of their own with the device's context
/// current: the caller may be any thread (a runtime's worker, or one bound to another
/// device), and a buffer is freed in its device's context.
fn free_on_device(shared: &Shared, uploaded: Vec<Uploaded>) {
    if uploaded.is_empty() {
        return;
    }
    let Some(Some((runtime, _))) = shared.device.get() else {
        return;
    };
    let runtime = Arc::clone(runtime);
    let freeing = move || {
        let _ = runtime.device.bind();
        drop(uploaded);
    };
    // Where no thread can be made, the closure (and the pieces) is dropped here.
    let _ = std::thread::Builder::new()
        .name("gpusort-early-free".to_string())
        .spawn(freeing);
}

/// Uploads every column of `group`, on a lane's `device`, and waits for the copies.
fn upload_group(
    device: &Device,
    staging: &mut Staging,
    narrowing: &Narrowing,
    shared: &Shared,
    group: &Group,
) -> CudaResult<Vec<Piece>> {
    let mut pieces = Vec::with_capacity(shared.columns.len());
    for (c, &(_, layout)) in shared.columns.iter().enumerate() {
        let arrays = &group.arrays[c];
        let piece = match layout {
            PayloadLayout::Fixed(width) => {
                let data: Vec<_> = arrays.iter().map(|a| a.to_data()).collect();
                let parts: Vec<&[u8]> = data.iter().map(|d| fixed_values(d, width)).collect();
                let len = parts.iter().map(|p| p.len()).sum();
                // Narrowed where the values allow it: the scan's CPU writes fewer bytes.
                let (values, sent) =
                    upload_fixed(device, staging, arrays, &parts, width, Some(narrowing))?;
                Piece {
                    values,
                    len,
                    sent,
                    data: None,
                }
            }
            PayloadLayout::Views => {
                let (values, len) =
                    upload_numbered_views(device, staging, arrays, &group.numbers[c])?;
                let parts: Vec<&[u8]> = group.new_buffers[c]
                    .iter()
                    .map(|(_, b)| b.as_slice())
                    .collect();
                let mut at = 0;
                let starts = group.new_buffers[c]
                    .iter()
                    .map(|(number, buffer)| {
                        let start = (*number, at);
                        at += buffer.len();
                        start
                    })
                    .collect();
                let bytes = upload_bytes(device, staging, &parts, "early view data")?;
                Piece {
                    values,
                    len,
                    sent: len + at,
                    data: Some(DataPiece {
                        bytes,
                        len: at,
                        starts,
                    }),
                }
            }
            PayloadLayout::Bits => {
                return Err(CudaError::Inconsistent(
                    "an early copy of a Boolean column".to_string(),
                ))
            }
        };
        pieces.push(piece);
    }
    device.synchronize()?;
    Ok(pieces)
}

/// The order in which `groups` (each a list of arrays) lay `run` (a column's arrays)
/// end to end, each group whole; `None` where they do not.
fn walk(groups: &[Vec<ArrayRef>], run: &[ArrayRef]) -> Option<Vec<usize>> {
    let starting: HashMap<usize, usize> = groups
        .iter()
        .enumerate()
        .filter_map(|(g, arrays)| arrays.first().map(|a| (address(a), g)))
        .collect();
    let mut order = Vec::with_capacity(groups.len());
    let mut at = 0;
    while at < run.len() {
        let g = *starting.get(&address(&run[at]))?;
        let arrays = &groups[g];
        let end = at + arrays.len();
        if end > run.len()
            || !arrays
                .iter()
                .zip(&run[at..end])
                .all(|(a, b)| Arc::ptr_eq(a, b))
        {
            return None;
        }
        order.push(g);
        at = end;
    }
    // Every group once: a group laid twice would need its pieces twice.
    let mut seen = vec![false; groups.len()];
    order
        .iter()
        .all(|&g| !std::mem::replace(&mut seen[g], true))
        .then_some(order)
}

/// `pieces` (a column's, in the run's order) end to end in one buffer on `device`, padded
/// to 8 bytes as uploads are; for views also their data buffers (`buffers` of them, run
/// numbered) end to end, and the table of where each begins.
fn concatenate(
    device: &Device,
    staging: &mut Staging,
    layout: PayloadLayout,
    pieces: &[Piece],
    buffers: usize,
) -> CudaResult<(DeviceBuffer<u8>, Option<ViewData>)> {
    let values = end_to_end(
        device,
        pieces.iter().map(|p| (&p.values, p.len)),
        "column values",
    )?;
    if layout != PayloadLayout::Views {
        return Ok((values, None));
    }
    let data_pieces = || pieces.iter().filter_map(|p| p.data.as_ref());
    let mut starts = vec![0u64; buffers + 1];
    let mut total = 0u64;
    for data in data_pieces() {
        for &(number, at) in &data.starts {
            starts[number as usize] = total + at as u64;
        }
        total += data.len as u64;
    }
    starts[buffers] = total;
    let data = end_to_end(
        device,
        data_pieces().map(|d| (&d.bytes, d.len)),
        "view data",
    )?;
    Ok((values, Some(ViewData::new(device, staging, data, &starts)?)))
}

/// The first `len` bytes of each buffer end to end in a new buffer, padded with zeros to a
/// multiple of 8 bytes; in `device`'s stream order.
fn end_to_end<'a>(
    device: &Device,
    parts: impl Iterator<Item = (&'a DeviceBuffer<u8>, usize)> + Clone,
    what: &'static str,
) -> CudaResult<DeviceBuffer<u8>> {
    let total: usize = parts.clone().map(|(_, len)| len).sum();
    let padded = total.div_ceil(8).max(1) * 8;
    let out = device.alloc::<u8>(padded, what)?;
    let mut at = 0;
    for (part, len) in parts {
        if len > 0 {
            // SAFETY: the part lives until the caller synchronizes the device, after the
            // copy (`take_columns`).
            unsafe { device.copy_from(&out, at, device, part, 0, len)? };
        }
        at += len;
    }
    if padded > total {
        device.fill_bytes(&out, total, padded - total, 0)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;

    fn arrays(n: usize) -> Vec<ArrayRef> {
        (0..n)
            .map(|i| Arc::new(Int32Array::from(vec![i as i32])) as ArrayRef)
            .collect()
    }

    #[test]
    fn groups_lay_the_run_end_to_end_each_whole_and_once() {
        let a = arrays(6);
        // Two partitions' groups, sent in another order than the run lays them.
        let groups = vec![
            vec![a[3].clone(), a[4].clone()],
            vec![a[0].clone(), a[1].clone()],
            vec![a[5].clone()],
            vec![a[2].clone()],
        ];
        assert_eq!(walk(&groups, &a), Some(vec![1, 3, 0, 2]));
        // A run without the group's second array, or cut inside a group.
        let skipping = [a[0].clone(), a[2].clone()];
        assert_eq!(walk(&groups, &skipping), None);
        assert_eq!(walk(&groups, &a[..4]), None);
        // An array the groups do not hold (a slice made after them).
        let other = arrays(1);
        assert_eq!(walk(&groups, &other), None);
        // A group laid twice.
        let twice = [a[2].clone(), a[2].clone()];
        assert_eq!(walk(&groups, &twice), None);
        assert_eq!(walk(&[], &[]), Some(vec![]));
    }
}
