//! The load loop: client threads, each driving its share of the
//! connections with one `mio` poll. A connection keeps up to `pipeline`
//! requests in flight; in open-loop mode each request has a due time and
//! its latency counts from then, so a stalled server is charged for the
//! requests it kept waiting (no coordinated omission). Replies are matched
//! to requests in order and parsed by [`crate::proto`]. With
//! [`Plan::trace`] on, each thread keeps the requests it issued
//! ([`crate::trace`]), numbered in the order the whole phase issued them.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rustls::ClientConfig;

use crate::gen::{write_key, KeyChooser, Values};
use crate::proto::{self, Kind, Protocol};
use crate::trace::{self, Rec};

/// Value-size bands for hits by size: up to 1 KB, then up to four times
/// the band below's top (1–4 KB, 4–16 KB, … 256 KB–1 MB), then over 1 MB;
/// KB = 1024 bytes, tops inclusive (a 65536-byte value is in 16–64 KB).
pub const BANDS: usize = 7;
pub(crate) const BAND_TOPS: [u64; BANDS - 1] = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
pub(crate) const BAND_LABELS: [&str; BANDS] =
    ["≤1 KB", "1–4 KB", "4–16 KB", "16–64 KB", "64–256 KB", "256 KB–1 MB", ">1 MB"];

/// The band of a `len`-byte value.
pub fn band_of(len: usize) -> usize {
    BAND_TOPS.iter().position(|&top| len as u64 <= top).unwrap_or(BANDS - 1)
}

/// Why a load thread stopped early.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("connecting to {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("connection {conn}: {source}")]
    Io { conn: usize, source: io::Error },
    #[error("connection {conn}: server closed the connection")]
    Closed { conn: usize },
    #[error("connection {conn}: {source}")]
    Desync { conn: usize, source: proto::Desync },
    #[error("replies still missing {0:?} after stopping")]
    Drain(Duration),
    #[error("{0}")]
    Setup(String),
}

/// Where requests' keys come from.
#[derive(Debug)]
pub enum Source<'a> {
    /// The request mix: sets with probability `set_share`, else gets of
    /// `multiget` keys, keys drawn from the chooser.
    Mix { set_share: f64, multiget: u16, keys: KeyChooser },
    /// Sets of keys `0, 1, 2, …` once each, up to `limit`; with `order`,
    /// the `n`th set is of key `order[n]` instead.
    Fill { next: AtomicU64, limit: u64, order: Option<Vec<u64>> },
    /// Cache-aside: get a key; on a miss, set it. Some request slots go
    /// to a scan of cold keys.
    CacheAside { keys: KeyChooser, scan: Scan },
    /// A trace's lines in order, shared by every connection: a get (with
    /// `fill`, on a miss a set: cache-aside, as a simulator inserts on a
    /// miss) or a set, with the line's size.
    Replay { recs: &'a [Rec], next: AtomicU64, fill: bool },
}

/// A periodic one-pass scan of cold keys: of every `every` request slots
/// (a phase's numbering, sets after a miss included), the first `len` ask
/// for keys `first`, `first + 1`, … that nothing asked for before.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scan {
    pub every: u64,
    pub len: u64,
    pub first: u64,
}

impl Scan {
    /// The cold key slot `slot` asks for, if it is a scan's.
    fn key(&self, slot: u64) -> Option<u64> {
        if self.every == 0 {
            return None;
        }
        let (pass, at) = (slot / self.every, slot % self.every);
        (at < self.len).then(|| self.first + pass * self.len + at)
    }
}

/// What all threads of one phase share.
pub struct Plan<'a> {
    pub protocol: Protocol,
    pub source: Source<'a>,
    pub values: &'a Values,
    /// TTL classes of the keys' sets ([`crate::gen::ttl_of`]).
    pub ttls: Vec<u32>,
    /// Keep the issued requests ([`Totals::trace`]).
    pub trace: bool,
    pub key_size: usize,
    pub pipeline: usize,
    /// Open loop: requests per second per connection.
    pub conn_rate: Option<f64>,
    /// Stop issuing after this many requests in all.
    pub limit: Option<u64>,
    pub stop: AtomicBool,
    pub issued: AtomicU64,
    pub completed: AtomicU64,
}

