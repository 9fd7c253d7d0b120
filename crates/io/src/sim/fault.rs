//! The fault plan and the backend that applies it: [`FaultBackend`] wraps
//! any backend, and every file it hands out — written from the start
//! ([`WriteFile`]) with its zero filler, read or written at offsets
//! ([`PosFile`], a flash device's included) — fails as the one plan
//! ([`Faults`]) says, from its next operation after [`FaultBackend::set`].

use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{Backend, Device, Lock, PosFile, WriteFile, ZeroFill};

/// Which faults a [`FaultBackend`] injects, to files open or opened later.
/// Offsets are file offsets (a file written from its start has written as
/// many bytes as its offset).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Every write takes at most half of what it is given (at least 1 byte).
    pub short_writes: bool,
    /// Writes at or past this offset fail with this errno, and a write that
    /// reaches it stops short there: ENOSPC, the disk full from there on;
    /// `(0, EIO)`, every write failing.
    pub fail_write_at: Option<(u64, i32)>,
    /// Syncs fail with EIO: a file's fdatasync, a durable write, a
    /// directory's sync.
    pub fail_sync: bool,
    /// `rename` fails with EIO.
    pub fail_rename: bool,
    /// Every read returns at most this many bytes.
    pub short_reads: Option<usize>,
    /// Reads fail with EIO at or past this offset (0: every read).
    pub fail_read_at: Option<u64>,
    /// Reads that touch these bytes fail with EIO (a bad sector: what
    /// lies before and after still reads).
    pub fail_read_within: Option<Range<u64>>,
    /// The bytes at these offsets read with their bits flipped.
    pub flip_at: Vec<u64>,
    /// Nothing is in memory: a read that must not wait for the disk
    /// ([`PosFile::read_at_nowait`]) says `WouldBlock`.
    pub uncached: bool,
}

impl Faults {
    /// How much of a `len`-byte write at `off` goes through.
    fn write_len(&self, off: u64, len: u64) -> io::Result<u64> {
        let mut n = len;
        if let Some((at, errno)) = self.fail_write_at {
            if off >= at {
                return Err(io::Error::from_raw_os_error(errno));
            }
            n = n.min(at - off);
        }
        if self.short_writes && n > 1 {
            n /= 2;
        }
        Ok(n)
    }

    fn sync(&self) -> io::Result<()> {
        if self.fail_sync {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }
}

type Plan = Arc<Mutex<Faults>>;

/// Wraps a backend and injects the [`Faults`] set on it.
#[derive(Debug, Clone)]
pub struct FaultBackend<B> {
    inner: B,
    faults: Plan,
}

impl<B: Backend> FaultBackend<B> {
    pub fn new(inner: B) -> FaultBackend<B> {
        FaultBackend { inner, faults: Arc::default() }
    }

    /// Replaces the plan; open files follow it from their next operation.
    pub fn set(&self, faults: Faults) {
        *self.faults.lock() = faults;
    }

    /// The backend it wraps.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn plan(&self) -> Faults {
        self.faults.lock().clone()
    }
}

struct FaultWrite {
    inner: Box<dyn WriteFile>,
    faults: Plan,
    /// Bytes written, which is where the next write goes.
    written: u64,
}

impl WriteFile for FaultWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.faults.lock().write_len(self.written, buf.len() as u64)? as usize;
        let n = self.inner.write(&buf[..n])?;
        self.written += n as u64;
        Ok(n)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.faults.lock().sync()?;
        self.inner.sync()
    }

    fn zero_filler(&self) -> io::Result<Box<dyn ZeroFill>> {
        Ok(Box::new(FaultZero { inner: self.inner.zero_filler()?, faults: self.faults.clone() }))
    }
}

/// Zeros ahead of a [`FaultWrite`], under the same plan.
struct FaultZero {
    inner: Box<dyn ZeroFill>,
    faults: Plan,
}

impl ZeroFill for FaultZero {
    fn zeros_at(&mut self, off: u64, len: u64) -> io::Result<u64> {
        let n = self.faults.lock().write_len(off, len)?;
        self.inner.zeros_at(off, n)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.faults.lock().sync()?;
        self.inner.sync()
    }
}

struct FaultFile {
    inner: Box<dyn PosFile>,
    faults: Plan,
}

