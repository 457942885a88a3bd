//! GPU tests: the CUDA backend on a real device. Ignored by default (CI has no GPU); run
//! them on a GPU host with `--include-ignored` (see `../shared/device/README.md`). With
//! `GPUSORT_REQUIRE_GPU=1` a missing device fails every test instead of skipping it.
//!
//! - the differential suite of `common/differential.rs` on the CUDA backend;
//! - OneSweep kernel tests: sizes 0 .. 2^28 including every size from tile-1 to 2·tile+1,
//!   all-equal keys, one live bit, all bits live, multi-word keys, given values, keys only;
//!   every permutation is checked to be the unique stable sort order;
//! - key encoding on the device from raw Arrow buffers: every fixed-width type, nulls,
//!   directions, sliced and several arrays, several keys; same permutation as the host
//!   encoding, and only the key columns' bytes uploaded; byte-like keys of every view and
//!   offsets type in every shape, with the packed words brought back for refining ties
//!   equal to the host's;
//! - the payload gather on the device: every fixed-width type and string/binary views,
//!   nulls, sliced and uneven input batches, batch sizes that split bitmap words, several
//!   windows, windows copied straight into page-locked memory; batch for batch equal to
//!   the host's gather; a sort's key columns reused;
//! - faults: device out of memory and a sticky error (in a child process, since it disables
//!   the device for the process) leave every answer correct.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use gpusort::cuda::{
    self, CudaBackend, CudaRuntime, DeviceBuffer, Fault, PassMode, RadixKey, TransferPlain, Values,
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

/// Sorts `keys` on the device with generated row ids; returns the permutation.
fn device_rowid_sort<K: RadixKey + TransferPlain>(runtime: &CudaRuntime, keys: &[K]) -> Vec<u32> {
    let n = keys.len();
    runtime
        .with_device(|device, staging| {
            let upload = staging.upload::<K, _>(device, n, "test keys", |start, out| {
                out.copy_from_slice(&keys[start..start + out.len()])
            })?;
            let sorted = runtime.onesweep.sort(device, upload, Values::RowIds, n)?;
            download(device, staging, sorted.values, n)
        })
        .unwrap_or_else(|e| panic!("device sort of {n} keys: {e}"))
}

fn download(
    device: &cuda::Device,
    staging: &mut cuda::Staging,
    values: Option<DeviceBuffer<u32>>,
    n: usize,
) -> cuda::CudaResult<Vec<u32>> {
    let Some(values) = values else {
        return Ok((0..n as u32).collect());
    };
    let mut out = vec![0u32; n];
    staging.download(device, &values, &mut out)?;
    device.synchronize()?;
    Ok(out)
}

/// Sorts `keys` on the device, keys only; returns them sorted.
fn device_keys_sort<K: RadixKey + TransferPlain>(runtime: &CudaRuntime, keys: &[K]) -> Vec<K> {
    let n = keys.len();
    runtime
        .with_device(|device, staging| {
            let upload = staging.upload::<K, _>(device, n, "test keys", |start, out| {
                out.copy_from_slice(&keys[start..start + out.len()])
            })?;
            let sorted = runtime.onesweep.sort(device, upload, Values::None, n)?;
            let mut out = vec![K::default(); n];
            if n > 0 {
                staging.download(device, &sorted.keys, &mut out)?;
            }
            device.synchronize()?;
            Ok(out)
        })
        .unwrap_or_else(|e| panic!("device sort of {n} keys: {e}"))
}

/// The largest tile over the pass modes.
fn max_tile<K: RadixKey>() -> usize {
    PassMode::ALL
        .map(|m| K::tuning(m).tile() as usize)
        .into_iter()
        .max()
        .unwrap()
}

