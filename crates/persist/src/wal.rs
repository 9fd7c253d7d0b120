//! The write-ahead log behind `--durability interval|always`: every change a
//! client makes is appended here, as the store makes it, and recovery after
//! a crash is the last snapshot plus the log since it.
//!
//! ```text
//! log file   = file-header record* zero*
//! file header (16 bytes)
//!  0  magic "STRATAWL"     8
//!  8  format version (1)   u32
//! 12  (zero)               u32
//!
//! record
//!  0  kind                 u8    1 item, 2 delete, 3 touch, 4 state, 5 flush, 6 flush at
//!  1  (zero)               3
//!  4  payload length       u32
//!  8  CRC32C of bytes 0..8 and the payload   u32
//! 12  payload
//!
//! payloads
//!  item      CAS u64, then the item as the store lays it out (crates/store/src/item.rs)
//!  delete    the key
//!  touch     expiry u32 (the timeline's seconds, 0 never), then the key;
//!            read, no longer written (a touch is an item record now)
//!  state     the item's state byte u8, then the key
//!  flush     (none): everything written before it is invalid
//!  flush at  when u32: a flush_all scheduled for then
//!
//! zero tail: zeros filled ahead of the writer (preallocation), up to the
//!            file's end; the log ends at the first zero byte where a
//!            record would begin if only zeros follow it
//! ```
//!
//! **Files.** `<snapshot file>.log.<n>`, `n` counting up. A snapshot starts
//! by switching to a new file ([`Wal::rotate`]) and records that number in
//! its header; once the snapshot is on disk, the files before it are
//! deleted. Recovery loads the snapshot and replays every file from its
//! number on, in order. Every record in an earlier file was made before
//! the snapshot began, so the snapshot holds its effect; records in later
//! files may be held too, and replaying them again changes nothing (each
//! carries the whole outcome, not a delta: an item with its CAS, an
//! absolute expiry).
//!
//! **Group commit.** Appending copies the record into a shared buffer under
//! a mutex and returns its log position. One writer thread takes the whole
//! buffer, writes it and (with `always`) fdatasyncs it, then publishes the
//! position that is durable: every record appended while the previous
//! fdatasync ran shares the next one. With `interval`, the writer writes
//! whatever is appended as soon as it is (publishing the position written)
//! and fdatasyncs once a second.
//!
//! **Preallocation.** An fdatasync after an append must also commit the
//! file's new size (and new blocks) to the file system's journal: on ext4
//! on this kind of VM, 150-210 µs a commit against 97 µs for the same
//! write over blocks already written and synced. So under `always` a
//! helper thread of [`Wal::run`] keeps each file filled with zeros, written and synced,
//! [`PREALLOC`] ahead of the writer (again once the writer is within half
//! of it of the end), and the writer's records go over them in place. The
//! fill runs beside the commits: the writer may write up to where a fill
//! begins (its fence; the first fill of a file a rotation starts begins an
//! eighth of it ahead, and the writer grows the file up to there) and
//! waits only if it reaches it. The first file of a run is filled before
//! the server serves ([`Wal::prefill`]). A fill that fails is logged and leaves that file to grow as
//! it is written. The zeros are bytes of the file like others: a power
//! loss before their sync may drop them, which only shortens the tail.
//!
//! **Failure.** If a write or fdatasync fails, the log stops: durability is
//! reported lost (`stats`), the writes waiting on it are not acknowledged
//! (their connections are closed by the server), and later changes are
//! refused before they are made (`WalJournal::failed`).
//!
//! **Reading back.** A file is read from its header, record after record,
//! up to the first place where no whole record begins: a record cut by
//! the file's end, a CRC that fails, an unknown kind, or the zeros filled
//! ahead (no record begins with a zero byte; a zero tail is read a 4 MiB
//! window at a time). That is the file's readable end; nothing after it
//! is read. So a value a client stored is only ever read as the payload
//! of the record that holds it: to be taken for a record its bytes would
//! have to begin where a record begins, and only the writer chains those,
//! each from the end of the last. A torn tail is dropped whole, and damage
//! in the middle of a file (not a crash: every byte before the torn batch
//! was synced) loses the rest of that file, as SQLite's WAL and
//! PostgreSQL stop at the first bad record. The files after it are still
//! replayed: each began at a rotation or a restart, and holds later
//! changes (a key changed only in the lost part keeps its earlier state).
//!
//! **Trimming.** Recovery cuts each file it replayed to its readable end
//! ([`replay`]): the zeros filled ahead and a torn tail go, so that any
//! number of crash-restarts leave the records and one preallocation (the
//! new run's file) on disk, not 64 MiB of zeros a restart.
//!
//! **A crash mid-batch.** The batch being written when the power goes was
//! not acknowledged (its fdatasync had not returned). What of it reached
//! the disk is any set of its 512-byte blocks over the zeros: whole
//! records, a record cut by zeros, zeros then later records. Reading stops
//! at the first record that is not whole, so replay applies a prefix of
//! the batch, in order: a state the cache passed through. A client that
//! was not answered may find its change made or not. Everything before the
//! batch was synced, and the batch's blocks only overwrite zeros (a block
//! shared with the synced end holds the same bytes in its old part), so no
//! acknowledged record is touched.
//!
//! **`interval`.** A reply to a change waits until its record is written
//! to the file (in the page cache, [`Wal::acked`]), not until it is synced:
//! a process crash (kill -9, OOM) loses no acknowledged change, a power
//! loss at most the last second's. The writer writes as soon as a record
//! is appended (group commit, without the fdatasync).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::{read_exact_at, write_all, Backend, WriteFile, ZeroFill};
use crate::SnapshotError;

