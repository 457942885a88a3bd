//! Seeded generation of key columns of every fixed-width type over the test matrix's
//! distributions, with nulls (garbage values left under them) and sliced arrays.

use std::sync::Arc;

use datafusion::arrow::array::*;
use datafusion::arrow::buffer::{NullBuffer, ScalarBuffer};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::*;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Every fixed-width type gpusort encodes.
pub fn fixed_width_types() -> Vec<DataType> {
    use DataType::*;
    let tz = Some(Arc::from("+05:30"));
    vec![
        Boolean,
        Int8,
        Int16,
        Int32,
        Int64,
        UInt8,
        UInt16,
        UInt32,
        UInt64,
        Float16,
        Float32,
        Float64,
        Decimal32(9, 2),
        Decimal64(18, 4),
        Decimal128(38, 10),
        Decimal256(76, 20),
        Date32,
        Date64,
        Time32(TimeUnit::Second),
        Time32(TimeUnit::Millisecond),
        Time64(TimeUnit::Microsecond),
        Time64(TimeUnit::Nanosecond),
        Timestamp(TimeUnit::Second, None),
        Timestamp(TimeUnit::Millisecond, tz.clone()),
        Timestamp(TimeUnit::Microsecond, None),
        Timestamp(TimeUnit::Nanosecond, tz),
        Duration(TimeUnit::Second),
        Duration(TimeUnit::Millisecond),
        Duration(TimeUnit::Microsecond),
        Duration(TimeUnit::Nanosecond),
        Interval(IntervalUnit::YearMonth),
        Interval(IntervalUnit::DayTime),
        Interval(IntervalUnit::MonthDayNano),
    ]
}

/// How base values are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    Uniform,
    AllEqual,
    Distinct(u64),
    Sorted,
    Reverse,
    SortedRuns,
    NearlySorted,
    FewLiveBits,
    Extremes,
}

pub const DISTRIBUTIONS: [Distribution; 11] = [
    Distribution::Uniform,
    Distribution::AllEqual,
    Distribution::Distinct(2),
    Distribution::Distinct(10),
    Distribution::Distinct(256),
    Distribution::Sorted,
    Distribution::Reverse,
    Distribution::SortedRuns,
    Distribution::NearlySorted,
    Distribution::FewLiveBits,
    Distribution::Extremes,
];

/// `n` base values drawn from `dist`.
pub fn base_values(rng: &mut StdRng, n: usize, dist: Distribution) -> Vec<i64> {
    let extremes = [i64::MIN, i64::MAX, -1, 0, 1, i64::MIN + 1, i64::MAX - 1];
    (0..n)
        .map(|i| match dist {
            Distribution::Uniform => rng.random(),
            Distribution::AllEqual => 12345,
            Distribution::Distinct(k) => rng.random_range(0..k as i64) * 7919 - 1000,
            Distribution::Sorted => i as i64 * 3 - 100,
            Distribution::Reverse => -(i as i64 * 3),
            Distribution::SortedRuns => (i % 97) as i64 * 11,
            Distribution::NearlySorted => i as i64 * 4 + rng.random_range(0..64),
            Distribution::FewLiveBits => (rng.random_range(0..4) << 40) | 0x1234,
            Distribution::Extremes => extremes[rng.random_range(0..extremes.len())],
        })
        .collect()
}

pub fn null_buffer(rng: &mut StdRng, n: usize, null_fraction: f64) -> Option<NullBuffer> {
    if null_fraction <= 0.0 {
        return None;
    }
    Some(NullBuffer::from_iter(
        (0..n).map(|_| !rng.random_bool(null_fraction)),
    ))
}

fn special_f64(rng: &mut StdRng, base: i64) -> f64 {
    const SPECIAL: [f64; 8] = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1.5,
        -1.5,
        1e-310,
    ];
    match rng.random_range(0..8) {
        0 => SPECIAL[rng.random_range(0..SPECIAL.len())],
        1 => -f64::NAN,
        _ => base as f64 / 1024.0,
    }
}

fn primitive<T: ArrowPrimitiveType>(
    values: Vec<T::Native>,
    nulls: Option<NullBuffer>,
    dt: &DataType,
) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls).with_data_type(dt.clone()))
}

/// Reinterprets an integer array as `dt` of the same layout, keeping every value.
fn retype(array: ArrayRef, dt: &DataType) -> ArrayRef {
    let data = array
        .to_data()
        .into_builder()
        .data_type(dt.clone())
        .build()
        .unwrap();
    make_array(data)
}

/// A column of `dt` with `n` rows from `base`, nulls at `null_fraction`, sliced so that
/// its offset is not zero.
pub fn make_column(rng: &mut StdRng, dt: &DataType, base: &[i64], null_fraction: f64) -> ArrayRef {
    let pad = 3;
    let mut padded: Vec<i64> = (0..pad).map(|_| rng.random()).collect();
    padded.extend_from_slice(base);
    let full = make_unsliced(rng, dt, &padded, null_fraction);
    full.slice(pad, base.len())
}

