//! The tables of `gpusort bench sql`, generated in memory from a seed.
//!
//! ```text
//!  t (k BIGINT, p1 BIGINT, p2 DOUBLE)     N rows, every column uniform random
//!  g (g INT, ts BIGINT, v DOUBLE)          N rows, g uniform in 0..999
//!  ts(ts BIGINT, v DOUBLE)                 N rows, ts = i*1000 + uniform 0..64000 (nearly sorted)
//!  s (s VARCHAR, v BIGINT)                 N/5 rows, s = hex of one of 1 M random 60-bit numbers
//!  u (url VARCHAR, v BIGINT)               N/5 rows, url = a 40-byte prefix every value shares,
//!                                          the hex of one of 1 M numbers, "/reviews"
//!  p (path VARCHAR, v BIGINT)              N/5 rows, path = an object path of 66 bytes and
//!                                          more: a 35-byte prefix every value shares, one of
//!                                          448 directories, "part-", the hex of one of 1 M
//!                                          numbers, ".parquet" (ties past a 64-byte window)
//! ```
//!
//! Value `i` of a column is a pure function of (seed, column, i), so the tables are the same
//! on every machine whatever the thread count. Batches of `BATCH_ROWS` rows are generated in
//! parallel and dealt to the partitions in contiguous, equal shares (input order = row order).

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringViewArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow;
use datafusion::common::Result;
use rayon::prelude::*;

use crate::bench::splitmix64;

/// Rows per generated batch (DataFusion's default batch size).
pub const BATCH_ROWS: usize = 8192;
/// Distinct strings of tables `s` and `u`.
const STRING_POOL: u64 = 1_000_000;
/// The 40 bytes every URL of table `u` starts with.
const URL_PREFIX: &str = "https://www.example-shop.com/catalog/id/";
/// The 35 bytes every path of table `p` starts with.
const LAKE_PREFIX: &str = "s3://analytics-lake-prod/warehouse/";

/// One generated table: its name, schema and batches per partition.
pub struct Table {
    pub name: &'static str,
    pub schema: SchemaRef,
    pub partitions: Vec<Vec<RecordBatch>>,
}

impl Table {
    /// Rows over all partitions.
    pub fn rows(&self) -> usize {
        self.partitions.iter().flatten().map(|b| b.num_rows()).sum()
    }
}

/// Generates the six tables: `rows` rows each (`s`, `u`, `p`: `rows / 5`), `partitions`
/// partitions.
pub fn generate_tables(rows: usize, partitions: usize, seed: u64) -> Result<Vec<Table>> {
    Ok(vec![
        generate("t", rows, partitions, seed, table_t)?,
        generate("g", rows, partitions, seed, table_g)?,
        generate("ts", rows, partitions, seed, table_ts)?,
        generate("s", rows / 5, partitions, seed, table_s)?,
        generate("u", rows / 5, partitions, seed, table_u)?,
        generate("p", rows / 5, partitions, seed, table_p)?,
    ])
}

/// The random stream of one column: value `i` is `splitmix64(base + i)`.
#[derive(Clone, Copy)]
struct Stream {
    base: u64,
}

impl Stream {
    fn new(seed: u64, table: &str, column: &str) -> Self {
        let salt = format!("{table}.{column}")
            .bytes()
            .fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01B3)
            });
        Self {
            base: splitmix64(seed ^ salt),
        }
    }

    fn at(self, i: u64) -> u64 {
        splitmix64(self.base.wrapping_add(i))
    }

    fn unit(self, i: u64) -> f64 {
        (self.at(i) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A BIGINT column of uniform random values.
    fn int64s(self, rows: Range<u64>) -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(
            rows.map(|i| self.at(i) as i64),
        ))
    }

    /// A DOUBLE column of uniform random values in [0, 1).
    fn units(self, rows: Range<u64>) -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(rows.map(|i| self.unit(i))))
    }
}

type Columns = (Vec<Field>, fn(u64, Range<u64>) -> Vec<ArrayRef>);

fn table_t() -> Columns {
    (
        vec![
            Field::new("k", DataType::Int64, false),
            Field::new("p1", DataType::Int64, false),
            Field::new("p2", DataType::Float64, false),
        ],
        |seed, rows| {
            let (k, p1, p2) = (
                Stream::new(seed, "t", "k"),
                Stream::new(seed, "t", "p1"),
                Stream::new(seed, "t", "p2"),
            );
            vec![
                k.int64s(rows.clone()),
                p1.int64s(rows.clone()),
                p2.units(rows),
            ]
        },
    )
}

fn table_g() -> Columns {
    (
        vec![
            Field::new("g", DataType::Int32, false),
            Field::new("ts", DataType::Int64, false),
            Field::new("v", DataType::Float64, false),
        ],
        |seed, rows| {
            let (g, ts, v) = (
                Stream::new(seed, "g", "g"),
                Stream::new(seed, "g", "ts"),
                Stream::new(seed, "g", "v"),
            );
            vec![
                Arc::new(Int32Array::from_iter_values(
                    rows.clone().map(|i| (g.at(i) % 1000) as i32),
                )),
                ts.int64s(rows.clone()),
                v.units(rows),
            ]
        },
    )
}

