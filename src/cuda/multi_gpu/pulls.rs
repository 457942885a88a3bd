//! The exchange of an overlapped host key sort, run while the keys still go up: each
//! device publishes its chunks as they are partitioned, and every device pulls the pieces
//! of the ranges it owns from them as they appear, on a stream of its own.
//!
//! ```text
//!  device s, main stream:  partition chunk 0 ─► published │ partition chunk 1 ─► published │ …
//!  device d, pull stream:        d's pieces of (s, 0) │ of (s', 0) │ of (s, 1) │ …
//! ```
//!
//! PCIe brings the keys up while the links between the devices would sit idle, so the
//! pieces cross those links during the upload instead of after it. A range's place for
//! each piece is known only once every chunk is partitioned, so each piece lands in a
//! buffer of its own; the sort step lays a range's pieces end to end in source order
//! (device, then chunk: row order) with copies within the device ([`Received::range`]).
//!
//! Memory: once its keys are up, a device holds its partitioned chunks and the pieces of
//! its ranges, about twice its share of rows (key words and row ids), as the step-by-step
//! exchange holds its rows and its received range; the chunks are freed before the sorts.
//!
//! A device that fails (or whose thread cannot start, or panics) marks the board failed,
//! which stops every puller waiting on it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::{Device, DeviceBuffer};

use super::exchange::Partitioned;

/// One partitioned chunk, published: its rows per range, the rows in range order, and its
/// device.
struct Published<'d> {
    counts: Vec<usize>,
    part: Arc<Partitioned>,
    device: &'d Device,
}

/// The chunks of every device as they are partitioned, indexed by source (device, then
/// chunk).
pub(super) struct Board<'d> {
    state: Mutex<BoardState<'d>>,
    ready: Condvar,
    /// Chunks of each device, fixed before the upload.
    chunks: Vec<usize>,
}

struct BoardState<'d> {
    published: Vec<Option<Published<'d>>>,
    failed: bool,
}