impl Plan<'_> {
    /// Takes the next request slot, if the phase still has one: its
    /// number in the phase's order of issue.
    fn take(&self) -> Option<u64> {
        if self.stop.load(Relaxed) {
            return None;
        }
        let slot = self.issued.fetch_add(1, Relaxed);
        match self.limit {
            Some(l) if slot >= l => None,
            _ => Some(slot),
        }
    }

    /// Value bytes of key `index` (generated), or the first `len` of one
    /// value as long as the trace's longest (replay: `values` are fixed).
    fn value(&self, index: u64, len: u32) -> &[u8] {
        match self.source {
            Source::Replay { .. } => {
                let v = self.values.value(0);
                &v[..(len as usize).min(v.len())]
            }
            _ => self.values.value(index),
        }
    }
}

/// Counts and latencies of one thread, then of the whole phase.
#[derive(Debug, Clone)]
pub struct Totals {
    pub requests: u64,
    pub sets: u64,
    pub gets: u64,
    /// Keys asked for by gets.
    pub keys: u64,
    pub hits: u64,
    pub misses: u64,
    pub errors: u64,
    /// Single-key gets by the size of the key's value (see
    /// [`band_of`]); multi-key gets are not in these, their
    /// replies do not say which keys hit.
    pub bands: [Bytes; BANDS],
    /// Nanoseconds from when a request was due to its reply.
    pub latency: Histogram<u64>,
    /// The requests issued, when the plan keeps them (unordered).
    pub trace: Vec<Rec>,
}

/// Gets and hits, and the value bytes they asked for and got; a miss
/// counts the size the key's value would have had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bytes {
    pub gets: u64,
    pub hits: u64,
    pub requested: u64,
    pub hit: u64,
}

impl Bytes {
    pub fn add(&mut self, o: &Bytes) {
        self.gets += o.gets;
        self.hits += o.hits;
        self.requested += o.requested;
        self.hit += o.hit;
    }

    /// Counts one single-key get of a `len`-byte value.
    pub fn count(&mut self, len: usize, hit: bool) {
        self.gets += 1;
        self.requested += len as u64;
        if hit {
            self.hits += 1;
            self.hit += len as u64;
        }
    }
}

impl Totals {
    pub fn new() -> Totals {
        Totals {
            requests: 0,
            sets: 0,
            gets: 0,
            keys: 0,
            hits: 0,
            misses: 0,
            errors: 0,
            bands: [Bytes::default(); BANDS],
            // 1 ns to 100 s at 3 significant figures; the bounds are valid.
            latency: Histogram::new_with_bounds(1, 100_000_000_000, 3).unwrap_or_else(|_| unreachable!()),
            trace: Vec::new(),
        }
    }

    pub fn merge(&mut self, o: &Totals) {
        self.requests += o.requests;
        self.sets += o.sets;
        self.gets += o.gets;
        self.keys += o.keys;
        self.hits += o.hits;
        self.misses += o.misses;
        self.errors += o.errors;
        for (a, b) in self.bands.iter_mut().zip(&o.bands) {
            a.add(b);
        }
        let _ = self.latency.add(&o.latency);
        self.trace.extend_from_slice(&o.trace);
    }
}

impl Default for Totals {
    fn default() -> Self {
        Totals::new()
    }
}

struct Pending {
    kind: Kind,
    key: u64,
    /// Value length of `key` (of the first key of a multi-get).
    len: u32,
    ttl: u32,
    due: Instant,
}

struct Conn {
    stream: crate::tls::Stream,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Vec<u8>,
    inflight: VecDeque<Pending>,
    /// Keys (value lengths, TTLs) whose get missed, to be set (cache-aside).
    refill: VecDeque<(u64, u32, u32)>,
    next_due: Instant,
    done: bool,
}

const READ_CHUNK: usize = 64 * 1024;

