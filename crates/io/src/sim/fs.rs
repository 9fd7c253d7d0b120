//! A file system in memory that loses power: the backend of the crash
//! simulator (`crates/persist/tests/integration/crash_sim/`), and of any test that
//! wants to know what a disk keeps when the machine stops at a given I/O
//! operation — snapshots and logs written from their start, and flash
//! files written at offsets, under the same rules.
//!
//! What it keeps follows what POSIX promises and no more:
//! - file contents are durable as of the last `sync` (fdatasync) of that
//!   file, by any of its handles (a writer, its [`ZeroFill`], a
//!   [`PosFile`] opened to write). The writes made after it, taken in the
//!   order they were made (appended, written over zeros filled ahead, or
//!   written at an offset; zeros filled ahead are bytes like any other), may
//!   at a power loss be kept wholly, not at all, up to any byte (a torn
//!   write), or all but one 512-byte block of them, which reads as before
//!   (a later block reached the disk, an earlier did not), chosen by the
//!   seed. A write made durable by itself ([`PosFile::write_at_dsync`]) is
//!   kept whatever happens to the others. The length a device is given
//!   when it is opened is kept if every write made before it is;
//! - the directory (which names exist, renames, removals) is durable as of
//!   the last `sync_dir`; after a power loss it reverts to that listing, and
//!   a name created since is gone;
//! - every operation that changes something counts as one I/O point (reads
//!   do not); at the point the plan names ([`SimFs::crash_at`]) the
//!   "machine" stops: that operation and every one after it, reads too,
//!   fail with EIO until [`SimFs::power_loss`] is called, as a process
//!   killed mid-write would never see its later calls return.
//!
//! Reads are served from memory: a read that must not wait never has to.
//! Everything is deterministic for a seed: a failing schedule reproduces.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use super::Rng;
use crate::{Backend, Device, Lock, PosFile, WriteFile, ZeroFill};

/// One change to a file since its last sync, in the order made.
#[derive(Debug, Clone)]
enum Change {
    /// Bytes written at an offset; `dsync`: made durable by the write.
    Write { at: usize, bytes: Vec<u8>, dsync: bool },
    /// The file's length set.
    Len(usize),
}

/// One file's bytes: what the disk has, and what the page cache holds.
#[derive(Debug, Default, Clone)]
struct Data {
    /// Survives a power loss.
    durable: Vec<u8>,
    /// What reads see now.
    current: Vec<u8>,
    /// The changes since the last sync, oldest first: what turns
    /// `durable` into `current`, and what a power loss may lose.
    pending: Vec<Change>,
}

/// Writes `buf` over `v` at `at`, growing it as needed.
fn put_at(v: &mut Vec<u8>, at: usize, buf: &[u8]) {
    if v.len() < at + buf.len() {
        v.resize(at + buf.len(), 0);
    }
    v[at..at + buf.len()].copy_from_slice(buf);
}

impl Data {
    fn write(&mut self, at: usize, buf: &[u8], dsync: bool) {
        put_at(&mut self.current, at, buf);
        self.pending.push(Change::Write { at, bytes: buf.to_vec(), dsync });
    }

    fn set_len(&mut self, len: usize) {
        self.current.resize(len, 0);
        self.pending.push(Change::Len(len));
    }

    fn sync(&mut self) {
        self.durable = self.current.clone();
        self.pending.clear();
    }

    /// The power goes: the changes since the last sync are kept as `rng`
    /// picks (see the module doc), and the rest is lost.
    fn lose_power(&mut self, rng: &mut Rng) {
        // The bytes that may be lost, in the order written.
        let total: usize = self
            .pending
            .iter()
            .map(|c| match c {
                Change::Write { bytes, dsync: false, .. } => bytes.len(),
                _ => 0,
            })
            .sum();
        let pick = rng.below(4);
        let keep = match pick {
            _ if total == 0 => 0,
            0 => 0,
            1 | 3 => total,
            _ => rng.below(total as u64 + 1) as usize,
        };
        // One block of those bytes reads as before (zeros where there was
        // nothing): a later block reached the disk, an earlier did not.
        let hole = if pick == 3 && total > 0 {
            let at = rng.below(total.div_ceil(512) as u64) as usize * 512;
            at..(at + 512).min(total)
        } else {
            0..0
        };
        let mut now = std::mem::take(&mut self.durable);
        let mut seq = 0;
        for c in &self.pending {
            match c {
                Change::Write { at, bytes, dsync: true } => put_at(&mut now, *at, bytes),
                Change::Write { at, bytes, dsync: false } => {
                    // Bytes seq..seq + len of those that may be lost: the
                    // ones before the cut, less the hole.
                    let (from, to) = (seq, seq + bytes.len());
                    let kept_to = to.min(keep);
                    for (a, b) in [(from, kept_to.min(hole.start)), (from.max(hole.end), kept_to)] {
                        if a < b {
                            put_at(&mut now, at + a - from, &bytes[a - from..b - from]);
                        }
                    }
                    // The hole's bytes did not arrive, but the file is as
                    // long as the writes after them made it.
                    let (a, b) = (from.max(hole.start), kept_to.min(hole.end));
                    if a < b && now.len() < at + b - from {
                        now.resize(at + b - from, 0);
                    }
                    seq = to;
                }
                Change::Len(len) if seq <= keep => now.resize(*len, 0),
                Change::Len(_) => {}
            }
        }
        self.current = now.clone();
        self.durable = now;
        self.pending.clear();
    }
}

