//! Rows routed to hash partitions exactly as DataFusion's `RepartitionExec` routes them.
//!
//! A sort above a hash repartition (a window's `PARTITION BY g` plans
//! `SortExec(RepartitionExec(Hash([g], N)))`) may read the repartition's input itself: one
//! sort of every row by (partition id, sort keys) leaves each hash partition's rows
//! contiguous and sorted, without the repartition copying every row into per-partition
//! batches first.
//!
//! The partition of a row is `create_hashes(exprs, REPARTITION_RANDOM_STATE) % N`, the
//! function, seed and reduction `RepartitionExec` uses (DataFusion's hash join relies on the
//! same function to pair co-partitioned inputs), so the sort can declare the partitioning
//! `Hash(exprs, N)` honestly: any operator that trusts it (a window, a partitioned join
//! whose other side is repartitioned by DataFusion) sees the same rows in the same
//! partition as after a real repartition.

use std::cell::RefCell;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt16Array, UInt32Array, UInt8Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{UInt16Type, UInt8Type};
use datafusion::arrow;
use datafusion::common::hash_utils::create_hashes;
use datafusion::common::{plan_err, Result};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::repartition::REPARTITION_RANDOM_STATE;
use datafusion::physical_plan::Partitioning;
use rayon::prelude::*;

/// Most output partitions a routed sort supports: partition ids are sort keys of 16 bits
/// (8 bits up to 256 partitions: half the bytes to upload).
pub const MAX_ROUTED_PARTITIONS: usize = 1 << 16;

/// The hash partitioning `Hash(exprs, partitions)` a sort produces from unpartitioned input.
#[derive(Debug, Clone)]
pub struct HashRouting {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    partitions: usize,
}

/// The partition id of every row of one batch, and how many rows each partition got.
pub struct RoutedBatch {
    /// Partition id per row (`UInt8` up to 256 partitions, else `UInt16`).
    pub ids: ArrayRef,
    /// Rows per partition.
    pub counts: Vec<usize>,
}

impl HashRouting {
    /// Routing by `exprs` to `partitions` partitions (1 ..= [`MAX_ROUTED_PARTITIONS`]).
    pub fn try_new(exprs: Vec<Arc<dyn PhysicalExpr>>, partitions: usize) -> Result<Self> {
        if partitions == 0 || partitions > MAX_ROUTED_PARTITIONS {
            return plan_err!(
                "gpusort: hash routing to {partitions} partitions (supported: 1 ..= \
                 {MAX_ROUTED_PARTITIONS})"
            );
        }
        Ok(Self { exprs, partitions })
    }

    /// The routing of `partitioning`, when it is a hash partitioning this can reproduce.
    pub fn of(partitioning: &Partitioning) -> Option<Self> {
        match partitioning {
            Partitioning::Hash(exprs, partitions) => Self::try_new(exprs.clone(), *partitions).ok(),
            _ => None,
        }
    }

    /// The number of output partitions.
    pub fn partitions(&self) -> usize {
        self.partitions
    }

    /// The expressions whose values decide a row's partition.
    pub fn exprs(&self) -> &[Arc<dyn PhysicalExpr>] {
        &self.exprs
    }

    /// The partition of each value of `values`, when the routing is by one expression
    /// whose values they are (`HashRouting::id_table` tabulates them).
    pub fn ids_of_values(&self, values: &ArrayRef) -> Result<Vec<u16>> {
        let mut hashes = vec![0u64; values.len()];
        create_hashes(
            std::slice::from_ref(values),
            REPARTITION_RANDOM_STATE.random_state(),
            &mut hashes,
        )?;
        let mut counts = vec![0usize; self.partitions];
        Ok(reduce(&hashes, self.partitions as u64, &mut counts, |id| {
            id as u16
        }))
    }

    /// The partitioning it produces.
    pub fn partitioning(&self) -> Partitioning {
        Partitioning::Hash(self.exprs.clone(), self.partitions)
    }

