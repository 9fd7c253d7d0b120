//! The operating system's files: [`OsBackend`]. Ordinary files are read
//! and written through the page cache; a snapshot is written with
//! `O_DIRECT` ([`DirectWrite`]) and read back around the cache
//! ([`BulkRead`]) where the file system allows it, the file is large and
//! the cache does not already hold most of it; the log's file is
//! preallocated with zeros ([`OsZero`]); a flash file or block device is
//! `flock`'d and read without waiting where the page cache has it
//! (`preadv2` with `RWF_NOWAIT`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::{Backend, Device, Lock, PosFile, WriteFile, ZeroFill};

/// The operating system's files.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsBackend;

/// A file read and written at offsets through the page cache.
struct OsFile(File);

struct OsWrite(File);

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

/// Is `e` a kernel saying it lacks a system call or one of its flags?
fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL))
}

impl PosFile for OsFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.0.read_at(buf, off)
    }

    /// `preadv2` with `RWF_NOWAIT`: served from the page cache, or
    /// `EAGAIN` (also a kernel without it: `EOPNOTSUPP`, `ENOSYS`).
    fn read_at_nowait(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let off = i64::try_from(off).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        // SAFETY: one iovec describing `buf`, which is live and writable
        // for its whole length during the call; the fd is the open file's.
        let n = unsafe { libc::preadv2(self.0.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::ENOSYS) => Err(io::ErrorKind::WouldBlock.into()),
            _ => Err(e),
        }
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.0.write_at(buf, off)
    }

    /// `pwritev2` with `RWF_DSYNC`: the kernel writes these pages alone and
    /// flushes the disk's cache (an fdatasync would write every dirty page
    /// of the file). A kernel without it gets a write and an fdatasync.
    fn write_at_dsync(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        let o = i64::try_from(off).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let iov = libc::iovec { iov_base: buf.as_ptr().cast_mut().cast(), iov_len: buf.len() };
        // SAFETY: one iovec describing `buf`, live for the call; pwritev2
        // only reads from it (the cast to *mut is the iovec type's). The fd
        // is the open file's.
        let n = unsafe { libc::pwritev2(self.0.as_raw_fd(), &iov, 1, o, libc::RWF_DSYNC) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if !unsupported(&e) {
            return Err(e);
        }
        let n = self.0.write_at(buf, off)?;
        self.0.sync_data()?;
        Ok(n)
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn will_need(&self, off: u64, len: u64) {
        advise(&self.0, off, len);
    }

    fn start_writeback(&self) {
        // SAFETY: sync_file_range takes no pointers, only the descriptor
        // (the open file's) and a range (0, 0: the whole file). A hint: a
        // failure changes nothing.
        unsafe { libc::sync_file_range(self.0.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
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

impl BulkRead {
    /// Opens `path` for a bulk read, around the cache unless `through`
    /// says otherwise or the file system refuses O_DIRECT (tmpfs and some
    /// others: everything goes through the cache).
    fn open(path: &Path, through: ThroughCache) -> io::Result<BulkRead> {
        let plain = File::open(path)?;
        let small = plain.metadata()?.len() < through.below;
        let direct = if small || cached_share(&plain).is_some_and(|share| share >= through.cached) {
            None
        } else {
            OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).ok()
        };
        Ok(BulkRead { direct, plain })
    }
}

impl PosFile for BulkRead {
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

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.plain.write_at(buf, off)
    }

    fn sync(&self) -> io::Result<()> {
        self.plain.sync_data()
    }

    fn will_need(&self, off: u64, len: u64) {
        advise(&self.plain, off, len);
    }
}

/// When a bulk read goes through the page cache rather than around it.
#[derive(Debug, Clone, Copy)]
struct ThroughCache {
    /// Files smaller than this.
    below: u64,
    /// Files with at least this share of their pages in the cache.
    cached: f64,
}

/// Measured loading snapshots of 1,000-byte items on this project's 2-core
/// VM (docs/benchmarks-history.md, "Snapshot load warm and cold"): cold,
/// through the cache was faster at 1 GB (0.83 s against 1.17-1.19) and
/// 2 GB (1.5-1.8 s against 2.5-3.6), even at 3 GB, slower at 5 GB (5.3-5.8
/// against 4.1-4.4), where the kernel's allocating, filling and then
/// keeping 5 GB of pages costs more than the readers' waits; warm (the
/// file still cached after the stop that wrote it), O_DIRECT read the disk
/// again for nothing at every size.
const THROUGH_CACHE: ThroughCache = ThroughCache { below: 3 << 30, cached: 0.5 };

/// The share of `file`'s pages in the page cache (`mincore` over a mapping
/// of it); `None` for an empty file, or one that cannot be mapped.
fn cached_share(file: &File) -> Option<f64> {
    let len = usize::try_from(file.metadata().ok()?.len()).ok().filter(|&n| n > 0)?;
    // SAFETY: sysconf takes no pointers.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|&p| p > 0)?;
    // SAFETY: a new read-only shared mapping of the file's `len` bytes at an
    // address the kernel picks; it is only given to mincore and unmapped
    // below, never read through.
    let addr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    if addr == libc::MAP_FAILED {
        return None;
    }
    let pages = len.div_ceil(page);
    let mut resident = vec![0u8; pages];
    // SAFETY: `addr` is the start of the mapping made above, `len` long, and
    // `resident` has one byte for each of its pages, as mincore writes.
    let ok = unsafe { libc::mincore(addr, len, resident.as_mut_ptr()) } == 0;
    // SAFETY: unmaps exactly the mapping made above, which nothing refers to.
    unsafe { libc::munmap(addr, len) };
    ok.then(|| resident.iter().filter(|&&b| b & 1 != 0).count() as f64 / pages as f64)
}

fn advise(f: &File, off: u64, len: u64) {
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(off), libc::off_t::try_from(len)) else { return };
    // SAFETY: posix_fadvise takes no pointers; it is only a hint, and a
    // failure changes nothing.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), off, len, libc::POSIX_FADV_WILLNEED) };
}

/// `flock(LOCK_EX | LOCK_NB)` on `file`: `WouldBlock` if another open file
/// holds it. `flock` rather than `fcntl` locks: they belong to the open
/// file, so they survive `-d`'s fork into the child that keeps the
/// descriptor, and a second open of the path in this same process is
/// refused too.
fn flock(file: &File) -> io::Result<()> {
    // SAFETY: flock takes the descriptor of a file open for the call; the
    // lock lives as long as the file.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The directory a file is in (`.` for a bare name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl Backend for OsBackend {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let f = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(OsWrite(f)))
    }

    fn create_bulk(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let direct = OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_DIRECT).open(path);
        match direct {
            Ok(f) => Ok(Box::new(DirectWrite::new(f))),
            // tmpfs and some others refuse O_DIRECT: write through the cache.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.create(path),
            Err(e) => Err(e),
        }
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn PosFile>> {
        Ok(Box::new(OsFile(File::open(path)?)))
    }

    fn open_bulk(&self, path: &Path) -> io::Result<Box<dyn PosFile>> {
        Ok(Box::new(BulkRead::open(path, THROUGH_CACHE)?))
    }

    fn open_device(&self, path: &Path, size: u64) -> io::Result<Device> {
        let rw = || OpenOptions::new().read(true).write(true).clone();
        let (file, created) = match rw().create_new(true).open(path) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (rw().open(path)?, false),
            Err(e) => return Err(e),
        };
        let locked = match flock(&file) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
            // The file system cannot lock (the caller says so).
            Err(_) => false,
        };
        let meta = file.metadata()?;
        let len = if meta.file_type().is_block_device() {
            let end = std::io::Seek::seek(&mut &file, std::io::SeekFrom::End(0))?;
            end.min(size)
        } else {
            // Sparse: the file takes disk space as it is written, as
            // memcached's extstore file does.
            if meta.len() != size {
                file.set_len(size)?;
            }
            size
        };
        if created {
            self.sync_dir(dir_of(path))?;
        }
        Ok(Device { file: Box::new(OsFile(file)), len, locked })
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

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_len(len)?;
        f.sync_data()
    }

    fn lock(&self, path: &Path) -> io::Result<Lock> {
        let f = OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
        flock(&f)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{read_exact_at, read_exact_at_nowait, write_all, write_all_at, write_all_at_dsync};

    #[test]
    fn writeback_started_leaves_the_bytes_as_written() {
        // The test of OsFile::start_writeback's `unsafe`.
        let dir = tempfile::tempdir().unwrap();
        let dev = OsBackend.open_device(&dir.path().join("flash"), 1 << 20).unwrap();
        write_all_at(&*dev.file, &[9u8; 8192], 4096).unwrap();
        dev.file.start_writeback();
        let mut b = [0u8; 8192];
        assert!(read_exact_at(&*dev.file, &mut b, 4096).unwrap());
        assert_eq!(b, [9u8; 8192]);
    }

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
        let mut rng = crate::sim::Rng::new(1);
        // Pieces of every size around the block and chunk sizes, with a
        // sync in the middle (a partial block written padded, then rewritten).
        for len in [1, 4095, 4096, 4097, 100_000, DIRECT_CHUNK - 3, 7, DIRECT_CHUNK + 5, 12_345] {
            let piece: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
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
    fn a_bulk_read_goes_through_the_cache_only_when_the_cache_holds_the_file() {
        // Also the test of cached_share's `unsafe`.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snap");
        let want: Vec<u8> = (0..64 * DIRECT_ALIGN).map(|i| (i * 13 % 251) as u8).collect();
        std::fs::write(&path, &want).unwrap();
        let f = File::open(&path).unwrap();
        f.sync_all().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);
        assert_eq!(cached_share(&f), Some(1.0), "just written and read: all cached");
        // SAFETY: posix_fadvise takes no pointers. Written back
        // above, the pages can be dropped.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let share = cached_share(&f).unwrap();
        // tmpfs keeps its pages whatever is advised, and takes no O_DIRECT.
        let tmpfs = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path).is_err();
        assert!(tmpfs || share < THROUGH_CACHE.cached, "dropped: {share}");
        // Large and not cached: around the cache; cached or small: through it.
        let large = ThroughCache { below: 0, ..THROUGH_CACHE };
        assert_eq!(BulkRead::open(&path, large).unwrap().direct.is_some(), !tmpfs);
        assert!(BulkRead::open(&path, THROUGH_CACHE).unwrap().direct.is_none(), "small");
        let _ = std::fs::read(&path).unwrap();
        assert!(BulkRead::open(&path, large).unwrap().direct.is_none(), "cached again");
        assert_eq!(cached_share(&File::create(dir.path().join("empty")).unwrap()), None);
        // Either way the bytes read back.
        let bulk = OsBackend.open_bulk(&path).unwrap();
        let mut got = vec![0u8; want.len()];
        assert!(crate::read_exact_at(&*bulk, &mut got, 0).unwrap());
        assert_eq!(got, want);
    }

    #[test]
    fn bulk_reads_return_the_files_bytes_aligned_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bulk");
        let want: Vec<u8> = (0..3 * DIRECT_ALIGN + 123).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &want).unwrap();
        // Around the cache whatever its size and the cache hold: the
        // O_DIRECT path and its fallbacks for unaligned requests.
        let f = BulkRead::open(&path, ThroughCache { below: 0, cached: f64::INFINITY }).unwrap();
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
            assert!(read_exact_at(&f, buf, off as u64).unwrap());
            assert_eq!(buf, &want[off..off + len], "{off} {len} {shift}");
        }
    }

    #[test]
    fn a_device_is_sized_read_and_written_at_offsets() {
        // Also the test of pwritev2 (RWF_DSYNC), preadv2 (RWF_NOWAIT) and
        // posix_fadvise: their `unsafe`.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flash");
        let d = OsBackend.open_device(&path, 1 << 20).unwrap();
        assert_eq!((d.len, d.locked), (1 << 20, true));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20, "sparse, at its size");
        write_all_at(&*d.file, b"hello", 4096).unwrap();
        write_all_at_dsync(&*d.file, b"durable", 8192).unwrap();
        d.file.sync().unwrap();
        d.file.will_need(0, 1 << 20);
        let mut buf = [0u8; 5];
        assert!(read_exact_at(&*d.file, &mut buf, 4096).unwrap());
        assert_eq!(&buf, b"hello");
        // Just written, so in memory: preadv2(RWF_NOWAIT) serves it.
        let mut buf = [0u8; 7];
        assert!(read_exact_at_nowait(&*d.file, &mut buf, 8192).unwrap());
        assert_eq!(&buf, b"durable");
        assert!(!read_exact_at(&*d.file, &mut buf, (1 << 20) - 2).unwrap(), "reads past the end come short");
        // Opened for reading, it refuses writes.
        drop(d);
        let r = OsBackend.open(&path).unwrap();
        assert_eq!(r.write_at(b"x", 0).err().and_then(|e| e.raw_os_error()), Some(libc::EBADF));
    }

    #[test]
    fn a_device_is_opened_by_one_holder_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flash");
        let d = OsBackend.open_device(&path, 1 << 20).unwrap();
        let again = OsBackend.open_device(&path, 2 << 20).err().unwrap_or_else(|| panic!("opened twice"));
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(std::fs::metadata(&path).map(|m| m.len()).ok(), Some(1 << 20), "left as it was");
        // The snapshot's lock file and the flash file lock alike.
        let lock = OsBackend.lock(&dir.path().join("lock")).unwrap();
        assert_eq!(OsBackend.lock(&dir.path().join("lock")).err().map(|e| e.kind()), Some(io::ErrorKind::WouldBlock));
        drop((d, lock));
        OsBackend.open_device(&path, 1 << 20).unwrap_or_else(|e| panic!("the lock goes with the device: {e}"));
        OsBackend.lock(&dir.path().join("lock")).unwrap_or_else(|e| panic!("and with the Lock: {e}"));
    }

    #[test]
    fn reads_that_must_not_wait_say_so_from_a_file_that_cannot_tell() {
        struct Plain;
        impl PosFile for Plain {
            fn size(&self) -> io::Result<u64> {
                Ok(1)
            }
            fn read_at(&self, buf: &mut [u8], _: u64) -> io::Result<usize> {
                Ok(buf.len())
            }
            fn write_at(&self, buf: &[u8], _: u64) -> io::Result<usize> {
                Ok(buf.len())
            }
            fn sync(&self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut buf = [0u8; 4];
        assert_eq!(Plain.read_at_nowait(&mut buf, 0).err().map(|e| e.kind()), Some(io::ErrorKind::WouldBlock));
        assert_eq!(Plain.write_at_dsync(&buf, 0).ok(), Some(4));
    }
}
