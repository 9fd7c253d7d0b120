//! One client connection: its buffers and the state machine that moves bytes
//! between the socket and the dispatcher.
//!
//! States (memcached's, folded): reading and parsing requests; waiting for the
//! rest of a request (`need`); swallowing the data of a refused oversized
//! value (`swallow`); part way through a large multi-get (`resume`), held back
//! until the client has read enough of the replies; closing after the last
//! reply is written (`close_after_write`).
//!
//! Two drivers share that state machine (`serve_buffered`, `settle`): on
//! epoll, [`Conn::service`] reads and writes the socket itself; on io_uring,
//! the worker owns the I/O and calls [`Conn::take`] with received bytes,
//! [`Conn::advance`] to run them, and [`Conn::next_send`] / [`Conn::sent`]
//! (or [`Conn::send_now`]) for the replies.
//!
//! Bounds: the read buffer never grows past one request (the largest item plus
//! its command line, or the longest `get` line; on io_uring plus what arrived
//! before a paused receive was cancelled, at most the worker's receive
//! buffers); replies stop being produced once `max_output` bytes wait for the
//! client (back-pressure); idle buffers shrink back to their initial size.

use std::io::{self, Read, Write};
use std::sync::Arc;

use strata_protocol::text::{self, Parse};
use strata_protocol::{binary, peek};

use crate::config::Protocol;
use crate::dispatch::{self, Outcome};
use crate::listen::Stream;
use crate::{ConnInfo, ConnState};

const INITIAL_BUF: usize = 16 * 1024;

/// Keys read ahead per look at the buffer (see [`Conn::read_ahead`]): a
/// 16-deep pipeline or a 16-key multi-get twice over.
const READ_AHEAD_KEYS: usize = 32;

/// The protocol a connection speaks, fixed by its first byte (or `-B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Undecided,
    Text,
    Binary,
}

/// What one parse of the buffer front came to.
enum Step {
    Done { outcome: Outcome, consumed: usize },
    Incomplete { need: usize },
    Close,
}

/// What the worker should do with the connection after servicing it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Open { more: bool },
    Close,
}

/// What the io_uring worker should do after [`Conn::advance`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Advance {
    /// `more`: work is left that needs no new input (come back next turn).
    /// `read`: everything buffered is used up and input may still come
    /// (the receive buffer grows to fit, so how much is not needed).
    /// `held`: work is left but waits for replies to drain below the limit
    /// (a send that drains them must bring the connection back).
    Open {
        more: bool,
        read: bool,
        held: bool,
    },
    Close,
}

