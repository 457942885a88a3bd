//! The input of one page launch (`parquet.rs`): every column's values, offsets and validity
//! laid end to end, each from a multiple of 16 bytes, and how it reaches the device.
//!
//! A writer's page job lays it out in host memory before it takes the device
//! ([`PreparedInput`], a region of the gather's idle host memory, page-locked once it has
//! been idle), so that while it holds the device the input goes up in one copy at the
//! bus's speed, not through the staging buffers' host copies, which the gather and the
//! other jobs would wait for.

use std::mem::MaybeUninit;
use std::sync::Arc;

use rayon::prelude::*;

use crate::cuda::memory::host_memory::{HostRegions, LentRegion};

/// A column's parts as the input holds them: its values (or byte arrays' bytes), its
/// byte arrays' offsets, its validity bitmap.
pub(super) type ColumnParts<'a> = (&'a [u8], Option<&'a [u32]>, Option<&'a [u8]>);

/// Bytes of a part of the layout one thread copies.
const FILL_CHUNK: usize = 4 << 20;

/// Where a column's parts lie in the launch's input (bytes from its start).
#[derive(Debug, Clone, Copy)]
pub(super) struct Placed {
    pub(super) values_at: usize,
    pub(super) offsets_at: Option<usize>,
    pub(super) validity_at: Option<usize>,
}

/// The input of a launch: its byte ranges in order, each column's places, its length.
pub(super) struct InputLayout<'a> {
    segments: Vec<(usize, &'a [u8])>,
    pub(super) placed: Vec<Placed>,
    pub(super) bytes: usize,
}

impl<'a> InputLayout<'a> {
    /// The columns' values, offsets and validity, each from a multiple of 16 bytes.
    pub(super) fn of(columns: impl IntoIterator<Item = ColumnParts<'a>>) -> Self {
        let mut layout = Self {
            segments: Vec::new(),
            placed: Vec::new(),
            bytes: 0,
        };
        for (values, offsets, validity) in columns {
            let values_at = layout.place(values);
            let offsets_at = offsets.map(|offsets| layout.place(as_bytes(offsets)));
            let validity_at = validity.map(|bits| layout.place(bits));
            layout.placed.push(Placed {
                values_at,
                offsets_at,
                validity_at,
            });
        }
        layout
    }

    /// Puts `bytes` at the end, from a multiple of 16; where they start.
    fn place(&mut self, bytes: &'a [u8]) -> usize {
        let at = self.bytes;
        self.segments.push((at, bytes));
        self.bytes = (at + bytes.len()).div_ceil(16) * 16;
        at
    }

    /// Writes bytes `start .. start + out.len()` of the input (zeros between the ranges).
    pub(super) fn fill(&self, start: usize, out: &mut [u8]) {
        // SAFETY: a `u8` is a `MaybeUninit<u8>` that is initialized; `fill_uninit` writes
        // only initialized bytes.
        let out = unsafe { &mut *(out as *mut [u8] as *mut [MaybeUninit<u8>]) };
        self.fill_uninit(start, out);
    }

    /// [`Self::fill`] into memory not written yet; every byte of `out` is written.
    fn fill_uninit(&self, start: usize, out: &mut [MaybeUninit<u8>]) {
        let end = start + out.len();
        let zero = |out: &mut [MaybeUninit<u8>]| out.iter_mut().for_each(|b| _ = b.write(0));
        let mut written = start;
        let first = self
            .segments
            .partition_point(|(at, bytes)| at + bytes.len() <= start);
        for &(at, bytes) in &self.segments[first..] {
            if at >= end {
                break;
            }
            let from = at.max(start);
            let to = (at + bytes.len()).min(end);
            zero(&mut out[written - start..from - start]);
            let part = &mut out[from - start..to - start];
            // SAFETY: `part` and the source range have the same length and do not overlap
            // (the input's columns are not in `out`).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes[from - at..to - at].as_ptr(),
                    part.as_mut_ptr().cast::<u8>(),
                    part.len(),
                )
            };
            written = to;
        }
        zero(&mut out[written - start..]);
    }
}

/// `offsets` as their little-endian bytes.
fn as_bytes(offsets: &[u32]) -> &[u8] {
    // SAFETY: any byte of a `u32` is a valid `u8`; the slice covers the same memory.
    unsafe {
        std::slice::from_raw_parts(
            offsets.as_ptr().cast::<u8>(),
            std::mem::size_of_val(offsets),
        )
    }
}

/// A launch's input laid out in host memory ahead of its launch.
pub struct PreparedInput {
    region: LentRegion,
    bytes: usize,
}

impl PreparedInput {
    /// The columns' input written into a region of `regions` (by the rayon pool's threads).
    pub(super) fn of<'a>(
        columns: impl IntoIterator<Item = ColumnParts<'a>>,
        regions: &Arc<HostRegions>,
    ) -> Self {
        let layout = InputLayout::of(columns);
        let region = regions.take(layout.bytes.max(1));
        // SAFETY: the region holds at least `layout.bytes` bytes and is this input's alone;
        // its bytes are not read before `fill_uninit` wrote every one of them.
        let out = unsafe {
            std::slice::from_raw_parts_mut(
                region.as_mut_ptr().cast::<MaybeUninit<u8>>(),
                layout.bytes,
            )
        };
        out.par_chunks_mut(FILL_CHUNK)
            .enumerate()
            .for_each(|(i, part)| layout.fill_uninit(i * FILL_CHUNK, part));
        Self {
            region,
            bytes: layout.bytes,
        }
    }

    /// The input's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: written in full by `of`, and not written since.
        unsafe { std::slice::from_raw_parts(self.region.as_mut_ptr(), self.bytes) }
    }

    /// Whether the device may copy the input straight from its region.
    pub(super) fn locked(&self) -> bool {
        self.region.is_locked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_fill_their_places_and_zeros_between() {
        let a = [1u8, 2, 3];
        let b = [9u8; 5];
        let layout = InputLayout {
            segments: vec![(0, &a[..]), (16, &b[..])],
            placed: Vec::new(),
            bytes: 32,
        };
        let mut out = vec![7u8; 32];
        layout.fill(0, &mut out[..10]);
        layout.fill(10, &mut out[10..18]);
        layout.fill(18, &mut out[18..]);
        let mut expected = vec![0u8; 32];
        expected[..3].copy_from_slice(&a);
        expected[16..21].copy_from_slice(&b);
        assert_eq!(out, expected);
    }
}
