//! A connection's replies, in request order, through reply slots.
//!
//! Most replies are complete when their request has run, and go straight
//! into one contiguous buffer (`ready`) — the fast path costs a branch. A
//! reply that must wait (a value being read from flash) takes a [`Slot`]:
//! replies produced after it queue behind it, and nothing behind a waiting
//! slot leaves before the slot is filled, so clients see replies in the
//! order they sent requests while the connection goes on parsing and
//! answering. Filling the first waiting slot moves it, and every complete
//! reply behind it up to the next waiting slot, into `ready`.
//!
//! ```text
//!   ready (sendable)      behind: [Waiting #7][Ready: "VALUE b..END"][Waiting #9][Ready ...]
//!   ──────────────►       fill(#7) ─► its bytes and "VALUE b..END" join `ready`
//! ```
//!
//! io_uring sends from a second buffer (`inflight`) that a send in flight
//! owns: new replies go to `ready` meanwhile, so the bytes the kernel reads
//! never move. Both are borrowed from the worker's pool when a reply is
//! written and given back once sent (`bufpool.rs`): an idle connection
//! holds neither. Every byte not yet sent counts toward back-pressure
//! ([`Replies::pending`]), waiting slots' queued replies included.

use std::collections::VecDeque;
use std::io;

use crate::network::transport::Transport;

/// A reply waiting for its bytes; [`Replies::fill`] completes it.
///
/// With `--durability always`, a change's reply waits in one until the
/// change is on disk (`Conn::hold_for_durability`). Reads from flash park
/// their connection instead (`conn/`, `Phase::Parked`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Slot(u64);

#[derive(Debug)]
enum Part {
    Waiting(u64),
    Ready(Vec<u8>),
}

#[derive(Debug, Default)]
pub(crate) struct Replies {
    /// Complete and in order, ahead of every waiting slot: `ready[rpos..]`
    /// is unsent.
    ready: Vec<u8>,
    rpos: usize,
    /// io_uring: what a send in flight owns, `inflight[ipos..]` unsent.
    inflight: Vec<u8>,
    ipos: usize,
    /// From the first waiting slot on, in request order.
    behind: VecDeque<Part>,
    /// Bytes queued in `behind`.
    behind_bytes: usize,
    waiting: usize,
    next_slot: u64,
}

impl Replies {
    /// Where the next reply's bytes go: the sendable buffer, or, behind a
    /// waiting slot, the queue after it.
    pub fn buf(&mut self) -> &mut Vec<u8> {
        if self.behind.is_empty() {
            if self.ready.capacity() == 0 {
                self.ready = crate::network::bufpool::take_write();
            }
            return &mut self.ready;
        }
        if !matches!(self.behind.back(), Some(Part::Ready(_))) {
            self.behind.push_back(Part::Ready(Vec::new()));
        }
        match self.behind.back_mut() {
            Some(Part::Ready(b)) => b,
            // Pushed just above.
            _ => &mut self.ready,
        }
    }

    /// Opens a waiting slot here: replies written after it queue behind it.
    pub fn wait(&mut self) -> Slot {
        self.settle_behind();
        let id = self.next_slot;
        self.next_slot += 1;
        self.behind.push_back(Part::Waiting(id));
        self.waiting += 1;
        Slot(id)
    }

    /// Where the next reply starts, for [`Replies::defer_from`]: `None`
    /// while replies already queue behind a waiting slot.
    pub fn mark(&self) -> Option<usize> {
        self.behind.is_empty().then_some(self.ready.len())
    }

    /// Opens a waiting slot at `mark` (from [`Replies::mark`], with
    /// nothing sent or queued since but replies written at its end): the
    /// replies written since move behind it, and leave when it is filled.
    pub fn defer_from(&mut self, mark: usize) -> Slot {
        let tail = self.ready.split_off(mark.clamp(self.rpos, self.ready.len()));
        let slot = self.wait();
        if !tail.is_empty() {
            self.behind.push_back(Part::Ready(tail));
            self.settle_behind();
        }
        slot
    }

