//! A file system in memory that loses power: the backend of the crash
//! simulator (`tests/crash_sim.rs`), and of any test that wants to know
//! what a disk keeps when the machine stops at a given I/O operation.
//!
//! What it keeps follows what POSIX promises and no more:
//! - file contents are durable as of the last `sync` (fdatasync) of that
//!   file, by either of its handles (its writer or its [`ZeroFill`]); the
//!   bytes changed after it (appended, or written over zeros filled ahead)
//!   may at a power loss keep their new contents wholly, not at all, up to
//!   any byte (a torn write), or all but one 512-byte block, which reads as
//!   before (a later block reached the disk, an earlier did not), chosen by
//!   the seed; zeros filled ahead are bytes like any other: a power loss
//!   before their sync may drop them;
//! - the directory (which names exist, renames, removals) is durable as of
//!   the last `sync_dir`; after a power loss it reverts to that listing, and
//!   a name created since is gone;
//! - every operation counts as one I/O point; at the point the plan names
//!   ([`SimFs::crash_at`]) the "machine" stops: that operation and every one
//!   after it fails with EIO until [`SimFs::power_loss`] is called, as a
//!   process killed mid-write would never see its later calls return.
//!
//! Everything is deterministic for a seed: a failing schedule reproduces.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::{Backend, Lock, ReadFile, WriteFile, ZeroFill};

/// One file's bytes: what the disk has, and what the page cache holds.
#[derive(Debug, Default)]
struct Data {
    /// Survives a power loss.
    durable: Vec<u8>,
    /// What reads see now.
    current: Vec<u8>,
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
}

impl Default for SimFs {
    fn default() -> SimFs {
        SimFs::new()
    }
}

fn dead() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl SimFs {
    pub fn new() -> SimFs {
        SimFs {
            state: Arc::default(),
            ops: Arc::default(),
            crash_at: Arc::new(AtomicU64::new(u64::MAX)),
            dead: Arc::default(),
        }
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

    /// The power goes: the listing reverts to its last directory sync, and
    /// each file keeps its synced bytes plus, as `seed` picks, none, all or
    /// a prefix of what was written after them, or all of it with one
    /// 512-byte block zeroed. Then the machine is up again (no crash point
    /// set).
    pub fn power_loss(&self, seed: u64) {
        let mut rng = seed | 1;
        let mut next = move || {
            // xorshift64*: enough to pick cuts, the same for a seed.
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut st = self.state.lock();
        st.names = st.durable_names.clone();
        let mut files: Vec<(PathBuf, File)> = st.names.iter().map(|(p, f)| (p.clone(), f.clone())).collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, f) in files {
            let mut d = f.lock();
            // Files are written sequentially from their creation (over
            // zeros filled ahead, or past the end), so what changed since
            // the last sync is one range: from the first byte that differs
            // to the end of the longer of the two.
            let from = d.current.iter().zip(&d.durable).take_while(|(a, b)| a == b).count();
            let to = d.current.len().max(d.durable.len());
            let changed = if d.current == d.durable { 0 } else { to - from };
            let pick = next() % 4;
            let keep = match pick {
                _ if changed == 0 => 0,
                0 => 0,
                1 | 3 => changed,
                _ => (next() % (changed as u64 + 1)) as usize,
            }
            .min(d.current.len() - from);
            // The new contents up to the cut, the old after it (the old
            // file may be the longer: zeros filled ahead and synced).
            let old_at = |i: usize| d.durable.get(i).copied().unwrap_or(0);
            let len = d.durable.len().max(from + keep);
            let mut now: Vec<u8> = d.current[..from + keep].to_vec();
            now.extend((from + keep..len).map(old_at));
            if pick == 3 && changed > 0 {
                // A later block reached the disk and an earlier one did
                // not: one 512-byte block of the change reads as before
                // (zeros where there was nothing).
                let blocks = changed.div_ceil(512) as u64;
                let at = from + (next() % blocks) as usize * 512;
                let end = (at + 512).min(now.len());
                for (i, b) in now.iter_mut().enumerate().take(end).skip(at) {
                    *b = old_at(i);
                }
            }
            d.current = now.clone();
            d.durable = now;
        }
        self.crash_at.store(u64::MAX, Relaxed);
        self.dead.store(false, Relaxed);
    }

    /// A file's bytes as reads see them (for tests that cut or damage them).
    pub fn read_all(&self, path: &Path) -> Option<Vec<u8>> {
        self.state.lock().names.get(path).map(|f| f.lock().current.clone())
    }

    /// Replaces a file's bytes, durably (for tests that cut or damage them).
    pub fn put(&self, path: &Path, bytes: &[u8]) {
        let f: File = Arc::new(Mutex::new(Data { durable: bytes.to_vec(), current: bytes.to_vec() }));
        let mut st = self.state.lock();
        st.names.insert(path.to_path_buf(), f.clone());
        st.durable_names.insert(path.to_path_buf(), f);
    }
}

struct SimWrite {
    fs: SimFs,
    file: File,
    /// Where the next write goes (the writer's file offset).
    pos: usize,
}

/// Writes `buf` over `d.current` at `at`, growing it as needed.
fn put_at(d: &mut Data, at: usize, buf: &[u8]) {
    if d.current.len() < at + buf.len() {
        d.current.resize(at + buf.len(), 0);
    }
    d.current[at..at + buf.len()].copy_from_slice(buf);
}

impl WriteFile for SimWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.fs.step()?;
        put_at(&mut self.file.lock(), self.pos, buf);
        self.pos += buf.len();
        Ok(buf.len())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.fs.step()?;
        let mut d = self.file.lock();
        d.durable = d.current.clone();
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
        self.fs.step()?;
        let (Ok(off), Ok(n)) = (usize::try_from(off), usize::try_from(len)) else {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        };
        put_at(&mut self.file.lock(), off, &vec![0u8; n]);
        Ok(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.fs.step()?;
        let mut d = self.file.lock();
        d.durable = d.current.clone();
        Ok(())
    }
}

