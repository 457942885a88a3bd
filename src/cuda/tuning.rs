//! Every number the launchers and the kernels must agree on, every threshold between the
//! device sorts, and every environment override, in one place.
//!
//! ```text
//!  constants below     launch shapes, the thresholds (with the measurements behind them,
//!                      docs/performance.md) and the codes the kernels share with Rust
//!  Tuning::from_env    once, when the runtime opens: the GPUSORT_* overrides of the table
//!        │              below, kept by the runtime for the life of the process
//!        ├─ Tuning::defines(file) → the -D options of one kernel file; the launcher loaded
//!        │              with them keeps the shapes it compiled, so the two cannot disagree
//!        └─ switches()  the two settings a benchmark flips between runs of one process
//! ```
//!
//! The kernels define none of these numbers: each `.cu` file stops with `#error` when a
//! `-D` it needs is missing, so no default in a kernel can drift from this file (CI compiles
//! every file with [`Tuning::default`]).
//!
//! The variables, all optional, for deployment and for measurements:
//!
//! | variable | effect |
//! | --- | --- |
//! | `GPUSORT_DISABLE_CUDA` | set (not `0`): no device; `backend = auto` sorts on the CPU |
//! | `GPUSORT_CUDA_DEVICE` | the one device to use (default: every device, as `gpu_sort.devices` says) |
//! | `GPUSORT_KERNEL_DIR` | kernel sources read from this folder instead of the embedded ones |
//! | `GPUSORT_KERNEL_CACHE` | the folder of compiled kernels (default `$XDG_CACHE_HOME/gpusort`) |
//! | `GPUSORT_HOST_IDLE_BYTES` | idle host memory kept for reuse (default: 4 GiB, at most 1/8 of RAM) |
//! | `GPUSORT_TUNE_<U32,U64>_<KEYS,PAIRS,ROWIDS>` | a OneSweep pass shape, `THREADSxITEMSxBLOCKS` |
//! | `GPUSORT_SEGMENT_TILES_LARGE` | the large segment tile, `THREADSxITEMS` |
//! | `GPUSORT_SEGMENT_TILES_MAX_ROWS` | the longest segment of the standard tile (0: no tiles) |
//! | `GPUSORT_LOCALITY_WINDOW_HALO` | the windowed sort's halo (0: off; default: the probe's) |
//! | `GPUSORT_PLACE_MAX_RADIUS` | the largest radius placed in one pass (0: never) |
//! | `GPUSORT_HOST_LOCK` | switch, `0`: idle host regions are not page-locked |
//! | `GPUSORT_HOST_PARTITION_IDS` | switch, `1`: routed sorts hash their rows on the host |
//! | `GPUSORT_PEER_COPIES` | switch, `0`: a sort spread over devices exchanges through host memory |
//! | `GPUSORT_SNAPPY_SHAPE` | `global`: the Snappy kernel's earlier shape (64 KiB pieces read in device memory); `staged32`: 32 KiB pieces |
//! | `GPUSORT_DEVICE_LANES` | streams beside a device's own for page jobs (default 4; `memory/lanes.rs`) |
//! | `GPUSORT_EARLY_UPLOAD` | threads that put a sort's payload kept on the device for its writer there while the input is read (default 4, at most 8; `0`: after the sort; `payload/early.rs`) |
//!
//! All are read when the runtime opens. The three switches can also be flipped later, between
//! the runs of a benchmark (`gpusort bench sql --variant env:GPUSORT_HOST_LOCK=0`), through
//! [`Switches::set`] on the process's [`switches`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cuda::faults::OpenFault;

// ---- OneSweep (kernels/onesweep.cu) ---------------------------------------------------

/// Threads of the histogram kernel.
pub(super) const ONESWEEP_HISTOGRAM_THREADS: u32 = 512;
/// Threads of the key-word gather between the words of a multi-word sort.
pub(super) const ONESWEEP_GATHER_THREADS: u32 = 256;
/// Bits of the tile index in a look-back tag (the epoch has the 10 above them).
pub(super) const ONESWEEP_TILE_BITS: u32 = 20;

/// Block shape of the pass kernel for one key width and value mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassTuning {
    /// Threads per block (at least 256: one per digit).
    pub threads: u32,
    /// Keys per thread.
    pub items: u32,
    /// Blocks that must fit one SM at once: caps the kernel's registers (the compiler's
    /// launch bound); it changes no launch arithmetic.
    pub blocks: u32,
}

impl PassTuning {
    /// Keys per tile at most: the pass keeps tile positions in 16 bits.
    pub const MAX_TILE: u32 = 1 << 16;

    const fn new(threads: u32, items: u32, blocks: u32) -> Self {
        Self {
            threads,
            items,
            blocks,
        }
    }

    /// Keys per tile (one block's share).
    pub const fn tile(self) -> u32 {
        self.threads * self.items
    }

    /// `THREADSxITEMSxBLOCKS`, when every part is in range.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('x').map(|p| p.trim().parse::<u32>().ok());
        let tuning = Self::new(parts.next()??, parts.next()??, parts.next()??);
        let valid = parts.next().is_none()
            && tuning.threads >= 256
            && tuning.threads % 32 == 0
            && (1..=64).contains(&tuning.items)
            && tuning.tile() <= Self::MAX_TILE
            && (1..=8).contains(&tuning.blocks);
        valid.then_some(tuning)
    }
}

