//! `GpuSortConfig`: the `gpu_sort.*` settings, a DataFusion [`ConfigExtension`].
//!
//! Registered in the session config by
//! [`SessionStateBuilderExt::with_gpu_sort`](crate::SessionStateBuilderExt::with_gpu_sort),
//! so that SQL can change them per session:
//!
//! ```sql
//! SET gpu_sort.enabled = false;
//! SET gpu_sort.backend = 'cpu';
//! SET gpu_sort.min_rows = 0;
//! ```

use std::fmt;
use std::str::FromStr;

use datafusion::common::config::{
    ConfigEntry, ConfigExtension, ConfigField, ConfigOptions, ExtensionOptions, Visit,
};
use datafusion::common::{config_field, DataFusionError};

/// Declares the settings struct as DataFusion's `extensions_options!` does (defaults, `SET`
/// by key), except that its entries carry their full names (`gpu_sort.enabled`): DataFusion
/// lists an extension's entries as they come, and `SHOW gpu_sort.enabled`, `SHOW ALL` and
/// `information_schema.df_settings` look settings up by full name. `set` takes a key with
/// or without the prefix, so that whatever copies settings by their entries (a distributed
/// engine's headers) sets them back.
macro_rules! gpu_sort_settings {
    (
        $(#[doc = $struct_doc:tt])*
        $vis:vis struct $name:ident {
            $(
            $(#[doc = $doc:tt])*
            $field_vis:vis $field:ident : $field_type:ty, default = $default:expr
            )*
        }
    ) => {
        $(#[doc = $struct_doc])*
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        $vis struct $name {
            $(
            $(#[doc = $doc])*
            $field_vis $field: $field_type,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $($field: $default),* }
            }
        }

        impl ConfigField for $name {
            fn set(&mut self, key: &str, value: &str) -> datafusion::common::Result<()> {
                let key = key
                    .strip_prefix(<$name as ConfigExtension>::PREFIX)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .unwrap_or(key);
                let (key, rest) = key.split_once('.').unwrap_or((key, ""));
                match key {
                    $(stringify!($field) => self.$field.set(rest, value),)*
                    _ => Err(DataFusionError::Configuration(format!(
                        "no setting {}.{key}; the settings are: {}",
                        <$name as ConfigExtension>::PREFIX,
                        [$(stringify!($field)),*].join(", ")
                    ))),
                }
            }

            fn visit<V: Visit>(&self, v: &mut V, key_prefix: &str, _description: &'static str) {
                $(
                let key = match key_prefix {
                    "" => stringify!($field).to_string(),
                    prefix => format!("{prefix}.{}", stringify!($field)),
                };
                self.$field.visit(v, &key, concat!($($doc),*).trim());
                )*
            }
        }

        impl ExtensionOptions for $name {
            fn as_any(&self) -> &dyn std::any::Any {
                self
            }

            fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
                self
            }

            fn cloned(&self) -> Box<dyn ExtensionOptions> {
                Box::new(self.clone())
            }

            fn set(&mut self, key: &str, value: &str) -> datafusion::common::Result<()> {
                ConfigField::set(self, key, value)
            }

            fn entries(&self) -> Vec<ConfigEntry> {
                struct Entries(Vec<ConfigEntry>);
                impl Visit for Entries {
                    fn some<V: fmt::Display>(
                        &mut self,
                        key: &str,
                        value: V,
                        description: &'static str,
                    ) {
                        self.0.push(ConfigEntry {
                            key: key.to_string(),
                            value: Some(value.to_string()),
                            description,
                        })
                    }

                    fn none(&mut self, key: &str, description: &'static str) {
                        self.0.push(ConfigEntry {
                            key: key.to_string(),
                            value: None,
                            description,
                        })
                    }
                }
                let mut entries = Entries(Vec::new());
                ConfigField::visit(self, &mut entries, <$name as ConfigExtension>::PREFIX, "");
                entries.0
            }
        }
    };
}

/// Which sort backend the operator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// CUDA when a usable device exists, else the CPU backend.
    #[default]
    Auto,
    /// CUDA only: sorts are declined (DataFusion's sort kept) when no device is usable.
    Cuda,
    /// The CPU backend, always.
    Cpu,
}

/// Which device algorithm sorts a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AlgorithmChoice {
    /// Chosen per run from the input (sortedness, known segments).
    #[default]
    Auto,
    /// LSD radix sort (OneSweep on the GPU).
    Onesweep,
    /// Merge sort within known segments.
    Segmented,
    /// Run-adaptive merge sort for nearly sorted input.
    Locality,
}