fn table_ts() -> Columns {
    (
        vec![
            Field::new("ts", DataType::Int64, false),
            Field::new("v", DataType::Float64, false),
        ],
        |seed, rows| {
            let (noise, v) = (Stream::new(seed, "ts", "ts"), Stream::new(seed, "ts", "v"));
            vec![
                Arc::new(Int64Array::from_iter_values(
                    rows.clone()
                        .map(|i| (i * 1000 + noise.at(i) % 64_000) as i64),
                )),
                v.units(rows),
            ]
        },
    )
}

/// Row `i`'s number in `table`: one of `STRING_POOL` random 60-bit numbers, picked at random.
fn pooled_ids(seed: u64, table: &str) -> impl Fn(u64) -> u64 {
    let (pick, pool) = (
        Stream::new(seed, table, "pick"),
        Stream::new(seed, table, "pool"),
    );
    move |i| pool.at(pick.at(i) % STRING_POOL) >> 4
}

fn table_s() -> Columns {
    (
        vec![
            Field::new("s", DataType::Utf8View, false),
            Field::new("v", DataType::Int64, false),
        ],
        |seed, rows| {
            let (id, v) = (pooled_ids(seed, "s"), Stream::new(seed, "s", "v"));
            let text = |i: u64| format!("{:x}", id(i));
            vec![
                Arc::new(StringViewArray::from_iter_values(rows.clone().map(text))),
                v.int64s(rows),
            ]
        },
    )
}

fn table_u() -> Columns {
    (
        vec![
            Field::new("url", DataType::Utf8View, false),
            Field::new("v", DataType::Int64, false),
        ],
        |seed, rows| {
            let (id, v) = (pooled_ids(seed, "u"), Stream::new(seed, "u", "v"));
            let url = |i: u64| format!("{URL_PREFIX}{:x}/reviews", id(i));
            vec![
                Arc::new(StringViewArray::from_iter_values(rows.clone().map(url))),
                v.int64s(rows),
            ]
        },
    )
}

/// The object path of id `id`: its directory (one of 16 × 28) from the id's low bits.
fn lake_path(id: u64) -> String {
    let (table, day) = (id % 16, (id >> 4) % 28 + 1);
    format!("{LAKE_PREFIX}events_{table:02}/date=2024-11-{day:02}/part-{id:x}.parquet")
}

fn table_p() -> Columns {
    (
        vec![
            Field::new("path", DataType::Utf8View, false),
            Field::new("v", DataType::Int64, false),
        ],
        |seed, rows| {
            let (id, v) = (pooled_ids(seed, "p"), Stream::new(seed, "p", "v"));
            let path = |i: u64| lake_path(id(i));
            vec![
                Arc::new(StringViewArray::from_iter_values(rows.clone().map(path))),
                v.int64s(rows),
            ]
        },
    )
}

fn generate(
    name: &'static str,
    rows: usize,
    partitions: usize,
    seed: u64,
    columns: fn() -> Columns,
) -> Result<Table> {
    let (fields, make) = columns();
    let schema = Arc::new(Schema::new(fields));
    let batches = (0..rows.div_ceil(BATCH_ROWS))
        .into_par_iter()
        .map(|b| -> Result<RecordBatch> {
            let start = (b * BATCH_ROWS) as u64;
            let end = ((b + 1) * BATCH_ROWS).min(rows) as u64;
            Ok(RecordBatch::try_new(
                Arc::clone(&schema),
                make(seed, start..end),
            )?)
        })
        .collect::<Result<Vec<_>>>()?;
    let partitions = partitions.max(1);
    let per_partition = batches.len().div_ceil(partitions).max(1);
    let mut dealt: Vec<Vec<RecordBatch>> = batches
        .chunks(per_partition)
        .map(|chunk| chunk.to_vec())
        .collect();
    dealt.resize(partitions, Vec::new());
    Ok(Table {
        name,
        schema,
        partitions: dealt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;

    #[test]
    fn same_seed_same_rows_whatever_the_partitioning() {
        let one = generate("ts", 20_000, 1, 7, table_ts).unwrap();
        let four = generate("ts", 20_000, 4, 7, table_ts).unwrap();
        assert_eq!(four.partitions.len(), 4);
        assert_eq!((one.rows(), four.rows()), (20_000, 20_000));
        let values = |t: &Table| -> Vec<i64> {
            t.partitions
                .iter()
                .flatten()
                .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect()
        };
        let ts = values(&one);
        assert_eq!(ts, values(&four));
        // Nearly sorted: every value within 64 000 of i * 1000.
        assert!(ts
            .iter()
            .enumerate()
            .all(|(i, &v)| (0..64_000).contains(&(v - i as i64 * 1000))));
    }

    #[test]
    fn paths_run_past_a_64_byte_window() {
        let path = lake_path(0xabcde);
        assert!(path.starts_with(LAKE_PREFIX) && path.len() > 64, "{path}");
        assert_eq!(&path[..66], &lake_path(0xabcde + 16 * 28)[..66]);
    }

    #[test]
    fn urls_share_their_40_byte_prefix() {
        let u = generate("u", 1000, 2, 7, table_u).unwrap();
        assert_eq!(URL_PREFIX.len(), 40);
        for batch in u.partitions.iter().flatten() {
            for url in batch.column(0).as_string_view().iter().flatten() {
                assert!(
                    url.starts_with(URL_PREFIX) && url.ends_with("/reviews"),
                    "{url}"
                );
            }
        }
    }
}