type File = Arc<Mutex<Data>>;

#[derive(Debug, Default)]
struct State {
    /// The listing reads see now.
    names: HashMap<PathBuf, File>,
    /// The listing as of the last directory sync.
    durable_names: HashMap<PathBuf, File>,
}

/// A file system in memory with power loss (see the module doc).
#[derive(Debug, Clone)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
    ops: Arc<AtomicU64>,
    crash_at: Arc<AtomicU64>,
    dead: Arc<AtomicBool>,
    /// The disk is full: writes fail with ENOSPC (the machine runs on).
    full: Arc<AtomicBool>,
}

impl Default for SimFs {
    fn default() -> SimFs {
        SimFs::new()
    }
}

fn dead() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

impl SimFs {
    pub fn new() -> SimFs {
        SimFs {
            state: Arc::default(),
            ops: Arc::default(),
            crash_at: Arc::new(AtomicU64::new(u64::MAX)),
            dead: Arc::default(),
            full: Arc::default(),
        }
    }

    /// The disk fills (`true`): every write from now on fails with ENOSPC,
    /// counted as an I/O operation, while reads, syncs and the machine go
    /// on; or has room again.
    pub fn set_full(&self, full: bool) {
        self.full.store(full, Relaxed);
    }

    /// Counts a write; Err if the machine is down or the disk is full.
    fn write_step(&self) -> io::Result<()> {
        self.step()?;
        if self.full.load(Relaxed) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }

    /// A copy of the files and names as they are now, unsynced writes
    /// included, that goes its own way from here (to try many power losses
    /// on one state). Handles open on this one stay on this one.
    pub fn fork(&self) -> SimFs {
        let st = self.state.lock();
        let mut copies: HashMap<*const Mutex<Data>, File> = HashMap::new();
        let mut copy =
            |f: &File| copies.entry(Arc::as_ptr(f)).or_insert_with(|| Arc::new(Mutex::new(f.lock().clone()))).clone();
        let names = st.names.iter().map(|(p, f)| (p.clone(), copy(f))).collect();
        let durable_names = st.durable_names.iter().map(|(p, f)| (p.clone(), copy(f))).collect();
        let fs = SimFs::new();
        *fs.state.lock() = State { names, durable_names };
        fs
    }

    /// The machine stops at I/O operation `n` (counted from 0 since the
    /// file system was made); `u64::MAX`: never.
    pub fn crash_at(&self, n: u64) {
        self.crash_at.store(n, Relaxed);
    }

