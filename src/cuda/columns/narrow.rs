//! Narrowed uploads: an integer-like column of 8- or 16-byte values (`Int64`, `Decimal128`,
//! timestamps, ...) whose every value is the sign extension of its low 4 or 8 bytes crosses
//! PCIe as those low bytes only, and a kernel (`kernels/narrow.cu`) puts it back to full
//! width on the device.
//!
//! ```text
//!  host fill: low bytes of each value ─► pinned chunk ─► device scratch chunk
//!    (a value that needs more stops it: tried again wider, or sent whole)
//!  widen_<n>_<wide>: scratch chunk ─► its place in the column's full-width buffer
//! ```
//!
//! TPC-H's decimals (prices in cents) and keys fit 4 bytes, so a `Decimal128` sends a
//! quarter of its bytes and an `Int64` half, and the host writes as much less into the
//! pinned buffers. The host still reads every byte: on the H200 host (16 cores) the fill
//! runs at about the host's memory read bandwidth, close to PCIe's, so W1's keys (an `Int64`
//! and a `Decimal128`, 1.44 GB) went up in 30.5 ms instead of 32.3, while W10's decimal
//! arguments took 14 to 15 ms each instead of about 21 (docs/performance.md, 2026-11-29
//! evening). Downloads stay whole: widening them again on the host cost more host memory
//! bandwidth than the copy saved (tried and measured the same day).
//!
//! Beyond the column, an upload holds one scratch chunk (`CHUNK_BYTES`) of device memory,
//! charged to the device budget like every allocation; where it does not fit, the column
//! goes across whole.

use std::sync::atomic::{AtomicUsize, Ordering};

use arrow::datatypes::DataType;
use datafusion::arrow;

use crate::cuda::columns::parts::Parts;
use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::transfer::{Plain, Staging, CHUNK_BYTES};
use crate::cuda::module::{arg, launch, load_module, Kernel, Module, NARROW};
use crate::cuda::tuning::{Tuning, NARROW_THREADS as THREADS};

/// Columns smaller than this go across whole: the scratch chunk and the launches would
/// cost more than the bytes saved. (The early copy's pieces, `payload/early.rs`, are a
/// few megabytes each.)
const MIN_NARROWED_BYTES: usize = 1 << 20;

/// The loaded kernels of narrowed uploads (`kernels/narrow.cu`) of one device.
#[derive(Debug)]
pub struct Narrowing {
    _module: Module,
    widen_4_8: Kernel,
    widen_4_16: Kernel,
    widen_8_16: Kernel,
    grid: u32,
}

impl Narrowing {
    /// Compiles (or takes from the cache) and loads the kernels for `device`.
    pub fn load(device: &Device, tuning: &Tuning) -> CudaResult<Self> {
        let module = load_module(NARROW, device.arch, tuning)?;
        Ok(Self {
            widen_4_8: module.kernel("widen_4_8")?,
            widen_4_16: module.kernel("widen_4_16")?,
            widen_8_16: module.kernel("widen_8_16")?,
            grid: device.sm_count * 16,
            _module: module,
        })
    }

    fn widen_kernel(&self, narrow: usize, wide: usize) -> Kernel {
        match (narrow, wide) {
            (4, 8) => self.widen_4_8,
            (4, 16) => self.widen_4_16,
            (8, 16) => self.widen_8_16,
            other => unreachable!("no widening of {other:?}"),
        }
    }

    /// Queues `out[i] = src[i]` sign-extended from `narrow` to `wide` bytes, for `n` values.
    fn widen(
        &self,
        device: &Device,
        (src, narrow): (u64, usize),
        (out, wide): (u64, usize),
        n: usize,
    ) -> CudaResult<()> {
        let (mut src, mut n32, mut out) = (src, n as u32, out);
        let mut params = [arg(&mut src), arg(&mut n32), arg(&mut out)];
        let grid = (n.div_ceil(THREADS as usize) as u32).clamp(1, self.grid);
        launch(
            device,
            self.widen_kernel(narrow, wide),
            grid,
            THREADS,
            &mut params,
            n,
        )
    }
}