pub const LOG_MAGIC: [u8; 8] = *b"STRATAWL";
pub const LOG_VERSION: u32 = 1;
pub const LOG_HEADER_LEN: usize = 16;
pub const RECORD_HEAD: usize = 12;
/// How far ahead of the writer a server's log file is filled with zeros
/// under `always` ([`Wal::set_prealloc`]): 64 MiB, about two seconds of 1000-byte
/// sets at the fastest `always` rate measured. A file is filled again once
/// the writer is within half of it of the end.
pub const PREALLOC: u64 = 64 << 20;

/// What a log record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Item = 1,
    Delete = 2,
    Touch = 3,
    State = 4,
    Flush = 5,
    FlushAt = 6,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Item,
            2 => Op::Delete,
            3 => Op::Touch,
            4 => Op::State,
            5 => Op::Flush,
            6 => Op::FlushAt,
            _ => return None,
        })
    }
}

/// `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// No log.
    Off,
    /// Acknowledged at once; at most a second of acknowledged writes lost.
    Interval,
    /// Acknowledged once on disk.
    Always,
}

/// The name of log file `n` beside the snapshot `file`.
pub fn log_path(file: &Path, n: u64) -> PathBuf {
    crate::with_suffix(file, &format!(".log.{n:06}"))
}

/// Deletes the log files beside `file` numbered below `n` (a snapshot that
/// holds their effect is on disk). Best effort: a file left behind is only
/// replayed again, which changes nothing.
pub fn trim_before(backend: &dyn Backend, file: &Path, n: u64) {
    for (k, path) in log_files(backend, file) {
        if k < n {
            let _ = backend.remove(&path);
        }
    }
}

/// The log files beside `file`, by number, ascending (none if the
/// directory cannot be read).
pub fn log_files(backend: &dyn Backend, file: &Path) -> Vec<(u64, PathBuf)> {
    let dir = crate::dir_of(file);
    let prefix = format!("{}.log.", file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default());
    let mut out: Vec<(u64, PathBuf)> = backend
        .list(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|name| {
            let n = name.to_string_lossy().strip_prefix(&prefix)?.parse::<u64>().ok()?;
            Some((n, dir.join(name)))
        })
        .collect();
    out.sort();
    out
}

struct Pending {
    buf: Vec<u8>,
    /// Log position after the last appended record.
    appended: u64,
    records: u64,
}

struct Current {
    n: u64,
    f: Box<dyn WriteFile>,
    /// Bytes of the file written (the writer's offset).
    pos: u64,
}

/// The zeros ahead of the writer in the current file (see the module doc,
/// "Preallocation"), shared by the writer and the thread that fills them.
struct Ahead {
    /// The file these describe (a rotation starts them again).
    n: u64,
    /// The file's zero filler; `None` while a fill runs (the filler has
    /// it), after one failed, or where the backend has none.
    fill: Option<Box<dyn ZeroFill>>,
    /// The end of the zeros filled and synced (the file's length as far as
    /// the filler knows).
    end: u64,
    /// The end of what the writer has written or is writing.
    writing_to: u64,
    /// While a fill runs: where it begins, which the writer does not write
    /// past until it is done; `u64::MAX` otherwise.
    fence: u64,
}

