//! A worker thread on io_uring: the same connections, state machine,
//! dispatch and scheduler (`sched.rs`) as the epoll loop in `epoll.rs`,
//! with the socket I/O moved into one ring per worker (`-o io=uring`;
//! `auto` picks it where the kernel offers it). This module is the ring's
//! mechanics only: submissions, completions, buffers, TLS records.
//!
//! Why: the epoll loop pays a `recvfrom`, a `sendto` and a share of
//! `epoll_wait` for every request. Here each connection keeps one multishot
//! receive armed (it stays on the socket and completes once per arrival,
//! into a buffer of the worker's [`BufRing`]), and each loop turn queues
//! every connection's send and makes one `io_uring_enter` that submits them
//! all and waits for the next completions. The TCP work inside the kernel is
//! the same; what goes is the per-request system calls and readiness
//! bookkeeping (`docs/benchmarks.md` has the figures).
//!
//! Buffer rule every `push` below relies on: a send reads the connection's
//! send buffer ([`Conn::next_send`]), which is not touched until its
//! completion; received bytes land in the ring's buffers, which the worker
//! copies out and hands back at once, or, for the rest of a large request
//! ([`Recv::Direct`]), in the connection's read buffer past its filled
//! part, lent to that one receive ([`Conn::lend_rest`]): not moved, grown,
//! given back or touched there until its completion. A closing connection
//! cancels what it has in flight and is dropped only once both completions
//! are back (an unclean stop leaks it instead, `Drop`).
//!
//! The ring is `SINGLE_ISSUER | DEFER_TASKRUN`: the kernel runs completion
//! work only when this thread asks for completions, so arrivals that land
//! while a turn is being served are collected in one batch.

use std::io;
use std::mem::ManuallyDrop;
use std::sync::{mpsc, Arc};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::config::IoBackend;
use crate::execution::dispatch::Ctx;
use crate::network::bufring::BufRing;
use crate::network::conn::{Advance, Conn, Effects};
use crate::network::listen::Stream;
use crate::network::sched::{close, contain, NewConn, Sched, Slots, Wake};
use crate::observability::counters::WorkerStats;
use crate::Shared;
use strata_store::Hint;

mod complete;

/// Submission queue entries per ring; a turn with more to queue submits
/// early (the completion queue is sized for every connection).
const RING_ENTRIES: u32 = 1024;

/// Receive buffer size; how many a worker has is `-o io_buffers=` (64 by
/// default: 512 KiB). A turn hands every buffer back before the next wait,
/// so they only need to cover the arrivals of one turn; when they run dry a
/// receive ends with `ENOBUFS` and is re-armed, its bytes still waiting in
/// the socket.
const RECV_BUFFER_SIZE: usize = 8 << 10;
const BUFFER_GROUP: u16 = 0;

/// What a completion's `user_data` names: the operation in the low bits,
/// the connection's slot above them.
const OP_RECV: u64 = 0;
const OP_SEND: u64 = 1;
const OP_WAKE: u64 = 2;
const OP_CANCEL: u64 = 3;
const OP_BITS: u32 = 2;

/// A completion as the loop keeps it: user data, result, flags.
type Cqe = (u64, i32, u32);

fn user_data(slot: usize, op: u64) -> u64 {
    ((slot as u64) << OP_BITS) | op
}

/// Builds the ring a worker runs on (disabled until its thread enables it);
/// an error means io_uring is missing or refused here (old kernel, seccomp,
/// `kernel.io_uring_disabled`) and the caller falls back to epoll.
pub(crate) fn ring(max_conns: usize) -> io::Result<IoUring> {
    let cq = u32::try_from(max_conns).unwrap_or(u32::MAX).saturating_mul(2).clamp(2 * RING_ENTRIES, 1 << 16);
    // With SINGLE_ISSUER the thread that enables the ring, not this one,
    // becomes its only submitter.
    IoUring::builder()
        .setup_r_disabled()
        .setup_single_issuer()
        .setup_defer_taskrun()
        // Lets a non-waiting enter (a turn with work left) see that
        // completion work is pending and run it, so connections with work
        // left cannot starve the others' arrivals.
        .setup_taskrun_flag()
        .setup_cqsize(cq)
        .setup_clamp()
        .build(RING_ENTRIES)
}

/// Where a connection's slot is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Open,
    /// TLS: the connection is done, but records (its last replies, the
    /// close_notify) are still to be sent; it closes once they are.
    Lingering,
    /// Its operations are being cancelled; dropped once none is left.
    Closing,
}

