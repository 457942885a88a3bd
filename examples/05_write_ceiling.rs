//! How fast this host takes a file's bytes into its page cache, by the ways a Parquet
//! writer could hand them over: one thread appending (what `gpusort sort`'s appender does),
//! several threads writing disjoint ranges of one file (`pwrite`), several threads each
//! filling a file of its own (a directory output), and several threads copying into a
//! shared mapping of one file: sparse, allocated first (`fallocate`), or allocated and each
//! thread's pages asked for first (`MADV_POPULATE_WRITE`).
//!
//! The write stage of a narrow sort is bound by the first of these (docs/performance.md,
//! "Parquet files"), so these are the ceilings a parallel writer can reach on the host. (An
//! allocated mapping reaches three times `write()`'s rate here, yet lost inside the sort's
//! process: docs/performance.md, 2026-12-01, session 27.)
//! Times stop when the last byte is in the page cache; the flush to disk (`fsync`) is
//! timed apart.
//!
//! ```text
//! cargo run --profile device --example 05_write_ceiling -- DIR [GIB] [THREADS..]
//! ```

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bytes handed over per call, as a page-sized Parquet write would.
const CALL: usize = 1 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: 05_write_ceiling DIR [GIB] [THREADS..]")?,
    );
    let gib: f64 = args.next().map_or(Ok(2.0), |n| n.parse())?;
    let mut threads: Vec<usize> = args.map(|t| t.parse()).collect::<Result<_, _>>()?;
    if threads.is_empty() {
        threads = vec![2, 4, 8, 16];
    }
    std::fs::create_dir_all(&dir)?;
    let total = (gib * (1u64 << 30) as f64) as usize / CALL * CALL;
    // Bytes that do not compress or repeat within a page, made once.
    let source: Vec<u8> = (0..64 * CALL as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect();
    println!(
        "{:.2} GiB into {}; GB/s into the page cache (fsync apart), best of 3",
        total as f64 / (1u64 << 30) as f64,
        dir.display()
    );
    report("one thread, write()", total, || {
        one_appender(&dir, total, &source)
    })?;
    for &n in &threads {
        report(
            &format!("{n} threads, pwrite() into one file"),
            total,
            || ranges_of_one_file(&dir, total, n, &source),
        )?;
        report(&format!("{n} threads, a file each"), total, || {
            file_each(&dir, total, n, &source)
        })?;
        for (prepare, name) in [
            (Prepare::Sparse, "copies into a mapping"),
            (Prepare::Allocated, "into a mapping, allocated"),
            (Prepare::Populated, "into a mapping, populated"),
        ] {
            report(&format!("{n} threads, {name}"), total, || {
                mapped(&dir, total, n, &source, prepare)
            })?;
        }
    }
    let _ = std::fs::remove_dir_all(dir.join("ceiling"));
    Ok(())
}

/// Runs `write` three times (each into fresh files) and prints the best rate and the
/// flush that followed it.
fn report(
    name: &str,
    total: usize,
    mut write: impl FnMut() -> std::io::Result<(Duration, Duration)>,
) -> std::io::Result<()> {
    let mut best: Option<(Duration, Duration)> = None;
    for _ in 0..3 {
        let (copy, flush) = write()?;
        if best.is_none_or(|(b, _)| copy < b) {
            best = Some((copy, flush));
        }
    }
    let (copy, flush) = best.expect("three runs");
    println!(
        "{name:>36}: {:6.2} GB/s ({:5.0} ms), then fsync {:5.0} ms",
        total as f64 / copy.as_secs_f64() / 1e9,
        copy.as_secs_f64() * 1e3,
        flush.as_secs_f64() * 1e3
    );
    Ok(())
}

/// Fresh files under `dir/ceiling`: the earlier run's removed first.
fn fresh(dir: &Path, count: usize) -> std::io::Result<Vec<PathBuf>> {
    let root = dir.join("ceiling");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root)?;
    Ok((0..count).map(|i| root.join(format!("{i}.bin"))).collect())
}

fn create(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
}

/// The source's bytes for the call at `offset`.
fn chunk(source: &[u8], offset: usize) -> &[u8] {
    let start = offset % source.len();
    &source[start..start + CALL]
}

fn one_appender(dir: &Path, total: usize, source: &[u8]) -> std::io::Result<(Duration, Duration)> {
    use std::io::Write;
    let path = &fresh(dir, 1)?[0];
    let started = Instant::now();
    let mut file = create(path)?;
    for offset in (0..total).step_by(CALL) {
        file.write_all(chunk(source, offset))?;
    }
    let copied = started.elapsed();
    file.sync_all()?;
    Ok((copied, started.elapsed() - copied))
}

