//! Key ranges of a job larger than its memory: splitters chosen from a sample of the sort
//! keys, and the range of every row.
//!
//! A job whose rows do not fit its memory pool is sorted by key range instead of by sorted
//! runs merged at the end (`range_spill`, `range_table`):
//!
//! ```text
//!  key columns only ──every k-th row──► sample ──sorted, quantiles──► splitters s1 < .. < sR-1
//!  every row ──its range i: s(i-1) < key <= s(i)──► range i's spill files
//!  range 0, range 1, ..: each sorted as a job that fits, written one after the other
//! ```
//!
//! Keys are compared in arrow's row format with each key's own direction and null order, so
//! a range holds exactly the rows the sort puts between its splitters (floats in IEEE total
//! order, as the sort orders them). Equal keys always share a range, so ties keep their
//! input order inside it. A key value more frequent than a range's share makes its range
//! larger than planned; that range's sort then spills and merges as any sort over its
//! memory does.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch, SortOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::error::DataFusionError;
use datafusion::physical_plan::{execute_stream_partitioned, ExecutionPlan};
use datafusion::prelude::{DataFrame, SessionContext};
use futures::StreamExt;

use super::error::PipelineError;
use super::order_by::SortKey;

/// Rows sampled from the key columns to place the splitters: with 64 Ki samples, a range
/// planned to hold a 64th of the rows holds within a few percent of that.
pub(super) const SAMPLE_ROWS: u64 = 64 * 1024;

/// The splitters of a job's key ranges, and how to find a row's range.
pub(super) struct KeyRanges {
    /// The sort keys in arrow's row format (each with its direction and null order).
    converter: RowConverter,
    /// Where the key columns are in the rows routed.
    columns: Vec<usize>,
    /// Ascending, distinct: range `i` holds the keys above splitter `i - 1` up to and
    /// including splitter `i`.
    splitters: Rows,
}

impl std::fmt::Debug for KeyRanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRanges")
            .field("columns", &self.columns)
            .field("ranges", &self.count())
            .finish()
    }
}

impl KeyRanges {
    /// The converter of `keys` over rows of `schema`; `None` where arrow's row format does
    /// not take a key's type (the job then sorts by merged runs).
    pub(super) fn converter(
        keys: &[SortKey],
        schema: &SchemaRef,
    ) -> Option<(RowConverter, Vec<usize>)> {
        let mut fields = Vec::with_capacity(keys.len());
        let mut columns = Vec::with_capacity(keys.len());
        for key in keys {
            let index = schema.index_of(&key.column).ok()?;
            let options = SortOptions {
                descending: key.descending,
                nulls_first: key.nulls_first,
            };
            fields.push(SortField::new_with_options(
                schema.field(index).data_type().clone(),
                options,
            ));
            columns.push(index);
        }
        let converter = RowConverter::new(fields).ok()?;
        Some((converter, columns))
    }

    /// Splitters for at most `ranges` ranges of about equal rows, from a sample of the key
    /// columns of `input` (`rows` rows in all), read on every partition of its scan.
    /// `None` where the keys' types have no row format.
    pub(super) async fn sample(
        ctx: &SessionContext,
        input: &DataFrame,
        keys: &[SortKey],
        rows: u64,
        ranges: usize,
    ) -> Result<Option<Self>, PipelineError> {
        let schema: SchemaRef = Arc::new(input.schema().as_arrow().clone());
        let Some((converter, columns)) = Self::converter(keys, &schema) else {
            return Ok(None);
        };
        let mut names: Vec<&str> = Vec::new();
        for &c in &columns {
            let name = schema.field(c).name().as_str();
            if !names.contains(&name) {
                names.push(name);
            }
        }
        let key_only = input
            .clone()
            .select_columns(&names)
            .map_err(PipelineError::execution("planning the key sample"))?;
        let plan = key_only
            .create_physical_plan()
            .await
            .map_err(PipelineError::execution("planning the key sample"))?;
        let sample_rows = sample_rows(ctx, plan, keys, &converter, rows)
            .await
            .map_err(PipelineError::execution("sampling the keys"))?;
        let splitters = splitters(&converter, &sample_rows, ranges);
        Ok(Some(Self {
            converter,
            columns,
            splitters,
        }))
    }

    /// Ranges with these splitters: one more than the splitters.
    pub(super) fn count(&self) -> usize {
        self.splitters.num_rows() + 1
    }

    /// The range of each row of `batch` (rows of the job's schema).
    pub(super) fn route(&self, batch: &RecordBatch) -> Result<Vec<u32>, ArrowError> {
        let rows = key_rows(&self.converter, &self.columns, batch)?;
        Ok(rows.iter().map(|row| self.range_of(row) as u32).collect())
    }