macro_rules! choice_text {
    ($ty:ty, $what:literal, { $($variant:path => $text:literal),+ $(,)? }) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $($variant => $text),+ })
            }
        }

        impl FromStr for $ty {
            type Err = DataFusionError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($text => Ok($variant),)+
                    other => Err(DataFusionError::Configuration(format!(
                        "gpu_sort.{}: unknown value '{other}', expected one of: {}",
                        $what,
                        [$($text),+].join(", ")
                    ))),
                }
            }
        }
    };
}

choice_text!(BackendChoice, "backend", {
    BackendChoice::Auto => "auto",
    BackendChoice::Cuda => "cuda",
    BackendChoice::Cpu => "cpu",
});

choice_text!(AlgorithmChoice, "algorithm", {
    AlgorithmChoice::Auto => "auto",
    AlgorithmChoice::Onesweep => "onesweep",
    AlgorithmChoice::Segmented => "segmented",
    AlgorithmChoice::Locality => "locality",
});

config_field!(BackendChoice);
config_field!(AlgorithmChoice);

/// How much device memory a session's sorts may use: every buffer this process holds on
/// the device counts, its other sessions' too.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum DeviceMemoryLimit {
    /// `auto`: the default share of the device's memory (80 %,
    /// `gpusort::cuda::DEFAULT_DEVICE_MEMORY_FRACTION`).
    #[default]
    Auto,
    /// `50%`: a share of the device's memory.
    Share(f64),
    /// `12G`, `512M`, `1073741824`: a size (at most the device's memory).
    Bytes(usize),
}

impl DeviceMemoryLimit {
    /// The limit in bytes on a device of `total` bytes, where `auto` takes `default_share`.
    pub fn bytes_of(self, total: usize, default_share: f64) -> usize {
        match self {
            Self::Auto => (total as f64 * default_share) as usize,
            Self::Share(share) => (total as f64 * share) as usize,
            Self::Bytes(bytes) => bytes.min(total),
        }
    }
}

impl fmt::Display for DeviceMemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Share(share) => write!(f, "{}%", share * 100.0),
            Self::Bytes(bytes) => write!(f, "{bytes}"),
        }
    }
}

impl FromStr for DeviceMemoryLimit {
    type Err = DataFusionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let invalid = |why: String| {
            DataFusionError::Configuration(format!(
                "gpu_sort.device_memory_limit: {why} (expected auto, a share like 50%, or a \
                 size like 12G)"
            ))
        };
        if text.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        if let Some(percent) = text.strip_suffix('%') {
            let share: f64 = percent
                .trim()
                .parse()
                .map_err(|_| invalid(format!("'{text}' is not a share")))?;
            if !(share > 0.0 && share <= 100.0) {
                return Err(invalid(format!("'{text}' is not between 0 and 100 %")));
            }
            return Ok(Self::Share(share / 100.0));
        }
        parse_bytes(text).map(Self::Bytes).map_err(invalid)
    }
}

config_field!(DeviceMemoryLimit);

/// The most device ordinals a [`DeviceSelection`] may name.
pub(crate) const MAX_DEVICES: usize = 32;

/// Which of the host's GPUs a session's sorts use (`gpu_sort.devices`). Each run of a sort
/// goes to the least busy device of the set; a device that fails is left out for the
/// process, and the others go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSelection {
    /// `all`: every device the driver sees (only `GPUSORT_CUDA_DEVICE`'s where that
    /// variable is set).
    #[default]
    All,
    /// `2`: the first this many devices.
    First(usize),
    /// `0,2` (or `1,` for device 1 alone): these ordinals, a bit each.
    Ordinals(u32),
}

impl DeviceSelection {
    /// The ordinals selected on a host of `count` devices, where `all` means `all` (every
    /// one, or just `pinned` when set); ordinals past `count` are left out.
    pub fn ordinals(self, count: usize, pinned: Option<usize>) -> Vec<usize> {
        match self {
            Self::All => match pinned {
                Some(ordinal) => vec![ordinal],
                None => (0..count).collect(),
            },
            Self::First(n) => (0..count.min(n)).collect(),
            Self::Ordinals(mask) => (0..count.min(MAX_DEVICES))
                .filter(|&d| mask & (1 << d) != 0)
                .collect(),
        }
    }
}