/// What a pass moves besides the keys; indexes the kernel and tuning tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassMode {
    /// Keys only.
    Keys = 0,
    /// Keys and given u32 values.
    Pairs = 1,
    /// Keys and row ids the pass generates (first pass of a row sort).
    RowIds = 2,
}

impl PassMode {
    /// Every mode, in table order.
    pub const ALL: [PassMode; 3] = [PassMode::Keys, PassMode::Pairs, PassMode::RowIds];

    fn label(self) -> &'static str {
        match self {
            PassMode::Keys => "KEYS",
            PassMode::Pairs => "PAIRS",
            PassMode::RowIds => "ROWIDS",
        }
    }
}

/// The pass shapes, `[key][mode]`: key 0 is u32, 1 is u64; mode as [`PassMode`].
pub(super) type PassShapes = [[PassTuning; 3]; 2];

/// Measured best pass shapes (docs/performance.md: keys-only passes 2026-11-23 on an H200,
/// passes with values 2026-11-24 on an H100, each confirmed on the other). Passes with
/// values take the largest tiles: their values reuse the keys' shared memory, and longer
/// runs of one digit per tile coalesce their two scatters better; they hold fewer blocks
/// per SM to keep the registers that loading the values early needs.
pub(super) const ONESWEEP_PASSES: PassShapes = [
    [
        PassTuning::new(384, 28, 3),
        PassTuning::new(256, 48, 2),
        PassTuning::new(256, 48, 2),
    ],
    [
        PassTuning::new(384, 23, 2),
        PassTuning::new(512, 32, 1),
        PassTuning::new(512, 32, 1),
    ],
];

const KEY_LABELS: [&str; 2] = ["U32", "U64"];

// ---- Merge sorts (kernels/merge.cuh, locality_sort.cu, segmented_sort.cu) ------------

/// Threads of a merge block.
pub(super) const MERGE_THREADS: u32 = 256;
/// Elements per thread.
pub(super) const MERGE_ITEMS: u32 = 8;
/// Rows per tile of the block sort and per work-queue tile of the merge passes.
pub const MERGE_TILE: u32 = MERGE_THREADS * MERGE_ITEMS;
/// Threads of the merge sorts' scan kernel.
pub(super) const MERGE_SCAN_THREADS: u32 = 1024;
/// Threads of the merge sorts' element-wise kernels.
pub(super) const SIMPLE_THREADS: u32 = 256;
/// Resident merge blocks per SM that the persistent grid asks for.
pub(super) const MERGE_BLOCKS_PER_SM: u32 = 8;
/// Sorted tiles of at most this radius are placed in one pass instead of merged.
pub(super) const MAX_PLACE_RADIUS: u32 = 8;

/// Positions the locality probe reads in a row.
pub const PROBE_CHUNK: u64 = 1024;
/// The window halos the probe tries, the powers of two from 16 to 512 (the kernel gets the
/// first and the count).
pub const PROBED_HALOS: [u32; 6] = [16, 32, 64, 128, 256, 512];
/// Rows of halo on each side of a window (a window owns MERGE_TILE − 2 × this rows) that a
/// window sort with a smaller halo retries with when it declines.
pub const LOCALITY_WINDOW_HALO: u32 = 128;

/// Runs whose longest segment has at most this many rows are sorted by `segment_ranks_<k>`,
/// which counts each row's rank within its segment (work grows with the square of the
/// segment length: H100, 2^26 u64 keys, limits of 32, 64 and 128 rows measured the same at
/// segments of 16 and slower at 100 and 113 with 128; docs/performance.md).
pub(super) const SEGMENT_RANK_MAX_ROWS: usize = 32;
/// Blocks of `segment_ranks_<k>` that must fit one SM at once (its launch bound).
pub(super) const SEGMENT_RANKS_MIN_BLOCKS: u32 = 7;
/// Runs whose longest segment has at most this many rows get the segment-tile sort
/// (a block then takes at least half a tile of rows).
pub(super) const SEGMENT_TILES_MAX_ROWS: usize = MERGE_TILE as usize / 2;
/// Segment lengths each thread of `segment_starts_<l>` adds up.
pub(super) const SEGMENT_STARTS_ITEMS: u32 = 16;
/// Segments per block of `segment_starts_<l>`: the host keeps the first start of each.
pub const SEGMENT_STARTS_CHUNK: usize = (MERGE_THREADS * SEGMENT_STARTS_ITEMS) as usize;

/// Block shape of the large segment tile (`kernels/segment_tiles_large.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileShape {
    /// Threads per block.
    pub threads: u32,
    /// Rows per thread.
    pub items: u32,
}

impl TileShape {
    /// Rows of a tile.
    pub const fn rows(self) -> usize {
        (self.threads * self.items) as usize
    }

    /// `THREADSxITEMS`, threads a power of two from 64 to 1 024.
    fn parse(text: &str) -> Option<Self> {
        let (threads, items) = text.split_once('x')?;
        let shape = Self {
            threads: threads.trim().parse().ok()?,
            items: items.trim().parse().ok()?,
        };
        let valid = shape.threads.is_power_of_two()
            && (64..=1024).contains(&shape.threads)
            && shape.items >= 1;
        valid.then_some(shape)
    }
}

/// The large segment tile: one block per SM.
pub(super) const LARGE_SEGMENT_TILE: TileShape = TileShape {
    threads: 1024,
    items: 12,
};
/// Runs get the large tile only when its blocks hold on average at least this share of a
/// tile (a block's rows: at least the window's stride, and on average at least the mean
/// segment): every block sorts a whole tile, so emptier tiles would waste the work.
pub(super) const LARGE_TILE_MIN_FILL: usize = 4;

