//! The crate's folders form layers: a module may use only modules of lower layers, so no
//! two folders import each other. This test reads every `crate::…` path in `src/` (not in
//! comments) and fails on an import that goes up or sideways.
//!
//! ```text
//!  pipeline                 sorting files (uses the crate's API)
//!  lib                      the crate root's own items: registration in a session
//!  planner                  the optimizer rule
//!  window                   window helpers over the operator
//!  exec                     the operator
//!  backend                  the one place that names concrete backends
//!  cuda                     the CUDA backend (implements sort's contract)
//!  sort                     the contract and the CPU backend
//!  keys                     the key encoding
//!  gather, config, trace    output batches, settings, the timeline
//! ```
//!
//! Items the crate root re-exports (`crate::GpuSortExec`) count as the module that
//! defines them. `src/bin/` is a user of the crate, not a layer.
//!
//! `src/cuda/` has layers of its own ([`CUDA_LAYERS`]): errors and memory at the bottom,
//! the kernel launchers above them, then the runtime that loads them, the dispatch and
//! the payload gather that use it, one run's sort, and the backend on top. Unit tests
//! (`#[cfg(test)] mod tests`) are not checked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Layers from the bottom: a module may use modules of strictly lower layers.
const LAYERS: &[&[&str]] = &[
    &["gather", "config", "trace"],
    &["keys"],
    &["sort"],
    &["cuda"],
    &["backend"],
    &["exec"],
    &["window"],
    &["planner"],
    &["lib"],
    &["pipeline"],
];

/// Layers of `src/cuda/` from the bottom (files and subfolders).
const CUDA_LAYERS: &[&[&str]] = &[
    &["error"],
    &["faults"],
    &["memory"],
    &["module"],
    &["columns"],
    &["radix", "merge", "gather"],
    &["tuning"],
    &["encode"],
    &["refine"],
    &["runtime"],
    &["dispatch", "payload"],
    &["sort_run"],
    &["backend"],
];

/// The crate root's re-exports, by the module that defines them.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("AlgorithmChoice", "config"),
    ("BackendChoice", "config"),
    ("GpuSortConfig", "config"),
    ("GpuSortExec", "exec"),
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

/// The first path segments after every `crate::` in `code`, including each name of a
/// `crate::{a, b::c}` group.
fn crate_references(code: &str) -> Vec<String> {
    references_under(code, "crate::")
}

/// The first path segments after every `prefix` (`crate::`, `crate::cuda::`) in `code`.
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

/// The top-level module a file of `src/` belongs to (`None`: the crate root or `bin/`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative
        .components()
        .next()?
        .as_os_str()
        .to_str()?
        .to_string();
    match first.as_str() {
        "lib.rs" | "bin" => None,
        name => Some(name.trim_end_matches(".rs").to_string()),
    }
}

#[test]
fn modules_use_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = BTreeSet::new();
    let mut seen = 0;
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let Some(layer) = layer_of(LAYERS, &module) else {
            violations.insert(format!("{module}: not in LAYERS"));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let code: String = code_lines(without_tests(&text))
            .collect::<Vec<_>>()
            .join("\n");
        for name in crate_references(&code) {
            seen += 1;
            let used = ROOT_ITEMS
                .iter()
                .find(|(item, _)| *item == name)
                .map_or(name.as_str(), |(_, module)| module);
            if used == module {
                continue;
            }
            let allowed = layer_of(LAYERS, used).is_some_and(|l| l < layer);
            if !allowed {
                violations.insert(format!(
                    "{} uses crate::{name} ({used}), which is not below {module}",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        seen > 50,
        "found only {seen} crate:: paths: the scan is broken"
    );
    assert!(
        violations.is_empty(),
        "imports against the layers:\n{}",
        violations.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_scan_sees_groups_and_skips_comments() {
    let code = "use crate::{keys::KeyColumn, sort};\n// crate::exec in a comment\nlet x = crate::gather::f(); // crate::planner";
    let code: String = code_lines(code).collect::<Vec<_>>().join("\n");
    assert_eq!(crate_references(&code), vec!["keys", "sort", "gather"]);
}

#[test]
fn cuda_files_use_only_lower_layers() {
    let cuda = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cuda");
    let mut files = Vec::new();
    rust_files(&cuda, &mut files);
    let mut violations = BTreeSet::new();
    let mut seen = 0;
    for file in &files {
        let relative = file.strip_prefix(&cuda).unwrap();
        let first = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        if first == "mod.rs" {
            continue;
        }
        let unit = first.trim_end_matches(".rs");
        let Some(layer) = layer_of(CUDA_LAYERS, unit) else {
            violations.insert(format!("cuda/{unit}: not in CUDA_LAYERS"));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let code: String = code_lines(without_tests(&text))
            .collect::<Vec<_>>()
            .join("\n");
        for used in references_under(&code, "crate::cuda::") {
            seen += 1;
            if used == unit {
                continue;
            }
            if layer_of(CUDA_LAYERS, &used).is_none_or(|l| l >= layer) {
                violations.insert(format!(
                    "cuda/{} uses crate::cuda::{used}, which is not below {unit}",
                    relative.display()
                ));
            }
        }
    }
    assert!(
        seen > 50,
        "found only {seen} crate::cuda:: paths: the scan is broken"
    );
    assert!(
        violations.is_empty(),
        "imports against the layers of src/cuda:\n{}",
        violations.into_iter().collect::<Vec<_>>().join("\n")
    );
}
