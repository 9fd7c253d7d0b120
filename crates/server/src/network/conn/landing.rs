//! A large value received straight into the segment it will be stored in
//! (the store's landings, `strata_store::Landing`): for a `set`, `add`,
//! `replace` or `cas` whose value's rest is [`LAND_MIN`] bytes or more
//! when its line is read, the value's bytes already buffered move into a
//! landing, the receives that follow write the rest there (io_uring: one
//! `MSG_WAITALL` receive lent the landing's room; epoll: reads into it),
//! and the `\r\n` after it arrives in the read buffer behind the line.
//! The request then runs with the landing on offer to the store, which
//! links the item where it landed: the value is never copied in user
//! space, as memcached reads a large value into its item.
//!
//! Anything else (a client that goes away, a bad data chunk, `NOT_STORED`)
//! drops the landing, which frees its segment; a request that waits (a
//! flash read) keeps it and runs again.

use strata_protocol::text::{self, Parse};
use strata_store::Landing;

use super::*;

/// A value whose rest is at least this long when its line is read lands;
/// smaller ones are received into the read buffer and copied (as long as
/// io_uring's direct receive of the rest into the read buffer).
pub(crate) const LAND_MIN: usize = 128 << 10;

/// Bytes of one request buffered before a turn's receives look at it as a
/// value that could land ([`Conn::land_early`]): more than a receive
/// buffer, so that small requests are never looked at twice.
const PROBE_AT: usize = 16 << 10;

/// A connection's landing and how much of its value has arrived.
pub(super) struct Landed {
    landing: Landing,
    got: usize,
    /// io_uring: the rest of the value is lent to a receive.
    lent: bool,
}

impl Landed {
    fn complete(&self) -> bool {
        self.got == self.landing.value_len()
    }
}

impl Conn {
    /// Starts a landing for the storage request at the front if its value
    /// has at least `min` bytes left to come (module doc); true if one is
    /// under way. The request's line stays in the buffer.
    pub(super) fn land(&mut self, ctx: &mut dispatch::Ctx<'_>, min: usize) -> bool {
        self.try_land(ctx, min) == Some(true)
    }

    /// [`Conn::land`]; `None` when the request could land but no segment
    /// is at hand now (it may be later: the store never waits for one on
    /// the event loop).
    fn try_land(&mut self, ctx: &mut dispatch::Ctx<'_>, min: usize) -> Option<bool> {
        if self.landing.is_some() {
            return Some(true);
        }
        if self.lent || self.proto != Proto::Text {
            return Some(false);
        }
        if ctx.shared.cfg.auth_file.is_some() && !self.auth.authenticated {
            return Some(false);
        }
        let buf = &self.rbuf[self.rpos..self.filled];
        let Some(h) = text::storage_line(buf, &ctx.parse_config()) else { return Some(false) };
        let have = buf.len() - h.line_len;
        if have + min > h.vlen {
            return Some(false);
        }
        let expiry = ctx.expiry(h.exptime);
        let mut landing = ctx.store.land(h.key, h.flags, expiry, h.vlen)?;
        landing.fill(0, &buf[h.line_len..]);
        self.filled = self.rpos + h.line_len;
        self.landing = Some(Landed { landing, got: have, lent: false });
        Some(true)
    }

    /// io_uring, as a turn's receives come in (before the connection is
    /// served): once a request's first [`PROBE_AT`] bytes are in, starts a
    /// landing if it is a large value's (looked at once per request, or
    /// until a segment is at hand), so that the
    /// rest of the turn's bytes go into it rather than through the read
    /// buffer.
    pub fn land_early(&mut self, ctx: &mut dispatch::Ctx<'_>) {
        if self.landing.is_some() || self.filled - self.rpos < PROBE_AT || self.probed == Some(self.rpos) {
            return;
        }
        // Looked at again with the next bytes only while it could land
        // but found no segment at hand.
        if self.try_land(ctx, LAND_MIN).is_some() {
            self.probed = Some(self.rpos);
        }
    }

    /// Whether a landing waits for more of its value.
    pub(super) fn landing_incomplete(&self) -> bool {
        self.landing.as_ref().is_some_and(|l| !l.complete())
    }

