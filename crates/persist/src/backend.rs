//! File I/O behind a trait, so that every failure a disk can produce is
//! tested without a failing disk: [`OsBackend`] is the real one,
//! [`FaultBackend`] wraps any backend and injects short writes, EIO,
//! ENOSPC, fsync and rename failures, short reads and flipped bytes.
//! Bulk files (a snapshot written or loaded whole) go around the page
//! cache where the OS allows it ([`Backend::create_bulk`],
//! [`Backend::open_bulk`]); every other backend serves them as ordinary
//! files, and the fault backend injects into them all the same.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

/// Where snapshots are written and read.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Creates (or truncates) `path` for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Creates `path` for one long sequential write (a snapshot): the OS
    /// backend bypasses the page cache where the file system allows it.
    fn create_bulk(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.create(path)
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn ReadFile>>;
    /// Opens `path` for one long read of most of it (a snapshot load):
    /// the OS backend reads aligned requests ([`DIRECT_ALIGN`]: buffer,
    /// offset and length) around the page cache, and any other through it.
    fn open_bulk(&self, path: &Path) -> io::Result<Box<dyn ReadFile>> {
        self.open(path)
    }
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes a rename in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// The names of the files in `dir` (a missing directory has none).
    fn list(&self, dir: &Path) -> io::Result<Vec<std::ffi::OsString>>;
    /// Makes `dir` and its parents if missing.
    fn make_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes `path` (created if missing) for this process alone until the
    /// [`Lock`] is dropped; `WouldBlock` if another holds it.
    fn lock(&self, path: &Path) -> io::Result<Lock>;
}

/// A lock held while it lives (see [`Backend::lock`]).
pub struct Lock(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>);

impl Lock {
    pub fn new(held: impl std::any::Any + Send + Sync) -> Lock {
        Lock(Box::new(held))
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lock")
    }
}