impl Conn {
    /// Queues requests until the pipeline is full (or none is due).
    fn fill(&mut self, plan: &Plan<'_>, interval: Option<Duration>, now: Instant, rng: &mut SmallRng, t: &mut Totals) {
        let mut key = Vec::with_capacity(plan.key_size);
        let key_size = plan.key_size as u32;
        let len_of = |index: u64| plan.values.len_of(index) as u32;
        let ttl_of = |index: u64| crate::gen::ttl_of(&plan.ttls, index);
        while !self.done && self.inflight.len() < plan.pipeline {
            let due = match interval {
                Some(_) if self.next_due > now => break,
                Some(i) => {
                    let due = self.next_due;
                    self.next_due += i;
                    due
                }
                None => now,
            };
            let Some(slot) = plan.take() else {
                self.done = true;
                break;
            };
            let mut keep = |op, index: u64, len: u32, ttl: u32| {
                if plan.trace {
                    t.trace.push(Rec { seq: slot, key: index, size: key_size + len, op, ttl });
                }
            };
            if let Some((index, len, ttl)) = self.refill.pop_front() {
                self.set(plan, &mut key, index, len, ttl, due);
                t.sets += 1;
                continue;
            }
            match &plan.source {
                Source::Fill { next, limit, order } => {
                    let n = next.fetch_add(1, Relaxed);
                    if n >= *limit {
                        self.done = true;
                        break;
                    }
                    let index = order.as_ref().and_then(|o| o.get(n as usize).copied()).unwrap_or(n);
                    keep(trace::Op::Set, index, len_of(index), ttl_of(index));
                    self.set(plan, &mut key, index, len_of(index), ttl_of(index), due);
                    t.sets += 1;
                }
                Source::Mix { set_share, multiget, keys } => {
                    if rng.random_bool(*set_share) {
                        let index = keys.next(rng);
                        keep(trace::Op::Set, index, len_of(index), ttl_of(index));
                        self.set(plan, &mut key, index, len_of(index), ttl_of(index), due);
                        t.sets += 1;
                    } else {
                        let indices: Vec<u64> = (0..*multiget).map(|_| keys.next(rng)).collect();
                        for &i in &indices {
                            keep(trace::Op::Get, i, len_of(i), ttl_of(i));
                        }
                        self.get(plan, &indices, len_of(indices[0]), 0, due);
                        t.gets += 1;
                        t.keys += indices.len() as u64;
                    }
                }
                Source::CacheAside { keys, scan } => {
                    let index = scan.key(slot).unwrap_or_else(|| keys.next(rng));
                    keep(trace::Op::Get, index, len_of(index), ttl_of(index));
                    self.get(plan, &[index], len_of(index), ttl_of(index), due);
                    t.gets += 1;
                    t.keys += 1;
                }
                Source::Replay { recs, next, .. } => {
                    let Some(r) = usize::try_from(next.fetch_add(1, Relaxed)).ok().and_then(|i| recs.get(i)) else {
                        self.done = true;
                        break;
                    };
                    let len = r.size.saturating_sub(key_size);
                    keep(r.op, r.key, len, r.ttl);
                    if r.op == trace::Op::Set {
                        self.set(plan, &mut key, r.key, len, r.ttl, due);
                        t.sets += 1;
                    } else {
                        self.get(plan, &[r.key], len, r.ttl, due);
                        t.gets += 1;
                        t.keys += 1;
                    }
                }
            }
        }
    }

    fn set(&mut self, plan: &Plan<'_>, key: &mut Vec<u8>, index: u64, len: u32, ttl: u32, due: Instant) {
        key.clear();
        write_key(key, index, plan.key_size);
        proto::encode_set(plan.protocol, &mut self.wbuf, key, plan.value(index, len), ttl);
        self.inflight.push_back(Pending { kind: Kind::Set, key: index, len, ttl, due });
    }

    /// `len` and `ttl` are the first key's, for the set after a miss.
    fn get(&mut self, plan: &Plan<'_>, indices: &[u64], len: u32, ttl: u32, due: Instant) {
        let mut keys = Vec::with_capacity(indices.len() * plan.key_size);
        for &i in indices {
            write_key(&mut keys, i, plan.key_size);
        }
        proto::encode_get(plan.protocol, &mut self.wbuf, keys.chunks(plan.key_size));
        let kind = Kind::Get(indices.len() as u16);
        self.inflight.push_back(Pending { kind, key: indices[0], len, ttl, due });
    }

    /// Writes what it can without blocking.
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush_tls()?;
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        Ok(())
    }

    /// Reads everything available and completes the requests it answers.
    fn read(&mut self, id: usize, plan: &Plan<'_>, refill: bool, t: &mut Totals) -> Result<(), DriverError> {
        loop {
            let len = self.rbuf.len();
            self.rbuf.resize(len + READ_CHUNK, 0);
            match self.stream.read(&mut self.rbuf[len..]) {
                Ok(0) => {
                    self.rbuf.truncate(len);
                    return Err(DriverError::Closed { conn: id });
                }
                Ok(n) => self.rbuf.truncate(len + n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.rbuf.truncate(len);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.rbuf.truncate(len),
                Err(source) => return Err(DriverError::Io { conn: id, source }),
            }
        }
        // Every reply in this batch arrived by now.
        let now = Instant::now();
        let mut pos = 0;
        while let Some(p) = self.inflight.front() {
            let reply = match proto::parse(plan.protocol, p.kind, &self.rbuf[pos..]) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(source) => return Err(DriverError::Desync { conn: id, source }),
            };
            pos += reply.consumed;
            t.requests += 1;
            t.hits += u64::from(reply.hits);
            t.misses += u64::from(reply.misses);
            t.errors += u64::from(reply.error);
            if p.kind == Kind::Get(1) && !reply.error {
                let len = p.len as usize;
                t.bands[band_of(len)].count(len, reply.hits > 0);
            }
            let nanos = u64::try_from(now.saturating_duration_since(p.due).as_nanos()).unwrap_or(u64::MAX);
            t.latency.saturating_record(nanos.max(1));
            if refill && reply.misses > 0 {
                self.refill.push_back((p.key, p.len, p.ttl));
            }
            self.inflight.pop_front();
            plan.completed.fetch_add(1, Relaxed);
        }
        self.rbuf.drain(..pos);
        Ok(())
    }
}

