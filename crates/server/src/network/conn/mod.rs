//! One client connection: its buffers and the state machine that turns the
//! bytes it receives into requests for the dispatcher and its replies into
//! bytes to send. It does no socket I/O itself: the event loops drive it
//! through a [`Transport`] (`transport.rs`).
//!
//! States (memcached's, folded into two enums):
//!
//! ```text
//!  Phase (the request stream)                  Input (what may still come)
//!  ┌───────┐ parse: complete request  ┌──────┐     Open ──EPOLLRDHUP──► PeerClosed
//!  │ Ready │──── run it, stay Ready ─►│      │       │                    │
//!  └───────┘                          └──────┘       └──── read 0 ───────►┴──► Ended
//!    │ │ │ └─ incomplete ──────────► Waiting { need }  (more input makes it Ready)
//!    │ │ └─── refused, data follows ► Swallowing { left } ─ left = 0 ─► Ready
//!    │ └───── multi-get over the reply limit ► Resuming { at } ─ replies drain ─► Ready
//!    │        (Outcome::Wait ► Parked { at, ticket } ─ read done / memory freed ─► Woken { at, ticket } ─ runs ─► Ready)
//!    └─────── quit, fatal binary request ► Closing (only its replies are left)
//! ```
//!
//! A connection is done once its replies are out after `Closing`, or after
//! `Ended` once every complete request it sent has run.
//!
//! Two drivers share the state machine (`serve_buffered`, `settle`): on
//! epoll, [`Conn::service`] reads and writes through the socket transport
//! itself; on io_uring, the worker owns the I/O and calls [`Conn::receive`]
//! with what a receive brought, [`Conn::advance`] to run it, and
//! [`Conn::next_send`] / [`Conn::sent`] (or [`Conn::send_now`]) for the
//! replies. Either pass returns what the worker's scheduler (`sched.rs`)
//! is to do next as a value ([`Effects`]: work left, replies held for the
//! log, a park, a watch); the scheduler's ways back in are
//! [`Conn::release_durable`] and [`Conn::unpark`]. Replies leave in request
//! order through reply slots ([`Replies`]), so one reply can wait while
//! later ones are answered.
//!
//! Bounds: the read buffer never grows past one request (the largest item plus
//! its command line, or the longest `get` line; on io_uring plus what arrived
//! before a paused receive was cancelled, at most the worker's receive
//! buffers); replies stop being produced once `max_output` bytes wait for the
//! client (back-pressure), or [`MAX_WAITING_REPLIES`] replies wait for their
//! values; idle buffers shrink back to their initial size.
//!
//! Files: this one (the states, the connection and its hand-offs with the
//! scheduler), `bytes.rs` (bytes in and out: the read buffer, the replies'
//! sends, room and back-pressure) and `serve.rs` (the state machine's
//! passes: running what is buffered, parking, settling).

use std::io;
use std::sync::Arc;

use strata_protocol::text::{self, Parse};
use strata_protocol::{binary, peek};
use strata_store::{Reading, Ticket};

use crate::config::Protocol;
use crate::execution::dispatch::{self, Outcome};
use crate::network::replies::Replies;
use crate::network::transport::Transport;
use crate::{CloseReason, ConnInfo, ConnState};

mod bytes;
mod serve;

const INITIAL_BUF: usize = crate::network::bufpool::BUF_SIZE;

/// Keys read ahead per look at the buffer (see [`Conn::read_ahead`]): a
/// 16-deep pipeline or a 16-key multi-get twice over.
const READ_AHEAD_KEYS: usize = 32;

/// Replies that may wait for their values (reply slots) before the
/// connection stops reading requests: each stands for a read in flight.
pub(crate) const MAX_WAITING_REPLIES: usize = 64;

/// The protocol a connection speaks, fixed by its first byte (or `-B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Undecided,
    Text,
    Binary,
}

