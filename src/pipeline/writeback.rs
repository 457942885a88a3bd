//! An output file whose written bytes start going to disk while the rest is still being
//! written.
//!
//! Every output file is flushed to disk (fsync) before it is renamed into place. Left to
//! the end, that flush waits for the whole file: 1.2 s for 2.3 GiB on the H100 host, after
//! all the encoding is done. [`WritebackFile`] asks the kernel to start writing back each
//! [`WRITEBACK_BYTES`] as soon as they are written (`sync_file_range` with
//! `SYNC_FILE_RANGE_WRITE`, which does not wait), so the disk works alongside the encoders
//! and the final fsync finds little left. It changes no byte of the file and no promise
//! about durability: the fsync still comes before the rename. Elsewhere than Linux it is a
//! plain file.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes written between two requests to start writing back.
pub(super) const WRITEBACK_BYTES: u64 = 32 << 20;

/// A file being written, its bytes sent to disk in the background as they accumulate.
pub(super) struct WritebackFile {
    /// `None` once [`Self::finish`]ed.
    file: Option<File>,
    /// Adds up the bytes written (shared by the files of one output).
    counted: Arc<AtomicU64>,
    /// Bytes written so far.
    written: u64,
    /// Bytes whose writeback has been requested (a prefix of the file).
    requested: u64,
    /// Time spent requesting writeback (the request may wait for the device's queue),
    /// for the timeline.
    requesting: std::time::Duration,
    /// Request writeback at all (off for an output that is not flushed to disk).
    writeback: bool,
}

impl WritebackFile {
    /// Wraps `file`, written from its start, adding what is written to `counted`; with
    /// `writeback` off it is a plain file that counts its bytes.
    pub(super) fn new(file: File, counted: Arc<AtomicU64>, writeback: bool) -> Self {
        Self {
            file: Some(file),
            counted,
            written: 0,
            requested: 0,
            requesting: std::time::Duration::ZERO,
            writeback,
        }
    }

    fn open(&mut self) -> io::Result<&mut File> {
        self.file
            .as_mut()
            .ok_or_else(|| io::Error::other("gpusort: writing to a finished file"))
    }

    /// Requests writeback of what was written since the last request, when that is at
    /// least `at_least` bytes.
    fn request(&mut self, at_least: u64) {
        let pending = self.written - self.requested;
        if !self.writeback || pending == 0 || pending < at_least {
            return;
        }
        let started = std::time::Instant::now();
        if let Some(file) = &self.file {
            start_writeback(file, self.requested, pending);
        }
        self.requesting += started.elapsed();
        self.requested = self.written;
    }

    /// Ends the file: with `sync`, flushed to disk through the descriptor that wrote it
    /// (an error of any earlier write-back shows there), then closed with the close's own
    /// error checked (some file systems report a failed write only then).
    pub(super) fn finish(mut self, sync: bool) -> io::Result<()> {
        self.request(1);
        let file = self.file.take().expect("an open file");
        if sync {
            file.sync_all()?;
        }
        close_checked(file)
    }
}

/// Closes `file`, returning the close's error.
#[cfg(unix)]
fn close_checked(file: File) -> io::Result<()> {
    use std::os::fd::IntoRawFd;
    let fd = file.into_raw_fd();
    // SAFETY: `fd` came out of a `File` that no longer owns it; it is closed once.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(unix))]
fn close_checked(file: File) -> io::Result<()> {
    drop(file);
    Ok(())
}

impl Write for WritebackFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.open()?.write(buf)?;
        self.written += n as u64;
        self.counted.fetch_add(n as u64, Ordering::Relaxed);
        self.request(WRITEBACK_BYTES);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.open()?.flush()
    }
}

impl Drop for WritebackFile {
    fn drop(&mut self) {
        // The tail too: the fsync that follows finds it on its way.
        self.request(1);
        let (bytes, requesting) = (self.written, self.requesting);
        crate::trace::event(|| {
            format!(
                "writeback: {bytes} bytes requested in {:.0} ms",
                requesting.as_secs_f64() * 1e3
            )
        });
    }
}

/// Starts writing back bytes `offset .. offset + len` of `file`; does not wait. A failure
/// is ignored: the fsync before the rename reports any error writing the file.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain system call on an open descriptor; it reads no memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_byte_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let counted = Arc::new(AtomicU64::new(0));
        let mut file = WritebackFile::new(File::create(&path).unwrap(), Arc::clone(&counted), true);
        let chunk: Vec<u8> = (0..1_000_003u32).map(|i| (i % 251) as u8).collect();
        let mut expected = Vec::new();
        // Past several writeback requests, the last one partial.
        while expected.len() < (WRITEBACK_BYTES as usize) * 2 + 12345 {
            file.write_all(&chunk).unwrap();
            expected.extend_from_slice(&chunk);
        }
        assert!(file.requested > WRITEBACK_BYTES);
        assert!(file.written - file.requested < WRITEBACK_BYTES);
        drop(file);
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert_eq!(counted.load(Ordering::Relaxed), expected.len() as u64);
    }

    #[test]
    fn without_writeback_nothing_is_requested() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let counted = Arc::new(AtomicU64::new(0));
        let mut file =
            WritebackFile::new(File::create(&path).unwrap(), Arc::clone(&counted), false);
        let chunk = vec![7u8; (WRITEBACK_BYTES as usize) + 99];
        file.write_all(&chunk).unwrap();
        file.write_all(&chunk).unwrap();
        assert_eq!(file.requested, 0);
        drop(file);
        assert_eq!(std::fs::read(&path).unwrap().len(), chunk.len() * 2);
        assert_eq!(counted.load(Ordering::Relaxed), chunk.len() as u64 * 2);
    }
}