    /// The splitters below `row`: its range.
    fn range_of(&self, row: datafusion::arrow::row::Row<'_>) -> usize {
        let (mut low, mut high) = (0, self.splitters.num_rows());
        while low < high {
            let middle = (low + high) / 2;
            if self.splitters.row(middle) < row {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }
}

/// The key columns `columns` of `batch` in `converter`'s row format.
fn key_rows(
    converter: &RowConverter,
    columns: &[usize],
    batch: &RecordBatch,
) -> Result<Rows, ArrowError> {
    let keys: Vec<ArrayRef> = columns
        .iter()
        .map(|&c| Arc::clone(batch.column(c)))
        .collect();
    converter.convert_columns(&keys)
}

/// The sort keys of one row picked in every block of `rows / SAMPLE_ROWS` rows of each
/// partition of `plan` (the key columns alone), in `converter`'s row format.
async fn sample_rows(
    ctx: &SessionContext,
    plan: Arc<dyn ExecutionPlan>,
    keys: &[SortKey],
    converter: &RowConverter,
    rows: u64,
) -> Result<Rows, DataFusionError> {
    let key_schema = plan.schema();
    let stride = (rows / SAMPLE_ROWS).max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for (partition, mut stream) in execute_stream_partitioned(plan, ctx.task_ctx())?
        .into_iter()
        .enumerate()
    {
        tasks.spawn(async move {
            let mut picker = Picker::new(stride, partition as u64);
            let mut seen = 0u64;
            let mut taken = Vec::new();
            while let Some(batch) = stream.next().await {
                let batch = batch?;
                let n = batch.num_rows() as u64;
                let picks: UInt32Array = picker
                    .picks_before(seen + n)
                    .map(|i| (i - seen) as u32)
                    .collect();
                seen += n;
                if !picks.is_empty() {
                    taken.push(take_record_batch(&batch, &picks)?);
                }
            }
            Ok::<_, DataFusionError>(taken)
        });
    }
    let mut sampled = Vec::new();
    while let Some(done) = tasks.join_next().await {
        sampled.extend(done.map_err(|e| DataFusionError::External(Box::new(e)))??);
    }
    let sample = concat_batches(&key_schema, &sampled)?;
    let columns = keys
        .iter()
        .map(|key| key_schema.index_of(&key.column))
        .collect::<Result<Vec<usize>, ArrowError>>()?;
    Ok(key_rows(converter, &columns, &sample)?)
}

/// One row picked at random in every block of `stride` rows of a partition: an even
/// sample that periodic data (every other row alike) cannot fool as every `stride`-th row
/// would.
struct Picker {
    stride: u64,
    salt: u64,
    block: u64,
    /// The next row picked (its index in the partition).
    next: u64,
}

impl Picker {
    fn new(stride: u64, salt: u64) -> Self {
        let mut picker = Self {
            stride: stride.max(1),
            salt: splitmix64(salt),
            block: 0,
            next: 0,
        };
        picker.next = picker.pick_in_block();
        picker
    }

    fn pick_in_block(&self) -> u64 {
        self.block * self.stride + splitmix64(self.salt ^ self.block) % self.stride
    }

    /// The rows picked below row `end` not returned before, ascending.
    fn picks_before(&mut self, end: u64) -> impl Iterator<Item = u64> + '_ {
        std::iter::from_fn(move || {
            (self.next < end).then(|| {
                let picked = self.next;
                self.block += 1;
                self.next = self.pick_in_block();
                picked
            })
        })
    }
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash of `x`.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// At most `ranges - 1` distinct splitters at even quantiles of `sample`, ascending.
fn splitters(converter: &RowConverter, sample: &Rows, ranges: usize) -> Rows {
    let mut order: Vec<usize> = (0..sample.num_rows()).collect();
    order.sort_unstable_by(|&a, &b| sample.row(a).cmp(&sample.row(b)));
    let mut chosen = converter.empty_rows(ranges.saturating_sub(1), 0);
    let mut last: Option<usize> = None;
    let largest = order.last().copied();
    for i in 1..ranges.max(1) {
        let Some(&at) = order.get(i * order.len() / ranges) else {
            break;
        };
        // A splitter equal to the one before, or to the largest key sampled (whose range
        // would hold nothing sampled), is left out.
        let repeated = last.is_some_and(|l| sample.row(l) == sample.row(at));
        if repeated || largest.is_some_and(|l| sample.row(l) == sample.row(at)) {
            continue;
        }
        chosen.push(sample.row(at));
        last = Some(at);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, Int32Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn key(column: &str, descending: bool, nulls_first: bool) -> SortKey {
        SortKey {
            column: column.into(),
            descending,
            nulls_first,
        }
    }

    fn ranges_over(keys: &[SortKey], batch: &RecordBatch, ranges: usize) -> KeyRanges {
        let (converter, columns) = KeyRanges::converter(keys, &batch.schema()).unwrap();
        let sample = key_rows(&converter, &columns, batch).unwrap();
        let splitters = splitters(&converter, &sample, ranges);
        KeyRanges {
            converter,
            columns,
            splitters,
        }
    }

    /// Rows in range order are in key order: every row of range i sorts before every row
    /// of range i + 1, under each key's direction and null order.
    fn assert_ranges_follow_the_order(keys: &[SortKey], batch: &RecordBatch, ranges: usize) {
        let split = ranges_over(keys, batch, ranges);
        let range = split.route(batch).unwrap();
        let rows = key_rows(&split.converter, &split.columns, batch).unwrap();
        for a in 0..batch.num_rows() {
            for b in 0..batch.num_rows() {
                if range[a] < range[b] {
                    assert!(rows.row(a) < rows.row(b), "rows {a} and {b}");
                }
                if rows.row(a) == rows.row(b) {
                    assert_eq!(range[a], range[b], "equal keys {a} and {b} split");
                }
            }
        }
        assert!(range.iter().all(|&r| (r as usize) < split.count()));
    }

    #[test]
    fn ranges_follow_directions_null_orders_and_float_total_order() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let n = 300;
        let ints = Int32Array::from_iter((0..n).map(|i| (i % 7 != 0).then_some((i * 37) % 11)));
        let specials = [
            f64::NAN,
            -f64::NAN,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let floats = Float64Array::from_iter((0..n).map(|i| match i % 9 {
            0 => None,
            1..=6 => Some(specials[(i % 6) as usize]),
            _ => Some(i as f64 / 3.0),
        }));
        let strings =
            StringArray::from_iter((0..n).map(|i| (i % 5 != 0).then(|| format!("s{}", i % 13))));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(ints), Arc::new(floats), Arc::new(strings)],
        )
        .unwrap();
        for (descending, nulls_first) in
            [(false, false), (false, true), (true, false), (true, true)]
        {
            for ranges in [2, 5, 40] {
                assert_ranges_follow_the_order(
                    &[
                        key("i", descending, nulls_first),
                        key("f", !descending, nulls_first),
                    ],
                    &batch,
                    ranges,
                );
                assert_ranges_follow_the_order(
                    &[key("f", descending, nulls_first)],
                    &batch,
                    ranges,
                );
                assert_ranges_follow_the_order(
                    &[key("s", descending, !nulls_first), key("i", false, true)],
                    &batch,
                    ranges,
                );
            }
        }
    }

    #[test]
    fn one_row_is_picked_in_every_block() {
        let mut picker = Picker::new(4, 7);
        let mut picks: Vec<u64> = Vec::new();
        for end in [3, 3, 10, 17, 40] {
            picks.extend(picker.picks_before(end));
        }
        assert_eq!(picks.len(), 10);
        for (block, &pick) in picks.iter().enumerate() {
            assert_eq!(pick / 4, block as u64, "{picks:?}");
        }
        // Not always the same place in the block.
        assert!(picks.iter().any(|p| p % 4 != picks[0] % 4), "{picks:?}");
        assert_eq!(
            Picker::new(1, 0).picks_before(5).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn splitters_are_distinct_and_even() {
        let schema = Arc::new(Schema::new(vec![Field::new("i", DataType::Int32, false)]));
        let distinct = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int32Array::from_iter_values((0..1000).rev()))],
        )
        .unwrap();
        let split = ranges_over(&[key("i", false, false)], &distinct, 4);
        assert_eq!(split.count(), 4);
        let mut sizes = [0usize; 4];
        for r in split.route(&distinct).unwrap() {
            sizes[r as usize] += 1;
        }
        assert_eq!(sizes, [251, 250, 250, 249]);
        // Three values: at most three ranges, however many were asked for.
        let few = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int32Array::from_iter_values(
                (0..999).map(|i| i % 3),
            ))],
        )
        .unwrap();
        let split = ranges_over(&[key("i", false, false)], &few, 16);
        assert!(split.count() <= 3, "{}", split.count());
        assert_ranges_follow_the_order(&[key("i", false, false)], &few, 16);
        // One range: no splitter, every row in range 0.
        let split = ranges_over(&[key("i", false, false)], &few, 1);
        assert_eq!(split.count(), 1);
        assert!(split.route(&few).unwrap().iter().all(|&r| r == 0));
    }
}
