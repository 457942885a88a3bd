//! Hash routed window sorts on the device: shared cases, and partition ids made on the
//! device equal to the host's.

use super::*;

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

cases_on_cuda!(
    spill:
    spill_everywhere_within_the_limit(2_000_000),
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
pub(super) fn routing_key_arrays(n: usize, label: &str) -> Vec<(String, ArrayRef)> {
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
pub(super) fn partition_ids_made_on_the_device_equal_the_hosts() {
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
            let tables = routing
                .id_tables(&exprs, &columns)
                .unwrap()
                .unwrap_or_else(|| panic!("{label}: no id tables"));
            let fallbacks = cuda::fallback_count();
            let (run, counts) = backend
                .sort_key_columns_by_ids(&columns, &tables, AlgorithmChoice::Auto)
                .unwrap()
                .unwrap_or_else(|| panic!("{label}: ids not made on the device"));
            assert_eq!(cuda::fallback_count(), fallbacks, "{label}: fell back");
            assert_ids_of_the_host(&routing, &batches, &columns, (run, counts), &label);
        }
    }
}

/// A run sorted by ids made on the device, and its rows per partition, equal the host's:
/// `batches` routed by `routing` on the host (`HashRouting::route_all`), then sorted on
/// the CPU by (id, `columns`).
fn assert_ids_of_the_host(
    routing: &gpusort::exec::HashRouting,
    batches: &[RecordBatch],
    columns: &[KeyColumn],
    (run, counts): (gpusort::sort::SortedRun, Vec<usize>),
    label: &str,
) {
    let routed = routing.route_all(batches).unwrap();
    let mut host_counts = vec![0usize; routing.partitions()];
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

/// The tables of a routing, recording the ranges a backend asks them for.
struct AskedTables<'a> {
    tables: gpusort::exec::IdTables<'a>,
    asked: std::sync::Mutex<Vec<Option<(i128, i128)>>>,
}

impl gpusort::sort::IdTableMaker for AskedTables<'_> {
    fn column(&self) -> usize {
        self.tables.column()
    }

    fn table_over(
        &self,
        range: Option<(i128, i128)>,
    ) -> datafusion::common::Result<Option<gpusort::sort::PartitionIdTable>> {
        self.asked.lock().unwrap().push(range);
        self.tables.table_over(range)
    }
}

/// The device finds the routing key's whole range itself (`IdTableMaker`), exactly: a
/// value the host's sample of arrays missed widens the table it asks for, and the ids
/// still equal the host's; one that makes the range too wide for a table hands the ids
/// back to the host (no sort on the device, no fallback counted).
#[test]
#[ignore = "needs a CUDA GPU"]
pub(super) fn partition_ids_over_a_range_the_sample_missed() {
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use gpusort::exec::HashRouting;

    if device().is_none() {
        return;
    }
    let backend = CudaBackend::new().unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
    // 64 arrays of 1000 rows: the host samples every fourth and the last.
    for (far, table_expected) in [(5_000i64, true), (-40_000, true), (10_000_000, false)] {
        let mut rng = rng("partition ids: sample");
        let batches: Vec<RecordBatch> = (0..64)
            .map(|a| {
                let values = (0..1000).map(|r| match (a, r) {
                    (5, 500) | (6, 999) => Some(far),
                    _ => rng.random_bool(0.97).then(|| rng.random_range(0..100)),
                });
                let array: ArrayRef = Arc::new(Int64Array::from_iter(values));
                RecordBatch::try_new(Arc::clone(&schema), vec![array]).unwrap()
            })
            .collect();
        let options = SortOptions {
            descending: far < 0,
            nulls_first: true,
        };
        let exprs = LexOrdering::new(vec![PhysicalSortExpr::new(
            col("v", &schema).unwrap(),
            options,
        )])
        .unwrap();
        let columns = vec![KeyColumn {
            arrays: batches.iter().map(|b| Arc::clone(b.column(0))).collect(),
            options,
        }];
        let label = format!("far value {far}");
        let routing = HashRouting::try_new(vec![col("v", &schema).unwrap()], 16).unwrap();
        let tables = AskedTables {
            tables: routing
                .id_tables(&exprs, &columns)
                .unwrap()
                .unwrap_or_else(|| panic!("{label}: the sample alone is narrow")),
            asked: Default::default(),
        };
        let fallbacks = cuda::fallback_count();
        let sorted = backend
            .sort_key_columns_by_ids(&columns, &tables, AlgorithmChoice::Auto)
            .unwrap();
        assert_eq!(cuda::fallback_count(), fallbacks, "{label}: fell back");
        let valid: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                let values = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                values.iter().flatten().collect::<Vec<_>>()
            })
            .collect();
        let range = (
            *valid.iter().min().unwrap() as i128,
            *valid.iter().max().unwrap() as i128,
        );
        assert_eq!(
            *tables.asked.lock().unwrap(),
            vec![Some(range)],
            "{label}: the range the device found"
        );
        let Some((run, counts)) = sorted else {
            assert!(!table_expected, "{label}: ids not made on the device");
            continue;
        };
        assert!(table_expected, "{label}: a table over too wide a range");
        assert_ids_of_the_host(&routing, &batches, &columns, (run, counts), &label);
    }
}
