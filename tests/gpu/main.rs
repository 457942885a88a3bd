//! GPU tests: the CUDA backend on a real device. Ignored by default (CI has no GPU); run
//! them on a GPU host with `--include-ignored` (see `../shared/device/README.md`). With
//! `GPUSORT_REQUIRE_GPU=1` a missing device fails every test instead of skipping it.
//!
//! One test target, one file per subsystem:
//!
//! - `differential.rs`: the differential suite of `common/differential.rs` on the CUDA backend;
//! - `onesweep.rs`: OneSweep kernel tests: sizes 0 .. 2^28 including every size from tile-1 to 2·tile+1,
//!   all-equal keys, one live bit, all bits live, multi-word keys, given values, keys only;
//!   every permutation is checked to be the unique stable sort order;
//! - `encode.rs`: key encoding on the device from raw Arrow buffers: every fixed-width type, nulls,
//!   directions, sliced and several arrays, several keys; same permutation as the host
//!   encoding, and only the key columns' bytes uploaded; byte-like keys of every view and
//!   offsets type in every shape, their ties past the window ordered as the host orders
//!   them;
//! - `gather.rs`: the payload gather on the device: every fixed-width type and string/binary views,
//!   nulls, sliced and uneven input batches, batch sizes that split bitmap words, several
//!   windows, windows copied straight into page-locked memory; batch for batch equal to
//!   the host's gather; a sort's key columns reused;
//! - `faults.rs`: device out of memory and a sticky error (in a child process, since it disables
//!   the device for the process) leave every answer correct.

//! - `budget.rs`: the device memory limit: runs past it, or out of memory, sorted in pieces on
//!   the device; sixteen queries at once within it; idle memory given back;
//! - `cancel.rs`: a dropped query stops every path and frees the device's memory;
//! - `merge.rs`, `segmented.rs`: the locality and segmented sorts, segment tiles;
//! - `routing.rs`: hash routed window sorts and partition ids made on the device;
//! - `windows.rs`: the window functions of `common/windows.rs` over device sorts;
//! - `parquet_pages.rs`: Parquet data pages built and Snappy-compressed on the device, and
//!   `gpusort sort --page-encoding device`;
//! - `ranges.rs`: `gpusort sort` of an input larger than its memory by key range on the
//!   device, against the operator's spilling and merging;
//! - `held.rs`: the same, held on the device (the host's copy of the payload handed to the
//!   device's), against the job without a limit;
//! - `devices.rs`: several GPUs in one host: `gpu_sort.devices`, runs spread over the set, a
//!   failed device left out (tests that need two devices return on a host of one);
//! - `spread.rs`: one sort spread over several devices by key ranges, against the one-device
//!   sort and the host's order (two devices needed past the one-device path).

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use gpusort::cuda::{
    self, CudaBackend, CudaRuntime, DeviceBuffer, Fault, FaultScope, PassMode, RadixKey,
    TransferPlain, Values,
};
use gpusort::gather::{gather_sorted, PayloadGather, PayloadStats, RunRows};
use gpusort::keys::bytes::DEVICE_LIVE_CHUNKS;
use gpusort::keys::{encode_keys, encode_keys_windowed, EncodedKeys, KeyColumn};
use gpusort::sort::{radix_sort, refine_long_ties, CpuBackend, RunState, Segments, SortBackend};
use gpusort::{AlgorithmChoice, BackendChoice::Cuda};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use common::differential as cases;

/// The device, or `None` (test skipped) when there is none and none is required.
fn device() -> Option<Arc<CudaRuntime>> {
    match cuda::runtime() {
        Ok(runtime) => Some(runtime),
        Err(reason) if std::env::var("GPUSORT_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("GPUSORT_REQUIRE_GPU=1 but no CUDA device is usable: {reason}")
        }
        Err(reason) => {
            eprintln!("skipped: no CUDA device ({reason})");
            None
        }
    }
}

fn rng(label: &str) -> rand::rngs::StdRng {
    let seed = common::seed() ^ label.bytes().fold(0u64, |h, b| h.rotate_left(5) ^ b as u64);
    rand::rngs::StdRng::seed_from_u64(seed)
}

fn random_keys<K>(n: usize, label: &str, make: impl Fn(u64) -> K + Sync + Send) -> Vec<K>
where
    K: Send,
{
    let base = rng(label).random::<u64>();
    (0..n as u64)
        .into_par_iter()
        .map(|i| make(splitmix64(base.wrapping_add(i))))
        .collect()
}

/// The rows of the Parquet file at `path`, as one batch.
fn read_parquet(path: &std::path::Path) -> RecordBatch {
    let file = std::fs::File::open(path).unwrap();
    let reader =
        datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
    datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `perm` is the stable sort order of `keys`: a permutation, keys ascending, ties by index.
fn assert_stable_order<K: Ord + Copy + Sync + std::fmt::Debug>(
    keys: &[K],
    perm: &[u32],
    what: &str,
) {
    assert_eq!(perm.len(), keys.len(), "{what}: permutation length");
    let mut seen = vec![false; keys.len()];
    for &p in perm {
        assert!(
            !std::mem::replace(&mut seen[p as usize], true),
            "{what}: row {p} twice"
        );
    }
    let bad = perm.par_windows(2).position_any(|w| {
        let (a, b) = (keys[w[0] as usize], keys[w[1] as usize]);
        !(a < b || (a == b && w[0] < w[1]))
    });
    if let Some(i) = bad {
        panic!(
            "{what}: out of order at {i}: rows {} {} keys {:?} {:?} (seed {})",
            perm[i],
            perm[i + 1],
            keys[perm[i] as usize],
            keys[perm[i + 1] as usize],
            common::seed()
        );
    }
}

macro_rules! gpu_test {
    ($name:ident, $body:expr) => {
        #[test]
        #[ignore = "needs a CUDA GPU"]
        fn $name() {
            let Some(runtime) = device() else { return };
            let body: &dyn Fn(&CudaRuntime) = &$body;
            body(&runtime);
        }
    };
}

/// Keys-only and row-id sorts of every size of [`sizes_for`] on random keys.
mod budget;
mod cancel;
mod devices;
mod differential;
mod encode;
mod faults;
mod gather;
mod held;
mod merge;
mod onesweep;
mod parquet_pages;
mod ranges;
mod routing;
mod segmented;
mod spread;
mod windows;

#[allow(unused_imports)]
use {encode::*, gather::*, merge::*, onesweep::*, segmented::*};
