//! The exchange of a spread sort: every device sends the rows of each key range (its keys
//! and their global row ids, already grouped by range) to the device that sorts that range.
//!
//! ```text
//!  device s, partitioned:  [ range 0 | range 1 | ... ]      counts[s][r] rows of range r
//!  device r, received:     [ from 0 | from 1 | ... ]        sources in device order, so
//!                                                           equal keys stay in row order
//! ```
//!
//! Between devices that can reach each other's memory (NVLink or PCIe peer-to-peer), each
//! receiver pulls its pieces with peer copies on its own stream; otherwise every device
//! brings its rows back to host memory and each receiver uploads its pieces from there
//! (`GPUSORT_PEER_COPIES=0` forces that path).

use std::sync::Mutex;

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::Staging;

/// A device's rows in range order: key words (most significant first) and global row ids.
pub(super) struct Partitioned {
    pub words: Vec<DeviceBuffer<u64>>,
    pub ids: DeviceBuffer<u32>,
}

/// The same rows in host memory (the exchange without peer access).
#[derive(Default)]
pub(super) struct HostRows {
    words: Vec<Vec<u64>>,
    ids: Vec<u32>,
}

/// Where every piece of the exchange starts: `counts[s][r]` rows of range `r` in source
/// `s` (a device's partitioned rows, or one chunk of them; sources in row order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Layout {
    counts: Vec<Vec<usize>>,
}

impl Layout {
    /// The layout of `counts` (one row per source, one column per range).
    pub(super) fn new(counts: Vec<Vec<usize>>) -> Self {
        Self { counts }
    }

    /// Rows of range `r`, from every device.
    pub(super) fn range_rows(&self, r: usize) -> usize {
        self.counts
            .iter()
            .map(|c| c.get(r).copied().unwrap_or(0))
            .sum()
    }

    /// Where range `r` starts among device `s`'s partitioned rows.
    fn source_start(&self, s: usize, r: usize) -> usize {
        self.counts[s][..r].iter().sum()
    }

    /// Where device `s`'s rows of range `r` start among the rows range `r` receives.
    fn dest_start(&self, s: usize, r: usize) -> usize {
        self.counts[..s].iter().map(|c| c[r]).sum()
    }

    /// The pieces range `r` receives: (source device, start there, start here, rows).
    fn pieces(&self, r: usize) -> impl Iterator<Item = (usize, usize, usize, usize)> + '_ {
        (0..self.counts.len())
            .map(move |s| {
                (
                    s,
                    self.source_start(s, r),
                    self.dest_start(s, r),
                    self.counts[s][r],
                )
            })
            .filter(|piece| piece.3 > 0)
    }
}

/// Pairs of devices (holder, reader) whose pool memory the reader may access, as found.
static PEERS: Mutex<Vec<(usize, usize, bool)>> = Mutex::new(Vec::new());