    /// Completes `slot` with `bytes`; replies queued behind it leave once
    /// no earlier slot still waits. False if the slot is not waiting here.
    pub fn fill(&mut self, slot: Slot, bytes: &[u8]) -> bool {
        self.settle_behind();
        let Some(part) = self.behind.iter_mut().find(|p| matches!(p, Part::Waiting(id) if *id == slot.0)) else {
            return false;
        };
        *part = Part::Ready(bytes.to_vec());
        self.waiting -= 1;
        self.behind_bytes += bytes.len();
        while let Some(Part::Ready(_)) = self.behind.front() {
            if let Some(Part::Ready(b)) = self.behind.pop_front() {
                self.behind_bytes -= b.len();
                if self.rpos == self.ready.len() && self.ready.capacity() <= b.capacity() {
                    // Nothing unsent ahead: take the buffer instead of copying it.
                    self.ready = b;
                    self.rpos = 0;
                } else {
                    self.ready.extend_from_slice(&b);
                }
            }
        }
        true
    }

    /// Counts what `buf` handed out since the last look (bytes written
    /// into the queue behind a waiting slot).
    fn settle_behind(&mut self) {
        self.behind_bytes = self.behind.iter().map(|p| if let Part::Ready(b) = p { b.len() } else { 0 }).sum();
    }

    /// Gives the buffers back to the pool if nothing in them is left to
    /// send (a request with no reply took one): an idle connection holds
    /// none. A send in flight owns a non-empty `inflight`, never touched here.
    pub fn release_idle(&mut self) {
        if self.behind.is_empty() && self.rpos == self.ready.len() && self.ready.capacity() != 0 {
            self.rpos = 0;
            crate::network::bufpool::give_write(std::mem::take(&mut self.ready));
        }
        if self.inflight.is_empty() && self.inflight.capacity() != 0 {
            crate::network::bufpool::give_write(std::mem::take(&mut self.inflight));
        }
    }

    /// Slots still waiting.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Bytes not yet sent: ready, in flight, and queued behind waiting slots.
    pub fn pending(&mut self) -> usize {
        if !self.behind.is_empty() {
            self.settle_behind();
        }
        self.ready.len() - self.rpos + self.inflight.len() - self.ipos + self.behind_bytes
    }

    /// Replies not yet handed to the socket: ready but unwritten, queued
    /// behind a waiting slot, or waiting (memcached's response stack, which
    /// a key dump or `watch` may not follow). A send io_uring has in
    /// flight is handed over: the client may have read it already, and
    /// its completion may come after the client's next request.
    pub fn unsent(&self) -> bool {
        self.ready.len() > self.rpos || self.behind_bytes > 0 || self.waiting > 0
    }

    /// Nothing left to send and nothing waiting.
    pub fn is_empty(&mut self) -> bool {
        self.pending() == 0 && self.waiting == 0
    }

