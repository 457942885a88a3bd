//! One sort spread over several devices by key ranges, with no merge.
//!
//! ```text
//!  rows 0..n in D contiguous slices, slice d ──its own PCIe link──► device d (key words)
//!  1. each device samples its keys ─► host: D-1 splitters, (key words, row id) pairs
//!     (splitters.rs): equal keys split by row id, so ranges stay even and stable
//!  2. each device classifies its rows by range (spread.cu) and partitions them stably by
//!     range: one OneSweep pass on the range id; words and global row ids follow
//!  3. exchange (exchange.rs): device r receives range r's rows from every device in device
//!     order (row order), peer copies over NVLink, or through host memory
//!  4. device r sorts range r (OneSweep, stable: ties stay in row order) and sends its row
//!     ids back over its own link, at range r's place in the permutation
//! ```
//!
//! The ranges concatenate into the one stable order a single device gives. Where the keys
//! and the permutation sit in page-locked host memory and two or more devices reach each
//! other's memory (`HostSortPlan`), the steps of a host key sort overlap instead
//! (`overlapped.rs`): each device's keys go up in chunks, each partitioned while the next
//! goes up, and each device sorts several ranges, each one's row ids going down while the
//! next is pulled and sorted. A run's payload
//! is then gathered by all its devices at once (`gather.rs`). With one device
//! the steps between the upload and the sort are skipped: the same sort as one GPU's.
//! Every device is held (`held.rs`) for the whole sort; each step runs on all of them at
//! once, one thread per device, and ends when every device has finished it.

mod exchange;
mod gather;
mod held;
mod overlapped;
mod pulls;
mod splitters;

use std::ops::Range;
use std::time::{Duration, Instant};

use arrow::array::Array;
use arrow::datatypes::DataType;
use datafusion::arrow;

use crate::cuda::encode::SliceUpload;
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::budget::{DeviceShare, LeaseKind};
use crate::cuda::memory::device::{is_page_locked, Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;
use crate::cuda::radix::onesweep::Values;
use crate::cuda::runtime::CudaRuntime;
use crate::cuda::sort_run::columns_bytes;
use crate::cuda::spread::{MAX_SPLITTERS, MAX_WORDS};
use crate::cuda::tuning::{switches, SPREAD_CHUNKS, SPREAD_RANGES_PER_DEVICE};
use crate::keys::{slice_column, FieldStats, KeyColumn};
use exchange::{HostRows, Layout, Partitioned};
pub(crate) use gather::SpreadRun;
pub(crate) use held::Failure;
use held::{hold_all, on_each, Held, Step};

/// Samples each device takes per device of the sort: with D devices, D² × this in all, so
/// each range's size is within about a percent of n / D.
const SAMPLES_PER_RANGE: usize = 4096;

/// Where a spread sort's time went, step by step (each step ends when every device is done).
#[derive(Debug, Clone, Copy, Default)]
pub struct SpreadTimes {
    /// Each slice's keys up to its device, and the samples back.
    pub upload: Duration,
    /// Classifying and partitioning each slice by range (with the splitters' choice).
    pub partition: Duration,
    /// The ranges exchanged between devices.
    pub exchange: Duration,
    /// Each range sorted on its device (the slowest device).
    pub sort: Duration,
    /// Each range's row ids back to the host (the slowest device).
    pub download: Duration,
}

/// How a spread sort went.
#[derive(Debug, Clone)]
pub struct SpreadSorted {
    /// The devices, in the order their ranges follow each other.
    pub ordinals: Vec<usize>,
    /// Rows each device sorted, in device order.
    pub range_rows: Vec<usize>,
    /// Whether the ranges went between devices with peer copies (else through the host).
    pub peer_copies: bool,
    /// Whether the keys came up and the permutation went back straight, from and into
    /// page-locked host memory (else through the staging buffers).
    pub direct_copies: bool,
    /// Whether the copies overlapped the kernels (`overlapped.rs`): then `times.upload`
    /// ends when the last chunk is up, `times.partition` is what was left of the partition,
    /// `times.sort` runs until the last range is sorted (its exchange included, so
    /// `times.exchange` is zero) and `times.download` is what was left of the download.
    pub overlapped: bool,
    /// Where the time went.
    pub times: SpreadTimes,
}

/// One device's slice of the rows and its keys there.
#[derive(Default)]
struct Slice {
    rows: Range<usize>,
    /// Its key columns on the device, before they are packed into words.
    upload: Option<SliceUpload>,
    words: Vec<DeviceBuffer<u64>>,
}

/// `n` rows cut into `d` contiguous slices.
fn cut(n: usize, d: usize) -> Vec<Slice> {
    (0..d)
        .map(|i| Slice {
            rows: i * n / d..(i + 1) * n / d,
            ..Slice::default()
        })
        .collect()
}

/// How [`sort_host_words_with`] runs a sort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSortPlan {
    /// Whether the copies overlap the kernels (`overlapped.rs`). `None`: where the keys and
    /// the permutation are page-locked and two or more devices all reach each other's
    /// memory.
    /// `Some(true)` with devices that cannot is an error.
    pub overlap: Option<bool>,
    /// Chunks each device's keys go up in, when overlapped.
    pub chunks: usize,
    /// Key ranges each device sorts one after another, when overlapped.
    pub ranges_per_device: usize,
}

