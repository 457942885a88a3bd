//! The payload gather of a run sorted over several devices (`SpreadRun`, its run state):
//! every device of the sort gathers, each a consecutive share of every window's output
//! batches, over its own PCIe link, at once.
//!
//! ```text
//!  upload, devices linked peer to peer:   device d: 1/D of the permutation and of every
//!     payload column over its own link ──► peer copies ──► the whole of each on every device
//!  without peer access:                    each device uploads the whole of each itself
//!  each window of output batches:          batches cut into D consecutive groups of about
//!     equal rows; device d gathers group d (`payload.rs`, as for a one-device run) and
//!     copies it back over its own link; the groups join in order
//! ```
//!
//! Fixed-width and `Boolean` columns are gathered this way; view columns and every other
//! type go to the host gather. Slices are cut at multiples of 8 rows, so that bitmaps
//! join byte by byte. Every device holds the whole payload: a run spread over devices
//! because it does not fit one still gathers on the host past what fits.

use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::common::Result;

use crate::cuda::columns::{upload_raw_column, DeviceColumn, PayloadLayout, RawColumn};
use crate::cuda::error::CudaResult;
use crate::cuda::gather::payload_layout;
use crate::cuda::memory::budget::{DeviceShare, LeaseKind};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::multi_gpu::exchange::is_peer_connected;
use crate::cuda::multi_gpu::held::{hold_all, on_each, Failure};
use crate::cuda::payload::{DevicePayload, DeviceRun};
use crate::cuda::runtime::{note_gather_failure, CudaRuntime};
use crate::cuda::tuning::switches;
use crate::gather::{PayloadGather, PayloadStats, RunRows};
use crate::keys::slice_arrays;
use crate::sort::RunState;

/// What a run sorted over several devices leaves for its payload gather: the devices, and
/// the session's share of each.
pub(crate) struct SpreadRun {
    /// The devices of the sort, in ordinal order.
    pub runtimes: Vec<Arc<CudaRuntime>>,
    /// What the session's work may do on each.
    pub share: DeviceShare,
}

impl RunState for SpreadRun {
    fn payload_gatherer(
        self: Box<Self>,
        rows: &RunRows,
        permutation: &[u32],
    ) -> Option<Box<dyn PayloadGather>> {
        let usable: Vec<Arc<CudaRuntime>> = self
            .runtimes
            .iter()
            .filter(|rt| !rt.is_disabled())
            .cloned()
            .collect();
        if usable.len() < 2 {
            let one = DeviceRun::empty(usable.into_iter().next()?, self.share);
            return Box::new(one).payload_gatherer(rows, permutation);
        }
        match spread_payload(&usable, rows, permutation, self.share) {
            Ok(payload) => payload.map(|p| Box::new(p) as Box<dyn PayloadGather>),
            Err(failure) => {
                let (rows, faults) = (permutation.len(), self.share.faults);
                match failure.ordinal {
                    Some(ordinal) => note_gather_failure(ordinal, &failure.error, rows, faults),
                    None => log::warn!(
                        "gpusort: gathering {rows} rows on several devices failed ({}); \
                         gathering them on the host",
                        failure.error
                    ),
                }
                None
            }
        }
    }

    fn order_changed(&mut self) {}
}

/// The columns of `rows` gathered on several devices: fixed-width and `Boolean` ones.
fn candidates(rows: &RunRows) -> Vec<(usize, PayloadLayout)> {
    (0..rows.num_columns())
        .filter_map(|c| match payload_layout(rows.column_type(c)?) {
            Some(layout @ (PayloadLayout::Fixed(_) | PayloadLayout::Bits)) => Some((c, layout)),
            _ => None,
        })
        .collect()
}

