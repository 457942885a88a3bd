//! Partition ids a backend can make itself: a table of the hash partition of every value
//! in a key column's range.
//!
//! A routed sort (`hash_routing.rs`) sorts by (partition id, keys). Hashing every row on
//! the host and uploading the ids costs a pass over the rows on all cores and a byte per
//! row across PCIe. When the rows are routed by one expression that is also a sort key of
//! an integer-like type (integers, dates, times, timestamps, durations, Decimal32/64,
//! year-month intervals) and its values span a small range (a window's `PARTITION BY`
//! over a category id), the partition of every value in that range is tabulated here by
//! the very function `RepartitionExec` uses (`HashRouting::ids_of_values`), and the
//! backend looks each row's id up in the table, on the device, from the key column it
//! uploads anyway. The range itself is found there too ([`IdTables`]): reading the whole
//! column on the host took 8 to 10 ms of SF10 `lineitem`'s 60 M keys (the host's memory
//! bandwidth, H200 host, 2026-11-29), the device reads it in a fraction of a millisecond;
//! the host reads a sample first, to leave out ranges plainly too wide.

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::datatypes::*;
use datafusion::arrow;
use datafusion::common::{internal_err, Result};
use datafusion::physical_expr::LexOrdering;
use rayon::prelude::*;

use super::hash_routing::HashRouting;
use crate::keys::{column_rows, KeyColumn};
use crate::sort::{IdTableMaker, PartitionIdTable};

/// Most values one table covers (2 MiB of ids).
pub(super) const MAX_TABLE_VALUES: usize = 1 << 20;

/// Fewest values a table may always cover, however few rows there are.
const MIN_TABLE_LIMIT: usize = 1 << 12;

/// The host reads every `len / SAMPLED_ARRAYS`-th array of the key column (and the last)
/// before the device finds its whole range: between this many and twice as many arrays
/// (every array when there are fewer), and the table is tried only when they span few
/// enough values.
const SAMPLED_ARRAYS: usize = 16;

impl HashRouting {
    /// The tables of this routing's partition ids over ranges of the sort key it routes by
    /// (`sort_exprs`, evaluated as `columns`), or `None` when it routes by something else
    /// than one sort key, the key's type is not integer-like, or the values of a sample of
    /// its arrays (`SAMPLED_ARRAYS`) already span more than a table may cover:
    /// `MAX_TABLE_VALUES`, and no more than the rows (hashing the rows is then the cheaper
    /// way). A backend finds the whole range and asks for its table
    /// ([`IdTableMaker::table_over`]), which may still be too wide.
    pub fn id_tables<'a>(
        &'a self,
        sort_exprs: &LexOrdering,
        columns: &[KeyColumn],
    ) -> Result<Option<IdTables<'a>>> {
        let [expr] = self.exprs() else {
            return Ok(None);
        };
        let Some(column) = sort_exprs.iter().position(|e| e.expr.eq(expr)) else {
            return Ok(None);
        };
        let Some(key) = columns.get(column) else {
            return internal_err!("gpusort: sort key {column} was not evaluated");
        };
        let Some(data_type) = key.arrays.first().map(|a| a.data_type().clone()) else {
            return Ok(None);
        };
        if !is_integer_like(&data_type) {
            return Ok(None);
        }
        let tables = IdTables {
            routing: self,
            column,
            limit: MAX_TABLE_VALUES.min(column_rows(key).max(MIN_TABLE_LIMIT)),
            data_type,
        };
        let step = (key.arrays.len() / SAMPLED_ARRAYS).max(1);
        let sample: Vec<ArrayRef> = key
            .arrays
            .iter()
            .step_by(step)
            .chain(key.arrays.last())
            .cloned()
            .collect();
        match value_range(&tables.data_type, &sample) {
            Some(range) if tables.span(range).is_none() => Ok(None),
            _ => Ok(Some(tables)),
        }
    }

    /// The table of this routing's partition ids over the whole range of the sort key it
    /// routes by, read on the host: [`Self::id_tables`]'s table over that range.
    #[cfg(test)]
    fn id_table(
        &self,
        sort_exprs: &LexOrdering,
        columns: &[KeyColumn],
    ) -> Result<Option<PartitionIdTable>> {
        let Some(tables) = self.id_tables(sort_exprs, columns)? else {
            return Ok(None);
        };
        let range = value_range(&tables.data_type, &columns[tables.column].arrays);
        tables.table_over(range)
    }
}