/// Where the request stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Requests may be runnable in the buffer.
    Ready,
    /// Nothing runnable until more input: the buffer is empty, or holds
    /// part of a request that needs `need` bytes in all (0: not known yet,
    /// e.g. a line without its newline).
    Waiting { need: usize },
    /// Discarding `left` more bytes of a refused request's data.
    Swallowing { left: usize },
    /// A multi-get stopped at key position `at` (back-pressure); it
    /// resumes there once the client has read some replies.
    Resuming { at: usize },
    /// After `quit` (or a request that ends the connection): nothing more
    /// is read or run; the connection closes once its replies are out.
    Closing,
    /// The request at the front waits for a read from flash (the store's
    /// `ticket` for it); it runs again once that is done, from key
    /// position `at` for a multi-get whose earlier keys are answered.
    Parked { at: Option<usize>, ticket: Ticket },
    /// The read it was parked for is done: the request runs again (from
    /// `at`) with [`Reading::Resumed`], so that read is not waited for
    /// twice even if the worker let its record go meanwhile: every park
    /// ends in progress.
    Woken { at: Option<usize>, ticket: Ticket },
    /// After `watch`: input is no longer read as commands (memcached stops
    /// reading it); event lines are sent until the client closes.
    Watching,
}

/// How much input may still come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    Open,
    /// epoll: the peer shut down its side (`EPOLLRDHUP`); the end of input
    /// may already be queued behind data, so a short read no longer means
    /// the socket is empty.
    PeerClosed,
    /// The end of input was read.
    Ended,
}

/// What one parse of the buffer front came to.
enum Step {
    Done { outcome: Outcome, consumed: usize },
    Incomplete { need: usize },
    Close,
}

/// What a service pass leaves the scheduler (`sched.rs`) to do for the
/// connection: handed back as a value, so nothing has to be asked of the
/// connection afterwards.
#[derive(Default)]
pub(crate) struct Effects {
    /// Work is left that needs no new input: serve it again next turn.
    pub more: bool,
    /// Its replies wait for the durability log ([`Conn::release_durable`]).
    pub held: bool,
    /// It just parked for this flash read ([`Conn::unpark`] when it is done).
    pub park: Option<Ticket>,
    /// It just became this watcher: serve it whenever lines arrive.
    pub watch: Option<Arc<crate::observability::watch::Watcher>>,
}

impl std::fmt::Debug for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Effects")
            .field("more", &self.more)
            .field("held", &self.held)
            .field("park", &self.park)
            .field("watch", &self.watch.is_some())
            .finish()
    }
}

/// Equal when they ask for the same things (a watcher compared by identity).
impl PartialEq for Effects {
    fn eq(&self, other: &Effects) -> bool {
        let same_watch = match (&self.watch, &other.watch) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        self.more == other.more && self.held == other.held && self.park == other.park && same_watch
    }
}

impl Eq for Effects {}

/// What the worker should do with the connection after servicing it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Open(Effects),
    Close,
}

/// What the io_uring worker should do after [`Conn::advance`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Advance {
    /// `effects`: for the scheduler, as after [`Conn::service`].
    /// `read`: everything buffered is used up and input may still come
    /// (the receive buffer grows to fit, so how much is not needed).
    /// `backlogged`: work is left but waits for replies to drain below the
    /// limit (a send that drains them must bring the connection back).
    Open {
        effects: Effects,
        read: bool,
        backlogged: bool,
    },
    Close,
}

/// Where [`Conn::serve_buffered`] stopped.
enum Served {
    /// The buffer holds no complete request: read, with room for this many
    /// unparsed bytes (0: any).
    Need(usize),
    /// Work is left, held back by the request budget, the reply limit, or
    /// too many replies waiting for values.
    Stalled,
    /// `quit` (or a fatal binary request): only its replies are left.
    Finished,
    /// The request at the front waits for a read from flash.
    Parked,
    Close,
}

/// The settings a service pass works within.
struct Limits {
    /// Largest read buffer: one request (the largest item and its command
    /// line, or the longest `get` line).
    rbuf: usize,
    max_output: usize,
    reqs_per_event: usize,
    parse: text::Config,
}

impl Limits {
    fn of(ctx: &dispatch::Ctx<'_>) -> Limits {
        let cfg = &ctx.shared.cfg;
        Limits {
            rbuf: (cfg.item_size_max + text::MAX_COMMAND_LINE + 2).max(cfg.max_get_line) + INITIAL_BUF,
            max_output: cfg.max_output,
            reqs_per_event: cfg.reqs_per_event.max(1),
            parse: ctx.parse_config(),
        }
    }
}

