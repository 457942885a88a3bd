//! Per-column gatherers, prepared once per run and shared by all its output batches.
//!
//! A run's column lives in many input arrays (one per buffered batch). Arrow's
//! `interleave` looks at every input array on every call, so gathering a run of `B`
//! batches into `B` output batches costs `B²` array visits per column: at 100 M rows
//! (12 000 batches) that was most of a query's time. Here the per-array work happens once:
//!
//! ```text
//!  primitive columns (ints, floats, decimals, dates, times, intervals …):
//!     values slices + validity of every input array, collected once
//!     output batch: value[i] = slices[batch(i)][row(i)]; validity likewise
//!  strings and binaries (`bytes`): views copied, or values copied behind new offsets
//!  every other type:
//!     arrow's interleave over only the input arrays this output batch reads
//! ```

use std::sync::Arc;

use arrow::array::PrimitiveArray;
use arrow::array::{downcast_primitive, Array, ArrayRef, ArrowPrimitiveType};
use arrow::buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use arrow::compute::interleave;
use arrow::datatypes::DataType;
use datafusion::arrow;
use datafusion::common::Result;

use super::bytes::{byte_gatherer, Views};

/// Where a row of a run lives: input batch and row within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowAt {
    /// Index of the buffered batch.
    pub batch: u32,
    /// Row within that batch.
    pub row: u32,
}

/// Builds one output column from row locations.
pub trait ColumnGather: Send + Sync {
    /// The column's values at `rows`, in that order.
    fn gather(&self, rows: &[RowAt]) -> Result<ArrayRef>;
}

/// The gatherer for one column given as one array per buffered batch (all of one type),
/// its view arrays' values shared or copied as `views` says.
pub fn column_gatherer(arrays: Vec<ArrayRef>, views: Views) -> Box<dyn ColumnGather> {
    macro_rules! primitive {
        ($t:ty, $arrays:ident) => {
            Box::new(PrimitiveGather::<$t>::new(&$arrays)) as Box<dyn ColumnGather>
        };
    }
    let data_type = match arrays.first() {
        Some(array) => array.data_type().clone(),
        None => DataType::Null,
    };
    if let Some(gather) = byte_gatherer(&arrays, views) {
        return gather;
    }
    downcast_primitive! {
        data_type => (primitive, arrays),
        _ => Box::new(InterleaveGather { arrays })
    }
}

/// Row locations from (batch, row) pairs (for tests).
#[cfg(test)]
pub(super) fn at(pairs: &[(u32, u32)]) -> Vec<RowAt> {
    pairs
        .iter()
        .map(|&(batch, row)| RowAt { batch, row })
        .collect()
}

/// The validity of each input array, or `None` when no input has a null.
pub(super) fn input_nulls(arrays: &[ArrayRef]) -> Option<Vec<Option<NullBuffer>>> {
    arrays
        .iter()
        .any(|a| a.null_count() > 0)
        .then(|| arrays.iter().map(|a| a.nulls().cloned()).collect())
}

/// The validity of the gathered `rows`, given [`input_nulls`].
pub(super) fn gather_nulls(
    nulls: Option<&Vec<Option<NullBuffer>>>,
    rows: &[RowAt],
) -> Option<NullBuffer> {
    nulls.map(|nulls| {
        let valid: BooleanBuffer = rows
            .iter()
            .map(|at| {
                nulls[at.batch as usize]
                    .as_ref()
                    .is_none_or(|n| n.is_valid(at.row as usize))
            })
            .collect();
        NullBuffer::new(valid)
    })
}

/// Fixed-width values read straight from the input arrays' buffers.
struct PrimitiveGather<T: ArrowPrimitiveType> {
    values: Vec<ScalarBuffer<T::Native>>,
    /// Validity of each input array; `None` when no input has a null.
    nulls: Option<Vec<Option<NullBuffer>>>,
    data_type: DataType,
}

impl<T: ArrowPrimitiveType> PrimitiveGather<T> {
    fn new(arrays: &[ArrayRef]) -> Self {
        let typed: Vec<&PrimitiveArray<T>> = arrays
            .iter()
            .map(|a| {
                a.as_any()
                    .downcast_ref::<PrimitiveArray<T>>()
                    .expect("column arrays share the column's type")
            })
            .collect();
        let nulls = input_nulls(arrays);
        Self {
            values: typed.iter().map(|a| a.values().clone()).collect(),
            nulls,
            data_type: arrays
                .first()
                .map_or(T::DATA_TYPE, |a| a.data_type().clone()),
        }
    }
}

impl<T: ArrowPrimitiveType> ColumnGather for PrimitiveGather<T> {
    fn gather(&self, rows: &[RowAt]) -> Result<ArrayRef> {
        let values: ScalarBuffer<T::Native> = rows
            .iter()
            .map(|at| self.values[at.batch as usize][at.row as usize])
            .collect();
        let nulls = gather_nulls(self.nulls.as_ref(), rows);
        let array =
            PrimitiveArray::<T>::try_new(values, nulls)?.with_data_type(self.data_type.clone());
        Ok(Arc::new(array))
    }
}

/// Any other type: arrow's `interleave` over the input arrays one output batch reads.
struct InterleaveGather {
    arrays: Vec<ArrayRef>,
}

impl ColumnGather for InterleaveGather {
    fn gather(&self, rows: &[RowAt]) -> Result<ArrayRef> {
        let mut used: Vec<u32> = rows.iter().map(|at| at.batch).collect();
        used.sort_unstable();
        used.dedup();
        let sources: Vec<&dyn Array> = used
            .iter()
            .map(|&b| self.arrays[b as usize].as_ref())
            .collect();
        let indices: Vec<(usize, usize)> = rows
            .iter()
            .map(|at| {
                let local = used.binary_search(&at.batch).unwrap_or_default();
                (local, at.row as usize)
            })
            .collect();
        Ok(interleave(&sources, &indices)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{StringArray, TimestampMillisecondArray};

    #[test]
    fn primitive_keeps_nulls_and_the_exact_type() {
        let a: ArrayRef =
            Arc::new(TimestampMillisecondArray::from(vec![Some(1), None]).with_timezone("+01:00"));
        let b: ArrayRef =
            Arc::new(TimestampMillisecondArray::from(vec![Some(3)]).with_timezone("+01:00"));
        let out = column_gatherer(vec![a.clone(), b], Views::Shared)
            .gather(&at(&[(1, 0), (0, 1), (0, 0)]))
            .unwrap();
        let expected: ArrayRef = Arc::new(
            TimestampMillisecondArray::from(vec![Some(3), None, Some(1)]).with_timezone("+01:00"),
        );
        assert_eq!(out.data_type(), a.data_type());
        assert_eq!(&out, &expected);
    }

    #[test]
    fn other_types_interleave_only_what_they_read() {
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(StringArray::from(vec![None, Some("c")])),
            Arc::new(StringArray::from(vec!["d"])),
        ];
        let out = column_gatherer(arrays, Views::Shared)
            .gather(&at(&[(2, 0), (1, 0), (0, 1)]))
            .unwrap();
        let expected: ArrayRef = Arc::new(StringArray::from(vec![Some("d"), None, Some("b")]));
        assert_eq!(&out, &expected);
    }
}
