//! OneSweep on the device: sizes 0 .. 2^28 including every size from tile-1 to 2·tile+1,
//! all-equal keys, one live bit, all bits live, multi-word keys, given values, keys only;
//! every permutation is checked to be the unique stable sort order.

use super::*;

/// Sorts `keys` on the device with generated row ids; returns the permutation.
pub(super) fn device_rowid_sort<K: RadixKey + TransferPlain>(
    runtime: &CudaRuntime,
    keys: &[K],
) -> Vec<u32> {
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

pub(super) fn download(
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
pub(super) fn device_keys_sort<K: RadixKey + TransferPlain>(
    runtime: &CudaRuntime,
    keys: &[K],
) -> Vec<K> {
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
pub(super) fn max_tile<K: RadixKey>(rt: &CudaRuntime) -> usize {
    PassMode::ALL
        .map(|m| rt.onesweep.shape::<K>(m).tile() as usize)
        .into_iter()
        .max()
        .unwrap()
}

/// Small sizes, and every size from tile-1 to 2·tile+1 for the tile of each pass mode.
pub(super) fn sizes_for<K: RadixKey>(rt: &CudaRuntime) -> Vec<usize> {
    let mut sizes: Vec<usize> = vec![0, 1, 2, 3, 31, 32, 33, 255, 256, 257, 1000];
    for mode in PassMode::ALL {
        let tile = rt.onesweep.shape::<K>(mode).tile() as usize;
        sizes.extend(tile - 1..=2 * tile + 1);
        sizes.extend([3 * tile, 100 * tile + 17]);
    }
    sizes.push((1 << 20) + 1);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Keys-only sorts of every size of [`sizes_for`] equal the host's sort.
pub(super) fn assert_keys_only_sizes<K: RadixKey + TransferPlain + Ord + std::fmt::Debug>(
    rt: &CudaRuntime,
    all: &[K],
) {
    for n in sizes_for::<K>(rt) {
        let mut expected = all[..n].to_vec();
        expected.sort_unstable();
        assert!(
            device_keys_sort(rt, &all[..n]) == expected,
            "keys only, n={n}, seed {}",
            common::seed()
        );
    }
}

pub(super) fn assert_every_size_around_tiles<K>(rt: &CudaRuntime, label: &str, make: fn(u64) -> K)
where
    K: RadixKey + TransferPlain + Ord + std::fmt::Debug,
{
    let all = random_keys(100 * max_tile::<K>(rt) + 2_000_000, label, make);
    assert_keys_only_sizes(rt, &all);
    for n in sizes_for::<K>(rt) {
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