impl Default for HostSortPlan {
    fn default() -> Self {
        Self {
            overlap: None,
            chunks: SPREAD_CHUNKS,
            ranges_per_device: SPREAD_RANGES_PER_DEVICE,
        }
    }
}

/// Sorts the rows keyed by `words` in host memory (each as long as `permutation`, word 0
/// most significant) over `runtimes`, each device taking a contiguous slice, and writes
/// their stable sort permutation into `permutation`. Copies go straight from and into
/// host memory that is page-locked ([`crate::cuda::is_page_locked`]), through the staging
/// buffers otherwise; they overlap the kernels as [`HostSortPlan::overlap`] says by default
/// (page-locked memory, two or more devices that reach each other's memory, peer copies
/// on). Holds every device, in the order given, for the whole sort.
pub fn sort_host_words(
    runtimes: &[&CudaRuntime],
    words: &[&[u64]],
    permutation: &mut [u32],
) -> CudaResult<SpreadSorted> {
    sort_host_words_with(runtimes, words, permutation, HostSortPlan::default())
}

/// [`sort_host_words`] run as `plan` says.
pub fn sort_host_words_with(
    runtimes: &[&CudaRuntime],
    words: &[&[u64]],
    permutation: &mut [u32],
    plan: HostSortPlan,
) -> CudaResult<SpreadSorted> {
    let n = permutation.len();
    let ordinals: Vec<usize> = runtimes.iter().map(|rt| rt.ordinal()).collect();
    check_shape(&ordinals, words, n)?;
    if plan.chunks == 0 || plan.ranges_per_device == 0 {
        return Err(CudaError::Inconsistent(format!(
            "a host sort plan of {} chunks and {} ranges per device",
            plan.chunks, plan.ranges_per_device
        )));
    }
    let direct_copies = words.iter().all(|w| is_page_locked(w)) && is_page_locked(permutation);
    let mut held = hold_all(runtimes, LeaseKind::Gather, DeviceShare::UNLIMITED);
    let devices: Vec<&Device> = held.iter().map(|h| &h.rt.device).collect();
    let reachable =
        devices.len() == 1 || (switches().peer_copies() && exchange::is_peer_connected(&devices)?);
    if plan.overlap == Some(true) && !reachable {
        return Err(CudaError::Inconsistent(
            "overlapped copies need devices that reach each other's memory".to_string(),
        ));
    }
    // On one device the pulls are copies within it and the first range's sort is a
    // quarter of the whole: overlapping did not pay there (docs/performance.md).
    if plan.overlap.unwrap_or(direct_copies && held.len() > 1) && reachable {
        let mut sorted =
            overlapped::sort(&mut held, words, permutation, plan).map_err(|f| f.error)?;
        sorted.direct_copies = direct_copies;
        return Ok(sorted);
    }
    let mut slices = cut(n, held.len());
    let started = Instant::now();
    on_each(&mut held, &mut slices, |_, step| {
        let rows = step.state.rows.clone();
        step.state.words = upload_words(&step.rt.device, step.staging, words, rows)?;
        Ok(())
    })
    .map_err(|f| f.error)?;
    let upload = started.elapsed();
    let mut sorted =
        sort_loaded(&mut held, slices, words.len(), permutation).map_err(|f| f.error)?;
    sorted.times.upload += upload;
    sorted.direct_copies = direct_copies;
    Ok(sorted)
}

/// A run's key columns sorted over several devices.
pub(crate) struct ColumnsSpread {
    /// How it went.
    pub sorted: SpreadSorted,
    /// Bytes of key columns uploaded.
    pub h2d_bytes: usize,
}