/// The tables of one routing over ranges of its key column ([`HashRouting::id_tables`]).
#[derive(Debug)]
pub struct IdTables<'a> {
    routing: &'a HashRouting,
    column: usize,
    data_type: DataType,
    /// Most values a table may cover.
    limit: usize,
}

impl IdTables<'_> {
    /// The values from `first` to `last`, when a table may cover that many.
    fn span(&self, (first, last): (i128, i128)) -> Option<usize> {
        usize::try_from(last.checked_sub(first)?.checked_add(1)?)
            .ok()
            .filter(|&len| len <= self.limit)
    }
}

impl IdTableMaker for IdTables<'_> {
    fn column(&self) -> usize {
        self.column
    }

    fn table_over(&self, range: Option<(i128, i128)>) -> Result<Option<PartitionIdTable>> {
        // Every value null: nothing to tabulate (the rows are hashed, as before).
        let Some((first, last)) = range else {
            return Ok(None);
        };
        let Some(len) = self.span((first, last)) else {
            return Ok(None);
        };
        let Some(values) = values_from(&self.data_type, first, len) else {
            return Ok(None);
        };
        let ids = self.routing.ids_of_values(&values)?;
        let null_id = self
            .routing
            .ids_of_values(&new_null_array(&self.data_type, 1))?[0];
        Ok(Some(PartitionIdTable {
            column: self.column,
            first,
            ids,
            null_id,
            partitions: self.routing.partitions(),
        }))
    }
}

/// Calls `$f::<T>($args)` with the arrow primitive type `T` of the integer-like data type
/// `$data_type`; `None` for any other type.
macro_rules! integer_like {
    ($data_type:expr, $f:ident ( $($args:expr),* )) => {{
        use DataType::*;
        match $data_type {
            Int8 => $f::<Int8Type>($($args),*),
            Int16 => $f::<Int16Type>($($args),*),
            Int32 => $f::<Int32Type>($($args),*),
            Int64 => $f::<Int64Type>($($args),*),
            UInt8 => $f::<UInt8Type>($($args),*),
            UInt16 => $f::<UInt16Type>($($args),*),
            UInt32 => $f::<UInt32Type>($($args),*),
            UInt64 => $f::<UInt64Type>($($args),*),
            Date32 => $f::<Date32Type>($($args),*),
            Date64 => $f::<Date64Type>($($args),*),
            Time32(TimeUnit::Second) => $f::<Time32SecondType>($($args),*),
            Time32(TimeUnit::Millisecond) => $f::<Time32MillisecondType>($($args),*),
            Time64(TimeUnit::Microsecond) => $f::<Time64MicrosecondType>($($args),*),
            Time64(TimeUnit::Nanosecond) => $f::<Time64NanosecondType>($($args),*),
            Timestamp(TimeUnit::Second, _) => $f::<TimestampSecondType>($($args),*),
            Timestamp(TimeUnit::Millisecond, _) => $f::<TimestampMillisecondType>($($args),*),
            Timestamp(TimeUnit::Microsecond, _) => $f::<TimestampMicrosecondType>($($args),*),
            Timestamp(TimeUnit::Nanosecond, _) => $f::<TimestampNanosecondType>($($args),*),
            Duration(TimeUnit::Second) => $f::<DurationSecondType>($($args),*),
            Duration(TimeUnit::Millisecond) => $f::<DurationMillisecondType>($($args),*),
            Duration(TimeUnit::Microsecond) => $f::<DurationMicrosecondType>($($args),*),
            Duration(TimeUnit::Nanosecond) => $f::<DurationNanosecondType>($($args),*),
            Decimal32(_, _) => $f::<Decimal32Type>($($args),*),
            Decimal64(_, _) => $f::<Decimal64Type>($($args),*),
            Interval(IntervalUnit::YearMonth) => $f::<IntervalYearMonthType>($($args),*),
            _ => None,
        }
    }};
}

