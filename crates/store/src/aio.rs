//! Asynchronous reads from flash: a pool of I/O threads (`ext_threads`)
//! reads records for the workers, so a worker goes on serving other
//! connections while a read is in flight.
//!
//! ```text
//!   worker                              I/O thread (Pool)
//!   read_back(addr): not in `ready` ──► queue Job{addr, gen}
//!     → Flow::Wait(Ticket(addr))        read + verify the record
//!   the connection parks on it          ◄── Done into the worker's Inbox,
//!                                            then its wake-up (eventfd)
//!   next turn: completions(): Done → `ready`, Ticket(addr) out; the
//!   server wakes the connections parked on it, which run their request
//!   again (Reading::Resumed) and find the record in `ready`.
//! ```
//!
//! A record stays valid as long as its region's generation is the one
//! seen when the read was asked for (records are never rewritten in
//! place), so a ready entry is checked against the generation when it is
//! used, exactly as a synchronous read checks it after reading.
//!
//! A record already in the page cache is read by the worker itself
//! (`preadv2` with `RWF_NOWAIT`, [`strata_flash::Flash::read_cached`]): a
//! hand-over costs two thread wake-ups, far more than that copy; only a
//! read that would wait for the device goes to the pool.
//!
//! Reads coalesce per worker: a second request for an address in flight
//! waits for the same read (`strata_extstore_reads_coalesced`). `ready`
//! is bounded ([`READY_MAX`], [`READY_BYTES`]), oldest out first; a
//! connection whose record was pushed out before it ran again may read
//! that one address synchronously ([`Reading::Resumed`](crate::Reading::Resumed)), so every park
//! ends in progress. Reads that cannot park (an operation part way, a
//! refused write's delete) are synchronous ([`Reading::Now`](crate::Reading::Now)).

use std::collections::{HashMap, HashSet, VecDeque};
#[cfg(feature = "test-hooks")]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{
    AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use strata_flash::{record, Flash, ReadError};

use crate::types::Ticket;

/// Logs a flash problem at most once a second (a failing disk fails every
/// request): the count of those left out is in `stats`.
pub(crate) fn warn_rate_limited(what: &str, err: &dyn std::fmt::Display) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    let mut last = LAST.lock();
    if !last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
        *last = Some(Instant::now());
        tracing::warn!("flash tier: {what}: {err} (further errors this second are counted in stats, not logged)");
    }
}

/// Ready records a worker keeps at most, and their bytes: enough for a
/// connection's read-ahead (32 keys) and every connection parked in a
/// turn, small beside `-m`.
const READY_MAX: usize = 256;
const READY_BYTES: usize = 4 << 20;

/// A record as an I/O thread read it: its item's bytes and the record
/// header's fields the store needs. `None` in [`Done::rec`]: unreadable or
/// damaged (counted by the log, a miss).
#[derive(Debug)]
pub(crate) struct Rec {
    pub epoch: u64,
    pub written: u32,
    pub item: Vec<u8>,
}

/// Why a read brought back no record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    /// The device failed the read (counted, logged by the I/O thread).
    Device,
    /// The bytes read are no record of the generation asked for: damage,
    /// or the region written over since; the worker tells which.
    Record,
}

#[derive(Debug)]
struct Done {
    addr: u64,
    gen: u64,
    /// The region was reclaimed during the read: nothing to keep.
    moved: bool,
    rec: Result<Rec, Failed>,
}

/// Where a worker's finished reads land, and how it is woken for them.
struct Inbox {
    done: Mutex<Vec<Done>>,
    wake: Box<dyn Fn() + Send + Sync>,
}

struct Job {
    addr: u64,
    gen: u64,
    inbox: Arc<Inbox>,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

struct PoolShared {
    queue: Mutex<Queue>,
    cv: Condvar,
    log: Arc<Flash>,
    /// Reads asked for and not yet finished (`extstore_io_queue`).
    depth: AtomicUsize,
    /// A test setting: each read waits this long first (microseconds).
    #[cfg(feature = "test-hooks")]
    delay_us: AtomicU64,
}

/// The I/O threads. Dropping it stops them once the queue is empty.
pub(crate) struct Pool {
    shared: Arc<PoolShared>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("depth", &self.depth()).finish()
    }
}

