//! One sort spread over several devices by key ranges (`cuda::sort_host_words`): the
//! permutation equals the one-device sort's, ties in row order, for key shapes that stress
//! the splitters (every key equal, few distinct keys, sorted, reversed, several words),
//! through peer copies and through host memory, with the copies overlapping the kernels
//! or one step after another; ranges stay balanced. The one-device path
//! runs anywhere; the rest needs two devices and returns on a host of one.

use super::*;
use gpusort::DeviceSelection;

/// Every usable device of the host.
fn all_devices() -> Vec<Arc<CudaRuntime>> {
    cuda::selected_ordinals(DeviceSelection::All)
        .into_iter()
        .filter_map(|d| cuda::runtime_of(d).ok())
        .collect()
}

/// Every usable device, when there are at least two (said when not).
fn two_or_more_devices() -> Option<Vec<Arc<CudaRuntime>>> {
    device()?;
    let devices = all_devices();
    if devices.len() < 2 {
        eprintln!(
            "skipped: needs 2 CUDA devices, this host has {}",
            devices.len()
        );
        return None;
    }
    Some(devices)
}

/// The permutation of a sort of `words` over `runtimes`, and how it went.
fn spread_sort(runtimes: &[Arc<CudaRuntime>], words: &[&[u64]]) -> (Vec<u32>, cuda::SpreadSorted) {
    let refs: Vec<&CudaRuntime> = runtimes.iter().map(|r| r.as_ref()).collect();
    let mut permutation = vec![0u32; words[0].len()];
    let sorted = cuda::sort_host_words(&refs, words, &mut permutation).unwrap();
    (permutation, sorted)
}

/// The stable order of rows keyed by `words` (most significant first), on the host.
fn host_order(words: &[&[u64]]) -> Vec<u32> {
    let n = words.first().map_or(0, |w| w.len());
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.par_sort_by(|&a, &b| {
        let key = |row: u32| words.iter().map(move |w| w[row as usize]);
        key(a).cmp(key(b)).then(a.cmp(&b))
    });
    order
}

