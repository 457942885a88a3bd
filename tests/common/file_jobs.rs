//! Helpers of the file pipeline's tests (`tests/pipeline.rs`, `tests/pipeline_inputs.rs`):
//! a job on the CPU backend, and what a directory holds afterwards.

use std::path::{Path, PathBuf};

use gpusort::pipeline::SortJob;
use gpusort::BackendChoice;

/// A job sorting `inputs` into `output` by `by` on the CPU backend, in 3 scan partitions.
pub fn job(inputs: &[&Path], output: &Path, by: &str) -> SortJob {
    let mut job = SortJob::new(
        inputs.iter().map(|p| p.display().to_string()).collect(),
        output,
        by,
    );
    job.backend = BackendChoice::Cpu;
    job.target_partitions = Some(3);
    job
}

/// Names in `dir`, sorted (to see leftovers).
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every file and folder under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path));
        }
        files.push(path);
    }
    files
}
