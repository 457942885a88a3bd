//! The coordinator's merge as a stream: sorted inputs in, one sorted output, merged on all
//! cores in steps.
//!
//! Each step waits until every unfinished input has a batch queued, takes every batch
//! that has already arrived, turns their sort keys into arrow `Rows` and merges the rows
//! that can leave ([`crate::chunk_merge`]), on a blocking thread with rayon. DataFusion's
//! own merge compares one row at a time on one thread: 100 M rows from two workers took
//! the coordinator 11.9 s of one core (docs/performance.md), most of the distributed
//! query.
//!
//! Memory: the queued batches and their key rows are counted in the memory pool
//! (`StableMergeExec`); past its limit the stream fails with `ResourcesExhausted`. At most
//! [`OUTPUT_BATCHES`] merged batches wait for the consumer.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::metrics::{BaselineMetrics, RecordOutput};
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc::Sender;

use crate::chunk_merge::{merge_ready, ready_counts, InputQueue};

/// Merged batches that may wait for the consumer before the merge pauses.
const OUTPUT_BATCHES: usize = 16;

/// What one merge needs besides its inputs.
pub(crate) struct MergeSettings {
    pub schema: SchemaRef,
    pub expr: LexOrdering,
    pub batch_size: usize,
    pub fetch: Option<usize>,
    pub metrics: BaselineMetrics,
    pub reservation: MemoryReservation,
}