/// Small sizes, and every size from tile-1 to 2·tile+1 for the tile of each pass mode.
fn sizes_for<K: RadixKey>() -> Vec<usize> {
    let mut sizes: Vec<usize> = vec![0, 1, 2, 3, 31, 32, 33, 255, 256, 257, 1000];
    for mode in PassMode::ALL {
        let tile = K::tuning(mode).tile() as usize;
        sizes.extend(tile - 1..=2 * tile + 1);
        sizes.extend([3 * tile, 100 * tile + 17]);
    }
    sizes.push((1 << 20) + 1);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Keys-only sorts of every size of [`sizes_for`] equal the host's sort.
fn assert_keys_only_sizes<K: RadixKey + TransferPlain + Ord + std::fmt::Debug>(
    rt: &CudaRuntime,
    all: &[K],
) {
    for n in sizes_for::<K>() {
        let mut expected = all[..n].to_vec();
        expected.sort_unstable();
        assert!(
            device_keys_sort(rt, &all[..n]) == expected,
            "keys only, n={n}, seed {}",
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
fn assert_every_size_around_tiles<K>(rt: &CudaRuntime, label: &str, make: fn(u64) -> K)
where
    K: RadixKey + TransferPlain + Ord + std::fmt::Debug,
{
    let all = random_keys(100 * max_tile::<K>() + 2_000_000, label, make);
    assert_keys_only_sizes(rt, &all);
    for n in sizes_for::<K>() {
        assert_stable_order(
            &all[..n],
            &device_rowid_sort(rt, &all[..n]),
            &format!("{label} n={n}"),
        );
    }
}

gpu_test!(onesweep_every_size_around_tiles_u32, |rt| {
    assert_every_size_around_tiles::<u32>(rt, "sweep32", |x| x as u32);
});

gpu_test!(onesweep_every_size_around_tiles_u64, |rt| {
    assert_every_size_around_tiles::<u64>(rt, "sweep64", |x| x);
});

gpu_test!(onesweep_small_sizes, |rt| {
    // Small enough for compute-sanitizer.
    for n in [0usize, 1, 2, 5, 100, 4095, 4096, 4097, 20_000] {
        let keys = random_keys(n, "small", |x| x as u32 >> 7);
        assert_stable_order(
            &keys,
            &device_rowid_sort(rt, &keys),
            &format!("small u32 n={n}"),
        );
        let keys = random_keys(n, "small64", |x| x >> 3);
        assert_stable_order(
            &keys,
            &device_rowid_sort(rt, &keys),
            &format!("small u64 n={n}"),
        );
    }
});

gpu_test!(onesweep_large_sizes_up_to_2_pow_28, |rt| {
    for shift in [24usize, 26, 28] {
        let n = (1 << shift) + 3;
        let keys = random_keys(n, "large32", |x| x as u32);
        assert_stable_order(
            &keys,
            &device_rowid_sort(rt, &keys),
            &format!("u32 n=2^{shift}+3"),
        );
        drop(keys);
        let keys = random_keys(n, "large64", |x| x);
        assert_stable_order(
            &keys,
            &device_rowid_sort(rt, &keys),
            &format!("u64 n=2^{shift}+3"),
        );
    }
});

gpu_test!(onesweep_distributions_keep_ties_in_order, |rt| {
    let n = 3_000_017;
    let cases: Vec<(&str, Vec<u64>)> = vec![
        ("all equal", vec![0xDEAD_BEEF_u64; n]),
        ("one live bit", random_keys(n, "bit", |x| (x & 1) << 37)),
        ("all bits live", random_keys(n, "all", |x| x)),
        (
            "two values",
            random_keys(n, "two", |x| if x & 1 == 0 { 5 } else { u64::MAX }),
        ),
        ("256 values", random_keys(n, "256", |x| (x & 0xff) << 56)),
        ("sorted", (0..n as u64).collect()),
        ("reversed", (0..n as u64).rev().collect()),
    ];
    for (label, keys) in cases {
        assert_stable_order(&keys, &device_rowid_sort(rt, &keys), label);
        let narrow: Vec<u32> = keys.iter().map(|k| (k >> 32) as u32 ^ *k as u32).collect();
        assert_stable_order(&narrow, &device_rowid_sort(rt, &narrow), label);
    }
    // All equal: no pass runs, the order is the identity.
    let same = vec![7u32; 10_000];
    assert_eq!(
        device_rowid_sort(rt, &same),
        (0..10_000).collect::<Vec<u32>>()
    );
});

gpu_test!(onesweep_multi_word_keys_match_cpu_radix, |rt| {
    for (words, n) in [(2usize, 1_000_003usize), (3, 200_001), (4, 50_000)] {
        let columns: Vec<Vec<u64>> = (0..words)
            .map(|w| {
                // Few distinct high words so lower words decide many comparisons.
                random_keys(n, &format!("mw{w}"), move |x| {
                    if w == 0 {
                        x % 7
                    } else {
                        x >> (w * 9)
                    }
                })
            })
            .collect();
        let expected = radix_sort(&columns, n);
        let actual = rt
            .with_device(|device, staging| {
                let uploads = columns
                    .iter()
                    .map(|c| {
                        staging.upload::<u64, _>(device, n, "words", |s, o| {
                            o.copy_from_slice(&c[s..s + o.len()])
                        })
                    })
                    .collect::<cuda::CudaResult<Vec<_>>>()?;
                let perm = rt.onesweep.sort_rows_by_words(device, uploads, n)?;
                download(device, staging, perm, n)
            })
            .unwrap();
        assert!(
            expected == actual,
            "{words} words, {n} rows differ from the CPU radix sort"
        );
    }
});

gpu_test!(onesweep_given_values_and_keys_only, |rt| {
    let n = 1_234_567;
    let keys = random_keys(n, "pairs", |x| x as u32 >> 4);
    let values: Vec<u32> = random_keys(n, "vals", |x| x as u32);
    let (sorted_keys, sorted_values, keys_only) = rt
        .with_device(|device, staging| {
            let k = staging.upload::<u32, _>(device, n, "k", |s, o| {
                o.copy_from_slice(&keys[s..s + o.len()])
            })?;
            let v = staging.upload::<u32, _>(device, n, "v", |s, o| {
                o.copy_from_slice(&values[s..s + o.len()])
            })?;
            let sorted = rt.onesweep.sort(device, k, Values::Given(v), n)?;
            let mut out_k = vec![0u32; n];
            staging.download(device, &sorted.keys, &mut out_k)?;
            let out_v = download(device, staging, sorted.values, n)?;
            let k = staging.upload::<u32, _>(device, n, "k", |s, o| {
                o.copy_from_slice(&keys[s..s + o.len()])
            })?;
            let only = rt.onesweep.sort(device, k, Values::None, n)?;
            let mut out_only = vec![0u32; n];
            staging.download(device, &only.keys, &mut out_only)?;
            device.synchronize()?;
            Ok((out_k, out_v, out_only))
        })
        .unwrap();
    let perm = radix_sort(&[keys.iter().map(|&k| (k as u64) << 32).collect()], n);
    let expected_keys: Vec<u32> = perm.iter().map(|&p| keys[p as usize]).collect();
    let expected_values: Vec<u32> = perm.iter().map(|&p| values[p as usize]).collect();
    assert!(sorted_keys == expected_keys, "pairs: keys");
    assert!(
        sorted_values == expected_values,
        "pairs: values moved with their keys"
    );
    assert!(keys_only == expected_keys, "keys only");
});

fn encoded(n: usize, label: &str) -> EncodedKeys {
    let words = vec![
        random_keys(n, label, |x| x),
        random_keys(n, &format!("{label}2"), |x| x >> 20),
    ];
    EncodedKeys {
        words,
        total_bits: 108,
        rows: n,
        long_keys: Vec::new(),
    }
}

gpu_test!(out_of_memory_falls_back_with_the_same_rows, |rt| {
    let _ = rt;
    let keys = encoded(300_000, "oom");
    let backend = CudaBackend::new().unwrap();
    let expected = CpuBackend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    cuda::inject_fault(Fault::OutOfMemory);
    let run = backend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    assert!(run.fell_back, "an injected device OOM must fall back");
    assert_eq!(run.permutation, expected.permutation);
    assert!(cuda::disabled_reason().is_none(), "OOM is not fatal");
    let run = backend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
    assert!(!run.fell_back, "the next run uses the GPU again");
    assert_eq!(run.permutation, expected.permutation);
});

/// A key column of `dt` over `n` rows in uneven, partly sliced arrays.
fn key_column(
    rng: &mut rand::rngs::StdRng,
    dt: &DataType,
    n: usize,
    dist: common::data::Distribution,
    null_fraction: f64,
    options: SortOptions,
) -> KeyColumn {
    let base = common::data::base_values(rng, n + 7, dist);
    let whole = common::data::make_column(rng, dt, &base, null_fraction);
    // Arrays with odd offsets and lengths (bitmaps not byte aligned), one of them empty.
    let whole = whole.slice(3, n);
    let cuts = [0, n / 3, n / 3, n / 3 + 5.min(n - n / 3), n];
    let arrays: Vec<ArrayRef> = cuts
        .windows(2)
        .map(|w| whole.slice(w[0], w[1] - w[0]))
        .collect();
    KeyColumn { arrays, options }
}

/// The device-encoded sort of `columns` equals the host-encoded CPU sort; only the key
/// columns' bytes (values and validity) go up.
fn assert_device_encoding_matches(columns: &[KeyColumn], label: &str) {
    let backend = CudaBackend::new().unwrap();
    let expected = CpuBackend
        .sort(&encode_keys(columns).unwrap(), AlgorithmChoice::Auto, None)
        .unwrap();
    let fallbacks = cuda::fallback_count();
    let run = backend
        .sort_key_columns(columns, AlgorithmChoice::Auto, None)
        .unwrap()
        .unwrap_or_else(|| panic!("{label}: not encoded on the device"));
    assert_eq!(cuda::fallback_count(), fallbacks, "{label}: fell back");
    assert!(
        run.permutation == expected.permutation,
        "{label}: order differs"
    );
    let rows = columns[0].arrays.iter().map(|a| a.len()).sum::<usize>();
    let most: usize = columns
        .iter()
        .map(|c| {
            let width = c.arrays[0].data_type().primitive_width().unwrap_or(1);
            // values (bitmaps for Boolean) + validity, each padded to 8 bytes
            rows * width + rows.div_ceil(8) + 16
        })
        .sum();
    if rows >= 2 {
        assert!(
            run.h2d_bytes <= most,
            "{label}: uploaded {} > {most}",
            run.h2d_bytes
        );
    }
}

gpu_test!(device_encoding_every_type_nulls_directions, |_rt| {
    use common::data::Distribution::*;
    let mut rng = rng("device-encoding");
    for dt in common::data::fixed_width_types() {
        for (dist, n) in [
            (Uniform, 50_000),
            (Extremes, 3_001),
            (FewLiveBits, 20_000),
            (AllEqual, 999),
        ] {
            for null_fraction in [0.0, 0.3] {
                for (descending, nulls_first) in
                    [(false, false), (true, true), (false, true), (true, false)]
                {
                    let options = SortOptions {
                        descending,
                        nulls_first,
                    };
                    let column = key_column(&mut rng, &dt, n, dist, null_fraction, options);
                    let label = format!("{dt} {dist:?} n={n} nulls={null_fraction} {options:?}");
                    assert_device_encoding_matches(&[column], &label);
                }
            }
        }
    }
});

gpu_test!(device_encoding_several_keys_and_sizes, |_rt| {
    use common::data::Distribution::*;
    let mut rng = rng("device-encoding-multi");
    let types = common::data::fixed_width_types();
    for n in [0, 1, 2, 3, 4095, 4097, 100_003, 1 << 21] {
        for keys in 1..=4 {
            let columns: Vec<KeyColumn> = (0..keys)
                .map(|k| {
                    let dt = &types[rng.random_range(0..types.len())];
                    let dist = [Uniform, Distinct(10), FewLiveBits, Extremes][k % 4];
                    let options = SortOptions {
                        descending: rng.random(),
                        nulls_first: rng.random(),
                    };
                    key_column(&mut rng, dt, n, dist, [0.0, 0.1][k % 2], options)
                })
                .collect();
            let label = format!(
                "n={n} keys={:?}",
                columns
                    .iter()
                    .map(|c| c.arrays[0].data_type().to_string())
                    .collect::<Vec<_>>()
            );
            assert_device_encoding_matches(&columns, &label);
        }
    }
});

/// The device encoding of byte-like key columns sorts as the host encoding does; where
/// values are longer than the window, the device orders the ties itself, into the order
/// (and the tie groups) of the host's refinement.
fn assert_device_byte_encoding_matches(columns: &[KeyColumn], label: &str) {
    assert_device_refinement_matches(columns, None, label);
}

/// A device sort of byte-like key columns (within `segments`) equals the host's sort
/// followed by the host's refinement of the window's ties: same permutation, same number
/// of tie groups, no packed key brought back.
fn assert_device_refinement_matches(
    columns: &[KeyColumn],
    segments: Option<&Segments>,
    label: &str,
) {
    // The device's windows grow further than the host's (`DEVICE_LIVE_CHUNKS`).
    let host = encode_keys_windowed(columns, DEVICE_LIVE_CHUNKS).unwrap();
    let mut expected = CpuBackend
        .sort(&host, AlgorithmChoice::Auto, segments)
        .unwrap()
        .permutation;
    let groups = refine_long_ties(columns, &host, segments, &mut expected).unwrap();
    let fallbacks = cuda::fallback_count();
    let run = CudaBackend::new()
        .unwrap()
        .sort_key_columns(columns, AlgorithmChoice::Auto, segments)
        .unwrap()
        .unwrap_or_else(|| panic!("{label}: not encoded on the device"));
    assert_eq!(cuda::fallback_count(), fallbacks, "{label}: fell back");
    assert!(run.refine_keys.is_none(), "{label}: packed keys came back");
    if run.permutation != expected {
        let first = (0..expected.len()).find(|&i| run.permutation[i] != expected[i]);
        panic!("{label}: order differs, first at position {first:?}");
    }
    assert_eq!(run.tie_refine.groups, groups, "{label}: tie groups");
}

/// A string column of `n` rows: `prefix` bytes of 'p', then a short suffix from a small
/// alphabet (many ties, several lengths), some rows null.
fn prefixed_strings(rng: &mut rand::rngs::StdRng, n: usize, prefix: usize, nulls: f64) -> ArrayRef {
    let head = "p".repeat(prefix);
    let values: Vec<Option<String>> = (0..n)
        .map(|_| {
            (!rng.random_bool(nulls)).then(|| {
                let len = rng.random_range(0..6);
                let tail: String = (0..len)
                    .map(|_| ['a', 'b', '\0'][rng.random_range(0..3)])
                    .collect();
                format!("{head}{tail}")
            })
        })
        .collect();
    Arc::new(datafusion::arrow::array::StringViewArray::from(values))
}

gpu_test!(device_refines_ties_past_the_window, |_rt| {
    let mut rng = rng("device-refine");
    let int_key = |rng: &mut rand::rngs::StdRng, n| {
        key_column(
            rng,
            &DataType::Int32,
            n,
            common::data::Distribution::Distinct(4),
            0.0,
            SortOptions::default(),
        )
    };
    for (n, prefix) in [(2, 70), (5_000, 65), (60_000, 200), (300_000, 90)] {
        for descending in [false, true] {
            let options = SortOptions {
                descending,
                nulls_first: !descending,
            };
            let strings = KeyColumn {
                arrays: vec![prefixed_strings(&mut rng, n, prefix, 0.05)],
                options,
            };
            let label = format!("n={n} prefix={prefix} desc={descending}");
            // One long key; a long key and an integer after it; two long keys.
            assert_device_refinement_matches(std::slice::from_ref(&strings), None, &label);
            let with_int = vec![strings.clone(), int_key(&mut rng, n)];
            assert_device_refinement_matches(&with_int, None, &format!("{label} +int"));
            let second = KeyColumn {
                arrays: vec![prefixed_strings(&mut rng, n, 100, 0.0)],
                options: SortOptions::default(),
            };
            let two = vec![strings.clone(), second];
            assert_device_refinement_matches(&two, None, &format!("{label} two long keys"));
            // Within segments of 1 000 rows.
            let starts: Vec<u32> = (0..n as u32).step_by(1000).collect();
            let segments = Segments::new(starts, n);
            assert_device_refinement_matches(
                std::slice::from_ref(&strings),
                Some(&segments),
                &format!("{label} segments"),
            );
        }
    }
    // Every value equal and long: one group, refined through 1 000 bytes by short steps.
    let n = 200_000;
    let same: ArrayRef = Arc::new(datafusion::arrow::array::StringViewArray::from_iter_values(
        std::iter::repeat_n("q".repeat(1000), n),
    ));
    let all_equal = [
        KeyColumn {
            arrays: vec![same],
            options: SortOptions::default(),
        },
        int_key(&mut rng, n),
    ];
    assert_device_refinement_matches(&all_equal, None, "all equal");
});

gpu_test!(device_encoding_of_byte_like_keys, |_rt| {
    use common::data::Distribution::*;
    use common::strings::{make_byte_column, SHAPES};
    let mut rng = rng("device-encoding-bytes");
    let types = [
        DataType::Utf8View,
        DataType::Utf8,
        DataType::LargeUtf8,
        DataType::Binary,
        DataType::LargeBinary,
        DataType::BinaryView,
    ];
    for dt in &types {
        for shape in SHAPES {
            for (n, dist, null_fraction, descending, nulls_first, with_int) in [
                (20_000, Uniform, 0.0, false, false, false),
                (5_001, Distinct(10), 0.3, true, true, true),
                (3_000, AllEqual, 0.1, false, true, false),
                (2, Uniform, 0.5, true, false, true),
            ] {
                let base = common::data::base_values(&mut rng, n, dist);
                let whole = make_byte_column(&mut rng, dt, &base, shape, null_fraction);
                let cuts = [0, n / 3, n / 3, n / 2, n];
                let arrays: Vec<ArrayRef> = cuts
                    .windows(2)
                    .map(|w| whole.slice(w[0], w[1] - w[0]))
                    .collect();
                let options = SortOptions {
                    descending,
                    nulls_first,
                };
                let mut columns = vec![KeyColumn { arrays, options }];
                if with_int {
                    columns.push(key_column(
                        &mut rng,
                        &DataType::Int32,
                        n,
                        Distinct(256),
                        0.1,
                        SortOptions::default(),
                    ));
                }
                let label = format!("{dt} {shape:?} n={n} {dist:?} nulls={null_fraction} {options:?} int={with_int}");
                assert_device_byte_encoding_matches(&columns, &label);
            }
        }
    }
});

gpu_test!(device_encoding_out_of_memory_falls_back, |_rt| {
    let mut rng = rng("device-encoding-oom");
    let options = SortOptions::default();
    let column = key_column(
        &mut rng,
        &DataType::Float64,
        200_000,
        common::data::Distribution::Uniform,
        0.1,
        options,
    );
    let expected = CpuBackend
        .sort(
            &encode_keys(std::slice::from_ref(&column)).unwrap(),
            AlgorithmChoice::Auto,
            None,
        )
        .unwrap();
    cuda::inject_fault(Fault::OutOfMemory);
    let backend = CudaBackend::new().unwrap();
    let run = backend
        .sort_key_columns(std::slice::from_ref(&column), AlgorithmChoice::Auto, None)
        .unwrap()
        .expect("handled by the CUDA backend");
    assert!(run.fell_back, "an injected device OOM must fall back");
    assert_eq!(run.permutation, expected.permutation);
    assert!(cuda::disabled_reason().is_none(), "OOM is not fatal");
});

/// Runs `sticky_error_child` in a child process: a sticky error disables the device for
/// the whole process, which must not leak into the other tests.
#[test]
#[ignore = "needs a CUDA GPU"]
fn sticky_error_disables_device_and_queries_stay_correct() {
    if device().is_none() {
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sticky_error_child",
            "--include-ignored",
            "--nocapture",
        ])
        .env("GPUSORT_STICKY_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && text.contains("1 passed"),
        "child failed:\n{text}"
    );
}

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn sticky_error_child() {
    if std::env::var("GPUSORT_STICKY_CHILD").is_err() || device().is_none() {
        return;
    }
    let n = 200_000;
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from(random_keys(n, "sticky", |x| {
            x as i64
        })))],
    )
    .unwrap();
    let config = common::session_config(1, 8192);
    let (stock, forced) = (
        common::stock_context(config.clone()),
        common::forced_context_on(config, Cuda),
    );
    common::register(&[&stock, &forced], "t", vec![vec![batch]]);
    let sql = "SELECT * FROM t ORDER BY k DESC";
    let (expected, _) = common::run(&stock, sql).await.unwrap();
    cuda::inject_fault(Fault::StickyError);
    let (actual, plan) = common::run(&forced, sql).await.unwrap();
    assert!(plan.contains("GpuSortExec"), "{plan}");
    assert!(
        cuda::disabled_reason().is_some(),
        "a sticky error disables the device"
    );
    common::compare::assert_same_sort(&expected, &actual, &[0], "after a sticky error");
    // Later queries: `cuda` declines with the reason, `auto` plans the CPU backend.
    let (again, plan) = common::run(&forced, sql).await.unwrap();
    assert!(!plan.contains("backend=cuda"), "{plan}");
    common::compare::assert_same_sort(
        &expected,
        &again,
        &[0],
        "query after the device was disabled",
    );
    assert!(cuda::runtime().unwrap_err().contains("disabled"));
}

