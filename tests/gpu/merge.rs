//! The locality sort: the merge sort, the windowed sort and the sortedness probe.

use super::*;

/// Sizes around the merge tile, and a few with several merge passes.
pub(super) fn merge_sizes() -> Vec<usize> {
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
pub(super) fn shaped_word(n: usize, label: &str, bits: u32, shape: &str, noise: u64) -> Vec<u64> {
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

pub(super) fn one_word(word: Vec<u64>, bits: u32) -> EncodedKeys {
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
pub(super) fn check_window_sort(rt: &CudaRuntime, halo: u32) {
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
                        match rt.locality.windows.sort(device, &keys, n, halo)? {
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
                        rt.locality.prober.probe(device, &keys, n, far, every)
                    })
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                let host = |distance: u32| {
                    let d = distance as usize;
                    let sampled = (0..n.saturating_sub(d))
                        .filter(|i| (i / chunk).is_multiple_of(every as usize));
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