    /// io_uring: lends the room for the rest of the value to one receive,
    /// starting a landing for the request at the front if there is none
    /// ([`Conn::land`]); `None` if there is nothing to land. The room is
    /// not touched until [`Conn::returned`].
    pub fn lend_landing(&mut self, ctx: &mut dispatch::Ctx<'_>, min: usize) -> Option<(*mut u8, u32)> {
        if !self.landing_incomplete() && !self.land(ctx, min) {
            return None;
        }
        let l = self.landing.as_mut().filter(|l| !l.lent && !l.complete())?;
        let rest = u32::try_from(l.landing.value_len() - l.got).ok()?;
        let ptr = l.landing.value_ptr().wrapping_add(l.got);
        l.lent = true;
        Some((ptr, rest))
    }

    /// io_uring: a receive lent the landing's room came back, having
    /// written `n` bytes; false if the landing was not lent.
    pub(super) fn landing_returned(&mut self, n: usize) -> bool {
        let Some(l) = self.landing.as_mut().filter(|l| l.lent) else { return false };
        l.lent = false;
        let n = n.min(l.landing.value_len() - l.got);
        l.got += n;
        self.landed(n);
        true
    }

    /// Whether a receive is lent the landing's room.
    pub(super) fn landing_lent(&self) -> bool {
        self.landing.as_ref().is_some_and(|l| l.lent)
    }

    /// epoll: reads the value into the landing until it is all in or `t`
    /// is empty. Returns whether `t` was drained (as [`Conn::fill`]).
    pub(super) fn fill_landing(&mut self, t: &mut impl Transport) -> io::Result<bool> {
        loop {
            let Some(l) = self.landing.as_mut().filter(|l| !l.complete()) else { return Ok(false) };
            let got = l.got;
            // Bytes already in memory (a receive buffer) go in past the
            // caches: the segment is cold, and a 500 KB value arrives
            // mostly so on loopback.
            if let Some(bytes) = t.buffered() {
                let n = bytes.len().min(l.landing.value_len() - got);
                l.landing.fill(got, &bytes[..n]);
                t.consume(n);
                l.got += n;
                self.landed(n);
                continue;
            }
            match t.read(&mut l.landing.value_mut()[got..]) {
                Ok(0) => {
                    self.ended();
                    return Ok(true);
                }
                Ok(n) => {
                    l.got += n;
                    self.landed(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// `n` bytes of the value arrived in the landing.
    fn landed(&mut self, n: usize) {
        self.bytes_read += n as u64;
        if let Phase::Waiting { .. } = self.phase {
            self.phase = Phase::Ready;
        }
    }

    /// Runs the landed request at the front once its value and the `\r\n`
    /// after it are in (`step`'s part for a landing).
    pub(super) fn step_landed(
        &mut self,
        ctx: &mut dispatch::Ctx<'_>,
        pconfig: &text::Config,
        resume: Option<usize>,
    ) -> Step {
        let Some(l) = self.landing.as_ref() else { return Step::Incomplete { need: 0 } };
        if !l.complete() {
            return Step::Incomplete { need: 0 };
        }
        // SAFETY: the value is used by this request only, which runs with
        // the landing on offer and drops it (or the store adopts it) after.
        let value = unsafe { l.landing.value_detached() };
        let buf = &self.rbuf[self.rpos..self.filled];
        match text::parse_landed(buf, value, pconfig) {
            Parse::Incomplete { need } => Step::Incomplete { need },
            Parse::Close => Step::Close,
            Parse::Done { request, consumed } => {
                let verbose = crate::observability::verbose::on(ctx.shared);
                let fd = self.info.fd;
                if verbose && !self.logged {
                    self.logged = crate::observability::verbose::command(fd, buf);
                }
                let vlen = value.len();
                ctx.store.offer_landing(self.landing.take().map(|l| l.landing));
                let out = self.replies.buf();
                let before = out.len();
                let outcome = dispatch::execute(ctx, request, out, resume);
                if verbose {
                    let kind = crate::observability::verbose::Kind::of(buf);
                    crate::observability::verbose::replies(fd, kind, &out[before..]);
                }
                let back = ctx.store.take_landing();
                // A request that waits runs again with its value; any other
                // outcome lets an unadopted landing go (its segment freed).
                if matches!(outcome, Outcome::Wait { .. }) {
                    self.landing = back.map(|landing| Landed { landing, got: vlen, lent: false });
                }
                Step::Done { outcome, consumed }
            }
        }
    }
}