/// Whether `data_type` is integer-like (a table can cover its values): an empty array of
/// its values can be made.
fn is_integer_like(data_type: &DataType) -> bool {
    values_from(data_type, 0, 0).is_some()
}

/// The smallest and largest valid value of `arrays` (of the integer-like `data_type`), on
/// all cores; `None` for another type or when every value is null.
fn value_range(data_type: &DataType, arrays: &[ArrayRef]) -> Option<(i128, i128)> {
    integer_like!(data_type, range_of(arrays))
}

fn range_of<T>(arrays: &[ArrayRef]) -> Option<(i128, i128)>
where
    T: ArrowPrimitiveType,
    T::Native: Into<i128> + Ord,
{
    arrays
        .par_iter()
        .filter_map(|array| {
            let array = array.as_primitive_opt::<T>()?;
            let (min, max) = match array.null_count() {
                // One pass over the values instead of arrow's two (min, then max).
                0 => extremes(array.values())?,
                _ => (arrow::compute::min(array)?, arrow::compute::max(array)?),
            };
            Some((min.into(), max.into()))
        })
        .reduce_with(|a, b| (a.0.min(b.0), a.1.max(b.1)))
}

/// The smallest and largest of `values` in one pass, eight lanes at a time.
fn extremes<N: Ord + Copy>(values: &[N]) -> Option<(N, N)> {
    let first = *values.first()?;
    let mut lo = [first; 8];
    let mut hi = [first; 8];
    let chunks = values.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        for lane in 0..8 {
            lo[lane] = lo[lane].min(chunk[lane]);
            hi[lane] = hi[lane].max(chunk[lane]);
        }
    }
    let lo = rest.iter().chain(&lo).copied().min()?;
    let hi = rest.iter().chain(&hi).copied().max()?;
    Some((lo, hi))
}

/// `len` consecutive values from `first`, as an array of `data_type` (its parameters, a
/// timestamp's zone or a decimal's scale, kept: the hash sees what a column holds).
fn values_from(data_type: &DataType, first: i128, len: usize) -> Option<ArrayRef> {
    integer_like!(data_type, values_of(data_type, first, len))
}

fn values_of<T>(data_type: &DataType, first: i128, len: usize) -> Option<ArrayRef>
where
    T: ArrowPrimitiveType,
    T::Native: TryFrom<i128>,
{
    let values = (0..len as i128)
        .map(|i| T::Native::try_from(first + i).ok())
        .collect::<Option<Vec<T::Native>>>()?;
    let array = PrimitiveArray::<T>::from_iter_values(values).with_data_type(data_type.clone());
    Some(Arc::new(array))
}

/// The value of row `row` of `array` (integer-like) as an `i128`, `None` when null.
#[cfg(test)]
fn value_at(array: &dyn Array, row: usize) -> Option<i128> {
    if array.is_null(row) {
        return None;
    }
    integer_like!(array.data_type(), value_of(array, row))
}

