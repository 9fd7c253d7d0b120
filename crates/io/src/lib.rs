//! File I/O for everything strata keeps on disk, behind one trait: the
//! snapshot, the durability log and the epoch lease (`strata-persist`) and
//! the flash tier's files and block devices (`strata-flash`) all go
//! through a [`Backend`], so that every failure a disk can produce is
//! tested without a failing disk, and a power loss without a machine.
//!
//! Owns the interface and the operating system's implementation
//! ([`OsBackend`], `os.rs`): files created and opened by path and read at
//! offsets ([`PosFile`]), written at offsets where the flash tier needs it
//! (a file or block device opened as a [`Device`], `flock`'d, with reads
//! that must not wait for the disk), written sequentially where a snapshot
//! or the log is written ([`WriteFile`], with its [`ZeroFill`]), made
//! durable (`fdatasync`, directory syncs), renamed, removed, listed and
//! locked. Bulk files go around the page cache where the OS allows it.
//!
//! The test machinery is in [`sim`] (cargo feature `sim`, which only tests
//! turn on): one fault plan ([`sim::Faults`]) that [`sim::FaultBackend`]
//! applies to every kind of file, and [`sim::SimFs`], a file system in
//! memory that loses power. It knows nothing of what the files hold.

mod os;
#[cfg(feature = "sim")]
pub mod sim;

use std::ffi::OsString;
use std::io;
use std::path::Path;

pub use os::{OsBackend, DIRECT_ALIGN};

/// A file system: where snapshots, logs and flash files live.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Creates (or truncates) `path` for writing from its start.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Creates `path` for one long sequential write (a snapshot): the OS
    /// backend bypasses the page cache where the file system allows it.
    fn create_bulk(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.create(path)
    }
    /// Opens `path` for reading.
    fn open(&self, path: &Path) -> io::Result<Box<dyn PosFile>>;
    /// Opens `path` for one long read of most of it (a snapshot load):
    /// the OS backend reads aligned requests ([`DIRECT_ALIGN`]: buffer,
    /// offset and length) around the page cache, and any other through it.
    fn open_bulk(&self, path: &Path) -> io::Result<Box<dyn PosFile>> {
        self.open(path)
    }
    /// Opens `path` to be read and written at offsets, for this process
    /// alone: a file (created if missing, sparse, its length set to
    /// `size`) or a block device (its own size, at most `size`). An
    /// exclusive `flock` is held while the [`Device`] lives; a path another
    /// process holds is refused with `ErrorKind::WouldBlock` before
    /// anything (its length included) is changed. A file it creates is
    /// made durable in its directory before it returns: the records later
    /// synced into it would otherwise go with its name at a power loss.
    fn open_device(&self, path: &Path, size: u64) -> io::Result<Device>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the names in `dir` (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Cuts the file `path` to `len` bytes, durably (its new length is on
    /// disk when this returns). The durability log drops a replayed
    /// file's zeros and torn tail with it.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// The names of the files in `dir` (a missing directory has none).
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>>;
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

/// A file read, and where opened for it written, at offsets: a snapshot
/// or log being read back, a flash file or block device.
pub trait PosFile: Send + Sync {
    /// The file's length now (a block device's is its [`Device::len`]).
    fn size(&self) -> io::Result<u64>;
    /// Reads some bytes at `off` (possibly fewer than asked; 0 at the end).
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// [`PosFile::read_at`], but only if that needs no wait for the disk
    /// (the bytes are in memory already): `ErrorKind::WouldBlock` if it
    /// would, and always from a file that cannot tell.
    fn read_at_nowait(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let _ = (buf, off);
        Err(io::ErrorKind::WouldBlock.into())
    }
    /// Writes some of `buf` at `off` (possibly fewer bytes than asked); a
    /// file opened for reading refuses (EBADF).
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize>;
    /// [`PosFile::write_at`], durably: what it wrote is on disk when it
    /// returns, as after an fdatasync of those bytes alone (the rest of the
    /// file's unsynced writes are not waited for).
    fn write_at_dsync(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        let n = self.write_at(buf, off)?;
        self.sync()?;
        Ok(n)
    }
    /// `fdatasync`: every write made before it is on disk when it returns.
    fn sync(&self) -> io::Result<()>;
    /// A hint that `len` bytes at `off` will be read soon (the kernel may
    /// start reading them); nothing happens by default.
    fn will_need(&self, _off: u64, _len: u64) {}
    /// Starts writing the file's dirty pages to the disk without waiting
    /// for them (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), so that they
    /// do not pile up in the page cache: a later durable write or
    /// fdatasync then has little to wait for. A hint; nothing by default.
    fn start_writeback(&self) {}
}

/// A file or block device opened by [`Backend::open_device`].
pub struct Device {
    pub file: Box<dyn PosFile>,
    /// Bytes usable from offset 0.
    pub len: u64,
    /// Whether this process holds the path's lock: false where the file
    /// system has no `flock` (nothing then refuses a second process).
    pub locked: bool,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("len", &self.len).field("locked", &self.locked).finish_non_exhaustive()
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

/// Writes all of `buf`, however short the file's writes are.
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
pub fn read_exact_at(f: &dyn PosFile, buf: &mut [u8], off: u64) -> io::Result<bool> {
    read_exact_with(f, buf, off, false)
}

/// [`read_exact_at`] with [`PosFile::read_at_nowait`]: `WouldBlock` if any
/// of it would wait for the disk.
pub fn read_exact_at_nowait(f: &dyn PosFile, buf: &mut [u8], off: u64) -> io::Result<bool> {
    read_exact_with(f, buf, off, true)
}

fn read_exact_with(f: &dyn PosFile, buf: &mut [u8], mut off: u64, nowait: bool) -> io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        let r = if nowait { f.read_at_nowait(&mut buf[at..], off) } else { f.read_at(&mut buf[at..], off) };
        match r {
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

/// Writes all of `buf` at `off`, however short the file's writes are.
pub fn write_all_at(f: &dyn PosFile, buf: &[u8], off: u64) -> io::Result<()> {
    write_all_with(f, buf, off, false)
}

/// [`write_all_at`] with [`PosFile::write_at_dsync`]: on disk when it
/// returns.
pub fn write_all_at_dsync(f: &dyn PosFile, buf: &[u8], off: u64) -> io::Result<()> {
    write_all_with(f, buf, off, true)
}

fn write_all_with(f: &dyn PosFile, mut buf: &[u8], mut off: u64, dsync: bool) -> io::Result<()> {
    while !buf.is_empty() {
        let r = if dsync { f.write_at_dsync(buf, off) } else { f.write_at(buf, off) };
        match r {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                let n = n.min(buf.len());
                buf = &buf[n..];
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