    /// Writes what is sendable through `t` until it is all out or `t`
    /// takes no more; returns the bytes written.
    pub fn flush(&mut self, t: &mut impl Transport) -> io::Result<u64> {
        let mut written = 0;
        loop {
            self.stage();
            if self.ipos == self.inflight.len() {
                return Ok(written);
            }
            match t.write(&self.inflight[self.ipos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent(n);
                    written += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(written),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// io_uring: the bytes the next send should write, moving sendable
    /// replies into the send buffer when it is empty. The slice stays
    /// valid and unmoved until [`Replies::sent`], as only that changes it.
    pub fn next_send(&mut self) -> Option<&[u8]> {
        self.stage();
        (self.ipos < self.inflight.len()).then(|| &self.inflight[self.ipos..])
    }

    fn stage(&mut self) {
        if self.ipos == self.inflight.len() && self.rpos < self.ready.len() {
            self.inflight.clear();
            std::mem::swap(&mut self.inflight, &mut self.ready);
            self.ipos = std::mem::take(&mut self.rpos);
        }
    }

    /// A send wrote `n` bytes of [`Replies::next_send`]'s slice.
    pub fn sent(&mut self, n: usize) {
        self.ipos = (self.ipos + n).min(self.inflight.len());
        if self.ipos == self.inflight.len() {
            // All sent: the buffers go back to the pool (one that grew for
            // a large reply is freed).
            self.ipos = 0;
            crate::network::bufpool::give_write(std::mem::take(&mut self.inflight));
            if self.rpos == self.ready.len() && self.ready.capacity() != 0 {
                self.rpos = 0;
                crate::network::bufpool::give_write(std::mem::take(&mut self.ready));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes at most `chunk` bytes a write.
    struct Sink {
        got: Vec<u8>,
        chunk: usize,
    }

    impl Transport for Sink {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.chunk);
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }
    }

    #[test]
    fn replies_leave_in_request_order_around_waiting_slots() {
        let mut r = Replies::default();
        let mut sink = Sink { got: Vec::new(), chunk: 5 };
        r.buf().extend_from_slice(b"A;");
        let b = r.wait();
        r.buf().extend_from_slice(b"C;");
        let d = r.wait();
        r.buf().extend_from_slice(b"E;");
        assert_eq!((r.waiting(), r.pending()), (2, 6));
        assert_eq!(r.flush(&mut sink).ok(), Some(2));
        assert_eq!(sink.got, b"A;", "nothing behind a waiting slot leaves");
        assert!(r.fill(d, b"D;"));
        assert_eq!(r.flush(&mut sink).ok(), Some(0), "B still waits");
        assert!(r.fill(b, b"B;"));
        assert!(!r.fill(Slot(99), b"?"), "unknown slot");
        r.buf().extend_from_slice(b"F;");
        r.flush(&mut sink).ok();
        assert_eq!(sink.got, b"A;B;C;D;E;F;");
        assert!(r.is_empty());
    }

    #[test]
    fn a_send_in_flight_owns_its_bytes() {
        let mut r = Replies::default();
        assert!(!r.unsent());
        r.buf().extend_from_slice(b"first");
        assert!(r.unsent(), "a reply not yet handed to the socket");
        let ptr = r.next_send().map(<[u8]>::as_ptr);
        assert!(!r.unsent(), "a send in flight is handed over");
        r.buf().extend_from_slice(b"second");
        assert_eq!(r.next_send(), Some(&b"first"[..]), "new replies wait their turn");
        assert_eq!(r.next_send().map(<[u8]>::as_ptr), ptr, "and never move the bytes in flight");
        r.sent(2);
        assert_eq!(r.next_send(), Some(&b"rst"[..]));
        assert_eq!(r.pending(), 9);
        r.sent(3);
        assert_eq!(r.next_send(), Some(&b"second"[..]));
        r.sent(6);
        assert!(r.is_empty());
    }

    #[test]
    fn waiting_replies_count_toward_back_pressure() {
        let mut r = Replies::default();
        let s = r.wait();
        assert!(r.unsent(), "a waiting slot");
        r.buf().extend_from_slice(&[b'x'; 100]);
        assert_eq!(r.pending(), 100);
        assert!(!r.is_empty());
        assert!(r.fill(s, b"yy"));
        assert_eq!(r.pending(), 102);
        assert_eq!(r.next_send().map(<[u8]>::len), Some(102));
    }

    #[test]
    fn a_deferred_reply_and_everything_after_it_wait_for_the_fill() {
        let mut r = Replies::default();
        let mut sink = Sink { got: Vec::new(), chunk: 64 };
        r.buf().extend_from_slice(b"GET;");
        let mark = r.mark().unwrap_or_else(|| panic!("nothing waits yet"));
        r.buf().extend_from_slice(b"STORED;");
        let slot = r.defer_from(mark);
        assert_eq!(r.mark(), None, "later replies queue behind the slot");
        r.buf().extend_from_slice(b"VALUE;");
        assert_eq!((r.waiting(), r.pending()), (1, 17));
        assert_eq!(r.flush(&mut sink).ok(), Some(4));
        assert_eq!(sink.got, b"GET;", "the reply before the mark is not held");
        assert!(r.fill(slot, b""));
        assert_eq!(r.flush(&mut sink).ok(), Some(13));
        assert_eq!(sink.got, b"GET;STORED;VALUE;");
        assert!(r.is_empty());
    }
}