/// Every device's payload of the run, each holding the whole permutation and columns;
/// `None` when no column qualifies or some device could hold none.
fn spread_payload(
    runtimes: &[Arc<CudaRuntime>],
    rows: &RunRows,
    permutation: &[u32],
    share: DeviceShare,
) -> Result<Option<SpreadPayload>, Failure> {
    let columns = candidates(rows);
    if columns.is_empty() || permutation.is_empty() {
        return Ok(None);
    }
    let devices: Vec<&Device> = runtimes.iter().map(|rt| &rt.device).collect();
    let retained = if switches().peer_copies() && is_peer_connected(&devices)? {
        shared_upload(runtimes, rows, &columns, permutation, share)?
    } else {
        let empty = |rt: &Arc<CudaRuntime>| DeviceRun::empty(Arc::clone(rt), share);
        runtimes.iter().map(empty).collect()
    };
    // Each device's payload from what it holds; without peer access it uploads all of it.
    let parts = std::thread::scope(|scope| {
        let threads: Vec<_> = runtimes
            .iter()
            .zip(retained)
            .map(|(rt, kept)| {
                scope.spawn(move || {
                    let made = DevicePayload::upload(rt, rows, permutation, kept);
                    made.map_err(|error| Failure {
                        ordinal: Some(rt.ordinal()),
                        error,
                    })
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a payload upload thread panicked"))
            .collect::<Result<Vec<_>, Failure>>()
    })?;
    let Some(mut parts): Option<Vec<DevicePayload>> = parts.into_iter().collect() else {
        return Ok(None);
    };
    // A device short of memory keeps a prefix of the columns: all gather the shortest.
    let keep = parts
        .iter()
        .map(|p| p.columns().to_vec())
        .min_by_key(Vec::len)
        .unwrap_or_default();
    if keep.is_empty() {
        return Ok(None);
    }
    parts.iter_mut().for_each(|p| p.retain_columns(&keep));
    Ok(Some(SpreadPayload { parts }))
}

/// `n` rows cut into `d` consecutive slices starting at multiples of 8 rows.
fn byte_aligned_cuts(n: usize, d: usize) -> Vec<Range<usize>> {
    let at = |i: usize| if i == d { n } else { i * n / d / 8 * 8 };
    (0..d).map(|i| at(i)..at(i + 1)).collect()
}

/// One device's slices of the permutation and of each gathered column.
#[derive(Default)]
struct Slices {
    permutation: Option<DeviceBuffer<u32>>,
    columns: Vec<RawColumn>,
}

/// Each device uploads a slice of the permutation and of every column in `columns` over
/// its own link; then every device copies the others' slices from them: the whole of each
/// on every device, as the state a one-device run's gather starts from.
fn shared_upload(
    runtimes: &[Arc<CudaRuntime>],
    rows: &RunRows,
    columns: &[(usize, PayloadLayout)],
    permutation: &[u32],
    share: DeviceShare,
) -> Result<Vec<DeviceRun>, Failure> {
    let refs: Vec<&CudaRuntime> = runtimes.iter().map(|rt| rt.as_ref()).collect();
    let n = permutation.len();
    let cuts = byte_aligned_cuts(n, refs.len());
    let mut held = hold_all(&refs, LeaseKind::Gather, share);
    let mut slices: Vec<Slices> = (0..refs.len()).map(|_| Slices::default()).collect();
    on_each(&mut held, &mut slices, |i, step| {
        let (device, cut) = (&step.rt.device, cuts[i].clone());
        let part = &permutation[cut.clone()];
        let uploaded = step.staging.upload::<u32, _>(
            device,
            part.len(),
            "gather permutation",
            |start, out| out.copy_from_slice(&part[start..start + out.len()]),
        )?;
        step.state.permutation = Some(uploaded);
        for &(c, layout) in columns {
            let arrays = slice_arrays(&rows.column_arrays(c), cut.clone());
            let narrowing = Some(&step.rt.narrowing);
            let (raw, _) = upload_raw_column(device, step.staging, &arrays, layout, narrowing)?;
            step.state.columns.push(raw);
        }
        device.synchronize()
    })?;
    let mut runs: Vec<Option<DeviceRun>> = (0..refs.len()).map(|_| None).collect();
    let sources: Vec<(&Device, &Slices)> = refs.iter().map(|rt| &rt.device).zip(&slices).collect();
    let joined = on_each(&mut held, &mut runs, |i, step| {
        let device = &step.rt.device;
        let copied = (|| {
            let whole = join_permutation(device, &sources, &cuts, n)?;
            let mut kept = Vec::with_capacity(columns.len());
            for (k, &(c, layout)) in columns.iter().enumerate() {
                let raw = join_column(device, &sources, &cuts, k, layout, n)?;
                let arrays = rows.column_arrays(c);
                kept.push(DeviceColumn { arrays, raw });
            }
            Ok((whole, kept))
        })();
        // Copies queued before a failure finish before the sources can be freed.
        device.synchronize()?;
        let (whole, kept) = copied?;
        *step.state = Some(DeviceRun {
            runtime: Arc::clone(&runtimes[i]),
            permutation: Some(whole),
            columns: kept,
            share,
        });
        Ok(())
    });
    drop(sources);
    // The slices are freed on their own devices once every device has its copies.
    on_each(&mut held, &mut slices, |_, step| {
        *step.state = Slices::default();
        Ok(())
    })?;
    joined?;
    Ok(runs.into_iter().flatten().collect())
}

/// The whole permutation on `device`, from every device's slice.
fn join_permutation(
    device: &Device,
    sources: &[(&Device, &Slices)],
    cuts: &[Range<usize>],
    n: usize,
) -> CudaResult<DeviceBuffer<u32>> {
    let whole = device.alloc::<u32>(n, "gather permutation")?;
    for ((from, slices), cut) in sources.iter().zip(cuts) {
        if let Some(part) = &slices.permutation {
            // SAFETY: the slice lies within both buffers; the sources live until every
            // device has synchronized (the caller's step).
            unsafe { device.copy_from(&whole, cut.start, from, part, 0, cut.len())? };
        }
    }
    Ok(whole)
}

/// Column `k` whole on `device`, from every device's slice of it: values byte for byte
/// (bitmaps from byte `start / 8`), validity where any slice has one (all set where a
/// slice has none).
fn join_column(
    device: &Device,
    sources: &[(&Device, &Slices)],
    cuts: &[Range<usize>],
    k: usize,
    layout: PayloadLayout,
    n: usize,
) -> CudaResult<RawColumn> {
    let bits = |rows: usize| rows.div_ceil(8);
    let bytes_of = |rows: usize| match layout {
        PayloadLayout::Fixed(width) => rows * width,
        _ => bits(rows),
    };
    let what = match layout {
        PayloadLayout::Fixed(_) => "column values",
        _ => "Boolean column values",
    };
    let padded = |bytes: usize| bytes.div_ceil(8).max(1) * 8;
    let values = device.alloc::<u8>(padded(bytes_of(n)), what)?;
    let nullable = sources.iter().any(|(_, s)| s.columns[k].validity.is_some());
    let validity = match nullable {
        true => Some(device.alloc::<u8>(padded(bits(n)), "column validity")?),
        false => None,
    };
    for ((from, slices), cut) in sources.iter().zip(cuts) {
        let raw = &slices.columns[k];
        let (at, len) = (bytes_of(cut.start), bytes_of(cut.len()));
        // SAFETY: each piece lies within both buffers (slices start at multiples of 8
        // rows); the sources live until every device has synchronized.
        unsafe { device.copy_from(&values, at, from, &raw.values, 0, len)? };
        if let Some(whole) = &validity {
            let (at, len) = (cut.start / 8, bits(cut.len()));
            match &raw.validity {
                // SAFETY: as above.
                Some(part) => unsafe { device.copy_from(whole, at, from, part, 0, len)? },
                None => device.fill_bytes(whole, at, len, 0xFF)?,
            }
        }
    }
    Ok(RawColumn {
        layout,
        values: Arc::new(values),
        validity: validity.map(Arc::new),
        view_data: None,
    })
}

/// A spread run's payload on each of its devices; each window's batches are gathered by
/// all of them at once.
pub(crate) struct SpreadPayload {
    parts: Vec<DevicePayload>,
}

/// Output batches `batch_rows` cut into `parts` consecutive groups of about equal rows:
/// each group's range of batch indices.
fn batch_groups(batch_rows: &[usize], parts: usize) -> Vec<Range<usize>> {
    let total: usize = batch_rows.iter().sum();
    let mut groups = Vec::with_capacity(parts);
    let (mut start, mut rows) = (0, 0);
    for (b, &r) in batch_rows.iter().enumerate() {
        rows += r;
        let goal = (groups.len() + 1) * total / parts.max(1);
        if rows >= goal && groups.len() + 1 < parts {
            groups.push(start..b + 1);
            start = b + 1;
        }
    }
    groups.push(start..batch_rows.len());
    groups.resize(parts.max(1), batch_rows.len()..batch_rows.len());
    groups
}

impl PayloadGather for SpreadPayload {
    fn columns(&self) -> &[usize] {
        self.parts[0].columns()
    }

    fn retain_columns(&mut self, keep: &[usize]) {
        self.parts.iter_mut().for_each(|p| p.retain_columns(keep));
    }

    fn gather(&mut self, start: usize, batch_rows: &[usize]) -> Result<Option<Vec<Vec<ArrayRef>>>> {
        let groups = batch_groups(batch_rows, self.parts.len());
        let firsts: Vec<usize> = groups
            .iter()
            .map(|g| start + batch_rows[..g.start].iter().sum::<usize>())
            .collect();
        let gathered = std::thread::scope(|scope| {
            let threads: Vec<_> = self
                .parts
                .iter_mut()
                .zip(groups.iter().zip(&firsts))
                .filter(|(_, (g, _))| !g.is_empty())
                .map(|(part, (g, &first))| {
                    let batches = &batch_rows[g.clone()];
                    scope.spawn(move || part.gather(first, batches))
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("a gather thread panicked"))
                .collect::<Result<Vec<_>>>()
        })?;
        let Some(gathered): Option<Vec<Vec<Vec<ArrayRef>>>> = gathered.into_iter().collect() else {
            return Ok(None);
        };
        let columns = self.columns().len();
        let joined = (0..columns)
            .map(|c| gathered.iter().flat_map(|g| g[c].iter().cloned()).collect())
            .collect();
        Ok(Some(joined))
    }

    fn stats(&self) -> PayloadStats {
        let all: Vec<PayloadStats> = self.parts.iter().map(|p| p.stats()).collect();
        PayloadStats {
            h2d_bytes: all.iter().map(|s| s.h2d_bytes).sum(),
            d2h_bytes: all.iter().map(|s| s.d2h_bytes).sum(),
            upload: all.iter().map(|s| s.upload).max().unwrap_or_default(),
            windows: all.iter().map(|s| s.windows).max().unwrap_or_default(),
            device_peak_bytes: all.iter().map(|s| s.device_peak_bytes).max().unwrap_or(0),
            device_wait: all.iter().map(|s| s.device_wait).max().unwrap_or_default(),
        }
    }

    fn window_rows(&self, most: usize) -> usize {
        self.parts
            .iter()
            .map(|p| p.window_rows(most))
            .min()
            .unwrap_or(most)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_start_at_multiples_of_eight_rows() {
        assert_eq!(byte_aligned_cuts(100, 3), vec![0..32, 32..64, 64..100]);
        assert_eq!(byte_aligned_cuts(5, 2), vec![0..0, 0..5]);
        assert_eq!(byte_aligned_cuts(16, 1), vec![0..16]);
    }

    #[test]
    fn batch_groups_split_rows_evenly_in_order() {
        assert_eq!(batch_groups(&[10, 10, 10, 10], 2), vec![0..2, 2..4]);
        assert_eq!(batch_groups(&[10, 10, 10, 3], 2), vec![0..2, 2..4]);
        assert_eq!(batch_groups(&[7], 2), vec![0..1, 1..1]);
        assert_eq!(batch_groups(&[], 3), vec![0..0, 0..0, 0..0]);
        assert_eq!(batch_groups(&[5, 5, 5], 3), vec![0..1, 1..2, 2..3]);
    }
}
