//! gpusort: sorting for Apache DataFusion on an NVIDIA GPU.
//!
//! One line turns it on; every `ORDER BY`, window sort and `COPY ... ORDER BY` of the
//! session then runs through [`GpuSortExec`], on the GPU where one is usable and on
//! gpusort's CPU backend where none is:
//!
//! ```
//! use datafusion::execution::SessionStateBuilder;
//! use datafusion::prelude::SessionContext;
//! use gpusort::{GpuSortConfig, SessionStateBuilderExt};
//!
//! # #[tokio::main]
//! # async fn main() -> datafusion::common::Result<()> {
//! let state = SessionStateBuilder::new()
//!     .with_default_features()
//!     .with_gpu_sort(GpuSortConfig::default())
//!     .build();
//! let ctx = SessionContext::new_with_state(state);
//!
//! let sql = "SELECT value % 7 AS k, value FROM generate_series(1, 200000) \
//!            ORDER BY k DESC, value";
//! let plan = ctx.sql(&format!("EXPLAIN {sql}")).await?.collect().await?;
//! let plan = datafusion::arrow::util::pretty::pretty_format_batches(&plan)?.to_string();
//! assert!(plan.contains("GpuSortExec"), "{plan}");
//!
//! let batches = ctx.sql(sql).await?.collect().await?;
//! let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
//! assert_eq!(rows, 200_000);
//! # Ok(())
//! # }
//! ```
//!
//! Pipeline of one sort: `planner` (rule) → `exec` (operator: buffer, runs) → `keys`
//! (encode) → `sort` (backend) → `gather` (output batches). See `docs/architecture.md`.
//!
//! # Public API
//!
//! For users of a DataFusion session:
//! - [`SessionStateBuilderExt`], [`gpu_sort_context`] and [`gpu_sort_context_with`] turn
//!   gpusort on; [`GpuSortConfig`] ([`AlgorithmChoice`], [`BackendChoice`]) holds the
//!   `gpu_sort.*` settings;
//! - [`GpuSortRule`] swaps DataFusion's sorts for [`GpuSortExec`] and says why it kept one
//!   ([`SortDecision`], [`DeclineReason`]); [`exec`] builds the operator by hand
//!   (`GpuSortOptions`, `HashRouting`);
//! - [`pipeline`] is the `gpusort sort` pipeline: Parquet files in, one sorted Parquet
//!   file out;
//! - `codec` (feature `proto`) writes gpusort's operators into DataFusion's protobuf
//!   plans and reads them back, for engines that ship plans between processes
//!   (datafusion-distributed).
//!
//! For the `gpusort` binary's benchmarks and the GPU tests (`tests/gpu/`), below the
//! operator:
//! - [`cuda`]: the device API (the process's runtime and the launchers reached through
//!   its fields, device buffers and transfers, injected faults, the tuning's switches);
//! - [`sort`]: the backend contract and the CPU sorts the GPU tests compare against;
//!   [`backend`] resolves a [`BackendChoice`] to a backend;
//! - [`keys`] and [`gather`]: the key encoding and the output batches, on the host;
//! - [`trace`]: the stage timeline of `gpusort bench sql --trace`.
//!
//! Everything else is private to the crate, and `unreachable_pub` (warned, so denied by
//! CI's clippy) keeps it so: an item marked `pub` must be reachable from here.

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod backend;
#[cfg(feature = "proto")]
pub mod codec;
mod config;
pub mod cuda;
pub mod exec;
pub mod gather;
pub mod keys;
pub mod pipeline;
mod planner;
pub mod sort;
pub mod trace;
mod window;

use std::sync::Arc;

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

pub use config::{
    parse_bytes, AlgorithmChoice, BackendChoice, DeviceMemoryLimit, DeviceSelection, GpuSortConfig,
};
pub use exec::GpuSortExec;
pub use planner::{DeclineReason, GpuSortRule, SortDecision};
pub use window::SortedWindowExec;

/// Registers gpusort in a [`SessionStateBuilder`].
pub trait SessionStateBuilderExt {
    /// Adds the `gpu_sort` settings (initialized from `config`) to the session config and
    /// appends [`GpuSortRule`] after DataFusion's physical optimizer rules. Call it after
    /// `with_config`, which would replace the settings.
    fn with_gpu_sort(self, config: GpuSortConfig) -> Self;

    /// Like [`with_gpu_sort`](Self::with_gpu_sort), registering the given rule (to read
    /// its [`GpuSortRule::last_decisions`] later).
    fn with_gpu_sort_rule(self, config: GpuSortConfig, rule: Arc<GpuSortRule>) -> Self;
}

impl SessionStateBuilderExt for SessionStateBuilder {
    fn with_gpu_sort(self, config: GpuSortConfig) -> Self {
        self.with_gpu_sort_rule(config, Arc::new(GpuSortRule::new()))
    }

    fn with_gpu_sort_rule(mut self, config: GpuSortConfig, rule: Arc<GpuSortRule>) -> Self {
        match self.config() {
            Some(session_config) => session_config.options_mut().extensions.insert(config),
            None => {
                *self.config() = Some(SessionConfig::new().with_option_extension(config));
            }
        }
        self.with_physical_optimizer_rule(rule)
    }
}

/// A `SessionContext` with DataFusion's defaults, `session_config`, and gpusort.
pub fn gpu_sort_context_with(
    session_config: SessionConfig,
    config: GpuSortConfig,
) -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_config(session_config)
        .with_default_features()
        .with_gpu_sort(config)
        .build();
    SessionContext::new_with_state(state)
}

/// A `SessionContext` with DataFusion's defaults and gpusort enabled by `config`.
pub fn gpu_sort_context(config: GpuSortConfig) -> SessionContext {
    gpu_sort_context_with(SessionConfig::new(), config)
}