/// The connection's receive: the multishot one into the ring's buffers,
/// or one into its own read buffer for the rest of a large request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recv {
    /// None armed: its last completion came back (or none was armed yet).
    Idle,
    Armed,
    /// A single receive into the connection's read buffer, lent to it
    /// (`Conn::lend_rest`) until its completion comes back.
    Direct,
    /// Armed (either kind), and its cancellation asked for; `Idle` once it
    /// comes back.
    Cancelling,
}

/// The rest of a request at least this large is received into the
/// connection's read buffer in one receive ([`Recv::Direct`]).
const DIRECT_MIN: usize = 128 << 10;

struct Slot {
    id: u64,
    conn: Conn,
    /// The socket: the ring's receives and sends name its descriptor, and
    /// a turn that sends at once writes through it.
    stream: Stream,
    recv: Recv,
    /// A send is in flight (it owns the buffer it sends from).
    send: bool,
    life: Life,
    /// Its TLS state, from a TLS listener: the ring moves ciphertext.
    tls: Option<Box<crate::network::tls_io::RingTls>>,
}

/// What a completion came to, for the turn.
enum Completed {
    /// The wake-up read: new connections may be waiting.
    Wake,
    /// Slot `i` is to be served this turn.
    Serve(usize),
    Nothing,
}

struct Loop<'a> {
    shared: &'a Shared,
    ring: IoUring,
    /// Freed only once no receive can write to it (see `Drop`).
    bufs: ManuallyDrop<BufRing>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Completions reaped early to make room for submissions.
    backlog: Vec<Cqe>,
    /// The eventfd read lands here; boxed so the address stays put.
    wake_buf: ManuallyDrop<Box<u64>>,
    wake_armed: bool,
    /// Every operation came back and the buffer group is unregistered.
    clean: bool,
}

impl Drop for Loop<'_> {
    /// After a clean shutdown frees the receive buffers; otherwise (a panic
    /// on this thread, or operations that never came back) leaks what the
    /// kernel may still write to — receive buffers, connections' send
    /// buffers, the wake-up word — rather than free it under it. The ring
    /// itself is closed after this, when its field drops.
    fn drop(&mut self) {
        if self.clean {
            // SAFETY: every receive has completed and the buffer group is
            // unregistered, so nothing can reach these buffers any more.
            unsafe { ManuallyDrop::drop(&mut self.bufs) };
        } else {
            for s in self.slots.drain(..).flatten() {
                std::mem::forget(s);
            }
        }
        if !self.wake_armed {
            // SAFETY: no read of the eventfd is in flight.
            unsafe { ManuallyDrop::drop(&mut self.wake_buf) };
        }
    }
}

pub(crate) fn run(
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    ring: IoUring,
    wake: Arc<Wake>,
    rx: mpsc::Receiver<NewConn>,
) {
    let bufs = ring
        .submitter()
        .register_enable_rings()
        .and_then(|_| BufRing::new(&ring.submitter(), shared.cfg.io_buffers, RECV_BUFFER_SIZE, BUFFER_GROUP));
    let bufs = match bufs {
        Ok(b) => b,
        Err(e) if shared.cfg.io == IoBackend::Uring => {
            tracing::error!(error = %e, "io_uring refused by this thread (-o io=uring)");
            stop_server(&shared);
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "io_uring refused by this thread, using epoll");
            match crate::network::epoll::poll_for(&wake) {
                Ok(poll) => return crate::network::epoll::run(shared, stats, poll, wake, rx),
                Err(e) => {
                    tracing::error!(error = %e, "worker cannot create an event loop");
                    stop_server(&shared);
                    return;
                }
            }
        }
    };
    let mut store = shared.store.worker();
    let mut sched = Sched::new(shared.clone(), stats.clone(), wake.clone(), &mut store);
    let mut lp = Loop {
        shared: &shared,
        ring,
        bufs: ManuallyDrop::new(bufs),
        slots: Vec::new(),
        free: Vec::new(),
        backlog: Vec::new(),
        wake_buf: ManuallyDrop::new(Box::new(0u64)),
        wake_armed: false,
        clean: false,
    };
    let mut cqes: Vec<Cqe> = Vec::new();

    while !shared.run.stopping() {
        if !lp.wake_armed {
            let buf: *mut u64 = &mut **lp.wake_buf;
            let sqe = opcode::Read::new(types::Fd(wake.fd()), buf.cast(), 8).build().user_data(OP_WAKE);
            // `wake_buf` stays put until the read completes (see `Drop`).
            if !lp.push(&sqe) {
                break;
            }
            lp.wake_armed = true;
        }
        match lp.ring.submit_and_wait(if sched.work_left() { 0 } else { 1 }) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // EBUSY: completions must be reaped before more can be
            // submitted; EAGAIN, ENOMEM: out of kernel memory for now.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN | libc::ENOMEM)) => {}
            Err(e) => {
                tracing::error!(error = %e, "worker io_uring_enter failed");
                break;
            }
        }
        sched.begin(&mut store, &mut lp);
        cqes.clear();
        cqes.append(&mut lp.backlog);
        lp.reap_completions(&mut cqes);
        for &cqe in &cqes {
            match lp.complete(cqe) {
                Completed::Wake => {
                    while let Ok(nc) = rx.try_recv() {
                        sched.adopt(lp.adopt(nc));
                    }
                }
                Completed::Serve(i) => sched.mark(i),
                Completed::Nothing => {}
            }
        }
        sched.sweep(&mut store, &mut lp);
        let mut ctx = Ctx::for_loop(&shared, &mut store, &stats);
        let ready = sched.take_ready();
        lp.read_ahead(&ready, &ctx);
        for &i in &ready {
            let alone = ready.len() == 1;
            match contain(&stats, || lp.serve(i, &mut ctx, alone)) {
                Some(Some(effects)) => sched.served(i, effects),
                Some(None) => {}
                None => lp.close(i),
            }
        }
        sched.end(ready, &mut lp);
    }
    lp.shutdown();
}

