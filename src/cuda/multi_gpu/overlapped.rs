//! The host-resident key sort with its copies overlapping its kernels: for keys and a
//! permutation in page-locked host memory, over devices that reach each other's memory.
//!
//! ```text
//!  host: samples of every slice's keys ─► splitters of D × k ranges, before any copy
//!  device d, side stream:  up chunk 0 │ up chunk 1 │ up chunk 2 │ …         down range 0 │ down range 1 │ …
//!  device d, main stream:      partition 0 │ partition 1 │ …   pull + sort range 0 │ pull + sort range 1 │ …
//! ```
//!
//! - The splitters come from samples read on the host (the rows the device sampling would
//!   take), so each chunk of a device's slice is classified and partitioned by range while
//!   the next chunk goes up; only the last chunk's partition is left after the upload.
//! - Each device owns consecutive ranges (`k` of them, fewer where the samples give fewer
//!   splitters or the ranges are capped at 64). For each, it pulls the range's pieces from
//!   every device's chunks (peer copies, in device then chunk order: row order), sorts
//!   them, and its side stream brings the range's row ids down into their place in the
//!   permutation while the main stream pulls and sorts the next range.
//!
//! The result is the stable order of [`super::sort_host_words`]'s other path: ranges cut by
//! (key words, row id) splitters, rows within a range received in row order and sorted
//! stably.

use std::ops::Range;
use std::time::{Duration, Instant};

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::side_stream::SideStream;
use crate::cuda::runtime::CudaRuntime;
use crate::cuda::spread::{Samples, MAX_SPLITTERS};

use super::exchange::{receive_from_peers, Layout, Partitioned};
use super::held::{on_each, Held};
use super::splitters::{self, Splitters};
use super::{
    cut, partition_words, sort_range, split_by_lengths, Failure, HostSortPlan, SpreadSorted,
    SpreadTimes, SAMPLES_PER_RANGE,
};

/// One chunk of a device's slice, partitioned: its rows per range, and the rows in range
/// order.
struct Chunk {
    counts: Vec<usize>,
    part: Partitioned,
}

/// How one device's upload and partition went.
#[derive(Default)]
struct Loaded {
    chunks: Vec<Chunk>,
    /// Until the last chunk was up.
    uploaded: Duration,
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
    let mut slices = cut(n, d);
    let samples: Vec<Samples> = slices
        .iter()
        .map(|s| host_samples(words, s.rows.clone(), SAMPLES_PER_RANGE * wanted / d))
        .collect();
    let chosen = splitters::choose(&samples, words.len(), wanted);
    let ranges = chosen.ranges();

    let started = Instant::now();
    let mut loaded: Vec<Loaded> = (0..d).map(|_| Loaded::default()).collect();
    let mut states: Vec<_> = slices.iter_mut().zip(loaded.iter_mut()).collect();
    let partitioned = on_each(held, &mut states, |_, step| {
        let (slice, out) = step.state;
        **out = upload_and_partition(step.rt, words, slice.rows.clone(), plan.chunks, &chosen)?;
        Ok(())
    });
    drop(states);
    if let Err(failure) = partitioned {
        free_on_their_devices(held, &mut loaded);
        return Err(failure);
    }
    let partitioned = started.elapsed();
    let uploaded = loaded.iter().map(|l| l.uploaded).max().unwrap_or_default();

    // Every chunk is one source of the exchange, in device then chunk order (row order).
    let chunks = || loaded.iter().flat_map(|l| &l.chunks);
    let layout = Layout::new(chunks().map(|c| c.counts.clone()).collect());
    let range_rows: Vec<usize> = (0..ranges).map(|g| layout.range_rows(g)).collect();
    let mut owned: Vec<Vec<(usize, &mut [u32])>> = (0..d).map(|_| Vec::new()).collect();
    for (g, out) in split_by_lengths(permutation, &range_rows)
        .into_iter()
        .enumerate()
    {
        owned[owner(g, ranges, d)].push((g, out));
    }
    let device_rows: Vec<usize> = owned
        .iter()
        .map(|o| o.iter().map(|(_, out)| out.len()).sum())
        .collect();

    let started = Instant::now();
    let runtimes: Vec<&CudaRuntime> = held.iter().map(|h| h.rt).collect();
    let sources: Vec<(&Device, &Partitioned)> = runtimes
        .iter()
        .zip(&loaded)
        .flat_map(|(rt, l)| l.chunks.iter().map(|c| (&rt.device, &c.part)))
        .collect();
    let sorted = on_each(held, &mut owned, |_, step| {
        sort_owned_ranges(step.rt, step.state, &sources, &layout)
    });
    drop(sources);
    // Each device's chunks are freed on their own device once every receiver is done.
    free_on_their_devices(held, &mut loaded);
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
            exchange: Duration::ZERO,
            sort: last_sort,
            download: finished.saturating_sub(last_sort),
        },
    })
}

/// Frees every device's chunks on a thread bound to that device.
fn free_on_their_devices(held: &mut [Held<'_>], loaded: &mut [Loaded]) {
    let freed = on_each(held, loaded, |_, step| {
        step.state.chunks.clear();
        Ok(())
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

/// One device's slice `rows` of `words` uploaded in `chunks` on a side stream, each chunk
/// partitioned by `chosen`'s ranges on the main stream as soon as it is up.
fn upload_and_partition(
    rt: &CudaRuntime,
    words: &[&[u64]],
    rows: Range<usize>,
    chunks: usize,
    chosen: &Splitters,
) -> CudaResult<Loaded> {
    let device = &rt.device;
    let started = Instant::now();
    let cuts = chunk_rows(rows, chunks);
    let mut buffers: Vec<Option<Vec<DeviceBuffer<u64>>>> = Vec::with_capacity(cuts.len());
    for cut in &cuts {
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
            loaded.chunks.push(Chunk { counts, part });
        }
        Ok(loaded)
    })();
    // The chunks not partitioned are freed only once no copy into them is queued.
    side.synchronize()?;
    drop(buffers);
    done
}

/// Pulls, sorts and brings down each of `owned`'s ranges (global range, its place in the
/// permutation) on `rt`'s device, from every device's partitioned chunks (`sources`, laid
/// out by `layout`): the time until the last range was sorted.
fn sort_owned_ranges(
    rt: &CudaRuntime,
    owned: &mut [(usize, &mut [u32])],
    sources: &[(&Device, &Partitioned)],
    layout: &Layout,
) -> CudaResult<Duration> {
    let device = &rt.device;
    let started = Instant::now();
    // Declared before the stream, so that it outlives the stream's last synchronization.
    let mut downloading: Vec<DeviceBuffer<u32>> = Vec::with_capacity(owned.len());
    let side = SideStream::new(device)?;
    let done = (|| {
        for (g, out) in owned.iter_mut() {
            let rows = out.len();
            if rows == 0 {
                continue;
            }
            let range = receive_from_peers(device, *g, sources, layout)?;
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
    // After a failure too: no peer copy from the sources is left queued on the main stream
    // (the caller frees them next), and no download reads a buffer about to be freed.
    let main = device.synchronize();
    let downloaded = side.synchronize();
    drop(downloading);
    let sorted = done?;
    main?;
    downloaded?;
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