impl Pool {
    /// Starts `threads` I/O threads reading from `log`; `None` if none
    /// could be started (reads are then synchronous).
    pub fn start(log: Arc<Flash>, threads: usize, delay: Duration) -> Option<Pool> {
        #[cfg(not(feature = "test-hooks"))]
        let _ = delay;
        let shared = Arc::new(PoolShared {
            queue: Mutex::new(Queue::default()),
            cv: Condvar::new(),
            log,
            depth: AtomicUsize::new(0),
            #[cfg(feature = "test-hooks")]
            delay_us: AtomicU64::new(delay.as_micros() as u64),
        });
        let mut started = 0;
        for i in 0..threads {
            let s = shared.clone();
            match std::thread::Builder::new().name(format!("flash-io-{i}")).spawn(move || s.run()) {
                Ok(_) => started += 1,
                Err(e) => tracing::warn!(error = %e, "flash tier: could not start an I/O thread"),
            }
        }
        (started > 0).then_some(Pool { shared })
    }

    /// Reads asked for and not yet finished.
    pub fn depth(&self) -> usize {
        self.shared.depth.load(Acquire)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.queue.lock().closed = true;
        self.shared.cv.notify_all();
    }
}

impl PoolShared {
    fn run(&self) {
        let mut buf = Vec::new();
        loop {
            let job = {
                let mut q = self.queue.lock();
                loop {
                    if let Some(j) = q.jobs.pop_front() {
                        break j;
                    }
                    if q.closed {
                        return;
                    }
                    self.cv.wait(&mut q);
                }
            };
            #[cfg(feature = "test-hooks")]
            {
                let delay = self.delay_us.load(Relaxed);
                if delay > 0 {
                    std::thread::sleep(Duration::from_micros(delay));
                }
            }
            let done = self.read(&job, &mut buf);
            // One wake-up per batch: a worker that has not taken the
            // finished reads yet was woken for the first of them, and takes
            // them all after draining its wake-up counter.
            let first = {
                let mut d = job.inbox.done.lock();
                d.push(done);
                d.len() == 1
            };
            // Counted out once handed over, not before: at depth 0 every
            // finished read is in its worker's inbox (a read seen as done
            // by the depth but not yet in the inbox made a test that
            // waits for depth 0 find it still in flight, under load).
            self.depth.fetch_sub(1, Release);
            if first {
                (job.inbox.wake)();
            }
        }
    }

    fn read(&self, job: &Job, buf: &mut Vec<u8>) -> Done {
        let log = &self.log;
        let region = log.region_of(job.addr);
        let rec = log.read(job.addr, job.gen, buf);
        let moved = log.generation(region) != job.gen;
        let rec = match rec {
            Ok(r) => Ok((r.epoch, r.written, r.item.len())),
            Err(ReadError::Record(_)) => Err(Failed::Record),
            Err(e) => {
                if !moved {
                    warn_rate_limited("read failed, served as a miss", &e);
                }
                Err(Failed::Device)
            }
        };
        let rec = rec.map(|(epoch, written, len)| {
            // The item's bytes follow the record header; the buffer goes
            // with them and a new one is grown for the next read.
            let mut item = std::mem::take(buf);
            item.drain(..record::HEADER_LEN);
            item.truncate(len);
            Rec { epoch, written, item }
        });
        Done { addr: job.addr, gen: job.gen, moved, rec }
    }
}

/// What a worker's ready records hold for an address.
pub(crate) enum Cached {
    /// The record, verified by its checksum: its item's bytes copied into
    /// the caller's buffer.
    Record {
        epoch: u64,
        written: u32,
    },
    /// The read failed, or found no record.
    Bad(Failed),
    Absent,
}

