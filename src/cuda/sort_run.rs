//! One run sorted on the device, from its keys to the permutation back on the host:
//!
//! ```text
//!  keys encoded on the host (sort_rows): packed words ──pinned, chunked──► device
//!  key columns (sort_columns): raw buffers ──► device ──encode.rs──► packed words
//!     ──dispatch.rs: OneSweep / locality / segmented──► permutation on the device
//!     ──refine.rs: ties of long strings ordered──► permutation ──pinned, chunked──► host
//!  the run keeps the device permutation and the key columns (`gather::DeviceRun`) for its
//!  payload gather; its host permutation's memory goes back to the idle vectors
//!  before all that: a lease of the device for the run's estimated bytes under the
//!  session's limit; a run larger than what is free comes back `TooLarge`, unsorted
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::AlgorithmChoice;
use crate::cuda::columns::DeviceColumn;
use crate::cuda::dispatch::sort_on_device;
use crate::cuda::encode::DeviceKeys;
use crate::cuda::encode::TieFields;
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::memory::budget::{DeviceShare, Lease, LeaseKind};
use crate::cuda::memory::device::Device;
use crate::cuda::memory::transfer::Staging;
use crate::cuda::payload::DeviceRun;
use crate::cuda::refine::Sorters;
use crate::cuda::runtime::CudaRuntime;
use crate::keys::{working_limbs, EncodedKeys, KeyColumn};
use crate::sort::{
    identity, Algorithm, DeviceUse, IdTableMaker, Permutation, Segments, SortedRun, TieRefine,
    TransferTimes,
};

/// A run's work done on the device, or not started: the run needs about `bytes` of device
/// memory and only `available` is free within its limit.
pub(super) enum Fitted<T> {
    /// Done.
    Done(T),
    /// Too large for the device memory free now.
    TooLarge {
        /// The run's estimated need.
        bytes: usize,
        /// Free within the limit when the run's turn came.
        available: usize,
    },
}

/// Device memory per row besides the packed key words: the permutation and its radix
/// buffer, and the tie refinement's scratch.
const SCRATCH_BYTES_PER_ROW: usize = 24;

/// About the most device memory sorting `n` rows with `words` packed key words takes: the
/// words and the radix sort's second buffer of each, and the scratch.
fn words_bytes(n: usize, words: usize) -> usize {
    n.saturating_mul(16 * words + SCRATCH_BYTES_PER_ROW)
}

/// About the most device memory encoding and sorting `n` rows of `columns` takes: their raw
/// buffers (they stay for the payload gather), and [`words_bytes`] of as many words as their
/// encoding may take (one per 64-bit limb, plus a word of null flags and partition ids).
pub(super) fn columns_bytes(columns: &[KeyColumn], n: usize) -> usize {
    let raw: usize = columns
        .iter()
        .flat_map(|c| &c.arrays)
        .map(|a| a.to_data().get_slice_memory_size().unwrap_or(0))
        .sum();
    let words: usize = columns
        .iter()
        .map(|c| c.arrays.first().map_or(1, |a| working_limbs(a.data_type())))
        .sum();
    raw.saturating_add(words_bytes(n, words + 1))
}