impl fmt::Display for DeviceSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::First(n) => write!(f, "{n}"),
            Self::Ordinals(mask) => {
                let listed: Vec<String> = (0..MAX_DEVICES)
                    .filter(|&d| mask & (1 << d) != 0)
                    .map(|d| d.to_string())
                    .collect();
                match listed.as_slice() {
                    [one] => write!(f, "{one},"),
                    many => f.write_str(&many.join(",")),
                }
            }
        }
    }
}

impl FromStr for DeviceSelection {
    type Err = DataFusionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let invalid = |why: String| {
            DataFusionError::Configuration(format!(
                "gpu_sort.devices: {why} (expected all, a count like 2, or ordinals like 0,2; \
                 1, for device 1 alone)"
            ))
        };
        if text.eq_ignore_ascii_case("all") {
            return Ok(Self::All);
        }
        if !text.contains(',') {
            return match text.parse::<usize>() {
                Ok(n) if n > 0 => Ok(Self::First(n)),
                _ => Err(invalid(format!("'{text}' is not a count of devices"))),
            };
        }
        let mut mask = 0u32;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let ordinal: usize = part
                .parse()
                .map_err(|_| invalid(format!("'{part}' is not a device ordinal")))?;
            if ordinal >= MAX_DEVICES {
                return Err(invalid(format!(
                    "device {ordinal} is past the most ordinals ({MAX_DEVICES})"
                )));
            }
            mask |= 1 << ordinal;
        }
        if mask == 0 {
            return Err(invalid(format!("'{text}' names no device")));
        }
        Ok(Self::Ordinals(mask))
    }
}

config_field!(DeviceSelection);

/// Parses a size: `1048576`, `512K`, `64MiB`, `2G`, `1.5GB` (binary units either way).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("'{text}': unknown unit (use K, M, G or T)")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size like 512M or 2G"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !(1.0..=usize::MAX as f64).contains(&bytes) {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(bytes as usize)
}

/// Default of `device_gather_min_rows`: below it the host gathers a run from its caches
/// faster than a round trip to the device.
pub(crate) const DEFAULT_DEVICE_GATHER_MIN_ROWS: usize = 1 << 20;

/// Default of `topk_min_fetch`: the LIMIT from which gpusort's sort of a fixed-width key
/// beats DataFusion's TopK heap. On SF10 lineitem (H200, 16 cores) a LIMIT of 1,000 on a
/// decimal key took DataFusion 0.31 s and gpusort 0.23 s; on a string key 0.54 and
/// 0.57 s (docs/performance.md).
pub(crate) const DEFAULT_TOPK_MIN_FETCH: usize = 1_000;

/// Default of `input_batch_rows`: on SF10 lineitem (H200, 16 cores) a rank per supplier,
/// a plain sort of five columns and five sliding aggregates took 6, 8 and 13 % less time
/// reading batches of 65 536 rows than of 8 192 (docs/performance.md, 2026-11-29).
pub(crate) const DEFAULT_INPUT_BATCH_ROWS: usize = 65_536;

/// Default rows per device run: 2^28 rows of up to 256 key bits fit any lent GPU.
pub(crate) const DEFAULT_RUN_ROWS: usize = 1 << 28;

/// Default least rows of a run sorted over several devices at once (`spread_min_rows`):
/// 0, never.
pub(crate) const DEFAULT_SPREAD_MIN_ROWS: usize = 0;