struct Entry {
    gen: u64,
    rec: Result<Rec, Failed>,
}

/// One worker's side of the pool: its reads in flight and ready records.
pub(crate) struct Reads {
    pool: Arc<PoolShared>,
    inbox: Arc<Inbox>,
    inflight: HashSet<u64>,
    ready: HashMap<u64, Entry>,
    /// Ready addresses, oldest first (possibly some no longer ready).
    order: VecDeque<u64>,
    bytes: usize,
    taken: Vec<Done>,
}

impl Reads {
    pub fn new(pool: &Pool, wake: Box<dyn Fn() + Send + Sync>) -> Reads {
        Reads {
            pool: pool.shared.clone(),
            inbox: Arc::new(Inbox { done: Mutex::new(Vec::new()), wake }),
            inflight: HashSet::new(),
            ready: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            taken: Vec::new(),
        }
    }

    /// The ready record at `addr` if its region is still in generation
    /// `gen`, its item's bytes into `buf`.
    pub fn lookup(&mut self, addr: u64, gen: u64, buf: &mut Vec<u8>) -> Cached {
        let Some(e) = self.ready.get(&addr) else { return Cached::Absent };
        if e.gen != gen {
            self.forget(addr);
            return Cached::Absent;
        }
        match &e.rec {
            Ok(r) => {
                buf.clear();
                buf.extend_from_slice(&r.item);
                Cached::Record { epoch: r.epoch, written: r.written }
            }
            Err(f) => Cached::Bad(*f),
        }
    }

    /// Asks the pool for `addr`, unless it is in flight already: false
    /// then (the caller waits for that read).
    pub fn request(&mut self, addr: u64, gen: u64) -> bool {
        if !self.inflight.insert(addr) {
            return false;
        }
        self.pool.depth.fetch_add(1, Relaxed);
        self.pool.queue.lock().jobs.push_back(Job { addr, gen, inbox: self.inbox.clone() });
        self.pool.cv.notify_one();
        true
    }

    /// Whether `addr` is ready or in flight.
    pub fn known(&self, addr: u64) -> bool {
        self.inflight.contains(&addr) || self.ready.contains_key(&addr)
    }

    /// Drops the ready record at `addr` (its item was brought back or
    /// unlinked: nobody needs it).
    pub fn forget(&mut self, addr: u64) {
        if let Some(e) = self.ready.remove(&addr) {
            self.bytes -= e.rec.map_or(0, |r| r.item.len());
        }
    }

    /// Keeps a record read on the worker (from the page cache) for the
    /// operation about to use it again: a recache reads it once.
    pub fn keep(&mut self, addr: u64, gen: u64, rec: Rec) {
        self.forget(addr);
        self.bytes += rec.item.len();
        self.ready.insert(addr, Entry { gen, rec: Ok(rec) });
        self.order.push_back(addr);
    }

    /// Takes the reads finished since the last call into `ready`, their
    /// tickets into `out`.
    pub fn completions(&mut self, out: &mut Vec<Ticket>) {
        std::mem::swap(&mut *self.inbox.done.lock(), &mut self.taken);
        for d in self.taken.drain(..) {
            self.inflight.remove(&d.addr);
            out.push(Ticket(d.addr));
            if d.moved {
                continue;
            }
            let len = d.rec.as_ref().map_or(0, |r| r.item.len());
            if let Some(old) = self.ready.insert(d.addr, Entry { gen: d.gen, rec: d.rec }) {
                self.bytes -= old.rec.map_or(0, |r| r.item.len());
            }
            self.bytes += len;
            self.order.push_back(d.addr);
        }
        while self.ready.len() > READY_MAX || self.bytes > READY_BYTES {
            let Some(a) = self.order.pop_front() else { break };
            self.forget(a);
        }
        if self.order.len() > 2 * READY_MAX {
            let ready = &self.ready;
            self.order.retain(|a| ready.contains_key(a));
        }
    }
}