impl<'d> Board<'d> {
    /// A board for devices of `chunks[d]` chunks each.
    pub(super) fn new(chunks: Vec<usize>) -> Self {
        let sources = chunks.iter().sum();
        Self {
            state: Mutex::new(BoardState {
                published: (0..sources).map(|_| None).collect(),
                failed: false,
            }),
            ready: Condvar::new(),
            chunks,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BoardState<'d>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sources in all.
    fn sources(&self) -> usize {
        self.chunks.iter().sum()
    }

    /// Chunk `chunk` of device `index` (on `device`) is partitioned: `counts` rows of each
    /// range, in `part`.
    pub(super) fn publish(
        &self,
        index: usize,
        chunk: usize,
        device: &'d Device,
        counts: Vec<usize>,
        part: Arc<Partitioned>,
    ) {
        assert!(chunk < self.chunks[index], "a chunk past its device's");
        let source = self.chunks[..index].iter().sum::<usize>() + chunk;
        self.lock().published[source] = Some(Published {
            counts,
            part,
            device,
        });
        self.ready.notify_all();
    }

    /// Some device failed: pullers stop.
    pub(super) fn fail(&self) {
        self.lock().failed = true;
        self.ready.notify_all();
    }

    /// The references the board holds to device `index`'s chunks, taken (to be dropped on
    /// a thread bound to that device).
    pub(super) fn take(&self, index: usize) -> Vec<Arc<Partitioned>> {
        let first = self.chunks[..index].iter().sum::<usize>();
        let mut state = self.lock();
        state.published[first..first + self.chunks[index]]
            .iter_mut()
            .filter_map(|p| p.take().map(|p| p.part))
            .collect()
    }

    /// A published source not yet `taken` (marked taken), waiting for one; `None` once
    /// every source is taken.
    #[allow(clippy::type_complexity)]
    fn next(
        &self,
        taken: &mut [bool],
    ) -> CudaResult<Option<(usize, Vec<usize>, Arc<Partitioned>, &'d Device)>> {
        let mut state = self.lock();
        loop {
            if state.failed {
                return Err(CudaError::Inconsistent(
                    "another device of the spread sort failed".to_string(),
                ));
            }
            if taken.iter().all(|&t| t) {
                return Ok(None);
            }
            let found = state
                .published
                .iter()
                .enumerate()
                .find(|(s, p)| !taken[*s] && p.is_some());
            if let Some((source, Some(p))) = found {
                taken[source] = true;
                return Ok(Some((
                    source,
                    p.counts.clone(),
                    Arc::clone(&p.part),
                    p.device,
                )));
            }
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Marks the board failed when dropped armed: on a failure or a panic of the thread that
/// holds it.
pub(super) struct FailGuard<'b, 'd> {
    board: &'b Board<'d>,
    armed: bool,
}

impl<'b, 'd> FailGuard<'b, 'd> {
    pub(super) fn new(board: &'b Board<'d>) -> Self {
        Self { board, armed: true }
    }

    /// The thread finished what the others wait for.
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for FailGuard<'_, '_> {
    fn drop(&mut self) {
        if self.armed {
            self.board.fail();
        }
    }
}

/// The pieces one device pulled, and the stream they were pulled on.
pub(super) struct Received {
    /// By owned range (in the order owned), by source: that source's rows of the range.
    /// Declared before `stream`: freed on it, so dropped before it.
    pieces: Vec<Vec<Option<Partitioned>>>,
    stream: Device,
}

impl Received {
    /// Owned range `k`'s pieces laid end to end in source order (row order) on `device`'s
    /// main stream, `rows` rows in all; the pieces are freed once the copies are done.
    pub(super) fn range(
        &mut self,
        device: &Device,
        k: usize,
        rows: usize,
    ) -> CudaResult<Partitioned> {
        let pieces = std::mem::take(&mut self.pieces[k]);
        let laid: usize = pieces.iter().flatten().map(|p| p.ids.len()).sum();
        if laid != rows {
            return Err(CudaError::Inconsistent(format!(
                "a range of {rows} rows received {laid}"
            )));
        }
        let words = pieces
            .iter()
            .flatten()
            .map(|p| p.words.len())
            .max()
            .unwrap_or(0);
        let range = Partitioned {
            words: (0..words)
                .map(|_| device.alloc::<u64>(rows, "received key words"))
                .collect::<CudaResult<_>>()?,
            ids: device.alloc::<u32>(rows, "received row ids")?,
        };
        let copied = (|| {
            let mut at = 0;
            for piece in pieces.iter().flatten() {
                let len = piece.ids.len();
                // SAFETY: each piece lies within the range (the lengths add up to `rows`);
                // the pieces are freed on the pull stream only after it waits for these
                // copies (below, after a failure too).
                unsafe {
                    for (dst, src) in range.words.iter().zip(&piece.words) {
                        device.copy_from(dst, at, device, src, 0, len)?;
                    }
                    device.copy_from(&range.ids, at, device, &piece.ids, 0, len)?;
                }
                at += len;
            }
            Ok(())
        })();
        // The pieces' frees wait for the copies queued so far: ordered on the device, or
        // where that fails, the host waits.
        let ordered = device
            .order_before(self.stream.stream())
            .or_else(|_| device.synchronize());
        drop(pieces);
        copied?;
        ordered?;
        Ok(range)
    }

    /// Frees what is left, waiting for the pull stream's work.
    pub(super) fn release(mut self) -> CudaResult<()> {
        self.pieces.clear();
        self.stream.synchronize()
    }
}

/// Pulls, on a stream of its own on `device` (whose context is current), the pieces of the
/// ranges `owned` from every source `board` publishes: `owned`'s pieces once every source
/// is pulled.
pub(super) fn pull(device: &Device, board: &Board<'_>, owned: &[usize]) -> CudaResult<Received> {
    let stream = device.with_own_stream()?;
    let sources = board.sources();
    let mut received = Received {
        pieces: owned
            .iter()
            .map(|_| (0..sources).map(|_| None).collect())
            .collect(),
        stream,
    };
    let mut taken = vec![false; sources];
    let queued = (|| {
        while let Some((source, counts, part, from)) = board.next(&mut taken)? {
            for (k, &g) in owned.iter().enumerate() {
                let len = counts.get(g).copied().unwrap_or(0);
                if len == 0 {
                    continue;
                }
                let start: usize = counts[..g].iter().sum();
                let piece = alloc_piece(&received.stream, part.words.len(), len)?;
                // SAFETY: the piece lies within the source's rows (its counts are the
                // partition's); the source stays alive until every puller has synchronized
                // (the board keeps it until then).
                unsafe {
                    for (dst, src) in piece.words.iter().zip(&part.words) {
                        received.stream.copy_from(dst, 0, from, src, start, len)?;
                    }
                    received
                        .stream
                        .copy_from(&piece.ids, 0, from, &part.ids, start, len)?;
                }
                received.pieces[k][source] = Some(piece);
            }
        }
        Ok(())
    })();
    let synchronized = received.stream.synchronize();
    queued?;
    synchronized?;
    Ok(received)
}

/// Buffers for a piece of `len` rows of `words` key words, on `stream`.
fn alloc_piece(stream: &Device, words: usize, len: usize) -> CudaResult<Partitioned> {
    Ok(Partitioned {
        words: (0..words)
            .map(|_| stream.alloc::<u64>(len, "pulled key words"))
            .collect::<CudaResult<Vec<DeviceBuffer<u64>>>>()?,
        ids: stream.alloc::<u32>(len, "pulled row ids")?,
    })
}