/// Permutations given back after a query are filled again by later downloads (the same
/// length, cut shorter, too short to reuse): every later sort still equals DataFusion's.
#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn recycled_permutations_keep_later_sorts_correct() {
    if device().is_none() {
        return;
    }
    let n = 3_000_000;
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("id", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(random_keys(n, "recycle", |x| {
                (x >> 44) as i64 - 500_000
            }))),
            Arc::new(Int64Array::from_iter_values(0..n as i64)),
        ],
    )
    .unwrap();
    let config = common::session_config(1, 8192);
    let (stock, forced) = (
        common::stock_context(config.clone()),
        common::forced_context_on(config, Cuda),
    );
    common::register(&[&stock, &forced], "t", vec![vec![batch.clone()]]);
    common::register(
        &[&stock, &forced],
        "half",
        vec![vec![batch.slice(7, n / 2)]],
    );
    let fallbacks = cuda::fallback_count();
    for sql in [
        "SELECT * FROM t ORDER BY k",
        "SELECT * FROM t ORDER BY k",
        "SELECT * FROM half ORDER BY k DESC",
        "SELECT * FROM t ORDER BY k DESC, id",
    ] {
        let (expected, _) = common::run(&stock, sql).await.unwrap();
        let (actual, plan) = common::run(&forced, sql).await.unwrap();
        assert!(plan.contains("GpuSortExec"), "{plan}");
        common::compare::assert_same_sort(&expected, &actual, &[0], sql);
    }
    assert_eq!(
        cuda::fallback_count(),
        fallbacks,
        "every run sorted on the GPU"
    );
}