impl Ahead {
    fn new(n: u64, f: &dyn WriteFile) -> Ahead {
        let start = LOG_HEADER_LEN as u64;
        Ahead { n, fill: f.zero_filler().ok(), end: start, writing_to: start, fence: u64::MAX }
    }
}

/// The log a running server appends to.
pub struct Wal {
    backend: Arc<dyn Backend>,
    file: PathBuf,
    mode: Durability,
    pending: Mutex<Pending>,
    kick: Condvar,
    current: Mutex<Current>,
    /// Zeros ahead of the writer; lock order `current`, then `ahead`.
    ahead: Mutex<Ahead>,
    /// Signalled when a fill ends (the writer may wait at its fence).
    filled: Condvar,
    /// Bytes filled ahead at a time (0: none), [`Wal::set_prealloc`].
    prealloc: AtomicU64,
    /// Position fdatasynced.
    durable: AtomicU64,
    /// Position written to the file (fdatasynced or not).
    written: AtomicU64,
    failed: AtomicBool,
    stop: AtomicBool,
    /// Called after `durable` moves (the server wakes waiting workers).
    on_durable: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// fdatasyncs done.
    pub syncs: AtomicU64,
    /// Bytes written to the log files.
    pub bytes: AtomicU64,
    /// Nanoseconds spent in the log's fdatasyncs.
    pub sync_ns: AtomicU64,
    /// Zeros written ahead of the log (preallocation).
    pub zeroed: AtomicU64,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal").field("file", &self.file).field("mode", &self.mode).finish()
    }
}

fn create_log(backend: &dyn Backend, path: &Path) -> Result<Box<dyn WriteFile>, SnapshotError> {
    let mut f = backend.create(path).map_err(|e| SnapshotError::io("create", path, e))?;
    let mut h = [0u8; LOG_HEADER_LEN];
    h[..8].copy_from_slice(&LOG_MAGIC);
    h[8..12].copy_from_slice(&LOG_VERSION.to_le_bytes());
    write_all(&mut *f, &h).map_err(|e| SnapshotError::io("write", path, e))?;
    f.sync().map_err(|e| SnapshotError::io("fsync", path, e))?;
    backend.sync_dir(&crate::dir_of(path)).map_err(|e| SnapshotError::io("fsync directory", path, e))?;
    Ok(f)
}

impl Wal {
    /// Starts log file `n` beside the snapshot `file`.
    pub fn open(backend: Arc<dyn Backend>, file: &Path, n: u64, mode: Durability) -> Result<Wal, SnapshotError> {
        let f = create_log(&*backend, &log_path(file, n))?;
        let ahead = Ahead::new(n, &*f);
        Ok(Wal {
            backend,
            file: file.to_path_buf(),
            mode,
            pending: Mutex::new(Pending { buf: Vec::with_capacity(1 << 20), appended: 0, records: 0 }),
            kick: Condvar::new(),
            current: Mutex::new(Current { n, f, pos: LOG_HEADER_LEN as u64 }),
            ahead: Mutex::new(ahead),
            filled: Condvar::new(),
            prealloc: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            written: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            on_durable: std::sync::OnceLock::new(),
            syncs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            sync_ns: AtomicU64::new(0),
            zeroed: AtomicU64::new(0),
        })
    }

    /// Fills each log file with zeros `bytes` ahead of the writer (0, the
    /// default: never), by a helper of [`Wal::run`] or by calling
    /// [`Wal::prepare`]. A server sets [`PREALLOC`].
    pub fn set_prealloc(&self, bytes: u64) {
        self.prealloc.store(bytes, Relaxed);
    }

    /// Fills the current file with zeros ahead of the writer if it is
    /// within half of [`Wal::set_prealloc`] of their end, and syncs them;
    /// true if it did. Off the commit path: the writer goes on meanwhile,
    /// up to where the fill begins. A fill that fails leaves that file to
    /// grow as it is written (slower commits, nothing lost) and is logged.
    pub fn prepare(&self) -> bool {
        self.fill_ahead(false)
    }

    /// [`Wal::prepare`] before the writer runs (at start): the fill begins
    /// right after what is written, so that the first commits too go over
    /// zeros. A server's start pays for it once: 64 MiB took 24-40 ms here.
    pub fn prefill(&self) -> bool {
        self.fill_ahead(true)
    }