/// Key shapes: (name, key of row i).
fn shapes(n: usize) -> Vec<(&'static str, Vec<u64>)> {
    let random = random_keys(n, "spread", |x| x);
    vec![
        ("random", random.clone()),
        ("three distinct", random.iter().map(|k| k % 3).collect()),
        ("all equal", vec![7; n]),
        ("sorted", (0..n as u64).collect()),
        ("reversed", (0..n as u64).rev().collect()),
        (
            "one dominant value",
            random
                .iter()
                .map(|k| if k % 10 < 9 { 42 } else { *k })
                .collect(),
        ),
    ]
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_device_sorts_host_keys_stably() {
    let Some(rt) = device() else { return };
    for n in [0usize, 1, 2, 1000, (1 << 20) + 7] {
        for (name, keys) in shapes(n) {
            let (permutation, sorted) = spread_sort(std::slice::from_ref(&rt), &[&keys]);
            assert_stable_order(&keys, &permutation, &format!("{name}, {n} rows"));
            assert_eq!(sorted.range_rows, vec![n]);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn keys_spread_over_devices_sort_as_on_one() {
    let Some(devices) = two_or_more_devices() else {
        return;
    };
    /// Puts the peer-copy switch back as it was, also when the test fails.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let value = if self.0 { "1" } else { "0" };
            cuda::switches().set("GPUSORT_PEER_COPIES", value).unwrap();
        }
    }
    let _restore = Restore(cuda::switches().peer_copies());
    for peer in [true, false] {
        cuda::switches()
            .set("GPUSORT_PEER_COPIES", if peer { "1" } else { "0" })
            .unwrap();
        for n in [2usize, 1000, (1 << 22) + 3] {
            for (name, keys) in shapes(n) {
                let what = format!("{name}, {n} rows, peer copies {peer}");
                let (one, _) = spread_sort(&devices[..1], &[&keys]);
                let (permutation, spread) = spread_sort(&devices, &[&keys]);
                assert_eq!(permutation, one, "{what}");
                assert_stable_order(&keys, &permutation, &what);
                assert_eq!(spread.range_rows.iter().sum::<usize>(), n, "{what}");
                assert!(
                    peer || !spread.peer_copies,
                    "{what}: peer copies switched off"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn several_key_words_spread_as_on_the_host() {
    let Some(devices) = two_or_more_devices() else {
        return;
    };
    let n = (1 << 21) + 11;
    let high: Vec<u64> = random_keys(n, "spread high", |x| x % 5);
    let low: Vec<u64> = random_keys(n, "spread low", |x| x % 1000);
    let words: [&[u64]; 2] = [&high, &low];
    let (permutation, _) = spread_sort(&devices, &words);
    assert_eq!(permutation, host_order(&words));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ranges_stay_balanced_when_keys_repeat() {
    let Some(devices) = two_or_more_devices() else {
        return;
    };
    let n = 1 << 23;
    let even = n / devices.len();
    for (name, keys) in shapes(n) {
        let (_, spread) = spread_sort(&devices, &[&keys]);
        for (d, &rows) in spread.range_rows.iter().enumerate() {
            let off = rows.abs_diff(even) as f64 / even as f64;
            assert!(
                off < 0.05,
                "{name}: device {d} sorted {rows} rows, {:.1}% off {even}",
                off * 100.0
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn page_locked_keys_go_straight_and_sort_the_same() {
    let Some(rt) = device() else { return };
    let n = (1 << 22) + 5;
    let keys = random_keys(n, "spread locked", |x| x % 1000);
    let mut permutation = vec![0u32; n];
    // SAFETY: `keys` and `permutation` outlive the locks, dropped at the end of each loop.
    let locks = unsafe {
        (
            rt.device.lock_host(&keys),
            rt.device.lock_host(&permutation),
        )
    };
    assert!(
        locks.0.is_some() && locks.1.is_some(),
        "page-locking failed"
    );
    assert!(cuda::is_page_locked(&keys[n / 2..]) && !cuda::is_page_locked(&[0u8; 8]));
    let devices = all_devices();
    for count in 1..=devices.len().min(2) {
        let refs: Vec<&CudaRuntime> = devices[..count].iter().map(|r| r.as_ref()).collect();
        permutation.fill(0);
        let sorted = cuda::sort_host_words(&refs, &[&keys], &mut permutation).unwrap();
        assert!(sorted.direct_copies, "{count} devices: copies were staged");
        assert_stable_order(&keys, &permutation, &format!("{count} devices, locked"));
    }
    drop(locks);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn overlapped_copies_sort_as_step_by_step() {
    let Some(rt) = device() else { return };
    let devices = all_devices();
    let mut sets = vec![vec![rt.clone()]];
    if devices.len() >= 2 {
        sets.push(devices);
    }
    let plans = [
        cuda::HostSortPlan {
            overlap: Some(true),
            ..Default::default()
        },
        // Uneven chunks, more ranges than devices divide evenly.
        cuda::HostSortPlan {
            overlap: Some(true),
            chunks: 3,
            ranges_per_device: 3,
        },
    ];
    let step_by_step = cuda::HostSortPlan {
        overlap: Some(false),
        ..Default::default()
    };
    for set in &sets {
        let refs: Vec<&CudaRuntime> = set.iter().map(|r| r.as_ref()).collect();
        for n in [0usize, 1, 2, 1000, (1 << 21) + 3] {
            for (name, keys) in shapes(n) {
                let mut expected = vec![0u32; n];
                cuda::sort_host_words_with(&refs, &[&keys], &mut expected, step_by_step).unwrap();
                for plan in plans {
                    let what = format!("{name}, {n} rows, {} devices, {plan:?}", refs.len());
                    let mut permutation = vec![0u32; n];
                    let sorted =
                        cuda::sort_host_words_with(&refs, &[&keys], &mut permutation, plan)
                            .unwrap();
                    assert!(sorted.overlapped, "{what}: not overlapped");
                    assert_eq!(permutation, expected, "{what}");
                    assert_stable_order(&keys, &permutation, &what);
                    assert_eq!(sorted.range_rows.len(), refs.len(), "{what}");
                    assert_eq!(sorted.range_rows.iter().sum::<usize>(), n, "{what}");
                }
            }
        }
        // Two key words.
        let n = (1 << 20) + 9;
        let high: Vec<u64> = random_keys(n, "overlap high", |x| x % 7);
        let low: Vec<u64> = random_keys(n, "overlap low", |x| x % 100);
        let words: [&[u64]; 2] = [&high, &low];
        let mut permutation = vec![0u32; n];
        cuda::sort_host_words_with(&refs, &words, &mut permutation, plans[1]).unwrap();
        assert_eq!(
            permutation,
            host_order(&words),
            "{} devices, two words",
            refs.len()
        );
    }
}
