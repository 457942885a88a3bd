//! The differential suite: gpusort on a given backend against DataFusion's own `SortExec`
//! over the test matrix for fixed-width key types. `tests/differential.rs` runs it on the
//! CPU backend (in CI), `tests/gpu/differential.rs` on the CUDA backend (on a GPU host).
//!
//! Every case is seeded (`GPUSORT_SEED`, printed on failure) and checks: the plan uses
//! `GpuSortExec`; sort keys equal DataFusion's exactly (floats bitwise); rows equal as a
//! multiset within each tie group; with one partition, ties keep input order.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use rand::Rng;

use super::compare::{assert_same_sort, assert_stable};
use super::data::{
    base_values, case_rng, fixed_width_types, make_column, split_uneven, Distribution,
    DISTRIBUTIONS,
};
use super::strings::{byte_types, make_byte_column, Shape, SHAPES};
use super::{
    forced_context_on, memory_limited_context_on, register, run, run_counting_spills, seed,
    session_config, stock_context,
};
use gpusort::BackendChoice;

#[allow(unused_imports)]
pub use super::parquet_cases::{copy_to_parquet, parquet_sources};

/// One key column of a generated table.
#[derive(Debug, Clone)]
struct KeySpec {
    data_type: DataType,
    dist: Distribution,
    null_fraction: f64,
    order: &'static str,
    /// For byte-like and dictionary types: how values are made.
    shape: Option<Shape>,
}

/// One differential case.
#[derive(Debug, Clone)]
struct Case {
    label: String,
    rows: usize,
    keys: Vec<KeySpec>,
    payloads: usize,
    target_partitions: usize,
    batch_size: usize,
    run_rows: Option<usize>,
    /// Memory pool limit of the gpusort session (bytes); the sort must spill under it.
    memory_limit: Option<usize>,
    backend: BackendChoice,
}

const ORDERS: [&str; 4] = [
    "ASC NULLS FIRST",
    "ASC NULLS LAST",
    "DESC NULLS FIRST",
    "DESC NULLS LAST",
];

impl Case {
    fn new(
        backend: BackendChoice,
        label: impl Into<String>,
        rows: usize,
        keys: Vec<KeySpec>,
    ) -> Self {
        Self {
            backend,
            label: label.into(),
            rows,
            keys,
            payloads: 1,
            target_partitions: 1,
            batch_size: 8192,
            run_rows: None,
            memory_limit: None,
        }
    }

    /// Columns: k0..kn, p0..pm payloads, rid (input order).
    fn table(&self) -> RecordBatch {
        let mut rng = case_rng(seed(), &self.label);
        let mut fields = Vec::new();
        let mut columns: Vec<ArrayRef> = Vec::new();
        for (i, key) in self.keys.iter().enumerate() {
            let base = base_values(&mut rng, self.rows, key.dist);
            columns.push(match key.shape {
                Some(shape) => {
                    make_byte_column(&mut rng, &key.data_type, &base, shape, key.null_fraction)
                }
                None => make_column(&mut rng, &key.data_type, &base, key.null_fraction),
            });
            fields.push(Field::new(format!("k{i}"), key.data_type.clone(), true));
        }
        for p in 0..self.payloads {
            let base = base_values(&mut rng, self.rows, Distribution::Uniform);
            columns.push(make_column(&mut rng, &DataType::Float64, &base, 0.1));
            fields.push(Field::new(format!("p{p}"), DataType::Float64, true));
        }
        columns.push(Arc::new(Int64Array::from_iter_values(0..self.rows as i64)));
        fields.push(Field::new("rid", DataType::Int64, false));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    fn sql(&self) -> String {
        let keys: Vec<String> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| format!("k{i} {}", k.order))
            .collect();
        format!("SELECT * FROM t ORDER BY {}", keys.join(", "))
    }