gpu_sort_settings! {
    /// Settings of the gpusort operator, under the `gpu_sort` prefix.
    pub struct GpuSortConfig {
        /// Replace DataFusion's sorts by `GpuSortExec` (default true).
        pub enabled: bool, default = true
        /// `auto` (CUDA when usable, else CPU), `cuda` or `cpu`.
        pub backend: BackendChoice, default = BackendChoice::Auto
        /// Sorts whose input is estimated below this many rows keep DataFusion's sort.
        /// An input of unknown size counts as large.
        pub min_rows: usize, default = 100_000
        /// Most rows sorted in one run; larger inputs are sorted in runs and merged.
        pub run_rows: usize, default = DEFAULT_RUN_ROWS
        /// `auto`, `onesweep`, `segmented` or `locality`.
        pub algorithm: AlgorithmChoice, default = AlgorithmChoice::Auto
        /// Replace every sort with a LIMIT (default false: by cost, see `topk_min_fetch`).
        pub topk: bool, default = false
        /// With `topk = false`, a sort with a LIMIT of at least this many rows is replaced
        /// (four times as many where a key is a string or binary column; at most a
        /// quarter of the estimated input); smaller LIMITs keep DataFusion's TopK heap,
        /// which is faster there. Measured on the GPU host (docs/performance.md).
        pub topk_min_fetch: usize, default = DEFAULT_TOPK_MIN_FETCH
        /// Runs of at least this many rows have their fixed-width columns gathered into
        /// sorted order on the GPU (CUDA backend); smaller runs, and other columns, are
        /// gathered on the host.
        pub device_gather_min_rows: usize, default = DEFAULT_DEVICE_GATHER_MIN_ROWS
        /// The sort reads its input in batches of at least this many rows: the operators
        /// below it (a scan, a repartition) run with this batch size where it is larger
        /// than the session's. The sort holds all its input anyway, and fewer, larger
        /// batches cost less per row to read, hold and sort. Under a memory limit a batch
        /// stays within a small share of the pool (a 128th of a partition's part, from
        /// the input's types). 0: the session's batch size.
        pub input_batch_rows: usize, default = DEFAULT_INPUT_BATCH_ROWS
        /// Where DataFusion merges sorted partitions (or coalesces partitions before a
        /// sort), one sort reads every partition in place of the per-partition sorts and
        /// the merge (default true); false: each partition's sort is replaced on its own
        /// and DataFusion's merge stays.
        pub gather_partitions: bool, default = true
        /// A sort that keeps its input's partitions (below a window's `PARTITION BY`)
        /// sorts all of them at once, each on its own, instead of one sort per partition.
        pub combine_partitions: bool, default = true
        /// A sort above a hash repartition (a window's `PARTITION BY`) reads the
        /// repartition's input and routes each row to its hash partition itself, within its
        /// one sort for all partitions (with `combine_partitions`), instead of having every
        /// row copied into per-partition batches first.
        pub absorb_repartition: bool, default = true
        /// Window functions directly above a gpusort sort are computed by gpusort
        /// (`SortedWindowExec`, on all cores) where it computes every expression of the
        /// window node (default true); false, or an expression it does not compute: a
        /// DataFusion window operator, as `whole_partition_windows` says.
        pub window_functions: bool, default = true
        /// Those window functions are computed on the device where the CUDA backend sorts
        /// the window's input as one run (ranks, values, and `count`, `sum`, `avg`, `min`,
        /// `max` over `ROWS`, `GROUPS` and most `RANGE` frames: docs/settings.md); false:
        /// always on all cores.
        pub device_window_functions: bool, default = true
        /// A filter that bounds a ranking window (`row_number() <= k`, `rank()`,
        /// `dense_rank()`) over a gpusort sort lets the sort leave out of each sorted run,
        /// before it gathers the payload, the rows past `k` in their window partition.
        pub partition_top: bool, default = true
        /// A window computed directly above a gpusort sort runs as DataFusion's
        /// `WindowAggExec` (a whole partition at once, vectorized) instead of the
        /// row-at-a-time `BoundedWindowAggExec`.
        pub whole_partition_windows: bool, default = true
        /// Rows per batch a sort hands a whole-partition window above it (0: the
        /// session's batch size). A partition of up to this many rows reaches the window
        /// as one batch, which the window then does not copy.
        pub window_batch_rows: usize, default = 1 << 24
        /// Device memory this session's sorts may use, counting everything the process
        /// holds on the device: `auto` (80 % of the device's memory), a share (`50%`) or a
        /// size (`12G`). Runs are sized to what is free within it; a sort waits for its
        /// turn until its run fits.
        pub device_memory_limit: DeviceMemoryLimit, default = DeviceMemoryLimit::Auto
        /// The GPUs this session's sorts use: `all` (default), a count (`2`: the first
        /// two) or ordinals (`0,2`; `1,` for device 1 alone). Each run goes to the least
        /// busy of them, and `device_memory_limit` applies to each device on its own.
        pub devices: DeviceSelection, default = DeviceSelection::All
        /// A run of at least this many rows, with fixed-width keys only, is sorted over
        /// all the usable devices of `devices` at once, each sorting a range of its keys
        /// (when there are two or more); smaller runs go to one device each. 0 (the
        /// default): no run is spread for its length (a run one device cannot hold is, by
        /// `spread_large_runs`), since a query's sort is bound by its output's way into
        /// host memory, which spreading does not speed up (docs/performance.md, "Several
        /// GPUs in one host").
        pub spread_min_rows: usize, default = DEFAULT_SPREAD_MIN_ROWS
        /// A run one device cannot hold (its keys' sort past what is free of the device's
        /// `device_memory_limit`), with fixed-width keys only, is sorted over all the
        /// usable devices of `devices` at once when together they hold it, each device
        /// keeping a slice of its payload, instead of being sorted in pieces merged on the
        /// host (default true).
        pub spread_large_runs: bool, default = true
        /// Tests only: the faults of `gpusort::cuda::FaultScope::from_id(fault_scope)` are
        /// injected into this session's device work (0: none).
        pub fault_scope: u64, default = 0
    }
}