pub(crate) struct Conn {
    pub info: Arc<ConnInfo>,
    /// Read buffer: bytes `[rpos, filled)` are unparsed. Its length is its
    /// capacity, zeroed once, so reads never re-initialise memory. Empty
    /// while the connection has no unparsed bytes: borrowed from the
    /// worker's pool when bytes arrive and given back once they are used
    /// (`bufpool.rs`), so an idle connection holds no buffer.
    rbuf: Vec<u8>,
    rpos: usize,
    filled: usize,
    /// io_uring: `rbuf[filled..]` is lent to a receive that writes the
    /// rest of a large request there in place ([`Conn::lend_rest`]); the
    /// buffer is neither moved, grown nor given back until it returns.
    lent: bool,
    /// `rbuf[..hinted]` has had its keys read ahead.
    hinted: usize,
    replies: Replies,
    phase: Phase,
    input: Input,
    proto: Proto,
    /// SASL (binary) or ASCII authentication state.
    auth: crate::execution::binary::Auth,
    /// Traffic since the last `service` reported it to the worker's stats.
    bytes_read: u64,
    bytes_written: u64,
    /// With `--durability always`: the slot the replies of changes (and
    /// every reply after them) wait behind, and the log position that
    /// must be on disk before they go.
    barrier: Option<(crate::network::replies::Slot, u64)>,
    /// The durability log failed while replies waited for it: they are
    /// never sent, and the connection closes.
    lost: bool,
    /// Parked, and the worker not yet told what for ([`Conn::take_park`]).
    park_new: bool,
    /// When the parked request began, and its command family (for the
    /// latency histograms, which count the wait).
    park_t0: Option<(std::time::Instant, usize)>,
    /// When its last request completed (or it was accepted), in the
    /// store clock's seconds: `-o idle_timeout` measures from here.
    last_request: u32,
    /// Its unread reply bytes charged to the server-wide budget
    /// ([`crate::ReplyBudget`]); given back when it closes.
    charged: usize,
    /// After `watch`: its registration, and whether the worker has yet
    /// to be told ([`Conn::take_watch`]).
    watch: Option<crate::observability::watch::WatchHandle>,
    watch_new: bool,
    /// With `-vv`: the request at the front has been logged (it may run
    /// again, resumed or after a park, and is logged once).
    logged: bool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.info.replies.charge(self.charged, 0);
    }
}

impl Conn {
    pub fn new(info: Arc<ConnInfo>) -> Conn {
        Conn {
            rbuf: Vec::new(),
            rpos: 0,
            filled: 0,
            hinted: 0,
            lent: false,
            replies: Replies::default(),
            phase: Phase::Ready,
            input: Input::Open,
            proto: Proto::Undecided,
            auth: crate::execution::binary::Auth::default(),
            bytes_read: 0,
            bytes_written: 0,
            barrier: None,
            lost: false,
            park_new: false,
            park_t0: None,
            last_request: info.last_cmd.load(std::sync::atomic::Ordering::Relaxed),
            charged: 0,
            watch: None,
            watch_new: false,
            logged: false,
            info,
        }
    }

    /// Whether it has gone `timeout` seconds without completing a request
    /// (`-o idle_timeout`): idle, or trickling a request too slowly. A
    /// request waiting for a read from flash is not the client's delay.
    pub fn idle(&self, now: u32, timeout: u32) -> bool {
        !matches!(self.phase, Phase::Parked { .. } | Phase::Watching)
            && now.saturating_sub(self.last_request) >= timeout
    }

    /// Nothing of it is under way: no request partly received or partly
    /// run, no reply unsent. A graceful stop closes such connections and
    /// lets the others finish.
    pub fn quiescent(&mut self) -> bool {
        self.rpos == self.filled
            && matches!(self.phase, Phase::Ready | Phase::Waiting { .. } | Phase::Watching | Phase::Closing)
            && self.replies.is_empty()
    }