    /// I/O operations so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Relaxed)
    }

    /// The crash point was reached: every operation fails.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Relaxed)
    }

    /// Counts one operation; Err if the machine is (or just went) down.
    fn step(&self) -> io::Result<()> {
        if self.dead.load(Relaxed) {
            return Err(dead());
        }
        let n = self.ops.fetch_add(1, Relaxed);
        if n >= self.crash_at.load(Relaxed) {
            self.dead.store(true, Relaxed);
            return Err(dead());
        }
        Ok(())
    }

    fn alive(&self) -> io::Result<()> {
        if self.is_dead() {
            return Err(dead());
        }
        Ok(())
    }

    /// The power goes: the listing reverts to its last directory sync, and
    /// each file keeps its synced bytes and, as `seed` picks, none, all or
    /// some of the writes made after them (see the module doc). Then the
    /// machine is up again (no crash point set).
    pub fn power_loss(&self, seed: u64) {
        let mut rng = Rng::new(seed);
        let mut st = self.state.lock();
        st.names = st.durable_names.clone();
        let mut files: Vec<(PathBuf, File)> = st.names.iter().map(|(p, f)| (p.clone(), f.clone())).collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, f) in files {
            f.lock().lose_power(&mut rng);
        }
        self.crash_at.store(u64::MAX, Relaxed);
        self.dead.store(false, Relaxed);
    }

    /// The process dies (kill -9) but the machine stays up: every write
    /// made so far stays (the page cache has it) and the listing as it is;
    /// the operation at the crash point never happened. The machine serves
    /// again (no crash point set).
    pub fn kill(&self) {
        self.crash_at.store(u64::MAX, Relaxed);
        self.dead.store(false, Relaxed);
    }

    /// A file's bytes as reads see them (for tests that cut or damage them).
    pub fn read_all(&self, path: &Path) -> Option<Vec<u8>> {
        self.state.lock().names.get(path).map(|f| f.lock().current.clone())
    }

    /// Replaces a file's bytes, durably (for tests that cut or damage them).
    pub fn put(&self, path: &Path, bytes: &[u8]) {
        let data = Data { durable: bytes.to_vec(), current: bytes.to_vec(), pending: Vec::new() };
        let f: File = Arc::new(Mutex::new(data));
        let mut st = self.state.lock();
        st.names.insert(path.to_path_buf(), f.clone());
        st.durable_names.insert(path.to_path_buf(), f);
    }
}

fn offset(off: u64) -> io::Result<usize> {
    usize::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))
}

struct SimWrite {
    fs: SimFs,
    file: File,
    /// Where the next write goes (the writer's file offset).
    pos: usize,
}

impl WriteFile for SimWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.fs.write_step()?;
        self.file.lock().write(self.pos, buf, false);
        self.pos += buf.len();
        Ok(buf.len())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.fs.step()?;
        self.file.lock().sync();
        Ok(())
    }

    fn zero_filler(&self) -> io::Result<Box<dyn ZeroFill>> {
        Ok(Box::new(SimZero { fs: self.fs.clone(), file: self.file.clone() }))
    }
}

/// Zeros ahead of a [`SimWrite`]: each call is one I/O point, and zeros
/// are bytes like others until a sync.
struct SimZero {
    fs: SimFs,
    file: File,
}

impl ZeroFill for SimZero {
    fn zeros_at(&mut self, off: u64, len: u64) -> io::Result<u64> {
        self.fs.write_step()?;
        let (off, n) = (offset(off)?, offset(len)?);
        self.file.lock().write(off, &vec![0u8; n], false);
        Ok(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.fs.step()?;
        self.file.lock().sync();
        Ok(())
    }
}

/// A file read, and if `writable` written, at offsets.
struct SimFile {
    fs: SimFs,
    file: File,
    writable: bool,
}

impl SimFile {
    fn write(&self, buf: &[u8], off: u64, dsync: bool) -> io::Result<usize> {
        if !self.writable {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        self.fs.write_step()?;
        self.file.lock().write(offset(off)?, buf, dsync);
        Ok(buf.len())
    }
}

impl PosFile for SimFile {
    fn size(&self) -> io::Result<u64> {
        self.fs.alive()?;
        Ok(self.file.lock().current.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.fs.alive()?;
        let d = self.file.lock();
        let Ok(off) = usize::try_from(off) else { return Ok(0) };
        if off >= d.current.len() {
            return Ok(0);
        }
        let n = buf.len().min(d.current.len() - off);
        buf[..n].copy_from_slice(&d.current[off..off + n]);
        Ok(n)
    }

    fn read_at_nowait(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.read_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.write(buf, off, false)
    }

    fn write_at_dsync(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.write(buf, off, true)
    }

    fn sync(&self) -> io::Result<()> {
        self.fs.step()?;
        self.file.lock().sync();
        Ok(())
    }
}

impl Backend for SimFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.step()?;
        let file: File = Arc::default();
        self.state.lock().names.insert(path.to_path_buf(), file.clone());
        Ok(Box::new(SimWrite { fs: self.clone(), file, pos: 0 }))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn PosFile>> {
        self.alive()?;
        let file = self.state.lock().names.get(path).cloned().ok_or_else(not_found)?;
        Ok(Box::new(SimFile { fs: self.clone(), file, writable: false }))
    }