impl ConfigExtension for GpuSortConfig {
    const PREFIX: &'static str = "gpu_sort";
}

/// The namespace under which DataFusion keeps the settings of an extension it reaches
/// through its FFI (datafusion-python's `SessionConfig.with_extension`): `SET gpu_sort.x`
/// lands there as `gpu_sort.x`, and reads back across the FFI as
/// `datafusion_ffi.gpu_sort.x`.
const FFI_NAMESPACE: &str = datafusion::common::config::DATAFUSION_FFI_CONFIG_NAMESPACE;

impl GpuSortConfig {
    /// The `gpu_sort.*` settings of a session's options: its `GpuSortConfig` where one is
    /// registered; else those set through DataFusion's FFI namespace (a datafusion-python
    /// session), over the defaults; else the defaults. A value that does not parse, or a
    /// name that is not a setting, is an error that names it.
    pub fn from_options(options: &ConfigOptions) -> datafusion::common::Result<Self> {
        if let Some(config) = options.extensions.get::<GpuSortConfig>() {
            return Ok(config.clone());
        }
        Self::default().overridden_by(options)
    }

    /// These settings, with any `gpu_sort.*` entry of `options`' FFI namespace set over
    /// them; a name that is not a setting is an error.
    pub fn overridden_by(self, options: &ConfigOptions) -> datafusion::common::Result<Self> {
        let (config, unknown) = self.overridden_by_known(options)?;
        match unknown.first() {
            None => Ok(config),
            Some(name) => Err(DataFusionError::Configuration(format!(
                "no setting {name}; the settings are the entries of gpu_sort.* in SHOW ALL"
            ))),
        }
    }