    async fn check(&self) {
        let context = format!("seed={} case={:?} sql={}", seed(), self, self.sql());
        let table = self.table();
        let mut partitions = split_uneven(
            &mut case_rng(seed(), &self.label),
            &table,
            self.target_partitions,
        );
        if self.memory_limit.is_some() {
            // Slices share the whole table's buffers and would each count as all of it.
            partitions = compact_chunks(partitions, self.batch_size);
        }
        let config = session_config(self.target_partitions, self.batch_size);
        let (stock, forced) = (
            stock_context(config.clone()),
            match self.memory_limit {
                Some(limit) => memory_limited_context_on(config, self.backend, limit),
                None => forced_context_on(config, self.backend),
            },
        );
        if let Some(run_rows) = self.run_rows {
            forced
                .sql(&format!("SET gpu_sort.run_rows = {run_rows}"))
                .await
                .unwrap();
        }
        register(&[&stock, &forced], "t", partitions);
        let (expected, _) = run(&stock, &self.sql()).await.unwrap();
        let (actual, plan, spills) = run_counting_spills(&forced, &self.sql())
            .await
            .unwrap_or_else(|e| panic!("{e}: {context}"));
        if self.memory_limit.is_some() {
            assert!(
                spills > 0,
                "no run spilled under the memory limit: {context}"
            );
        } else {
            assert_eq!(spills, 0, "spilled without a memory limit: {context}");
        }
        assert!(
            plan.contains("GpuSortExec"),
            "plan without GpuSortExec:\n{plan}\n{context}"
        );
        if self.backend == BackendChoice::Cuda {
            assert!(
                plan.contains("backend=cuda"),
                "plan not on the GPU:\n{plan}\n{context}"
            );
        }
        let key_columns: Vec<usize> = (0..self.keys.len()).collect();
        assert_same_sort(&expected, &actual, &key_columns, &context);
        // Partitions hold consecutive rows in order, which gpusort keeps on ties (one
        // partition is what DataFusion's sort is compared on).
        if self.target_partitions == 1 || self.memory_limit.is_some() {
            assert_stable(&actual, &key_columns, table.num_columns() - 1, &context);
        }
        assert!(
            actual.iter().all(|b| b.num_rows() <= self.batch_size),
            "oversized batch: {context}"
        );
    }
}

/// Each batch cut into copies of at most `rows` rows that own their buffers.
fn compact_chunks(partitions: Vec<Vec<RecordBatch>>, rows: usize) -> Vec<Vec<RecordBatch>> {
    partitions
        .into_iter()
        .map(|batches| {
            batches
                .iter()
                .flat_map(|batch| {
                    (0..batch.num_rows().div_ceil(rows).max(1)).map(move |i| {
                        let start = (i * rows).min(batch.num_rows());
                        let len = rows.min(batch.num_rows() - start);
                        let indices =
                            UInt32Array::from_iter_values(start as u32..(start + len) as u32);
                        take_record_batch(batch, &indices).unwrap()
                    })
                })
                .collect()
        })
        .collect()
}

fn key(
    data_type: DataType,
    dist: Distribution,
    null_fraction: f64,
    order: &'static str,
) -> KeySpec {
    KeySpec {
        data_type,
        dist,
        null_fraction,
        order,
        shape: None,
    }
}

fn text_key(
    data_type: DataType,
    dist: Distribution,
    shape: Shape,
    null_fraction: f64,
    order: &'static str,
) -> KeySpec {
    KeySpec {
        shape: Some(shape),
        ..key(data_type, dist, null_fraction, order)
    }
}

/// The `string_keys_every_type_and_shape` cases: every byte-like type (and dictionaries)
/// in every shape, cycling through distributions, null fractions and directions.
pub async fn string_keys_every_type_and_shape(backend: BackendChoice) {
    let mut i = 0;
    for data_type in byte_types() {
        for shape in SHAPES {
            i += 1;
            let dist = DISTRIBUTIONS[i % DISTRIBUTIONS.len()];
            let nulls = [0.0, 0.01, 0.5, 0.2, 1.0][i % 5];
            let rows = if shape == Shape::Long { 150 } else { 1500 };
            let keys = vec![text_key(
                data_type.clone(),
                dist,
                shape,
                nulls,
                ORDERS[i % 4],
            )];
            Case::new(
                backend,
                format!("text-{data_type}-{shape:?}-{i}"),
                rows,
                keys,
            )
            .check()
            .await;
        }
    }
}

