//! `watch`: memcached's live event log. A connection that sends `watch
//! [fetchers|mutations|evictions|connevents|sysevents|rawcmds …]` gets
//! `OK`, then one line per event of those kinds, in memcached's format:
//!
//! ```text
//! ts=<unix secs>.<µs> gid=<event id> type=item_get key=<uri-escaped> status=found clsid=<class> cfd=<fd> size=<bytes>
//! ts=… gid=… type=item_store key=… status=stored cmd=set ttl=<secs> clsid=<class> cfd=… size=…
//! ts=… gid=… type=eviction key=… fetch=<yes|no> ttl=<secs|-1> la=<secs> clsid=<class> size=…
//! ts=… gid=… type=conn_new rip=<ip> rport=<port> transport=<tcp|local> cfd=…
//! ts=… gid=… type=conn_close rip=… rport=… transport=… reason=<normal|idle_timeout|…> cfd=…
//! ```
//!
//! The request path pays one relaxed load ([`Watchers::wants`]) while
//! nobody watches. Lines go into each interested watcher's buffer (at most
//! `-o watcher_logbuf_size`, [`WATCHER_BUF`] by default); a watcher that
//! reads too slowly loses lines, counted (`log_watcher_skipped`) and
//! announced to it as memcached does, with a `skipped=<n>` line once there
//! is room again. Nothing waits for a
//! watcher. Its connection stays on its worker: the first line into an
//! empty buffer wakes that worker ([`WatchList`]), which moves the buffer
//! into the connection's replies under the usual back-pressure.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::wake::Wake;

/// Event kinds, as `watch` names them.
pub(crate) const FETCHERS: u32 = 1;
pub(crate) const MUTATIONS: u32 = 1 << 1;
pub(crate) const EVICTIONS: u32 = 1 << 2;
pub(crate) const CONNEVENTS: u32 = 1 << 3;
/// Accepted as memcached accepts them; strata has no events of these
/// kinds (memcached's are its crawler's and extstore's, and raw command
/// lines), so such a watcher gets `OK` and then only the kinds beside.
pub(crate) const SYSEVENTS: u32 = 1 << 4;
pub(crate) const RAWCMDS: u32 = 1 << 5;

/// The kind named by a `watch` argument.
pub(crate) fn kind(name: &[u8]) -> Option<u32> {
    Some(match name {
        b"fetchers" => FETCHERS,
        b"mutations" => MUTATIONS,
        b"evictions" => EVICTIONS,
        b"connevents" => CONNEVENTS,
        b"sysevents" => SYSEVENTS,
        b"rawcmds" => RAWCMDS,
        _ => return None,
    })
}

/// Most watchers at once (memcached's limit).
pub(crate) const MAX_WATCHERS: usize = 20;

pub(crate) use crate::config::WATCHER_BUF;

/// Every watcher, and the counters `stats` shows.
pub(crate) struct Watchers {
    /// Bytes of lines each watcher may have waiting.
    buf_limit: usize,
    /// The kinds some watcher wants: the request path's one check.
    mask: AtomicU32,
    list: Mutex<Vec<Arc<Watcher>>>,
    /// memcached's `gid`: numbers every event logged.
    gid: AtomicU64,
    /// Events logged (`log_worker_written`), lines handed to watchers
    /// (`log_watcher_sent`) and lost to full buffers (`log_watcher_skipped`).
    pub written: AtomicU64,
    pub sent: AtomicU64,
    pub skipped: AtomicU64,
}

impl Default for Watchers {
    fn default() -> Self {
        Watchers::with_buffer(WATCHER_BUF)
    }
}

/// One watching connection's side: what it asked for and its lines.
pub(crate) struct Watcher {
    kinds: u32,
    /// Bytes of lines it may have waiting.
    limit: usize,
    pending: Mutex<Pending>,
    /// Lines arrived since its worker last took them.
    ready: AtomicBool,
    /// Its worker's wake-up, once the worker has it on its list.
    wake: OnceLock<Arc<Wake>>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").field("kinds", &self.kinds).finish_non_exhaustive()
    }
}

