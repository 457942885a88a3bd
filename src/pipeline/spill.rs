//! Where a job spills, how much it may, and what running out of room says.
//!
//! Spills go to a folder of the job's own, `gpusort-spill-<pid>-<nanos>`, under the spill
//! directory (`--spill-dir`, default `$TMPDIR` or `/tmp`), removed when the job ends (a
//! killed job's is removed by the next one: `leftovers.rs`). DataFusion's disk manager
//! writes there and counts the bytes against `--max-spill`, by default 90 % of the space
//! free on that disk when the job starts (as DuckDB's `max_temp_directory_size`).

use std::path::{Path, PathBuf};

use datafusion::error::DataFusionError;

use super::error::PipelineError;
use super::leftovers::{nanos, JobLock};

/// The spill folder's name prefix.
pub(super) const SPILL_PREFIX: &str = "gpusort-spill-";

/// A job's own spill folder, removed with everything in it when dropped.
#[derive(Debug)]
pub(super) struct SpillFolder {
    path: PathBuf,
    /// Held while the job lives: no other job removes the folder as a leftover.
    _lock: Option<JobLock>,
}

impl SpillFolder {
    /// Creates this job's folder under `root`.
    pub(super) fn create(root: &Path) -> Result<Self, PipelineError> {
        if !root.is_dir() {
            return Err(PipelineError::BadOption(format!(
                "--spill-dir '{}' is not a directory",
                root.display()
            )));
        }
        let path = root.join(format!("{SPILL_PREFIX}{}-{}", std::process::id(), nanos()));
        std::fs::create_dir(&path)
            .map_err(PipelineError::io("creating the spill folder", &path))?;
        let lock = JobLock::hold(&path).ok();
        Ok(Self { path, _lock: lock })
    }

    /// Where spills go.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SpillFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// 90 % of the bytes free to this user on the disk holding `dir` (all of it where that
/// cannot be read).
pub(super) fn default_max_spill(dir: &Path) -> u64 {
    free_bytes(dir).map_or(u64::MAX, |free| free / 10 * 9)
}

#[cfg(unix)]
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path and a struct for statvfs to fill.
    let stats = unsafe {
        let mut stats: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut stats) != 0 {
            return None;
        }
        stats
    };
    Some((stats.f_bavail as u64).saturating_mul(stats.f_frsize as u64))
}

#[cfg(not(unix))]
fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}

/// A sort's error as the spill error it is, if it is one: the limit reached, or the disk
/// full (`ENOSPC`) while spilling.
pub(super) fn spill_error(
    error: &DataFusionError,
    dir: &Path,
    limit: u64,
) -> Option<PipelineError> {
    let text = error.to_string();
    let dir = dir.display().to_string();
    if text.contains("exceeded the allowable limit") {
        return Some(PipelineError::SpillLimit {
            limit: super::human_bytes(limit),
            dir,
        });
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.raw_os_error() == Some(libc::ENOSPC) {
                return Some(PipelineError::SpillDiskFull { dir });
            }
        }
        source = e.source();
    }
    // Errors wrapped as text (Arrow's IPC writer) still say what the OS said.
    text.contains("No space left on device")
        .then_some(PipelineError::SpillDiskFull { dir })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spill_folder_goes_with_its_job() {
        let dir = tempfile::tempdir().unwrap();
        let folder = SpillFolder::create(dir.path()).unwrap();
        std::fs::write(folder.path().join("run"), b"x").unwrap();
        let path = folder.path().to_path_buf();
        // Its own job's folder is never a leftover.
        assert_eq!(
            super::super::leftovers::clean(&dir.path().join("o.parquet"), dir.path()),
            Default::default()
        );
        drop(folder);
        assert!(!path.exists());
        let err = SpillFolder::create(&dir.path().join("nope")).unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");
    }

    #[test]
    fn spill_errors_name_the_options() {
        let dir = Path::new("/spill");
        let limit = DataFusionError::ResourcesExhausted(
            "The used disk space during the spilling process has exceeded the allowable limit \
             of 1.0 MB."
                .into(),
        );
        let err = spill_error(&limit, dir, 1 << 20).unwrap().to_string();
        assert!(
            err.contains("--max-spill") && err.contains("/spill"),
            "{err}"
        );
        let full = DataFusionError::IoError(std::io::Error::from_raw_os_error(libc::ENOSPC));
        let err = spill_error(&full, dir, 1 << 20).unwrap().to_string();
        assert!(
            err.contains("--spill-dir") && err.contains("ran out of space"),
            "{err}"
        );
        let other = DataFusionError::Internal("x".into());
        assert!(spill_error(&other, dir, 1).is_none());
        assert!(default_max_spill(Path::new("/")) > 0);
    }
}
