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

use datafusion::common::{DataFusionError, Result};
use datafusion::config::ExtensionOptions;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion_distributed::{DistributedExt, Worker, WorkerQueryContext};
use gpusort::codec::GpuSortCodec;
use gpusort::{GpuSortConfig, GpuSortRule};
use http::HeaderMap;

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
        let mut builder =
            self.with_distributed_option_extension_from_headers::<GpuSortConfig>(headers)?;
        if let Some(config) = builder
            .config()
            .as_mut()
            .and_then(|c| c.options_mut().extensions.get_mut::<GpuSortConfig>())
        {
            set_from_headers(config, headers)?;
        }
        Ok(builder.with_distributed_user_codec(GpuSortCodec))
    }
}

/// Sets each `gpu_sort.*` setting that `headers` carry. datafusion-distributed names a
/// setting's header after the extension's prefix and the setting's entry key; gpusort's
/// entry keys are full names (`gpu_sort.min_rows`, as `SHOW` lists them), so the header
/// ends in `gpu_sort.gpu_sort.min_rows`, which datafusion-distributed's own reading skips.
fn set_from_headers(config: &mut GpuSortConfig, headers: &HeaderMap) -> Result<()> {
    for entry in config.entries() {
        let sent = headers.iter().find(|(name, _)| {
            let name = name.as_str();
            name.strip_suffix(entry.key.as_str())
                .is_some_and(|head| head.ends_with('.') || head.ends_with('-'))
        });
        if let Some((_, value)) = sent {
            let value = value.to_str().map_err(|e| {
                DataFusionError::Configuration(format!("header of {}: {e}", entry.key))
            })?;
            ExtensionOptions::set(config, &entry.key, value)?;
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn headers_set_the_settings_they_name_and_no_other() {
        let mut headers = HeaderMap::new();
        let name = "x-datafusion-distributed-config-gpu_sort.gpu_sort.device_gather_min_rows";
        headers.insert(
            http::HeaderName::from_static(name),
            HeaderValue::from_static("5"),
        );
        let mut config = GpuSortConfig::default();
        let min_rows = config.min_rows;
        set_from_headers(&mut config, &headers).unwrap();
        assert_eq!(config.device_gather_min_rows, 5);
        assert_eq!(config.min_rows, min_rows);
    }
}