/// One watcher is only ever equal to itself.
impl PartialEq for Watcher {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Watcher {}

#[derive(Default)]
struct Pending {
    buf: Vec<u8>,
    /// Lines lost since the last one that fitted.
    skipped: u64,
}

impl Watchers {
    /// Watchers whose buffers hold `buf_limit` bytes each.
    pub fn with_buffer(buf_limit: usize) -> Watchers {
        Watchers {
            buf_limit,
            mask: AtomicU32::new(0),
            list: Mutex::default(),
            gid: AtomicU64::new(0),
            written: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// Bytes of lines each watcher may have waiting (`stats settings`).
    pub fn buffer(&self) -> usize {
        self.buf_limit
    }

    /// Whether anyone watches events of `kind`.
    #[inline]
    pub fn wants(&self, kind: u32) -> bool {
        self.mask.load(Relaxed) & kind != 0
    }

    /// Watchers now (`log_watchers`).
    pub fn count(&self) -> usize {
        self.list.lock().len()
    }

    /// A new watcher of `kinds`, or `None` at [`MAX_WATCHERS`].
    pub fn add(&self, kinds: u32) -> Option<Arc<Watcher>> {
        let mut list = self.list.lock();
        if list.len() >= MAX_WATCHERS {
            return None;
        }
        let w = Arc::new(Watcher {
            kinds,
            limit: self.buf_limit,
            pending: Mutex::new(Pending::default()),
            ready: AtomicBool::new(false),
            wake: OnceLock::new(),
        });
        list.push(w.clone());
        self.mask.fetch_or(kinds, Relaxed);
        Some(w)
    }

    /// Its connection has closed.
    pub fn remove(&self, w: &Arc<Watcher>) {
        let mut list = self.list.lock();
        list.retain(|x| !Arc::ptr_eq(x, w));
        self.mask.store(list.iter().fold(0, |m, x| m | x.kinds), Relaxed);
    }

    /// Logs one event of `kind`: `body` is the line after `ts=… gid=… `.
    pub fn log(&self, kind: u32, body: std::fmt::Arguments<'_>) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let gid = self.gid.fetch_add(1, Relaxed) + 1;
        let mut line = String::with_capacity(160);
        // memcached prints the microseconds with %d: not zero-padded.
        let _ = writeln!(line, "ts={}.{} gid={gid} {body}", now.as_secs(), now.subsec_micros());
        self.written.fetch_add(1, Relaxed);
        for w in self.list.lock().iter().filter(|w| w.kinds & kind != 0) {
            if w.push(line.as_bytes()) {
                self.sent.fetch_add(1, Relaxed);
            } else {
                self.skipped.fetch_add(1, Relaxed);
            }
        }
    }
}

/// `watch evictions`: the store tells of each item it evicts from memory
/// while someone watches them.
impl strata_store::EvictionWatcher for Watchers {
    fn wanted(&self) -> bool {
        self.wants(EVICTIONS)
    }

    fn evicted(&self, e: &strata_store::Evicted<'_>) {
        self.log(
            EVICTIONS,
            format_args!(
                "type=eviction key={} fetch={} ttl={} la={} clsid={} size={}",
                crate::observability::uri(e.key),
                if e.fetched { "yes" } else { "no" },
                e.ttl,
                e.age,
                e.class,
                e.size
            ),
        );
    }
}

impl Watcher {
    /// Queues a line; false if the buffer is full (the line is lost).
    fn push(&self, line: &[u8]) -> bool {
        let mut p = self.pending.lock();
        let note = if p.skipped > 0 { format!("skipped={}\n", p.skipped) } else { String::new() };
        if p.buf.len() + note.len() + line.len() > self.limit {
            p.skipped += 1;
            return false;
        }
        p.buf.extend_from_slice(note.as_bytes());
        p.buf.extend_from_slice(line);
        p.skipped = 0;
        drop(p);
        if !self.ready.swap(true, Relaxed) {
            if let Some(wake) = self.wake.get() {
                wake.wake();
            }
        }
        true
    }

    /// Moves the waiting lines to `out`.
    pub fn take(&self, out: &mut Vec<u8>) {
        self.ready.store(false, Relaxed);
        let mut p = self.pending.lock();
        if out.is_empty() {
            std::mem::swap(out, &mut p.buf);
        } else {
            out.append(&mut p.buf);
        }
    }
}

/// A watching connection's registration; dropping it (the connection
/// closed) removes the watcher.
pub(crate) struct WatchHandle {
    pub watchers: Arc<Watchers>,
    pub watcher: Arc<Watcher>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.watchers.remove(&self.watcher);
    }
}

/// A worker's watching connections, by slot: the worker serves each
/// again when lines arrive for it.
#[derive(Default)]
pub(crate) struct WatchList {
    slots: Vec<(usize, Arc<Watcher>)>,
}

impl WatchList {
    /// Slot `i` now watches through `w`. True if lines already wait: they
    /// were logged before the wake-up was set and woke nobody, so the
    /// caller serves the slot again.
    pub fn attach(&mut self, i: usize, w: Arc<Watcher>, wake: &Arc<Wake>) -> bool {
        let _ = w.wake.set(wake.clone());
        let waiting = w.ready.load(Relaxed);
        self.slots.push((i, w));
        waiting
    }