/// How long to wait for in-flight replies once the phase stops.
const DRAIN: Duration = Duration::from_secs(10);

/// Runs `conns` connections to `addr` until the plan stops; `seed` makes the
/// thread's request stream reproducible.
pub fn run_thread(
    plan: &Plan<'_>,
    addr: SocketAddr,
    tls: Option<&std::sync::Arc<ClientConfig>>,
    conns: usize,
    seed: u64,
) -> Result<Totals, DriverError> {
    let mut t = Totals::new();
    let mut rng = SmallRng::seed_from_u64(seed);
    let poll_err = |source| DriverError::Connect { addr, source };
    let mut poll = Poll::new().map_err(poll_err)?;
    let mut events = Events::with_capacity(1024);
    let interval = plan.conn_rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let start = Instant::now();
    let mut list = Vec::with_capacity(conns);
    for i in 0..conns {
        let std = std::net::TcpStream::connect(addr).map_err(poll_err)?;
        std.set_nodelay(true).map_err(poll_err)?;
        std.set_nonblocking(true).map_err(poll_err)?;
        let mut stream = crate::tls::Stream::new(TcpStream::from_std(std), tls, addr).map_err(poll_err)?;
        poll.registry()
            .register(stream.socket(), Token(i), Interest::READABLE | Interest::WRITABLE)
            .map_err(poll_err)?;
        // Stagger open-loop schedules across the connections.
        let offset = interval.map(|d| d.mul_f64(i as f64 / conns.max(1) as f64)).unwrap_or_default();
        list.push(Conn {
            stream,
            wbuf: Vec::with_capacity(64 * 1024),
            wpos: 0,
            rbuf: Vec::with_capacity(READ_CHUNK * 2),
            inflight: VecDeque::with_capacity(plan.pipeline),
            refill: VecDeque::new(),
            next_due: start + offset,
            done: false,
        });
    }
    let refill = matches!(plan.source, Source::CacheAside { .. } | Source::Replay { fill: true, .. });
    let mut stopped_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if plan.stop.load(Relaxed) {
            let at = *stopped_at.get_or_insert(now);
            if now - at > DRAIN {
                return Err(DriverError::Drain(DRAIN));
            }
        }
        let mut busy = false;
        let mut next_due: Option<Instant> = None;
        for (id, c) in list.iter_mut().enumerate() {
            c.fill(plan, interval, now, &mut rng, &mut t);
            c.flush().map_err(|source| DriverError::Io { conn: id, source })?;
            busy |= !c.inflight.is_empty() || !c.done;
            if interval.is_some() && !c.done && c.inflight.len() < plan.pipeline {
                next_due = Some(next_due.map_or(c.next_due, |d: Instant| d.min(c.next_due)));
            }
        }
        if !busy || (plan.stop.load(Relaxed) && list.iter().all(|c| c.inflight.is_empty())) {
            break;
        }
        // Wake for the next due request, or at least every 50 ms to see `stop`.
        let mut timeout = Duration::from_millis(50);
        if let Some(d) = next_due {
            timeout = timeout.min(d.saturating_duration_since(Instant::now()));
        }
        poll.poll(&mut events, Some(timeout)).map_err(|source| DriverError::Io { conn: usize::MAX, source })?;
        for ev in events.iter() {
            let id = ev.token().0;
            let Some(c) = list.get_mut(id) else { continue };
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                c.read(id, plan, refill, &mut t)?;
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::Scan;

    #[test]
    fn a_scan_takes_the_first_slots_of_each_period_with_keys_never_seen() {
        let scan = Scan { every: 10, len: 3, first: 1000 };
        let keys: Vec<Option<u64>> = (0..25).map(|slot| scan.key(slot)).collect();
        let asked: Vec<u64> = keys.iter().flatten().copied().collect();
        assert_eq!(asked, [1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008]);
        assert_eq!(keys.iter().filter(|k| k.is_none()).count(), 16);
        assert_eq!(Scan::default().key(0), None, "no scan");
    }
}