/// A file being written from the start, sequentially. Its writes go over
/// whatever a [`ZeroFill`] put ahead of them, as over nothing.
pub trait WriteFile: Send {
    /// Writes some of `buf` (possibly fewer bytes than asked).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// `fdatasync`: what was written is on disk when this returns.
    fn sync(&mut self) -> io::Result<()>;
    /// A second handle on this file that writes zeros ahead of this one's
    /// writes, from another thread (the durability log preallocates its
    /// file with it). Files that cannot have one say `Unsupported`.
    fn zero_filler(&self) -> io::Result<Box<dyn ZeroFill>> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// Writes zeros into a file past where its [`WriteFile`] has written, so
/// that later writes land on blocks the file system has allocated and
/// written already: an fdatasync after them then has no size or extent to
/// commit to the file system's journal, only the data (on ext4 about 97 µs
/// against 150-210 µs for an append, measured on this kind of VM).
pub trait ZeroFill: Send {
    /// Writes zeros over up to `len` bytes at `off` (possibly fewer; the
    /// count is returned). The file grows to cover them.
    fn zeros_at(&mut self, off: u64, len: u64) -> io::Result<u64>;
    /// `fdatasync`: the zeros and the file's new size are on disk (and
    /// whatever the writer wrote before it, as any fdatasync of the file).
    fn sync(&mut self) -> io::Result<()>;
}

/// A file read at offsets.
pub trait ReadFile: Send + Sync {
    fn size(&self) -> io::Result<u64>;
    /// Reads some bytes at `off` (possibly fewer than asked; 0 at the end).
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// A hint that `len` bytes at `off` will be read soon (the kernel may
    /// start reading them); nothing happens by default.
    fn will_need(&self, _off: u64, _len: u64) {}
}

/// Writes all of `buf`, however short the backend's writes are.
pub fn write_all(f: &mut dyn WriteFile, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match f.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n.min(buf.len())..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buf` from `off`; false if the file ends first.
pub fn read_exact_at(f: &dyn ReadFile, buf: &mut [u8], mut off: u64) -> io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        match f.read_at(&mut buf[at..], off) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                at += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The operating system's files.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsBackend;

struct OsWrite(File);
struct OsRead(File);

/// Alignment and chunk size of [`DirectWrite`]'s writes; the alignment
/// of the reads a bulk file reads around the page cache.
pub const DIRECT_ALIGN: usize = 4096;
const DIRECT_CHUNK: usize = 4 << 20;

/// A file written with `O_DIRECT`: the bytes go from an aligned staging
/// buffer to the disk without a copy into the page cache. On this kind of
/// machine the page-cache copy was the snapshot's bottleneck: `dd` wrote
/// 0.4-2.3 GB/s buffered and 3.3 GB/s with `oflag=direct`. It also leaves
/// the page cache to the cache's own memory. The staging buffer is one
/// chunk; the last partial block is written padded with zeros and the file
/// cut back to its real length at `sync`.
struct DirectWrite {
    file: File,
    /// `buf[start..start + DIRECT_CHUNK]` is the aligned staging area.
    buf: Vec<u8>,
    start: usize,
    filled: usize,
    /// Where the staging area's first byte goes in the file (aligned).
    at: u64,
}

impl DirectWrite {
    fn new(file: File) -> DirectWrite {
        let buf = vec![0u8; DIRECT_CHUNK + DIRECT_ALIGN];
        let start = buf.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
        DirectWrite { file, buf, start, filled: 0, at: 0 }
    }

    /// Writes the first `len` staged bytes (a multiple of the alignment) at `at`.
    fn put(&mut self, len: usize) -> io::Result<()> {
        let mut done = 0;
        while done < len {
            let from = self.start + done;
            match self.file.write_at(&self.buf[from..self.start + len], self.at + done as u64) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                // O_DIRECT writes whole blocks; a short one ends on one.
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl WriteFile for DirectWrite {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(DIRECT_CHUNK - self.filled);
        let from = self.start + self.filled;
        self.buf[from..from + n].copy_from_slice(&data[..n]);
        self.filled += n;
        if self.filled == DIRECT_CHUNK {
            self.put(DIRECT_CHUNK)?;
            self.at += DIRECT_CHUNK as u64;
            self.filled = 0;
        }
        Ok(n)
    }

    fn sync(&mut self) -> io::Result<()> {
        if self.filled > 0 {
            // The partial tail goes out padded to a whole block; it stays
            // staged, so more writes after this rewrite it in place.
            let padded = self.filled.next_multiple_of(DIRECT_ALIGN);
            let (a, b) = (self.start + self.filled, self.start + padded);
            self.buf[a..b].fill(0);
            self.put(padded)?;
        }
        self.file.set_len(self.at + self.filled as u64)?;
        self.file.sync_data()
    }
}

impl WriteFile for OsWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn zero_filler(&self) -> io::Result<Box<dyn ZeroFill>> {
        // A duplicate descriptor shares the writer's file offset, which
        // positional writes neither use nor move.
        Ok(Box::new(OsZero { file: self.0.try_clone()?, zeros: vec![0u8; ZERO_PIECE as usize] }))
    }
}

/// The most a [`ZeroFill`] of the OS backend writes at once. A commit's
/// few KiB queue behind the piece being written: with 1 MiB pieces the
/// durable bench's p99 was 1468 µs, with 128 KiB 1086 µs; 32 KiB pieces
/// made the fill's own I/O so many that commits slowed (148 µs an
/// fdatasync against 131). The zeros go through the page cache on
/// purpose: written with O_DIRECT they left no page cached, so each
/// commit's write into a new page read it from the disk first (36.4 k
/// sets/s against 45.3 k, p99 1118 µs against 954).
const ZERO_PIECE: u64 = 128 << 10;

struct OsZero {
    file: File,
    zeros: Vec<u8>,
}

impl ZeroFill for OsZero {
    fn zeros_at(&mut self, off: u64, len: u64) -> io::Result<u64> {
        use std::os::fd::AsRawFd;
        let want = len.min(ZERO_PIECE) as usize;
        let n = self.file.write_at(&self.zeros[..want], off)?;
        // Sends the zeros to the disk now and waits for them: the log's
        // fdatasync would otherwise find them dirty and write them in the
        // commit's time. No metadata is made durable here (`sync` does).
        let (Ok(o), Ok(l)) = (libc::off64_t::try_from(off), libc::off64_t::try_from(n)) else { return Ok(n as u64) };
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: sync_file_range takes no pointers, only the descriptor
        // this handle owns and a range; a failure is only reported (the
        // final fdatasync in `sync` is what makes the zeros durable).
        if unsafe { libc::sync_file_range(self.file.as_raw_fd(), o, l, flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as u64)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}

impl ReadFile for OsRead {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.0.read_at(buf, off)
    }

    fn will_need(&self, off: u64, len: u64) {
        OsRead::advise(&self.0, off, len);
    }
}

/// A file opened for a bulk read: aligned requests go through an
/// `O_DIRECT` descriptor, straight from the disk into the caller's buffer,
/// others through an ordinary one. A load read 5 GB through the page cache
/// before: the kernel's pages had to be allocated, filled and copied out,
/// a second copy of the whole snapshot in memory on the way.
struct BulkRead {
    direct: Option<File>,
    plain: File,
}

impl ReadFile for BulkRead {
    fn size(&self) -> io::Result<u64> {
        Ok(self.plain.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let aligned = |n: usize| n.is_multiple_of(DIRECT_ALIGN);
        match &self.direct {
            Some(d)
                if aligned(buf.as_ptr() as usize) && aligned(buf.len()) && off.is_multiple_of(DIRECT_ALIGN as u64) =>
            {
                d.read_at(buf, off)
            }
            _ => self.plain.read_at(buf, off),
        }
    }

    fn will_need(&self, off: u64, len: u64) {
        OsRead::advise(&self.plain, off, len);
    }
}

impl OsRead {
    fn advise(f: &File, off: u64, len: u64) {
        use std::os::fd::AsRawFd;
        let (Ok(off), Ok(len)) = (libc::off_t::try_from(off), libc::off_t::try_from(len)) else { return };
        // SAFETY: posix_fadvise takes no pointers; it is only a hint, and a
        // failure changes nothing.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), off, len, libc::POSIX_FADV_WILLNEED) };
    }
}

impl Backend for OsBackend {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let f = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(OsWrite(f)))
    }

    fn create_bulk(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_DIRECT).open(path);
        match direct {
            Ok(f) => Ok(Box::new(DirectWrite::new(f))),
            // tmpfs and some others refuse O_DIRECT: write through the cache.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.create(path),
            Err(e) => Err(e),
        }
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn ReadFile>> {
        Ok(Box::new(OsRead(File::open(path)?)))
    }

    fn open_bulk(&self, path: &Path) -> io::Result<Box<dyn ReadFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        let plain = File::open(path)?;
        // tmpfs and some others refuse O_DIRECT: everything goes through the cache.
        let direct = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).ok();
        Ok(Box::new(BulkRead { direct, plain }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn lock(&self, path: &Path) -> io::Result<Lock> {
        use std::os::fd::AsRawFd;
        let f = OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
        // SAFETY: flock takes the descriptor of a file this function owns;
        // the lock lives as long as the file, which the Lock keeps.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Lock::new(f))
    }

    fn make_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        match std::fs::read_dir(dir) {
            Ok(rd) => rd.map(|e| e.map(|e| e.file_name())).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

/// Which faults a [`FaultBackend`] injects, to files open or opened later.
/// Byte counts are per file.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Every write takes at most half of what it is given (at least 1 byte).
    pub short_writes: bool,
    /// Writes fail with this errno once this many bytes were written.
    pub fail_write_at: Option<(u64, i32)>,
    /// `sync` fails with EIO.
    pub fail_sync: bool,
    /// `rename` fails with EIO.
    pub fail_rename: bool,
    /// Every read returns at most this many bytes.
    pub short_reads: Option<usize>,
    /// Reads fail with EIO at or past this offset.
    pub fail_read_at: Option<u64>,
    /// Reads that touch these bytes fail with EIO (a bad sector: what
    /// lies before and after still reads).
    pub fail_read_within: Option<std::ops::Range<u64>>,
    /// The byte at this offset reads with its bits flipped.
    pub flip_at: Option<u64>,
}

/// Wraps a backend and injects the [`Faults`] set on it.
#[derive(Debug, Clone)]
pub struct FaultBackend<B> {
    inner: B,
    faults: Arc<Mutex<Faults>>,
}

impl<B: Backend> FaultBackend<B> {
    pub fn new(inner: B) -> FaultBackend<B> {
        FaultBackend { inner, faults: Arc::default() }
    }

    /// Replaces the plan; open files follow it from their next operation.
    pub fn set(&self, faults: Faults) {
        *self.faults.lock() = faults;
    }

    fn plan(&self) -> Faults {
        self.faults.lock().clone()
    }
}

struct FaultWrite {
    inner: Box<dyn WriteFile>,
    faults: Arc<Mutex<Faults>>,
    written: u64,
}

impl WriteFile for FaultWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let plan = self.faults.lock().clone();
        let mut n = buf.len();
        if let Some((at, errno)) = plan.fail_write_at {
            if self.written >= at {
                return Err(io::Error::from_raw_os_error(errno));
            }
            n = n.min((at - self.written) as usize);
        }
        if plan.short_writes && n > 1 {
            n /= 2;
        }
        let n = self.inner.write(&buf[..n])?;
        self.written += n as u64;
        Ok(n)
    }

    fn sync(&mut self) -> io::Result<()> {
        if self.faults.lock().fail_sync {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync()
    }

    fn zero_filler(&self) -> io::Result<Box<dyn ZeroFill>> {
        Ok(Box::new(FaultZero { inner: self.inner.zero_filler()?, faults: self.faults.clone() }))
    }
}

/// Zeros ahead of a [`FaultWrite`]: the same plan, with `fail_write_at`
/// read as a file offset (the disk is full from there on).
struct FaultZero {
    inner: Box<dyn ZeroFill>,
    faults: Arc<Mutex<Faults>>,
}

impl ZeroFill for FaultZero {
    fn zeros_at(&mut self, off: u64, len: u64) -> io::Result<u64> {
        let plan = self.faults.lock().clone();
        let mut n = len;
        if let Some((at, errno)) = plan.fail_write_at {
            if off >= at {
                return Err(io::Error::from_raw_os_error(errno));
            }
            n = n.min(at - off);
        }
        if plan.short_writes && n > 1 {
            n /= 2;
        }
        self.inner.zeros_at(off, n)
    }

    fn sync(&mut self) -> io::Result<()> {
        if self.faults.lock().fail_sync {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync()
    }
}

struct FaultRead {
    inner: Box<dyn ReadFile>,
    faults: Arc<Mutex<Faults>>,
}

impl ReadFile for FaultRead {
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let plan = self.faults.lock().clone();
        let mut want = buf.len();
        if let Some(max) = plan.short_reads {
            want = want.min(max.max(1));
        }
        if let Some(at) = plan.fail_read_at {
            if off + want as u64 > at {
                if off >= at {
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
                want = (at - off) as usize;
            }
        }
        if let Some(bad) = &plan.fail_read_within {
            if off < bad.end && off + want as u64 > bad.start {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
        }
        let n = self.inner.read_at(&mut buf[..want], off)?;
        if let Some(at) = plan.flip_at {
            if at >= off && at < off + n as u64 {
                buf[(at - off) as usize] ^= 0xff;
            }
        }
        Ok(n)
    }
}

impl<B: Backend> Backend for FaultBackend<B> {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(FaultWrite { inner: self.inner.create(path)?, faults: self.faults.clone(), written: 0 }))
    }

    fn create_bulk(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(FaultWrite { inner: self.inner.create_bulk(path)?, faults: self.faults.clone(), written: 0 }))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn ReadFile>> {
        Ok(Box::new(FaultRead { inner: self.inner.open(path)?, faults: self.faults.clone() }))
    }

    fn open_bulk(&self, path: &Path) -> io::Result<Box<dyn ReadFile>> {
        Ok(Box::new(FaultRead { inner: self.inner.open_bulk(path)?, faults: self.faults.clone() }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if self.plan().fail_rename {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.plan().fail_sync {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync_dir(dir)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        self.inner.list(dir)
    }

    fn lock(&self, path: &Path) -> io::Result<Lock> {
        self.inner.lock(path)
    }

    fn make_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.make_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_filled_ahead_are_written_over_in_place() {
        // Also the test of OsZero's sync_file_range (its `unsafe`).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut f = OsBackend.create(&path).unwrap();
        write_all(&mut *f, b"head").unwrap();
        let mut z = f.zero_filler().unwrap();
        // Past the writer, with a gap it grows through; in pieces.
        let (from, to) = (100u64, 100 + ZERO_PIECE + 5);
        let mut at = from;
        while at < to {
            at += z.zeros_at(at, to - at).unwrap();
        }
        z.sync().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), to);
        write_all(&mut *f, &[7u8; 300]).unwrap();
        f.sync().unwrap();
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len() as u64, to, "the writes went over the zeros, not past them");
        assert_eq!(&got[..4], b"head");
        assert!(got[4..304].iter().all(|&b| b == 7) && got[304..].iter().all(|&b| b == 0));
        // Bulk (O_DIRECT) files have none.
        let bulk = OsBackend.create_bulk(&dir.path().join("bulk")).unwrap();
        assert!(bulk.zero_filler().is_err() || cfg!(not(target_os = "linux")));
    }

    #[test]
    fn bulk_files_read_back_exactly_whatever_the_write_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bulk");
        let mut f = OsBackend.create_bulk(&path).unwrap();
        let mut want = Vec::new();
        let mut n = 0u32;
        // Pieces of every size around the block and chunk sizes, with a
        // sync in the middle (a partial block written padded, then rewritten).
        for len in [1, 4095, 4096, 4097, 100_000, DIRECT_CHUNK - 3, 7, DIRECT_CHUNK + 5, 12_345] {
            let piece: Vec<u8> = (0..len)
                .map(|_| {
                    n = n.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (n >> 16) as u8
                })
                .collect();
            write_all(&mut *f, &piece).unwrap();
            want.extend_from_slice(&piece);
            if len == 7 {
                f.sync().unwrap();
                assert_eq!(std::fs::read(&path).ok().as_deref(), Some(&want[..]));
            }
        }
        f.sync().unwrap();
        assert_eq!(std::fs::read(&path).ok().as_deref(), Some(&want[..]));
    }

    #[test]
    fn bulk_reads_return_the_files_bytes_aligned_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bulk");
        let want: Vec<u8> = (0..3 * DIRECT_ALIGN + 123).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &want).unwrap();
        let f = OsBackend.open_bulk(&path).unwrap();
        assert_eq!(f.size().unwrap(), want.len() as u64);
        let mut big = vec![0u8; 5 * DIRECT_ALIGN];
        let at = big.as_ptr().align_offset(DIRECT_ALIGN);
        // Aligned buffer, offset and length: around the cache where the
        // file system allows it, short at the end of the file.
        let aligned = &mut big[at..at + 4 * DIRECT_ALIGN];
        let mut got = 0;
        while got < want.len() {
            let n = f.read_at(&mut aligned[got..], got as u64).unwrap();
            assert!(n > 0);
            got += n;
        }
        assert_eq!(&aligned[..want.len()], &want[..]);
        assert_eq!(f.read_at(&mut aligned[..DIRECT_ALIGN], 4 * DIRECT_ALIGN as u64).unwrap(), 0);
        // Anything unaligned goes through the cache, with the same bytes.
        for (off, len, shift) in
            [(1, 10, 0), (DIRECT_ALIGN - 3, 9, 1), (DIRECT_ALIGN, DIRECT_ALIGN, 5), (17, 2 * DIRECT_ALIGN, 0)]
        {
            let buf = &mut big[at + shift..at + shift + len];
            assert!(read_exact_at(&*f, buf, off as u64).unwrap());
            assert_eq!(buf, &want[off..off + len], "{off} {len} {shift}");
        }
    }
}
