//! A worker thread: one `mio` (epoll) event loop over the connections handed
//! to it, and the eventfd that wakes a worker of either kind (`uring.rs` is
//! the io_uring loop, chosen by `-o io=`).
//!
//! Each wake-up services every ready connection once; a connection that still
//! has work (it hit `-R` requests, or its read buffer limit) is queued and
//! serviced again on the next turn without blocking, so one busy client cannot
//! starve the others.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::conn::{Conn, Status};
use crate::dispatch::Ctx;
use crate::listen::Stream;
use crate::stats::WorkerStats;
use crate::{watch, CloseReason, ConnInfo, Shared};

pub(crate) const WAKE: Token = Token(usize::MAX);

/// Wakes a worker to take new connections or to stop: an eventfd that the
/// epoll loop watches and the io_uring loop keeps a read queued on.
pub(crate) struct Wake(OwnedFd);

impl Wake {
    pub fn new() -> io::Result<Wake> {
        // SAFETY: eventfd takes no pointers; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an fd we own. A full
        // counter (EAGAIN) means a wake-up is already pending.
        unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter, so the next `wake` is a new edge.
    fn drain(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64.
        unsafe { libc::read(self.fd(), (&mut n as *mut u64).cast(), 8) };
    }
}

/// A connection handed over by the acceptor.
pub(crate) struct NewConn {
    pub id: u64,
    pub stream: Stream,
    pub info: Arc<ConnInfo>,
    /// Its TLS state, from a TLS listener.
    pub tls: Option<Box<rustls::ServerConnection>>,
}

struct Slot {
    id: u64,
    conn: Conn,
    /// On the worker's list of connections whose replies wait for the
    /// durability log.
    held: bool,
    /// The socket, which is the connection's transport on this loop
    /// (below TLS, with `tls`).
    stream: Stream,
    tls: Option<Box<rustls::ServerConnection>>,
    queued: bool,
}

impl Slot {
    /// Serves the connection through its transport: the socket, or TLS
    /// over it (sending first what TLS has ready: a writable socket is
    /// the only wake-up for records that did not fit before).
    fn service(&mut self, ctx: &mut Ctx<'_>) -> Status {
        let shared = ctx.shared;
        match (&mut self.tls, &shared.tls) {
            (None, _) => self.conn.service(&mut self.stream, ctx),
            // Only a TLS listener makes a TLS connection.
            (Some(_), None) => Status::Close,
            (Some(tls), Some(server)) => {
                let errors = &server.handshake_errors;
                let mut t = crate::tls::TlsIo { sock: &mut self.stream, tls, errors };
                if t.flush().is_err() {
                    return Status::Close;
                }
                let status = self.conn.service(&mut t, ctx);
                if status == Status::Close {
                    t.close();
                } else if t.flush().is_err() {
                    return Status::Close;
                }
                status
            }
        }
    }
}

/// An epoll instance watching `wake`, for [`run`].
pub(crate) fn poll_for(wake: &Wake) -> io::Result<Poll> {
    let poll = Poll::new()?;
    poll.registry().register(&mut SourceFd(&wake.fd()), WAKE, Interest::READABLE)?;
    Ok(poll)
}

pub(crate) fn run(
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    mut poll: Poll,
    wake: Arc<Wake>,
    rx: mpsc::Receiver<NewConn>,
) {
    let mut store = shared.store.worker();
    let w = wake.clone();
    let async_reads = store.enable_async_flash(Box::new(move || w.wake()));
    let mut parked = Parked::default();
    let mut watching = watch::WatchList::default();
    let mut last_sweep = shared.store.clock().now();
    let mut slots: Vec<Option<Slot>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(1024);
    let mut ready: Vec<usize> = Vec::new();
    let mut again: Vec<usize> = Vec::new();
    let mut held: Vec<usize> = Vec::new();

    while !shared.run.stopping() {
        let timeout = if again.is_empty() { None } else { Some(std::time::Duration::ZERO) };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "worker poll failed");
            break;
        }
        crate::snapshot::seal_if_asked(&shared, &stats, &mut store);
        ready.clear();
        ready.append(&mut again);
        if let Some(wal) = &shared.durable_acks {
            held.retain(|&i| {
                // A slot closed and taken by a new connection since it was
                // listed is listed again only if that one waits too.
                let Some(Some(s)) = slots.get_mut(i) else { return false };
                if !s.held {
                    return false;
                }
                if !s.conn.release_durable(wal) {
                    return true;
                }
                s.held = false;
                if !s.queued {
                    s.queued = true;
                    ready.push(i);
                }
                false
            });
        }
        for ev in events.iter() {
            if ev.token() == WAKE {
                wake.drain();
                while let Ok(nc) = rx.try_recv() {
                    let i = free.pop().unwrap_or_else(|| {
                        slots.push(None);
                        slots.len() - 1
                    });
                    let (conn, mut stream, tls) = (Conn::new(nc.info), nc.stream, nc.tls);
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if poll.registry().register(&mut stream, Token(i), interest).is_err() {
                        close(&shared, nc.id);
                        free.push(i);
                        continue;
                    }
                    slots[i] = Some(Slot { id: nc.id, conn, stream, tls, queued: true, held: false });
                    ready.push(i);
                }
            } else {
                let i = ev.token().0;
                if let Some(Some(s)) = slots.get_mut(i) {
                    if ev.is_read_closed() {
                        s.conn.note_peer_closed();
                    }
                    if !s.queued {
                        s.queued = true;
                        ready.push(i);
                    }
                }
            }
        }
        if shared.cfg.idle_timeout > 0 {
            let now = shared.store.clock().now();
            if now != last_sweep {
                last_sweep = now;
                for (i, s) in slots.iter_mut().enumerate() {
                    if !s.as_ref().is_some_and(|s| s.conn.idle(now, shared.cfg.idle_timeout)) {
                        continue;
                    }
                    if let Some(mut s) = s.take() {
                        let _ = poll.registry().deregister(&mut s.stream);
                        s.conn.info.set_close_reason(CloseReason::IdleTimeout);
                        close(&shared, s.id);
                        crate::core::inc(&stats.idle_kicks);
                        free.push(i);
                    }
                }
            }
        }
        // After the wake-up counter was drained above: a read that
        // finished since wrote it again, so the next poll returns for it.
        if async_reads {
            parked.finished(&mut store, |i, addr| {
                let Some(Some(s)) = slots.get_mut(i) else { return };
                if s.conn.unpark(addr) && !s.queued {
                    s.queued = true;
                    ready.push(i);
                }
            });
        }
        watching.due(|i| {
            if let Some(Some(s)) = slots.get_mut(i) {
                if !s.queued {
                    s.queued = true;
                    ready.push(i);
                }
            }
        });
        for &i in &ready {
            let Some(Some(slot)) = slots.get_mut(i) else { continue };
            slot.queued = false;
            let mut ctx = Ctx { shared: &shared, store: &mut store, stats: &stats, fd: -1 };
            let served = contain(&stats, || slot.service(&mut ctx));
            match served.unwrap_or(Status::Close) {
                Status::Open { more } => {
                    if more {
                        slot.queued = true;
                        again.push(i);
                    }
                    if !slot.held && slot.conn.held_for_durability() {
                        slot.held = true;
                        held.push(i);
                    }
                    if let Some(addr) = slot.conn.take_park() {
                        parked.wait(addr, i);
                    }
                    if let Some(w) = slot.conn.take_watch() {
                        if watching.attach(i, w, &wake) && !slot.queued {
                            slot.queued = true;
                            again.push(i);
                        }
                    }
                }
                Status::Close => {
                    if let Some(mut s) = slots[i].take() {
                        let _ = poll.registry().deregister(&mut s.stream);
                        close(&shared, s.id);
                    }
                    free.push(i);
                }
            }
        }
        if shared.run.draining() {
            for (i, s) in slots.iter_mut().enumerate() {
                // A TLS connection's records still unsent are under way too,
                // and so are bytes the client sent that wait in the socket
                // (sent before the stop, not yet read).
                if s.as_mut().is_some_and(|s| {
                    s.conn.quiescent() && !s.tls.as_ref().is_some_and(|t| t.wants_write()) && !s.stream.unread()
                }) {
                    if let Some(mut s) = s.take() {
                        let _ = poll.registry().deregister(&mut s.stream);
                        s.conn.info.set_close_reason(CloseReason::Shutdown);
                        close(&shared, s.id);
                        free.push(i);
                    }
                }
            }
        }
    }
    for mut s in slots.into_iter().flatten() {
        let _ = poll.registry().deregister(&mut s.stream);
        s.conn.info.set_close_reason(CloseReason::Shutdown);
        close(&shared, s.id);
    }
}

