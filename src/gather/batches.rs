//! Where a run's output batches end: every `batch_size` rows, or sooner where the values
//! of a column with 32-bit offsets would pass what those offsets address (2 GiB). A run
//! of 2 M rows of 1 KiB strings gathered in one batch (a window's sort asks for 16 Mi
//! rows) would overflow; it is cut into batches that each hold less.
//!
//! `Utf8` and `Binary` columns count each row's value bytes. Nested columns that hold
//! 32-bit offsets anywhere (`List`, `Map`, or a `Utf8` inside a `Struct`,
//! `LargeList`, `FixedSizeList`) count, for each row, the elements of its lists and the
//! bytes of its strings at every level, summed: a bound on what each of the column's
//! offset buffers receives. Columns whose whole run fits are not looked at row by row.

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use datafusion::arrow;

use super::RunRows;

/// The most value bytes one output batch of a 32-bit-offset column may hold.
pub(super) const OFFSET_BYTES: usize = i32::MAX as usize;

/// Rows of each output batch of `permutation` (row ids of `rows`): `batch_size` each (the
/// last one fewer), cut sooner where a `Utf8` or `Binary` column's values would pass
/// `max_bytes`.
pub(super) fn batch_lengths(
    rows: &RunRows,
    permutation: &[u32],
    batch_size: usize,
    max_bytes: usize,
) -> Vec<usize> {
    let batch_size = batch_size.max(1);
    let heavy: Vec<RowSizes> = (0..rows.num_columns())
        .filter_map(|c| row_sizes(rows, c))
        .filter(|sizes| sizes.total() > max_bytes)
        .collect();
    if heavy.is_empty() {
        return permutation.chunks(batch_size).map(<[u32]>::len).collect();
    }
    let mut lengths = Vec::new();
    let mut bytes = vec![0usize; heavy.len()];
    let mut current = 0;
    for &id in permutation {
        let at = rows.locate(id as usize);
        let (batch, row) = (at.batch as usize, at.row as usize);
        let sizes = heavy.iter().map(|sizes| sizes.of(batch, row));
        let full = current == batch_size
            || sizes
                .clone()
                .zip(&bytes)
                .any(|(size, &held)| held + size > max_bytes);
        if full && current > 0 {
            lengths.push(current);
            current = 0;
            bytes.iter_mut().for_each(|b| *b = 0);
        }
        for (held, size) in bytes.iter_mut().zip(sizes) {
            *held += size;
        }
        current += 1;
    }
    if current > 0 {
        lengths.push(current);
    }
    lengths
}

/// What each row of one column puts into its 32-bit offsets, per input batch.
enum RowSizes<'a> {
    /// A `Utf8` or `Binary` column: its offsets.
    Offsets(Vec<&'a [i32]>),
    /// A nested column: each row's elements and bytes under 32-bit offsets.
    Counted(Vec<Vec<usize>>),
}

impl RowSizes<'_> {
    fn of(&self, batch: usize, row: usize) -> usize {
        match self {
            Self::Offsets(offsets) => (offsets[batch][row + 1] - offsets[batch][row]) as usize,
            Self::Counted(sizes) => sizes[batch][row],
        }
    }

    /// The whole run's.
    fn total(&self) -> usize {
        match self {
            Self::Offsets(offsets) => offsets
                .iter()
                .map(|o| (o[o.len() - 1] - o[0]) as usize)
                .sum(),
            Self::Counted(sizes) => sizes.iter().flatten().sum(),
        }
    }
}

/// The sizes of column `c`'s rows, when it holds 32-bit offsets.
fn row_sizes(rows: &RunRows, c: usize) -> Option<RowSizes<'_>> {
    let data_type = rows.column_type(c)?;
    if matches!(data_type, DataType::Utf8 | DataType::Binary) {
        return Some(RowSizes::Offsets(
            rows.batches()
                .iter()
                .map(|batch| string_offsets(batch.column(c).as_ref()))
                .collect(),
        ));
    }
    has_offsets(data_type).then(|| {
        RowSizes::Counted(
            rows.batches()
                .iter()
                .map(|batch| nested_sizes(batch.column(c).as_ref()))
                .collect(),
        )
    })
}

fn string_offsets(column: &dyn Array) -> &[i32] {
    match column.data_type() {
        DataType::Utf8 => column.as_string::<i32>().value_offsets(),
        _ => column.as_binary::<i32>().value_offsets(),
    }
}

/// Whether values of `data_type` hold 32-bit offsets at any level.
fn has_offsets(data_type: &DataType) -> bool {
    match data_type {
        DataType::Utf8 | DataType::Binary | DataType::List(_) | DataType::Map(..) => true,
        DataType::LargeList(field) | DataType::FixedSizeList(field, _) => {
            has_offsets(field.data_type())
        }
        DataType::Struct(fields) => fields.iter().any(|f| has_offsets(f.data_type())),
        _ => false,
    }
}

/// For rows with 32-bit `offsets` into `child`: each row's elements and its share of the
/// child's sizes.
fn counted_with_elements(offsets: &[i32], child: &dyn Array) -> Vec<usize> {
    let ranges = offsets.windows(2).map(|w| (w[0] as usize, w[1] as usize));
    summed_over(child, ranges)
        .into_iter()
        .zip(offsets.windows(2))
        .map(|(nested, w)| (w[1] - w[0]) as usize + nested)
        .collect()
}

