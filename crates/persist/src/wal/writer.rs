//! The log's writer (the module doc of `wal`, "Group commit",
//! "Preallocation"): appends into a shared buffer, one thread writing and
//! syncing it, the zero fill ahead of it, rotation at a snapshot; and the
//! store's journal written to it.

use super::*;

struct Pending {
    buf: Vec<u8>,
    /// The clock's time in the last time record of this file (`None`: the
    /// file has none yet; the module doc, "Time").
    time: Option<u32>,
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
    /// The clock the records' times are on ([`Wal::timed`]).
    clock: Option<Arc<strata_store::Clock>>,
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
            pending: Mutex::new(Pending { buf: Vec::with_capacity(1 << 20), time: None, appended: 0, records: 0 }),
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
            clock: None,
        })
    }

    /// Time records from `clock` before the records it dates (the module
    /// doc, "Time"): what a server's log carries. A log without them (the
    /// record format's own tests) holds exactly the records appended.
    pub fn timed(self, clock: Arc<strata_store::Clock>) -> Wal {
        Wal { clock: Some(clock), ..self }
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
        // The head and its CRC (over a value up to -I) outside the lock:
        // writers append side by side, and only the copy is serialised.
        let head = record_head(op, parts);
        let mut p = self.pending.lock();
        let was_empty = p.buf.is_empty();
        // Read under the lock, so that times only go up along the log: a
        // time record dates every record after it up to the next.
        if let Some(clock) = &self.clock {
            let now = clock.now();
            if p.time != Some(now) {
                let time: &[&[u8]] = &[&clock.process_started().to_le_bytes(), &now.to_le_bytes()];
                push(&mut p, &record_head(Op::Time, time), time);
                p.time = Some(now);
            }
        }
        let at = push(&mut p, &head, parts);
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
        let (buf, end) = self.take_pending(true);
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
        let (buf, end) = self.take_pending(false);
        self.write_out(&mut cur, &buf, end, true).is_ok()
    }

    /// Writes whatever is pending without an fdatasync, as the writer
    /// thread does under `interval` between its syncs (the crash simulator
    /// takes the writer's steps by hand). False if the log failed.
    pub fn write_now(&self) -> bool {
        let mut cur = self.current.lock();
        let (buf, end) = self.take_pending(false);
        self.write_out(&mut cur, &buf, end, false).is_ok()
    }

    /// The pending records, taken out of the shared buffer, and the log
    /// position after the last. Called under `current` (see `rotate`);
    /// `new_file`: what is appended next goes to a new file, which begins
    /// with a time record.
    fn take_pending(&self, new_file: bool) -> (Vec<u8>, u64) {
        let mut p = self.pending.lock();
        if new_file {
            p.time = None;
        }
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
        let (buf, end) = self.take_pending(false);
        self.write_out(&mut cur, &buf, end, true)
    }
}

/// A record's head: its kind, its payload's length and the CRC.
fn record_head(op: Op, parts: &[&[u8]]) -> [u8; RECORD_HEAD] {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut head = [0u8; RECORD_HEAD];
    head[0] = op as u8;
    head[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    let crc = parts.iter().fold(crc32c::crc32c(&head[..8]), |c, p| crc32c::crc32c_append(c, p));
    head[8..12].copy_from_slice(&crc.to_le_bytes());
    head
}

/// Appends one record (`head`, then its payload `parts`) to the pending
/// buffer; the log position after it.
fn push(p: &mut Pending, head: &[u8; RECORD_HEAD], parts: &[&[u8]]) -> u64 {
    p.buf.extend_from_slice(head);
    let mut len = 0;
    for part in parts {
        p.buf.extend_from_slice(part);
        len += part.len();
    }
    p.appended += (RECORD_HEAD + len) as u64;
    p.records += 1;
    p.appended
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
