//! The state machine's passes: a readiness event served (epoll), a pass
//! over what arrived (io_uring), running the requests buffered, parking on
//! a flash read, settling once replies drain, and one request's step.

use super::*;

impl Conn {
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
                crate::observability::inc(&ctx.stats.conn_yields);
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
    pub(super) fn state(&self) -> ConnState {
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
        if self.rpos == self.filled && !self.rbuf.is_empty() && !self.lent {
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
