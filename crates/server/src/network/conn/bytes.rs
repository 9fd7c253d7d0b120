//! A connection's bytes in and out: sends of its replies (io_uring's and
//! epoll's), receives into the read buffer, making room in it, and the
//! reply limit's back-pressure.

use super::*;

impl Conn {
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
    ///
    /// While a request is incomplete its whole length, as the parser gave
    /// it (`Phase::Waiting`), is room made at once: a 500 KB value arrives
    /// in many receives, and growing the buffer by each one copied and
    /// zeroed it again every time (a tenth of the server's CPU per set on
    /// scenario 11).
    pub fn receive(&mut self, t: &mut impl Transport) {
        // No other receive is in flight while the buffer is lent (uring/):
        // bytes arriving now would have nowhere to go.
        debug_assert!(!self.lent, "a receive while the buffer is lent");
        let need = match self.phase {
            Phase::Waiting { need } => need,
            _ => 0,
        };
        // Until what arrived is all taken: asking for room for one more
        // byte after it grew a buffer that the last bytes filled exactly
        // (a whole large value: 600 KB copied for nothing).
        while !t.exhausted() {
            let want = (self.filled - self.rpos + t.available().max(1)).max(need);
            if !self.make_room(want, usize::MAX) {
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

    /// io_uring: whether the incomplete request buffered needs at least
    /// `min` more bytes, enough to receive them in place ([`Conn::lend_rest`])
    /// rather than through the ring's small buffers.
    pub fn wants_rest(&self, min: usize) -> bool {
        match self.phase {
            Phase::Waiting { need } => !self.lent && need >= self.filled - self.rpos + min,
            _ => false,
        }
    }

    /// io_uring: lends the room for the rest of the incomplete request (at
    /// least `min` bytes, [`Conn::wants_rest`]) to one receive, which writes
    /// it at `filled` in place: the value arrives in one completion and one
    /// copy, where the ring's 8 KiB buffers took one completion each and a
    /// second copy. The pointer and length are for that receive only; until
    /// [`Conn::returned`] the buffer is not touched past `filled`.
    pub fn lend_rest(&mut self, min: usize) -> Option<(*mut u8, u32)> {
        let Phase::Waiting { need } = self.phase else { return None };
        if !self.wants_rest(min) || !self.make_room(need, usize::MAX) {
            return None;
        }
        let rest = u32::try_from(need - (self.filled - self.rpos)).ok()?;
        // make_room left `need` unparsed bytes room from `rpos`, so the
        // rest fits from `filled`.
        let spare = self.rbuf.get_mut(self.filled..self.filled + rest as usize)?;
        let ptr = spare.as_mut_ptr();
        self.lent = true;
        Some((ptr, rest))
    }

    /// io_uring: whether the buffer is lent to a receive.
    pub fn lent(&self) -> bool {
        self.lent
    }

    /// io_uring: the lent receive came back having written `n` bytes at
    /// `filled` (0: none, it failed or was cancelled).
    pub fn returned(&mut self, n: usize) {
        debug_assert!(self.lent, "returned without a lend");
        self.lent = false;
        let n = n.min(self.rbuf.len() - self.filled);
        if n > 0 {
            self.arrived(n);
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
    pub(super) fn held_back(&mut self, max_output: usize) -> bool {
        let pending = self.replies.pending();
        pending >= max_output || self.info.replies.holds_back(pending)
    }

    /// Writes as much of the replies as `t` takes.
    pub(super) fn flush(&mut self, t: &mut impl Transport) -> io::Result<()> {
        self.bytes_written += self.replies.flush(t)?;
        Ok(())
    }

    /// Room to read into, so that `want` unparsed bytes fit (0: any room).
    /// Compacts first; grows (up to `limit`) only when one incomplete request
    /// needs more room than the buffer has — a buffer full of complete
    /// requests is served, not grown, which keeps pipelining clients at the
    /// initial buffer size.
    fn make_room(&mut self, want: usize, limit: usize) -> bool {
        if self.lent {
            // The kernel may be writing past `filled`: no room, no move.
            return false;
        }
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
            if let Some(mut large) = crate::network::bufpool::take_large(target) {
                large[..self.filled].copy_from_slice(&self.rbuf[..self.filled]);
                crate::network::bufpool::give_read(std::mem::replace(&mut self.rbuf, large));
            } else {
                self.rbuf.resize(target, 0);
            }
        }
        self.filled < self.rbuf.len()
    }

    /// Reads until `t` is empty (a short read or `WouldBlock`) or the
    /// buffer is at its limit. Returns whether `t` was drained (false: more
    /// may be waiting).
    pub(super) fn fill(&mut self, t: &mut impl Transport, want: usize, limit: usize) -> io::Result<bool> {
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
}
