//! A device buffer downloaded into host `Buffer`s: slices of one reused host region
//! (`host_memory.rs`), copied straight into it when it is page-locked, else through the
//! pinned staging buffers (`transfer.rs`). The payload gather's windows and the window
//! columns come back this way.

use std::mem::MaybeUninit;
use std::sync::Arc;

use arrow::buffer::Buffer;
use datafusion::arrow;

use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::{Device, DeviceBuffer};
use crate::cuda::memory::host_memory::HostRegions;
use crate::cuda::memory::transfer::Staging;

/// Downloads `src` into host buffers of `sizes` bytes (adding up to its length): slices of
/// one region of `regions`, reused from earlier windows when one is idle; straight into
/// it when that region is page-locked, else through the staging buffers.
pub(crate) fn download_into_buffers(
    device: &Device,
    staging: &mut Staging,
    regions: &Arc<HostRegions>,
    src: &DeviceBuffer<u8>,
    sizes: &[usize],
) -> CudaResult<Vec<Buffer>> {
    let total: usize = sizes.iter().sum();
    let region = regions.take(total);
    crate::trace::event(|| {
        format!(
            "    download of {total} bytes into a {} region",
            if region.is_locked() {
                "locked"
            } else {
                "pageable"
            }
        )
    });
    let base = region.as_mut_ptr() as *mut MaybeUninit<u8>;
    let mut offsets = Vec::with_capacity(sizes.len());
    let mut at = 0;
    for &size in sizes {
        offsets.push(at);
        at += size;
    }
    if region.is_locked() {
        // Page-locked: the device copies the whole window straight into the region.
        // SAFETY: the region holds at least `total` bytes, no buffer over them exists yet,
        // and they are read only after the copy has completed (synchronize below).
        unsafe {
            let all = std::slice::from_raw_parts_mut(region.as_mut_ptr(), total);
            device.download(all, src, 0)?;
        }
        device.synchronize()?;
    } else {
        let mut parts: Vec<&mut [MaybeUninit<u8>]> = offsets
            .iter()
            .zip(sizes)
            // SAFETY: the parts are disjoint ranges of the region's `total` bytes, written
            // only through these slices; no buffer over them exists yet.
            .map(|(&offset, &size)| unsafe {
                std::slice::from_raw_parts_mut(base.add(offset), size)
            })
            .collect();
        staging.download_parts(device, src, &mut parts)?;
    }
    Ok(offsets
        .iter()
        .zip(sizes)
        // SAFETY: `download_parts` wrote every byte of every part; the parts do not overlap.
        .map(|(&offset, &size)| unsafe { region.part(offset, size) })
        .collect())
}