#[cfg(test)]
fn value_of<T>(array: &dyn Array, row: usize) -> Option<i128>
where
    T: ArrowPrimitiveType,
    T::Native: Into<i128>,
{
    Some(array.as_primitive_opt::<T>()?.value(row).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Date32Array, Decimal64Array, Int32Array, Int64Array, UInt64Array};
    use arrow::array::{Int8Array, RecordBatch, TimestampNanosecondArray};
    use arrow::compute::SortOptions;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::PhysicalSortExpr;

    /// Two batches of one column `v`, and the routing by `v` to `partitions`.
    fn routed(arrays: Vec<ArrayRef>, partitions: usize) -> (Vec<RecordBatch>, HashRouting) {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "v",
            arrays[0].data_type().clone(),
            true,
        )]));
        let batches = arrays
            .into_iter()
            .map(|a| RecordBatch::try_new(Arc::clone(&schema), vec![a]).unwrap())
            .collect();
        let routing = HashRouting::try_new(vec![col("v", &schema).unwrap()], partitions).unwrap();
        (batches, routing)
    }

    fn sort_by_v(batches: &[RecordBatch]) -> (LexOrdering, Vec<KeyColumn>) {
        let schema = batches[0].schema();
        let options = SortOptions {
            descending: true,
            nulls_first: false,
        };
        let exprs = LexOrdering::new(vec![PhysicalSortExpr::new(
            col("v", &schema).unwrap(),
            options,
        )])
        .unwrap();
        let column = KeyColumn {
            arrays: batches.iter().map(|b| Arc::clone(b.column(0))).collect(),
            options,
        };
        (exprs, vec![column])
    }

    #[test]
    fn table_gives_every_row_the_partition_of_its_hash() {
        let cases: Vec<Vec<ArrayRef>> = vec![
            vec![
                Arc::new(Int32Array::from(vec![Some(5), None, Some(-3), Some(900)])),
                Arc::new(Int32Array::from(vec![Some(17), Some(-40), None])),
            ],
            vec![
                Arc::new(Int8Array::from(vec![Some(-128), Some(127), None])),
                Arc::new(Int8Array::from(vec![Some(0), Some(1)])),
            ],
            vec![
                Arc::new(Int64Array::from(vec![
                    i64::MIN + 3,
                    i64::MIN,
                    i64::MIN + 70,
                ])),
                Arc::new(Int64Array::from(vec![i64::MIN + 1])),
            ],
            vec![
                Arc::new(UInt64Array::from(vec![u64::MAX, u64::MAX - 999])),
                Arc::new(UInt64Array::from(vec![Some(u64::MAX - 5), None])),
            ],
            vec![
                Arc::new(Date32Array::from(vec![Some(19000), None, Some(19400)])),
                Arc::new(Date32Array::from(vec![Some(18999)])),
            ],
            vec![
                Arc::new(
                    TimestampNanosecondArray::from(vec![Some(1_000), Some(3_000), None])
                        .with_timezone("+02:00"),
                ),
                Arc::new(TimestampNanosecondArray::from(vec![2_500]).with_timezone("+02:00")),
            ],
            vec![
                Arc::new(
                    Decimal64Array::from(vec![Some(-1234), None, Some(77)])
                        .with_precision_and_scale(12, 2)
                        .unwrap(),
                ),
                Arc::new(
                    Decimal64Array::from(vec![5])
                        .with_precision_and_scale(12, 2)
                        .unwrap(),
                ),
            ],
        ];
        for arrays in cases {
            let data_type = arrays[0].data_type().clone();
            for partitions in [1, 3, 16, 300] {
                let (batches, routing) = routed(arrays.clone(), partitions);
                let (exprs, columns) = sort_by_v(&batches);
                let table = routing
                    .id_table(&exprs, &columns)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{data_type}: no table"));
                assert_eq!(table.column, 0);
                assert_eq!(table.partitions, partitions);
                for batch in &batches {
                    let (expected, _) = routing.route_to_vec(batch).unwrap();
                    let column = batch.column(0);
                    for (row, &theirs) in expected.iter().enumerate() {
                        let theirs = u16::try_from(theirs).unwrap();
                        let value = value_at(column.as_ref(), row);
                        assert_eq!(
                            table.id_of(value),
                            Some(theirs),
                            "{data_type}, {partitions} partitions, row {row} ({value:?})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn tables_are_tried_when_the_sample_is_narrow_and_refused_over_wide_ranges() {
        // 40 arrays: the sample reads every second one and the last.
        let arrays = |far_in: usize, far: i64| -> Vec<ArrayRef> {
            (0..40)
                .map(|a| {
                    let values = (0..200).map(|r| if a == far_in && r == 7 { far } else { r % 50 });
                    Arc::new(Int64Array::from_iter_values(values)) as ArrayRef
                })
                .collect()
        };
        // The wide value in an array the sample skips: tables are offered, and refused
        // over the whole range.
        let (batches, routing) = routed(arrays(3, 1 << 40), 8);
        let (exprs, columns) = sort_by_v(&batches);
        let tables = routing.id_tables(&exprs, &columns).unwrap().unwrap();
        assert_eq!(tables.column(), 0);
        assert!(tables.table_over(Some((0, 49))).unwrap().is_some());
        assert_eq!(tables.table_over(Some((0, 1 << 40))).unwrap(), None);
        assert_eq!(tables.table_over(None).unwrap(), None);
        assert_eq!(routing.id_table(&exprs, &columns).unwrap(), None);
        // In a sampled array: no tables at all.
        let (batches, routing) = routed(arrays(4, 1 << 40), 8);
        let (exprs, columns) = sort_by_v(&batches);
        assert!(routing.id_tables(&exprs, &columns).unwrap().is_none());
        // A table over a range the sample missed tabulates it whole.
        let (batches, routing) = routed(arrays(3, 3000), 8);
        let (exprs, columns) = sort_by_v(&batches);
        let tables = routing.id_tables(&exprs, &columns).unwrap().unwrap();
        let table = tables.table_over(Some((0, 3000))).unwrap().unwrap();
        assert_eq!((table.first, table.ids.len()), (0, 3001));
        assert_eq!(Some(table), routing.id_table(&exprs, &columns).unwrap());
    }

    #[test]
    fn extremes_in_one_pass_over_every_length() {
        assert_eq!(extremes::<i64>(&[]), None);
        for len in 1..40usize {
            let values: Vec<i64> = (0..len as i64).map(|i| (i * 37) % 23 - 11).collect();
            let expected = (*values.iter().min().unwrap(), *values.iter().max().unwrap());
            assert_eq!(extremes(&values), Some(expected), "{len} values");
        }
    }

    #[test]
    fn no_table_for_wide_ranges_other_types_or_other_routings() {
        let wide: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![0, 1 << 40]))];
        let (batches, routing) = routed(wide, 4);
        let (exprs, columns) = sort_by_v(&batches);
        assert_eq!(routing.id_table(&exprs, &columns).unwrap(), None);

        // The range may exceed the rows up to MIN_TABLE_LIMIT values, no further.
        let narrow: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![0, 4095]))];
        let (batches, routing) = routed(narrow, 4);
        let (exprs, columns) = sort_by_v(&batches);
        assert!(routing.id_table(&exprs, &columns).unwrap().is_some());
        let just_over: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![0, 4096]))];
        let (batches, routing) = routed(just_over, 4);
        let (exprs, columns) = sort_by_v(&batches);
        assert_eq!(routing.id_table(&exprs, &columns).unwrap(), None);

        let floats: Vec<ArrayRef> = vec![Arc::new(arrow::array::Float64Array::from(vec![1.0]))];
        let (batches, routing) = routed(floats, 4);
        let (exprs, columns) = sort_by_v(&batches);
        assert_eq!(routing.id_table(&exprs, &columns).unwrap(), None);

        let nulls: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![None, None]))];
        let (batches, routing) = routed(nulls, 4);
        let (exprs, columns) = sort_by_v(&batches);
        assert_eq!(routing.id_table(&exprs, &columns).unwrap(), None);

        // Routed by something that is not a sort key.
        let (batches, _) = routed(vec![Arc::new(Int32Array::from(vec![1, 2]))], 4);
        let schema = batches[0].schema();
        let other = datafusion::physical_expr::expressions::lit(1i32);
        let routing = HashRouting::try_new(vec![other], 4).unwrap();
        let (exprs, columns) = sort_by_v(&batches);
        assert_eq!(routing.id_table(&exprs, &columns).unwrap(), None);
        let two = vec![col("v", &schema).unwrap(), col("v", &schema).unwrap()];
        let routing = HashRouting::try_new(two, 4).unwrap();
        assert_eq!(routing.id_table(&exprs, &columns).unwrap(), None);
    }
}