/// A worker that cannot serve stops the server rather than leave the
/// connections handed to it unanswered.
fn stop_server(shared: &Shared) {
    shared.run.stop();
    let _ = shared.acceptor.wake();
}

/// Keys read ahead per turn, across its connections.
const TURN_READ_AHEAD: usize = 32;

impl Loop<'_> {
    /// Starts loading the index buckets, then the items, of the requests at
    /// the front of every connection this turn will serve, so that their
    /// cache misses overlap. A connection's own read-ahead covers only its
    /// own pipeline; with one request in flight per connection (most
    /// clients) that is one key, which nothing overlaps with, but a turn
    /// serves several connections and all their bytes are in by now.
    fn read_ahead(&mut self, ready: &[usize], ctx: &Ctx<'_>) {
        if ready.len() < 2 {
            return;
        }
        let mut hints = [Hint::default(); TURN_READ_AHEAD];
        let mut n = 0;
        for &i in ready {
            let Some(Some(s)) = self.slots.get_mut(i) else { continue };
            if s.life == Life::Closing {
                continue;
            }
            s.conn.look_ahead(TURN_READ_AHEAD - n, |key| {
                hints[n] = ctx.store.prefetch_bucket(key);
                n += 1;
            });
            if n == TURN_READ_AHEAD {
                break;
            }
        }
        if n > 1 {
            ctx.store.prefetch_items(&hints[..n]);
        }
    }

    /// Queues one entry, submitting first when the queue is full (and
    /// reaping completions into the backlog when the kernel wants room for
    /// them). False if the ring keeps refusing: the worker then stops.
    fn push(&mut self, sqe: &squeue::Entry) -> bool {
        for _ in 0..64 {
            // SAFETY: every entry queued here points into memory that stays
            // in place until its completion (module docs, buffer rule).
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return true;
            }
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if !matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN | libc::ENOMEM)) {
                        tracing::error!(error = %e, "worker io_uring submit failed");
                    }
                    let mut backlog = std::mem::take(&mut self.backlog);
                    self.reap_completions(&mut backlog);
                    self.backlog = backlog;
                }
            }
        }
        tracing::error!("worker io_uring submission queue stays full; stopping the server");
        stop_server(self.shared);
        false
    }

    /// Moves the completions the kernel has posted into `out`.
    fn reap_completions(&mut self, out: &mut Vec<Cqe>) {
        out.extend(self.ring.completion().map(|c: cqueue::Entry| (c.user_data(), c.result(), c.flags())));
    }

    /// Takes a new connection into a free slot; returns the slot.
    fn adopt(&mut self, nc: NewConn) -> usize {
        let i = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let conn = Conn::new(nc.info);
        let slot = Slot {
            id: nc.id,
            conn,
            stream: nc.stream,
            recv: Recv::Idle,
            send: false,
            life: Life::Open,
            tls: nc.tls.map(|t| Box::new(crate::network::tls_io::RingTls::new(t))),
        };
        self.slots[i] = Some(slot);
        i
    }

    /// Runs a connection's buffered requests and queues its I/O. Returns
    /// what the scheduler is to do for it (`more`: it has work left that
    /// needs no new input), unless it is closing. `alone`: it is the only
    /// connection this turn serves, so its replies go out with a plain
    /// `send` — one system call, where a ring send would cost a completion
    /// and a second `io_uring_enter` before the worker can sleep (measured:
    /// 13.7 against 14.3 µs/op at one connection). Several connections'
    /// replies are cheaper batched through the ring.
    fn serve(&mut self, i: usize, ctx: &mut Ctx<'_>, alone: bool) -> Option<Effects> {
        let Some(Some(s)) = self.slots.get_mut(i) else { return None };
        match s.life {
            Life::Closing => {
                // A send that was in flight when it started closing may
                // have delivered bytes since; count them before the slot goes.
                s.conn.report_traffic(ctx);
                self.reap(i);
                return None;
            }
            Life::Lingering => {
                self.linger(i);
                return None;
            }
            Life::Open => {}
        }
        let fd = s.stream.fd();
        let (mut effects, read, backlogged) = match s.conn.advance(ctx) {
            Advance::Open { effects, read, backlogged } => (effects, read, backlogged),
            Advance::Close if s.tls.is_some() => {
                s.life = Life::Lingering;
                if let Some(t) = &mut s.tls {
                    t.tls.send_close_notify();
                }
                self.linger(i);
                return None;
            }
            Advance::Close => {
                self.close(i);
                return None;
            }
        };
        let mut sqes: [Option<squeue::Entry>; 2] = [None, None];
        if let Some(t) = &mut s.tls {
            // TLS: what the connection queued is encrypted and the records
            // go through the ring (never `send_now`: the socket takes
            // ciphertext only).
            if let Some(buf) = t.outgoing(&mut s.conn, s.send) {
                let len = buf.len().min(u32::MAX as usize) as u32;
                let send = opcode::Send::new(types::Fd(fd), buf.as_ptr(), len);
                sqes[0] = Some(send.build().user_data(user_data(i, OP_SEND)));
                s.send = true;
            }
            s.conn.report_traffic(ctx);
            effects.more |= backlogged && s.conn.below_reply_limit(ctx);
        } else if alone && !s.send {
            if s.conn.send_now(&mut s.stream).is_err() {
                self.close(i);
                return None;
            }
            s.conn.report_traffic(ctx);
            // After end of input or `quit`, the last replies just left:
            // nothing else would come back to close it.
            if s.conn.done() {
                self.close(i);
                return None;
            }
            // Held back by its replies, which the socket just took: nothing
            // else would wake it (no send completion is coming).
            effects.more |= backlogged && s.conn.below_reply_limit(ctx);
        }
        if !s.send && s.tls.is_none() {
            if let Some(buf) = s.conn.next_send() {
                let len = buf.len().min(u32::MAX as usize) as u32;
                let send = opcode::Send::new(types::Fd(fd), buf.as_ptr(), len);
                sqes[0] = Some(send.build().user_data(user_data(i, OP_SEND)));
                s.send = true;
            }
        }
        let lend = read && s.tls.is_none();
        if read && s.recv == Recv::Idle {
            if let Some((ptr, len)) = lend.then(|| s.conn.lend_rest(DIRECT_MIN)).flatten() {
                // MSG_WAITALL: one completion when the whole rest is in.
                let recv = opcode::Recv::new(types::Fd(fd), ptr, len).flags(libc::MSG_WAITALL);
                sqes[1] = Some(recv.build().user_data(user_data(i, OP_RECV)));
                s.recv = Recv::Direct;
            } else {
                let recv = opcode::RecvMulti::new(types::Fd(fd), BUFFER_GROUP);
                sqes[1] = Some(recv.build().user_data(user_data(i, OP_RECV)));
                s.recv = Recv::Armed;
            }
        } else if lend && s.recv == Recv::Armed && s.conn.wants_rest(DIRECT_MIN) {
            // The rest of a large request: the multishot receive stops, and
            // once it is back (`Idle`, and served again) a direct one goes.
            sqes[1] = Some(opcode::AsyncCancel::new(user_data(i, OP_RECV)).build().user_data(OP_CANCEL));
            s.recv = Recv::Cancelling;
        } else if !read && s.recv == Recv::Armed && s.conn.pause_reading(ctx) {
            // Stop taking input until the buffered work is done, as the
            // epoll path stops reading; the socket's buffer then fills and
            // TCP holds the client back.
            sqes[1] = Some(opcode::AsyncCancel::new(user_data(i, OP_RECV)).build().user_data(OP_CANCEL));
            s.recv = Recv::Cancelling;
        }
        for sqe in sqes.iter().flatten() {
            self.push(sqe);
        }
        Some(effects)
    }

    /// A TLS connection that is done: sends what records are left, and
    /// closes once none is (a send's completion brings it back here).
    fn linger(&mut self, i: usize) {
        let Some(Some(s)) = self.slots.get_mut(i) else { return };
        let fd = s.stream.fd();
        let next = match &mut s.tls {
            Some(t) => t.outgoing(&mut s.conn, s.send).map(|buf| {
                let len = buf.len().min(u32::MAX as usize) as u32;
                opcode::Send::new(types::Fd(fd), buf.as_ptr(), len).build().user_data(user_data(i, OP_SEND))
            }),
            None => None,
        };
        match next {
            Some(sqe) => {
                s.send = true;
                self.push(&sqe);
            }
            None if !s.send => self.close(i),
            None => {}
        }
    }

    /// Starts closing slot `i`: cancels what it has in flight, or drops it
    /// now if nothing is.
    fn close(&mut self, i: usize) {
        let Some(Some(s)) = self.slots.get_mut(i) else { return };
        s.life = Life::Closing;
        let mut cancels: [Option<u64>; 2] = [None, None];
        if matches!(s.recv, Recv::Armed | Recv::Direct) {
            s.recv = Recv::Cancelling;
            cancels[0] = Some(user_data(i, OP_RECV));
        }
        if s.send {
            cancels[1] = Some(user_data(i, OP_SEND));
        }
        for ud in cancels.into_iter().flatten() {
            self.push(&opcode::AsyncCancel::new(ud).build().user_data(OP_CANCEL));
        }
        self.reap(i);
    }

    /// Drops a closing slot once nothing of it is in flight.
    fn reap(&mut self, i: usize) {
        let Some(Some(s)) = self.slots.get(i) else { return };
        if s.recv != Recv::Idle || s.send {
            return;
        }
        if let Some(s) = self.slots[i].take() {
            close(self.shared, s.id);
            drop(s);
            self.free.push(i);
        }
    }

    /// On shutdown: cancels everything in flight and waits (briefly) for it,
    /// so that no buffer is freed while the kernel may still write to it.
    /// Marks the loop clean when everything came back; otherwise `Drop`
    /// leaks what did not.
    fn shutdown(&mut self) {
        for i in 0..self.slots.len() {
            if let Some(Some(s)) = self.slots.get(i).filter(|s| s.as_ref().is_some_and(|s| s.life != Life::Closing)) {
                s.conn.info.set_close_reason(crate::CloseReason::Shutdown);
            }
            self.close(i);
        }
        if self.wake_armed {
            self.push(&opcode::AsyncCancel::new(OP_WAKE).build().user_data(OP_CANCEL));
        }
        let wait = types::Timespec::new().nsec(10_000_000);
        let mut done = std::mem::take(&mut self.backlog);
        for _ in 0..100 {
            for cqe in std::mem::take(&mut done) {
                self.complete(cqe);
            }
            for i in 0..self.slots.len() {
                self.reap(i);
            }
            if !self.wake_armed && self.slots.iter().all(Option::is_none) {
                break;
            }
            let _ = self.ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&wait));
            self.reap_completions(&mut done);
        }
        for s in self.slots.iter().flatten() {
            close(self.shared, s.id);
        }
        if !self.wake_armed && self.slots.iter().all(Option::is_none) {
            self.clean = self.ring.submitter().unregister_buf_ring(BUFFER_GROUP).is_ok();
        }
    }
}

impl Slots for Loop<'_> {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn conn(&mut self, i: usize) -> Option<&mut Conn> {
        self.slots.get_mut(i)?.as_mut().map(|s| &mut s.conn)
    }

    fn closing(&self, i: usize) -> bool {
        matches!(self.slots.get(i), Some(Some(s)) if s.life == Life::Closing)
    }

    /// A send in flight is still under way, and so are bytes still in the
    /// socket: with `DEFER_TASKRUN` the ring receives them only when this
    /// thread next enters the kernel, so a request part-sent before the
    /// stop may not have reached the connection yet.
    fn under_way(&mut self, i: usize) -> bool {
        let Some(Some(s)) = self.slots.get(i) else { return false };
        s.send || s.stream.unread()
    }

    fn close(&mut self, i: usize) {
        Loop::close(self, i);
    }
}
