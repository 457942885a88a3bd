//! The host-resident key sort with its copies overlapping its kernels: for keys and a
//! permutation in page-locked host memory, over devices that reach each other's memory.
//!
//! ```text
//!  host: samples of every slice's keys ─► splitters of D × k ranges, before any copy
//!  device d, side stream:  up chunk 0 │ up chunk 1 │ up chunk 2 │ …          down range 0 │ down range 1 │ …
//!  device d, main stream:      partition 0 │ partition 1 │ …          lay out + sort range 0 │ range 1 │ …
//!  device d, pull stream:          d's pieces of every device's partitioned chunks, as they appear
//! ```
//!
//! - The splitters come from samples read on the host (the rows the device sampling would
//!   take), so each chunk of a device's slice is classified and partitioned by range while
//!   the next chunk goes up; only the last chunk's partition is left after the upload.
//! - Each device owns consecutive ranges (`k` of them, fewer where the samples give fewer
//!   splitters or the ranges are capped at 64). While the keys go up, it pulls its ranges'
//!   pieces from every device's chunks as each is partitioned (peer copies on a stream of
//!   its own, `pulls.rs`): the links between devices work during the upload, which PCIe
//!   bounds. Then, for each owned range, it lays the range's pieces end to end in device
//!   then chunk order (row order), sorts them, and its side stream brings the range's row
//!   ids down into their place in the permutation while the main stream sorts the next.
//!
//! In [`SpreadTimes`], `exchange` is what the pulls took past the last partition, and
//! `sort` counts each range's layout copies with its sort.
//!
//! The result is the stable order of [`super::sort_host_words`]'s other path: ranges cut by
//! (key words, row id) splitters, rows within a range received in row order and sorted
//! stably.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::device::DeviceBuffer;
use crate::cuda::memory::side_stream::SideStream;
use crate::cuda::runtime::CudaRuntime;
use crate::cuda::spread::{Samples, MAX_SPLITTERS};

use super::exchange::{Layout, Partitioned};
use super::held::{on_each, on_each_telling, Held};
use super::pulls::{self, Board, FailGuard, Received};
use super::splitters::{self, Splitters};
use super::{
    cut, partition_words, sort_range, split_by_lengths, Failure, HostSortPlan, SpreadSorted,
    SpreadTimes, SAMPLES_PER_RANGE,
};

/// The ranges a device sorts: each one's index and its place in the permutation.
type Owned<'p> = Vec<(usize, &'p mut [u32])>;

/// How one device's upload, partition and pulls went.
#[derive(Default)]
struct Loaded {
    /// Each chunk's rows per range, in chunk order.
    counts: Vec<Vec<usize>>,
    /// The chunks, partitioned (shared with the board until every puller is done).
    chunks: Vec<Arc<Partitioned>>,
    /// The pieces of the ranges the device owns.
    received: Option<Received>,
    /// Until the last chunk was up.
    uploaded: Duration,
    /// Until the last chunk was partitioned.
    partitioned: Duration,
}