/// Sorts a run's fixed-width key `columns` (as long as `permutation`) over `runtimes`
/// within `share`: each device uploads a contiguous slice of the columns, the statistics
/// of every slice's fields are merged so that all devices pack comparable words, and the
/// words are sorted as [`sort_host_words`] sorts them. `None` when some device lacks the
/// memory now (the caller sorts the run on one device, in pieces if need be).
pub(crate) fn sort_columns_spread(
    runtimes: &[&CudaRuntime],
    columns: &[KeyColumn],
    permutation: &mut [u32],
    share: DeviceShare,
) -> Result<Option<ColumnsSpread>, Failure> {
    let n = permutation.len();
    let d = runtimes.len();
    let ordinals: Vec<usize> = runtimes.iter().map(|rt| rt.ordinal()).collect();
    check_shape(&ordinals, &[&[]], 0)?;
    // Fewer rows than devices would leave a slice without the others' key fields.
    if n > u32::MAX as usize || n < d {
        return Ok(None);
    }
    // A device's share of the one-device estimate, which counts the raw key columns and
    // a word more than the packing takes: more than a slice's partition, its exchange or
    // its range's sort holds at once, with room for ranges a few percent past n / D (a
    // device peaked at 4.85 GB of its 9.6 GB share sorting and gathering 3·10⁸ rows of Q1,
    // docs/performance.md, 2026-11-30). So D devices take runs D times as long as one.
    let bytes = columns_bytes(columns, n) / d;
    // Past the limit the devices could never take it: no wait for them.
    if bytes > share.limit {
        return Ok(None);
    }
    let mut held = hold_all(runtimes, LeaseKind::Sort { bytes }, share);
    if held.iter().any(|h| h.available() < bytes) {
        return Ok(None);
    }
    let nullable: Vec<bool> = columns.iter().map(has_nulls).collect();
    let mut slices = cut(n, d);
    let started = Instant::now();
    let stats = on_each(&mut held, &mut slices, |_, step| {
        let (rt, slice) = (step.rt, step.state);
        let part: Vec<KeyColumn> = columns
            .iter()
            .map(|c| slice_column(c, slice.rows.clone()))
            .collect();
        let rows = slice.rows.len();
        let (upload, stats) = rt.encoder.upload_slice(
            &rt.device,
            step.staging,
            &part,
            &nullable,
            rows,
            Some(&rt.narrowing),
        )?;
        slice.upload = Some(upload);
        Ok(stats)
    })?;
    let merged = merge_stats(&stats)?;
    let h2d_bytes = slices
        .iter()
        .filter_map(|s| s.upload.as_ref())
        .map(|u| u.h2d_bytes)
        .sum();
    on_each(&mut held, &mut slices, |_, step| {
        let (rt, slice) = (step.rt, step.state);
        let upload = slice.upload.take().expect("every slice uploaded");
        slice.words = rt
            .encoder
            .pack_slice(&rt.device, &upload, &merged, slice.rows.len())?;
        drop(upload);
        rt.device.synchronize()
    })?;
    let upload = started.elapsed();
    let word_count = slices[0].words.len();
    let mut sorted = match word_count {
        // Every key equal: the input order.
        0 => {
            permutation.iter_mut().zip(0u32..).for_each(|(p, i)| *p = i);
            SpreadSorted {
                ordinals,
                range_rows: vec![n],
                peer_copies: false,
                direct_copies: false,
                overlapped: false,
                times: SpreadTimes::default(),
            }
        }
        _ => sort_loaded(&mut held, slices, word_count, permutation)?,
    };
    sorted.times.upload += upload;
    Ok(Some(ColumnsSpread { sorted, h2d_bytes }))
}

/// Whether some row of `column` is null.
fn has_nulls(column: &KeyColumn) -> bool {
    column
        .arrays
        .iter()
        .any(|a| a.data_type() != &DataType::Null && a.null_count() > 0)
}

/// Every slice's field statistics merged field by field.
fn merge_stats(stats: &[Vec<FieldStats>]) -> CudaResult<Vec<FieldStats>> {
    let fields = stats.first().map_or(0, Vec::len);
    if stats.iter().any(|s| s.len() != fields) {
        return Err(CudaError::Inconsistent(
            "slices of one run with different key fields".to_string(),
        ));
    }
    Ok((0..fields)
        .map(|f| {
            stats
                .iter()
                .map(|s| s[f])
                .reduce(FieldStats::merge)
                .expect("at least one slice")
        })
        .collect())
}

