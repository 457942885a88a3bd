//! gpusort inside datafusion-distributed: each worker sorts its share of a query on its
//! own GPU (or its CPU), and the coordinator merges.
//!
//! ```no_run
//! use datafusion::execution::SessionStateBuilder;
//! use datafusion::prelude::SessionContext;
//! use datafusion_distributed::SessionStateBuilderExt;
//! use gpusort::GpuSortConfig;
//! use gpusort_distributed::DistributedGpuSortExt;
//!
//! // The coordinator: distributed planning, and gpusort with the settings the workers get.
//! let state = SessionStateBuilder::new()
//!     .with_default_features()
//!     .with_distributed_planner()
//!     .with_distributed_gpu_sort(GpuSortConfig::default())
//!     .build();
//! let ctx = SessionContext::new_with_state(state);
//! // Each worker: `gpusort_distributed::gpu_sort_worker()` served with tonic.
//! ```
//!
//! - [`GpuSortCodec`] (gpusort's `codec`, re-exported): `GpuSortExec` on the wire, nothing
//!   process-bound in it;
//! - [`DistributedGpuSortExt`], [`gpu_sort_worker_session`], [`gpu_sort_worker`]
//!   (`session`): the coordinator's and the workers' sessions;
//! - [`explain_distributed`] (`explain`): the distributed plan as text;
//! - on the coordinator (`coordinator`): [`StableMergeExec`] (`stable_merge`), its merge
//!   with ties in input order, on all cores (`parallel_merge`, one step of it in
//!   `chunk_merge`), every input read ahead (`read_ahead`); and [`WorkerErrorsExec`]
//!   (`worker_errors`), a worker without the codec explained.
//!
//! Where the sorts run is decided by `gpusort::GpuSortRule::partition_local`: every sort
//! is replaced where DataFusion planned it, and the merges and hash repartitions at which
//! datafusion-distributed cuts stages stay. See `docs/distributed.md`.

#![warn(missing_docs)]

mod chunk_merge;
mod coordinator;
mod explain;
mod parallel_merge;
mod read_ahead;
mod session;
mod stable_merge;
mod worker_errors;

pub use explain::explain_distributed;
pub use gpusort::codec::{
    GpuSortCodec, GpuSortExecProto, GpuSortNode, GpuSortNodeProto, HashRoutingProto,
    KeptColumnsProto, PartitionTopProto, SortOptionsProto, SortedWindowExecProto, FORMAT,
};
pub use session::{gpu_sort_worker, gpu_sort_worker_session, DistributedGpuSortExt};
pub use stable_merge::StableMergeExec;
pub use worker_errors::WorkerErrorsExec;
