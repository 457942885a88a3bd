//! A job's temporary names, and what a killed job left under them.
//!
//! A job writes its output under `.<name>.gpusort-tmp-<pid>-<nanos>` beside the target,
//! moves a replaced output aside as `.<name>.gpusort-old-<pid>-<nanos>` where it cannot
//! swap the two at once, and spills into `gpusort-spill-<pid>-<nanos>` under the spill
//! directory. It removes all of them when it ends, on error and on SIGINT or SIGTERM too.
//! SIGKILL, the kernel's OOM killer or a power loss leave them; the next job writing the
//! same target, or spilling into the same directory, removes them.
//!
//! A job holds an exclusive `flock` on each of them while it lives ([`JobLock`]); the
//! kernel lets go of it when the process dies, however it dies. A leftover is removed only
//! when its lock is free and no process of its id runs here; otherwise it belongs to a
//! job still running (on this host, or on another one sharing the directory) and is left
//! alone with a warning. A replaced output moved aside by a job killed before it put the
//! new one in place is moved back, not removed.

use std::path::{Path, PathBuf};

use super::spill::SPILL_PREFIX;

/// A hidden, unique name beside `path` for this process's `what` (`tmp`, `old`).
pub(super) fn temp_sibling(path: &Path, what: &str) -> PathBuf {
    parent_dir(path).join(format!(
        "{}{}-{}",
        sibling_prefix(path, what),
        std::process::id(),
        nanos()
    ))
}

/// What the names of every job's `what` beside `path` start with (the process id and a
/// time follow).
fn sibling_prefix(path: &Path, what: &str) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.gpusort-{what}-")
}

/// Removes the file or directory (with everything in it) at `path`.
pub(super) fn remove_path(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

/// The directory `path` is in (`.` for a bare name).
pub(super) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The current time's nanoseconds, to tell apart names made in one process.
pub(super) fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}

/// An exclusive lock on a job's file or folder, held until dropped (or the process ends).
#[derive(Debug)]
pub(super) struct JobLock {
    _file: std::fs::File,
}

impl JobLock {
    /// Locks `path` (a file or a directory), failing at once if another holds it.
    pub(super) fn hold(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        lock(&file)?;
        Ok(Self { _file: file })
    }
}

#[cfg(unix)]
fn lock(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: an open descriptor; flock only reads it.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(unix))]
fn lock(_file: &std::fs::File) -> std::io::Result<()> {
    Ok(())
}

/// What [`clean`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Cleaned {
    /// Leftovers of jobs that are gone, now removed.
    pub(super) removed: Vec<PathBuf>,
    /// Leftovers of jobs that still run (their lock held, or their process here), left
    /// alone.
    pub(super) kept: Vec<(PathBuf, u32)>,
    /// Replaced outputs moved back into place.
    pub(super) restored: Vec<PathBuf>,
}

/// Removes the leftovers of killed jobs writing `output` or spilling into `spill_root`
/// (see the module doc), and warns of each one on the log.
pub(super) fn clean(output: &Path, spill_root: &Path) -> Cleaned {
    let mut cleaned = Cleaned::default();
    let (temp, aside) = (sibling_prefix(output, "tmp"), sibling_prefix(output, "old"));
    let places = [
        (parent_dir(output), vec![temp.as_str(), aside.as_str()]),
        (spill_root.to_path_buf(), vec![SPILL_PREFIX]),
    ];
    for (dir, prefixes) in places {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = prefixes
                .iter()
                .find_map(|p| file_name.strip_prefix(p))
                .and_then(owner)
            else {
                continue;
            };
            if pid != std::process::id() {
                let moved_aside = file_name.starts_with(&aside);
                clean_one(entry.path(), pid, moved_aside, output, &mut cleaned);
            }
        }
    }
    cleaned
}

/// Removes `path`, left by process `pid`, unless its job still runs; an output a killed
/// job `moved_aside` goes back to `output` where nothing took its place.
fn clean_one(path: PathBuf, pid: u32, moved_aside: bool, output: &Path, cleaned: &mut Cleaned) {
    // Held while this looks at it, so that no other job takes it meanwhile.
    let held = JobLock::hold(&path);
    if held.is_err() || running(pid) {
        // Another job's files while it runs: expected when jobs run at once, so not a
        // warning (a job's stderr stays clean of other jobs' doings).
        log::info!(
            "gpusort: left alone {}: the job (process {pid}) that made it still runs",
            path.display()
        );
        cleaned.kept.push((path, pid));
        return;
    }
    if moved_aside && !output.exists() {
        match std::fs::rename(&path, output) {
            Ok(()) => {
                log::warn!(
                    "gpusort: moved {} back to {}: a job (process {pid}) replacing it was \
                     killed between moving it aside and putting its own output in place",
                    path.display(),
                    output.display()
                );
                cleaned.restored.push(output.to_path_buf());
            }
            Err(e) => log::warn!(
                "gpusort: could not move {} back to {}: {e}",
                path.display(),
                output.display()
            ),
        }
        return;
    }
    match remove_path(&path) {
        Ok(()) => {
            log::warn!(
                "gpusort: removed {}, left by a job (process {pid}) that did not finish",
                path.display()
            );
            cleaned.removed.push(path);
        }
        Err(e) => log::warn!(
            "gpusort: could not remove {}, left by a job (process {pid}) that did not \
             finish: {e}",
            path.display()
        ),
    }
}