// ---- The payload gather (payload/) -----------------------------------------------------

/// A gather window's host memory is at most this share of the idle regions kept for
/// reuse, so that the windows alive at once (one gathered ahead, one being emitted, the
/// batches the consumer still holds) come back to locked, already touched regions. A
/// larger window is fresh memory each time, copied back through the staging buffers and
/// faulted in page by page: on SF10 `lineitem` under a 4 GiB limit (idle regions 256 MiB),
/// windows of 600 MB came back at 2 to 6 GB/s (docs/performance.md, 2026-11-29).
pub(super) const GATHER_WINDOWS_KEPT: usize = 4;

/// Windows take at least this many bytes whatever the idle regions' size (a small limit
/// keeps a few MiB of them), so that each device round trip still moves megabytes.
pub(super) const MIN_GATHER_WINDOW_BYTES: usize = 16 << 20;

/// The most devices whose slices of a column one gather reads over peer access
/// (`gather_peer_*` in gather.cu, `PeerSlices`): the largest hosts have 8 GPUs; a run
/// spread over more gathers from whole copies on each device.
pub(crate) const GATHER_PEER_SLICES: usize = 8;

// ---- Between the device sorts (dispatch.rs, refine.rs) -------------------------------

/// How long the device stays idle before its memory pool's kept blocks go back to the
/// driver: long enough that a session's queries, one after another, reuse them.
pub const DEVICE_IDLE_RELEASE: Duration = Duration::from_secs(10);

/// Streams beside a device's own that page jobs run on at once (`memory/lanes.rs`): the
/// WORKERS of a file's page jobs (`pipeline/device_jobs.rs`), each a chain of small
/// launches and waits that leaves most of the device idle alone.
pub(crate) const DEVICE_LANES: usize = 4;
/// Threads that upload a sort's payload while its input is read (`payload/early.rs`),
/// each on a lane of the device.
pub(crate) const EARLY_UPLOADERS: usize = 4;
/// The most `GPUSORT_EARLY_UPLOAD` can ask for.
pub(crate) const MAX_EARLY_UPLOADERS: usize = 8;
/// The most lanes `GPUSORT_DEVICE_LANES` can ask for (each holds 64 MiB of page-locked
/// staging memory; 8 and 16 were slower than 4 on SF10).
pub(crate) const MAX_DEVICE_LANES: usize = 16;

/// Segments of at most this many rows on average are merge sorted; longer ones go to
/// the composite radix sort (H100, 2^26 u64 keys: the merge sort wins at 10 000 rows per
/// segment, 8.6 against 12.8 ms, the radix sort at 1 000 000; docs/performance.md).
pub const SEGMENTED_MERGE_MAX_MEAN_ROWS: usize = 8 * MERGE_TILE as usize;

/// `auto` picks the locality sort when at most one key in this many is greater than the
/// key [`LOCALITY_PROBE_TILES`] tiles further on.
pub(super) const LOCALITY_MAX_INVERSIONS_PER: u64 = 64;

/// How many tiles apart the probe compares keys, for u32 and for u64 keys: disorder within
/// this distance goes to the locality sort. H100, 2^26 keys moved up to 4 096 places (radius
/// 2): the locality sort took 2.5 ms against OneSweep's 2.1 for u32 (four passes), 3.5
/// against 4.8 for u64 (eight passes); so u32 keys get the locality sort only for disorder
/// within one tile (docs/performance.md).
pub(super) const LOCALITY_PROBE_TILES: [u32; 2] = [1, 4];

/// The probe reads one chunk of consecutive keys in this many (a sample of n / 8 keys
/// decides as well as all of them, at an eighth of the reads).
pub(super) const LOCALITY_PROBE_EVERY: u32 = 8;

// ---- Key encoding and tie refinement (encode.cu, refine.cu, fields.cuh) --------------

/// Threads of the encoding kernels.
pub(super) const ENCODE_THREADS: u32 = 256;
/// Partition counters the id kernel keeps in shared memory (more go to global memory).
pub(super) const ENCODE_SHARED_PARTITIONS: u32 = 4096;
/// `kind` of a field that is a column's null flag (after the limb kinds 0..=3 of
/// `keys::LimbKind`).
pub(super) const FIELD_NULL_FLAG: u32 = 4;
/// `kind` of chunk `offset / 8` of a byte-like value's window.
pub(super) const LIMB_VIEW_CHUNK: u32 = 5;
/// `kind` of a byte-like value's length marker in a window of `offset` bytes.
pub(super) const LIMB_VIEW_LENGTH: u32 = 6;

/// Threads of the refinement kernels.
pub(super) const REFINE_THREADS: u32 = 256;
/// Flags each thread of the refinement's scan adds up.
pub(super) const REFINE_SCAN_ITEMS: u32 = 8;
/// Flags per tile of the refinement's scan (one block's share).
pub(super) const REFINE_SCAN_TILE: usize = (REFINE_THREADS * REFINE_SCAN_ITEMS) as usize;
/// Bytes of a value each refinement step compares.
pub(super) const TIE_STEP_BYTES: usize = 7;

// ---- Payload gather (gather.cu) -------------------------------------------------------

/// Threads of the gather kernels.
pub(super) const GATHER_THREADS: u32 = 256;

// ---- Narrowed uploads (narrow.cu) -----------------------------------------------------