/// `child`'s sizes summed over each of `ranges` (of its rows).
fn summed_over(child: &dyn Array, ranges: impl Iterator<Item = (usize, usize)>) -> Vec<usize> {
    let mut prefix = vec![0usize];
    for size in nested_sizes(child) {
        prefix.push(prefix[prefix.len() - 1] + size);
    }
    ranges
        .map(|(start, end)| prefix[end] - prefix[start])
        .collect()
}

/// Each row's list elements and string bytes under 32-bit offsets, summed over levels.
fn nested_sizes(column: &dyn Array) -> Vec<usize> {
    let rows = column.len();
    if !has_offsets(column.data_type()) {
        return vec![0; rows];
    }
    match column.data_type() {
        DataType::Utf8 | DataType::Binary => string_offsets(column)
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .collect(),
        DataType::List(_) => {
            let list = column.as_list::<i32>();
            counted_with_elements(list.value_offsets(), list.values().as_ref())
        }
        DataType::Map(..) => {
            let map = column.as_map();
            counted_with_elements(map.value_offsets(), map.entries())
        }
        DataType::LargeList(_) => {
            let list = column.as_list::<i64>();
            let ranges = list
                .value_offsets()
                .windows(2)
                .map(|w| (w[0] as usize, w[1] as usize));
            summed_over(list.values().as_ref(), ranges)
        }
        DataType::FixedSizeList(_, width) => {
            let list = column.as_fixed_size_list();
            let width = *width as usize;
            summed_over(
                list.values().as_ref(),
                (0..rows).map(|r| (r * width, (r + 1) * width)),
            )
        }
        DataType::Struct(_) => {
            let mut sizes = vec![0; rows];
            for child in column.as_struct().columns() {
                for (size, child) in sizes.iter_mut().zip(nested_sizes(child.as_ref())) {
                    *size += child;
                }
            }
            sizes
        }
        _ => vec![0; rows],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, RecordBatch, StringArray};
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn batch(values: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let a = Int32Array::from_iter_values(0..values.len() as i32);
        RecordBatch::try_new(
            schema,
            vec![Arc::new(a), Arc::new(StringArray::from(values.to_vec()))],
        )
        .unwrap()
    }

    #[test]
    fn batches_are_cut_before_their_strings_pass_the_offsets() {
        let rows = RunRows::new(vec![
            batch(&["aaaa", "b", "cccccc"]),
            batch(&["dd", "eeeee"]),
        ]);
        let permutation = [2, 0, 4, 1, 3];
        // 18 bytes in all: within 20, batches of 2 rows.
        assert_eq!(batch_lengths(&rows, &permutation, 2, 20), vec![2, 2, 1]);
        // At most 10 bytes a batch: 6 + 4 | 5 + 1 + 2.
        assert_eq!(batch_lengths(&rows, &permutation, 8, 10), vec![2, 3]);
        // At most 6: 6 | 4 | 5 + 1 | 2.
        assert_eq!(batch_lengths(&rows, &permutation, 8, 6), vec![1, 1, 2, 1]);
        assert_eq!(batch_lengths(&rows, &[], 8, 6), Vec::<usize>::new());
    }

    #[test]
    fn nested_columns_count_their_elements_and_bytes() {
        use arrow::array::{ArrayRef, ListBuilder, StringBuilder, StructArray};
        // Row sizes: [3 elements + 6 bytes, 1 + 1, 0, 2 + 10].
        let mut lists = ListBuilder::new(StringBuilder::new());
        for row in [&["aa", "bb", "cc"][..], &["d"], &[], &["eeeee", "fffff"]] {
            for value in row {
                lists.values().append_value(value);
            }
            lists.append(true);
        }
        let lists: ArrayRef = Arc::new(lists.finish());
        assert_eq!(nested_sizes(lists.as_ref()), vec![9, 2, 0, 12]);
        let strings: ArrayRef = Arc::new(StringArray::from(vec!["xyz", "", "q", "rr"]));
        let structs = StructArray::from(vec![
            (
                Arc::new(Field::new("l", lists.data_type().clone(), true)),
                Arc::clone(&lists),
            ),
            (
                Arc::new(Field::new("s", DataType::Utf8, true)),
                Arc::clone(&strings),
            ),
        ]);
        assert_eq!(nested_sizes(&structs), vec![12, 2, 1, 14]);
        // A slice counts its own rows.
        assert_eq!(nested_sizes(&structs.slice(1, 2)), vec![2, 1]);
        let schema = Arc::new(Schema::new(vec![Field::new(
            "n",
            structs.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(structs)]).unwrap();
        let rows = RunRows::new(vec![batch]);
        // 29 in all: within 30, whole batches; at most 14 a batch: 14 | 12 + 2 | 1.
        assert_eq!(batch_lengths(&rows, &[0, 1, 2, 3], 4, 30), vec![4]);
        assert_eq!(batch_lengths(&rows, &[3, 0, 1, 2], 4, 14), vec![1, 2, 1]);
        assert!(!has_offsets(&DataType::LargeUtf8));
    }
}
