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
//!    │        (Outcome::Wait ► Parked { at, ticket } ─ read done ─► Woken { at, ticket } ─ runs ─► Ready)
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

use std::io;
use std::sync::Arc;

use strata_protocol::text::{self, Parse};
use strata_protocol::{binary, peek};
use strata_store::{Reading, Ticket};

use crate::config::Protocol;
use crate::execution::dispatch::{self, Outcome};
use crate::execution::replies::Replies;
use crate::network::transport::Transport;
use crate::{CloseReason, ConnInfo, ConnState};

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
    barrier: Option<(crate::execution::replies::Slot, u64)>,
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

    /// io_uring: the bytes the next send should write; they stay valid and
    /// unmoved until [`Conn::sent`].
    pub fn next_send(&mut self) -> Option<&[u8]> {
        self.replies.next_send()
    }

    /// io_uring, with no send in flight: writes what is queued through `t`
    /// (the socket) until it takes no more. Whatever it does not take is
    /// left for [`Conn::next_send`].
    pub fn send_now(&mut self, t: &mut impl Transport) -> io::Result<()> {
        self.bytes_written += self.replies.flush(t)?;
        Ok(())
    }

    /// io_uring: a send wrote `n` bytes of [`Conn::next_send`]'s slice.
    pub fn sent(&mut self, n: usize) {
        self.replies.sent(n);
        self.bytes_written += n as u64;
    }

    /// io_uring: takes what a receive brought (`Received`). The buffer
    /// grows past its usual limit only by what arrived before the worker's
    /// request to stop receiving took effect (see [`Conn::pause_reading`]).
    pub fn receive(&mut self, t: &mut impl Transport) {
        loop {
            if !self.make_room(self.filled - self.rpos + t.available().max(1), usize::MAX) {
                return;
            }
            match t.read(&mut self.rbuf[self.filled..]) {
                Ok(0) => {
                    self.ended();
                    return;
                }
                Ok(n) => self.arrived(n),
                Err(_) => return,
            }
        }
    }

    /// The end of input was read: the client closed the connection, which
    /// is a normal close (unless it is already closing for a reason of
    /// its own).
    fn ended(&mut self) {
        self.input = Input::Ended;
        if self.phase != Phase::Closing {
            self.info.set_close_reason(CloseReason::Normal);
        }
    }

    /// `n` new bytes are at the end of the buffer.
    fn arrived(&mut self, n: usize) {
        self.filled += n;
        self.bytes_read += n as u64;
        if let Phase::Waiting { .. } = self.phase {
            self.phase = Phase::Ready;
        }
    }

    /// io_uring: whether to stop receiving until the buffered work is done:
    /// after `quit`, under back-pressure, or with a full buffer of complete
    /// requests (the epoll path stops reading in the same cases).
    pub fn pause_reading(&mut self, ctx: &dispatch::Ctx<'_>) -> bool {
        self.phase == Phase::Closing
            || self.held_back(ctx.shared.cfg.max_output)
            || self.filled - self.rpos >= INITIAL_BUF
    }

    /// Its last replies are out after `quit`, or after end of input once
    /// every complete request it sent was served: close it.
    pub fn done(&mut self) -> bool {
        self.replies.is_empty() && (self.phase == Phase::Closing || (self.input == Input::Ended && self.starved()))
    }

    /// epoll: the peer has shut down its side (`EPOLLRDHUP`).
    pub fn note_peer_closed(&mut self) {
        if self.input == Input::Open {
            self.input = Input::PeerClosed;
        }
    }

    /// Hands the traffic counted since the last report to the worker's stats.
    pub fn report_traffic(&mut self, ctx: &dispatch::Ctx<'_>) {
        ctx.count_traffic(std::mem::take(&mut self.bytes_read), std::mem::take(&mut self.bytes_written));
    }

    /// Replies are below the back-pressure limit again (its own, and its
    /// share of the server-wide budget).
    pub fn below_reply_limit(&mut self, ctx: &dispatch::Ctx<'_>) -> bool {
        !self.held_back(ctx.shared.cfg.max_output)
    }

    /// Whether its unread replies stop it from running requests: its own
    /// limit (`max_output`), or the server-wide budget while that is spent.
    fn held_back(&mut self, max_output: usize) -> bool {
        let pending = self.replies.pending();
        pending >= max_output || self.info.replies.holds_back(pending)
    }

    /// Writes as much of the replies as `t` takes.
    fn flush(&mut self, t: &mut impl Transport) -> io::Result<()> {
        self.bytes_written += self.replies.flush(t)?;
        Ok(())
    }

    /// Room to read into, so that `want` unparsed bytes fit (0: any room).
    /// Compacts first; grows (up to `limit`) only when one incomplete request
    /// needs more room than the buffer has — a buffer full of complete
    /// requests is served, not grown, which keeps pipelining clients at the
    /// initial buffer size.
    fn make_room(&mut self, want: usize, limit: usize) -> bool {
        if self.rbuf.is_empty() {
            self.rbuf = crate::network::bufpool::take_read();
        }
        if self.rpos == self.filled {
            self.rpos = 0;
            self.filled = 0;
            self.hinted = 0;
        }
        if self.rpos > 0 && (self.filled == self.rbuf.len() || self.rpos + want > self.rbuf.len()) {
            self.rbuf.copy_within(self.rpos..self.filled, 0);
            self.filled -= self.rpos;
            self.rpos = 0;
            self.hinted = 0;
        }
        let target = if want > self.rbuf.len() {
            want
        } else if self.filled == self.rbuf.len() && self.stuck() {
            self.rbuf.len() * 2
        } else {
            0
        };
        let target = target.min(limit);
        if target > self.rbuf.len() {
            self.rbuf.resize(target, 0);
        }
        self.filled < self.rbuf.len()
    }

    /// Reads until `t` is empty (a short read or `WouldBlock`) or the
    /// buffer is at its limit. Returns whether `t` was drained (false: more
    /// may be waiting).
    fn fill(&mut self, t: &mut impl Transport, want: usize, limit: usize) -> io::Result<bool> {
        loop {
            if !self.make_room(want, limit) {
                return Ok(false);
            }
            match t.read(&mut self.rbuf[self.filled..]) {
                Ok(0) => {
                    self.ended();
                    return Ok(true);
                }
                Ok(n) => {
                    self.arrived(n);
                    if self.filled < self.rbuf.len() && self.input == Input::Open {
                        // A short read took everything the socket had. Linux
                        // epoll reports every later arrival as a new edge, so
                        // asking again would only cost a read that fails
                        // with EAGAIN (tokio clears readiness the same way).
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Serves the connection after a readiness event (or leftover work): the
    /// epoll path, which reads and writes through `t` itself.
    pub fn service(&mut self, t: &mut impl Transport, ctx: &mut dispatch::Ctx<'_>) -> Status {
        if self.lost {
            return Status::Close;
        }
        let limits = Limits::of(ctx);
        if self.flush(t).is_err() {
            return Status::Close;
        }
        if self.held_back(limits.max_output) {
            self.charge();
            return Status::Open(self.effects(false));
        }
        let mut drained = true;
        // `t` was read empty during this call: once the buffer is used up
        // there is nothing to read until the next readiness event.
        let mut empty = false;
        let mut served = 0;
        // Stopped with work left: the request budget ran out, or replies
        // piled up (back-pressure). Either way nothing new may arrive to wake
        // us (readiness is edge-triggered), so the worker must come back.
        let mut stalled = false;
        // Waiting for a read from flash: the worker serves it again when
        // the read is done (and reads the socket then).
        let mut parked = false;
        loop {
            let need = match self.serve_buffered(ctx, &limits, &mut served) {
                Served::Close => return Status::Close,
                Served::Stalled => {
                    stalled = true;
                    break;
                }
                Served::Finished => break,
                Served::Parked => {
                    parked = true;
                    break;
                }
                Served::Need(n) => n,
            };
            // Everything buffered is used up: read more, unless the socket
            // is known to be empty (that read would only return EAGAIN).
            if self.input == Input::Ended || !drained || empty {
                break;
            }
            // Count bytes read, not `filled`: `fill` may first move the
            // unread tail to the front, so an equal `filled` after a read of
            // exactly the bytes just consumed would look like no progress
            // and strand a pipelined batch in the buffer.
            let before = self.bytes_read;
            match self.fill(t, need, limits.rbuf) {
                Ok(d) => {
                    drained = d;
                    empty = d;
                }
                Err(_) => return Status::Close,
            }
            if self.bytes_read == before {
                break;
            }
        }
        if self.flush(t).is_err() {
            return Status::Close;
        }
        if self.settle(ctx) {
            return Status::Close;
        }
        // With replies still queued the socket is full: its writable edge
        // will wake us. Otherwise come back if work was left.
        let more = !parked && (stalled || !drained) && !self.held_back(limits.max_output);
        Status::Open(self.effects(more))
    }

    /// Runs what is buffered without touching the socket: the io_uring
    /// path, where the worker owns the reads and writes.
    pub fn advance(&mut self, ctx: &mut dispatch::Ctx<'_>) -> Advance {
        if self.lost {
            return Advance::Close;
        }
        let limits = Limits::of(ctx);
        let mut served = 0;
        let mut stalled = false;
        let mut read = false;
        if self.held_back(limits.max_output) {
            // Nothing runs until the replies drain; whatever is buffered
            // (or a multi-get part way) waits for that.
            stalled = true;
        } else {
            match self.serve_buffered(ctx, &limits, &mut served) {
                Served::Close => return Advance::Close,
                Served::Stalled => stalled = true,
                Served::Finished | Served::Parked => {}
                Served::Need(_) => read = self.input != Input::Ended,
            }
        }
        if self.settle(ctx) {
            return Advance::Close;
        }
        let more = stalled && !self.held_back(limits.max_output);
        Advance::Open { effects: self.effects(more), read, backlogged: stalled && !more }
    }

    /// Parses and runs buffered requests until the buffer is used up, the
    /// request budget or the reply limit is reached, or the connection is
    /// to close.
    fn serve_buffered(&mut self, ctx: &mut dispatch::Ctx<'_>, limits: &Limits, served: &mut usize) -> Served {
        ctx.fd = self.info.fd;
        loop {
            match self.phase {
                // After `quit` nothing more is read, even if its earlier
                // replies needed several writes to leave.
                Phase::Closing => return Served::Finished,
                Phase::Swallowing { left } => {
                    let n = left.min(self.filled - self.rpos);
                    self.rpos += n;
                    if n < left {
                        self.phase = Phase::Swallowing { left: left - n };
                        return Served::Need(0);
                    }
                    self.phase = Phase::Ready;
                }
                Phase::Parked { .. } => return Served::Parked,
                Phase::Watching => {
                    self.rpos = self.filled;
                    // Lines wait in the watcher (which skips what does not
                    // fit) while the client is slow to read.
                    if !self.held_back(limits.max_output) {
                        if let Some(h) = &self.watch {
                            h.watcher.take(self.replies.buf());
                        }
                    }
                    return Served::Need(0);
                }
                Phase::Ready | Phase::Waiting { .. } | Phase::Resuming { .. } | Phase::Woken { .. } => {}
            }
            if self.rpos == self.filled {
                self.phase = Phase::Waiting { need: 0 };
                return Served::Need(0);
            }
            if *served >= limits.reqs_per_event {
                // memcached's conn_yields: -R sent it to the back of the line.
                crate::execution::core::inc(&ctx.stats.conn_yields);
                return Served::Stalled;
            }
            if self.held_back(limits.max_output) || self.replies.waiting() >= MAX_WAITING_REPLIES {
                return Served::Stalled;
            }
            if self.rpos >= self.hinted {
                self.read_ahead(ctx);
            }
            let (resume, reading) = match self.phase {
                Phase::Resuming { at } => (Some(at), Reading::MayWait),
                Phase::Woken { at, ticket } => (at, Reading::Resumed(ticket)),
                _ => (None, Reading::MayWait),
            };
            let mark = self.replies.mark();
            let timed = ctx
                .shared
                .cfg
                .metrics_listen
                .is_some()
                .then(|| self.park_t0.take().unwrap_or_else(|| (std::time::Instant::now(), self.family())));
            let before = self.replies.buf().len();
            ctx.reading = reading;
            let step = self.step(ctx, &limits.parse, resume);
            ctx.reading = Reading::MayWait;
            match step {
                Step::Done { outcome: Outcome::Wait { ticket, at }, .. } => {
                    self.park(ctx, at, before, resume, ticket, timed);
                    return Served::Parked;
                }
                Step::Done { outcome, consumed } => {
                    if let Some((t0, family)) = timed {
                        ctx.stats.latency.record(family, t0.elapsed());
                    }
                    self.last_request = ctx.shared.store.clock().now();
                    self.hold_for_durability(ctx, mark);
                    *served += 1;
                    self.phase = Phase::Ready;
                    if !matches!(outcome, Outcome::Resume(_)) {
                        self.logged = false;
                    }
                    match outcome {
                        Outcome::Continue => self.rpos += consumed,
                        Outcome::Resume(at) => {
                            // Part of a multi-get is out; the rest waits
                            // until the client has read some replies.
                            self.phase = Phase::Resuming { at };
                            return Served::Stalled;
                        }
                        Outcome::Swallow(n) => {
                            self.rpos += consumed;
                            self.phase = Phase::Swallowing { left: n };
                        }
                        Outcome::CloseAfterWrite(why) => {
                            self.info.set_close_reason(why);
                            self.rpos += consumed;
                            self.phase = Phase::Closing;
                            return Served::Finished;
                        }
                        Outcome::Watch(watcher) => {
                            self.rpos += consumed;
                            self.phase = Phase::Watching;
                            let watchers = ctx.shared.watchers.clone();
                            self.watch = Some(crate::observability::watch::WatchHandle { watchers, watcher });
                            self.watch_new = true;
                        }
                        // Taken above.
                        Outcome::Wait { .. } => {}
                    }
                }
                Step::Incomplete { need } => {
                    self.phase = Phase::Waiting { need };
                    return Served::Need(need);
                }
                Step::Close => {
                    self.info.set_close_reason(CloseReason::Error);
                    return Served::Close;
                }
            }
        }
    }

    /// The request at the front stopped to wait for the flash read of
    /// `ticket`: takes back what it wrote (a multi-get keeps the keys it
    /// answered, and resumes at `at`) and asks for the flash reads of the
    /// requests behind it, so that they overlap with this one.
    fn park(
        &mut self,
        ctx: &mut dispatch::Ctx<'_>,
        at: Option<usize>,
        before: usize,
        resume: Option<usize>,
        ticket: Ticket,
        timed: Option<(std::time::Instant, usize)>,
    ) {
        let at = match at {
            Some(at) => Some(at),
            None => {
                self.replies.buf().truncate(before);
                resume
            }
        };
        self.phase = Phase::Parked { at, ticket };
        self.park_new = true;
        self.park_t0 = timed;
        let mut keys: [&[u8]; READ_AHEAD_KEYS] = [&[]; READ_AHEAD_KEYS];
        let mut n = 0;
        self.peek_front(READ_AHEAD_KEYS, |k| {
            keys[n] = k;
            n += 1;
        });
        ctx.store.prefetch_flash(&keys[..n]);
    }

    /// Brings its charge to the reply budget up to date.
    fn charge(&mut self) {
        let pending = self.replies.pending();
        self.charged = self.info.replies.charge(self.charged, pending);
    }

    /// What `stats conns` shows it doing.
    fn state(&self) -> ConnState {
        match self.phase {
            Phase::Swallowing { .. } => ConnState::Swallow,
            _ if self.rpos < self.filled => ConnState::Nread,
            _ => ConnState::ParseCmd,
        }
    }

    /// Reports the connection's state and traffic; true once it is done:
    /// its last reply is out after `quit` or end of input. Gives its read
    /// buffer back once everything in it is used.
    fn settle(&mut self, ctx: &mut dispatch::Ctx<'_>) -> bool {
        ctx.touch_conn(&self.info, self.state());
        self.report_traffic(ctx);
        self.charge();
        if self.done() {
            return true;
        }
        self.replies.release_idle();
        if self.rpos == self.filled && !self.rbuf.is_empty() {
            crate::network::bufpool::give_read(std::mem::take(&mut self.rbuf));
            self.rpos = 0;
            self.filled = 0;
            self.hinted = 0;
        }
        false
    }

    /// Prefetches what the plain reads at the front of the buffer will look
    /// up (a pipeline of gets, the keys of a multi-get), so that they wait on
    /// memory together instead of one key after another
    /// ([`strata_store::Worker::prefetch`]). Only a hint: the requests are
    /// parsed and run as usual after.
    fn read_ahead(&mut self, ctx: &mut dispatch::Ctx<'_>) {
        let mut keys: [&[u8]; READ_AHEAD_KEYS] = [&[]; READ_AHEAD_KEYS];
        let mut n = 0;
        let covered = self.peek_front(READ_AHEAD_KEYS, |k| {
            keys[n] = k;
            n += 1;
        });
        // One key is read next anyway: prefetching it would only add work.
        if n > 1 {
            ctx.store.prefetch(&keys[..n]);
        }
        self.hinted = self.rpos + covered;
    }

    /// Hands `f` the keys (at most `max`) of the requests at the front of
    /// the unparsed bytes, once per stretch of buffer: what this covered is
    /// not read ahead again. The io_uring worker gathers these from every
    /// connection of a turn before running any (a lone set has nothing to
    /// be read ahead of on its own connection).
    pub fn look_ahead(&mut self, max: usize, f: impl FnMut(&[u8])) {
        if self.rpos < self.hinted {
            return;
        }
        let covered = self.peek_front(max, f);
        self.hinted = self.rpos + covered;
    }

    /// [`peek`] over the unparsed bytes, in the connection's protocol.
    fn peek_front<'a>(&'a self, max: usize, f: impl FnMut(&'a [u8])) -> usize {
        let buf = &self.rbuf[self.rpos..self.filled];
        match self.proto {
            Proto::Text => peek::text_keys(buf, max, f),
            Proto::Binary => peek::binary_keys(buf, max, f),
            Proto::Undecided => 0,
        }
    }

    /// Parses and runs the request at the front of the buffer, in the
    /// connection's protocol (chosen here from the first byte).
    fn step(&mut self, ctx: &mut dispatch::Ctx<'_>, pconfig: &text::Config, resume: Option<usize>) -> Step {
        ctx.replies_queued = self.replies.unsent();
        let buf = &self.rbuf[self.rpos..self.filled];
        let out = self.replies.buf();
        if ctx.shared.cfg.auth_file.is_some() && !self.auth.authenticated {
            return match text::auth::parse(buf) {
                text::auth::AuthParse::Incomplete { need } => Step::Incomplete { need },
                parsed => match dispatch::authenticate(ctx, parsed, &mut self.auth, out) {
                    Some((consumed, outcome)) => Step::Done { outcome, consumed },
                    None => Step::Close,
                },
            };
        }
        let verbose = crate::observability::verbose::on(ctx.shared);
        let fd = self.info.fd;
        if self.proto == Proto::Undecided {
            self.proto = match ctx.shared.cfg.protocol {
                Protocol::Auto if buf[0] == binary::REQUEST_MAGIC => Proto::Binary,
                Protocol::Auto | Protocol::Ascii => Proto::Text,
                Protocol::Binary => Proto::Binary,
            };
            if verbose && ctx.shared.cfg.protocol == Protocol::Auto {
                crate::observability::verbose::negotiated(fd, self.proto == Proto::Binary);
            }
        }
        let before = out.len();
        match self.proto {
            Proto::Binary => match binary::parse(buf, pconfig) {
                binary::Parse::Done { request, consumed } => {
                    if verbose && !std::mem::replace(&mut self.logged, true) {
                        crate::observability::verbose::binary_request(fd, &buf[..binary::HEADER_LEN.min(buf.len())]);
                    }
                    let outcome = crate::execution::binary::execute(ctx, request, &mut self.auth, out);
                    if verbose {
                        crate::observability::verbose::binary_responses(fd, &out[before..]);
                    }
                    Step::Done { outcome, consumed }
                }
                binary::Parse::Incomplete { need } => Step::Incomplete { need },
                // Not a request: replies already queued still go out first,
                // as memcached writes them before reading on.
                binary::Parse::Close => {
                    Step::Done { outcome: Outcome::CloseAfterWrite(CloseReason::Error), consumed: 0 }
                }
            },
            _ => match text::parse(buf, pconfig) {
                Parse::Done { request, consumed } => {
                    if verbose && !self.logged {
                        self.logged = crate::observability::verbose::command(fd, buf);
                    }
                    let outcome = dispatch::execute(ctx, request, out, resume);
                    if verbose {
                        crate::observability::verbose::replies(
                            fd,
                            crate::observability::verbose::Kind::of(buf),
                            &out[before..],
                        );
                    }
                    Step::Done { outcome, consumed }
                }
                Parse::Incomplete { need } => Step::Incomplete { need },
                Parse::Close => Step::Close,
            },
        }
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
pub(crate) mod tests;
