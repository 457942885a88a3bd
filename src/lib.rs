//! gpusort: sorting for Apache DataFusion on an NVIDIA GPU.
//!
//! One line turns it on; every `ORDER BY`, window sort and `COPY ... ORDER BY` of the
//! session then runs through [`GpuSortExec`]:
//!
//! ```no_run
//! use datafusion::execution::SessionStateBuilder;
//! use gpusort::{GpuSortConfig, SessionStateBuilderExt};
//!
//! let state = SessionStateBuilder::new()
//!     .with_default_features()
//!     .with_gpu_sort(GpuSortConfig::default())
//!     .build();
//! let ctx = datafusion::prelude::SessionContext::new_with_state(state);
//! ```
//!
//! Pipeline of one sort: `planner` (rule) → `exec` (operator: buffer, runs) → `keys`
//! (encode) → `sort` (backend) → `gather` (output batches). See `docs/architecture.md`.

#![warn(missing_docs)]

pub mod backend;
pub mod config;
pub mod cuda;
pub mod exec;
pub mod gather;
pub mod keys;
pub mod pipeline;
pub mod planner;
pub mod sort;
pub mod trace;
pub mod window;

use std::sync::Arc;

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

pub use config::{AlgorithmChoice, BackendChoice, GpuSortConfig};
pub use exec::GpuSortExec;
pub use planner::{DeclineReason, GpuSortRule, SortDecision};

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