/// Threads per block of the widening kernels (grid-stride loops over one uploaded chunk).
pub(super) const NARROW_THREADS: u32 = 256;

// ---- Spread sorts over several devices (spread.cu) -------------------------------------

/// Threads per block of the spread kernels (grid-stride loops; sampling one row each).
pub(super) const SPREAD_THREADS: u32 = 256;
/// Chunks each device's slice goes up in when a host-resident sort overlaps its copies with
/// its kernels (`multi_gpu/overlapped.rs`): each chunk is partitioned while the next one
/// goes up, so only the last chunk's partition is not hidden behind the upload.
pub const SPREAD_CHUNKS: usize = 8;
/// Key ranges each device sorts one after another in an overlapped sort: each range's
/// permutation goes down while the next range is pulled and sorted.
pub const SPREAD_RANGES_PER_DEVICE: usize = 4;

/// Threads of a window kernel's block (`window.cu`).
pub(super) const WINDOW_THREADS: u32 = 256;
/// Consecutive elements each thread of a window prefix scan owns: a tile is
/// `WINDOW_THREADS × WINDOW_SCAN_ITEMS` elements.
pub(super) const WINDOW_SCAN_ITEMS: u32 = 16;

// ---- Parquet pages (parquet_pages.cu) -------------------------------------------------

/// Threads of a page kernel's block (one block per page, or per compressed piece placed).
pub(super) const PAGE_THREADS: u32 = 256;
/// How the Snappy kernel cuts and reads a page's body: pieces of at most `piece_bytes`,
/// one warp each, `warps` a block, a hash table of `1 << hash_bits` earlier positions a
/// warp in shared memory; `staged`: the piece is first copied into shared memory, where
/// the warp then finds and extends its matches (else it reads the body in device memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnappyShape {
    pub piece_bytes: usize,
    pub hash_bits: u32,
    pub warps: u32,
    pub staged: bool,
}

impl SnappyShape {
    /// The default: 16 KiB pieces staged in shared memory with a 4 096-entry table (24 KiB
    /// a warp, 9 warps an SM), whose every load of a match is a shared-memory one. On SF10
    /// `lineitem`'s pages about three times the bytes a second of [`Self::GLOBAL`].
    pub const STAGED: Self = Self {
        piece_bytes: 1 << 14,
        hash_bits: 12,
        warps: 1,
        staged: true,
    };
    /// The shape before (`GPUSORT_SNAPPY_SHAPE=global`): 64 KiB pieces read in device
    /// memory, an 8 192-entry table (16 KiB a warp), two warps a block.
    pub const GLOBAL: Self = Self {
        piece_bytes: 1 << 16,
        hash_bits: 13,
        warps: 2,
        staged: false,
    };

    /// 32 KiB pieces staged, with the same table (40 KiB a warp, 5 warps an SM):
    /// `GPUSORT_SNAPPY_SHAPE=staged32`, measured against the default.
    pub const STAGED_32K: Self = Self {
        piece_bytes: 1 << 15,
        ..Self::STAGED
    };

    fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "staged" => Some(Self::STAGED),
            "staged32" => Some(Self::STAGED_32K),
            "global" => Some(Self::GLOBAL),
            _ => None,
        }
    }
}

/// Most bytes less one between the positions a Snappy warp looks at, which grows by one
/// with each window of 32 positions without a match (incompressible bytes passed over
/// faster).
pub(super) const SNAPPY_MAX_SKIP: u32 = 15;
/// `encoding` of a page kernel's column: values `PLAIN`...
pub(super) const VALUES_PLAIN: u32 = 0;
/// ...or `DELTA_BINARY_PACKED`...
pub(super) const VALUES_DELTA: u32 = 1;
/// ...or `RLE_DICTIONARY` (the values are entry numbers of the chunk's dictionary).
pub(super) const VALUES_DICT: u32 = 2;
/// ...or byte arrays `PLAIN` (each one's 4-byte length, then its bytes).
pub(super) const VALUES_BYTES: u32 = 3;
/// `order` of a column's statistics in the page kernels: none asked...
pub(super) const ORDER_NONE: u32 = 0;
/// ...integers, signed...
pub(super) const ORDER_SIGNED: u32 = 1;
/// ...or unsigned...
pub(super) const ORDER_UNSIGNED: u32 = 2;
/// ...floats (NaN skipped)...
pub(super) const ORDER_FLOAT: u32 = 3;
/// ...or byte arrays, byte by byte, unsigned.
pub(super) const ORDER_BYTES: u32 = 4;
/// Entry numbers of an `RLE_DICTIONARY` page that one thread encodes (a multiple of 8; its
/// runs end there).
pub const DICT_CHUNK_VALUES: usize = 512;

// ---- Parquet dictionaries (parquet_dictionary.cu) -------------------------------------

/// Threads of a dictionary kernel's block.
pub(super) const DICT_THREADS: u32 = 256;
/// Rows each thread of a dictionary tile owns: a tile (one block of the entry numbering) is
/// `DICT_THREADS × DICT_ITEMS` rows.
pub(super) const DICT_ITEMS: u32 = 16;
/// Slots a dictionary insert probes before it gives the dictionary up. The table is at
/// most half full while the dictionary holds, where linear probes seldom pass 50 slots
/// (a simulation of the fullest table: 26 to 46 at most); the limit stops threads still
/// probing a table that filled past its entries.
pub(super) const DICT_PROBES: u32 = 256;

/// `-D` options for one kernel file.
pub(super) type Defines = Vec<(String, String)>;

