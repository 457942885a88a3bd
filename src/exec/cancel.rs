//! Stopping a sort whose consumers went away.
//!
//! ```text
//!  output stream dropped (CancelOnDrop), or the last partition of a combined sort let go
//!     → Cancel::cancel: the async tasks are aborted by DataFusion's stream; the blocking
//!       jobs (a run being sorted or gathered) look at the flag between stages — before a
//!       run is sorted, before it is gathered, before every output batch — and stop there
//!  every blocking job is counted in the exec's live jobs while it runs
//! ```
//!
//! So a dropped query stops within the stage it is in: at most the device sort of one run
//! (or piece) finishes, and its memory, device memory and thread go back.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::arrow;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::RecordBatchStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::Stream;

/// Whether a sort's consumers went away, and the count of its exec's blocking jobs.
#[derive(Debug, Clone, Default)]
pub(super) struct Cancel {
    cancelled: Arc<AtomicBool>,
    /// The blocking jobs of every execution of one exec.
    jobs: Arc<AtomicUsize>,
}

impl Cancel {
    /// A flag of its own, its jobs counted in `jobs`.
    pub(super) fn counting(jobs: Arc<AtomicUsize>) -> Self {
        Self {
            cancelled: Arc::default(),
            jobs,
        }
    }

    /// A flag of its own, its jobs counted with this one's.
    pub(super) fn fresh(&self) -> Self {
        Self::counting(Arc::clone(&self.jobs))
    }

    /// Tells every job of the sort to stop.
    pub(super) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// Whether the sort was cancelled.
    pub(super) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// An error when the sort was cancelled (nobody reads it: it only ends the job).
    pub(super) fn check(&self) -> Result<()> {
        match self.is_cancelled() {
            true => Err(DataFusionError::Execution(
                "gpusort: the sort was cancelled (its consumers went away)".to_string(),
            )),
            false => Ok(()),
        }
    }

    /// Runs `work` on a blocking thread, counted among the live jobs while it runs.
    pub(super) async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let job = LiveJob::start(Arc::clone(&self.jobs));
        tokio::task::spawn_blocking(move || {
            let _job = job;
            work()
        })
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
    }

    /// `stream`, cancelling this sort when it is dropped.
    pub(super) fn on_drop(&self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        Box::pin(CancelOnDrop {
            stream,
            cancel: self.clone(),
        })
    }
}

/// One running blocking job; counted until dropped (also when the job panics).
struct LiveJob(Arc<AtomicUsize>);

impl LiveJob {
    fn start(jobs: Arc<AtomicUsize>) -> Self {
        jobs.fetch_add(1, Ordering::SeqCst);
        Self(jobs)
    }
}

impl Drop for LiveJob {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An output stream that cancels its sort when dropped.
struct CancelOnDrop {
    stream: SendableRecordBatchStream,
    cancel: Cancel,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Stream for CancelOnDrop {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.stream.as_mut().poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.stream.size_hint()
    }
}

impl RecordBatchStream for CancelOnDrop {
    fn schema(&self) -> SchemaRef {
        self.stream.schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_are_counted_while_they_run_and_a_cancel_is_seen_by_every_clone() {
        let jobs = Arc::new(AtomicUsize::new(0));
        let cancel = Cancel::counting(Arc::clone(&jobs));
        let (seen, counted) = {
            let (cancel, jobs) = (cancel.clone(), Arc::clone(&jobs));
            cancel
                .clone()
                .blocking(move || Ok((cancel.is_cancelled(), jobs.load(Ordering::SeqCst))))
                .await
                .unwrap()
        };
        assert_eq!((seen, counted), (false, 1));
        assert_eq!(jobs.load(Ordering::SeqCst), 0);
        let other = cancel.fresh();
        cancel.clone().cancel();
        assert!(cancel.check().is_err());
        assert!(other.check().is_ok(), "a fresh flag is its own");
    }
}
