//! Lanes of a device: streams beside its own, each with its own staging buffers, for
//! independent jobs that would leave the device idle if they took turns (the Parquet page
//! jobs of a sorted run kept on the device: each is a chain of small launches and waits, so
//! several at once keep the device busy where one cannot).
//!
//! A job on a lane does not take the device's lease (`budget.rs`): it reads buffers that the
//! device's own stream finished writing (each lane's stream waits for the work queued there
//! when the job starts) and allocates its own, freed on its stream before the lane is
//! handed to the next job. Those are charged to the device's budget like any buffer: seen
//! by the admission of later sorts, and refused past the limit of a lease that holds the
//! device meanwhile (the job then fails, and its caller encodes on the host). Lanes are
//! made when first needed, at most `GPUSORT_DEVICE_LANES` (`tuning.rs`), and kept for the
//! life of the process; each holds two pinned staging buffers (`transfer.rs`,
//! [`CHUNK_BYTES`](super::transfer::CHUNK_BYTES) each: 256 MiB of page-locked host memory
//! for the default 4 lanes, outside DataFusion's pool).

use std::sync::{Condvar, Mutex, MutexGuard};

use super::device::Device;
use super::transfer::Staging;
use crate::cuda::error::CudaResult;

/// One stream of a device and its staging buffers.
struct Lane {
    device: Device,
    staging: Staging,
}

#[derive(Default)]
struct LaneState {
    idle: Vec<Lane>,
    /// Lanes made and not lost (a job that panicked loses its lane).
    made: usize,
}

/// The lanes of one device.
pub(crate) struct DeviceLanes {
    state: Mutex<LaneState>,
    handed_back: Condvar,
    max: usize,
}

impl std::fmt::Debug for DeviceLanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceLanes")
            .field("max", &self.max)
            .field("made", &self.lock().made)
            .finish()
    }
}

/// Hands its lane back when the job ends, or forgets it when the job panicked.
struct Borrowed<'a> {
    lanes: &'a DeviceLanes,
    lane: Option<Lane>,
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        let lane = self.lane.take();
        let lane = match lane {
            Some(lane) if std::thread::panicking() => {
                // What the job queued may still read buffers that others free once the
                // panic is caught: wait for it before the lane goes.
                let _ = lane.device.synchronize();
                drop(lane);
                None
            }
            other => other,
        };
        let mut state = self.lanes.lock();
        match lane {
            Some(lane) => state.idle.push(lane),
            None => state.made -= 1,
        }
        drop(state);
        self.lanes.handed_back.notify_one();
    }
}

impl DeviceLanes {
    /// At most `max` lanes (at least 1).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            state: Mutex::new(LaneState::default()),
            handed_back: Condvar::new(),
            max: max.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `work` on a lane of `main` (its device, whose stream work on the lane waits
    /// for), once one is free: an idle lane, or a new one while fewer than its most
    /// exist. Where `work` fails, what it queued is waited for before the lane is handed
    /// on, so that no buffer it freed is still read.
    pub(crate) fn run<T>(
        &self,
        main: &Device,
        work: impl FnOnce(&Device, &mut Staging) -> CudaResult<T>,
    ) -> CudaResult<T> {
        let mut borrowed = Borrowed {
            lanes: self,
            lane: None,
        };
        let mut state = self.lock();
        let make = loop {
            if let Some(lane) = state.idle.pop() {
                borrowed.lane = Some(lane);
                break false;
            }
            if state.made < self.max {
                state.made += 1;
                break true;
            }
            state = self
                .handed_back
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        };
        drop(state);
        main.bind()?;
        if make {
            // Not made: `borrowed` holds no lane, and its drop makes room for another.
            borrowed.lane = Some(Self::make(main)?);
        }
        let lane = borrowed.lane.as_mut().expect("a lane");
        main.order_before(lane.device.stream())?;
        let done = work(&lane.device, &mut lane.staging);
        if done.is_err() {
            let _ = lane.device.synchronize();
        }
        done
    }

    fn make(main: &Device) -> CudaResult<Lane> {
        let device = main.with_own_stream()?;
        let staging = Staging::new(&device)?;
        Ok(Lane { device, staging })
    }
}