/// The values a measurement can override, read once when the runtime opens.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// `GPUSORT_DISABLE_CUDA`: open no device.
    pub disable_cuda: bool,
    /// `GPUSORT_CUDA_DEVICE`: the one device to use (`gpu_sort.devices = all` means it
    /// alone), and the device of tools and benchmarks; unset: every device, device 0 first.
    pub pinned_device: Option<usize>,
    /// `GPUSORT_KERNEL_DIR`: where kernel sources are read from, when not embedded.
    pub kernel_dir: Option<PathBuf>,
    /// `GPUSORT_KERNEL_CACHE`: the folder of compiled kernels.
    pub kernel_cache: Option<PathBuf>,
    /// `GPUSORT_HOST_IDLE_BYTES`: idle host memory kept, when not the default.
    pub host_idle_bytes: Option<usize>,
    /// `GPUSORT_INJECT_FAULT`: a fault injected while the runtime opens (tests).
    pub open_fault: Option<OpenFault>,
    /// `GPUSORT_DEVICE_IDLE_RELEASE_MS`: how long the device is idle before its memory
    /// pool gives kept blocks back to the driver ([`DEVICE_IDLE_RELEASE`] by default).
    pub device_idle_release: Duration,
    /// OneSweep's pass shapes.
    pub passes: PassShapes,
    /// The large segment tile.
    pub large_segment_tile: TileShape,
    /// The longest segment of the standard segment tile, at most [`MERGE_TILE`].
    pub segment_tiles_max_rows: usize,
    /// How the windowed locality sort picks its halo.
    pub window_halo: WindowHalo,
    /// The largest radius the merge sort places in one pass.
    pub place_max_radius: u32,
    /// `GPUSORT_HOST_LOCK`: the host-lock switch when the runtime opens.
    pub host_lock: bool,
    /// `GPUSORT_HOST_PARTITION_IDS`: the host-ids switch when the runtime opens.
    pub host_partition_ids: bool,
    /// `GPUSORT_PEER_COPIES`: the peer-copy switch when the runtime opens.
    pub peer_copies: bool,
    /// `GPUSORT_DEVICE_LANES`: the most streams beside a device's own that independent
    /// jobs (Parquet pages of a run kept on the device) run on at once, at least 1.
    pub device_lanes: usize,
    /// `GPUSORT_SNAPPY_SHAPE` (`staged`, `staged32` or `global`): how the Snappy kernel
    /// works.
    pub snappy: SnappyShape,
    /// `GPUSORT_EARLY_UPLOAD`: threads that put a sort's payload kept on the device for its
    /// writer there while the input is read (`payload/early.rs`); 0: it goes after the sort.
    pub early_uploaders: usize,
}

/// How the windowed locality sort picks its halo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowHalo {
    /// Never run the windowed sort.
    Off,
    /// The least halo at which the probe found no key out of order (the default).
    LeastClean,
    /// This many rows (rounded up to a power of two in the halos a window can have), when
    /// the probe found no key out of order at it.
    Fixed(u32),
}

impl Default for Tuning {
    /// No overrides: every value as measured.
    fn default() -> Self {
        Self::from_lookup(|_| None)
    }
}