    fn fill_ahead(&self, at_start: bool) -> bool {
        let chunk = self.prealloc.load(Relaxed);
        if chunk == 0 || self.failed() {
            return false;
        }
        let (n, mut fill, from, to) = {
            let mut x = self.ahead.lock();
            if x.end >= x.writing_to + chunk / 2 {
                return false;
            }
            let Some(fill) = x.fill.take() else { return false };
            // After what is filled already, and far enough ahead of the
            // writer that it does not reach the fence while the fill runs
            // (a new file, or a fill that lagged): the writer grows the
            // file through the gap between. At start no writer runs.
            let lead = if at_start { 0 } else { chunk / 8 };
            let from = x.end.max(x.writing_to + lead);
            let to = x.writing_to + chunk;
            x.fence = from;
            (x.n, fill, from, to)
        };
        let mut at = from;
        let r = (|| {
            while at < to {
                match fill.zeros_at(at, to - at) {
                    Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                    Ok(k) => at += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            fill.sync()
        })();
        self.zeroed.fetch_add(at - from, Relaxed);
        let ok = r.is_ok();
        let mut x = self.ahead.lock();
        if x.n == n {
            x.fence = u64::MAX;
            match r {
                Ok(()) => {
                    x.end = to;
                    x.fill = Some(fill);
                }
                Err(e) => {
                    let path = log_path(&self.file, n);
                    tracing::warn!(file = %path.display(), error = %e, "durability log: cannot fill ahead with zeros; the file grows as it is written");
                }
            }
            self.filled.notify_all();
        }
        ok
    }

    /// Sets what to call whenever the durable position moves (once).
    pub fn on_durable(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_durable.set(f);
    }

    fn notify(&self) {
        if let Some(f) = self.on_durable.get() {
            f();
        }
    }

    pub fn mode(&self) -> Durability {
        self.mode
    }

    /// Appends a record; returns the log position a reply must wait for.
    /// After a failure nothing is kept (the buffer would only grow) and the
    /// position returned is never reached.
    pub fn append(&self, op: Op, parts: &[&[u8]]) -> u64 {
        if self.failed() {
            // Wakes the workers, so that whoever waits on this position
            // hears of the failure now rather than at the next record.
            self.notify();
            return u64::MAX;
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut head = [0u8; RECORD_HEAD];
        head[0] = op as u8;
        head[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        let crc = parts.iter().fold(crc32c::crc32c(&head[..8]), |c, p| crc32c::crc32c_append(c, p));
        head[8..12].copy_from_slice(&crc.to_le_bytes());
        let mut p = self.pending.lock();
        let was_empty = p.buf.is_empty();
        p.buf.extend_from_slice(&head);
        for part in parts {
            p.buf.extend_from_slice(part);
        }
        p.appended += (RECORD_HEAD + len) as u64;
        p.records += 1;
        let at = p.appended;
        drop(p);
        if was_empty {
            self.kick.notify_one();
        }
        at
    }

    /// Records appended, and the position after the last.
    pub fn appended(&self) -> (u64, u64) {
        let p = self.pending.lock();
        (p.records, p.appended)
    }

    /// The position on disk (fdatasynced).
    pub fn durable(&self) -> u64 {
        self.durable.load(Acquire)
    }

    /// The position a reply to a change waits for: under `always` the
    /// durable one, under `interval` the one written (see the module doc).
    /// Never moves after a failure.
    pub fn acked(&self) -> u64 {
        match self.mode {
            Durability::Always => self.durable(),
            _ => self.written.load(Acquire),
        }
    }

    /// The log stopped after a failed write or fdatasync.
    pub fn failed(&self) -> bool {
        self.failed.load(Acquire)
    }

    /// The number of the file being appended to.
    pub fn current(&self) -> u64 {
        self.current.lock().n
    }

    /// Switches to a new file, after writing what is pending to the old
    /// one, fdatasynced; returns the new file's number. Every record
    /// appended before this was called is in an old file; records appended
    /// while it runs may be in either.
    pub fn rotate(&self) -> Result<u64, SnapshotError> {
        // Lock order: `current`, then `pending` (as the writer thread):
        // the writer takes a buffer and writes it under `current`, so no
        // buffer taken before the switch can land in the new file after
        // it, and `durable` never covers records still in the writer's hands.
        let mut cur = self.current.lock();
        let (buf, end) = self.take_pending();
        self.write_out(&mut cur, &buf, end, true)?;
        let n = cur.n + 1;
        // A new file that cannot be made leaves the log appending to the
        // old one: the snapshot then trims nothing (`begin_log`).
        cur.f = create_log(&*self.backend, &log_path(&self.file, n))?;
        cur.n = n;
        cur.pos = LOG_HEADER_LEN as u64;
        // A fill of the old file still running ends without touching this.
        *self.ahead.lock() = Ahead::new(n, &*cur.f);
        Ok(n)
    }

    /// Marks the log stopped (a file that cannot be written or made).
    fn fail(&self) {
        if !self.failed.swap(true, AcqRel) {
            tracing::error!("durability log failed: writes are refused until restart");
        }
        self.notify();
    }

    /// Waits until everything appended so far is on disk (the log is
    /// written and fdatasynced by the writer thread, or here if it is
    /// idle). False if the log failed.
    pub fn sync_now(&self) -> bool {
        let (_, end) = self.appended();
        if self.failed() {
            return false;
        }
        if self.durable() >= end {
            return true;
        }
        let mut cur = self.current.lock();
        let (buf, end) = self.take_pending();
        self.write_out(&mut cur, &buf, end, true).is_ok()
    }

    /// Writes whatever is pending without an fdatasync, as the writer
    /// thread does under `interval` between its syncs (the crash simulator
    /// takes the writer's steps by hand). False if the log failed.
    pub fn write_now(&self) -> bool {
        let mut cur = self.current.lock();
        let (buf, end) = self.take_pending();
        self.write_out(&mut cur, &buf, end, false).is_ok()
    }

    /// The pending records, taken out of the shared buffer, and the log
    /// position after the last. Called under `current` (see `rotate`).
    fn take_pending(&self) -> (Vec<u8>, u64) {
        let mut p = self.pending.lock();
        (std::mem::take(&mut p.buf), p.appended)
    }

    /// Writes `buf` (the records up to position `end`) and, if `sync`,
    /// fdatasyncs. After a failure nothing is written and no position
    /// moves again: the records of a buffer that failed are gone from
    /// memory, and a later sync must not publish a position past them.
    fn write_out(&self, cur: &mut Current, buf: &[u8], end: u64, sync: bool) -> Result<(), SnapshotError> {
        let path = log_path(&self.file, cur.n);
        if self.failed() {
            return Err(SnapshotError::io("write", &path, std::io::Error::other("the log failed earlier")));
        }
        let to = cur.pos + buf.len() as u64;
        if !buf.is_empty() {
            let mut x = self.ahead.lock();
            if x.n == cur.n {
                // Never over zeros being written: wait for the fill (only
                // if the writer caught up with it, which the fill's lead
                // makes rare).
                while to > x.fence {
                    self.filled.wait(&mut x);
                }
                x.writing_to = to;
            }
        }
        let r = write_all(&mut *cur.f, buf).map_err(|e| SnapshotError::io("write", &path, e)).and_then(|()| {
            cur.pos = to;
            if sync {
                let t = Instant::now();
                let r = cur.f.sync().map_err(|e| SnapshotError::io("fdatasync", &path, e));
                self.sync_ns.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
                r
            } else {
                Ok(())
            }
        });
        match r {
            Ok(()) => {
                self.bytes.fetch_add(buf.len() as u64, Relaxed);
                self.written.fetch_max(end, Release);
                if sync {
                    self.syncs.fetch_add(1, Relaxed);
                    self.durable.fetch_max(end, Release);
                }
                if sync || (self.mode == Durability::Interval && !buf.is_empty()) {
                    self.notify();
                }
                Ok(())
            }
            Err(e) => {
                if !self.failed.load(Acquire) {
                    tracing::error!(error = %e, "durability log cannot be written");
                }
                self.fail();
                Err(e)
            }
        }
    }

    /// The writer thread's loop, until [`Wal::stop`] (or a failure), with
    /// a helper thread that fills the file with zeros ahead of it
    /// ([`Wal::set_prealloc`]).
    pub fn run(&self) {
        std::thread::scope(|s| {
            let helper = std::thread::Builder::new().name("wal-zeros".into()).spawn_scoped(s, || {
                while !self.stop.load(Acquire) && !self.failed() {
                    if !self.prepare() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            });
            if let Err(e) = helper {
                tracing::warn!(error = %e, "durability log: no thread to fill ahead with zeros; files grow as written");
            }
            self.write_loop();
            // A failure ends the helper too (it looks at both).
            self.stop.store(true, Release);
        });
    }

    fn write_loop(&self) {
        let mut spare = Vec::with_capacity(1 << 20);
        let mut last_sync = Instant::now();
        while !self.stop.load(Acquire) && !self.failed() {
            {
                let mut p = self.pending.lock();
                if p.buf.is_empty() {
                    let wait = match self.mode {
                        Durability::Always => Duration::from_millis(100),
                        _ => Duration::from_millis(10),
                    };
                    self.kick.wait_for(&mut p, wait);
                }
                if self.mode == Durability::Interval && p.buf.is_empty() && last_sync.elapsed().as_secs() < 1 {
                    continue;
                }
            }
            // The buffer is taken under `current` (see `rotate`).
            let mut cur = self.current.lock();
            let (buf, end) = {
                let mut p = self.pending.lock();
                spare.clear();
                std::mem::swap(&mut p.buf, &mut spare);
                (std::mem::take(&mut spare), p.appended)
            };
            let sync = match self.mode {
                Durability::Always => !buf.is_empty(),
                // Once a second, if anything was written since the last.
                _ => last_sync.elapsed().as_secs() >= 1 && end > self.durable(),
            };
            if buf.is_empty() && !sync {
                spare = buf;
                continue;
            }
            let _ = self.write_out(&mut cur, &buf, end, sync);
            drop(cur);
            if sync {
                last_sync = Instant::now();
            }
            spare = buf;
            if spare.capacity() > 16 << 20 {
                spare = Vec::with_capacity(1 << 20);
            }
        }
    }

    /// Ends the writer loop after writing and syncing what is pending.
    pub fn stop(&self) {
        self.stop.store(true, Release);
        self.kick.notify_all();
    }

    /// Writes and syncs whatever is pending (at shutdown, after the
    /// writer thread has stopped).
    pub fn flush(&self) -> Result<(), SnapshotError> {
        let mut cur = self.current.lock();
        let (buf, end) = self.take_pending();
        self.write_out(&mut cur, &buf, end, true)
    }
}

/// One record read back from a log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub op: Op,
    pub payload: Vec<u8>,
}

/// What reading a log file found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    pub records: u64,
    /// Reading stopped before the file's end at something that is not a
    /// whole record (a crash mid-append, or damage) with non-zero bytes
    /// after it. A zero tail is not torn.
    pub torn: bool,
    /// Where the readable part ends: the offset after the last whole
    /// record (the header's end if none; 0 if the header is not whole).
    pub end: u64,
    /// The file's length when read.
    pub len: u64,
}

/// Reads log file `path`, handing each whole record to `apply` in order,
/// up to the first place where no whole record begins (see the module
/// doc, "Reading back"): what follows is never read, so no byte inside a
/// record's payload is ever taken for a record.
pub fn read_log(backend: &dyn Backend, path: &Path, apply: &mut dyn FnMut(Entry)) -> Result<Replayed, SnapshotError> {
    let f = backend.open(path).map_err(|e| SnapshotError::io("open", path, e))?;
    let len = f.size().map_err(|e| SnapshotError::io("stat", path, e))?;
    let mut out = Replayed { len, ..Replayed::default() };
    let mut h = [0u8; LOG_HEADER_LEN];
    if !read_exact_at(&*f, &mut h, 0).unwrap_or(false) || h[..8] != LOG_MAGIC {
        // A file created but never written past its header is empty.
        out.torn = len != 0;
        return Ok(out);
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if version != LOG_VERSION {
        return Err(SnapshotError::Format(crate::format::FormatError::Version { found: version }));
    }
    let mut at = LOG_HEADER_LEN as u64;
    // Read in large chunks; records may span them.
    let mut r = Reader { f: &*f, chunk: Vec::new(), chunk_at: at, len };
    while let Some((op, payload, next)) = r.record(at) {
        apply(Entry { op, payload });
        out.records += 1;
        at = next;
    }
    out.end = at;
    // Zeros from here to the end are the preallocated tail: the log ends
    // here, whole (no record begins with a zero byte). Anything else is a
    // torn tail or damage, and ends the file's readable part all the same.
    out.torn = r.next_nonzero(at).is_some();
    Ok(out)
}

/// Reads records out of a log file through a 4 MiB window.
struct Reader<'a> {
    f: &'a dyn crate::backend::PosFile,
    chunk: Vec<u8>,
    chunk_at: u64,
    len: u64,
}

impl Reader<'_> {
    /// The whole record at `at` (kind known, zero bytes zero, payload in
    /// the file, CRC right), and where the next begins.
    fn record(&mut self, at: u64) -> Option<(Op, Vec<u8>, u64)> {
        let mut head = [0u8; RECORD_HEAD];
        if !read_at(self.f, &mut self.chunk, &mut self.chunk_at, at, &mut head, self.len) {
            return None;
        }
        let op = Op::from_u8(head[0]).filter(|_| head[1..4] == [0, 0, 0])?;
        let plen = u64::from(u32::from_le_bytes([head[4], head[5], head[6], head[7]]));
        let crc = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if at + RECORD_HEAD as u64 + plen > self.len {
            return None;
        }
        let mut payload = vec![0u8; plen as usize];
        if !read_at(self.f, &mut self.chunk, &mut self.chunk_at, at + RECORD_HEAD as u64, &mut payload, self.len) {
            return None;
        }
        (crc32c::crc32c_append(crc32c::crc32c(&head[..8]), &payload) == crc).then_some((
            op,
            payload,
            at + RECORD_HEAD as u64 + plen,
        ))
    }

    /// The first offset at or after `from` whose byte is not zero, read a
    /// window at a time (a 64 MiB zero tail is 16 reads and compares).
    fn next_nonzero(&mut self, from: u64) -> Option<u64> {
        let mut at = from;
        while at < self.len {
            let mut b = [0u8; 1];
            // Brings the window that holds `at` in.
            if !read_at(self.f, &mut self.chunk, &mut self.chunk_at, at, &mut b, self.len) {
                return None;
            }
            let off = (at - self.chunk_at) as usize;
            if let Some(i) = self.chunk[off..].iter().position(|&b| b != 0) {
                return Some(at + i as u64);
            }
            at = self.chunk_at + self.chunk.len() as u64;
        }
        None
    }
}

/// Copies `dst.len()` bytes at `at` out of the file through a 4 MiB window.
fn read_at(
    f: &dyn crate::backend::PosFile,
    chunk: &mut Vec<u8>,
    chunk_at: &mut u64,
    at: u64,
    dst: &mut [u8],
    len: u64,
) -> bool {
    const WINDOW: u64 = 4 << 20;
    let end = at + dst.len() as u64;
    if end > len {
        // The file ends inside what was asked for: a torn tail.
        return false;
    }
    if at < *chunk_at || end > *chunk_at + chunk.len() as u64 {
        let size = (dst.len() as u64).max(WINDOW).min(len - at);
        chunk.clear();
        chunk.resize(size as usize, 0);
        if !read_exact_at(f, chunk, at).unwrap_or(false) {
            return false;
        }
        *chunk_at = at;
    }
    let from = (at - *chunk_at) as usize;
    dst.copy_from_slice(&chunk[from..from + dst.len()]);
    true
}

/// What a recovery replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    pub files: u64,
    pub records: u64,
    /// Records that could not be applied (malformed, or an item over `-I`).
    pub skipped: u64,
    /// Files whose readable part ended before non-zero bytes (a crash
    /// mid-write, or damage): the rest of each was not read.
    pub torn: u64,
    /// Bytes cut off the files replayed, past their readable ends: zeros
    /// filled ahead and torn tails (see the module doc, "Trimming").
    pub trimmed: u64,
    /// The highest log file number found (0: none).
    pub last: u64,
}

/// Replays every log file beside the snapshot `file` numbered `from` or
/// more, oldest first, through `w` (a worker of the store being recovered,
/// before it serves).
pub fn replay(
    backend: &dyn Backend,
    file: &Path,
    from: u64,
    w: &mut strata_store::Worker,
) -> Result<Recovery, SnapshotError> {
    let mut r = Recovery::default();
    w.replaying();
    let files = log_files(backend, file);
    // A log left by a long durable run can be gigabytes: the replay logs
    // its progress, against the files' sizes (what cannot be sized counts
    // as nothing; read_log reports the error).
    let sizes: Vec<u64> = files
        .iter()
        .map(|(n, path)| if *n < from { 0 } else { backend.open(path).and_then(|f| f.size()).unwrap_or(0) })
        .collect();
    let mut progress = crate::Progress::new("durability log replay");
    progress.set_total(sizes.iter().sum());
    // Bytes of the files done.
    let mut done = 0u64;
    for ((n, path), size) in files.into_iter().zip(sizes) {
        r.last = r.last.max(n);
        if n < from {
            continue;
        }
        r.files += 1;
        let mut skipped = 0;
        let mut records = r.records;
        // Bytes of the whole records read so far in this file.
        let mut bytes = 0u64;
        let read = read_log(backend, &path, &mut |e| {
            bytes += (RECORD_HEAD + e.payload.len()) as u64;
            if apply(w, &e).is_err() {
                skipped += 1;
            }
            records += 1;
            // Looking at the clock once every few thousand records keeps
            // it off the replay's cost.
            if records.is_multiple_of(4096) {
                progress.at_records(done + bytes, records);
            }
        })?;
        done += size;
        r.trimmed += trim(backend, &path, &read);
        r.records += read.records;
        r.skipped += skipped;
        r.torn += u64::from(read.torn);
    }
    progress.done(done);
    Ok(r)
}

/// Cuts a replayed file to its readable end; the bytes cut. Best effort:
/// a file that cannot be cut is read the same way next time, and only
/// takes more disk.
fn trim(backend: &dyn Backend, path: &Path, read: &Replayed) -> u64 {
    if read.len <= read.end {
        return 0;
    }
    if read.torn {
        tracing::warn!(
            file = %path.display(),
            readable = read.end,
            dropped = read.len - read.end,
            "durability log: a torn or damaged tail is dropped"
        );
    }
    match backend.truncate(path, read.end) {
        Ok(()) => read.len - read.end,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "durability log: cannot cut a replayed file to its records");
            0
        }
    }
}