/// The steps after every device holds its slice's `word_count` key words: splitters,
/// partition, exchange, each range's sort, the permutation back into `permutation`.
fn sort_loaded(
    held: &mut [Held<'_>],
    mut slices: Vec<Slice>,
    word_count: usize,
    permutation: &mut [u32],
) -> Result<SpreadSorted, Failure> {
    let d = held.len();
    let mut times = SpreadTimes::default();
    if d == 1 {
        return sort_on_one(held, slices, permutation, times);
    }
    let started = Instant::now();
    let samples = on_each(held, &mut slices, |_, step| {
        let (rows, words) = (step.state.rows.clone(), &step.state.words);
        let count = SAMPLES_PER_RANGE * d;
        let device = &step.rt.device;
        step.rt
            .spreader
            .sample(device, words, rows.len(), rows.start as u32, count)
    })?;
    let chosen = splitters::choose(&samples, word_count, d);
    let mut parts: Vec<Option<Partitioned>> = (0..d).map(|_| None).collect();
    let mut states: Vec<(Slice, &mut Option<Partitioned>)> =
        slices.into_iter().zip(parts.iter_mut()).collect();
    let counts = on_each(held, &mut states, |_, step| {
        let (slice, part) = step.state;
        let (counts, partitioned) = partition(step.rt, slice, &chosen)?;
        **part = Some(partitioned);
        Ok(counts)
    })?;
    drop(states);
    times.partition = started.elapsed();
    let layout = Layout::new(counts);
    let started = Instant::now();
    let devices: Vec<&Device> = held.iter().map(|h| &h.rt.device).collect();
    let peer_copies = switches().peer_copies() && exchange::is_peer_connected(&devices)?;
    let mut received = exchange_ranges(held, parts, &layout, chosen.ranges(), peer_copies)?;
    times.exchange = started.elapsed();
    let range_rows: Vec<usize> = (0..d).map(|r| layout.range_rows(r)).collect();
    let outputs = split_by_lengths(permutation, &range_rows);
    let mut states: Vec<_> = received.iter_mut().zip(outputs).collect();
    let steps = on_each(held, &mut states, |_, step| {
        let (received, out) = step.state;
        match received.take() {
            Some(part) => sort_and_download(step.rt, step.staging, part.words, Some(part.ids), out),
            None => Ok((Duration::ZERO, Duration::ZERO)),
        }
    })?;
    times.sort = steps.iter().map(|s| s.0).max().unwrap_or_default();
    times.download = steps.iter().map(|s| s.1).max().unwrap_or_default();
    Ok(SpreadSorted {
        ordinals: held.iter().map(|h| h.rt.ordinal()).collect(),
        range_rows,
        peer_copies,
        direct_copies: false,
        overlapped: false,
        times,
    })
}

/// Refuses shapes the spread kernels cannot take, and devices not in ascending order (so
/// that two spread sorts never hold some devices each while waiting for the other's).
fn check_shape(ordinals: &[usize], words: &[&[u64]], n: usize) -> CudaResult<()> {
    let devices = ordinals.len();
    let unordered = ordinals.windows(2).any(|w| w[0] >= w[1]);
    let fault = if devices == 0 || devices > MAX_SPLITTERS + 1 {
        Some(format!("{devices} devices (1 to {})", MAX_SPLITTERS + 1))
    } else if unordered {
        Some(format!("devices {ordinals:?}, not in ascending order"))
    } else if words.is_empty() || words.len() > MAX_WORDS {
        Some(format!("{} key words (1 to {MAX_WORDS})", words.len()))
    } else if words.iter().any(|w| w.len() != n) {
        Some("key words of different lengths".to_string())
    } else {
        None
    };
    if let Some(fault) = fault {
        return Err(CudaError::Inconsistent(format!("a spread sort of {fault}")));
    }
    if n > u32::MAX as usize {
        return Err(CudaError::TooLarge {
            rows: n,
            max: u32::MAX as usize,
        });
    }
    Ok(())
}

/// Rows `rows` of every key word, uploaded: straight from page-locked memory, else
/// through the staging buffers.
fn upload_words(
    device: &Device,
    staging: &mut Staging,
    words: &[&[u64]],
    rows: Range<usize>,
) -> CudaResult<Vec<DeviceBuffer<u64>>> {
    let uploaded: CudaResult<Vec<_>> = words
        .iter()
        .map(|word| {
            let slice = &word[rows.clone()];
            if is_page_locked(slice) {
                let buffer = device.alloc::<u64>(slice.len(), "key words")?;
                // SAFETY: `slice` outlives the copy: the device is synchronized below.
                unsafe { device.upload(&buffer, 0, slice)? };
                return Ok(buffer);
            }
            staging.upload::<u64, _>(device, slice.len(), "key words", |start, out| {
                out.copy_from_slice(&slice[start..start + out.len()])
            })
        })
        .collect();
    // Straight copies queued before a failure finish while the host words are still lent.
    device.synchronize()?;
    uploaded
}

/// The one-device sort: the slice is every row.
fn sort_on_one(
    held: &mut [Held<'_>],
    mut slices: Vec<Slice>,
    permutation: &mut [u32],
    mut times: SpreadTimes,
) -> Result<SpreadSorted, Failure> {
    let n = permutation.len();
    let mut states = vec![(std::mem::take(&mut slices[0].words), permutation)];
    let steps = on_each(held, &mut states, |_, step| {
        let (words, out) = step.state;
        let words = std::mem::take(words);
        sort_and_download(step.rt, step.staging, words, None, out)
    })?;
    drop(states);
    (times.sort, times.download) = steps[0];
    Ok(SpreadSorted {
        ordinals: held.iter().map(|h| h.rt.ordinal()).collect(),
        range_rows: vec![n],
        peer_copies: false,
        direct_copies: false,
        overlapped: false,
        times,
    })
}

/// Classifies a slice's rows by range and groups them by range, stably: the rows per
/// range, and the slice's key words and global row ids in that order.
fn partition(
    rt: &CudaRuntime,
    slice: &mut Slice,
    chosen: &splitters::Splitters,
) -> CudaResult<(Vec<usize>, Partitioned)> {
    let words = std::mem::take(&mut slice.words);
    partition_words(rt, words, slice.rows.len(), slice.rows.start as u32, chosen)
}

/// Classifies `rows` rows keyed by `words` (global row ids from `first`) by range and
/// groups them by range, stably: the rows per range, and the words and global row ids in
/// that order.
fn partition_words(
    rt: &CudaRuntime,
    words: Vec<DeviceBuffer<u64>>,
    rows: usize,
    first: u32,
    chosen: &splitters::Splitters,
) -> CudaResult<(Vec<usize>, Partitioned)> {
    let device = &rt.device;
    let (ranges, counts) =
        rt.spreader
            .classify(device, &words, rows, first, &chosen.words, &chosen.rows)?;
    let order = match rows {
        0 => None,
        _ => {
            rt.onesweep
                .sort(device, ranges, Values::RowIds, rows)?
                .values
        }
    };
    let words = match &order {
        Some(order) => words
            .iter()
            .map(|word| rt.onesweep.gather_word(device, word, order, rows))
            .collect::<CudaResult<Vec<_>>>()?,
        None => words,
    };
    let ids = rt.spreader.row_ids(device, order.as_ref(), first, rows)?;
    device.synchronize()?;
    Ok((counts, Partitioned { words, ids }))
}

/// The exchange: range `r` of every device's partitioned rows on device `r`, for each of
/// the `ranges` ranges (devices past them get nothing).
fn exchange_ranges(
    held: &mut [Held<'_>],
    mut parts: Vec<Option<Partitioned>>,
    layout: &Layout,
    ranges: usize,
    peer_copies: bool,
) -> Result<Vec<Option<Partitioned>>, Failure> {
    let mut received: Vec<Option<Partitioned>> = (0..held.len()).map(|_| None).collect();
    if peer_copies {
        let runtimes: Vec<&CudaRuntime> = held.iter().map(|h| h.rt).collect();
        let sources: Vec<(&Device, &Partitioned)> = runtimes
            .iter()
            .zip(&parts)
            .map(|(rt, p)| (&rt.device, p.as_ref().expect("every device partitioned")))
            .collect();
        let pulled = on_each(
            held,
            &mut received,
            |r, step: Step<'_, Option<Partitioned>>| {
                if r < ranges {
                    let device = &step.rt.device;
                    *step.state = Some(exchange::receive_from_peers(device, r, &sources, layout)?);
                }
                Ok(())
            },
        );
        drop(sources);
        // The sources are freed on their own devices once every receiver has its copies.
        on_each(held, &mut parts, |_, step| {
            step.state.take();
            Ok(())
        })?;
        pulled?;
        return Ok(received);
    }
    let hosts: Vec<HostRows> = on_each(held, &mut parts, |_, step| {
        let part = step.state.take().expect("every device partitioned");
        exchange::to_host(&step.rt.device, step.staging, &part)
    })?;
    on_each(held, &mut received, |r, step| {
        if r < ranges {
            let device = &step.rt.device;
            *step.state = Some(exchange::receive_from_host(
                device,
                step.staging,
                r,
                &hosts,
                layout,
            )?);
        }
        Ok(())
    })?;
    Ok(received)
}

/// Sorts one device's rows (`words`, with their global row `ids` in the order received;
/// `None`: rows 0..) and downloads their row ids in sorted order into `out`: the time of
/// each.
fn sort_and_download(
    rt: &CudaRuntime,
    staging: &mut Staging,
    words: Vec<DeviceBuffer<u64>>,
    ids: Option<DeviceBuffer<u32>>,
    out: &mut [u32],
) -> CudaResult<(Duration, Duration)> {
    let device = &rt.device;
    let n = out.len();
    let started = Instant::now();
    let order = sort_range(rt, words, ids, n)?;
    device.synchronize()?;
    let sorted = started.elapsed();
    let started = Instant::now();
    match order {
        Some(order) if is_page_locked(out) => {
            // SAFETY: `out` outlives the copy: the device is synchronized right after.
            unsafe { device.download(out, &order, 0)? };
            device.synchronize()?;
        }
        Some(order) => {
            staging.download(device, &order, out)?;
            device.synchronize()?;
        }
        None => out.iter_mut().zip(0u32..).for_each(|(o, i)| *o = i),
    }
    Ok((sorted, started.elapsed()))
}

/// Sorts `n` rows keyed by `words` with their global row `ids` in the order given (`None`:
/// rows 0..), in stream order: their row ids in sorted order (`None`: the identity).
fn sort_range(
    rt: &CudaRuntime,
    words: Vec<DeviceBuffer<u64>>,
    ids: Option<DeviceBuffer<u32>>,
    n: usize,
) -> CudaResult<Option<DeviceBuffer<u32>>> {
    let device = &rt.device;
    Ok(if n < 2 {
        ids
    } else if words.len() == 1 {
        let values = ids.map_or(Values::RowIds, Values::Given);
        let keys = words.into_iter().next().expect("one word");
        rt.onesweep.sort(device, keys, values, n)?.values
    } else {
        match (rt.onesweep.sort_rows_by_words(device, words, n)?, ids) {
            (Some(perm), Some(ids)) => Some(rt.spreader.gather_u32(device, &ids, &perm, n)?),
            (perm, ids) => ids.or(perm),
        }
    })
}

/// `out` cut into consecutive pieces of `lengths` (which add up to its length).
fn split_by_lengths<'a>(mut out: &'a mut [u32], lengths: &[usize]) -> Vec<&'a mut [u32]> {
    let mut pieces = Vec::with_capacity(lengths.len());
    for &len in lengths {
        let (piece, rest) = std::mem::take(&mut out).split_at_mut(len);
        pieces.push(piece);
        out = rest;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_output_in_order() {
        let mut out = [0u32; 6];
        let pieces = split_by_lengths(&mut out, &[2, 0, 4]);
        assert_eq!(
            pieces.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [2, 0, 4]
        );
        for (i, piece) in pieces.into_iter().enumerate() {
            piece.fill(i as u32);
        }
        assert_eq!(out, [0, 0, 2, 2, 2, 2]);
    }

    #[test]
    fn shapes_past_the_kernels_are_refused() {
        let word = [1u64, 2, 3];
        let two = [0, 1];
        assert!(check_shape(&two, &[&word], 3).is_ok());
        assert!(check_shape(&[], &[&word], 3).is_err());
        assert!(check_shape(&[1, 1], &[&word], 3).is_err());
        assert!(check_shape(&[1, 0], &[&word], 3).is_err());
        let many: Vec<usize> = (0..MAX_SPLITTERS + 2).collect();
        assert!(check_shape(&many, &[&word], 3).is_err());
        assert!(check_shape(&two, &[], 0).is_err());
        assert!(check_shape(&two, &[&word[..], &word[..2]], 3).is_err());
        let nine: Vec<&[u64]> = vec![&word[..]; MAX_WORDS + 1];
        assert!(check_shape(&two, &nine, 3).is_err());
    }
}