/// Sorts the rows keyed by `words` over the `held` devices with overlapped copies, into
/// `permutation` (page-locked for the copies to overlap; they are correct either way).
pub(super) fn sort(
    held: &mut [Held<'_>],
    words: &[&[u64]],
    permutation: &mut [u32],
    plan: HostSortPlan,
) -> Result<SpreadSorted, Failure> {
    let (n, d) = (permutation.len(), held.len());
    let wanted = d
        .saturating_mul(plan.ranges_per_device)
        .min(MAX_SPLITTERS + 1);
    let slices = cut(n, d);
    let samples: Vec<Samples> = slices
        .iter()
        .map(|s| host_samples(words, s.rows.clone(), SAMPLES_PER_RANGE * wanted / d))
        .collect();
    let chosen = splitters::choose(&samples, words.len(), wanted);
    let ranges = chosen.ranges();
    let owned: Vec<Vec<usize>> = (0..d)
        .map(|i| (0..ranges).filter(|&g| owner(g, ranges, d) == i).collect())
        .collect();
    let cuts: Vec<Vec<Range<usize>>> = slices
        .iter()
        .map(|s| chunk_rows(s.rows.clone(), plan.chunks))
        .collect();

    let runtimes: Vec<&CudaRuntime> = held.iter().map(|h| h.rt).collect();
    let board = Board::new(cuts.iter().map(Vec::len).collect());
    let started = Instant::now();
    let mut loaded: Vec<Loaded> = (0..d).map(|_| Loaded::default()).collect();
    let loading = on_each_telling(held, &mut loaded, &|| board.fail(), |i, step| {
        let rt = step.rt;
        let (board, owned) = (&board, &owned[i]);
        std::thread::scope(|scope| {
            // Any way out of this scope but success stops the other devices' pullers.
            let guard = FailGuard::new(board);
            let puller = scope.spawn(move || {
                rt.device
                    .bind()
                    .and_then(|()| pulls::pull(&rt.device, board, owned))
            });
            let publish = |chunk: usize, counts: Vec<usize>, part: Arc<Partitioned>| {
                board.publish(i, chunk, &runtimes[i].device, counts, part);
            };
            let done = upload_and_partition(rt, words, &cuts[i], &chosen, started, publish);
            if done.is_err() {
                board.fail();
            }
            let pulled = puller.join().unwrap_or_else(|_| {
                Err(CudaError::Inconsistent(
                    "a pulling thread of a spread sort panicked".to_string(),
                ))
            });
            *step.state = done?;
            step.state.received = Some(pulled?);
            guard.disarm();
            Ok(())
        })
    });
    let exchanged = started.elapsed();
    // The board's references go back to their devices, to be freed there.
    for (i, l) in loaded.iter_mut().enumerate() {
        l.chunks.extend(board.take(i));
    }
    drop(board);
    // The pieces are pulled: the chunks are freed on their own devices now (and after a
    // failure, the pieces too).
    free_on_their_devices(held, &mut loaded, loading.is_err());
    loading?;
    let uploaded = loaded.iter().map(|l| l.uploaded).max().unwrap_or_default();
    let partitioned = loaded
        .iter()
        .map(|l| l.partitioned)
        .max()
        .unwrap_or_default();

    // Every chunk is one source of the exchange, in device then chunk order (row order).
    let layout = Layout::new(loaded.iter().flat_map(|l| l.counts.clone()).collect());
    let range_rows: Vec<usize> = (0..ranges).map(|g| layout.range_rows(g)).collect();
    let mut states: Vec<(Owned<'_>, Option<Received>)> = loaded
        .iter_mut()
        .map(|l| (Vec::new(), l.received.take()))
        .collect();
    for (g, out) in split_by_lengths(permutation, &range_rows)
        .into_iter()
        .enumerate()
    {
        states[owner(g, ranges, d)].0.push((g, out));
    }
    let device_rows: Vec<usize> = states
        .iter()
        .map(|(o, _)| o.iter().map(|(_, out)| out.len()).sum())
        .collect();

    let started = Instant::now();
    let sorted = on_each(held, &mut states, |_, step| {
        let (owned, received) = step.state;
        let received = received.take().expect("every device pulled its pieces");
        sort_owned_ranges(step.rt, owned, received)
    });
    if sorted.is_err() {
        // A device that failed before it took its pieces: freed on it.
        let mut left: Vec<Option<Received>> = states.into_iter().map(|(_, r)| r).collect();
        let _ = on_each(held, &mut left, |_, step| {
            step.state.take().map_or(Ok(()), Received::release)
        });
    }
    let sorted = sorted?;
    let finished = started.elapsed();
    let last_sort = sorted.iter().copied().max().unwrap_or_default();
    Ok(SpreadSorted {
        ordinals: runtimes.iter().map(|rt| rt.ordinal()).collect(),
        range_rows: device_rows,
        peer_copies: d > 1,
        direct_copies: false,
        overlapped: true,
        times: SpreadTimes {
            upload: uploaded,
            partition: partitioned.saturating_sub(uploaded),
            exchange: exchanged.saturating_sub(partitioned.max(uploaded)),
            sort: last_sort,
            download: finished.saturating_sub(last_sort),
        },
    })
}

/// Frees every device's chunks on a thread bound to that device, and with `pieces` what it
/// pulled too.
fn free_on_their_devices(held: &mut [Held<'_>], loaded: &mut [Loaded], pieces: bool) {
    let freed = on_each(held, loaded, |_, step| {
        step.state.chunks.clear();
        match step.state.received.take() {
            Some(received) if pieces => received.release(),
            received => {
                step.state.received = received;
                Ok(())
            }
        }
    });
    if freed.is_err() {
        // A device that could not be bound: its buffers go with `loaded` instead.
        log::warn!("gpusort: a spread sort freed its partitioned keys off their devices");
    }
}

/// The device that sorts range `g` of `ranges`, of `devices`: consecutive ranges, as even
/// as they divide.
fn owner(g: usize, ranges: usize, devices: usize) -> usize {
    g * devices / ranges
}

/// `count` evenly spaced rows of `rows` (the ones the device's sampling takes): their key
/// words, word-major, and global row ids.
fn host_samples(words: &[&[u64]], rows: Range<usize>, count: usize) -> Samples {
    let n = rows.len();
    let count = count.min(n);
    let picked: Vec<usize> = (0..count).map(|i| rows.start + i * n / count).collect();
    Samples {
        words: words
            .iter()
            .flat_map(|w| picked.iter().map(move |&r| w[r]))
            .collect(),
        rows: picked.iter().map(|&r| r as u32).collect(),
    }
}

/// `rows` cut into at most `chunks` consecutive non-empty pieces.
fn chunk_rows(rows: Range<usize>, chunks: usize) -> Vec<Range<usize>> {
    let n = rows.len();
    let chunks = chunks.min(n);
    (0..chunks)
        .map(|i| rows.start + i * n / chunks..rows.start + (i + 1) * n / chunks)
        .filter(|r| !r.is_empty())
        .collect()
}

/// One device's chunks of `words` (`cuts`, consecutive) uploaded on a side stream, each
/// partitioned by `chosen`'s ranges on the main stream as soon as it is up and handed to
/// `publish` (its index, rows per range, rows); times since `started`.
fn upload_and_partition(
    rt: &CudaRuntime,
    words: &[&[u64]],
    cuts: &[Range<usize>],
    chosen: &Splitters,
    started: Instant,
    publish: impl Fn(usize, Vec<usize>, Arc<Partitioned>),
) -> CudaResult<Loaded> {
    let device = &rt.device;
    let mut buffers: Vec<Option<Vec<DeviceBuffer<u64>>>> = Vec::with_capacity(cuts.len());
    for cut in cuts {
        let chunk: CudaResult<Vec<_>> = words
            .iter()
            .map(|_| device.alloc::<u64>(cut.len(), "key words"))
            .collect();
        buffers.push(Some(chunk?));
    }
    let side = SideStream::new(device)?;
    let done = (|| {
        side.wait_for_work()?;
        let mut marks = Vec::with_capacity(cuts.len());
        for (cut, chunk) in cuts.iter().zip(&buffers) {
            for (buffer, word) in chunk.iter().flatten().zip(words) {
                // SAFETY: the host words outlive the copies (the side stream is
                // synchronized below, after a failure too) and the buffer outlives them
                // (freed on the main stream after it waited for the copy's mark, or
                // after the side stream's synchronization).
                unsafe { side.upload(buffer, 0, &word[cut.clone()])? };
            }
            marks.push(side.mark()?);
        }
        let mut loaded = Loaded::default();
        for (i, (cut, mark)) in cuts.iter().zip(&marks).enumerate() {
            side.work_waits_for(mark)?;
            if i + 1 == cuts.len() {
                mark.wait()?;
                loaded.uploaded = started.elapsed();
            }
            let chunk = buffers[i].take().expect("each chunk partitioned once");
            let (counts, part) = partition_words(rt, chunk, cut.len(), cut.start as u32, chosen)?;
            let part = Arc::new(part);
            publish(i, counts.clone(), Arc::clone(&part));
            loaded.counts.push(counts);
            loaded.chunks.push(part);
        }
        loaded.partitioned = started.elapsed();
        Ok(loaded)
    })();
    // The chunks not partitioned are freed only once no copy into them is queued.
    side.synchronize()?;
    drop(buffers);
    done
}

/// Lays out, sorts and brings down each of `owned`'s ranges (global range, its place in
/// the permutation) on `rt`'s device, from the pieces it `received`: the time until the
/// last range was sorted.
fn sort_owned_ranges(
    rt: &CudaRuntime,
    owned: &mut [(usize, &mut [u32])],
    mut received: Received,
) -> CudaResult<Duration> {
    let device = &rt.device;
    let started = Instant::now();
    // Declared before the stream, so that it outlives the stream's last synchronization.
    let mut downloading: Vec<DeviceBuffer<u32>> = Vec::with_capacity(owned.len());
    let side = SideStream::new(device)?;
    let done = (|| {
        for (k, (_, out)) in owned.iter_mut().enumerate() {
            let rows = out.len();
            if rows == 0 {
                continue;
            }
            let range = received.range(device, k, rows)?;
            let order = sort_range(rt, range.words, Some(range.ids), rows)?.expect("row ids given");
            side.wait_for_work()?;
            // SAFETY: `out` and `order` stay alive until the side stream is synchronized
            // below (after a failure too); `order` is kept in `downloading` until then.
            unsafe { side.download(out, &order)? };
            downloading.push(order);
        }
        device.synchronize()?;
        Ok(started.elapsed())
    })();
    // After a failure too: no copy from the pieces is left queued on the main stream, and
    // no download reads a buffer about to be freed.
    let main = device.synchronize();
    let downloaded = side.synchronize();
    let released = received.release();
    drop(downloading);
    let sorted = done?;
    main?;
    downloaded?;
    released?;
    Ok(sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_go_to_devices_in_consecutive_blocks() {
        let owners: Vec<usize> = (0..8).map(|g| owner(g, 8, 2)).collect();
        assert_eq!(owners, [0, 0, 0, 0, 1, 1, 1, 1]);
        // Fewer ranges than planned (few samples): still in order, every device at most.
        let owners: Vec<usize> = (0..3).map(|g| owner(g, 3, 2)).collect();
        assert_eq!(owners, [0, 0, 1]);
        assert_eq!(owner(0, 1, 4), 0);
    }

    #[test]
    fn chunks_cover_the_rows_without_empty_ones() {
        assert_eq!(chunk_rows(10..20, 3), vec![10..13, 13..16, 16..20]);
        assert_eq!(chunk_rows(5..7, 4), vec![5..6, 6..7]);
        assert!(chunk_rows(3..3, 8).is_empty());
    }

    #[test]
    fn host_samples_are_the_device_samples() {
        let word: Vec<u64> = (0..100).map(|i| 1000 - i).collect();
        let other: Vec<u64> = (0..100).collect();
        let s = host_samples(&[&word, &other], 40..60, 4);
        // Rows (i * 20) / 4 of the slice: 40, 45, 50, 55.
        assert_eq!(s.rows, vec![40, 45, 50, 55]);
        assert_eq!(s.words, vec![960, 955, 950, 945, 40, 45, 50, 55]);
        assert!(host_samples(&[&word], 7..7, 4).rows.is_empty());
    }
}
