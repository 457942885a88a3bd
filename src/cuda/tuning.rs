//! The thresholds that choose between the device sorts (`dispatch.rs`, `refine.rs`), with
//! the measurements behind them (docs/performance.md).
//!
//! Launch shapes still sit beside their launchers (OneSweep's table in
//! `radix/onesweep.rs`, passed to the kernel as `-D` options; the merge sorts' in
//! `merge/mod.rs`).

use crate::cuda::merge::MERGE_TILE;

/// Segments of at most this many rows on average are merge sorted; longer ones go to
/// the composite radix sort (H100, 2^26 u64 keys: the merge sort wins at 10 000 rows per
/// segment, 8.6 against 12.8 ms, the radix sort at 1 000 000; docs/performance.md).
pub const SEGMENTED_MERGE_MAX_MEAN_ROWS: usize = 8 * MERGE_TILE as usize;

/// `auto` picks the locality sort when at most one key in this many is greater than the
/// key [`LOCALITY_PROBE_TILES`] tiles further on.
pub const LOCALITY_MAX_INVERSIONS_PER: u64 = 64;

/// How many tiles apart the probe compares keys, for u32 and for u64 keys: disorder within
/// this distance goes to the locality sort. H100, 2^26 keys moved up to 4 096 places (radius
/// 2): the locality sort took 2.5 ms against OneSweep's 2.1 for u32 (four passes), 3.5
/// against 4.8 for u64 (eight passes); so u32 keys get the locality sort only for disorder
/// within one tile (docs/performance.md).
pub const LOCALITY_PROBE_TILES: [u32; 2] = [1, 4];

/// The probe reads one chunk of consecutive keys in this many (a sample of n / 8 keys
/// decides as well as all of them, at an eighth of the reads).
pub const LOCALITY_PROBE_EVERY: u32 = 8;