impl Tuning {
    /// The overrides of this process's environment.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The overrides that `lookup` gives for each variable name; a value that does not
    /// parse or is out of range is ignored with a warning.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let lookup: &dyn Fn(&str) -> Option<String> = &lookup;
        let number = |name: &str| read(lookup, name, |t| t.parse::<u64>().ok());
        let mut passes = ONESWEEP_PASSES;
        for (key, row) in passes.iter_mut().enumerate() {
            for mode in PassMode::ALL {
                let name = format!("GPUSORT_TUNE_{}_{}", KEY_LABELS[key], mode.label());
                if let Some(shape) = read(lookup, &name, PassTuning::parse) {
                    row[mode as usize] = shape;
                }
            }
        }
        let large_segment_tile = read(lookup, "GPUSORT_SEGMENT_TILES_LARGE", TileShape::parse)
            .unwrap_or(LARGE_SEGMENT_TILE);
        let window_halo = match number("GPUSORT_LOCALITY_WINDOW_HALO") {
            None => WindowHalo::LeastClean,
            Some(0) => WindowHalo::Off,
            Some(rows) => WindowHalo::Fixed(rows.min(u32::MAX as u64) as u32),
        };
        let switch = |name: &str, on: bool| lookup(name).map_or(on, |v| Switches::parse(&v, on));
        Self {
            disable_cuda: lookup("GPUSORT_DISABLE_CUDA")
                .is_some_and(|v| !v.trim().is_empty() && v.trim() != "0"),
            pinned_device: number("GPUSORT_CUDA_DEVICE").map(|d| d as usize),
            kernel_dir: lookup("GPUSORT_KERNEL_DIR").map(PathBuf::from),
            kernel_cache: lookup("GPUSORT_KERNEL_CACHE").map(PathBuf::from),
            host_idle_bytes: number("GPUSORT_HOST_IDLE_BYTES").map(|b| b as usize),
            open_fault: lookup("GPUSORT_INJECT_FAULT").and_then(|v| OpenFault::parse(&v)),
            device_idle_release: number("GPUSORT_DEVICE_IDLE_RELEASE_MS")
                .map_or(DEVICE_IDLE_RELEASE, Duration::from_millis),
            passes,
            large_segment_tile,
            segment_tiles_max_rows: number("GPUSORT_SEGMENT_TILES_MAX_ROWS")
                .map_or(SEGMENT_TILES_MAX_ROWS, |r| r as usize)
                .min(MERGE_TILE as usize),
            window_halo,
            place_max_radius: number("GPUSORT_PLACE_MAX_RADIUS")
                .map_or(MAX_PLACE_RADIUS, |r| r.min(u32::MAX as u64) as u32),
            host_lock: switch("GPUSORT_HOST_LOCK", true),
            host_partition_ids: switch("GPUSORT_HOST_PARTITION_IDS", false),
            peer_copies: switch("GPUSORT_PEER_COPIES", true),
            device_lanes: number("GPUSORT_DEVICE_LANES")
                .filter(|&n| n > 0)
                .map_or(DEVICE_LANES, |n| n.min(MAX_DEVICE_LANES as u64) as usize),
            snappy: read(lookup, "GPUSORT_SNAPPY_SHAPE", SnappyShape::parse)
                .unwrap_or(SnappyShape::STAGED),
            early_uploaders: number("GPUSORT_EARLY_UPLOAD").map_or(EARLY_UPLOADERS, |n| {
                n.min(MAX_EARLY_UPLOADERS as u64) as usize
            }),
        }
    }

    /// The pass shape of key width `key` (0: u32, 1: u64) and `mode`.
    pub fn pass(&self, key: usize, mode: PassMode) -> PassTuning {
        self.passes[key][mode as usize]
    }

    /// The `-D` options of kernel file `file` (its name in `kernels/`).
    pub fn defines(&self, file: &str) -> Defines {
        let merge = |shape: TileShape| {
            vec![
                ("MERGE_THREADS".to_string(), shape.threads as u64),
                ("MERGE_ITEMS".to_string(), shape.items as u64),
                ("SCAN_THREADS".to_string(), MERGE_SCAN_THREADS as u64),
            ]
        };
        // The field kinds of fields.cuh, which encode.cu and refine.cu include.
        let fields = [
            ("FIELD_NULL_FLAG", FIELD_NULL_FLAG as u64),
            ("LIMB_VIEW_CHUNK", LIMB_VIEW_CHUNK as u64),
            ("LIMB_VIEW_LENGTH", LIMB_VIEW_LENGTH as u64),
        ];
        let named = |pairs: &[(&str, u64)]| -> Vec<(String, u64)> {
            pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()
        };
        let values: Vec<(String, u64)> = match file {
            "onesweep.cu" => {
                let mut out = Vec::new();
                for (key, row) in self.passes.iter().enumerate() {
                    for mode in PassMode::ALL {
                        let prefix = format!("ONESWEEP_{}_{}", KEY_LABELS[key], mode.label());
                        let shape = row[mode as usize];
                        out.push((format!("{prefix}_THREADS"), shape.threads as u64));
                        out.push((format!("{prefix}_ITEMS"), shape.items as u64));
                        out.push((format!("{prefix}_BLOCKS"), shape.blocks as u64));
                    }
                }
                out.extend(named(&[
                    ("HISTOGRAM_THREADS", ONESWEEP_HISTOGRAM_THREADS as u64),
                    ("TILE_BITS", ONESWEEP_TILE_BITS as u64),
                ]));
                out
            }
            "locality_sort.cu" | "segmented_sort.cu" => {
                let mut out = merge(TileShape {
                    threads: MERGE_THREADS,
                    items: MERGE_ITEMS,
                });
                out.extend(named(&[
                    ("PROBE_CHUNK", PROBE_CHUNK),
                    ("WINDOW_HALO_MIN", PROBED_HALOS[0] as u64),
                    ("PROBE_HALOS", PROBED_HALOS.len() as u64),
                    ("SEGMENT_RANKS_MIN_BLOCKS", SEGMENT_RANKS_MIN_BLOCKS as u64),
                    ("SEGMENT_STARTS_ITEMS", SEGMENT_STARTS_ITEMS as u64),
                ]));
                out
            }
            "segment_tiles_large.cu" => merge(self.large_segment_tile),
            "encode.cu" => named(&[
                ("ENCODE_THREADS", ENCODE_THREADS as u64),
                ("SHARED_PARTITIONS", ENCODE_SHARED_PARTITIONS as u64),
            ])
            .into_iter()
            .chain(named(&fields))
            .collect(),
            "refine.cu" => named(&[
                ("REFINE_THREADS", REFINE_THREADS as u64),
                ("SCAN_ITEMS", REFINE_SCAN_ITEMS as u64),
                ("STEP_BYTES", TIE_STEP_BYTES as u64),
            ])
            .into_iter()
            .chain(named(&fields))
            .collect(),
            "gather.cu" => named(&[
                ("GATHER_THREADS", GATHER_THREADS as u64),
                ("GATHER_PEER_SLICES", GATHER_PEER_SLICES as u64),
            ]),
            "narrow.cu" => named(&[("NARROW_THREADS", NARROW_THREADS as u64)]),
            "spread.cu" => named(&[("SPREAD_THREADS", SPREAD_THREADS as u64)]),
            "window.cu" | "window_values.cu" => named(&[
                ("WINDOW_THREADS", WINDOW_THREADS as u64),
                ("WINDOW_SCAN_ITEMS", WINDOW_SCAN_ITEMS as u64),
            ]),
            "parquet_pages.cu" => named(&[
                ("PAGE_THREADS", PAGE_THREADS as u64),
                ("SNAPPY_WARPS", self.snappy.warps as u64),
                ("SNAPPY_HASH_BITS", self.snappy.hash_bits as u64),
                ("SNAPPY_PIECE_BYTES", self.snappy.piece_bytes as u64),
                ("SNAPPY_STAGED", self.snappy.staged as u64),
                ("SNAPPY_MAX_SKIP", SNAPPY_MAX_SKIP as u64),
                ("VALUES_PLAIN", VALUES_PLAIN as u64),
                ("VALUES_DELTA", VALUES_DELTA as u64),
                ("VALUES_DICT", VALUES_DICT as u64),
                ("VALUES_BYTES", VALUES_BYTES as u64),
                ("ORDER_NONE", ORDER_NONE as u64),
                ("ORDER_SIGNED", ORDER_SIGNED as u64),
                ("ORDER_UNSIGNED", ORDER_UNSIGNED as u64),
                ("ORDER_FLOAT", ORDER_FLOAT as u64),
                ("ORDER_BYTES", ORDER_BYTES as u64),
            ]),
            "parquet_dictionary.cu" => named(&[
                ("DICT_THREADS", DICT_THREADS as u64),
                ("DICT_ITEMS", DICT_ITEMS as u64),
                ("DICT_PROBES", DICT_PROBES as u64),
            ]),
            other => panic!("no -D options are known for kernel file {other}"),
        };
        values
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect()
    }
}

