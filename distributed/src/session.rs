//! Setting up the sessions of a distributed gpusort: the coordinator's and the workers'.
//!
//! ```text
//!  coordinator: SessionStateBuilder
//!                 .with_distributed_planner()          datafusion-distributed
//!                 .with_distributed_worker_resolver(…)
//!                 .with_distributed_gpu_sort(config)   this crate: gpu_sort.* settings sent
//!                                                      to the workers with each task, the
//!                                                      partition-local rule, the codec
//!  worker:      Worker::from_session_builder(gpu_sort_worker_session)
//!                 or, composed with other setup, builder.with_gpu_sort_worker(&headers)?
//! ```

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion_distributed::{DistributedExt, Worker, WorkerQueryContext};
use gpusort::{GpuSortConfig, GpuSortRule};
use http::HeaderMap;

use crate::codec::GpuSortCodec;
use crate::coordinator::CoordinatorPlanner;

/// Registers gpusort in the sessions of a datafusion-distributed cluster.
pub trait DistributedGpuSortExt: Sized {
    /// For the coordinator: the `gpu_sort.*` settings (from `config`), sent to the workers
    /// with every task; [`GpuSortRule::partition_local`] after DataFusion's physical
    /// optimizer rules, so every sort below a merge or a hash repartition runs on the
    /// workers; [`GpuSortCodec`]; and a query planner around the session's that makes the
    /// coordinator's merges keep ties in input order and explains a worker's missing codec
    /// (`coordinator.rs`). Call it after `with_config`, which would replace the settings,
    /// and after `with_distributed_planner`, whose planner it wraps.
    fn with_distributed_gpu_sort(self, config: GpuSortConfig) -> Self;

    /// Like [`with_distributed_gpu_sort`](Self::with_distributed_gpu_sort), with the given
    /// rule (to read its [`GpuSortRule::last_decisions`] later); it should be
    /// [`GpuSortRule::partition_local`].
    fn with_distributed_gpu_sort_rule(self, config: GpuSortConfig, rule: Arc<GpuSortRule>) -> Self;

    /// For a worker: the `gpu_sort.*` settings the coordinator sent in `headers` (it sends
    /// them all, so they replace any the worker's builder had) and [`GpuSortCodec`].
    fn with_gpu_sort_worker(self, headers: &HeaderMap) -> Result<Self>;
}

impl DistributedGpuSortExt for SessionStateBuilder {
    fn with_distributed_gpu_sort(self, config: GpuSortConfig) -> Self {
        self.with_distributed_gpu_sort_rule(config, Arc::new(GpuSortRule::partition_local()))
    }

    fn with_distributed_gpu_sort_rule(
        mut self,
        config: GpuSortConfig,
        rule: Arc<GpuSortRule>,
    ) -> Self {
        let inner = self.query_planner().take();
        self.with_distributed_option_extension(config)
            .with_physical_optimizer_rule(rule)
            .with_distributed_user_codec(GpuSortCodec)
            .with_query_planner(Arc::new(CoordinatorPlanner { inner }))
    }

    fn with_gpu_sort_worker(self, headers: &HeaderMap) -> Result<Self> {
        Ok(self
            .with_distributed_option_extension_from_headers::<GpuSortConfig>(headers)?
            .with_distributed_user_codec(GpuSortCodec))
    }
}

/// The session of one query on a worker: the one datafusion-distributed prepared, with
/// [`DistributedGpuSortExt::with_gpu_sort_worker`]. Pass it to
/// `Worker::from_session_builder`.
pub async fn gpu_sort_worker_session(ctx: WorkerQueryContext) -> Result<SessionState> {
    Ok(ctx.builder.with_gpu_sort_worker(&ctx.headers)?.build())
}

/// A datafusion-distributed worker that runs gpusort's operators: serve it with
/// `tonic::transport::Server::builder().add_service(worker.into_worker_server())`.
pub fn gpu_sort_worker() -> Worker {
    Worker::from_session_builder(gpu_sort_worker_session)
}
