//! A worker thread on epoll (`mio`): readiness for the connections handed
//! to it, and the reads and writes through their sockets (TLS over them).
//! `uring/` is the io_uring loop, chosen by `-o io=`; which connections a
//! turn serves, and what follows from serving them, is the scheduler's
//! (`sched.rs`), as are the pieces both loops share (the wake-up eventfd,
//! new connections, closing one).
//!
//! Each wake-up services every ready connection once; a connection that still
//! has work (it hit `-R` requests, or its read buffer limit) is served again
//! on the next turn without blocking, so one busy client cannot starve the
//! others.

use std::io;
use std::sync::{mpsc, Arc};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::execution::dispatch::Ctx;
use crate::network::conn::{Conn, Status};
use crate::network::listen::Stream;
use crate::network::sched::{close, contain, NewConn, Sched, Slots, Wake};
use crate::observability::counters::WorkerStats;
use crate::{CloseReason, Shared};

pub(crate) const WAKE: Token = Token(usize::MAX);

struct Slot {
    id: u64,
    conn: Conn,
    /// The socket, which is the connection's transport on this loop
    /// (below TLS, with `tls`).
    stream: Stream,
    tls: Option<Box<rustls::ServerConnection>>,
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
                let mut t = crate::network::tls_io::TlsIo { sock: &mut self.stream, tls, errors };
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

/// The loop's connections, by the token epoll names them with.
struct Table<'a> {
    shared: &'a Shared,
    poll: Poll,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
}

impl Slots for Table<'_> {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn conn(&mut self, i: usize) -> Option<&mut Conn> {
        self.slots.get_mut(i)?.as_mut().map(|s| &mut s.conn)
    }

    /// A TLS connection's records still unsent are under way too, and so
    /// are bytes the client sent that wait in the socket (sent before the
    /// stop, not yet read).
    fn under_way(&mut self, i: usize) -> bool {
        let Some(Some(s)) = self.slots.get(i) else { return false };
        s.tls.as_ref().is_some_and(|t| t.wants_write()) || s.stream.unread()
    }

    fn close(&mut self, i: usize) {
        if let Some(mut s) = self.slots.get_mut(i).and_then(Option::take) {
            let _ = self.poll.registry().deregister(&mut s.stream);
            close(self.shared, s.id);
            self.free.push(i);
        }
    }
}

impl Table<'_> {
    /// Takes a new connection into a free slot; `None` if epoll refused it
    /// (it is closed).
    fn adopt(&mut self, nc: NewConn) -> Option<usize> {
        let i = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let (conn, mut stream, tls) = (Conn::new(nc.info), nc.stream, nc.tls);
        let interest = Interest::READABLE | Interest::WRITABLE;
        if self.poll.registry().register(&mut stream, Token(i), interest).is_err() {
            close(self.shared, nc.id);
            self.free.push(i);
            return None;
        }
        self.slots[i] = Some(Slot { id: nc.id, conn, stream, tls });
        Some(i)
    }
}

pub(crate) fn run(
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    poll: Poll,
    wake: Arc<Wake>,
    rx: mpsc::Receiver<NewConn>,
) {
    let mut store = shared.store.worker();
    let mut sched = Sched::new(shared.clone(), stats.clone(), wake.clone(), &mut store);
    let mut table = Table { shared: &shared, poll, slots: Vec::new(), free: Vec::new() };
    let mut events = Events::with_capacity(1024);

    while !shared.run.stopping() {
        let timeout = if sched.work_left() { Some(std::time::Duration::ZERO) } else { None };
        if let Err(e) = table.poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "worker poll failed");
            break;
        }
        sched.begin(&mut store, &mut table);
        for ev in events.iter() {
            if ev.token() == WAKE {
                wake.drain();
                while let Ok(nc) = rx.try_recv() {
                    if let Some(i) = table.adopt(nc) {
                        sched.adopt(i);
                    }
                }
            } else {
                let i = ev.token().0;
                if let Some(Some(s)) = table.slots.get_mut(i) {
                    if ev.is_read_closed() {
                        s.conn.note_peer_closed();
                    }
                    sched.mark(i);
                }
            }
        }
        sched.sweep(&mut store, &mut table);
        let ready = sched.take_ready();
        for &i in &ready {
            let Some(Some(slot)) = table.slots.get_mut(i) else { continue };
            let mut ctx = Ctx::for_loop(&shared, &mut store, &stats);
            let served = contain(&stats, || slot.service(&mut ctx));
            match served.unwrap_or(Status::Close) {
                Status::Open(effects) => sched.served(i, effects),
                Status::Close => table.close(i),
            }
        }
        sched.end(ready, &mut table);
    }
    for mut s in table.slots.into_iter().flatten() {
        let _ = table.poll.registry().deregister(&mut s.stream);
        s.conn.info.set_close_reason(CloseReason::Shutdown);
        close(&shared, s.id);
    }
}