/// The value of variable `name` as `parse` reads it; a value it refuses is ignored, with a
/// warning.
fn read<T>(
    lookup: &dyn Fn(&str) -> Option<String>,
    name: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    let text = lookup(name)?;
    let value = parse(text.trim());
    if value.is_none() {
        log::warn!("gpusort: ignoring {name}={text:?}: not a valid value");
    }
    value
}

/// The settings a benchmark may flip between the runs of one process.
#[derive(Debug)]
pub struct Switches {
    host_lock: AtomicBool,
    host_partition_ids: AtomicBool,
    peer_copies: AtomicBool,
}

static SWITCHES: Switches = Switches::new(true, false, true);

/// The process's switches: as the environment set them when the runtime opened
/// ([`Switches::open_with`]), or as a benchmark set them since.
pub fn switches() -> &'static Switches {
    &SWITCHES
}

impl Switches {
    const fn new(host_lock: bool, host_partition_ids: bool, peer_copies: bool) -> Self {
        Self {
            host_lock: AtomicBool::new(host_lock),
            host_partition_ids: AtomicBool::new(host_partition_ids),
            peer_copies: AtomicBool::new(peer_copies),
        }
    }

    /// Takes the values `tuning` read from the environment.
    pub fn open_with(&self, tuning: &Tuning) {
        self.host_lock.store(tuning.host_lock, Ordering::Relaxed);
        self.host_partition_ids
            .store(tuning.host_partition_ids, Ordering::Relaxed);
        self.peer_copies
            .store(tuning.peer_copies, Ordering::Relaxed);
    }

    /// The variables that name a switch.
    pub const VARIABLES: [&'static str; 3] = [
        "GPUSORT_HOST_LOCK",
        "GPUSORT_HOST_PARTITION_IDS",
        "GPUSORT_PEER_COPIES",
    ];

    /// Whether idle host regions are page-locked and copied into directly.
    pub fn host_lock(&self) -> bool {
        self.host_lock.load(Ordering::Relaxed)
    }

    /// Whether routed sorts keep the host's hashing of the rows into partitions.
    pub fn host_partition_ids(&self) -> bool {
        self.host_partition_ids.load(Ordering::Relaxed)
    }

    /// Whether a sort spread over several devices exchanges its rows with peer copies
    /// where the devices can reach each other's memory (else through host memory).
    pub fn peer_copies(&self) -> bool {
        self.peer_copies.load(Ordering::Relaxed)
    }

    /// The state of the switch of `variable`, or `None` for another variable.
    pub fn value(&self, variable: &str) -> Option<bool> {
        match variable {
            "GPUSORT_HOST_LOCK" => Some(self.host_lock()),
            "GPUSORT_HOST_PARTITION_IDS" => Some(self.host_partition_ids()),
            "GPUSORT_PEER_COPIES" => Some(self.peer_copies()),
            _ => None,
        }
    }

    /// Sets the switch of `variable` (one of [`Switches::VARIABLES`]) as that variable's
    /// `value` would have at open; `Err` for another variable.
    pub fn set(&self, variable: &str, value: &str) -> Result<(), String> {
        let (flag, on) = match variable {
            "GPUSORT_HOST_LOCK" => (&self.host_lock, true),
            "GPUSORT_HOST_PARTITION_IDS" => (&self.host_partition_ids, false),
            "GPUSORT_PEER_COPIES" => (&self.peer_copies, true),
            other => {
                return Err(format!(
                    "{other} is read once, when the device opens; only {} change later",
                    Self::VARIABLES.join(", ")
                ))
            }
        };
        flag.store(Self::parse(value.trim(), on), Ordering::Relaxed);
        Ok(())
    }