/// Where [`Conn::serve_buffered`] stopped.
enum Served {
    /// The buffer holds no complete request: read, with room for this many
    /// unparsed bytes (0: any).
    Need(usize),
    /// Work is left, held back by the request budget or the reply limit.
    Stalled,
    /// `quit` (or a fatal binary request): only its replies are left.
    Finished,
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
    pub stream: Stream,
    pub info: Arc<ConnInfo>,
    /// Read buffer: bytes `[rpos, filled)` are unparsed. Its length is its
    /// capacity, zeroed once, so reads never re-initialise memory.
    rbuf: Vec<u8>,
    rpos: usize,
    filled: usize,
    /// `rbuf[..hinted]` has had its keys read ahead.
    hinted: usize,
    /// Replies not yet written: `out[opos..]`, then (io_uring) those of
    /// `sending[spos..]`, which a send in flight owns: new replies go to
    /// `out` meanwhile, so the kernel's buffer never moves.
    out: Vec<u8>,
    opos: usize,
    sending: Vec<u8>,
    spos: usize,
    swallow: usize,
    resume: Option<usize>,
    close_after_write: bool,
    eof: bool,
    /// The buffered bytes hold no complete request: a full buffer must grow.
    stuck: bool,
    /// The last pass served everything it could and wanted more input.
    starved: bool,
    /// The peer shut down its sending side (see [`Conn::note_peer_closed`]).
    hup: bool,
    proto: Proto,
    /// SASL (binary) or ASCII authentication state.
    auth: crate::binary::Auth,
    /// Traffic since the last `service` reported it to the worker's stats.
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Conn {
    pub fn new(stream: Stream, info: Arc<ConnInfo>) -> Conn {
        Conn {
            stream,
            info,
            rbuf: vec![0; INITIAL_BUF],
            rpos: 0,
            filled: 0,
            hinted: 0,
            out: Vec::with_capacity(INITIAL_BUF),
            opos: 0,
            sending: Vec::new(),
            spos: 0,
            swallow: 0,
            resume: None,
            close_after_write: false,
            eof: false,
            stuck: false,
            starved: false,
            hup: false,
            proto: Proto::Undecided,
            auth: crate::binary::Auth::default(),
            bytes_read: 0,
            bytes_written: 0,
        }
    }

    fn pending_out(&self) -> usize {
        self.out.len() - self.opos + self.sending.len() - self.spos
    }

    /// io_uring: the bytes the next send should write, moving queued
    /// replies into the send buffer when it is empty. The slice stays valid
    /// and unmoved until [`Conn::sent`], as only that changes `sending`.
    pub fn next_send(&mut self) -> Option<&[u8]> {
        self.stage_send();
        (self.spos < self.sending.len()).then(|| &self.sending[self.spos..])
    }

    fn stage_send(&mut self) {
        if self.spos == self.sending.len() && self.opos < self.out.len() {
            self.sending.clear();
            std::mem::swap(&mut self.sending, &mut self.out);
            self.spos = std::mem::take(&mut self.opos);
        }
    }

    /// io_uring, with no send in flight: writes what is queued with plain
    /// `send` calls until the socket is full. Whatever it does not take is
    /// left for [`Conn::next_send`].
    pub fn send_now(&mut self) -> io::Result<()> {
        loop {
            self.stage_send();
            if self.spos == self.sending.len() {
                return Ok(());
            }
            match self.stream.write(&self.sending[self.spos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// io_uring: a send wrote `n` bytes of [`Conn::next_send`]'s slice.
    pub fn sent(&mut self, n: usize) {
        self.spos = (self.spos + n).min(self.sending.len());
        self.bytes_written += n as u64;
        if self.spos == self.sending.len() {
            self.sending.clear();
            self.spos = 0;
            if self.sending.capacity() > 4 * INITIAL_BUF {
                self.sending.shrink_to(INITIAL_BUF);
            }
        }
    }

    /// io_uring: appends received bytes (empty: end of input). The buffer
    /// grows past its usual limit only by what arrived before the worker's
    /// request to stop receiving took effect (see [`Conn::pause_reading`]).
    pub fn take(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            self.eof = true;
            return;
        }
        let unparsed = self.filled - self.rpos;
        self.make_room(unparsed + bytes.len(), usize::MAX);
        if self.rbuf.len() - self.filled < bytes.len() {
            // make_room moved the unparsed bytes to the front and grew to
            // fit them all, so this only guards the arithmetic.
            self.rbuf.resize(self.filled + bytes.len(), 0);
        }
        self.rbuf[self.filled..self.filled + bytes.len()].copy_from_slice(bytes);
        self.filled += bytes.len();
        self.bytes_read += bytes.len() as u64;
    }

    /// io_uring: whether to stop receiving until the buffered work is done:
    /// after `quit`, under back-pressure, or with a full buffer of complete
    /// requests (the epoll path stops reading in the same cases).
    pub fn pause_reading(&self, ctx: &dispatch::Ctx<'_>) -> bool {
        self.close_after_write
            || self.pending_out() >= ctx.shared.cfg.max_output
            || self.filled - self.rpos >= INITIAL_BUF
    }

    /// Its last replies are out after `quit`, or after end of input once
    /// every complete request it sent was served: close it.
    pub fn done(&self) -> bool {
        self.pending_out() == 0 && (self.close_after_write || (self.eof && self.starved))
    }

    /// epoll: the peer has shut down its side (`EPOLLRDHUP`). The end of
    /// input may already be queued behind the data, so a short read no
    /// longer means the socket is empty.
    pub fn note_peer_closed(&mut self) {
        self.hup = true;
    }

    /// Hands the traffic counted since the last report to the worker's stats.
    pub fn report_traffic(&mut self, ctx: &dispatch::Ctx<'_>) {
        ctx.count_traffic(std::mem::take(&mut self.bytes_read), std::mem::take(&mut self.bytes_written));
    }

    /// Replies are below the back-pressure limit again.
    pub fn below_reply_limit(&self, ctx: &dispatch::Ctx<'_>) -> bool {
        self.pending_out() < ctx.shared.cfg.max_output
    }

    /// Writes as much pending output as the socket takes.
    fn flush(&mut self) -> io::Result<()> {
        while self.opos < self.out.len() {
            match self.stream.write(&self.out[self.opos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.opos += n;
                    self.bytes_written += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.opos == self.out.len() {
            self.out.clear();
            self.opos = 0;
            if self.out.capacity() > 4 * INITIAL_BUF {
                self.out.shrink_to(INITIAL_BUF);
            }
        }
        Ok(())
    }

    /// Room to read into, so that `want` unparsed bytes fit (0: any room).
    /// Compacts first; grows (up to `limit`) only when one incomplete request
    /// needs more room than the buffer has — a buffer full of complete
    /// requests is served, not grown, which keeps pipelining clients at the
    /// initial buffer size.
    fn make_room(&mut self, want: usize, limit: usize) -> bool {
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
        } else if self.filled == self.rbuf.len() && self.stuck {
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

    /// Reads until the socket is empty (a short read or `EAGAIN`) or the
    /// buffer is at its limit. Returns whether the socket was drained
    /// (false: more may be waiting).
    fn fill(&mut self, want: usize, limit: usize) -> io::Result<bool> {
        loop {
            if !self.make_room(want, limit) {
                return Ok(false);
            }
            match self.stream.read(&mut self.rbuf[self.filled..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(true);
                }
                Ok(n) => {
                    self.filled += n;
                    self.bytes_read += n as u64;
                    if self.filled < self.rbuf.len() && !self.hup {
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
    /// epoll path, which reads and writes the socket itself.
    pub fn service(&mut self, ctx: &mut dispatch::Ctx<'_>) -> Status {
        let limits = Limits::of(ctx);
        if self.flush().is_err() {
            return Status::Close;
        }
        if self.pending_out() >= limits.max_output {
            return Status::Open { more: false };
        }
        let mut drained = true;
        // The socket was read empty during this call: once the buffer is
        // used up there is nothing to read until the next readiness event.
        let mut empty = false;
        let mut served = 0;
        // Stopped with work left: the request budget ran out, or replies
        // piled up (back-pressure). Either way nothing new may arrive to wake
        // us (readiness is edge-triggered), so the worker must come back.
        let mut stalled = false;
        loop {
            let need = match self.serve_buffered(ctx, &limits, &mut served) {
                Served::Close => return Status::Close,
                Served::Stalled => {
                    stalled = true;
                    break;
                }
                Served::Finished => break,
                Served::Need(n) => n,
            };
            // Everything buffered is used up: read more, unless the socket
            // is known to be empty (that read would only return EAGAIN).
            if self.eof || !drained || empty {
                break;
            }
            // Count bytes read, not `filled`: `fill` may first move the
            // unread tail to the front, so an equal `filled` after a read of
            // exactly the bytes just consumed would look like no progress
            // and strand a pipelined batch in the buffer.
            let before = self.bytes_read;
            match self.fill(need, limits.rbuf) {
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
        if self.flush().is_err() {
            return Status::Close;
        }
        if self.settle(ctx) {
            return Status::Close;
        }
        // With replies still queued the socket is full: its writable edge
        // will wake us. Otherwise come back if work was left.
        let more = (stalled || !drained) && self.pending_out() < limits.max_output;
        Status::Open { more }
    }

    /// Runs what is buffered without touching the socket: the io_uring
    /// path, where the worker owns the reads and writes.
    pub fn advance(&mut self, ctx: &mut dispatch::Ctx<'_>) -> Advance {
        let limits = Limits::of(ctx);
        let mut served = 0;
        let mut stalled = false;
        let mut read = false;
        if self.pending_out() >= limits.max_output {
            // Nothing runs until the replies drain; whatever is buffered
            // (or a multi-get part way) waits for that.
            stalled = true;
        } else {
            match self.serve_buffered(ctx, &limits, &mut served) {
                Served::Close => return Advance::Close,
                Served::Stalled => stalled = true,
                Served::Finished => {}
                Served::Need(_) => read = !self.eof,
            }
        }
        if self.settle(ctx) {
            return Advance::Close;
        }
        let more = stalled && self.pending_out() < limits.max_output;
        Advance::Open { more, read, held: stalled && !more }
    }

    /// Parses and runs buffered requests until the buffer is used up, the
    /// request budget or the reply limit is reached, or the connection is
    /// to close.
    fn serve_buffered(&mut self, ctx: &mut dispatch::Ctx<'_>, limits: &Limits, served: &mut usize) -> Served {
        let r = self.serve_buffered_inner(ctx, limits, served);
        self.starved = matches!(r, Served::Need(_));
        r
    }

    fn serve_buffered_inner(&mut self, ctx: &mut dispatch::Ctx<'_>, limits: &Limits, served: &mut usize) -> Served {
        loop {
            // After `quit` nothing more is read, even if its earlier replies
            // needed several writes to leave.
            if self.close_after_write {
                return Served::Finished;
            }
            if self.swallow > 0 {
                let n = self.swallow.min(self.filled - self.rpos);
                self.rpos += n;
                self.swallow -= n;
            }
            if self.swallow > 0 || self.rpos == self.filled {
                return Served::Need(0);
            }
            if *served >= limits.reqs_per_event || self.pending_out() >= limits.max_output {
                return Served::Stalled;
            }
            if self.rpos >= self.hinted {
                self.read_ahead(ctx);
            }
            match self.step(ctx, &limits.parse) {
                Step::Done { outcome, consumed } => {
                    *served += 1;
                    self.stuck = false;
                    match outcome {
                        Outcome::Continue => self.rpos += consumed,
                        Outcome::Resume(at) => {
                            // Part of a multi-get is out; the rest waits
                            // until the client has read some replies.
                            self.resume = Some(at);
                            return Served::Stalled;
                        }
                        Outcome::Swallow(n) => {
                            self.rpos += consumed;
                            self.swallow = n;
                        }
                        Outcome::CloseAfterWrite => {
                            self.rpos += consumed;
                            self.close_after_write = true;
                            return Served::Finished;
                        }
                    }
                }
                Step::Incomplete { need } => {
                    self.stuck = true;
                    return Served::Need(need);
                }
                Step::Close => return Served::Close,
            }
        }
    }

    /// Reports the connection's state and traffic; true once it is done:
    /// its last reply is out after `quit` or end of input. Gives back an
    /// idle oversized read buffer.
    fn settle(&mut self, ctx: &mut dispatch::Ctx<'_>) -> bool {
        ctx.touch_conn(&self.info, self.state());
        self.report_traffic(ctx);
        if self.done() {
            return true;
        }
        if self.rpos == self.filled && self.rbuf.len() > INITIAL_BUF * 4 {
            self.rbuf = vec![0; INITIAL_BUF];
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
    fn step(&mut self, ctx: &mut dispatch::Ctx<'_>, pconfig: &text::Config) -> Step {
        let buf = &self.rbuf[self.rpos..self.filled];
        if ctx.shared.cfg.auth_file.is_some() && !self.auth.authenticated {
            return match text::auth::parse(buf) {
                text::auth::AuthParse::Incomplete { need } => Step::Incomplete { need },
                parsed => match dispatch::authenticate(ctx, parsed, &mut self.auth.authenticated, &mut self.out) {
                    Some(consumed) => Step::Done { outcome: Outcome::Continue, consumed },
                    None => Step::Close,
                },
            };
        }
        if self.proto == Proto::Undecided {
            self.proto = match ctx.shared.cfg.protocol {
                Protocol::Auto if buf[0] == binary::REQUEST_MAGIC => Proto::Binary,
                Protocol::Auto | Protocol::Ascii => Proto::Text,
                Protocol::Binary => Proto::Binary,
            };
        }
        match self.proto {
            Proto::Binary => match binary::parse(buf, pconfig) {
                binary::Parse::Done { request, consumed } => {
                    let outcome = crate::binary::execute(ctx, request, &mut self.auth, &mut self.out);
                    Step::Done { outcome, consumed }
                }
                binary::Parse::Incomplete { need } => Step::Incomplete { need },
                // Not a request: replies already queued still go out first,
                // as memcached writes them before reading on.
                binary::Parse::Close => Step::Done { outcome: Outcome::CloseAfterWrite, consumed: 0 },
            },
            _ => match text::parse(buf, pconfig) {
                Parse::Done { request, consumed } => {
                    let outcome = dispatch::execute(ctx, request, &mut self.out, self.resume.take());
                    Step::Done { outcome, consumed }
                }
                Parse::Incomplete { need } => Step::Incomplete { need },
                Parse::Close => Step::Close,
            },
        }
    }

    fn state(&self) -> ConnState {
        if self.swallow > 0 {
            ConnState::Swallow
        } else if self.rpos < self.filled {
            ConnState::Nread
        } else {
            ConnState::ParseCmd
        }
    }
}