macro_rules! differential_on_cuda {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        #[ignore = "needs a CUDA GPU"]
        async fn $name() {
            if device().is_none() {
                return;
            }
            let fallbacks = cuda::fallback_count();
            cases::$name(Cuda).await;
            assert_eq!(cuda::fallback_count(), fallbacks, "every run sorted on the GPU");
        }
    )*};
}

differential_on_cuda!(
    every_type_every_direction,
    every_distribution,
    sizes_around_tiles_and_large,
    null_fractions,
    one_to_four_mixed_keys,
    partitions_and_batch_sizes,
    many_runs_merged_stay_stable,
    memory_limited_sorts_spill,
    negative_zero_and_nan_bitwise,
    string_keys_every_type_and_shape,
    string_keys_mixed_with_other_keys,
    string_keys_in_runs_partitions_and_spills,
    parquet_sources,
    copy_to_parquet,
);

/// A run of `columns` (one column per type, named `c<i>`) in uneven input batches: the
/// first rows cut off (offsets that are not byte aligned), one batch empty.
fn uneven_run(columns: Vec<ArrayRef>) -> (RunRows, usize) {
    let fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
        .collect();
    let whole = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let n = whole.num_rows() - 3;
    let cuts = [3, 3 + n / 7, 3 + n / 7, 3 + n / 2 + 1, 3 + n];
    let batches = cuts
        .windows(2)
        .map(|w| whole.slice(w[0], w[1] - w[0]))
        .collect();
    (RunRows::new(batches), n)
}

/// The columns of `rows` in `permutation` order gathered with the device's payload gather
/// equal the host's gather, batch for batch; returns the columns the device gathered.
fn assert_device_gather_matches_host(
    rows: &RunRows,
    permutation: &[u32],
    batch_size: usize,
    label: &str,
) -> Vec<usize> {
    let (columns, stats) = device_gather_against_host(rows, permutation, None, batch_size, label);
    assert!(
        stats.h2d_bytes > permutation.len() * 4 && stats.d2h_bytes > 0,
        "{label}: {stats:?}"
    );
    columns
}

/// [`assert_device_gather_matches_host`] through the state a sort left (`None`: a state
/// that keeps nothing); returns the columns gathered on the device and the gather's
/// statistics.
fn device_gather_against_host(
    rows: &RunRows,
    permutation: &[u32],
    state: Option<Box<dyn RunState>>,
    batch_size: usize,
    label: &str,
) -> (Vec<usize>, PayloadStats) {
    let gathered = |payload: Option<&mut dyn PayloadGather>| {
        let mut out = Vec::new();
        gather_sorted(rows, permutation, batch_size, payload, |b| {
            out.push(b);
            true
        })
        .unwrap();
        out
    };
    let expected = gathered(None);
    let fallbacks = cuda::fallback_count();
    let state = state.unwrap_or_else(|| CudaBackend::new().unwrap().empty_run_state());
    let mut payload = state
        .payload_gatherer(rows, permutation)
        .unwrap_or_else(|| panic!("{label}: nothing gathered on the device"));
    let actual = gathered(Some(payload.as_mut()));
    assert_eq!(cuda::fallback_count(), fallbacks, "{label}: fell back");
    assert_eq!(actual.len(), expected.len(), "{label}: batch count");
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        assert_eq!(a, e, "{label}: batch {i} differs");
    }
    (payload.columns().to_vec(), payload.stats())
}

/// A random permutation of `n` rows.
fn shuffled(n: usize, label: &str) -> Vec<u32> {
    use rand::seq::SliceRandom;
    let mut permutation: Vec<u32> = (0..n as u32).collect();
    permutation.shuffle(&mut rng(label));
    permutation
}

gpu_test!(device_gather_of_every_fixed_width_type, |rt| {
    let _ = rt;
    use datafusion::arrow::array::FixedSizeBinaryArray;
    let n = 40_003;
    let mut r = rng("payload types");
    let mut columns: Vec<ArrayRef> = common::data::fixed_width_types()
        .iter()
        .enumerate()
        .map(|(i, dt)| {
            let base = common::data::base_values(&mut r, n, common::data::Distribution::Uniform);
            common::data::make_column(&mut r, dt, &base, [0.0, 0.2, 1.0][i % 3])
        })
        .collect();
    let fixed = |width: usize, nulls: bool| -> ArrayRef {
        let values = (0..n).map(|i| {
            let bytes = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes();
            (!nulls || i % 5 != 0).then(|| {
                bytes
                    .iter()
                    .cycle()
                    .take(width)
                    .copied()
                    .collect::<Vec<u8>>()
            })
        });
        Arc::new(
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(values, width as i32).unwrap(),
        )
    };
    // 16 bytes on the device; 3 bytes and strings on the host.
    columns.push(fixed(16, true));
    columns.push(fixed(3, false));
    columns.push(Arc::new(
        datafusion::arrow::array::StringArray::from_iter_values((0..n).map(|i| format!("s{i}"))),
    ));
    let types = columns.len();
    let (rows, n) = uneven_run(columns);
    let permutation = shuffled(n, "payload types perm");
    for (batch_size, take) in [(8192, n), (1000, n), (77, 1234)] {
        let label = format!("batch {batch_size}, {take} rows");
        let on_device =
            assert_device_gather_matches_host(&rows, &permutation[..take], batch_size, &label);
        assert_eq!(on_device, (0..types - 2).collect::<Vec<_>>(), "{label}");
    }
});

gpu_test!(device_gather_over_several_windows, |rt| {
    let _ = rt;
    use datafusion::arrow::array::{BooleanArray, Float64Array};
    let n = 2 * gpusort::gather::DEVICE_WINDOW_ROWS + 4321;
    let ints: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i * 3)));
    let floats: ArrayRef = Arc::new(Float64Array::from_iter(
        (0..n).map(|i| (i % 7 != 0).then_some(i as f64 * 0.5)),
    ));
    let bools: ArrayRef = Arc::new(BooleanArray::from_iter(
        (0..n).map(|i| (i % 11 != 0).then_some(i % 3 == 0)),
    ));
    let (rows, n) = uneven_run(vec![ints, floats, bools]);
    let permutation = shuffled(n, "windows perm");
    let on_device = assert_device_gather_matches_host(&rows, &permutation, 8192, "windows");
    assert_eq!(on_device, vec![0, 1, 2]);
});

