//! One column of all the batches a window computes at once, concatenated on all cores.
//!
//! Arrow's `concat` copies on one thread: for a window without `PARTITION BY` over 60 M
//! rows, that is a 16-byte decimal argument, 960 MB, copied while the other cores wait.
//! Fixed-width columns are copied here batch by batch in parallel into one buffer (their
//! validity appended in order); other types take arrow's `concat`.

use std::sync::Arc;

use arrow::array::builder::NullBufferBuilder;
use arrow::array::{downcast_primitive_array, Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::buffer::ScalarBuffer;
use arrow::compute::concat;
use arrow::datatypes::ArrowPrimitiveType;
use datafusion::arrow;
use datafusion::common::Result;
use rayon::prelude::*;

/// Fewer rows than this are concatenated by arrow alone.
const PARALLEL_ROWS: usize = 1 << 16;

/// `parts` (arrays of one type) as one array, in order.
pub(crate) fn concat_arrays(parts: &[ArrayRef]) -> Result<ArrayRef> {
    if let [one] = parts {
        return Ok(Arc::clone(one));
    }
    let rows: usize = parts.iter().map(|p| p.len()).sum();
    if rows >= PARALLEL_ROWS && parts[0].data_type().is_primitive() {
        let first = parts[0].as_ref();
        return Ok(downcast_primitive_array!(
            first => concat_primitive(first, parts, rows),
            _ => concat_with_arrow(parts)?,
        ));
    }
    concat_with_arrow(parts)
}

fn concat_with_arrow(parts: &[ArrayRef]) -> Result<ArrayRef> {
    let refs: Vec<&dyn Array> = parts.iter().map(|p| p.as_ref()).collect();
    Ok(concat(&refs)?)
}

/// Fixed-width `parts` (all of `first`'s type) copied in parallel into one buffer.
fn concat_primitive<T: ArrowPrimitiveType>(
    first: &PrimitiveArray<T>,
    parts: &[ArrayRef],
    rows: usize,
) -> ArrayRef {
    let mut values: Vec<T::Native> = (0..rows)
        .into_par_iter()
        .map(|_| T::Native::default())
        .collect();
    let mut slices = Vec::with_capacity(parts.len());
    let mut rest = values.as_mut_slice();
    for part in parts {
        let (head, tail) = rest.split_at_mut(part.len());
        slices.push(head);
        rest = tail;
    }
    slices
        .into_par_iter()
        .zip(parts.par_iter())
        .for_each(|(out, part)| out.copy_from_slice(part.as_primitive::<T>().values()));
    let nulls = match parts.iter().any(|p| p.null_count() > 0) {
        false => None,
        true => {
            let mut builder = NullBufferBuilder::new(rows);
            for part in parts {
                match part.nulls() {
                    Some(nulls) => builder.append_buffer(nulls),
                    None => builder.append_n_non_nulls(part.len()),
                }
            }
            builder.finish()
        }
    };
    let array = PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls)
        .with_data_type(first.data_type().clone());
    Arc::new(array)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int32Array, StringArray};

    #[test]
    fn parallel_concatenation_equals_arrows() {
        let parts: Vec<ArrayRef> = (0..40)
            .map(|p| {
                let values: Vec<Option<i128>> = (0..3000)
                    .map(|i| ((i + p) % 7 != 0).then_some((i * p) as i128))
                    .collect();
                Arc::new(
                    Decimal128Array::from(values)
                        .with_precision_and_scale(20, 3)
                        .unwrap(),
                ) as ArrayRef
            })
            .collect();
        let ours = concat_arrays(&parts).unwrap();
        assert_eq!(ours.as_ref(), concat_with_arrow(&parts).unwrap().as_ref());
        assert_eq!(ours.data_type(), parts[0].data_type());
        let without_nulls: Vec<ArrayRef> = (0..30)
            .map(|p| Arc::new(Int32Array::from_iter_values(p * 5000..(p + 1) * 5000)) as ArrayRef)
            .collect();
        let ours = concat_arrays(&without_nulls).unwrap();
        assert_eq!(ours.null_count(), 0);
        assert_eq!(
            ours.as_ref(),
            concat_with_arrow(&without_nulls).unwrap().as_ref()
        );
        let strings: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(StringArray::from(vec![None, Some("c")])),
        ];
        assert_eq!(concat_arrays(&strings).unwrap().len(), 4);
    }
}