    /// As the OS backend's: created if missing (and its name made durable
    /// then), its length set to `size`. One process runs on a simulated
    /// disk: the lock is always its own.
    fn open_device(&self, path: &Path, size: u64) -> io::Result<Device> {
        self.step()?;
        let found = self.state.lock().names.get(path).cloned();
        let file = match found {
            Some(f) => f,
            None => {
                let f: File = Arc::default();
                self.state.lock().names.insert(path.to_path_buf(), f.clone());
                self.sync_dir(path.parent().unwrap_or(Path::new("/")))?;
                f
            }
        };
        let len = offset(size)?;
        {
            let mut d = file.lock();
            if d.current.len() != len {
                d.set_len(len);
            }
        }
        Ok(Device { file: Box::new(SimFile { fs: self.clone(), file, writable: true }), len: size, locked: true })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step()?;
        let mut st = self.state.lock();
        let f = st.names.remove(from).ok_or_else(not_found)?;
        st.names.insert(to.to_path_buf(), f);
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        self.step()?;
        let mut st = self.state.lock();
        st.durable_names = st.names.clone();
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.step()?;
        self.state.lock().names.remove(path).map(|_| ()).ok_or_else(not_found)
    }

    /// One I/O point: the length is set and made durable at once, as the
    /// OS backend's `set_len` then `fdatasync` leave it (a power loss
    /// between the two keeps the old length and bytes, which the log's
    /// reader reads the same way).
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.step()?;
        let file = self.state.lock().names.get(path).cloned().ok_or_else(not_found)?;
        let mut d = file.lock();
        d.set_len(offset(len)?);
        d.sync();
        Ok(())
    }

    /// Directories are implied by the paths of the files in them.
    fn make_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }

    /// One process runs on a simulated disk: the lock is always free.
    fn lock(&self, _path: &Path) -> io::Result<Lock> {
        Ok(Lock::new(()))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        self.alive()?;
        let st = self.state.lock();
        let mut out: Vec<OsString> = st
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_os_string()))
            .collect();
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::{read_exact_at, write_all, write_all_at, write_all_at_dsync};

    /// What each of `seeds` power losses leaves of `path`, from one state.
    fn after_power_loss(fs: &SimFs, path: &Path, seeds: u64) -> Vec<Vec<u8>> {
        (0..seeds)
            .map(|seed| {
                let c = fs.fork();
                c.power_loss(seed);
                c.read_all(path).unwrap_or_default()
            })
            .collect()
    }

    #[test]
    fn unsynced_bytes_and_names_may_go_synced_ones_stay() {
        let fs = SimFs::new();
        let dir = Path::new("/d");
        let a = dir.join("a");
        let mut f = fs.create(&a).unwrap();
        write_all(&mut *f, b"hello").unwrap();
        f.sync().unwrap();
        fs.power_loss(1);
        assert!(fs.read_all(&a).is_none(), "created but the directory never synced");
        let mut f = fs.create(&a).unwrap();
        write_all(&mut *f, b"hello").unwrap();
        f.sync().unwrap();
        fs.sync_dir(dir).unwrap();
        write_all(&mut *f, b" world").unwrap();
        let mut seen = HashSet::new();
        for got in after_power_loss(&fs, &a, 64) {
            let holed = got == b"hello\0\0\0\0\0\0";
            assert!(got.starts_with(b"hello") && (b"hello world".starts_with(&got[..]) || holed), "{got:?}");
            seen.insert((got.len(), holed));
        }
        assert!(
            seen.contains(&(5, false)) && seen.contains(&(11, false)) && seen.contains(&(11, true)) && seen.len() > 3,
            "dropped, kept, torn and holed: {seen:?}"
        );
    }

    #[test]
    fn zeros_filled_ahead_are_durable_once_synced_and_writes_over_them_may_tear() {
        let fs = SimFs::new();
        let a = Path::new("/d/a");
        let mut f = fs.create(a).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        write_all(&mut *f, b"head").unwrap();
        let mut z = f.zero_filler().unwrap();
        assert_eq!(z.zeros_at(4, 2000).unwrap(), 2000);
        // Unsynced zeros are bytes like any: they may go.
        let lens: HashSet<usize> = after_power_loss(&fs, a, 32).iter().map(|b| b.len()).collect();
        assert!(lens.contains(&0) && lens.contains(&2004), "{lens:?}");
        z.sync().unwrap();
        write_all(&mut *f, b"records").unwrap();
        let mut seen = HashSet::new();
        for got in after_power_loss(&fs, a, 64) {
            assert_eq!(got.len(), 2004, "synced zeros stay");
            assert_eq!(&got[..4], b"head");
            // Each byte of the write is new or still zero; a cut keeps a
            // prefix, a lost block zeros one in the middle.
            let part = &got[4..11];
            assert!(part.iter().zip(b"records").all(|(g, w)| g == w || *g == 0), "{part:?}");
            assert!(got[11..].iter().all(|&b| b == 0));
            seen.insert(part.to_vec());
        }
        assert!(seen.contains(&b"records"[..]) && seen.contains(&[0u8; 7][..]), "{seen:?}");
        f.sync().unwrap();
        fs.power_loss(3);
        assert_eq!(&fs.read_all(a).unwrap()[..11], b"headrecords");
    }

    #[test]
    fn writes_at_offsets_are_lost_in_the_order_made_unless_made_durable() {
        let fs = SimFs::new();
        let p = Path::new("/d/flash");
        let dev = fs.open_device(p, 4096).unwrap();
        assert_eq!((dev.len, dev.locked, fs.read_all(p).map(|b| b.len())), (4096, true, Some(4096)));
        let d = &*dev.file;
        write_all_at(d, &[1; 1024], 2048).unwrap();
        d.sync().unwrap();
        // Made after the sync: a header at 0 written durably, then records
        // above it and over the synced ones; then a second header, plain.
        write_all_at_dsync(d, &[7; 64], 0).unwrap();
        write_all_at(d, &[2; 1500], 1024).unwrap();
        write_all_at(d, &[3; 64], 512).unwrap();
        let mut seen = HashSet::new();
        for got in after_power_loss(&fs, p, 200) {
            assert_eq!(got.len(), 4096, "the length was synced");
            assert_eq!(&got[..64], &[7; 64], "a durable write always stays");
            // Bytes of the later writes reach the disk in order, but for
            // one block: the second write kept means the first was (save
            // for one 512-byte block of them).
            let first = got[1024..2524].iter().filter(|&&b| b == 2).count();
            let second = got[512..576].iter().filter(|&&b| b == 3).count();
            assert!(second == 0 || first >= 1500 - 512, "{first} {second}");
            assert!(got[2524..3072].iter().all(|&b| b == 1), "synced and not written over since");
            assert!(got[1024..2524].iter().all(|&b| b == 2 || b == 0 || b == 1));
            seen.insert((first, second));
        }
        assert!(seen.contains(&(0, 0)) && seen.contains(&(1500, 64)) && seen.len() > 5, "{seen:?}");
        // Unsynced, the length set at open may go too, with the name.
        let fs = SimFs::new();
        let dev = fs.open_device(p, 8192).unwrap();
        assert!(after_power_loss(&fs, p, 16).iter().all(|b| b.is_empty() || b.len() == 8192));
        drop(dev);
        fs.power_loss(0);
        assert!(fs.read_all(p).is_some(), "a device's name is durable once opened");
    }

    #[test]
    fn a_file_opened_to_read_refuses_writes_and_a_dead_machine_reads_nothing() {
        let fs = SimFs::new();
        let p = Path::new("/d/x");
        fs.put(p, b"abc");
        let r = fs.open(p).unwrap();
        assert_eq!(r.write_at(b"x", 0).err().and_then(|e| e.raw_os_error()), Some(libc::EBADF));
        let mut b = [0u8; 3];
        assert!(read_exact_at(&*r, &mut b, 0).unwrap() && &b == b"abc");
        assert_eq!(r.read_at_nowait(&mut b, 1).unwrap(), 2, "memory never waits");
        fs.crash_at(fs.ops());
        assert!(fs.remove(p).is_err() && fs.is_dead());
        assert!(r.read_at(&mut b, 0).is_err() && r.size().is_err() && fs.list(Path::new("/d")).is_err());
    }

    #[test]
    fn the_machine_stops_at_the_crash_point() {
        let fs = SimFs::new();
        let p = Path::new("/d/x");
        fs.crash_at(2);
        let mut f = fs.create(p).unwrap();
        assert!(f.write(b"ab").is_ok());
        assert!(f.write(b"cd").is_err() && fs.is_dead());
        assert!(f.sync().is_err() && fs.open(p).is_err());
        fs.power_loss(7);
        assert!(!fs.is_dead() && fs.open(p).is_err(), "never made durable by a directory sync");
        let f = fs.create(p).unwrap();
        drop(f);
        let r = fs.open(p).unwrap();
        let mut b = [0u8; 1];
        assert!(!read_exact_at(&*r, &mut b, 0).unwrap_or(true));
    }
}