gpu_test!(device_gather_into_page_locked_windows, |rt| {
    use datafusion::arrow::array::{BooleanArray, Float64Array, StringViewArray};
    let n = 2 * gpusort::gather::DEVICE_WINDOW_ROWS + 777;
    let ints: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i * 7)));
    let floats: ArrayRef = Arc::new(Float64Array::from_iter(
        (0..n).map(|i| (i % 5 != 0).then_some(i as f64 * 0.25)),
    ));
    let bools: ArrayRef = Arc::new(BooleanArray::from_iter(
        (0..n).map(|i| (i % 13 != 0).then_some(i % 2 == 0)),
    ));
    let texts: ArrayRef =
        Arc::new(StringViewArray::from_iter((0..n).map(|i| {
            (i % 17 != 0).then(|| format!("value number {i} of the run"))
        })));
    let (rows, n) = uneven_run(vec![ints, floats, bools, texts]);
    // The first gather's windows go back when its batches are dropped and are locked; the
    // second gather, of another order, is copied straight into them over stale contents.
    let first = shuffled(n, "locked windows, first");
    device_gather_against_host(&rows, &first, None, 8192, "before locking");
    if std::env::var(gpusort::cuda::HOST_LOCK_VARIABLE).as_deref() != Ok("0") {
        assert!(rt.settle_host_memory() > 0, "no window memory was locked");
    }
    let second = shuffled(n, "locked windows, second");
    let (on_device, _) = device_gather_against_host(&rows, &second, None, 5000, "locked");
    assert_eq!(on_device, vec![0, 1, 2, 3]);
});

gpu_test!(device_gather_out_of_memory_gathers_on_the_host, |rt| {
    let _ = rt;
    let n = 100_000;
    let values: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| -i)));
    let (rows, n) = uneven_run(vec![values]);
    let permutation = shuffled(n, "oom perm");
    let gathered = |payload: Option<&mut dyn PayloadGather>| {
        let mut out = Vec::new();
        gather_sorted(&rows, &permutation, 4096, payload, |b| {
            out.push(b);
            true
        })
        .unwrap();
        out
    };
    let expected = gathered(None);
    let backend = CudaBackend::new().unwrap();
    // Out of memory while uploading: the host gathers everything.
    let fallbacks = cuda::fallback_count();
    cuda::inject_fault(Fault::OutOfMemory);
    assert!(backend
        .empty_run_state()
        .payload_gatherer(&rows, &permutation)
        .is_none());
    assert_eq!(cuda::fallback_count(), fallbacks + 1);
    // Out of memory in the first window: the host gathers that window and the rest.
    let mut payload = backend
        .empty_run_state()
        .payload_gatherer(&rows, &permutation)
        .unwrap();
    cuda::inject_fault(Fault::OutOfMemory);
    assert_eq!(gathered(Some(payload.as_mut())), expected);
    assert_eq!(cuda::fallback_count(), fallbacks + 2);
    assert!(cuda::disabled_reason().is_none(), "OOM is not fatal");
});

gpu_test!(device_gather_reuses_the_sorts_permutation_and_keys, |rt| {
    let _ = rt;
    use datafusion::arrow::array::Float64Array;
    let n = 300_000;
    let mut r = rng("reuse");
    let keys: ArrayRef = Arc::new(Int64Array::from_iter(
        (0..n).map(|i| (i % 13 != 0).then(|| r.random_range(-1000..1000i64))),
    ));
    let payload: ArrayRef = Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64)));
    let (rows, n) = uneven_run(vec![keys, payload]);
    let key = KeyColumn {
        arrays: rows.column_arrays(0),
        options: SortOptions::default(),
    };
    let run = CudaBackend::new()
        .unwrap()
        .sort_key_columns(&[key], AlgorithmChoice::Auto, None)
        .unwrap()
        .expect("sorted on the device");
    assert!(!run.fell_back && run.state.is_some());
    let (columns, stats) =
        device_gather_against_host(&rows, &run.permutation, run.state, 8192, "reuse");
    assert_eq!(columns, vec![0, 1]);
    // Only the payload column's values go up: the key column and the order are reused.
    assert_eq!(stats.h2d_bytes, n * 8, "{stats:?}");
});

gpu_test!(device_gather_of_string_and_binary_views, |rt| {
    let _ = rt;
    use common::strings::{make_byte_column, Shape};
    use datafusion::arrow::array::builder::StringViewBuilder;
    let n = 60_007;
    let mut r = rng("payload views");
    let base = common::data::base_values(&mut r, n + 3, common::data::Distribution::Uniform);
    // Many small data buffers: each output batch reads a few of them.
    let mut builder = StringViewBuilder::new().with_fixed_block_size(4096);
    for (i, b) in base.iter().enumerate() {
        match i % 9 {
            0 => builder.append_null(),
            _ => builder.append_value(common::strings::text_of(*b, Shape::Mixed)),
        }
    }
    let strings: ArrayRef = Arc::new(builder.finish());
    let binaries = make_byte_column(&mut r, &DataType::BinaryView, &base, Shape::Hex, 0.2);
    let utf8 = make_byte_column(&mut r, &DataType::Utf8, &base, Shape::Short, 0.0);
    let (rows, n) = uneven_run(vec![strings, binaries, utf8]);
    let permutation = shuffled(n, "payload views perm");
    for (batch_size, take) in [(8192, n), (1000, n), (77, 1234)] {
        let label = format!("views, batch {batch_size}, {take} rows");
        let on_device =
            assert_device_gather_matches_host(&rows, &permutation[..take], batch_size, &label);
        assert_eq!(on_device, vec![0, 1], "{label}: Utf8 stays on the host");
    }
});

gpu_test!(device_gather_reuses_a_string_keys_views, |rt| {
    let _ = rt;
    use common::strings::{make_byte_column, Shape};
    let n = 200_000;
    let mut r = rng("reuse views");
    let base =
        common::data::base_values(&mut r, n + 3, common::data::Distribution::Distinct(10_000));
    let keys = make_byte_column(
        &mut r,
        &DataType::Utf8View,
        &base,
        Shape::SharedPrefix(9),
        0.05,
    );
    let payload: ArrayRef = Arc::new(Int64Array::from_iter_values(0..(n + 3) as i64));
    let (rows, n) = uneven_run(vec![keys, payload]);
    let key = KeyColumn {
        arrays: rows.column_arrays(0),
        options: SortOptions {
            descending: true,
            nulls_first: false,
        },
    };
    let run = CudaBackend::new()
        .unwrap()
        .sort_key_columns(&[key], AlgorithmChoice::Auto, None)
        .unwrap()
        .expect("sorted on the device");
    assert!(!run.fell_back && run.state.is_some() && run.refine_keys.is_none());
    let (columns, stats) =
        device_gather_against_host(&rows, &run.permutation, run.state, 4096, "reuse views");
    assert_eq!(columns, vec![0, 1]);
    // Only the payload column's values go up: the key's views and the order are reused.
    assert_eq!(stats.h2d_bytes, n * 8, "{stats:?}");
});

// ---- locality and segmented merge sorts ----

/// Sizes around the merge tile, and a few with several merge passes.
fn merge_sizes() -> Vec<usize> {
    let tile = cuda::MERGE_TILE as usize;
    let mut sizes = vec![0, 1, 2, 3, 17, 1000];
    sizes.extend((tile - 2..=tile + 2).chain(2 * tile - 1..=2 * tile + 1));
    sizes.extend([
        3 * tile + 5,
        16 * tile,
        16 * tile + 1,
        1 << 20,
        (1 << 22) + 12_345,
    ]);
    sizes
}

/// Keys of one word with `bits` significant bits (top-aligned) for `n` rows, in the given
/// shape: random, nearly sorted (disorder within `noise` positions), all equal.
fn shaped_word(n: usize, label: &str, bits: u32, shape: &str, noise: u64) -> Vec<u64> {
    let random = random_keys(n, label, |x| x);
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let value = |i: usize| -> u64 {
        match shape {
            "random" => random[i] & mask,
            "equal" => 7 & mask,
            _ => (i as u64 * 8 + random[i] % (noise * 8 + 1)) & mask,
        }
    };
    (0..n).map(|i| value(i) << (64 - bits)).collect()
}

fn one_word(word: Vec<u64>, bits: u32) -> EncodedKeys {
    EncodedKeys {
        rows: word.len(),
        words: vec![word],
        total_bits: bits,
        long_keys: Vec::new(),
    }
}

