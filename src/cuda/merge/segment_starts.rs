//! A run's segment starts on the device, sent over PCIe in as few bytes as their lengths
//! allow.
//!
//! ```text
//!  longest segment ≤ 256 rows:     each segment's rows − 1 as u8   ┐ + the first row of every
//!  longest segment ≤ 65 536 rows:  each segment's rows − 1 as u16  ┘   SEGMENT_STARTS_CHUNK-th
//!        ──staged upload──► segment_starts_u8 / _u16                   segment (the host knows it)
//!                           (one block per chunk: block scan of the lengths + the chunk's start)
//!  longer segments:                the u32 starts as they are
//! ```
//!
//! Short segments are where the starts weigh most: at 16 rows per segment the u32 starts
//! are 4 bytes for every 16 rows, as many bytes as a quarter of a u64 key column; u8
//! lengths send a quarter of that, and the rebuild reads them once.

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::{Plain, Staging};
use crate::cuda::module::{arg, launch, Kernel, Module};
use crate::cuda::tuning::{MERGE_THREADS, SEGMENT_STARTS_CHUNK};
use crate::sort::Segments;

/// How a run's segment starts cross to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartsEncoding {
    /// Segment lengths less one, one byte each (segments of at most 256 rows).
    Lengths8,
    /// Segment lengths less one, two bytes each (segments of at most 65 536 rows).
    Lengths16,
    /// The u32 starts themselves.
    Starts32,
}

impl StartsEncoding {
    /// The smallest encoding for segments of at most `longest` rows.
    pub fn for_longest(longest: usize) -> Self {
        if longest <= 1 << 8 {
            StartsEncoding::Lengths8
        } else if longest <= 1 << 16 {
            StartsEncoding::Lengths16
        } else {
            StartsEncoding::Starts32
        }
    }

    /// Bytes sent per segment (not counting the chunk starts).
    pub fn bytes_per_segment(self) -> usize {
        match self {
            StartsEncoding::Lengths8 => 1,
            StartsEncoding::Lengths16 => 2,
            StartsEncoding::Starts32 => 4,
        }
    }
}

/// The kernels that rebuild starts from lengths, `segment_starts_u8` and `_u16` (of
/// `kernels/segmented_sort.cu`, loaded by `SegmentedSort`).
#[derive(Debug, Clone, Copy)]
pub struct SegmentStarts {
    from_lengths: [Kernel; 2],
}

impl SegmentStarts {
    /// The kernels of the segmented sort's `module`.
    pub fn load(module: &Module) -> CudaResult<Self> {
        Ok(Self {
            from_lengths: [
                module.kernel("segment_starts_u8")?,
                module.kernel("segment_starts_u16")?,
            ],
        })
    }

    /// The first row of each of `segments` in a new device buffer, sent in the encoding
    /// that [`StartsEncoding::for_longest`] picks.
    pub fn upload(
        &self,
        device: &Device,
        staging: &mut Staging,
        segments: &Segments,
    ) -> CudaResult<DeviceBuffer<u32>> {
        let starts = segments.starts();
        match StartsEncoding::for_longest(segments.longest_rows()) {
            StartsEncoding::Lengths8 => {
                self.starts_from_lengths(device, staging, segments, 0, |rows| rows as u8)
            }
            StartsEncoding::Lengths16 => {
                self.starts_from_lengths(device, staging, segments, 1, |rows| rows as u16)
            }
            StartsEncoding::Starts32 => {
                staging.upload(device, starts.len(), "segment starts", |at, out| {
                    out.copy_from_slice(&starts[at..at + out.len()])
                })
            }
        }
    }

    /// Uploads each segment's rows less one as `L` (`narrow` converts; `kernel` picks
    /// `segment_starts_u8` or `_u16`) and the chunk starts, and rebuilds the starts.
    fn starts_from_lengths<L: Plain>(
        &self,
        device: &Device,
        staging: &mut Staging,
        segments: &Segments,
        kernel: usize,
        narrow: impl Fn(u32) -> L + Sync,
    ) -> CudaResult<DeviceBuffer<u32>> {
        let starts = segments.starts();
        let count = starts.len();
        let rows = segments.rows() as u32;
        let out = device.alloc::<u32>(count, "segment starts")?;
        if count == 0 {
            return Ok(out);
        }
        let lengths = staging.upload(device, count, "segment lengths", |at, part| {
            // Zipped slices, no index checks: the loop vectorizes. The last segment ends
            // at `rows`.
            let len = part.len();
            let ends = &starts[at + 1..(at + len + 1).min(count)];
            for ((length, &start), &end) in part.iter_mut().zip(&starts[at..at + len]).zip(ends) {
                *length = narrow(end - start - 1);
            }
            if at + len == count {
                part[len - 1] = narrow(rows - starts[count - 1] - 1);
            }
        })?;
        let chunks = count.div_ceil(SEGMENT_STARTS_CHUNK);
        let chunk_starts = staging.upload(device, chunks, "segment chunk starts", |at, part| {
            for (c, start) in (at..).zip(part.iter_mut()) {
                *start = starts[c * SEGMENT_STARTS_CHUNK];
            }
        })?;
        let (mut l, mut c, mut segs, mut o) =
            (lengths.ptr(), chunk_starts.ptr(), count as u32, out.ptr());
        let mut params = [arg(&mut l), arg(&mut c), arg(&mut segs), arg(&mut o)];
        launch(
            device,
            self.from_lengths[kernel],
            chunks as u32,
            MERGE_THREADS,
            &mut params,
            count,
        )?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_the_narrowest_that_holds_every_length() {
        assert_eq!(StartsEncoding::for_longest(1), StartsEncoding::Lengths8);
        assert_eq!(StartsEncoding::for_longest(256), StartsEncoding::Lengths8);
        assert_eq!(StartsEncoding::for_longest(257), StartsEncoding::Lengths16);
        assert_eq!(
            StartsEncoding::for_longest(65_536),
            StartsEncoding::Lengths16
        );
        assert_eq!(
            StartsEncoding::for_longest(65_537),
            StartsEncoding::Starts32
        );
        assert_eq!(StartsEncoding::Lengths8.bytes_per_segment(), 1);
        assert_eq!(StartsEncoding::Starts32.bytes_per_segment(), 4);
    }
}