/// Whether columns of `data_type` are tried narrowed: integer-like values of 8 or 16 bytes
/// (whose small values are common), not floats or binary.
pub(super) fn worth_narrowing(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(
        data_type,
        Int64
            | UInt64
            | Decimal64(_, _)
            | Decimal128(_, _)
            | Date64
            | Time64(_)
            | Timestamp(_, _)
            | Duration(_)
    )
}

/// Bytes (4, 8 or 16) that the `width`-byte little-endian value `bytes` needs: the fewest
/// whose sign extension gives it back.
#[inline]
fn needed_bytes(bytes: &[u8], width: usize) -> usize {
    let value = match width {
        8 => i64::from_le_bytes(bytes.try_into().expect("8 bytes")) as i128,
        16 => i128::from_le_bytes(bytes.try_into().expect("16 bytes")),
        _ => return width,
    };
    if value as i32 as i128 == value {
        4
    } else if value as i64 as i128 == value {
        8
    } else {
        16
    }
}

/// A narrow value the fill writes: the low bytes of a wide one.
trait Narrow: Plain {
    const BYTES: usize;
    fn low(bytes: &[u8]) -> Self;
}

impl Narrow for u32 {
    const BYTES: usize = 4;
    #[inline]
    fn low(bytes: &[u8]) -> Self {
        u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
    }
}

impl Narrow for u64 {
    const BYTES: usize = 8;
    #[inline]
    fn low(bytes: &[u8]) -> Self {
        u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
    }
}

/// What a narrowed upload did: the column's full-width buffer (`None`: the column is to go
/// across whole, nothing of it kept) and the bytes it copied, attempts given up included.
pub(in crate::cuda) struct Narrowed {
    pub values: Option<DeviceBuffer<u8>>,
    pub copied: usize,
}

/// Uploads the concatenation of `parts` (values of `width` bytes) narrowed, when every
/// value allows it and the column is large enough to gain.
///
/// The width tried first is 4 bytes; a value that needs more ends the attempt there, and
/// the next attempt sends what that value needed (a column whose later values outgrow its
/// early ones pays for the part sent before).
pub(in crate::cuda) fn upload_narrowed(
    device: &Device,
    staging: &mut Staging,
    narrowing: &Narrowing,
    parts: &[&[u8]],
    width: usize,
) -> CudaResult<Narrowed> {
    let mut narrowed = Narrowed {
        values: None,
        copied: 0,
    };
    let values = Values {
        parts: Parts::new(parts),
        width,
    };
    let total = values.parts.len();
    if !matches!(width, 8 | 16) || total < MIN_NARROWED_BYTES || !total.is_multiple_of(width) {
        return Ok(narrowed);
    }
    let mut narrow = 4;
    while narrow < width {
        let needed = AtomicUsize::new(narrow);
        let attempt = match narrow {
            4 => upload_at::<u32>(device, staging, narrowing, &values, &needed)?,
            _ => upload_at::<u64>(device, staging, narrowing, &values, &needed)?,
        };
        narrowed.copied += attempt.copied;
        match attempt.outcome {
            Outcome::Sent(out) => {
                narrowed.values = Some(out);
                return Ok(narrowed);
            }
            Outcome::NoScratch => return Ok(narrowed),
            Outcome::TooNarrow => narrow = needed.load(Ordering::Relaxed).max(narrow * 2),
        }
    }
    Ok(narrowed)
}

/// The wide values of a column: its value buffers back to back, `width` bytes each.
struct Values<'a> {
    parts: Parts<'a>,
    width: usize,
}

impl Values<'_> {
    fn len(&self) -> usize {
        self.parts.len() / self.width
    }

    /// Writes the low bytes of values `start .. start + out.len()` into `out`; `false` (and
    /// the width it needs raised into `needed`) at the first value that does not fit.
    fn narrow_into<N: Narrow>(&self, start: usize, out: &mut [N], needed: &AtomicUsize) -> bool {
        let width = self.width;
        // Every part holds whole values, so each piece starts at a value.
        let walked = self
            .parts
            .walk(start * width, out.len() * width, |piece, at| {
                let slots = &mut out[at / width..];
                for (value, slot) in piece.chunks_exact(width).zip(slots) {
                    let need = needed_bytes(value, width);
                    if need > N::BYTES {
                        needed.fetch_max(need, Ordering::Relaxed);
                        return false;
                    }
                    *slot = N::low(value);
                }
                true
            });
        walked.is_some()
    }
}