/// `threads` ranges of `total / threads` bytes (whole calls), the last taking the rest.
fn ranges(total: usize, threads: usize) -> Vec<(usize, usize)> {
    let calls = total / CALL;
    (0..threads)
        .map(|t| (calls * t / threads * CALL, calls * (t + 1) / threads * CALL))
        .collect()
}

fn ranges_of_one_file(
    dir: &Path,
    total: usize,
    threads: usize,
    source: &[u8],
) -> std::io::Result<(Duration, Duration)> {
    let path = &fresh(dir, 1)?[0];
    let started = Instant::now();
    let file = create(path)?;
    std::thread::scope(|s| {
        let jobs: Vec<_> = ranges(total, threads)
            .into_iter()
            .map(|(start, end)| {
                let file = &file;
                s.spawn(move || {
                    for offset in (start..end).step_by(CALL) {
                        file.write_all_at(chunk(source, offset), offset as u64)?;
                    }
                    Ok::<_, std::io::Error>(())
                })
            })
            .collect();
        jobs.into_iter()
            .try_for_each(|j| j.join().expect("a writing thread panicked"))
    })?;
    let copied = started.elapsed();
    file.sync_all()?;
    Ok((copied, started.elapsed() - copied))
}

fn file_each(
    dir: &Path,
    total: usize,
    threads: usize,
    source: &[u8],
) -> std::io::Result<(Duration, Duration)> {
    use std::io::Write;
    let paths = fresh(dir, threads)?;
    let started = Instant::now();
    let files = std::thread::scope(|s| {
        let jobs: Vec<_> = ranges(total, threads)
            .into_iter()
            .zip(&paths)
            .map(|((start, end), path)| {
                s.spawn(move || {
                    let mut file = create(path)?;
                    for offset in (start..end).step_by(CALL) {
                        file.write_all(chunk(source, offset))?;
                    }
                    Ok::<_, std::io::Error>(file)
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("a writing thread panicked"))
            .collect::<std::io::Result<Vec<_>>>()
    })?;
    let copied = started.elapsed();
    files.iter().try_for_each(File::sync_all)?;
    Ok((copied, started.elapsed() - copied))
}

/// How a mapped file is readied before the threads copy into it.
#[derive(Clone, Copy)]
enum Prepare {
    /// `set_len` alone: each first write to a page reserves its block (ext4's delayed
    /// allocation, under the file's lock).
    Sparse,
    /// `fallocate` first, so a write fault finds its block already allocated.
    Allocated,
    /// `fallocate`, then each thread asks for its range's pages at once
    /// (`MADV_POPULATE_WRITE`) before copying.
    Populated,
}

fn mapped(
    dir: &Path,
    total: usize,
    threads: usize,
    source: &[u8],
    prepare: Prepare,
) -> std::io::Result<(Duration, Duration)> {
    use std::os::fd::AsRawFd;
    let path = &fresh(dir, 1)?[0];
    let started = Instant::now();
    let file = create(path)?;
    match prepare {
        Prepare::Sparse => file.set_len(total as u64)?,
        Prepare::Allocated | Prepare::Populated => {
            // SAFETY: a plain system call on an open descriptor.
            if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, total as libc::off_t) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    // SAFETY: a fresh shared mapping of the whole file, which this function alone uses
    // and unmaps below; each thread writes a disjoint range of it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let address = base as usize;
    std::thread::scope(|s| {
        for (start, end) in ranges(total, threads) {
            s.spawn(move || {
                if matches!(prepare, Prepare::Populated) {
                    // SAFETY: advice on this thread's range of the mapping made above.
                    let done = unsafe {
                        libc::madvise(
                            (address + start) as *mut libc::c_void,
                            end - start,
                            libc::MADV_POPULATE_WRITE,
                        )
                    };
                    assert_eq!(
                        done,
                        0,
                        "MADV_POPULATE_WRITE: {}",
                        std::io::Error::last_os_error()
                    );
                }
                for offset in (start..end).step_by(CALL) {
                    let bytes = chunk(source, offset);
                    // SAFETY: `offset..offset + CALL` lies in the mapping and in this
                    // thread's range alone.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            bytes.as_ptr(),
                            (address + offset) as *mut u8,
                            CALL,
                        )
                    };
                }
            });
        }
    });
    // SAFETY: the mapping made above, no longer used by any thread.
    unsafe { libc::munmap(base, total) };
    let copied = started.elapsed();
    file.sync_all()?;
    Ok((copied, started.elapsed() - copied))
}