    /// Hands `serve` each slot with lines waiting; forgets the watchers
    /// whose connection has gone (only this list still holds them).
    pub fn due(&mut self, mut serve: impl FnMut(usize)) {
        if self.slots.is_empty() {
            return;
        }
        self.slots.retain(|(_, w)| Arc::strong_count(w) > 1);
        for (i, w) in &self.slots {
            if w.ready.load(Relaxed) {
                serve(*i);
            }
        }
    }
}

/// `rip`, `rport` and `transport` of a peer named as `listen.rs` names it
/// (`tcp:1.2.3.4:5`, `tcp:[::1]:5`, `unix:`).
pub(crate) fn endpoint(peer: &str) -> (&str, &str, &'static str) {
    match peer.strip_prefix("tcp:") {
        Some(addr) => match addr.rsplit_once(':') {
            Some((ip, port)) => (ip.trim_start_matches('[').trim_end_matches(']'), port, "tcp"),
            None => (addr, "0", "tcp"),
        },
        None => ("unix", "0", "local"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(w: &Watcher) -> String {
        let mut out = Vec::new();
        w.take(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn lines_reach_the_watchers_of_their_kind_only() {
        let ws = Watchers::default();
        assert!(!ws.wants(FETCHERS));
        let f = ws.add(FETCHERS).unwrap_or_else(|| panic!("room"));
        let m = ws.add(MUTATIONS | EVICTIONS).unwrap_or_else(|| panic!("room"));
        assert!(ws.wants(FETCHERS) && ws.wants(EVICTIONS) && !ws.wants(CONNEVENTS));
        ws.log(FETCHERS, format_args!("type=item_get key=a"));
        ws.log(MUTATIONS, format_args!("type=item_store key=b"));
        let (fl, ml) = (lines(&f), lines(&m));
        assert!(fl.starts_with("ts=") && fl.ends_with(" gid=1 type=item_get key=a\n"), "{fl}");
        assert!(ml.ends_with(" gid=2 type=item_store key=b\n") && !ml.contains("item_get"), "{ml}");
        ws.remove(&f);
        assert!(!ws.wants(FETCHERS) && ws.wants(MUTATIONS));
        assert_eq!(ws.written.load(Relaxed), 2);
    }

    #[test]
    fn a_full_buffer_skips_lines_and_says_so_once_there_is_room() {
        let ws = Watchers::default();
        let w = ws.add(FETCHERS).unwrap_or_else(|| panic!("room"));
        let body = "x".repeat(1000);
        let mut n = 0;
        while ws.skipped.load(Relaxed) < 3 {
            ws.log(FETCHERS, format_args!("{body}"));
            n += 1;
        }
        assert!(n < WATCHER_BUF / 1000 + 5);
        let first = lines(&w);
        assert!(first.len() <= WATCHER_BUF && !first.contains("skipped="));
        ws.log(FETCHERS, format_args!("after"));
        let next = lines(&w);
        assert!(next.starts_with("skipped=3\nts="), "{next}");
        assert!(next.ends_with(" after\n"));
    }

    #[test]
    fn the_buffer_is_the_configured_size() {
        // memcached's t/watcher.t: watcher_logbuf_size=8 (KiB).
        let ws = Watchers::with_buffer(8 << 10);
        let w = ws.add(FETCHERS).unwrap_or_else(|| panic!("room"));
        let body = "x".repeat(200);
        for _ in 0..100 {
            ws.log(FETCHERS, format_args!("{body}"));
        }
        let first = lines(&w);
        assert!(first.len() <= 8 << 10 && first.len() > (8 << 10) - 300, "{}", first.len());
        assert!(ws.skipped.load(Relaxed) > 50);
        ws.log(FETCHERS, format_args!("after"));
        assert!(lines(&w).starts_with("skipped="));
    }

    #[test]
    fn at_most_twenty_watchers() {
        let ws = Watchers::default();
        let all: Vec<_> = (0..MAX_WATCHERS).filter_map(|_| ws.add(FETCHERS)).collect();
        assert_eq!(all.len(), MAX_WATCHERS);
        assert!(ws.add(FETCHERS).is_none());
        ws.remove(&all[0]);
        assert!(ws.add(FETCHERS).is_some());
    }

    #[test]
    fn endpoints_as_memcached_prints_them() {
        assert_eq!(endpoint("tcp:127.0.0.1:5000"), ("127.0.0.1", "5000", "tcp"));
        assert_eq!(endpoint("tcp:[::1]:7"), ("::1", "7", "tcp"));
        assert_eq!(endpoint("unix:"), ("unix", "0", "local"));
    }
}