/// How one attempt at a width ended.
enum Outcome {
    /// Every value went across: the column's full-width buffer.
    Sent(DeviceBuffer<u8>),
    /// A value needs more bytes (`needed` says how many).
    TooNarrow,
    /// The scratch chunk did not fit in device memory (the column itself did).
    NoScratch,
}

/// An attempt and the bytes it copied.
struct Attempt {
    outcome: Outcome,
    copied: usize,
}

/// One narrowed upload at `N::BYTES` per value.
fn upload_at<N: Narrow>(
    device: &Device,
    staging: &mut Staging,
    narrowing: &Narrowing,
    values: &Values<'_>,
    needed: &AtomicUsize,
) -> CudaResult<Attempt> {
    let (n, width) = (values.len(), values.width);
    // The column first: out of memory for it is out of memory for the run (the caller
    // splits it or gathers on the host), as for a whole upload.
    let out = device.alloc::<u8>(n * width, "column values")?;
    let chunk = (CHUNK_BYTES / N::BYTES).min(n);
    let scratch = match device.alloc::<N>(chunk, "narrowed upload chunk") {
        Ok(scratch) => scratch,
        Err(error) if error.is_out_of_memory() => {
            return Ok(Attempt {
                outcome: Outcome::NoScratch,
                copied: 0,
            })
        }
        Err(other) => return Err(other),
    };
    let mut copied = 0;
    let sent = staging.upload_through::<N, _, _>(
        device,
        n,
        &scratch,
        |start, slots| values.narrow_into(start, slots, needed),
        |chunk, start, len| {
            copied += len * N::BYTES;
            let at = out.ptr() + (start * width) as u64;
            narrowing.widen(device, (chunk.ptr(), N::BYTES), (at, width), len)
        },
    )?;
    let outcome = match sent {
        true => Outcome::Sent(out),
        false => Outcome::TooNarrow,
    };
    Ok(Attempt { outcome, copied })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_need_the_bytes_that_give_them_back() {
        let w8 = |v: i64| needed_bytes(&v.to_le_bytes(), 8);
        let w16 = |v: i128| needed_bytes(&v.to_le_bytes(), 16);
        assert_eq!(w8(0), 4);
        assert_eq!(w8(-1), 4);
        assert_eq!(w8(i32::MAX as i64), 4);
        assert_eq!(w8(i32::MIN as i64), 4);
        assert_eq!(w8(i32::MAX as i64 + 1), 8);
        assert_eq!(w8(i64::MIN), 8);
        assert_eq!(w16(10_494_950), 4);
        assert_eq!(w16(-(1 << 40)), 8);
        assert_eq!(w16(i64::MAX as i128 + 1), 16);
        assert_eq!(w16(i128::MIN), 16);
    }

    #[test]
    fn the_fill_writes_low_bytes_across_parts_and_stops_at_a_wide_value() {
        let a: Vec<u8> = [1i64, -2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let b: Vec<u8> = [].to_vec();
        let c: Vec<u8> = [-4i64, 1 << 33]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let parts: Vec<&[u8]> = vec![&a, &b, &c];
        let values = Values {
            parts: Parts::new(&parts),
            width: 8,
        };
        let needed = AtomicUsize::new(4);
        let mut out = [0u32; 3];
        assert!(values.narrow_into(1, &mut out, &needed));
        assert_eq!(out, [-2i32 as u32, 3, -4i32 as u32]);
        let mut out = [0u32; 5];
        assert!(!values.narrow_into(0, &mut out, &needed));
        assert_eq!(needed.load(Ordering::Relaxed), 8);
        let mut out = [0u64; 2];
        assert!(values.narrow_into(3, &mut out, &needed));
        assert_eq!(out, [-4i64 as u64, 1 << 33]);
    }
}