    /// The partition of every row of `batch`.
    pub fn route(&self, batch: &RecordBatch) -> Result<RoutedBatch> {
        let arrays = self
            .exprs
            .iter()
            .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
            .collect::<Result<Vec<ArrayRef>>>()?;
        // One hash buffer per thread, reused from batch to batch: no allocation per batch,
        // and the buffer stays in the core's cache.
        thread_local! {
            static HASHES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
        }
        HASHES.with_borrow_mut(|hashes| {
            hashes.clear();
            hashes.resize(batch.num_rows(), 0);
            create_hashes(&arrays, REPARTITION_RANDOM_STATE.random_state(), hashes)?;
            let mut counts = vec![0usize; self.partitions];
            let divisor = self.partitions as u64;
            let ids: ArrayRef = if self.partitions <= 256 {
                Arc::new(UInt8Array::from(reduce(
                    hashes,
                    divisor,
                    &mut counts,
                    |id| id as u8,
                )))
            } else {
                Arc::new(UInt16Array::from(reduce(
                    hashes,
                    divisor,
                    &mut counts,
                    |id| id as u16,
                )))
            };
            Ok(RoutedBatch { ids, counts })
        })
    }

    /// The partition of every row of `batch` as a plain vector, and the rows per partition.
    pub(super) fn route_to_vec(&self, batch: &RecordBatch) -> Result<(Vec<usize>, Vec<usize>)> {
        let RoutedBatch { ids, counts } = self.route(batch)?;
        let ids = match ids.as_primitive_opt::<UInt8Type>() {
            Some(ids) => ids.values().iter().map(|&id| id as usize).collect(),
            None => ids
                .as_primitive::<UInt16Type>()
                .values()
                .iter()
                .map(|&id| id as usize)
                .collect(),
        };
        Ok((ids, counts))
    }

    /// Every batch routed, on all cores.
    pub fn route_all(&self, batches: &[RecordBatch]) -> Result<Vec<RoutedBatch>> {
        batches.par_iter().map(|b| self.route(b)).collect()
    }

    /// `batches` (in order) split into the rows of each partition, in the same order.
    pub fn split(&self, batches: Vec<RecordBatch>) -> Result<Vec<Vec<RecordBatch>>> {
        let pieces: Vec<Vec<(usize, RecordBatch)>> = batches
            .par_iter()
            .map(|batch| self.split_batch(batch))
            .collect::<Result<_>>()?;
        let mut partitions = vec![Vec::new(); self.partitions];
        for (partition, piece) in pieces.into_iter().flatten() {
            partitions[partition].push(piece);
        }
        Ok(partitions)
    }

    /// The non-empty parts of `batch`, one per partition, rows in batch order.
    fn split_batch(&self, batch: &RecordBatch) -> Result<Vec<(usize, RecordBatch)>> {
        let (ids, counts) = self.route_to_vec(batch)?;
        let mut indices: Vec<Vec<u32>> = counts
            .iter()
            .map(|&count| Vec::with_capacity(count))
            .collect();
        for (row, &id) in ids.iter().enumerate() {
            indices[id].push(row as u32);
        }
        indices
            .into_iter()
            .enumerate()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(partition, rows)| {
                let piece = if rows.len() == batch.num_rows() {
                    batch.clone()
                } else {
                    take_record_batch(batch, &UInt32Array::from(rows))?
                };
                Ok((partition, piece))
            })
            .collect()
    }
}

/// `hash % divisor` per hash, as RepartitionExec reduces it (a mask when `divisor` is a
/// power of two: the same value without a division per row), counted into `counts`.
fn reduce<T>(hashes: &[u64], divisor: u64, counts: &mut [usize], id: impl Fn(u64) -> T) -> Vec<T> {
    let mut count = |partition: u64| {
        counts[partition as usize] += 1;
        id(partition)
    };
    if divisor.is_power_of_two() {
        hashes.iter().map(|&h| count(h & (divisor - 1))).collect()
    } else {
        hashes.iter().map(|&h| count(h % divisor)).collect()
    }
}

/// The partition ids of routed batches as one column per batch (a sort key).
pub(super) fn id_arrays(routed: Vec<RoutedBatch>) -> Vec<ArrayRef> {
    routed.into_iter().map(|r| r.ids).collect()
}