impl FaultFile {
    fn read(&self, buf: &mut [u8], off: u64, nowait: bool) -> io::Result<usize> {
        let plan = self.faults.lock().clone();
        if nowait && plan.uncached {
            return Err(io::ErrorKind::WouldBlock.into());
        }
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
        let n = if nowait {
            self.inner.read_at_nowait(&mut buf[..want], off)?
        } else {
            self.inner.read_at(&mut buf[..want], off)?
        };
        for &at in &plan.flip_at {
            if at >= off && at < off + n as u64 {
                buf[(at - off) as usize] ^= 0xff;
            }
        }
        Ok(n)
    }

    fn write(&self, buf: &[u8], off: u64, dsync: bool) -> io::Result<usize> {
        let n = {
            let plan = self.faults.lock();
            if dsync {
                plan.sync()?;
            }
            plan.write_len(off, buf.len() as u64)? as usize
        };
        if dsync {
            self.inner.write_at_dsync(&buf[..n], off)
        } else {
            self.inner.write_at(&buf[..n], off)
        }
    }
}

impl PosFile for FaultFile {
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.read(buf, off, false)
    }

    fn read_at_nowait(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.read(buf, off, true)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.write(buf, off, false)
    }

    fn write_at_dsync(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.write(buf, off, true)
    }

    fn sync(&self) -> io::Result<()> {
        self.faults.lock().sync()?;
        self.inner.sync()
    }

    fn will_need(&self, off: u64, len: u64) {
        self.inner.will_need(off, len);
    }

    fn start_writeback(&self) {
        self.inner.start_writeback();
    }
}

impl<B: Backend> FaultBackend<B> {
    fn wrap(&self, inner: Box<dyn PosFile>) -> Box<dyn PosFile> {
        Box::new(FaultFile { inner, faults: self.faults.clone() })
    }

    fn wrap_write(&self, inner: Box<dyn WriteFile>) -> Box<dyn WriteFile> {
        Box::new(FaultWrite { inner, faults: self.faults.clone(), written: 0 })
    }
}

