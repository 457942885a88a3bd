//! Comparing a sort's output with DataFusion's: keys exactly (floats bitwise, through the
//! row format's total order), full rows as a multiset within each group of equal keys,
//! and stability through a row-id column.

use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::row::{RowConverter, SortField};

/// Byte rows of `columns` of `batch`, comparable for exact equality.
fn byte_rows(batch: &RecordBatch, columns: &[usize]) -> Vec<Vec<u8>> {
    let arrays: Vec<ArrayRef> = columns.iter().map(|&c| batch.column(c).clone()).collect();
    let fields = arrays
        .iter()
        .map(|a| SortField::new(a.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields).unwrap();
    let rows = converter.convert_columns(&arrays).unwrap();
    rows.iter().map(|r| r.as_ref().to_vec()).collect()
}

fn concat(batches: &[RecordBatch]) -> Option<RecordBatch> {
    let schema = batches.first()?.schema();
    Some(concat_batches(&schema, batches).unwrap())
}

/// Asserts `actual` equals `expected` as a sort result on `key_columns`; `context` (seed,
/// query, parameters) is printed on failure.
pub fn assert_same_sort(
    expected: &[RecordBatch],
    actual: &[RecordBatch],
    key_columns: &[usize],
    context: &str,
) {
    let expected_rows: usize = expected.iter().map(|b| b.num_rows()).sum();
    let actual_rows: usize = actual.iter().map(|b| b.num_rows()).sum();
    assert_eq!(actual_rows, expected_rows, "row count differs: {context}");
    let (Some(expected), Some(actual)) = (concat(expected), concat(actual)) else {
        return;
    };
    let all: Vec<usize> = (0..expected.num_columns()).collect();
    let (ek, ak) = (
        byte_rows(&expected, key_columns),
        byte_rows(&actual, key_columns),
    );
    if let Some(i) = (0..ek.len()).find(|&i| ek[i] != ak[i]) {
        panic!("sort keys differ first at row {i}: {context}");
    }
    let (mut er, mut ar) = (byte_rows(&expected, &all), byte_rows(&actual, &all));
    let mut start = 0;
    while start < ek.len() {
        let end = (start..ek.len())
            .find(|&i| ek[i] != ek[start])
            .unwrap_or(ek.len());
        er[start..end].sort();
        ar[start..end].sort();
        assert!(
            er[start..end] == ar[start..end],
            "rows of the tie group at {start}..{end} differ: {context}"
        );
        start = end;
    }
}

/// Asserts that within each group of equal keys, `row_id_column` increases.
pub fn assert_stable(
    batches: &[RecordBatch],
    key_columns: &[usize],
    row_id_column: usize,
    context: &str,
) {
    assert_stable_by(batches, key_columns, row_id_column, |id| id, context);
}

/// Asserts that within each group of equal keys, `place(row id)` increases: the row ids of
/// `row_id_column` mapped to their place in the input (when the input is not in row-id
/// order).
pub fn assert_stable_by(
    batches: &[RecordBatch],
    key_columns: &[usize],
    row_id_column: usize,
    place: impl Fn(i64) -> i64,
    context: &str,
) {
    let Some(batch) = concat(batches) else {
        return;
    };
    let keys = byte_rows(&batch, key_columns);
    let ids = batch.column(row_id_column).as_primitive::<Int64Type>();
    for i in 1..keys.len() {
        if keys[i] == keys[i - 1] {
            assert!(
                place(ids.value(i - 1)) < place(ids.value(i)),
                "tie at row {i} out of input order (row ids {} at {}, {} at {}): {context}",
                ids.value(i - 1),
                place(ids.value(i - 1)),
                ids.value(i),
                place(ids.value(i)),
            );
        }
    }
}