/// Rows per partition over all routed batches.
pub(super) fn total_counts(routed: &[RoutedBatch], partitions: usize) -> Vec<usize> {
    let mut counts = vec![0usize; partitions];
    for batch in routed {
        debug_assert_eq!(batch.ids.len(), batch.counts.iter().sum::<usize>());
        for (total, count) in counts.iter_mut().zip(&batch.counts) {
            *total += count;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::execution::TaskContext;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_plan::collect_partitioned;
    use datafusion::physical_plan::repartition::RepartitionExec;

    fn batch(offset: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("rid", DataType::Int64, false),
        ]));
        let g = Int32Array::from_iter((offset..offset + rows).map(|i| {
            let v = (i * 7919 % 1013) as i32;
            (i % 11 != 0).then_some(v)
        }));
        let s = StringArray::from_iter(
            (offset..offset + rows).map(|i| (i % 5 != 0).then(|| format!("k{}", i % 37))),
        );
        let rid = Int64Array::from_iter_values(offset..offset + rows);
        RecordBatch::try_new(schema, vec![Arc::new(g), Arc::new(s), Arc::new(rid)]).unwrap()
    }

    /// The partition of each `rid` after DataFusion's own `RepartitionExec`.
    async fn repartitioned(
        batches: &[RecordBatch],
        exprs: Vec<Arc<dyn PhysicalExpr>>,
        partitions: usize,
    ) -> Vec<(i64, usize)> {
        let schema = batches[0].schema();
        let source = MemorySourceConfig::try_new(&[batches.to_vec()], schema, None).unwrap();
        let plan = RepartitionExec::try_new(
            DataSourceExec::from_data_source(source),
            Partitioning::Hash(exprs, partitions),
        )
        .unwrap();
        let outputs = collect_partitioned(Arc::new(plan), Arc::new(TaskContext::default()))
            .await
            .unwrap();
        let mut rows = Vec::new();
        for (partition, output) in outputs.iter().enumerate() {
            for b in output {
                let rid = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
                rows.extend(rid.values().iter().map(|&r| (r, partition)));
            }
        }
        rows.sort_unstable();
        rows
    }

    #[tokio::test]
    async fn routes_every_row_where_repartition_exec_sends_it() {
        let batches = vec![batch(0, 3000), batch(3000, 1), batch(3001, 2500)];
        let schema = batches[0].schema();
        for names in [vec!["g"], vec!["s"], vec!["g", "s"]] {
            let exprs: Vec<Arc<dyn PhysicalExpr>> =
                names.iter().map(|n| col(n, &schema).unwrap()).collect();
            for partitions in [1, 3, 16, 7, 300, 1024] {
                let expected = repartitioned(&batches, exprs.clone(), partitions).await;
                let routing = HashRouting::try_new(exprs.clone(), partitions).unwrap();
                let routed = routing.route_all(&batches).unwrap();
                let mut ours: Vec<(i64, usize)> = batches
                    .iter()
                    .flat_map(|b| {
                        let rid = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
                        let (ids, _) = routing.route_to_vec(b).unwrap();
                        rid.values().iter().copied().zip(ids).collect::<Vec<_>>()
                    })
                    .collect();
                ours.sort_unstable();
                assert_eq!(ours, expected, "keys {names:?}, {partitions} partitions");
                let counts = total_counts(&routed, partitions);
                for (p, count) in counts.iter().enumerate() {
                    let theirs = expected.iter().filter(|(_, q)| *q == p).count();
                    assert_eq!(*count, theirs, "partition {p} of {partitions}, {names:?}");
                }
            }
        }
    }

    #[test]
    fn split_keeps_row_order_within_each_partition() {
        let batches = vec![batch(0, 1000), batch(1000, 999)];
        let schema = batches[0].schema();
        let routing = HashRouting::try_new(vec![col("g", &schema).unwrap()], 5).unwrap();
        let parts = routing.split(batches.clone()).unwrap();
        let ids: Vec<Vec<usize>> = batches
            .iter()
            .map(|b| routing.route_to_vec(b).unwrap().0)
            .collect();
        let mut total = 0;
        for (p, part) in parts.iter().enumerate() {
            let rids: Vec<i64> = part
                .iter()
                .flat_map(|b| {
                    let rid = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
                    rid.values().to_vec()
                })
                .collect();
            assert!(
                rids.windows(2).all(|w| w[0] < w[1]),
                "partition {p} out of order"
            );
            for rid in &rids {
                let (b, row) = ((*rid / 1000) as usize, (*rid % 1000) as usize);
                assert_eq!(ids[b][row], p, "row {rid}");
            }
            total += rids.len();
        }
        assert_eq!(total, 1999);
    }

    #[test]
    fn rejects_partition_counts_ids_cannot_hold() {
        assert!(HashRouting::try_new(vec![], 0).is_err());
        assert!(HashRouting::try_new(vec![], MAX_ROUTED_PARTITIONS + 1).is_err());
        assert!(HashRouting::try_new(vec![], MAX_ROUTED_PARTITIONS).is_ok());
    }
}
