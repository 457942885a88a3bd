//! The session the commands run in: DataFusion's defaults plus gpusort, with the rule kept
//! at hand to report its decisions.

use std::sync::Arc;

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use gpusort::{BackendChoice, GpuSortConfig, GpuSortRule, SessionStateBuilderExt};

/// A session with gpusort registered, and its rule.
pub struct Session {
    pub ctx: SessionContext,
    pub rule: Arc<GpuSortRule>,
}

/// A session using `backend`, with every other `gpu_sort` setting at its default.
pub fn new_session(backend: BackendChoice) -> Session {
    let mut config = GpuSortConfig::default();
    config.backend = backend;
    let rule = Arc::new(GpuSortRule::new());
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_information_schema(true))
        .with_default_features()
        .with_gpu_sort_rule(config, Arc::clone(&rule))
        .build();
    Session {
        ctx: SessionContext::new_with_state(state),
        rule,
    }
}
