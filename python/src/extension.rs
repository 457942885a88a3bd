//! `gpusort.Extension`'s native half: the capsules datafusion-python 55 installs on its own
//! `SessionContext` (`with_extensions`, `SessionConfig.with_extension`).
//!
//! ```text
//!  gpusort.Extension (python/gpusort/__init__.py)   ExtensionCore (here)
//!  __datafusion_extension_options__() ────────────▶ extension_options  the gpu_sort.*
//!                                                    settings, so that SET and SHOW take them
//!  __datafusion_session_components__(ctx)
//!    codec.__datafusion_physical_extension_codec__ ▶ physical_codec  gpusort's operators,
//!                                                    and any other node by reference
//!    codec.__datafusion_logical_extension_codec__ ─▶ logical_codec   tables by reference
//!                                                    (in_process.rs)
//!  __datafusion_session_planner__(ctx, fallback) ─▶ planner         GpuSortPlanner around
//!                                                    the host's planner (planner.rs)
//! ```
//!
//! The host and this library each link their own DataFusion 55: plans cross as protobuf,
//! batches as Arrow's C data interface, and the host checks the FFI's major version.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::config::{ConfigExtension, ConfigField, ExtensionOptions};
use datafusion::execution::context::QueryPlanner;
use datafusion_ffi::config::extension_options::FFI_ExtensionOptions;
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
use datafusion_ffi::proto::physical_extension_codec::FFI_PhysicalExtensionCodec;
use datafusion_ffi::query_planner::FFI_QueryPlanner;
use datafusion_python_util::{
    create_logical_extension_capsule, create_physical_extension_capsule,
    create_query_planner_capsule, ffi_logical_codec_from_pycapsule,
    ffi_physical_codec_from_pycapsule, ffi_query_planner_from_pycapsule,
    ffi_task_context_provider_from_pycapsule,
};
use gpusort::GpuSortConfig;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::blocking::runtime;
use crate::errors::to_py_err;
use crate::in_process::{InProcessLogicalCodec, InProcessPhysicalCodec};
use crate::planner::GpuSortPlanner;

/// The settings and capsules of one `gpusort.Extension`.
#[pyclass(name = "ExtensionCore", module = "gpusort._gpusort", frozen)]
pub struct PyExtensionCore {
    settings: GpuSortConfig,
}

#[pymethods]
impl PyExtensionCore {
    /// gpusort's defaults, then `settings` (`gpu_sort.<name>` or `<name>` → value).
    #[new]
    #[pyo3(signature = (settings = None))]
    fn new(settings: Option<HashMap<String, String>>) -> PyResult<Self> {
        let mut config = GpuSortConfig::default();
        let prefix = <GpuSortConfig as ConfigExtension>::PREFIX;
        for (key, value) in settings.unwrap_or_default() {
            if key.contains('.') && !key.starts_with(&format!("{prefix}.")) {
                return Err(to_py_err(format!(
                    "{key}: gpusort.Extension takes gpu_sort.* settings; DataFusion's own go \
                     to datafusion.SessionConfig"
                )));
            }
            ConfigField::set(&mut config, &key, &value).map_err(to_py_err)?;
        }
        Ok(Self { settings: config })
    }

    /// Every setting by its full name, with its value.
    fn settings(&self) -> HashMap<String, String> {
        self.settings
            .entries()
            .into_iter()
            .filter_map(|entry| entry.value.map(|value| (entry.key, value)))
            .collect()
    }

    /// A `datafusion_extension_options` capsule holding the `gpu_sort.*` settings, for
    /// `datafusion.SessionConfig.with_extension`: the session then takes `SET gpu_sort.*`
    /// and shows the settings in `SHOW ALL`.
    fn extension_options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let mut options = FFI_ExtensionOptions::default();
        for entry in self.settings.entries() {
            if let Some(value) = entry.value {
                options.set(&entry.key, &value).map_err(to_py_err)?;
            }
        }
        PyCapsule::new_with_value(py, options, c"datafusion_extension_options")
    }

    /// A `datafusion_physical_extension_codec` capsule of [`InProcessPhysicalCodec`] for
    /// `session` (the datafusion-python `SessionContext` it is installed on): the host
    /// decodes gpusort's operators through it, and they run on this library's runtime.
    fn physical_codec<'py>(
        &self,
        py: Python<'py>,
        session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let provider = ffi_task_context_provider_from_pycapsule(&session)?;
        let codec = FFI_PhysicalExtensionCodec::new(
            Arc::new(InProcessPhysicalCodec),
            Some(runtime().handle().clone()),
            provider,
        );
        create_physical_extension_capsule(py, &codec)
    }

    /// A `datafusion_logical_extension_codec` capsule of [`InProcessLogicalCodec`] for
    /// `session`: the host's tables that DataFusion's protobuf cannot write (in-memory
    /// ones, `information_schema`) reach gpusort's planner by reference.
    fn logical_codec<'py>(
        &self,
        py: Python<'py>,
        session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let provider = ffi_task_context_provider_from_pycapsule(&session)?;
        let codec = FFI_LogicalExtensionCodec::new(
            Arc::new(InProcessLogicalCodec),
            Some(runtime().handle().clone()),
            provider,
        );
        create_logical_extension_capsule(py, &codec)
    }

    /// A `datafusion_query_planner` capsule: gpusort's planner around `fallback` (the
    /// host's planner capsule), encoding through `ctx`'s codecs.
    fn planner<'py>(
        &self,
        py: Python<'py>,
        ctx: Bound<'py, PyAny>,
        fallback: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let fallback = ffi_query_planner_from_pycapsule(&fallback, None)?;
        let fallback: Arc<dyn QueryPlanner + Send + Sync> = (&fallback).into();
        let logical_codec = ffi_logical_codec_from_pycapsule(ctx.clone(), None)?;
        let physical_codec = ffi_physical_codec_from_pycapsule(ctx, None)?;
        let planner = GpuSortPlanner::new(fallback, self.settings.clone());
        let planner =
            FFI_QueryPlanner::new_with_ffi_codecs(Arc::new(planner), logical_codec, physical_codec);
        create_query_planner_capsule(py, &planner)
    }
}
