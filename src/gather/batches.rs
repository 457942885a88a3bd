//! Where a run's output batches end: every `batch_size` rows, or sooner where the values
//! of a string or binary column with 32-bit offsets (`Utf8`, `Binary`) would pass what
//! those offsets address (2 GiB). A run of 2 M rows of 1 KiB strings gathered in one
//! batch (a window's sort asks for 16 Mi rows) would overflow; it is cut into batches that
//! each hold less. Columns whose whole run fits are not looked at row by row.

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
    let heavy: Vec<Vec<&[i32]>> = (0..rows.num_columns())
        .filter_map(|c| offsets_of(rows, c))
        .filter(|offsets| run_bytes(offsets) > max_bytes)
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
        let sizes = heavy
            .iter()
            .map(|offsets| (offsets[batch][row + 1] - offsets[batch][row]) as usize);
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

/// The offsets of column `c` in each input batch, when it is `Utf8` or `Binary`.
fn offsets_of(rows: &RunRows, c: usize) -> Option<Vec<&[i32]>> {
    fn offsets(column: &dyn Array) -> &[i32] {
        match column.data_type() {
            DataType::Utf8 => column.as_string::<i32>().value_offsets(),
            _ => column.as_binary::<i32>().value_offsets(),
        }
    }
    matches!(rows.column_type(c)?, DataType::Utf8 | DataType::Binary).then(|| {
        rows.batches()
            .iter()
            .map(|batch| offsets(batch.column(c).as_ref()))
            .collect()
    })
}

/// The value bytes all input batches of one column hold.
fn run_bytes(offsets: &[&[i32]]) -> usize {
    offsets
        .iter()
        .map(|o| (o[o.len() - 1] - o[0]) as usize)
        .sum()
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
}