/// The `string_keys_mixed_with_other_keys` cases: strings before, between and after
/// numeric keys, two string keys, few distinct values so that later keys decide.
pub async fn string_keys_mixed_with_other_keys(backend: BackendChoice) {
    let mut rng = case_rng(seed(), "text-mixed");
    let types = byte_types();
    let numeric = fixed_width_types();
    for round in 0..24 {
        let count = 2 + round % 3;
        let keys = (0..count)
            .map(|k| {
                let order = ORDERS[rng.random_range(0..4)];
                let nulls = [0.0, 0.05, 0.5][rng.random_range(0..3)];
                let dist = [
                    Distribution::Distinct(2),
                    Distribution::Distinct(10),
                    Distribution::Distinct(256),
                    Distribution::Uniform,
                ][rng.random_range(0..4)];
                if (k + round) % 2 == 0 || rng.random_bool(0.3) {
                    let data_type = types[rng.random_range(0..types.len())].clone();
                    let shape = SHAPES[rng.random_range(0..SHAPES.len())];
                    text_key(data_type, dist, shape, nulls, order)
                } else {
                    let data_type = numeric[rng.random_range(0..numeric.len())].clone();
                    key(data_type, dist, nulls, order)
                }
            })
            .collect::<Vec<_>>();
        let long = keys.iter().any(|k| k.shape == Some(Shape::Long));
        let rows = if long {
            300
        } else {
            rng.random_range(100..4000)
        };
        let mut case = Case::new(backend, format!("text-mixed-{round}"), rows, keys);
        case.payloads = rng.random_range(0..2);
        case.check().await;
    }
}

/// The `string_keys_in_runs_partitions_and_spills` cases: the multi-run merge, several
/// partitions and a memory limit with string keys that need the tie refinement.
pub async fn string_keys_in_runs_partitions_and_spills(backend: BackendChoice) {
    let keys = || {
        vec![
            text_key(
                DataType::Utf8View,
                Distribution::Distinct(256),
                Shape::SharedPrefix(16),
                0.1,
                "DESC NULLS FIRST",
            ),
            text_key(
                DataType::Utf8,
                Distribution::Uniform,
                Shape::Mixed,
                0.0,
                "ASC NULLS LAST",
            ),
        ]
    };
    for (run_rows, target_partitions) in [(1, 1), (97, 1), (1000, 3)] {
        let rows = if run_rows == 1 { 200 } else { 6000 };
        let mut case = Case::new(backend, format!("text-runs-{run_rows}"), rows, keys());
        case.run_rows = Some(run_rows);
        case.target_partitions = target_partitions;
        case.check().await;
    }
    let mut case = Case::new(backend, "text-spill", 60_000, keys());
    case.payloads = 2;
    case.batch_size = 500;
    case.memory_limit = Some(4 << 20);
    case.check().await;
}

/// The `every_type_every_direction` cases.
pub async fn every_type_every_direction(backend: BackendChoice) {
    for data_type in fixed_width_types() {
        for (i, order) in ORDERS.iter().enumerate() {
            let dist = DISTRIBUTIONS[i * 3 % DISTRIBUTIONS.len()];
            let nulls = [0.0, 0.01, 0.5, 0.2][i];
            Case::new(
                backend,
                format!("type-{data_type}-{i}"),
                700,
                vec![key(data_type.clone(), dist, nulls, order)],
            )
            .check()
            .await;
        }
    }
}

/// The `every_distribution` cases.
pub async fn every_distribution(backend: BackendChoice) {
    let types = [
        DataType::Int64,
        DataType::Float64,
        DataType::UInt32,
        DataType::Decimal128(38, 10),
    ];
    for dist in DISTRIBUTIONS {
        for data_type in &types {
            let label = format!("dist-{dist:?}-{data_type}");
            Case::new(
                backend,
                label,
                2000,
                vec![key(data_type.clone(), dist, 0.01, "ASC NULLS LAST")],
            )
            .check()
            .await;
        }
    }
}

/// The `sizes_around_tiles_and_large` cases.
pub async fn sizes_around_tiles_and_large(backend: BackendChoice) {
    let mut sizes = vec![
        0usize, 1, 2, 3, 255, 256, 257, 4095, 4096, 4097, 8191, 8192, 8193,
    ];
    let mut rng = case_rng(seed(), "sizes");
    sizes.extend((0..4).map(|_| rng.random_range(10_000..300_000)));
    sizes.push(1_500_000);
    for rows in sizes {
        let mut case = Case::new(
            backend,
            format!("size-{rows}"),
            rows,
            vec![key(
                DataType::Int64,
                Distribution::Uniform,
                0.0,
                "ASC NULLS LAST",
            )],
        );
        case.payloads = 2;
        case.check().await;
    }
}