    /// The watcher this connection just became, once: the worker serves
    /// it again whenever lines arrive for it.
    fn take_watch(&mut self) -> Option<Arc<crate::observability::watch::Watcher>> {
        if !std::mem::take(&mut self.watch_new) {
            return None;
        }
        self.watch.as_ref().map(|h| h.watcher.clone())
    }

    /// The flash read this connection just parked for, once: the worker
    /// wakes it with [`Conn::unpark`] when that read is done.
    fn take_park(&mut self) -> Option<Ticket> {
        match self.phase {
            Phase::Parked { ticket, .. } if std::mem::take(&mut self.park_new) => Some(ticket),
            _ => None,
        }
    }

    /// The flash read of `done` is done: true if this connection waited
    /// for it and can run again (the worker then serves it).
    pub fn unpark(&mut self, done: Ticket) -> bool {
        let Phase::Parked { at, ticket } = self.phase else { return false };
        if ticket != done {
            return false;
        }
        self.phase = Phase::Woken { at, ticket };
        true
    }

    /// The command family of the request at the front of the buffer, for
    /// the latency histograms.
    fn family(&self) -> usize {
        let buf = &self.rbuf[self.rpos..self.filled];
        match self.proto {
            Proto::Binary => crate::observability::latency::family_binary(buf),
            _ if buf.first() == Some(&strata_protocol::binary::REQUEST_MAGIC) => {
                crate::observability::latency::family_binary(buf)
            }
            _ => crate::observability::latency::family_text(buf),
        }
    }

    /// Replies wait for the durability log. The event loops have this from
    /// the pass's [`Effects`]; UDP asks after a pass that may have closed.
    pub fn held_for_durability(&self) -> bool {
        self.barrier.is_some()
    }

    /// What the scheduler is to do for it after a pass that leaves it open
    /// (`more`: work is left that needs no new input). Takes the park and
    /// the watch it just began, so each is handed over once.
    fn effects(&mut self, more: bool) -> Effects {
        Effects { more, held: self.held_for_durability(), park: self.take_park(), watch: self.take_watch() }
    }

    /// Lets the replies held for durability go if the log is on disk up to
    /// them. True if the connection must be served now: its replies are
    /// free, or the log failed and it is to close.
    pub fn release_durable(&mut self, wal: &strata_persist::Wal) -> bool {
        let Some((_, at)) = &self.barrier else { return false };
        if wal.failed() {
            self.lost = true;
            return true;
        }
        if wal.acked() < *at {
            return false;
        }
        if let Some((slot, _)) = self.barrier.take() {
            self.replies.fill(slot, b"");
        }
        true
    }

    /// After a request ran: if it changed the cache under `--durability
    /// always` (or `interval`), its reply (and every later one) waits for
    /// the log to have it on disk (written to the file). `mark`
    /// is where its reply began. A change made with `noreply` (or a quiet
    /// binary command) holds back the next reply all the same, so any
    /// reply a client gets means its earlier changes are on disk.
    fn hold_for_durability(&mut self, ctx: &mut dispatch::Ctx<'_>, mark: Option<usize>) {
        let at = ctx.store.take_journaled();
        if at == 0 || ctx.shared.durable_acks.is_none() {
            return;
        }
        match (&mut self.barrier, mark) {
            (Some((_, waits_for)), _) => *waits_for = (*waits_for).max(at),
            (None, Some(mark)) => self.barrier = Some((self.replies.defer_from(mark), at)),
            // Replies queue behind another kind of slot: the barrier goes
            // at the end (no such slots exist yet; see `replies.rs`).
            (None, None) => self.barrier = Some((self.replies.wait(), at)),
        }
    }

    /// The buffer holds part of a request and nothing runnable: a full
    /// buffer must grow rather than be served.
    fn stuck(&self) -> bool {
        matches!(self.phase, Phase::Waiting { .. }) && self.rpos < self.filled
    }

    /// Everything it sent that can run has run: only more input would
    /// give it something to do.
    fn starved(&self) -> bool {
        match self.phase {
            Phase::Waiting { .. } | Phase::Watching => true,
            Phase::Swallowing { .. } => self.rpos == self.filled,
            _ => false,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
