//! The payload gather of a run sorted over several devices (`SpreadRun`, its run state):
//! every device of the sort gathers, each a consecutive share of every window's output
//! batches, over its own PCIe link, at once.
//!
//! ```text
//!  devices linked peer to peer (up to GATHER_PEER_SLICES of them):
//!     device d: 1/D of the permutation and of every payload column over its own link;
//!     peer copies make the permutation whole on every device; each column stays in its
//!     D slices, one per device
//!  each window of output batches:  batches cut into D consecutive groups of about equal
//!     rows; device d gathers group d (`payload/`), reading each row's values from the
//!     device whose slice holds it (`gather_peer_*`), and copies it back over its own link;
//!     the groups join in order
//!  without peer access:  each device uploads the whole permutation and payload itself
//! ```
//!
//! Fixed-width and `Boolean` columns are gathered this way; view columns and every other
//! type go to the host gather. Slices are cut at multiples of 8 rows. With peer access a
//! device holds the whole permutation (4 bytes a row) but only its slice of the payload,
//! so a run whose payload is larger than one device's memory is still gathered on the
//! devices; a device short of memory keeps a prefix of the columns and the rest go to the
//! host gather.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;

use crate::cuda::columns::{upload_raw_column, PayloadLayout, RawColumn};
use crate::cuda::error::CudaResult;
use crate::cuda::gather::{payload_layout, PeerSlices, SlicedColumn};
use crate::cuda::memory::budget::{DeviceShare, LeaseKind};
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::multi_gpu::exchange::is_peer_connected;
use crate::cuda::multi_gpu::held::{hold_all, on_each, Failure, Held};
use crate::cuda::payload::{DevicePayload, DeviceRun};
use crate::cuda::runtime::{note_gather_failure, CudaRuntime};
use crate::cuda::tuning::{switches, GATHER_PEER_SLICES};
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