fn apply(w: &mut strata_store::Worker, e: &Entry) -> Result<(), ()> {
    let p = &e.payload;
    match e.op {
        Op::Item => {
            let (cas, item) = p.split_at_checked(8).ok_or(())?;
            let cas = u64::from_le_bytes(cas.try_into().map_err(|_| ())?);
            w.replay_item(cas, item).map_err(|_| ())
        }
        Op::Delete => {
            w.replay_delete(p);
            Ok(())
        }
        Op::Touch => {
            let (e, key) = p.split_at_checked(4).ok_or(())?;
            w.replay_in_place(key, Some(u32::from_le_bytes(e.try_into().map_err(|_| ())?)), None);
            Ok(())
        }
        Op::State => {
            let (&b, key) = p.split_first().ok_or(())?;
            w.replay_in_place(key, None, Some(b));
            Ok(())
        }
        Op::Flush => {
            w.replay_flush();
            Ok(())
        }
        Op::FlushAt => {
            let at = u32::from_le_bytes(p.as_slice().try_into().map_err(|_| ())?);
            w.replay_flush_at(at);
            Ok(())
        }
    }
}

/// The store's journal, written to a [`Wal`].
pub struct WalJournal(pub Arc<Wal>);

impl strata_store::Journal for WalJournal {
    fn item(&self, cas: u64, item: &[u8]) -> u64 {
        self.0.append(Op::Item, &[&cas.to_le_bytes(), item])
    }