    /// A switch's value from its variable: `0` turns a default-on switch off, `1` turns a
    /// default-off one on, and an empty value keeps the default.
    fn parse(value: &str, default_on: bool) -> bool {
        match value.trim() {
            "" => default_on,
            "0" => false,
            _ if default_on => true,
            v => v == "1",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with(vars: &[(&str, &str)]) -> Tuning {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Tuning::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn pass_shapes_parse_and_reject_bad_shapes() {
        assert_eq!(
            PassTuning::parse("384x28x3"),
            Some(PassTuning::new(384, 28, 3))
        );
        assert_eq!(
            PassTuning::parse(" 512 x 16 x 2 "),
            Some(PassTuning::new(512, 16, 2))
        );
        for bad in [
            "384x28",
            "384x28x3x1",
            "200x16x2",
            "300x16x2",
            "384x0x3",
            "384x65x3",
            "1056x64x1",
            "384x28x0",
            "384x28x9",
            "axbxc",
        ] {
            assert_eq!(PassTuning::parse(bad), None, "{bad}");
        }
        for row in ONESWEEP_PASSES {
            for shape in row {
                assert_eq!(
                    PassTuning::parse(&format!(
                        "{}x{}x{}",
                        shape.threads, shape.items, shape.blocks
                    )),
                    Some(shape)
                );
            }
        }
    }

    #[test]
    fn no_overrides_is_the_measured_tuning() {
        let t = Tuning::default();
        assert!(!t.disable_cuda);
        assert_eq!(t.pinned_device, None);
        assert_eq!(t.passes, ONESWEEP_PASSES);
        assert_eq!(t.large_segment_tile, LARGE_SEGMENT_TILE);
        assert_eq!(t.segment_tiles_max_rows, SEGMENT_TILES_MAX_ROWS);
        assert_eq!(t.window_halo, WindowHalo::LeastClean);
        assert_eq!(t.place_max_radius, MAX_PLACE_RADIUS);
        assert!(t.host_lock && !t.host_partition_ids);
        assert_eq!(t.device_lanes, DEVICE_LANES);
    }

    #[test]
    fn overrides_are_read_and_bad_values_ignored() {
        let t = with(&[
            ("GPUSORT_DISABLE_CUDA", "1"),
            ("GPUSORT_CUDA_DEVICE", "2"),
            ("GPUSORT_TUNE_U64_PAIRS", "384x16x2"),
            ("GPUSORT_TUNE_U32_KEYS", "7x7x7"),
            ("GPUSORT_SEGMENT_TILES_LARGE", "512x8"),
            ("GPUSORT_SEGMENT_TILES_MAX_ROWS", "999999"),
            ("GPUSORT_LOCALITY_WINDOW_HALO", "0"),
            ("GPUSORT_PLACE_MAX_RADIUS", "x"),
            ("GPUSORT_HOST_LOCK", "0"),
            ("GPUSORT_HOST_PARTITION_IDS", "1"),
            ("GPUSORT_DEVICE_LANES", "2"),
            ("GPUSORT_SNAPPY_SHAPE", "global"),
        ]);
        assert!(t.disable_cuda);
        assert_eq!(t.pinned_device, Some(2));
        assert_eq!(t.pass(1, PassMode::Pairs), PassTuning::new(384, 16, 2));
        assert_eq!(t.pass(0, PassMode::Keys), ONESWEEP_PASSES[0][0]);
        assert_eq!(t.large_segment_tile.rows(), 4096);
        assert_eq!(t.segment_tiles_max_rows, MERGE_TILE as usize);
        assert_eq!(t.window_halo, WindowHalo::Off);
        assert_eq!(t.place_max_radius, MAX_PLACE_RADIUS);
        assert!(!t.host_lock && t.host_partition_ids);
        assert_eq!(t.device_lanes, 2);
        assert_eq!(t.snappy, SnappyShape::GLOBAL);
        assert_eq!(Tuning::default().snappy, SnappyShape::STAGED);
        assert_eq!(
            with(&[("GPUSORT_DEVICE_LANES", "0")]).device_lanes,
            DEVICE_LANES
        );
        assert!(!with(&[("GPUSORT_DISABLE_CUDA", "0")]).disable_cuda);
        assert_eq!(
            with(&[("GPUSORT_LOCALITY_WINDOW_HALO", "100")]).window_halo,
            WindowHalo::Fixed(100)
        );
    }

    #[test]
    fn switches_flip_and_refuse_other_variables() {
        let switches = Switches::new(true, false, true);
        switches.set("GPUSORT_HOST_LOCK", "0").unwrap();
        switches.set("GPUSORT_HOST_PARTITION_IDS", "1").unwrap();
        assert!(!switches.host_lock() && switches.host_partition_ids());
        switches.set("GPUSORT_HOST_LOCK", "").unwrap();
        switches.set("GPUSORT_HOST_PARTITION_IDS", "0").unwrap();
        assert!(switches.host_lock() && !switches.host_partition_ids());
        switches.set("GPUSORT_PEER_COPIES", "0").unwrap();
        assert!(!switches.peer_copies());
        switches.set("GPUSORT_PEER_COPIES", "").unwrap();
        assert!(switches.peer_copies());
        assert!(switches.set("GPUSORT_PLACE_MAX_RADIUS", "2").is_err());
        switches.open_with(&with(&[("GPUSORT_HOST_LOCK", "0")]));
        assert!(!switches.host_lock() && !switches.host_partition_ids());
    }

    #[test]
    fn every_kernel_file_has_its_options() {
        let t = Tuning::default();
        for file in [
            "onesweep.cu",
            "locality_sort.cu",
            "segmented_sort.cu",
            "segment_tiles_large.cu",
            "encode.cu",
            "refine.cu",
            "gather.cu",
            "narrow.cu",
        ] {
            let defines = t.defines(file);
            assert!(!defines.is_empty(), "{file}");
            let mut names: Vec<_> = defines.iter().map(|(k, _)| k.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), defines.len(), "{file}: a -D given twice");
        }
    }
}