/// The `null_fractions` cases.
pub async fn null_fractions(backend: BackendChoice) {
    for nulls in [0.0, 0.01, 0.5, 1.0] {
        for order in ORDERS {
            let keys = vec![
                key(DataType::Int32, Distribution::Distinct(10), nulls, order),
                key(DataType::Float32, Distribution::Uniform, nulls, order),
            ];
            Case::new(backend, format!("nulls-{nulls}-{order}"), 3000, keys)
                .check()
                .await;
        }
    }
}

/// The `one_to_four_mixed_keys` cases.
pub async fn one_to_four_mixed_keys(backend: BackendChoice) {
    let mut rng = case_rng(seed(), "multi");
    let types = fixed_width_types();
    for round in 0..24 {
        let count = 1 + round % 4;
        let keys = (0..count)
            .map(|_| {
                let data_type = types[rng.random_range(0..types.len())].clone();
                let dist = DISTRIBUTIONS[rng.random_range(0..DISTRIBUTIONS.len())];
                let nulls = [0.0, 0.01, 0.5][rng.random_range(0..3)];
                key(data_type, dist, nulls, ORDERS[rng.random_range(0..4)])
            })
            .collect();
        let mut case = Case::new(
            backend,
            format!("multi-{round}"),
            rng.random_range(100..5000),
            keys,
        );
        case.payloads = rng.random_range(0..3);
        case.check().await;
    }
}

/// The `partitions_and_batch_sizes` cases.
pub async fn partitions_and_batch_sizes(backend: BackendChoice) {
    for target_partitions in [1, 3, 8] {
        for batch_size in [1, 7, 1000, 8192] {
            let keys = vec![
                key(
                    DataType::Int16,
                    Distribution::Distinct(256),
                    0.1,
                    "DESC NULLS FIRST",
                ),
                key(
                    DataType::Float64,
                    Distribution::Uniform,
                    0.1,
                    "ASC NULLS LAST",
                ),
            ];
            let mut case = Case::new(
                backend,
                format!("parts-{target_partitions}-{batch_size}"),
                2500,
                keys,
            );
            case.target_partitions = target_partitions;
            case.batch_size = batch_size;
            case.check().await;
        }
    }
}

/// The `many_runs_merged_stay_stable` cases.
pub async fn many_runs_merged_stay_stable(backend: BackendChoice) {
    for (run_rows, target_partitions) in [(1, 1), (100, 1), (999, 3), (4096, 8)] {
        let keys = vec![
            key(
                DataType::Int8,
                Distribution::Distinct(10),
                0.05,
                "ASC NULLS FIRST",
            ),
            key(
                DataType::Date32,
                Distribution::Distinct(256),
                0.0,
                "DESC NULLS LAST",
            ),
        ];
        let rows = if run_rows == 1 { 300 } else { 20_000 };
        let mut case = Case::new(backend, format!("runs-{run_rows}"), rows, keys);
        case.run_rows = Some(run_rows);
        case.target_partitions = target_partitions;
        case.check().await;
    }
}

/// The `memory_limited_sorts_spill` cases: input several times the memory limit, sorted
/// runs spilled to disk and merged; ties keep input order across runs and partitions.
pub async fn memory_limited_sorts_spill(backend: BackendChoice) {
    for (target_partitions, limit_mib, batch_size) in [(1, 4, 8192), (4, 6, 1000), (3, 3, 4096)] {
        let keys = vec![
            key(
                DataType::Int16,
                Distribution::Distinct(50),
                0.1,
                "DESC NULLS FIRST",
            ),
            key(
                DataType::Float64,
                Distribution::Uniform,
                0.0,
                "ASC NULLS LAST",
            ),
        ];
        let mut case = Case::new(
            backend,
            format!("spill-{target_partitions}-{limit_mib}"),
            300_000,
            keys,
        );
        case.payloads = 2;
        case.target_partitions = target_partitions;
        case.batch_size = batch_size;
        case.memory_limit = Some(limit_mib << 20);
        case.check().await;
    }
}

/// The `negative_zero_and_nan_bitwise` cases.
pub async fn negative_zero_and_nan_bitwise(backend: BackendChoice) {
    for data_type in [DataType::Float16, DataType::Float32, DataType::Float64] {
        for order in ORDERS {
            let keys = vec![key(
                data_type.clone(),
                Distribution::Distinct(2),
                0.1,
                order,
            )];
            Case::new(backend, format!("floats-{data_type}-{order}"), 5000, keys)
                .check()
                .await;
        }
    }
}