/// Whether every device of `devices` can read every other's memory; grants that access
/// (once per pair and process) where the hardware allows it.
pub(super) fn is_peer_connected(devices: &[&Device]) -> CudaResult<bool> {
    let mut known = PEERS.lock().unwrap_or_else(|p| p.into_inner());
    for holder in devices {
        for reader in devices {
            if holder.ordinal == reader.ordinal {
                continue;
            }
            let pair = (holder.ordinal, reader.ordinal);
            let found = known.iter().find(|k| (k.0, k.1) == pair).map(|k| k.2);
            let connected = match found {
                Some(connected) => connected,
                None => {
                    let connected = holder.share_pool_with(reader)?;
                    known.push((pair.0, pair.1, connected));
                    connected
                }
            };
            if !connected {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Range `r`'s rows pulled from every device's partitioned rows with peer copies, on
/// `device`'s stream (waited for before returning).
pub(super) fn receive_from_peers(
    device: &Device,
    r: usize,
    sources: &[(&Device, &Partitioned)],
    layout: &Layout,
) -> CudaResult<Partitioned> {
    let rows = layout.range_rows(r);
    let words = sources[0].1.words.len();
    let received = Partitioned {
        words: (0..words)
            .map(|_| device.alloc::<u64>(rows, "received key words"))
            .collect::<CudaResult<_>>()?,
        ids: device.alloc::<u32>(rows, "received row ids")?,
    };
    let queued = layout.pieces(r).try_for_each(|(s, from, to, len)| {
        let (peer, part) = sources[s];
        // SAFETY: each piece lies within both buffers (the layout's counts are the
        // partition's); the sources stay alive and unchanged until every receiver has
        // synchronized, after a failure too (below; the caller's step ends after it).
        unsafe {
            for (dst, src) in received.words.iter().zip(&part.words) {
                device.copy_from(dst, to, peer, src, from, len)?;
            }
            device.copy_from(&received.ids, to, peer, &part.ids, from, len)
        }
    });
    device.synchronize()?;
    queued?;
    Ok(received)
}

/// A device's partitioned rows brought back to host memory.
pub(super) fn to_host(
    device: &Device,
    staging: &mut Staging,
    part: &Partitioned,
) -> CudaResult<HostRows> {
    let mut host = HostRows::default();
    for word in &part.words {
        let mut out = vec![0u64; word.len()];
        staging.download(device, word, &mut out)?;
        host.words.push(out);
    }
    host.ids = vec![0u32; part.ids.len()];
    staging.download(device, &part.ids, &mut host.ids)?;
    device.synchronize()?;
    Ok(host)
}

/// Range `r`'s rows uploaded from every device's rows in host memory.
pub(super) fn receive_from_host(
    device: &Device,
    staging: &mut Staging,
    r: usize,
    sources: &[HostRows],
    layout: &Layout,
) -> CudaResult<Partitioned> {
    let rows = layout.range_rows(r);
    let pieces: Vec<_> = layout.pieces(r).collect();
    let words = sources.first().map_or(0, |s| s.words.len());
    let mut received = Vec::with_capacity(words);
    for w in 0..words {
        received.push(staging.upload::<u64, _>(
            device,
            rows,
            "received key words",
            |start, out| fill_from_pieces(&pieces, start, out, |s| &sources[s].words[w]),
        )?);
    }
    let ids = staging.upload::<u32, _>(device, rows, "received row ids", |start, out| {
        fill_from_pieces(&pieces, start, out, |s| &sources[s].ids)
    })?;
    device.synchronize()?;
    Ok(Partitioned {
        words: received,
        ids,
    })
}

/// Writes rows `start .. start + out.len()` of the concatenation of `pieces` (source,
/// start there, start here, rows) into `out`.
fn fill_from_pieces<'a, T: Copy + 'a>(
    pieces: &[(usize, usize, usize, usize)],
    start: usize,
    out: &mut [T],
    source: impl Fn(usize) -> &'a [T],
) {
    let end = start + out.len();
    for &(s, from, to, len) in pieces {
        let (lo, hi) = (to.max(start), (to + len).min(end));
        if lo < hi {
            let src = &source(s)[from + (lo - to)..from + (hi - to)];
            out[lo - start..hi - start].copy_from_slice(src);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_places_each_piece() {
        // Device 0 holds 2 rows of range 0 and 3 of range 1; device 1 holds 4 and 1.
        let layout = Layout::new(vec![vec![2, 3], vec![4, 1]]);
        assert_eq!((layout.range_rows(0), layout.range_rows(1)), (6, 4));
        let range1: Vec<_> = layout.pieces(1).collect();
        assert_eq!(range1, vec![(0, 2, 0, 3), (1, 4, 3, 1)]);
        let empty = Layout::new(vec![vec![0, 5], vec![0, 0]]);
        assert_eq!(empty.pieces(0).count(), 0);
        assert_eq!(empty.pieces(1).collect::<Vec<_>>(), vec![(0, 0, 0, 5)]);
    }

    #[test]
    fn fill_copies_across_piece_boundaries() {
        let a = [10u32, 11, 12, 13, 14];
        let b = [20u32, 21, 22];
        // Range 1 takes a[2..5] then b[1..3].
        let pieces = [(0, 2, 0, 3), (1, 1, 3, 2)];
        let sources = [&a[..], &b[..]];
        let mut out = [0u32; 3];
        fill_from_pieces(&pieces, 2, &mut out, |s| sources[s]);
        assert_eq!(out, [14, 21, 22]);
        let mut whole = [0u32; 5];
        fill_from_pieces(&pieces, 0, &mut whole, |s| sources[s]);
        assert_eq!(whole, [12, 13, 14, 21, 22]);
    }
}
