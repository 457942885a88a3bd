//! Dictionary-encoded sort keys: rank the dictionary values once, sort the rows by rank.
//!
//! Arrow orders a dictionary array by its values, not its keys. The distinct values arrays
//! of a column's batches (batches that share a dictionary share its `Arc`) are put side by
//! side and sorted once; equal values get equal ranks (dense ranking), and a row's limb is
//! the rank of the value its key points at. The ranks order the rows exactly as the values
//! do, whatever the dictionaries hold: unused values, repeated values, a different
//! dictionary per batch. Nulls (a null key, or a key pointing at a null value) are the
//! column's logical nulls and are ordered by the null flag, as for any other type.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow::array::{make_comparator, Array, ArrayRef, AsArray};
use arrow::compute::{concat, sort_to_indices, SortOptions};
use arrow::datatypes::DataType;
use datafusion::arrow;
use datafusion::common::Result;

/// Whether a dictionary with values of `value_type` can be a sort key (its values can be
/// ranked); `supported` says whether `value_type` itself can.
pub(super) fn is_rankable(value_type: &DataType, supported: bool) -> bool {
    supported && !matches!(value_type, DataType::Dictionary(_, _) | DataType::Null)
}

/// The rank limb of every row of the dictionary `arrays` (one per batch, in run order);
/// rows that are null get an arbitrary rank.
pub(super) fn rank_limb(arrays: &[ArrayRef], rows: usize) -> Result<Vec<u64>> {
    let mut dictionaries: Vec<ArrayRef> = Vec::new();
    let mut bases = Vec::with_capacity(arrays.len());
    let mut base = 0;
    for array in arrays {
        let values = array.as_any_dictionary().values();
        match dictionaries.iter().position(|d| Arc::ptr_eq(d, values)) {
            Some(i) => bases.push(dictionaries[..i].iter().map(|d| d.len()).sum()),
            None => {
                bases.push(base);
                base += values.len();
                dictionaries.push(values.clone());
            }
        }
    }
    let ranks = match dictionaries.as_slice() {
        [] => Vec::new(),
        [only] => dense_ranks(only)?,
        many => dense_ranks(&concat(
            &many.iter().map(|d| d.as_ref()).collect::<Vec<_>>(),
        )?)?,
    };
    let mut limb = Vec::with_capacity(rows);
    for (array, base) in arrays.iter().zip(bases) {
        let dictionary = array.as_any_dictionary();
        if dictionary.values().is_empty() {
            // Every key is null (there is nothing to point at).
            limb.extend(std::iter::repeat_n(0, array.len()));
            continue;
        }
        limb.extend(
            dictionary
                .normalized_keys()
                .into_iter()
                .map(|key| ranks[base + key]),
        );
    }
    Ok(limb)
}

/// The dense rank of each value of `values` in ascending order (nulls first, rank 0).
fn dense_ranks(values: &ArrayRef) -> Result<Vec<u64>> {
    let options = SortOptions::default();
    let order = sort_to_indices(values, Some(options), None)?;
    let compare = make_comparator(values.as_ref(), values.as_ref(), options)?;
    let mut ranks = vec![0u64; values.len()];
    let mut rank = 0;
    let mut previous: Option<usize> = None;
    for index in order.values().iter().map(|i| *i as usize) {
        if let Some(previous) = previous {
            if compare(previous, index) != Ordering::Equal {
                rank += 1;
            }
        }
        ranks[index] = rank;
        previous = Some(index);
    }
    Ok(ranks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{DictionaryArray, Int8Array, StringArray};
    use arrow::datatypes::Int8Type;

    fn dictionary(keys: Vec<Option<i8>>, values: &ArrayRef) -> ArrayRef {
        Arc::new(DictionaryArray::<Int8Type>::new(
            Int8Array::from(keys),
            values.clone(),
        ))
    }

    #[test]
    fn ranks_follow_values_across_dictionaries() {
        let first: ArrayRef = Arc::new(StringArray::from(vec!["pear", "apple", "fig", "apple"]));
        let second: ArrayRef = Arc::new(StringArray::from(vec!["zebra", "fig"]));
        let arrays = [
            dictionary(vec![Some(0), Some(3), Some(1)], &first),
            dictionary(vec![Some(1), Some(0), None], &second),
            dictionary(vec![Some(2)], &first),
        ];
        let limb = rank_limb(&arrays, 7).unwrap();
        // apple = 0, fig = 1, pear = 2, zebra = 3; the null row's rank is not read.
        assert_eq!(&limb[..5], &[2, 0, 0, 1, 3]);
        assert_eq!(limb[6], 1);
    }

    #[test]
    fn empty_dictionary_means_all_null() {
        let values: ArrayRef = Arc::new(StringArray::from(Vec::<&str>::new()));
        let limb = rank_limb(&[dictionary(vec![None, None], &values)], 2).unwrap();
        assert_eq!(limb, vec![0, 0]);
    }
}
