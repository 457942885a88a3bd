//! What a backend hands back for one sorted run: the order (a [`Permutation`] whose memory
//! goes back to the backend when dropped), how it was found, and the backend's own state
//! for gathering the payload in that order ([`RunState`], freed when dropped).
//!
//! ```text
//!  backend.sort*(..) ──► SortedRun { permutation, state, figures }
//!  operator: ties refined on the host? → state.order_changed()
//!            state.payload_gatherer(rows, permutation) ──► PayloadGather (device windows)
//!            drop(permutation) → its memory back to the backend's idle vectors
//! ```
//!
//! The operator never learns what a state holds (the CUDA backend: the permutation and the
//! key columns still on the device), and never calls the backend again for it.

use std::fmt::Debug;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use super::Algorithm;
use crate::gather::{PayloadGather, RunRows};
use crate::keys::EncodedKeys;

/// Takes back the memory of permutations it filled, to fill again (memory touched before
/// fills several times faster than fresh pages).
pub trait PermutationHome: Send + Sync {
    /// Takes `rows` back.
    fn give_back(&self, rows: Vec<u32>);
}

/// Row indices of a run in sorted order: `permutation[i]` is the row that goes to output
/// position `i`. Dropping it gives its memory back to the backend that filled it.
#[derive(Default)]
pub struct Permutation {
    rows: Vec<u32>,
    home: Option<Arc<dyn PermutationHome>>,
}

impl Permutation {
    /// A permutation whose memory is simply freed.
    pub fn new(rows: Vec<u32>) -> Self {
        Self { rows, home: None }
    }

    /// A permutation whose memory goes back to `home` when dropped.
    pub fn with_home(rows: Vec<u32>, home: Arc<dyn PermutationHome>) -> Self {
        Self {
            rows,
            home: Some(home),
        }
    }
}

impl Drop for Permutation {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.give_back(std::mem::take(&mut self.rows));
        }
    }
}

impl Deref for Permutation {
    type Target = Vec<u32>;

    fn deref(&self) -> &Vec<u32> {
        &self.rows
    }
}

impl DerefMut for Permutation {
    fn deref_mut(&mut self) -> &mut Vec<u32> {
        &mut self.rows
    }
}

impl Debug for Permutation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Permutation({} rows)", self.rows.len())
    }
}

impl PartialEq<Vec<u32>> for Permutation {
    fn eq(&self, other: &Vec<u32>) -> bool {
        self.rows == *other
    }
}

impl PartialEq for Permutation {
    fn eq(&self, other: &Permutation) -> bool {
        self.rows == other.rows
    }
}

/// What a backend keeps of one sorted run for gathering its payload in the run's order,
/// owned by the run. Dropping it frees what it holds.
pub trait RunState: Send + Sync {
    /// Prepares the gather of some of the run's columns into `permutation` order (the
    /// run's order, or a prefix of it) by the backend itself; `None` has the host gather
    /// every column. The CUDA backend gathers fixed-width and view columns on the device.
    fn payload_gatherer(
        self: Box<Self>,
        rows: &RunRows,
        permutation: &[u32],
    ) -> Option<Box<dyn PayloadGather>>;

    /// The run's order was changed after the sort (ties refined on the host): what the
    /// state kept of the backend's order must not be used.
    fn order_changed(&mut self);
}

/// The outcome of sorting one run.
#[derive(Default)]
pub struct SortedRun {
    /// Row indices of the run in sorted order.
    pub permutation: Permutation,
    /// Which algorithm sorted it.
    pub algorithm: Algorithm,
    /// Bytes copied host → device (0 on the CPU).
    pub h2d_bytes: usize,
    /// Bytes copied device → host (0 on the CPU).
    pub d2h_bytes: usize,
    /// The GPU failed on this run and the CPU backend sorted it instead.
    pub fell_back: bool,
    /// Wall time of the copies to and from the device within the sort (zero on the CPU).
    pub transfer: TransferTimes,
    /// The backend's state for gathering this run's payload (valid for exactly this
    /// permutation, or a prefix of it, until [`RunState::order_changed`]).
    pub state: Option<Box<dyn RunState>>,
    /// The packed keys, when the backend encoded byte-like keys with values longer than
    /// their window (`long_keys` not empty) and left their ties unordered: the caller
    /// orders those ties after the sort (`crate::sort::refine`), as for keys encoded on
    /// the host. A backend that orders them itself leaves this `None`.
    pub refine_keys: Option<EncodedKeys>,
    /// Tie groups of long byte-like keys that the backend ordered itself, and the wall
    /// time it took (within the sort's time).
    pub tie_refine: TieRefine,
    /// The device's memory and queue while the run was sorted (zero on the CPU).
    pub device: DeviceUse,
}

impl Debug for SortedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedRun")
            .field("permutation", &self.permutation)
            .field("algorithm", &self.algorithm)
            .field("fell_back", &self.fell_back)
            .field("state", &self.state.is_some())
            .finish_non_exhaustive()
    }
}

impl SortedRun {
    /// A run sorted on the host: `permutation` found by `algorithm`, nothing copied,
    /// nothing kept.
    pub fn on_host(permutation: Vec<u32>, algorithm: Algorithm) -> Self {
        Self {
            permutation: Permutation::new(permutation),
            algorithm,
            ..Self::default()
        }
    }
}

/// Tie groups of long byte-like keys ordered by the backend within its sort.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TieRefine {
    /// Groups of rows equal on the packed window that were ordered by later bytes.
    pub groups: usize,
    /// Wall time of that ordering.
    pub time: Duration,
}

/// What a run's work on a device took of the device's memory, and how long it waited for
/// its turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceUse {
    /// The most device memory in use at once (this process's, every query's) while the
    /// work held the device.
    pub peak_bytes: usize,
    /// Time spent waiting for the device (other work on it, or memory other runs held).
    pub wait: Duration,
    /// The device that sorted the run (`None`: the host did, or several devices).
    pub ordinal: Option<usize>,
    /// The devices a run spread over by key ranges sorted, as a set of ordinals (bit `d`:
    /// device `d`); 0 when one device or the host sorted it.
    pub spread_devices: u32,
}

/// Where a device sort's wall time went besides the sort kernels themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferTimes {
    /// Key columns host → device, with the device's key encoding overlapped.
    pub upload: Duration,
    /// The permutation device → host.
    pub download: Duration,
}