/// Connections parked for reads from flash (`conn.rs`), by the read they
/// wait for: a loop of either kind wakes them when the read is done.
#[derive(Default)]
pub(crate) struct Parked {
    by_read: std::collections::HashMap<u64, Vec<usize>>,
    done: Vec<u64>,
}

impl Parked {
    /// Slot `i` waits for read `addr`.
    pub fn wait(&mut self, addr: u64, i: usize) {
        self.by_read.entry(addr).or_default().push(i);
    }

    /// Hands `wake` each slot waiting for a read that is done. A slot
    /// closed since (or taken by another connection) is handed over too:
    /// `Conn::unpark` checks that it waits for that read.
    pub fn finished(&mut self, store: &mut strata_store::Worker, mut wake: impl FnMut(usize, u64)) {
        self.done.clear();
        store.flash_completions(&mut self.done);
        for &addr in &self.done {
            for i in self.by_read.remove(&addr).unwrap_or_default() {
                wake(i, addr);
            }
        }
    }
}

/// Runs `serve` for one connection; a panic in it (a bug) is logged and
/// counted, and `None` says to close that connection only: its worker, its
/// other connections and the process go on. Locks are released on the
/// way out (parking_lot's do not poison), so the store stays usable.
pub(crate) fn contain<T>(stats: &WorkerStats, serve: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(serve)) {
        Ok(t) => Some(t),
        Err(e) => {
            let what = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(panic = %what, "serving a connection panicked: closing it, the server goes on");
            crate::core::inc(&stats.panics);
            None
        }
    }
}

/// A connection is gone: off `stats conns`, and logged (`watch
/// connevents`, `-vv`) with the reason its closer gave.
pub(crate) fn close(shared: &Shared, id: u64) {
    let info = shared.conns.lock().remove(&id);
    if let Some(info) = &info {
        if shared.watchers.wants(watch::CONNEVENTS) {
            let (rip, rport, transport) = watch::endpoint(&info.addr);
            shared.watchers.log(
                watch::CONNEVENTS,
                format_args!(
                    "type=conn_close rip={rip} rport={rport} transport={transport} reason={} cfd={}",
                    info.close_reason().name(),
                    info.fd
                ),
            );
        }
        if crate::verbose::on(shared) {
            crate::verbose::closed(info.fd);
        }
    }
    shared.curr_conns.fetch_sub(1, Relaxed);
    crate::bufpool::note_closed();
}
