//! Positional I/O on the flash tier's files behind a trait, so that every
//! failure a disk can produce is tested without a failing disk:
//! [`FileDevice`] is the real one (a file or a block device),
//! [`FaultDevice`] wraps any device and injects EIO on reads and writes,
//! ENOSPC, short reads and short writes, and flipped bytes.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

/// A file or block device read and written at offsets.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Bytes usable from offset 0.
    fn size(&self) -> u64;
    /// Reads some bytes at `off` (possibly fewer than asked; 0 at the end).
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Writes some of `buf` at `off` (possibly fewer bytes than asked).
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize>;
    /// [`Device::read_at`], but only if that needs no wait for the device
    /// (the bytes are in memory already): `ErrorKind::WouldBlock` if it
    /// would, and always from a device that cannot tell.
    fn read_at_nowait(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let _ = (buf, off);
        Err(io::ErrorKind::WouldBlock.into())
    }
}

/// Fills `buf` from `off`; an error if the device ends first.
pub fn read_exact_at(d: &dyn Device, buf: &mut [u8], off: u64) -> io::Result<()> {
    read_exact_with(d, buf, off, false)
}

/// [`read_exact_at`] with [`Device::read_at_nowait`]: `WouldBlock` if any
/// of it would wait for the device.
pub fn read_exact_at_nowait(d: &dyn Device, buf: &mut [u8], off: u64) -> io::Result<()> {
    read_exact_with(d, buf, off, true)
}