    /// [`overridden_by`](Self::overridden_by), setting the entries that name a setting and
    /// returning the full names of those that do not (DataFusion's FFI namespace takes any
    /// name, and cannot unset one). A value that does not parse is an error.
    pub fn overridden_by_known(
        mut self,
        options: &ConfigOptions,
    ) -> datafusion::common::Result<(Self, Vec<String>)> {
        let prefix = <Self as ConfigExtension>::PREFIX;
        let known: Vec<String> = self.entries().into_iter().map(|e| e.key).collect();
        let mut unknown = Vec::new();
        for entry in options.entries() {
            let key = entry.key.as_str();
            let key = key
                .strip_prefix(FFI_NAMESPACE)
                .and_then(|rest| rest.strip_prefix('.'))
                .unwrap_or(key);
            let Some(name) = key
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix('.'))
            else {
                continue;
            };
            if !known.iter().any(|k| k.as_str() == key) {
                unknown.push(key.to_string());
                continue;
            }
            if let Some(value) = entry.value.as_deref() {
                ConfigField::set(&mut self, name, value)?;
            }
        }
        Ok((self, unknown))
    }

    /// The settings that route every sort, however small, through the CPU backend:
    /// what tests and the sqllogictest runner use to force the operator on.
    pub fn forced_cpu() -> Self {
        Self {
            backend: BackendChoice::Cpu,
            min_rows: 0,
            topk: true,
            device_gather_min_rows: 0,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_choice_and_rejects_unknown() {
        let mut config = GpuSortConfig::default();
        ExtensionOptions::set(&mut config, "backend", "CPU").unwrap();
        assert_eq!(config.backend, BackendChoice::Cpu);
        ExtensionOptions::set(&mut config, "algorithm", "locality").unwrap();
        assert_eq!(config.algorithm, AlgorithmChoice::Locality);
        let err = ExtensionOptions::set(&mut config, "backend", "tpu")
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected one of: auto, cuda, cpu"), "{err}");
    }

    #[test]
    fn set_takes_keys_with_or_without_the_prefix() {
        let mut config = GpuSortConfig::default();
        ExtensionOptions::set(&mut config, "min_rows", "7").unwrap();
        assert_eq!(config.min_rows, 7);
        ExtensionOptions::set(&mut config, "gpu_sort.min_rows", "9").unwrap();
        assert_eq!(config.min_rows, 9);
        // Every entry sets back to its own value.
        for entry in GpuSortConfig::forced_cpu().entries() {
            let value = entry.value.unwrap_or_default();
            ExtensionOptions::set(&mut config, &entry.key, &value).unwrap();
        }
        assert_eq!(
            format!("{config:?}"),
            format!("{:?}", GpuSortConfig::forced_cpu())
        );
        let err = ExtensionOptions::set(&mut config, "gpu_sort.min_row", "1").unwrap_err();
        assert!(
            err.to_string().contains("no setting gpu_sort.min_row"),
            "{err}"
        );
    }

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert_eq!(parse_bytes("512K").unwrap(), 512 << 10);
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1.5G").unwrap(), 3 << 29);
        assert!(parse_bytes("12 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_bytes("G").unwrap_err().contains("not a size"));
        assert!(parse_bytes("0").unwrap_err().contains("out of range"));
    }

    #[test]
    fn device_selections_as_all_a_count_or_ordinals() {
        let parse = |t: &str| t.parse::<DeviceSelection>();
        assert_eq!(parse("all").unwrap(), DeviceSelection::All);
        assert_eq!(parse("2").unwrap(), DeviceSelection::First(2));
        assert_eq!(parse("0,2").unwrap(), DeviceSelection::Ordinals(0b101));
        assert_eq!(parse(" 1, ").unwrap(), DeviceSelection::Ordinals(0b10));
        for text in ["all", "2", "0,2", "1,"] {
            assert_eq!(parse(text).unwrap().to_string(), text, "round trip");
        }
        for bad in ["0", "-1", "two", ",", "0,x", "40,1"] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains("gpu_sort.devices"), "{bad}: {err}");
        }
        // On a host of 2 devices.
        assert_eq!(DeviceSelection::All.ordinals(2, None), vec![0, 1]);
        assert_eq!(DeviceSelection::All.ordinals(2, Some(1)), vec![1]);
        assert_eq!(DeviceSelection::First(4).ordinals(2, None), vec![0, 1]);
        assert_eq!(parse("1,3").unwrap().ordinals(2, None), vec![1]);
        let mut config = GpuSortConfig::default();
        ExtensionOptions::set(&mut config, "devices", "0,1").unwrap();
        assert_eq!(config.devices, DeviceSelection::Ordinals(0b11));
    }

    #[test]
    fn device_memory_limits_as_share_or_size() {
        let mut config = GpuSortConfig::default();
        assert_eq!(config.device_memory_limit.bytes_of(1000, 0.8), 800);
        ExtensionOptions::set(&mut config, "device_memory_limit", "25%").unwrap();
        assert_eq!(config.device_memory_limit.bytes_of(1000, 0.8), 250);
        ExtensionOptions::set(&mut config, "device_memory_limit", "2K").unwrap();
        assert_eq!(config.device_memory_limit, DeviceMemoryLimit::Bytes(2048));
        assert_eq!(config.device_memory_limit.bytes_of(1000, 0.8), 1000);
        assert_eq!(config.device_memory_limit.to_string(), "2048");
        for bad in ["150%", "lots", "0"] {
            let err = ExtensionOptions::set(&mut config, "device_memory_limit", bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains("gpu_sort.device_memory_limit"), "{err}");
        }
    }

    #[test]
    fn entries_list_every_setting_by_its_full_name() {
        let entries = GpuSortConfig::default().entries();
        assert!(entries.iter().all(|e| !e.description.is_empty()));
        let keys: Vec<String> = entries
            .into_iter()
            .map(|e| e.key.strip_prefix("gpu_sort.").unwrap_or("").to_string())
            .collect();
        for key in [
            "enabled",
            "backend",
            "min_rows",
            "run_rows",
            "algorithm",
            "topk",
            "topk_min_fetch",
            "device_gather_min_rows",
            "input_batch_rows",
            "combine_partitions",
            "absorb_repartition",
            "window_functions",
            "device_window_functions",
            "partition_top",
            "whole_partition_windows",
            "window_batch_rows",
            "device_memory_limit",
            "devices",
            "spread_min_rows",
            "spread_large_runs",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key} missing from {keys:?}");
        }
    }
}
