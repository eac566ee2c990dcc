//! A local file written past the page cache once it is large (checkpoints
//! at scale; benches/RESULTS.md "W3: the page cache").
//!
//! A checkpoint's state files are written once and read back only on a
//! restore. Written through the page cache, every byte is copied by the
//! kernel into freshly allocated cache pages (the single largest cost of a
//! W3 checkpoint after the snapshot itself), those pages push the running
//! job's working set out of the CPU caches, and deleting the file when
//! retention drops it has to free them again. Here a file's bytes gather in
//! one page-aligned buffer of [`CHUNK`] bytes; once it fills, the file is
//! switched to `O_DIRECT` (Linux) and written a chunk at a time straight
//! from that buffer, which stays hot in the cache. The tail (less than a
//! chunk, not a whole number of blocks) is written through the page cache
//! after switching `O_DIRECT` off again, and `fsync` makes the whole file
//! durable as before. A file smaller than a chunk never uses `O_DIRECT`; a
//! file system that refuses it, when the flag is set or at the first direct
//! write (`EINVAL`), is written through the cache.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Write};

/// Bytes gathered before a direct write: a multiple of every block size in
/// use (4 KiB pages, 512-byte sectors).
pub(crate) const CHUNK: usize = 1 << 20;

/// The alignment `O_DIRECT` asks of buffers, offsets and lengths.
const ALIGN: usize = 4096;

thread_local! {
    /// The chunk buffer of the last file this thread finished, for its next
    /// one: checkpoint writer threads live as long as the job, and a fresh
    /// 1 MiB buffer per file came as fresh pages the kernel zeroes.
    static SPARE: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

pub(crate) struct UncachedFile {
    file: File,
    /// `CHUNK + ALIGN` bytes, of which `start..start + CHUNK` is page-aligned.
    buf: Vec<u8>,
    start: usize,
    /// Bytes of the chunk filled.
    len: usize,
    /// Whether the file is open with `O_DIRECT`.
    direct: bool,
    /// Whether switching to `O_DIRECT` failed (never tried again).
    refused: bool,
}

impl UncachedFile {
    pub(crate) fn new(file: File) -> Self {
        let buf = SPARE
            .with(|spare| spare.borrow_mut().take())
            .filter(|buf| buf.len() == CHUNK + ALIGN)
            .unwrap_or_else(|| vec![0u8; CHUNK + ALIGN]);
        let start = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        UncachedFile {
            file,
            buf,
            start,
            len: 0,
            direct: false,
            refused: false,
        }
    }

    /// Writes the full chunk, directly when the file system allows it.
    fn write_chunk(&mut self) -> io::Result<()> {
        if !self.direct && !self.refused {
            match set_direct(&self.file, true) {
                Ok(()) => self.direct = true,
                Err(_) => self.refused = true,
            }
        }
        let mut at = 0;
        while at < CHUNK {
            let rest = &self.buf[self.start + at..self.start + CHUNK];
            match self.file.write(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                    // A file system that took the flag but refuses the
                    // write itself: the rest goes through the page cache.
                    set_direct(&self.file, false)?;
                    self.direct = false;
                    self.refused = true;
                }
                Err(e) => return Err(e),
            }
        }
        self.len = 0;
        Ok(())
    }

    /// Writes the tail through the page cache and fsyncs the file.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        if self.direct {
            set_direct(&self.file, false)?;
            self.direct = false;
        }
        let tail = &self.buf[self.start..self.start + self.len];
        self.file.write_all(tail)?;
        self.len = 0;
        self.file.sync_all()
    }

    /// Whether the file has been switched to `O_DIRECT` (for tests).
    #[cfg(test)]
    pub(crate) fn is_direct(&self) -> bool {
        self.direct
    }
}

impl Drop for UncachedFile {
    /// Leaves the chunk buffer to this thread's next file.
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        SPARE.with(|spare| *spare.borrow_mut() = Some(buf));
    }
}

impl Write for UncachedFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let room = CHUNK - self.len;
        let n = room.min(bytes.len());
        let at = self.start + self.len;
        self.buf[at..at + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        if self.len == CHUNK {
            self.write_chunk()?;
        }
        Ok(n)
    }

    /// Nothing to do: bytes short of a chunk are written by
    /// [`UncachedFile::finish`] (a direct write needs a whole chunk).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this `File` owns and keeps open; no
    // pointer arguments.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_direct(_file: &File, _on: bool) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "O_DIRECT is used on Linux only",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    /// Sizes around the chunk boundary, written in odd pieces, read back
    /// byte for byte; a file of a chunk or more went direct (Linux, with
    /// the test directory on a disk file system: tmpfs refuses `O_DIRECT`).
    #[test]
    #[cfg(target_os = "linux")]
    fn test_uncached_file_round_trips_every_size() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        for (i, size) in [0, 1, 4095, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 12_345]
            .into_iter()
            .enumerate()
        {
            let path = dir.path().join(format!("f{i}"));
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?;
            let mut out = UncachedFile::new(file);
            let data = pattern(size);
            for piece in data.chunks(7919) {
                out.write_all(piece)?;
            }
            // A small file stays in the page cache; a larger one went
            // direct (the test directory is on a disk file system here).
            assert_eq!(out.is_direct(), size >= CHUNK, "size {size}");
            out.finish()?;
            assert_eq!(std::fs::read(&path)?, data, "size {size}");
        }
        Ok(())
    }
}
