//! Key encoding on the device from raw Arrow buffers: every fixed-width type, nulls,
//! directions, sliced and several arrays, several keys; same permutation as the host
//! encoding, and only the key columns' bytes uploaded; byte-like keys of every view and
//! offsets type in every shape, their ties past the window ordered on the device as the
//! host orders them.

use super::*;

pub(super) fn key_column(
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
/// columns' bytes (values and validity) go up. Returns the bytes that went up.
pub(super) fn assert_device_encoding_matches(columns: &[KeyColumn], label: &str) -> usize {
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
    run.h2d_bytes
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
pub(super) fn assert_device_byte_encoding_matches(columns: &[KeyColumn], label: &str) {
    assert_device_refinement_matches(columns, None, label);
}

/// A device sort of byte-like key columns (within `segments`) equals the host's sort
/// followed by the host's refinement of the window's ties: same permutation, same number
/// of tie groups, no packed key brought back.
pub(super) fn assert_device_refinement_matches(
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
pub(super) fn prefixed_strings(
    rng: &mut rand::rngs::StdRng,
    n: usize,
    prefix: usize,
    nulls: f64,
) -> ArrayRef {
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
    let faults = FaultScope::new();
    faults.arm(Fault::OutOfMemory);
    let backend = CudaBackend::new().unwrap().with_faults(faults);
    let run = backend
        .sort_key_columns(std::slice::from_ref(&column), AlgorithmChoice::Auto, None)
        .unwrap()
        .expect("handled by the CUDA backend");
    assert!(run.fell_back, "an injected device OOM must fall back");
    assert_eq!(run.permutation, expected.permutation);
    assert!(cuda::disabled_reason().is_none(), "OOM is not fatal");
});
