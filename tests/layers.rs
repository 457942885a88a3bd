//! The crate's folders form layers: a module may use only modules of lower layers, so no
//! two folders import each other. This test reads every `crate::…` path in `src/` (not in
//! comments) and fails on an import that goes up or sideways.
//!
//! ```text
//!  pipeline                 sorting files (uses the crate's API)
//!  lib                      the crate root's own items: registration in a session
//!  planner, codec           the optimizer rule; the operators in protobuf plans
//!  window                   window functions over the operator
//!  exec                     the operator
//!  backend                  the one place that names concrete backends
//!  cuda                     the CUDA backend (implements sort's contract)
//!  sort                     the contract and the CPU backend
//!  keys                     the key encoding
//!  gather, config           output batches, settings
//!  trace                    the timeline (any layer may mark it)
//! ```
//!
//! Items the crate root re-exports (`crate::GpuSortExec`) count as the module that
//! defines them. `src/bin/` is a user of the crate, not a layer.
//!
//! `src/cuda/` has layers of its own ([`CUDA_LAYERS`]): errors, tuning and memory at the bottom,
//! the kernel launchers above them, then the runtime that loads them, the dispatch and
//! the payload gather that use it, one run's sort, one run's sort over several devices,
//! and the backend on top. Unit tests
//! (`#[cfg(test)] mod tests`) are not checked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Layers from the bottom: a module may use modules of strictly lower layers.
const LAYERS: &[&[&str]] = &[
    &["trace"],
    &["gather", "config"],
    &["keys"],
    &["sort"],
    &["cuda"],
    &["backend"],
    &["exec"],
    &["window"],
    &["planner", "codec"],
    &["lib"],
    &["pipeline"],
];

/// Layers of `src/cuda/` from the bottom (files and subfolders).
const CUDA_LAYERS: &[&[&str]] = &[
    &["error", "visible"],
    &["faults"],
    &["tuning"],
    &["memory"],
    &["module"],
    &["columns"],
    &["parquet_dictionary", "parquet_input"],
    &["radix", "merge", "gather", "window", "parquet", "spread"],
    &["encode"],
    &["refine"],
    &["runtime"],
    &["dispatch", "payload", "pages"],
    &["sort_run"],
    &["multi_gpu"],
    &["backend"],
];

/// The crate root's re-exports, by the module that defines them.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("AlgorithmChoice", "config"),
    ("BackendChoice", "config"),
    ("DeviceMemoryLimit", "config"),
    ("DeviceSelection", "config"),
    ("GpuSortConfig", "config"),
    ("GpuSortExec", "exec"),
    ("SortedWindowExec", "window"),
    ("DeclineReason", "planner"),
    ("GpuSortRule", "planner"),
    ("SortDecision", "planner"),
    ("SessionStateBuilderExt", "lib"),
    ("gpu_sort_context", "lib"),
    ("gpu_sort_context_with", "lib"),
];

fn layer_of(layers: &[&[&str]], module: &str) -> Option<usize> {
    layers.iter().position(|layer| layer.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of `text` without comments (line comments and `//!`/`///` docs; the crate
/// has no block comments around paths).
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(|line| match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    })
}

/// The code of a file without its unit tests.
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at])
}

/// The first path segments after every `prefix` (`crate::`, `crate::cuda::`) in `code`,
/// including each name of a `prefix{a, b::c}` group.
fn references_under(code: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let first = item.trim().split("::").next().unwrap_or("");
                if !first.is_empty() {
                    names.push(first.to_string());
                }
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        names.push(name);
    }
    names
}

/// One folder's layering: its files, grouped by their first path component under it.
struct Layering {
    /// The folder, relative to the crate.
    dir: &'static str,
    /// What its paths start with (`crate::`, `crate::cuda::`).
    prefix: &'static str,
    /// Its layers from the bottom.
    layers: &'static [&'static [&'static str]],
    /// First components that are no layer (the folder's root file, `bin/`).
    outside: &'static [&'static str],
    /// The unit a referenced name belongs to (root re-exports resolved).
    resolve: fn(&str) -> &str,
}

/// Every import of `layering`'s folder that goes up or sideways, and how many paths were
/// read.
fn violations(layering: &Layering) -> (BTreeSet<String>, usize) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(layering.dir);
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let mut found = BTreeSet::new();
    let mut seen = 0;
    for file in &files {
        let relative = file.strip_prefix(&dir).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let first = first.to_str().unwrap();
        if layering.outside.contains(&first) {
            continue;
        }
        let unit = first.trim_end_matches(".rs");
        let Some(layer) = layer_of(layering.layers, unit) else {
            found.insert(format!("{}/{unit}: not in its layers", layering.dir));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let code: String = code_lines(without_tests(&text))
            .collect::<Vec<_>>()
            .join("\n");
        for name in references_under(&code, layering.prefix) {
            seen += 1;
            let used = (layering.resolve)(&name);
            if used != unit && layer_of(layering.layers, used).is_none_or(|l| l >= layer) {
                found.insert(format!(
                    "{}/{} uses {}{name} ({used}), which is not below {unit}",
                    layering.dir,
                    relative.display(),
                    layering.prefix
                ));
            }
        }
    }
    (found, seen)
}

/// Fails on any violation of `layering`, or when the scan read too few paths to mean
/// anything.
fn assert_layered(layering: &Layering) {
    let (found, seen) = violations(layering);
    assert!(
        seen > 50,
        "found only {seen} {} paths: the scan is broken",
        layering.prefix
    );
    assert!(
        found.is_empty(),
        "imports against the layers of {}:\n{}",
        layering.dir,
        found.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// A crate root re-export as the module that defines it; any other name as itself.
fn defining_module(name: &str) -> &str {
    ROOT_ITEMS
        .iter()
        .find(|(item, _)| *item == name)
        .map_or(name, |(_, module)| module)
}

#[test]
fn modules_use_only_lower_layers() {
    assert_layered(&Layering {
        dir: "src",
        prefix: "crate::",
        layers: LAYERS,
        outside: &["lib.rs", "bin"],
        resolve: defining_module,
    });
}

#[test]
fn the_scan_sees_groups_and_skips_comments() {
    let code = "use crate::{keys::KeyColumn, sort};\n// crate::exec in a comment\nlet x = crate::gather::f(); // crate::planner";
    let code: String = code_lines(code).collect::<Vec<_>>().join("\n");
    assert_eq!(
        references_under(&code, "crate::"),
        vec!["keys", "sort", "gather"]
    );
}

#[test]
fn cuda_files_use_only_lower_layers() {
    assert_layered(&Layering {
        dir: "src/cuda",
        prefix: "crate::cuda::",
        layers: CUDA_LAYERS,
        outside: &["mod.rs"],
        resolve: |name| name,
    });
}