fn read_exact_with(d: &dyn Device, buf: &mut [u8], mut off: u64, nowait: bool) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let r = if nowait { d.read_at_nowait(&mut buf[at..], off) } else { d.read_at(&mut buf[at..], off) };
        match r {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                at += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` at `off`, however short the device's writes are.
pub fn write_all_at(d: &dyn Device, mut buf: &[u8], mut off: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match d.write_at(buf, off) {
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

/// A file (created and sized to `size` if need be) or a block device (its
/// own size, at most `size`).
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    len: u64,
    locked: bool,
}

impl FileDevice {
    /// Opens `path` for this process alone: an exclusive `flock` on it is
    /// held as long as the device is open, and a path another process
    /// holds is refused with `ErrorKind::WouldBlock`, before anything
    /// (its size included) is changed. Two servers writing one flash file
    /// would overwrite each other's regions under their own generations.
    pub fn open(path: &Path, size: u64) -> io::Result<FileDevice> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let locked = lock(&file)?;
        let meta = file.metadata()?;
        let len = if meta.file_type().is_block_device() {
            let end = std::io::Seek::seek(&mut &file, std::io::SeekFrom::End(0))?;
            end.min(size)
        } else {
            // Sparse: the file takes disk space as regions are written,
            // as memcached's extstore file does.
            if meta.len() != size {
                file.set_len(size)?;
            }
            size
        };
        Ok(FileDevice { file, len, locked })
    }

    /// Whether this process holds the path's lock: false where the file
    /// system has no `flock` (a second server there is not refused).
    pub fn locked(&self) -> bool {
        self.locked
    }
}

/// `flock(LOCK_EX | LOCK_NB)` on `file`: true if taken, an error if another
/// open file holds it, false if the file system cannot lock. `flock`
/// rather than `fcntl` locks: they belong to the open file, so they
/// survive `-d`'s fork into the child that keeps the descriptor, and a
/// second open of the path in this same process is refused too.
fn lock(file: &File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock takes the descriptor of a file open for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => {
            Err(io::Error::new(io::ErrorKind::WouldBlock, format!("another process uses it as its flash file ({e})")))
        }
        _ => Ok(false),
    }
}

impl Device for FileDevice {
    fn size(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.file.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.file.write_at(buf, off)
    }

    /// `preadv2` with `RWF_NOWAIT`: served from the page cache, or
    /// `EAGAIN` (also a kernel without it: `EOPNOTSUPP`, `ENOSYS`).
    fn read_at_nowait(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let off = i64::try_from(off).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        // SAFETY: one iovec describing `buf`, which is live and writable
        // for its whole length during the call; the fd is the open file's.
        let n = unsafe { libc::preadv2(self.file.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::ENOSYS) => Err(io::ErrorKind::WouldBlock.into()),
            _ => Err(e),
        }
    }
}

/// Faults a [`FaultDevice`] injects, changeable while it runs.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Reads fail with EIO.
    pub read_eio: bool,
    /// Writes fail with EIO.
    pub write_eio: bool,
    /// Writes at or beyond this offset fail with ENOSPC.
    pub enospc_from: Option<u64>,
    /// Reads and writes move at most this many bytes per call.
    pub short: Option<usize>,
    /// Bytes at these device offsets read back with their bits inverted.
    pub flip: Vec<u64>,
    /// Nothing is in memory: every read must wait for the device
    /// ([`Device::read_at_nowait`] says `WouldBlock`).
    pub slow: bool,
}

/// A device that fails as told: for tests of every error path.
#[derive(Debug, Clone)]
pub struct FaultDevice {
    inner: Arc<dyn Device>,
    faults: Arc<Mutex<Faults>>,
}

impl FaultDevice {
    pub fn new(inner: Arc<dyn Device>) -> FaultDevice {
        FaultDevice { inner, faults: Arc::default() }
    }

    /// The live faults: changes apply to the next call.
    pub fn faults(&self) -> Arc<Mutex<Faults>> {
        self.faults.clone()
    }
}

impl FaultDevice {
    fn read(&self, buf: &mut [u8], off: u64, nowait: bool) -> io::Result<usize> {
        let f = self.faults.lock().clone();
        if nowait && f.slow {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if f.read_eio {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let want = f.short.map_or(buf.len(), |s| s.max(1).min(buf.len()));
        let n = if nowait {
            self.inner.read_at_nowait(&mut buf[..want], off)?
        } else {
            self.inner.read_at(&mut buf[..want], off)?
        };
        for &at in &f.flip {
            if at >= off && at < off + n as u64 {
                buf[(at - off) as usize] ^= 0xff;
            }
        }
        Ok(n)
    }
}

impl Device for FaultDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.read(buf, off, false)
    }

    fn read_at_nowait(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.read(buf, off, true)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        let f = self.faults.lock().clone();
        if f.write_eio {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        if f.enospc_from.is_some_and(|at| off + buf.len() as u64 > at) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let want = f.short.map_or(buf.len(), |s| s.max(1).min(buf.len()));
        self.inner.write_at(&buf[..want], off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_device_sizes_reads_and_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flash");
        let d = FileDevice::open(&path, 1 << 20).unwrap();
        assert_eq!(d.size(), 1 << 20);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        write_all_at(&d, b"hello", 4096).unwrap();
        let mut buf = [0u8; 5];
        read_exact_at(&d, &mut buf, 4096).unwrap();
        assert_eq!(&buf, b"hello");
        assert!(read_exact_at(&d, &mut buf, (1 << 20) - 2).is_err(), "reads past the end fail");
    }

    #[test]
    fn a_file_is_opened_by_one_device_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flash");
        let d = FileDevice::open(&path, 1 << 20).unwrap();
        assert!(d.locked());
        let again = FileDevice::open(&path, 2 << 20).err().unwrap_or_else(|| panic!("opened twice"));
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
        assert!(again.to_string().contains("another process uses it"), "{again}");
        assert_eq!(std::fs::metadata(&path).map(|m| m.len()).ok(), Some(1 << 20), "left as it was");
        drop(d);
        FileDevice::open(&path, 1 << 20).unwrap_or_else(|e| panic!("the lock goes with the device: {e}"));
    }

    #[test]
    fn faults_apply_and_clear() {
        let dir = tempfile::tempdir().unwrap();
        let d = FaultDevice::new(Arc::new(FileDevice::open(&dir.path().join("f"), 1 << 16).unwrap()));
        let faults = d.faults();
        faults.lock().short = Some(3);
        write_all_at(&d, b"abcdefgh", 100).unwrap();
        faults.lock().flip = vec![101];
        let mut buf = [0u8; 8];
        read_exact_at(&d, &mut buf, 100).unwrap();
        assert_eq!(buf[1], b'b' ^ 0xff);
        assert_eq!(&buf[2..], b"cdefgh");
        faults.lock().read_eio = true;
        assert_eq!(
            read_exact_at(&d, &mut buf, 100).err().unwrap_or_else(|| panic!("should fail")).raw_os_error(),
            Some(libc::EIO)
        );
        faults.lock().enospc_from = Some(200);
        assert_eq!(
            write_all_at(&d, &[0; 200], 100).err().unwrap_or_else(|| panic!("should fail")).raw_os_error(),
            Some(libc::ENOSPC)
        );
        *faults.lock() = Faults::default();
        read_exact_at(&d, &mut buf, 100).unwrap();
        assert_eq!(&buf, b"abcdefgh");
    }

    #[test]
    fn reads_that_must_not_wait_come_from_memory_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(FileDevice::open(&dir.path().join("f"), 1 << 16).unwrap());
        write_all_at(&*file, b"in the page cache", 4096).unwrap();
        // Just written, so in memory: preadv2(RWF_NOWAIT) serves it.
        let mut buf = [0u8; 17];
        read_exact_at_nowait(&*file, &mut buf, 4096).unwrap();
        assert_eq!(&buf, b"in the page cache");
        let d = FaultDevice::new(file);
        d.faults().lock().slow = true;
        let err = read_exact_at_nowait(&d, &mut buf, 4096).err().map(|e| e.kind());
        assert_eq!(err, Some(io::ErrorKind::WouldBlock));
        read_exact_at(&d, &mut buf, 4096).unwrap_or_else(|e| panic!("a waiting read still works: {e}"));
        // A device that cannot tell always says it would wait.
        #[derive(Debug)]
        struct Plain;
        impl Device for Plain {
            fn size(&self) -> u64 {
                1
            }
            fn read_at(&self, buf: &mut [u8], _: u64) -> io::Result<usize> {
                Ok(buf.len())
            }
            fn write_at(&self, buf: &[u8], _: u64) -> io::Result<usize> {
                Ok(buf.len())
            }
        }
        assert_eq!(Plain.read_at_nowait(&mut buf, 0).err().map(|e| e.kind()), Some(io::ErrorKind::WouldBlock));
    }
}