struct SimRead {
    fs: SimFs,
    file: File,
}

impl ReadFile for SimRead {
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.lock().current.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if self.fs.is_dead() {
            return Err(dead());
        }
        let d = self.file.lock();
        let Ok(off) = usize::try_from(off) else { return Ok(0) };
        if off >= d.current.len() {
            return Ok(0);
        }
        let n = buf.len().min(d.current.len() - off);
        buf[..n].copy_from_slice(&d.current[off..off + n]);
        Ok(n)
    }
}

impl Backend for SimFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.step()?;
        let file: File = Arc::default();
        self.state.lock().names.insert(path.to_path_buf(), file.clone());
        Ok(Box::new(SimWrite { fs: self.clone(), file, pos: 0 }))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn ReadFile>> {
        if self.is_dead() {
            return Err(dead());
        }
        let file =
            self.state.lock().names.get(path).cloned().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(Box::new(SimRead { fs: self.clone(), file }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step()?;
        let mut st = self.state.lock();
        let f = st.names.remove(from).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
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
        self.state.lock().names.remove(path).map(|_| ()).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
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
        if self.is_dead() {
            return Err(dead());
        }
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
    use super::*;
    use crate::backend::{read_exact_at, write_all};

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
        let mut seen = std::collections::HashSet::new();
        for seed in 0..64 {
            let copy = SimFs { state: Arc::new(Mutex::new(State::default())), ..fs.clone() };
            {
                let st = fs.state.lock();
                let mut c = copy.state.lock();
                for (p, file) in &st.names {
                    let d = file.lock();
                    let nf: File =
                        Arc::new(Mutex::new(Data { durable: d.durable.clone(), current: d.current.clone() }));
                    c.names.insert(p.clone(), nf.clone());
                    c.durable_names.insert(p.clone(), nf);
                }
            }
            copy.power_loss(seed);
            let got = copy.read_all(&a).unwrap_or_default();
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
        let copy = |fs: &SimFs| {
            let c = SimFs::new();
            for (p, f) in &fs.state.lock().names {
                let d = f.lock();
                let nf: File = Arc::new(Mutex::new(Data { durable: d.durable.clone(), current: d.current.clone() }));
                c.state.lock().names.insert(p.clone(), nf.clone());
                c.state.lock().durable_names.insert(p.clone(), nf);
            }
            c
        };
        let lens: std::collections::HashSet<usize> = (0..32)
            .map(|seed| {
                let c = copy(&fs);
                c.power_loss(seed);
                c.read_all(a).map_or(0, |b| b.len())
            })
            .collect();
        assert!(lens.contains(&0) && lens.contains(&2004), "{lens:?}");
        z.sync().unwrap();
        write_all(&mut *f, b"records").unwrap();
        let mut seen = std::collections::HashSet::new();
        for seed in 0..64 {
            let c = copy(&fs);
            c.power_loss(seed);
            let got = c.read_all(a).unwrap();
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