gpu_test!(
    locality_sort_equals_the_stable_sort_at_every_size_and_shape,
    |rt| {
        let _ = rt;
        let backend = CudaBackend::new().unwrap();
        for n in merge_sizes() {
            for bits in [20, 32, 48, 64] {
                for (shape, noise) in [
                    ("random", 0),
                    ("nearly", 0),
                    ("nearly", 1),
                    ("nearly", 64),
                    ("nearly", 4096),
                    // Keys moved up to 12 000 places: tile radii around the placement
                    // pass's limit of 8, on both sides of it.
                    ("nearly", 12_000),
                    ("equal", 0),
                ] {
                    let label = format!("locality n={n} bits={bits} {shape} noise={noise}");
                    let keys = one_word(shaped_word(n, &label, bits, shape, noise), bits);
                    let expected = radix_sort(&keys.words, n);
                    let run = backend
                        .sort(&keys, AlgorithmChoice::Locality, None)
                        .unwrap();
                    assert!(!run.fell_back, "{label}: fell back");
                    assert!(run.permutation == expected, "{label}: order differs");
                    if n > 1 {
                        assert_eq!(run.algorithm, gpusort::sort::Algorithm::Locality, "{label}");
                    }
                }
            }
        }
    }
);

// The windowed locality sort: keys within the halo of their places (ties included) give
// the stable sort; a key further away, or random keys, make the check decline (a result
// that is kept must be the stable sort).
gpu_test!(locality_window_sort_is_exact_or_declines, |rt| {
    // The default halo, the least and the largest.
    for halo in [cuda::LOCALITY_WINDOW_HALO, 16, 512] {
        check_window_sort(rt, halo);
    }
});

/// The windowed sort with `halo` keeps input whose keys are each at most `halo` places out
/// (ties included) with the stable order, declines a key far out, and is right or declines
/// on random keys.
fn check_window_sort(rt: &CudaRuntime, halo: u32) {
    let owned = (cuda::MERGE_TILE - 2 * halo) as usize;
    let tile = cuda::MERGE_TILE as usize;
    for n in [
        tile + 1,
        3 * owned - 1,
        3 * owned,
        3 * owned + 1,
        100_003,
        1 << 20,
    ] {
        for bits in [32u32, 64] {
            // (shape, noise, must the window sort keep its result?)
            let cases: [(&str, u64, Option<bool>); 6] = [
                ("nearly", 0, Some(true)),
                ("nearly", 1, Some(true)),
                ("nearly", halo as u64 / 2, Some(true)),
                ("nearly", halo as u64, Some(true)),
                // One key n / 2 places out: the two phases move a key less than four
                // halos, so then it must decline.
                ("far", 0, (n / 2 > 4 * halo as usize + 2).then_some(false)),
                ("random", 0, None),
            ];
            for (shape, noise, keeps) in cases {
                let label =
                    format!("window sort halo={halo} n={n} bits={bits} {shape} noise={noise}");
                let mut word = match shape {
                    "far" => shaped_word(n, &label, bits, "nearly", 0),
                    _ => shaped_word(n, &label, bits, shape, noise),
                };
                if bits == 32 {
                    // Ties: keys of eight rows in a row share their value.
                    for w in word.iter_mut() {
                        *w &= !(0x3fu64 << 32);
                    }
                }
                if shape == "far" {
                    // One key belongs n / 2 places before where it is.
                    word[n - 1] = word[n / 2];
                }
                let expected = radix_sort(std::slice::from_ref(&word), n);
                let got = rt
                    .with_device(|device, staging| {
                        let keys = upload_merge_keys(device, staging, &word, bits)?;
                        match rt.merge.window_sort(device, &keys, n, halo)? {
                            Some(ids) => download(device, staging, Some(ids), n).map(Some),
                            None => Ok(None),
                        }
                    })
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                if let Some(keeps) = keeps {
                    assert_eq!(got.is_some(), keeps, "{label}: kept or declined wrongly");
                }
                if let Some(got) = got {
                    assert!(got == expected, "{label}: order differs");
                }
            }
        }
    }
}

gpu_test!(probe_counts_every_distance_like_the_host, |rt| {
    let far = 4 * cuda::MERGE_TILE;
    let every = 8u32;
    let chunk = cuda::PROBE_CHUNK as usize;
    for n in [1usize, 5, 2 * chunk + 7, 100_003] {
        for bits in [32u32, 64] {
            for noise in [0u64, 16, 64, 300, 1000] {
                let label = format!("probe n={n} bits={bits} noise={noise}");
                let word = shaped_word(n, &label, bits, "nearly", noise);
                let probe = rt
                    .with_device(|device, staging| {
                        let keys = upload_merge_keys(device, staging, &word, bits)?;
                        rt.merge.probe(device, &keys, n, far, every)
                    })
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                let host = |distance: u32| {
                    let d = distance as usize;
                    let sampled =
                        (0..n.saturating_sub(d)).filter(|i| (i / chunk) % every as usize == 0);
                    let (mut probed, mut inversions) = (0u64, 0u64);
                    for i in sampled {
                        probed += 1;
                        inversions += u64::from(word[i] > word[i + d]);
                    }
                    cuda::Probe { inversions, probed }
                };
                for (k, &halo) in cuda::PROBED_HALOS.iter().enumerate() {
                    assert_eq!(probe.halos[k], host(halo), "{label}: halo {halo}");
                }
                assert_eq!(probe.far, host(far), "{label}: far");
                if n > 1000 {
                    // Keys at most `noise` places out: clean from the first power of two
                    // at or above it on (none of them past 512).
                    let power = noise.max(16).next_power_of_two() as u32;
                    let least = (power <= 512).then_some(power);
                    assert_eq!(probe.least_clean_halo(), least, "{label}");
                }
            }
        }
    }
});

gpu_test!(auto_probes_for_nearly_sorted_keys, |rt| {
    let _ = rt;
    let backend = CudaBackend::new().unwrap();
    let n = (1 << 21) + 99;
    // Disorder within four tiles (8 192 rows) goes to the locality sort for u64 keys,
    // within one tile (2 048 rows) for u32 keys.
    for (bits, shape, noise, locality) in [
        (64, "nearly", 0, true),
        (64, "nearly", 64, true),
        (64, "nearly", 4096, true),
        (64, "random", 0, false),
        (64, "nearly", 1 << 14, false),
        (32, "nearly", 0, true),
        (32, "nearly", 64, true),
        (32, "nearly", 4096, false),
        (32, "random", 0, false),
    ] {
        let label = format!("probe {bits} bits {shape} {noise}");
        let keys = one_word(shaped_word(n, &label, bits, shape, noise), bits);
        let run = backend.sort(&keys, AlgorithmChoice::Auto, None).unwrap();
        let expected = if locality {
            gpusort::sort::Algorithm::Locality
        } else {
            gpusort::sort::Algorithm::Radix
        };
        assert_eq!(run.algorithm, expected, "{label}");
        assert!(
            run.permutation == radix_sort(&keys.words, n),
            "{label}: order differs"
        );
    }
});

/// Segment starts of `n` rows with lengths drawn as `lengths` says.
fn segments_of(
    n: usize,
    label: &str,
    lengths: common::strategies::Lengths,
) -> gpusort::sort::Segments {
    let mut rng = rng(label);
    let mut starts = Vec::new();
    let mut at = 0;
    for len in common::strategies::segment_lengths(&mut rng, n, lengths) {
        starts.push(at as u32);
        at += len;
    }
    gpusort::sort::Segments::new(starts, n)
}

gpu_test!(segmented_sort_equals_the_cpu_segmented_sort, |rt| {
    use common::strategies::Lengths;
    let _ = rt;
    let backend = CudaBackend::new().unwrap();
    let shapes = [
        Lengths::Fixed(1),
        Lengths::Short,
        Lengths::Fixed(100),
        Lengths::Fixed(113),
        Lengths::Fixed(1000),
        Lengths::Fixed(5000),
        // Segments over up to 9 tiles: radii near the placement pass's limit.
        Lengths::Fixed(15_000),
        Lengths::Fixed(100_000),
        Lengths::One,
        Lengths::PowerLaw,
    ];
    for n in merge_sizes() {
        for lengths in shapes {
            for (bits, words) in [(24u32, 1usize), (64, 1), (64, 2)] {
                let label = format!("segmented n={n} {lengths:?} bits={bits} words={words}");
                if n == 0 {
                    continue;
                }
                let segments = segments_of(n, &label, lengths);
                let mut keys = one_word(shaped_word(n, &label, bits, "random", 0), bits);
                if words == 2 {
                    keys.words
                        .push(random_keys(n, &format!("{label}b"), |x| x & 0xff00));
                    keys.total_bits = 128;
                }
                let expected = gpusort::sort::segmented_sort(&keys.words, &segments);
                for algorithm in [AlgorithmChoice::Auto, AlgorithmChoice::Onesweep] {
                    let run = backend.sort(&keys, algorithm, Some(&segments)).unwrap();
                    assert!(!run.fell_back, "{label}: fell back");
                    assert!(
                        run.permutation == expected,
                        "{label} {algorithm:?}: order differs"
                    );
                    assert_eq!(
                        run.algorithm,
                        gpusort::sort::Algorithm::Segmented,
                        "{label}"
                    );
                }
            }
        }
    }
});