impl<B: Backend> Backend for FaultBackend<B> {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        Ok(self.wrap_write(self.inner.create(path)?))
    }

    fn create_bulk(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        Ok(self.wrap_write(self.inner.create_bulk(path)?))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn PosFile>> {
        Ok(self.wrap(self.inner.open(path)?))
    }

    fn open_bulk(&self, path: &Path) -> io::Result<Box<dyn PosFile>> {
        Ok(self.wrap(self.inner.open_bulk(path)?))
    }

    fn open_device(&self, path: &Path, size: u64) -> io::Result<Device> {
        let d = self.inner.open_device(path, size)?;
        Ok(Device { file: self.wrap(d.file), ..d })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if self.plan().fail_rename {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.plan().sync()?;
        self.inner.sync_dir(dir)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }

    /// Fails as a sync would (the new length is made durable).
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.plan().sync()?;
        self.inner.truncate(path, len)
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
    use crate::sim::SimFs;
    use crate::{read_exact_at, read_exact_at_nowait, write_all, write_all_at, write_all_at_dsync, OsBackend};

    fn errno<T>(r: io::Result<T>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    /// Each fault of the plan, on a file written from its start and on a
    /// device written at offsets, of the OS and of the simulated disk.
    fn every_fault_reaches_every_kind_of_file(b: &dyn Backend, dir: &Path, fb: &dyn Fn(Faults)) {
        let seq = dir.join("seq");
        let dev = b.open_device(&dir.join("dev"), 1 << 16).unwrap();
        let d = &*dev.file;
        let mut w = b.create(&seq).unwrap();
        // Short writes still write everything, in more calls.
        fb(Faults { short_writes: true, ..Faults::default() });
        assert_eq!(w.write(b"abcdefgh").unwrap(), 4);
        write_all(&mut *w, b"efgh").unwrap();
        assert_eq!(d.write_at(b"abcdefgh", 100).unwrap(), 4);
        write_all_at(d, b"abcdefgh", 100).unwrap();
        // A full disk from an offset: writes reaching it stop there.
        fb(Faults { fail_write_at: Some((10, libc::ENOSPC)), ..Faults::default() });
        assert_eq!(errno(write_all(&mut *w, b"ijklmnop")), Some(libc::ENOSPC));
        assert_eq!(errno(write_all_at(d, b"ijklmnop", 5)), Some(libc::ENOSPC));
        assert_eq!(errno(write_all_at_dsync(d, b"x", 10)), Some(libc::ENOSPC));
        write_all_at(d, b"ok", 0).unwrap();
        fb(Faults { fail_write_at: Some((0, libc::EIO)), ..Faults::default() });
        assert_eq!(errno(d.write_at(b"x", 0)), Some(libc::EIO));
        // Syncs of every kind.
        fb(Faults { fail_sync: true, ..Faults::default() });
        assert_eq!(errno(w.sync()), Some(libc::EIO));
        assert_eq!(errno(d.sync()), Some(libc::EIO));
        assert_eq!(errno(d.write_at_dsync(b"x", 0)), Some(libc::EIO));
        assert_eq!(errno(b.sync_dir(dir)), Some(libc::EIO));
        fb(Faults { fail_rename: true, ..Faults::default() });
        assert_eq!(errno(b.rename(&seq, &dir.join("other"))), Some(libc::EIO));
        fb(Faults::default());
        w.sync().unwrap();
        drop(w);
        let r = b.open(&seq).unwrap();
        let files: [&dyn PosFile; 2] = [&*r, d];
        for (f, base) in files.into_iter().zip([0u64, 100]) {
            let mut buf = [0u8; 8];
            assert!(read_exact_at(f, &mut buf, base).unwrap());
            assert_eq!(&buf, b"abcdefgh", "at {base}");
            // Short reads still read everything, in more calls.
            fb(Faults { short_reads: Some(3), ..Faults::default() });
            assert_eq!(f.read_at(&mut buf, base).unwrap(), 3);
            assert!(read_exact_at(f, &mut buf, base).unwrap());
            // Errors from an offset, or in a range only.
            fb(Faults { fail_read_at: Some(base + 4), ..Faults::default() });
            assert_eq!(f.read_at(&mut buf, base).unwrap(), 4);
            assert_eq!(errno(read_exact_at(f, &mut buf, base)), Some(libc::EIO));
            fb(Faults { fail_read_within: Some(base + 2..base + 3), ..Faults::default() });
            assert_eq!(errno(f.read_at(&mut buf, base)), Some(libc::EIO));
            assert!(
                read_exact_at(f, &mut buf[..2], base).unwrap() && read_exact_at(f, &mut buf[3..], base + 3).unwrap()
            );
            // Flipped bytes.
            fb(Faults { flip_at: vec![base + 1, base + 6], ..Faults::default() });
            assert!(read_exact_at(f, &mut buf, base).unwrap());
            assert_eq!((buf[1], buf[6], &buf[2..6]), (b'b' ^ 0xff, b'g' ^ 0xff, &b"cdef"[..]));
            // Nothing cached: a read that must not wait says so; one that
            // may wait reads.
            fb(Faults { uncached: true, ..Faults::default() });
            let nowait = read_exact_at_nowait(f, &mut buf, base).err().map(|e| e.kind());
            assert_eq!(nowait, Some(io::ErrorKind::WouldBlock));
            assert!(read_exact_at(f, &mut buf, base).unwrap());
            fb(Faults::default());
            assert!(read_exact_at(f, &mut buf, base).unwrap());
            assert_eq!(&buf, b"abcdefgh", "cleared at {base}");
        }
    }

    #[test]
    fn each_fault_reaches_sequential_and_positional_files() {
        let dir = tempfile::tempdir().unwrap();
        let os = FaultBackend::new(OsBackend);
        every_fault_reaches_every_kind_of_file(&os, dir.path(), &|f| os.set(f));
        let sim = FaultBackend::new(SimFs::new());
        every_fault_reaches_every_kind_of_file(&sim, Path::new("/sim"), &|f| sim.set(f));
    }

    #[test]
    fn zeros_filled_ahead_meet_the_same_plan() {
        let fb = FaultBackend::new(SimFs::new());
        let w = fb.create(Path::new("/d/log")).unwrap();
        let mut z = w.zero_filler().unwrap();
        fb.set(Faults { fail_write_at: Some((1000, libc::ENOSPC)), short_writes: true, ..Faults::default() });
        assert_eq!(z.zeros_at(900, 500).unwrap(), 50, "to the full disk, halved");
        assert_eq!(errno(z.zeros_at(1000, 5)), Some(libc::ENOSPC));
        fb.set(Faults { fail_sync: true, ..Faults::default() });
        assert_eq!(errno(z.sync()), Some(libc::EIO));
        fb.set(Faults::default());
        z.sync().unwrap();
    }
}