/// The process id in `<pid>-<nanos>`.
fn owner(rest: &str) -> Option<u32> {
    let (pid, nanos) = rest.split_once('-')?;
    nanos.parse::<u32>().ok()?;
    pid.parse().ok()
}

/// Whether process `pid` exists (it may belong to another user).
fn running(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process id that no process has: a child that has exited and been reaped.
    fn gone_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn leftovers_of_gone_jobs_are_removed_and_of_running_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("spill");
        std::fs::create_dir(&spill).unwrap();
        let output = dir.path().join("out.parquet");
        let gone = gone_pid();
        let alive = 1; // init
        let dead_tmp = dir
            .path()
            .join(format!(".out.parquet.gpusort-tmp-{gone}-12"));
        let dead_old = dir
            .path()
            .join(format!(".out.parquet.gpusort-old-{gone}-13"));
        let live_tmp = dir
            .path()
            .join(format!(".out.parquet.gpusort-tmp-{alive}-14"));
        let other = dir
            .path()
            .join(format!(".other.parquet.gpusort-tmp-{gone}-15"));
        let dead_spill = spill.join(format!("gpusort-spill-{gone}-16"));
        let unrelated = spill.join("datafusion-abc");
        std::fs::write(&dead_tmp, b"x").unwrap();
        std::fs::create_dir(&dead_old).unwrap();
        std::fs::write(dead_old.join("part-00000.parquet"), b"x").unwrap();
        std::fs::write(&live_tmp, b"x").unwrap();
        std::fs::write(&other, b"x").unwrap();
        std::fs::create_dir(&dead_spill).unwrap();
        std::fs::write(dead_spill.join("run"), b"x").unwrap();
        std::fs::create_dir(&unrelated).unwrap();
        // The output is in place: a copy moved aside is removed, not moved back.
        std::fs::write(&output, b"x").unwrap();
        // A live job's temporary output, locked, is kept though its process is gone.
        let locked = dir
            .path()
            .join(format!(".out.parquet.gpusort-tmp-{gone}-17"));
        std::fs::write(&locked, b"x").unwrap();
        let lock = JobLock::hold(&locked).unwrap();
        let mut cleaned = clean(&output, &spill);
        drop(lock);
        assert!(locked.exists());
        cleaned.kept.retain(|(path, _)| path != &locked);
        cleaned.removed.sort();
        let mut expected = vec![dead_tmp.clone(), dead_old.clone(), dead_spill.clone()];
        expected.sort();
        assert_eq!(cleaned.removed, expected);
        assert_eq!(cleaned.kept, vec![(live_tmp.clone(), alive)]);
        assert!(cleaned.restored.is_empty());
        for path in [&dead_tmp, &dead_old, &dead_spill] {
            assert!(!path.exists(), "{}", path.display());
        }
        for path in [&live_tmp, &other, &unrelated] {
            assert!(path.exists(), "{}", path.display());
        }
    }

    #[test]
    fn an_output_moved_aside_by_a_killed_job_is_moved_back() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("parts");
        let gone = gone_pid();
        let old = dir.path().join(format!(".parts.gpusort-old-{gone}-1"));
        let tmp = dir.path().join(format!(".parts.gpusort-tmp-{gone}-2"));
        for folder in [&old, &tmp] {
            std::fs::create_dir(folder).unwrap();
        }
        std::fs::write(old.join("part-00000.parquet"), b"the old output").unwrap();
        let cleaned = clean(&output, dir.path());
        assert_eq!(cleaned.restored, vec![output.clone()]);
        assert_eq!(cleaned.removed, vec![tmp.clone()]);
        assert_eq!(
            std::fs::read(output.join("part-00000.parquet")).unwrap(),
            b"the old output"
        );
        assert!(!old.exists() && !tmp.exists());
    }
}