/// `inputs` (each sorted by `settings.expr`) merged into one sorted stream, ties in input
/// order, at most `fetch` rows.
pub(crate) fn parallel_merge(
    inputs: Vec<SendableRecordBatchStream>,
    settings: MergeSettings,
) -> Result<SendableRecordBatchStream> {
    let fields = settings
        .expr
        .iter()
        .map(|e| {
            Ok(SortField::new_with_options(
                e.expr.data_type(&settings.schema)?,
                e.options,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let converter = Arc::new(RowConverter::new(fields)?);
    let mut builder =
        RecordBatchReceiverStream::builder(Arc::clone(&settings.schema), OUTPUT_BATCHES);
    let tx = builder.tx();
    builder.spawn(async move { run(inputs, converter, settings, tx).await });
    Ok(builder.build())
}

/// Received batches not yet converted: (input, batch).
type Fresh = Vec<(usize, RecordBatch)>;

/// The merge loop; returns when every input has ended, `fetch` rows were sent, or the
/// consumer went away.
async fn run(
    mut inputs: Vec<SendableRecordBatchStream>,
    converter: Arc<RowConverter>,
    settings: MergeSettings,
    tx: Sender<Result<RecordBatch>>,
) -> Result<()> {
    let MergeSettings {
        expr,
        batch_size,
        fetch,
        metrics,
        reservation,
        ..
    } = settings;
    let expr = Arc::new(expr);
    let mut queues: Vec<InputQueue> = (0..inputs.len()).map(|_| InputQueue::default()).collect();
    let mut left = fetch.unwrap_or(usize::MAX);
    let threads = rayon::current_num_threads();
    while left > 0 && !queues.iter().all(InputQueue::is_done) {
        let fresh = receive(&mut inputs, &mut queues).await?;
        // Conversion, the choice of ready rows and the merge are CPU work for all cores.
        let (converter_back, expr_back) = (Arc::clone(&converter), Arc::clone(&expr));
        let timer = metrics.elapsed_compute().timer();
        let step = tokio::task::spawn_blocking(move || {
            let outcome = step(
                &mut queues,
                fresh,
                &converter_back,
                &expr_back,
                batch_size,
                threads,
            );
            (queues, outcome)
        })
        .await
        .map_err(|e| {
            DataFusionError::Execution(format!("gpusort: the coordinator's merge failed: {e}"))
        })?;
        timer.done();
        queues = step.0;
        let (batches, added, freed) = step.1?;
        reservation.try_grow(added).map_err(|e| {
            DataFusionError::ResourcesExhausted(format!(
                "gpusort: the coordinator's merge queues what it cannot merge yet and passed \
                 the memory pool: {e}"
            ))
        })?;
        reservation.shrink(freed.min(reservation.size()));
        for batch in batches {
            let batch = match batch.num_rows() > left {
                true => batch.slice(0, left),
                false => batch,
            };
            left -= batch.num_rows();
            let batch = batch.record_output(&metrics);
            if tx.send(Ok(batch)).await.is_err() {
                return Ok(());
            }
            if left == 0 {
                break;
            }
        }
    }
    metrics.done();
    Ok(())
}

/// Waits until every unfinished input has a batch (queued or received now), then takes
/// every batch that has already arrived without waiting for more.
async fn receive(
    inputs: &mut [SendableRecordBatchStream],
    queues: &mut [InputQueue],
) -> Result<Fresh> {
    let mut fresh = Fresh::new();
    for (i, input) in inputs.iter_mut().enumerate() {
        let mut has_data = !queues[i].needs_data();
        while !queues[i].finished {
            let next = match has_data {
                true => match input.next().now_or_never() {
                    Some(next) => next,
                    None => break,
                },
                false => input.next().await,
            };
            match next {
                Some(batch) => {
                    let batch = batch?;
                    if batch.num_rows() > 0 {
                        fresh.push((i, batch));
                        has_data = true;
                    }
                }
                None => queues[i].finished = true,
            }
        }
    }
    Ok(fresh)
}

/// One step on a blocking thread: the fresh batches converted and queued, the ready rows
/// merged and consumed. Returns the merged batches and the bytes queued and let go.
fn step(
    queues: &mut [InputQueue],
    fresh: Fresh,
    converter: &RowConverter,
    expr: &LexOrdering,
    batch_size: usize,
    threads: usize,
) -> Result<(Vec<RecordBatch>, usize, usize)> {
    use rayon::prelude::*;
    let converted = fresh
        .into_par_iter()
        .map(|(input, batch)| {
            let keys = expr
                .iter()
                .map(|e| e.expr.evaluate(&batch)?.into_array(batch.num_rows()))
                .collect::<Result<Vec<ArrayRef>>>()?;
            let rows = converter.convert_columns(&keys)?;
            Ok((input, batch, rows))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut added = 0;
    for (input, batch, rows) in converted {
        added += queues[input].push(batch, rows);
    }
    let counts = ready_counts(queues);
    let batches = merge_ready(queues, &counts, batch_size, threads)?;
    let freed = queues
        .iter_mut()
        .zip(&counts)
        .map(|(queue, &count)| queue.consume(count))
        .sum();
    Ok((batches, added, freed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::compute::SortOptions;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryConsumer, MemoryPool};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::PhysicalSortExpr;
    use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("tag", DataType::Int64, false),
        ]))
    }

    /// (k, s, tag) rows of one input.
    type Rows3 = Vec<(Option<i64>, Option<String>, i64)>;

    fn batch(rows: &[(Option<i64>, Option<String>, i64)]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    }

    /// The order of `rows` the merge must give: by (k desc nulls first, s asc nulls last),
    /// ties in the order given (a stable sort).
    fn sorted_order(rows: &[(Option<i64>, Option<String>, i64)], expr: &LexOrdering) -> Vec<usize> {
        let b = batch(rows);
        let fields = expr
            .iter()
            .map(|e| SortField::new_with_options(e.expr.data_type(&schema()).unwrap(), e.options))
            .collect();
        let converter = RowConverter::new(fields).unwrap();
        let keys: Vec<ArrayRef> = expr
            .iter()
            .map(|e| {
                e.expr
                    .evaluate(&b)
                    .unwrap()
                    .into_array(b.num_rows())
                    .unwrap()
            })
            .collect();
        let converted = converter.convert_columns(&keys).unwrap();
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by(|&a, &b| converted.row(a).cmp(&converted.row(b)));
        order
    }

    /// The tags of every input's rows merged: inputs concatenated in order, sorted stably.
    fn expected(inputs: &[Rows3], expr: &LexOrdering) -> Vec<i64> {
        let all: Vec<_> = inputs.iter().flatten().cloned().collect();
        sorted_order(&all, expr)
            .into_iter()
            .map(|i| all[i].2)
            .collect()
    }

    fn ordering() -> LexOrdering {
        let s = schema();
        LexOrdering::new(vec![
            PhysicalSortExpr::new(
                col("k", &s).unwrap(),
                SortOptions {
                    descending: true,
                    nulls_first: true,
                },
            ),
            PhysicalSortExpr::new(
                col("s", &s).unwrap(),
                SortOptions {
                    descending: false,
                    nulls_first: false,
                },
            ),
        ])
        .unwrap()
    }

    /// Random sorted inputs with many ties and nulls, cut into batches of random sizes,
    /// which arrive with pauses between them.
    fn inputs(seed: u64, count: usize, rows: usize) -> Vec<Rows3> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let expr = ordering();
        let mut tag = 0;
        (0..count)
            .map(|_| {
                let n = rng.random_range(0..rows);
                let unsorted: Rows3 = (0..n)
                    .map(|_| {
                        tag += 1;
                        let k = (rng.random_range(0..10) > 0).then(|| rng.random_range(0..50));
                        let s = (rng.random_range(0..10) > 0)
                            .then(|| format!("s{}", rng.random_range(0..5)));
                        (k, s, tag)
                    })
                    .collect();
                sorted_order(&unsorted, &expr)
                    .into_iter()
                    .map(|i| unsorted[i].clone())
                    .collect()
            })
            .collect()
    }

    fn stream(rows: Rows3, seed: u64) -> SendableRecordBatchStream {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut batches = Vec::new();
        let mut at = 0;
        while at < rows.len() {
            let n = rng.random_range(1..2000).min(rows.len() - at);
            batches.push(batch(&rows[at..at + n]));
            at += n;
        }
        let delayed = futures::stream::iter(batches).then(|b| async move {
            tokio::task::yield_now().await;
            Ok(b)
        });
        Box::pin(RecordBatchStreamAdapter::new(schema(), delayed))
    }

    async fn merge(
        inputs: &[Rows3],
        fetch: Option<usize>,
        pool: &Arc<dyn MemoryPool>,
    ) -> Result<Vec<i64>> {
        let streams = inputs
            .iter()
            .enumerate()
            .map(|(i, rows)| stream(rows.clone(), i as u64))
            .collect();
        let settings = MergeSettings {
            schema: schema(),
            expr: ordering(),
            batch_size: 1000,
            fetch,
            metrics: BaselineMetrics::new(&ExecutionPlanMetricsSet::new(), 0),
            reservation: MemoryConsumer::new("test").register(pool),
        };
        let out: Vec<RecordBatch> = parallel_merge(streams, settings)?
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_>>()?;
        Ok(out
            .iter()
            .flat_map(|b| {
                let tags = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
                tags.values().to_vec()
            })
            .collect())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn equals_a_stable_sort_of_all_inputs() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        for seed in 0..6 {
            let inputs = inputs(seed, 1 + seed as usize % 5, 40_000);
            let got = merge(&inputs, None, &pool).await.unwrap();
            assert_eq!(got, expected(&inputs, &ordering()), "seed {seed}");
        }
        assert_eq!(pool.reserved(), 0, "every queued byte let go");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn stops_after_fetch_rows() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let inputs = inputs(7, 4, 20_000);
        let got = merge(&inputs, Some(1234), &pool).await.unwrap();
        assert_eq!(got, expected(&inputs, &ordering())[..1234]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_pool_it_fails_instead_of_growing() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1024));
        let inputs = inputs(3, 3, 20_000);
        let error = merge(&inputs, None, &pool).await.unwrap_err().to_string();
        assert!(error.contains("the coordinator's merge queues"), "{error}");
    }
}
