//! What a request runs with and what it ends in: the worker's context
//! ([`Ctx`]: the shared state, the worker's store handle, its counters and
//! what the connection says of itself) and the connection's next step
//! ([`Outcome`]). Every executor takes the one and returns the other, so
//! this file sits below all of them.

use std::sync::atomic::Ordering::Relaxed;

use strata_protocol::text::Config as ParseConfig;
use strata_store::{Reading, Ticket, Worker};

use crate::observability::counters::WorkerStats;
use crate::observability::inc;
use crate::{CloseReason, ConnInfo, ConnState, Shared};

/// The worker-thread context a request runs in.
pub(crate) struct Ctx<'a> {
    pub shared: &'a Shared,
    pub store: &'a mut Worker,
    pub stats: &'a WorkerStats,
    /// The descriptor of the connection being served (`cfd` in `watch`
    /// lines); set by the connection.
    pub fd: i32,
    /// How the request may read from flash: set by the connection
    /// ([`Reading::Resumed`] when it runs a request again after waiting).
    pub reading: Reading,
    /// Replies of earlier requests on this connection are not all sent:
    /// a key dump or `watch` is refused then, as memcached refuses them
    /// behind a pipeline (set by the connection).
    pub replies_queued: bool,
}

impl<'a> Ctx<'a> {
    /// An event loop's: its connections set `fd`, `reading` and
    /// `replies_queued` before each request.
    pub fn for_loop(shared: &'a Shared, store: &'a mut Worker, stats: &'a WorkerStats) -> Ctx<'a> {
        Ctx { shared, store, stats, fd: -1, reading: Reading::MayWait, replies_queued: false }
    }

    pub fn parse_config(&self) -> ParseConfig {
        let cfg = &self.shared.cfg;
        ParseConfig {
            item_size_max: cfg.item_size_max,
            item_overhead: strata_store::Store::ITEM_OVERHEAD,
            max_get_line: cfg.max_get_line,
            debug_clock: cfg.debug_clock,
        }
    }

    pub fn count_traffic(&self, read: u64, written: u64) {
        let s = self.stats;
        s.bytes_read.store(s.bytes_read.load(Relaxed) + read, Relaxed);
        s.bytes_written.store(s.bytes_written.load(Relaxed) + written, Relaxed);
    }

    pub fn touch_conn(&self, info: &ConnInfo, state: ConnState) {
        info.last_cmd.store(self.shared.store.clock().now(), Relaxed);
        info.state.store(state as u32, Relaxed);
    }
}

/// What the connection does after a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Continue,
    /// A multi-get stopped at this key position for back-pressure; the
    /// request stays in the buffer and resumes there.
    Resume(usize),
    /// Discard this many bytes of input (data of a refused value).
    Swallow(usize),
    /// Its replies go out, then it closes, for this reason.
    CloseAfterWrite(CloseReason),
    /// `watch`: from now on the connection receives event lines.
    Watch(std::sync::Arc<crate::observability::watch::Watcher>),
    /// The request waits for a read from flash: the connection parks on the
    /// ticket and runs it again once the read is done. What it wrote is
    /// dropped, unless `at` says where a multi-get stopped (the keys before
    /// it are answered, and it resumes there).
    Wait {
        ticket: Ticket,
        at: Option<usize>,
    },
}

impl Outcome {
    /// A request that wrote nothing waits for `ticket`.
    pub(crate) fn wait(ticket: Ticket) -> Outcome {
        Outcome::Wait { ticket, at: None }
    }
}

/// The ready result of a core operation, or the executor returns: the
/// request waits for the ticket (nothing was done or counted yet).
macro_rules! ready {
    ($flow:expr) => {
        match $flow {
            Flow::Ready(r) => r,
            Flow::Wait(t) => return Outcome::wait(t),
        }
    };
}
pub(crate) use ready;

/// Failed authentication attempts in a row after which a connection is
/// closed (its last reply still goes out). memcached never closes: one
/// connection could try 215,000 passwords a second. A client with a wrong
/// password learns it from the first failure; a guesser must reconnect
/// every few tries, and each close is counted (`strata_auth_closed`) and
/// logged at most once a second.
pub(crate) const MAX_AUTH_FAILURES: u32 = 5;

/// Counts a failed attempt on a connection; true if it must now close.
pub(crate) fn auth_failed(ctx: &Ctx<'_>, failures: &mut u32) -> bool {
    inc(&ctx.stats.auth_errors);
    *failures += 1;
    if *failures < MAX_AUTH_FAILURES {
        return false;
    }
    inc(&ctx.stats.auth_closed);
    // Rate-limited: a flood of guessers must not flood the log too.
    static LAST_LOG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if LAST_LOG.swap(now, Relaxed) != now {
        tracing::warn!(failures = *failures, "closing a connection after repeated authentication failures");
    }
    true
}
