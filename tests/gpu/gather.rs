//! The payload gather on the device: every fixed-width type and string/binary views,
//! nulls, sliced and uneven input batches, batch sizes that split bitmap words, several
//! windows, windows copied straight into page-locked memory; batch for batch equal to
//! the host's gather; a sort's key columns reused; narrowed uploads of wide integer-like
//! columns (`columns/narrow.rs`): every width they are sent as, and the fallbacks.

use super::*;

/// A run of `columns` (one column per type, named `c<i>`) in uneven input batches: the
/// first rows cut off (offsets that are not byte aligned), one batch empty.
pub(super) fn uneven_run(columns: Vec<ArrayRef>) -> (RunRows, usize) {
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
pub(super) fn assert_device_gather_matches_host(
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
pub(super) fn device_gather_against_host(
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
    let state = state.unwrap_or_else(|| {
        CudaBackend::new()
            .unwrap()
            .empty_run_state()
            .expect("an open device")
    });
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
pub(super) fn shuffled(n: usize, label: &str) -> Vec<u32> {
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
    if gpusort::cuda::switches().host_lock() {
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
    let faults = FaultScope::new();
    let backend = CudaBackend::new().unwrap().with_faults(faults);
    // Out of memory while uploading: the host gathers everything.
    faults.arm(Fault::OutOfMemory);
    assert!(backend
        .empty_run_state()
        .expect("an open device")
        .payload_gatherer(&rows, &permutation)
        .is_none());
    assert!(!faults.is_armed(Fault::OutOfMemory));
    assert_eq!(faults.fallbacks(), 1);
    // Out of memory in the first window: the host gathers that window and the rest.
    let mut payload = backend
        .empty_run_state()
        .expect("an open device")
        .payload_gatherer(&rows, &permutation)
        .unwrap();
    faults.arm(Fault::OutOfMemory);
    assert_eq!(gathered(Some(payload.as_mut())), expected);
    assert!(!faults.is_armed(Fault::OutOfMemory));
    assert_eq!(faults.fallbacks(), 2);
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
    // Only the payload column's values go up, narrowed to 4 bytes (they are 0 .. n): the
    // key's views and the order are reused.
    assert_eq!(stats.h2d_bytes, n * 4, "{stats:?}");
});

gpu_test!(narrowed_uploads_keep_every_value, |_rt| {
    use datafusion::arrow::array::{Decimal128Array, Float64Array, TimestampNanosecondArray};
    let n = 600_000;
    let decimal = |f: &dyn Fn(usize) -> Option<i128>| -> ArrayRef {
        Arc::new(
            Decimal128Array::from_iter((0..n).map(f))
                .with_precision_and_scale(38, 2)
                .unwrap(),
        )
    };
    let wave = |i: usize| (i as i64).wrapping_mul(2_654_435_761) % 1_000_003 - 500_000;
    // Sent as 4, 8, 16, 4 then 8, 8, 16 and 8 bytes per value; floats never narrowed.
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter(
            (0..n).map(|i| (i % 7 != 0).then(|| wave(i))),
        )),
        Arc::new(Int64Array::from_iter_values((0..n).map(|i| {
            match i < n / 2 {
                true => wave(i),
                false => wave(i) << 33,
            }
        }))),
        decimal(&|i| Some(wave(i) as i128 * 100)),
        decimal(&|i| (i % 11 != 0).then(|| (wave(i) as i128) << 36)),
        decimal(&|i| match i < 2 * n / 3 {
            true => Some(wave(i) as i128),
            false => Some(-((wave(i) as i128) << 40)),
        }),
        decimal(&|i| Some((wave(i) as i128) << 70)),
        Arc::new(TimestampNanosecondArray::from_iter_values(
            (0..n).map(|i| 1_700_000_000_000_000_000 + wave(i)),
        )),
        Arc::new(Float64Array::from_iter_values(
            (0..n).map(|i| wave(i) as f64 * 0.5),
        )),
    ];
    let sent_as = [4, 8, 4, 8, 8, 16, 8, 8];
    // Each as a sort key, both ways: the order equals the host's, and only the narrowed
    // bytes went up.
    for (c, column) in columns.iter().enumerate() {
        for descending in [false, true] {
            let key = KeyColumn {
                arrays: vec![column.slice(1, n - 1)],
                options: SortOptions {
                    descending,
                    nulls_first: descending,
                },
            };
            let label = format!("narrowed key {c}, descending {descending}");
            let up =
                super::encode::assert_device_encoding_matches(std::slice::from_ref(&key), &label);
            let most = (n - 1) * sent_as[c] + (n - 1).div_ceil(8) + 16;
            assert!(up <= most, "{label}: {up} > {most}");
        }
    }
    // As payload, gathered in a shuffled order over several batches: equal to the host's
    // gather, and only the narrowed bytes went up.
    let (rows, n) = uneven_run(columns);
    let permutation = shuffled(n, "narrowed perm");
    let (on_device, stats) =
        device_gather_against_host(&rows, &permutation, None, 8192, "narrowed gather");
    assert_eq!(on_device, (0..sent_as.len()).collect::<Vec<_>>());
    let values: usize = sent_as.iter().sum::<usize>() * n;
    let bitmaps = 2 * (n.div_ceil(8) + 8);
    let up = n * 4 + values + bitmaps;
    assert!(stats.h2d_bytes <= up, "up: {} > {up}", stats.h2d_bytes);
});

gpu_test!(narrowed_uploads_over_several_chunks, |_rt| {
    use datafusion::arrow::array::Decimal128Array;
    // 9 M values: two staging chunks at 4 bytes, three at 8. The decimals need 8 bytes
    // from row 8.5 M on, so their first attempt gives up after a chunk went across.
    let n = 9_000_000;
    let wave = |i: usize| (i as i64).wrapping_mul(2_654_435_761) % 1_000_003 - 500_000;
    let ints: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n).map(wave)));
    let decimals: ArrayRef = Arc::new(
        Decimal128Array::from_iter_values((0..n).map(|i| match i < 8_500_000 {
            true => wave(i) as i128,
            false => (wave(i) as i128) << 35,
        }))
        .with_precision_and_scale(38, 0)
        .unwrap(),
    );
    for (column, sent_as, given_up) in [(&ints, 4, 0), (&decimals, 8, 32 << 20)] {
        let key = KeyColumn {
            arrays: vec![column.slice(0, n / 2), column.slice(n / 2, n - n / 2)],
            options: SortOptions::default(),
        };
        let label = format!("{} over several chunks", column.data_type());
        let up = super::encode::assert_device_encoding_matches(std::slice::from_ref(&key), &label);
        // What went across: the values at their narrow width, and the chunk an attempt
        // sent before giving up.
        let sent = n * sent_as + given_up;
        assert!(
            (sent..sent + 4096).contains(&up),
            "{label}: {up} bytes up, {sent} expected"
        );
    }
    let (rows, n) = uneven_run(vec![ints, decimals]);
    let permutation = shuffled(n, "narrowed chunks perm");
    let (on_device, _) =
        device_gather_against_host(&rows, &permutation, None, 65536, "narrowed chunks");
    assert_eq!(on_device, vec![0, 1]);
});