fn make_unsliced(rng: &mut StdRng, dt: &DataType, v: &[i64], null_fraction: f64) -> ArrayRef {
    use DataType::*;
    let n = v.len();
    let nulls = null_buffer(rng, n, null_fraction);
    macro_rules! ints {
        ($t:ty, $native:ty) => {
            primitive::<$t>(v.iter().map(|x| *x as $native).collect(), nulls, dt)
        };
    }
    match dt {
        Boolean => Arc::new(BooleanArray::new(
            v.iter().map(|x| x & 1 == 1).collect(),
            nulls,
        )),
        Int8 => ints!(Int8Type, i8),
        Int16 => ints!(Int16Type, i16),
        Int32 => ints!(Int32Type, i32),
        Int64 => ints!(Int64Type, i64),
        UInt8 => ints!(UInt8Type, u8),
        UInt16 => ints!(UInt16Type, u16),
        UInt32 => ints!(UInt32Type, u32),
        UInt64 => primitive::<UInt64Type>(
            v.iter().map(|x| (*x as u64) ^ (1 << 63)).collect(),
            nulls,
            dt,
        ),
        Float16 => {
            let f = v
                .iter()
                .map(|x| f16::from_f64(special_f64(rng, *x >> 40)))
                .collect();
            primitive::<Float16Type>(f, nulls, dt)
        }
        Float32 => {
            let f = v
                .iter()
                .map(|x| special_f64(rng, *x >> 20) as f32)
                .collect();
            primitive::<Float32Type>(f, nulls, dt)
        }
        Float64 => {
            primitive::<Float64Type>(v.iter().map(|x| special_f64(rng, *x)).collect(), nulls, dt)
        }
        Decimal32(_, _) => ints!(Decimal32Type, i32),
        Decimal64(_, _) => ints!(Decimal64Type, i64),
        Decimal128(_, _) => {
            let max = 10i128.pow(38) - 1;
            let d = v
                .iter()
                .map(|x| match *x {
                    i64::MAX => max,
                    i64::MIN => -max,
                    x => x as i128 * 1_000_000_007,
                })
                .collect();
            primitive::<Decimal128Type>(d, nulls, dt)
        }
        Decimal256(_, _) => {
            let d = v
                .iter()
                .map(|x| match *x {
                    i64::MAX => i256::MAX,
                    i64::MIN => i256::MIN,
                    x => i256::from_i128(x as i128).wrapping_mul(i256::from_i128(1 << 100)),
                })
                .collect();
            primitive::<Decimal256Type>(d, nulls, dt)
        }
        Date32 | Time32(_) => retype(
            primitive::<Int32Type>(v.iter().map(|x| *x as i32).collect(), nulls, &Int32),
            dt,
        ),
        Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => {
            retype(primitive::<Int64Type>(v.to_vec(), nulls, &Int64), dt)
        }
        Interval(IntervalUnit::YearMonth) => ints!(IntervalYearMonthType, i32),
        Interval(IntervalUnit::DayTime) => {
            let d = v
                .iter()
                .map(|x| IntervalDayTime::new((*x >> 48) as i32, *x as i32))
                .collect();
            primitive::<IntervalDayTimeType>(d, nulls, dt)
        }
        Interval(IntervalUnit::MonthDayNano) => {
            let d = v
                .iter()
                .map(|x| IntervalMonthDayNano::new((*x >> 60) as i32, (*x >> 50) as i32 % 3, *x))
                .collect();
            primitive::<IntervalMonthDayNanoType>(d, nulls, dt)
        }
        other => panic!("no generator for {other}"),
    }
}

/// A seeded RNG for one test case, derived from the run's seed and a case label.
pub fn case_rng(seed: u64, label: &str) -> StdRng {
    let mut h = seed ^ 0x9E37_79B9_7F4A_7C15;
    for b in label.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x1000_0000_01B3);
    }
    StdRng::seed_from_u64(h)
}

/// Splits `batch` into `partitions` partitions of uneven batches, with empty batches mixed in.
pub fn split_uneven(
    rng: &mut StdRng,
    batch: &RecordBatch,
    partitions: usize,
) -> Vec<Vec<RecordBatch>> {
    let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); partitions.max(1)];
    let n = batch.num_rows();
    let mut offset = 0;
    let mut i = 0;
    while offset < n {
        let len = rng.random_range(1..=(n / 3).max(1)).min(n - offset);
        let part = (i * partitions.max(1)) / (n.max(1));
        parts[part.min(partitions.max(1) - 1)].push(batch.slice(offset, len));
        if rng.random_bool(0.2) {
            parts[part.min(partitions.max(1) - 1)].push(batch.slice(offset, 0));
        }
        offset += len;
        i = offset;
    }
    for p in &mut parts {
        if p.is_empty() {
            p.push(batch.slice(0, 0));
        }
    }
    parts
}

/// The schema of [`keyed_input`]: a group `g` (the key modulo 97) and a key `k`.
pub fn keyed_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int64, false),
        Field::new("k", DataType::Int64, false),
    ]))
}

/// `partitions` input partitions of `rows` rows each, in batches of `batch_rows`: random
/// keys `k` (from the run's seed) and their group `g`.
pub fn keyed_input(partitions: usize, rows: usize, batch_rows: usize) -> Vec<Vec<RecordBatch>> {
    let mut state = super::seed() | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..partitions)
        .map(|_| {
            (0..rows)
                .step_by(batch_rows)
                .map(|at| {
                    let n = batch_rows.min(rows - at);
                    let k: Vec<i64> = (0..n).map(|_| next() as i64).collect();
                    let g = Int64Array::from_iter_values(k.iter().map(|k| k.rem_euclid(97)));
                    let columns: Vec<ArrayRef> = vec![Arc::new(g), Arc::new(Int64Array::from(k))];
                    RecordBatch::try_new(keyed_schema(), columns).unwrap()
                })
                .collect()
        })
        .collect()
}

/// `input` (partitions of batches of `schema`, which has an Int64 `k`) as a memory source,
/// and the ordering by `k` ascending.
pub fn source_by_k(
    input: &[Vec<RecordBatch>],
    schema: SchemaRef,
) -> (Arc<DataSourceExec>, LexOrdering) {
    let keys = LexOrdering::new(vec![PhysicalSortExpr::new(
        col("k", &schema).unwrap(),
        SortOptions::default(),
    )])
    .unwrap();
    let source = MemorySourceConfig::try_new(input, schema, None).unwrap();
    (DataSourceExec::from_data_source(source), keys)
}