/// Every device's payload of the run; `None` when no column qualifies or some device could
/// hold none.
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
    let peers = runtimes.len() <= GATHER_PEER_SLICES
        && switches().peer_copies()
        && is_peer_connected(&devices)?;
    if peers {
        return sliced_payload(runtimes, rows, &columns, permutation, share);
    }
    // Each device uploads the whole permutation and payload.
    let parts = std::thread::scope(|scope| {
        let threads: Vec<_> = runtimes
            .iter()
            .map(|rt| {
                scope.spawn(move || {
                    let empty = DeviceRun::empty(Arc::clone(rt), share);
                    let made = DevicePayload::upload(rt, rows, permutation, empty);
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
    Ok(Some(SpreadPayload {
        parts,
        slices: Vec::new(),
        sliced: Vec::new(),
    }))
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
    /// Bytes uploaded.
    h2d_bytes: usize,
}

/// Each device uploads a slice of the permutation and of every column in `columns` over
/// its own link (a prefix of them where a device runs short of memory: the prefix every
/// device holds is kept); peer copies then make the permutation whole on every device,
/// and the columns stay in slices that every device's gather reads over peer access. The
/// columns are cut over all the run's rows: the permutation may be a prefix of the order
/// (a LIMIT), whose row ids still reach every row.
fn sliced_payload(
    runtimes: &[Arc<CudaRuntime>],
    rows: &RunRows,
    columns: &[(usize, PayloadLayout)],
    permutation: &[u32],
    share: DeviceShare,
) -> Result<Option<SpreadPayload>, Failure> {
    let refs: Vec<&CudaRuntime> = runtimes.iter().map(|rt| rt.as_ref()).collect();
    let n = permutation.len();
    let cuts = byte_aligned_cuts(n, refs.len());
    let row_cuts = byte_aligned_cuts(rows.rows(), refs.len());
    let started = Instant::now();
    let mut held = hold_all(&refs, LeaseKind::Gather, share);
    let mut slices: Vec<Slices> = (0..refs.len()).map(|_| Slices::default()).collect();
    let uploaded = on_each(&mut held, &mut slices, |i, step| {
        let (device, cut) = (&step.rt.device, cuts[i].clone());
        let part = &permutation[cut.clone()];
        let uploaded = step.staging.upload::<u32, _>(
            device,
            part.len(),
            "gather permutation",
            |start, out| out.copy_from_slice(&part[start..start + out.len()]),
        )?;
        step.state.permutation = Some(uploaded);
        step.state.h2d_bytes += part.len() * 4;
        for &(c, layout) in columns {
            let arrays = slice_arrays(&rows.column_arrays(c), row_cuts[i].clone());
            let narrowing = Some(&step.rt.narrowing);
            match upload_raw_column(device, step.staging, &arrays, layout, narrowing) {
                Ok((raw, bytes)) => {
                    step.state.columns.push(raw);
                    step.state.h2d_bytes += bytes;
                }
                // The columns up so far are gathered on the devices, the rest on the host.
                Err(error) if error.is_out_of_memory() => break,
                Err(error) => return Err(error),
            }
        }
        device.synchronize()
    });
    let keep = slices.iter().map(|s| s.columns.len()).min().unwrap_or(0);
    if let Err(failure) = uploaded {
        free_slices(&mut held, &mut slices);
        return Err(failure);
    }
    if keep == 0 {
        free_slices(&mut held, &mut slices);
        return Ok(None);
    }
    let mut whole: Vec<Option<DeviceBuffer<u32>>> = (0..refs.len()).map(|_| None).collect();
    let sources: Vec<(&Device, &Slices)> = refs.iter().map(|rt| &rt.device).zip(&slices).collect();
    let joined = on_each(&mut held, &mut whole, |_, step| {
        let device = &step.rt.device;
        let copied = join_permutation(device, &sources, &cuts, n);
        // Copies queued before a failure finish before the sources can be freed.
        device.synchronize()?;
        *step.state = Some(copied?);
        Ok(())
    });
    drop(sources);
    // The permutation's slices, and the columns past those every device holds, are freed
    // on their own devices once every device has its copies.
    let trimmed = on_each(&mut held, &mut slices, |_, step| {
        step.state.permutation = None;
        step.state.columns.truncate(keep);
        Ok(())
    });
    let tables = joined
        .and(trimmed)
        .and_then(|_| slice_tables(&slices, &row_cuts, rows, &columns[..keep]));
    let tables = match tables {
        Ok(tables) => tables,
        Err(failure) => {
            free_slices(&mut held, &mut slices);
            on_each(&mut held, &mut whole, |_, step| {
                step.state.take();
                Ok(())
            })
            .ok();
            return Err(failure);
        }
    };
    drop(held);
    let upload = started.elapsed();
    let parts = runtimes
        .iter()
        .zip(whole)
        .zip(&slices)
        .map(|((rt, whole), slices)| {
            let stats = PayloadStats {
                h2d_bytes: slices.h2d_bytes,
                upload,
                ..PayloadStats::default()
            };
            let whole = whole.expect("every device joined the permutation");
            DevicePayload::sliced(Arc::clone(rt), share, whole, tables.clone(), stats)
        })
        .collect();
    let slices = runtimes
        .iter()
        .zip(slices)
        .map(|(rt, slices)| (Arc::clone(rt), slices.columns))
        .collect();
    let sliced = columns[..keep].iter().map(|&(c, _)| c).collect();
    Ok(Some(SpreadPayload {
        parts,
        slices,
        sliced,
    }))
}

/// Frees every device's slices on its own device.
fn free_slices(held: &mut [Held<'_>], slices: &mut [Slices]) {
    let freed = on_each(held, slices, |_, step| {
        *step.state = Slices::default();
        Ok(())
    });
    if let Err(failure) = freed {
        log::debug!(
            "gpusort: freeing a spread gather's slices: {}",
            failure.error
        );
    }
}

/// Each of `columns` (index in the run, layout) as the gather kernels read it from every
/// device's slices: (index, type, slices).
fn slice_tables(
    slices: &[Slices],
    cuts: &[Range<usize>],
    rows: &RunRows,
    columns: &[(usize, PayloadLayout)],
) -> Result<Vec<(usize, DataType, SlicedColumn)>, Failure> {
    let on_host = |error| Failure {
        ordinal: None,
        error,
    };
    columns
        .iter()
        .enumerate()
        .map(|(k, &(c, layout))| {
            let table = |part: &dyn Fn(&RawColumn) -> u64| {
                let parts: Vec<(u64, usize)> = slices
                    .iter()
                    .zip(cuts)
                    .map(|(s, cut)| (part(&s.columns[k]), cut.start))
                    .collect();
                PeerSlices::new(&parts).map_err(on_host)
            };
            let values = table(&|raw| raw.values.ptr())?;
            let nullable = slices.iter().any(|s| s.columns[k].validity.is_some());
            let validity = match nullable {
                true => Some(table(&|raw| raw.validity.as_ref().map_or(0, |v| v.ptr()))?),
                false => None,
            };
            let data_type = rows.column_type(c).expect("a candidate column").clone();
            let sliced = SlicedColumn {
                layout,
                values,
                validity,
            };
            Ok((c, data_type, sliced))
        })
        .collect()
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

/// A spread run's payload on each of its devices; each window's batches are gathered by
/// all of them at once.
pub(crate) struct SpreadPayload {
    parts: Vec<DevicePayload>,
    /// Each device's slices of the columns the parts read over peer access (none when
    /// each part holds the whole payload), with the device that holds them.
    slices: Vec<(Arc<CudaRuntime>, Vec<RawColumn>)>,
    /// The run's index of each column in `slices`, in their order.
    sliced: Vec<usize>,
}

impl SpreadPayload {
    /// Waits until no device's gather still reads the slices, so that they can be freed.
    fn wait_for_parts(&self) {
        for part in &self.parts {
            let device = &part.runtime().device;
            let _ = device.bind().and_then(|()| device.synchronize());
        }
    }

    /// Frees the slices of the columns `keep` (run indices) does not name, each on its own
    /// device.
    fn free_slices_but(&mut self, keep: &[usize]) {
        if self.sliced.iter().all(|c| keep.contains(c)) {
            return;
        }
        self.wait_for_parts();
        let kept: Vec<bool> = self.sliced.iter().map(|c| keep.contains(c)).collect();
        for (rt, columns) in &mut self.slices {
            let _ = rt.device.bind();
            let mut flags = kept.iter();
            columns.retain(|_| *flags.next().expect("a flag per slice"));
        }
        self.sliced.retain(|c| keep.contains(c));
    }
}

impl Drop for SpreadPayload {
    fn drop(&mut self) {
        if self.slices.is_empty() {
            return;
        }
        // Every device's gathers read the slices: their work ends before any slice is
        // freed, and each slice is freed with its own device current.
        self.wait_for_parts();
        self.parts.clear();
        for (rt, columns) in self.slices.drain(..) {
            let _ = rt.device.bind();
            drop(columns);
        }
    }
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
        self.free_slices_but(keep);
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
            early_columns: all.iter().map(|s| s.early_columns).sum(),
            early_h2d_bytes: all.iter().map(|s| s.early_h2d_bytes).sum(),
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