/// Top-aligned one-word keys on the device as merge keys: their top 32 bits as u32 keys when
/// `bits` ≤ 32, else the u64 words.
fn upload_merge_keys(
    device: &cuda::Device,
    staging: &mut cuda::Staging,
    word: &[u64],
    bits: u32,
) -> cuda::CudaResult<cuda::MergeKeys> {
    let n = word.len();
    Ok(if bits <= 32 {
        let narrow: Vec<u32> = word.iter().map(|&k| (k >> 32) as u32).collect();
        cuda::MergeKeys::U32(staging.upload::<u32, _>(device, n, "test keys", |at, out| {
            out.copy_from_slice(&narrow[at..at + out.len()])
        })?)
    } else {
        cuda::MergeKeys::U64(staging.upload::<u64, _>(device, n, "test keys", |at, out| {
            out.copy_from_slice(&word[at..at + out.len()])
        })?)
    })
}

/// Runs the segment-tile sort with `tile` directly on u32 and u64 keys (few distinct
/// values: many ties, so stability is checked too) for every size and segment shape, and
/// compares with the CPU segmented sort. Segments longer than the tile (power-law lengths)
/// are split first.
fn check_segment_tiles(
    rt: &cuda::CudaRuntime,
    tile: cuda::SegmentTile,
    sizes: &[usize],
    shapes: &[common::strategies::Lengths],
) {
    let tile_rows = tile.rows();
    for &n in sizes {
        for &lengths in shapes {
            let label = format!("segment tiles {tile:?} n={n} {lengths:?}");
            let mut segments = segments_of(n, &label, lengths);
            if segments.longest_rows() > tile_rows {
                let starts = segments
                    .ranges()
                    .flat_map(|r| r.step_by(tile_rows).map(|s| s as u32))
                    .collect();
                segments = gpusort::sort::Segments::new(starts, n);
            }
            for bits in [20u32, 64] {
                let label = format!("{label} bits={bits}");
                let word: Vec<u64> = shaped_word(n, &label, bits, "random", 0)
                    .into_iter()
                    .map(|k| k & (0xfu64 << 60 | 0xff << (64 - bits)))
                    .collect();
                let expected =
                    gpusort::sort::segmented_sort(std::slice::from_ref(&word), &segments);
                let got = rt
                    .with_device(|device, staging| {
                        let keys = upload_merge_keys(device, staging, &word, bits)?;
                        let ids = rt
                            .merge
                            .sort_segment_tiles(device, staging, &keys, &segments, n, tile)?;
                        download(device, staging, Some(ids), n)
                    })
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                assert!(got == expected, "{label}: order differs");
            }
        }
    }
}

// Segment starts sent as u8 / u16 lengths (or as they are) and rebuilt on the device: segment
// counts around the rebuild's chunk, lengths at each encoding's limit, random lengths.
gpu_test!(segment_starts_rebuilt_from_lengths, |rt| {
    use cuda::{StartsEncoding, SEGMENT_STARTS_CHUNK as CHUNK};
    let mut rng = rng("segment starts");
    for longest in [1usize, 2, 255, 256, 257, 65_535, 65_536, 65_537] {
        for count in [
            1,
            2,
            CHUNK - 1,
            CHUNK,
            CHUNK + 1,
            2 * CHUNK + 1,
            5 * CHUNK + 17,
        ] {
            // Random lengths, the longest one somewhere; at most 2^26 rows in all.
            let longest = longest.min((1usize << 26) / count);
            let label = format!("segment starts: {count} segments of up to {longest} rows");
            let mut lengths: Vec<usize> =
                (0..count).map(|_| rng.random_range(1..=longest)).collect();
            lengths[rng.random_range(0..count)] = longest;
            let mut starts = Vec::with_capacity(count);
            let mut rows = 0usize;
            for length in &lengths {
                starts.push(rows as u32);
                rows += length;
            }
            let segments = gpusort::sort::Segments::new(starts, rows);
            assert_eq!(segments.longest_rows(), longest, "{label}");
            let got = rt
                .with_device(|device, staging| {
                    let on_device = rt.merge.upload_segment_starts(device, staging, &segments)?;
                    download(device, staging, Some(on_device), count)
                })
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            assert!(
                got == segments.starts(),
                "{label} ({:?}): starts differ",
                StartsEncoding::for_longest(longest)
            );
        }
    }
});

// The standard segment tile: segment lengths up to a whole tile (stride 1), around the rank
// kernel's limit of 32, mixed lengths, sizes around the tile.
gpu_test!(segment_tiles_sort_segments_up_to_a_tile, |rt| {
    use common::strategies::Lengths;
    let tile = cuda::MERGE_TILE as usize;
    check_segment_tiles(
        rt,
        cuda::SegmentTile::Standard,
        &[
            1,
            2,
            17,
            tile - 1,
            tile,
            tile + 1,
            2 * tile + 1,
            100_003,
            1 << 20,
        ],
        &[
            Lengths::Short,
            Lengths::Fixed(1),
            Lengths::Fixed(3),
            Lengths::Fixed(32),
            Lengths::Fixed(33),
            Lengths::Fixed(113),
            Lengths::Fixed(tile / 2 + 1),
            Lengths::Fixed(tile - 1),
            Lengths::Fixed(tile),
            Lengths::PowerLaw,
        ],
    );
});

// The large segment tile: segments from just over a standard tile to a whole large tile
// (stride 1), short ones mixed in, sizes around the large tile; and which tile `auto` picks.
gpu_test!(large_segment_tiles_sort_segments_up_to_a_tile, |rt| {
    use common::strategies::Lengths;
    let tile = cuda::SegmentTile::Large.rows();
    let standard = cuda::MERGE_TILE as usize;
    check_segment_tiles(
        rt,
        cuda::SegmentTile::Large,
        &[
            1,
            17,
            tile - 1,
            tile,
            tile + 1,
            2 * tile + 1,
            100_003,
            1 << 20,
        ],
        &[
            Lengths::Short,
            Lengths::Fixed(standard + 1),
            Lengths::Fixed(5000),
            Lengths::Fixed(10_000),
            Lengths::Fixed(tile - 1),
            Lengths::Fixed(tile),
            Lengths::PowerLaw,
        ],
    );
    let n = 1 << 20;
    let fixed = |len: usize| {
        let starts = (0..n).step_by(len).map(|s| s as u32).collect();
        gpusort::sort::Segments::new(starts, n)
    };
    let pick = |segments: &gpusort::sort::Segments| rt.merge.segment_tile_for(8, segments);
    assert_eq!(pick(&fixed(100)), Some(cuda::SegmentTile::Standard));
    assert_eq!(pick(&fixed(10_000)), Some(cuda::SegmentTile::Large));
    assert_eq!(pick(&fixed(tile + 1)), None);
    // Short segments and one as long as the tile: windows of one row would hold a few
    // short segments each, a tile sorted for a handful of rows.
    let mut starts: Vec<u32> = (0..n - tile).step_by(10).map(|s| s as u32).collect();
    starts.push((n - tile) as u32);
    assert_eq!(pick(&gpusort::sort::Segments::new(starts, n)), None);
});

gpu_test!(segmented_sort_of_device_encoded_columns, |rt| {
    let _ = rt;
    let backend = CudaBackend::new().unwrap();
    let mut rng = rng("segmented columns");
    let n = (1 << 20) + 333;
    for (dt, lengths) in [
        (DataType::Int32, common::strategies::Lengths::Short),
        (DataType::Int64, common::strategies::Lengths::Fixed(700)),
        (
            DataType::Float64,
            common::strategies::Lengths::Fixed(50_000),
        ),
    ] {
        let label = format!("segmented columns {dt}");
        let column = key_column(
            &mut rng,
            &dt,
            n,
            common::data::Distribution::Uniform,
            0.1,
            SortOptions::default(),
        );
        let segments = segments_of(n, &label, lengths);
        let columns = std::slice::from_ref(&column);
        let expected = CpuBackend
            .sort(
                &encode_keys(columns).unwrap(),
                AlgorithmChoice::Auto,
                Some(&segments),
            )
            .unwrap();
        let run = backend
            .sort_key_columns(columns, AlgorithmChoice::Auto, Some(&segments))
            .unwrap()
            .unwrap_or_else(|| panic!("{label}: not on the device"));
        assert!(
            run.permutation == expected.permutation,
            "{label}: order differs"
        );
    }
});