/// Runs `work` on the device once a lease for a run of about `bytes` within `share` is
/// granted, or reports the run too large for what is free then.
fn within_budget<T>(
    rt: &CudaRuntime,
    bytes: usize,
    share: DeviceShare,
    work: impl FnOnce(&Device, &mut Staging, &Lease<'_>) -> CudaResult<T>,
) -> CudaResult<Fitted<T>> {
    rt.with_lease(
        LeaseKind::Sort { bytes },
        share,
        |device, staging, lease| {
            if bytes > lease.available {
                return Ok(Fitted::TooLarge {
                    bytes,
                    available: lease.available,
                });
            }
            work(device, staging, lease).map(Fitted::Done)
        },
    )
}

/// What the lease's run took of the device.
fn device_use(lease: &Lease<'_>) -> DeviceUse {
    DeviceUse {
        peak_bytes: lease.peak_bytes(),
        wait: lease.waited,
        ordinal: Some(lease.ordinal()),
        spread_devices: 0,
    }
}

/// Sorts the rows of `keys` (encoded on the host) on the device, as `algorithm` and
/// `segments` say: the stable permutation.
pub(super) fn sort_rows(
    rt: &Arc<CudaRuntime>,
    keys: &EncodedKeys,
    algorithm: AlgorithmChoice,
    segments: Option<&Segments>,
    share: DeviceShare,
) -> CudaResult<Fitted<SortedRun>> {
    let n = keys.rows;
    if n < 2 || keys.words.is_empty() {
        return Ok(Fitted::Done(in_order(n, segments)));
    }
    let bytes = words_bytes(n, keys.words.len());
    within_budget(rt, bytes, share, |device, staging, lease| {
        let started = Instant::now();
        let (device_keys, h2d_bytes) = if keys.fits_u32() {
            let word = &keys.words[0];
            let upload = staging.upload::<u32, _>(device, n, "u32 keys", |start, out| {
                for (o, w) in out.iter_mut().zip(&word[start..]) {
                    *o = (w >> 32) as u32;
                }
            })?;
            (DeviceKeys::U32(upload), n * 4)
        } else {
            let words = keys
                .words
                .iter()
                .map(|word| {
                    staging.upload::<u64, _>(device, n, "key words", |start, out| {
                        out.copy_from_slice(&word[start..start + out.len()])
                    })
                })
                .collect::<CudaResult<Vec<_>>>()?;
            (DeviceKeys::Words(words), n * 8 * keys.words.len())
        };
        let how = How {
            algorithm,
            segments,
            upload_started: started,
            h2d_bytes,
            share,
        };
        let no_ties = TieFields::default();
        let mut run = sort_device_keys(
            rt,
            device,
            staging,
            device_keys,
            how,
            Vec::new(),
            &no_ties,
            n,
        )?;
        run.device = device_use(lease);
        Ok(run)
    })
}

/// Sorts the rows of key columns (every one [`encodable_on_device`]): their raw
/// buffers go to the device, which encodes and sorts them.
pub(super) fn sort_columns(
    rt: &Arc<CudaRuntime>,
    columns: &[KeyColumn],
    n: usize,
    algorithm: AlgorithmChoice,
    segments: Option<&Segments>,
    share: DeviceShare,
) -> CudaResult<Fitted<SortedRun>> {
    if n < 2 {
        return Ok(Fitted::Done(in_order(n, segments)));
    }
    match sort_columns_with(rt, columns, n, algorithm, segments, None, share)? {
        Fitted::Done(Some((run, _))) => Ok(Fitted::Done(run)),
        Fitted::Done(None) => Err(CudaError::Inconsistent(
            "a sort without partition ids asked for their table".to_string(),
        )),
        Fitted::TooLarge { bytes, available } => Ok(Fitted::TooLarge { bytes, available }),
    }
}

/// A run sorted by partition ids, and its rows per partition.
type RoutedRun = (SortedRun, Vec<usize>);

/// The rows per partition of a run sorted by partition ids (`None` without them).
type Counts = Option<Vec<usize>>;

/// Sorts the rows of key columns (every one fixed-width) by (partition id, columns),
/// the ids made on the device from key column `ids.column()` and a table of `ids` over
/// its range: the order and the rows per partition; `None` when that range is too wide
/// for a table.
pub(super) fn sort_columns_by_ids(
    rt: &Arc<CudaRuntime>,
    columns: &[KeyColumn],
    n: usize,
    ids: &dyn IdTableMaker,
    algorithm: AlgorithmChoice,
    share: DeviceShare,
) -> CudaResult<Fitted<Option<RoutedRun>>> {
    Ok(
        match sort_columns_with(rt, columns, n, algorithm, None, Some(ids), share)? {
            Fitted::Done(Some((run, Some(counts)))) => Fitted::Done(Some((run, counts))),
            Fitted::Done(None) => Fitted::Done(None),
            Fitted::Done(Some((_, None))) => {
                return Err(CudaError::Inconsistent(
                    "a sort by partition ids made no ids".to_string(),
                ))
            }
            Fitted::TooLarge { bytes, available } => Fitted::TooLarge { bytes, available },
        },
    )
}

/// [`Self::sort_columns`], the partition ids of `ids` leading the key when given (and
/// then the rows per partition); `None` when the table of `ids` was too wide.
fn sort_columns_with(
    rt: &Arc<CudaRuntime>,
    columns: &[KeyColumn],
    n: usize,
    algorithm: AlgorithmChoice,
    segments: Option<&Segments>,
    ids: Option<&dyn IdTableMaker>,
    share: DeviceShare,
) -> CudaResult<Fitted<Option<(SortedRun, Counts)>>> {
    let bytes = columns_bytes(columns, n);
    within_budget(rt, bytes, share, |device, staging, lease| {
        let started = Instant::now();
        crate::trace::event(|| {
            format!(
                "  {n} rows: device taken (the lease waited {:.1} ms)",
                lease.waited.as_secs_f64() * 1e3
            )
        });
        let encoded = rt
            .encoder
            .encode(device, staging, columns, n, ids, Some(&rt.narrowing))?;
        let Some(mut encoded) = encoded else {
            return Ok(None);
        };
        let counts = encoded.partition_counts.take();
        let how = How {
            algorithm,
            segments,
            upload_started: started,
            h2d_bytes: encoded.h2d_bytes,
            share,
        };
        let mut run = sort_device_keys(
            rt,
            device,
            staging,
            encoded.keys,
            how,
            encoded.columns,
            &encoded.ties,
            n,
        )?;
        run.device = device_use(lease);
        Ok(Some((run, counts)))
    })
}

/// Sorts packed key words put on the device as `how` says, orders the ties that
/// `ties` leaves (`refine.rs`), and brings the permutation back; the permutation and
/// the raw `key_columns` stay on the device for the payload gather
/// (the run's state, `DeviceRun`).
#[allow(clippy::too_many_arguments)]
fn sort_device_keys(
    rt: &Arc<CudaRuntime>,
    device: &Device,
    staging: &mut Staging,
    keys: DeviceKeys,
    how: How,
    key_columns: Vec<DeviceColumn>,
    ties: &TieFields,
    n: usize,
) -> CudaResult<SortedRun> {
    device.synchronize()?;
    let mut transfer = TransferTimes {
        upload: how.upload_started.elapsed(),
        download: Duration::ZERO,
    };
    crate::trace::event(|| format!("  {n} rows: keys on the device"));
    let order = sort_on_device(rt, device, staging, keys, how.algorithm, how.segments, n)?;
    device.synchronize()?;
    crate::trace::event(|| format!("  {n} rows: sorted on the device"));
    let (algorithm, mut perm) = (order.algorithm, order.permutation);
    let mut tie_refine = TieRefine::default();
    if !ties.is_empty() {
        let refine_started = Instant::now();
        let perm = match &mut perm {
            Some(perm) => perm,
            None => perm.insert(rt.refiner.identity(device, n)?),
        };
        let segment_ids = match how.segments {
            Some(segments) => Some(rt.segmented.segment_ids(device, staging, segments, n)?),
            None => None,
        };
        let sorters = Sorters {
            segmented: &rt.segmented,
            onesweep: &rt.onesweep,
        };
        tie_refine.groups =
            rt.refiner
                .refine(device, sorters, perm, ties, segment_ids.as_ref(), n)?;
        tie_refine.time = refine_started.elapsed();
        crate::trace::event(|| {
            format!(
                "  {n} rows: {} tie groups ordered on the device",
                tie_refine.groups
            )
        });
    }
    let (permutation, d2h_bytes) = match &perm {
        None => (identity(n), 0),
        Some(perm) => {
            let download_started = Instant::now();
            let mut permutation = rt.idle_permutations.take(n);
            staging.download(device, perm, &mut permutation)?;
            device.synchronize()?;
            transfer.download = download_started.elapsed();
            crate::trace::event(|| format!("  {n} rows: permutation downloaded"));
            (permutation, n * 4)
        }
    };
    let home = Arc::clone(&rt.idle_permutations);
    Ok(SortedRun {
        permutation: Permutation::with_home(permutation, home),
        algorithm,
        h2d_bytes: how.h2d_bytes,
        d2h_bytes,
        transfer,
        state: Some(Box::new(DeviceRun {
            runtime: Arc::clone(rt),
            permutation: perm,
            columns: key_columns,
            share: how.share,
        })),
        tie_refine,
        ..SortedRun::default()
    })
}

/// How one run is sorted on the device, and what its upload took.
struct How<'a> {
    algorithm: AlgorithmChoice,
    segments: Option<&'a Segments>,
    upload_started: Instant,
    h2d_bytes: usize,
    /// What the session's work may do on the device (the run's payload gather too).
    share: DeviceShare,
}

/// A run of fewer than two rows (or no keys): already in order.
fn in_order(n: usize, segments: Option<&Segments>) -> SortedRun {
    let algorithm = match segments {
        Some(_) => Algorithm::Segmented,
        None => Algorithm::Radix,
    };
    SortedRun::on_host(identity(n), algorithm)
}