    fn delete(&self, key: &[u8]) -> u64 {
        self.0.append(Op::Delete, &[key])
    }

    fn state(&self, key: &[u8], state: u8) -> u64 {
        self.0.append(Op::State, &[&[state], key])
    }

    fn flush(&self) -> u64 {
        self.0.append(Op::Flush, &[])
    }

    fn flush_at(&self, at: u32) -> u64 {
        self.0.append(Op::FlushAt, &[&at.to_le_bytes()])
    }

    fn failed(&self) -> bool {
        self.0.failed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_laid_out_as_drawn() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s");
        let wal = Wal::open(Arc::new(crate::OsBackend), &file, 7, Durability::Always).unwrap();
        assert_eq!(wal.append(Op::Touch, &[&9u32.to_le_bytes(), b"key"]), (RECORD_HEAD + 7) as u64);
        wal.flush().unwrap();
        let b = std::fs::read(log_path(&file, 7)).unwrap();
        assert_eq!(
            log_path(&file, 7).file_name().map(|n| n.to_string_lossy().into_owned()),
            Some("s.log.000007".into())
        );
        assert_eq!(&b[..16], b"STRATAWL\x01\0\0\0\0\0\0\0");
        assert_eq!(&b[16..24], &[3, 0, 0, 0, 7, 0, 0, 0]);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[16..24]), &b[28..]);
        assert_eq!(&b[24..28], &crc.to_le_bytes());
        assert_eq!(&b[28..], b"\x09\0\0\0key");
    }
}