/// GPU tests running a shared case of `tests/common/<module>.rs` on the CUDA backend,
/// checking that no run fell back to the CPU.
macro_rules! cases_on_cuda {
    ($module:ident: $($name:ident ( $($arg:expr),* )),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        #[ignore = "needs a CUDA GPU"]
        async fn $name() {
            if device().is_none() {
                return;
            }
            let fallbacks = cuda::fallback_count();
            common::$module::$name(Cuda, $($arg),*).await;
            assert_eq!(cuda::fallback_count(), fallbacks, "every run sorted on the GPU");
        }
    )*};
}

cases_on_cuda!(
    strategies:
    segment_lengths_and_suffixes(300_000),
    window_over_ordered_input(1 << 20),
);

// Scale 20 000: partitions of up to 4 M rows, so the shared device gather serves
// partitions across its windows.
cases_on_cuda!(
    partitions:
    combined_partitions_equal_each_partition_sorted(20_000),
    combined_partitions_in_any_order_and_again(2_000),
    combined_partitions_in_runs_and_spilled(2_000),
    combined_partitions_with_ordered_prefix(5_000),
    window_over_hash_partitions(2_000_000),
    routed_partitions_equal_repartition_then_sort(5_000),
    routed_sort_pairs_with_repartitioned_join_side(3_000_000),
);

#[tokio::test]
#[ignore = "needs a CUDA GPU"]
async fn nearly_sorted_inputs_auto_and_locality() {
    if device().is_none() {
        return;
    }
    let rows = (1 << 20) + 4321;
    common::strategies::nearly_sorted_inputs(Cuda, rows, "locality", |_, _| true).await;
    // The probe: every key of this table reduces to one u32 word (`k` < 2^31, `c` smaller,
    // `big` = k << 20 loses its 20 constant low bits), and u32 keys are nearly sorted when
    // their disorder stays within one tile (2 048 rows): noise up to 64 and runs of 1 000
    // reversed, not noise 4 096. Ascending input sorted descending is reversed, for which
    // OneSweep is the faster sort.
    common::strategies::nearly_sorted_inputs(Cuda, rows, "auto", |noise, sql| {
        !sql.ends_with("DESC") && noise != Some(4096)
    })
    .await;
}

/// Routing keys of every integer-like kind for the partition id tests: the key column
/// (sliced at an odd offset, cut into uneven arrays, one empty) over `n` rows.
fn routing_key_arrays(n: usize, label: &str) -> Vec<(String, ArrayRef)> {
    use datafusion::arrow::array::{
        Date32Array, Decimal64Array, Int32Array, Int8Array, TimestampNanosecondArray, UInt16Array,
        UInt64Array,
    };
    let mut rng = rng(label);
    let mut small = |range: i64, nulls: f64| -> Vec<Option<i64>> {
        (0..n + 3)
            .map(|_| (!rng.random_bool(nulls)).then(|| rng.random_range(0..range)))
            .collect()
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter(
            small(120, 0.1)
                .into_iter()
                .map(|v| v.map(|v| v as i32 - 60)),
        )),
        Arc::new(Int8Array::from_iter(
            small(256, 0.05)
                .into_iter()
                .map(|v| v.map(|v| (v - 128) as i8)),
        )),
        Arc::new(Int64Array::from_iter(
            small(1000, 0.0)
                .into_iter()
                .map(|v| v.map(|v| i64::MIN + v)),
        )),
        Arc::new(UInt16Array::from_iter(
            small(65536, 0.0).into_iter().map(|v| v.map(|v| v as u16)),
        )),
        Arc::new(UInt64Array::from_iter(
            small(777, 0.2)
                .into_iter()
                .map(|v| v.map(|v| u64::MAX - v as u64)),
        )),
        Arc::new(Date32Array::from_iter(
            small(400, 0.0)
                .into_iter()
                .map(|v| v.map(|v| 19_000 + v as i32)),
        )),
        Arc::new(
            TimestampNanosecondArray::from_iter(
                small(1000, 0.01)
                    .into_iter()
                    .map(|v| v.map(|v| 1_700_000_000_000_000_000 + 100 * v)),
            )
            .with_timezone("+05:30"),
        ),
        Arc::new(
            Decimal64Array::from_iter(small(10_001, 0.0).into_iter().map(|v| v.map(|v| v - 5000)))
                .with_precision_and_scale(10, 2)
                .unwrap(),
        ),
    ];
    columns
        .into_iter()
        .map(|c| (c.data_type().to_string(), c.slice(3, n)))
        .collect()
}

/// Partition ids made on the device from the routing's table (`HashRouting::id_table`)
/// sort the rows exactly as ids hashed on the host do (`HashRouting::route_all`, then
/// the CPU sort by (id, keys)), with the same rows per partition: routing keys of every
/// integer-like kind, nulls, both directions, 1 to 5 000 partitions (more than the
/// kernel counts in shared memory).
#[test]
#[ignore = "needs a CUDA GPU"]
fn partition_ids_made_on_the_device_equal_the_hosts() {
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use gpusort::exec::HashRouting;

    if device().is_none() {
        return;
    }
    let backend = CudaBackend::new().unwrap();
    let n = 300_017;
    let cuts = [0, n / 3, n / 3, n / 3 + 1000, n];
    let mut rng = rng("partition ids: k");
    let k: ArrayRef =
        Arc::new(Int64Array::from_iter((0..n).map(|_| {
            rng.random_bool(0.95).then(|| rng.random_range(-500..500))
        })));
    for (case, (name, key)) in routing_key_arrays(n, "partition ids")
        .into_iter()
        .enumerate()
    {
        let schema = Arc::new(Schema::new(vec![
            Field::new("v", key.data_type().clone(), true),
            Field::new("k", DataType::Int64, true),
        ]));
        let batches: Vec<RecordBatch> = cuts
            .windows(2)
            .map(|w| {
                let (at, len) = (w[0], w[1] - w[0]);
                let columns = vec![key.slice(at, len), k.slice(at, len)];
                RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
            })
            .collect();
        let v_options = SortOptions {
            descending: case % 2 == 1,
            nulls_first: case % 3 == 0,
        };
        let k_options = SortOptions {
            descending: true,
            nulls_first: false,
        };
        let exprs = LexOrdering::new(vec![
            PhysicalSortExpr::new(col("v", &schema).unwrap(), v_options),
            PhysicalSortExpr::new(col("k", &schema).unwrap(), k_options),
        ])
        .unwrap();
        let column = |index: usize, options| KeyColumn {
            arrays: batches
                .iter()
                .map(|b| Arc::clone(b.column(index)))
                .collect(),
            options,
        };
        let columns = vec![column(0, v_options), column(1, k_options)];
        for partitions in [1, 2, 16, 300, 5000] {
            let label = format!("{name}, {partitions} partitions, {v_options:?}");
            let routing =
                HashRouting::try_new(vec![col("v", &schema).unwrap()], partitions).unwrap();
            let table = routing
                .id_table(&exprs, &columns)
                .unwrap()
                .unwrap_or_else(|| panic!("{label}: no id table"));
            let fallbacks = cuda::fallback_count();
            let (run, counts) = backend
                .sort_key_columns_by_ids(&columns, &table, AlgorithmChoice::Auto)
                .unwrap()
                .unwrap_or_else(|| panic!("{label}: ids not made on the device"));
            assert_eq!(cuda::fallback_count(), fallbacks, "{label}: fell back");

            let routed = routing.route_all(&batches).unwrap();
            let mut host_counts = vec![0usize; partitions];
            for batch in &routed {
                for (total, count) in host_counts.iter_mut().zip(&batch.counts) {
                    *total += count;
                }
            }
            let ids = KeyColumn {
                arrays: routed.iter().map(|r| Arc::clone(&r.ids)).collect(),
                options: SortOptions::default(),
            };
            let mut all = vec![ids];
            all.extend(columns.iter().cloned());
            let expected = CpuBackend
                .sort(&encode_keys(&all).unwrap(), AlgorithmChoice::Auto, None)
                .unwrap();
            assert_eq!(counts, host_counts, "{label}: rows per partition");
            assert!(
                run.permutation == expected.permutation,
                "{label}: order differs"
            );
        }
    }
}
