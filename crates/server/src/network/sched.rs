//! The scheduler both event loops own (`epoll.rs`, `uring/`): which of a
//! worker's connections to serve each turn, and what follows from serving
//! them. It holds the turn's ready list and the connections with work left
//! ("again"), the connections whose replies wait for the durability log
//! (held), those parked for reads from flash or for memory, the watching ones, and the
//! idle sweep's clock; it decides whom to release, unpark, wake for watch
//! lines, kick as idle, and close as quiescent while the server drains.
//! The loops keep only their I/O mechanics and reach each connection
//! through [`Slots`].
//!
//! A turn, on either loop:
//!
//! ```text
//!  wait for I/O (not at all if work is left: `work_left`)
//!  begin     seal segments if a snapshot asked; work left comes first;
//!            held connections whose log position is on disk
//!  (loop)    readiness / completions, new connections: `mark`, `adopt`
//!  sweep     idle connections closed (once a clock second); parked ones
//!            whose reads are done; watchers with lines waiting
//!  (loop)    serve each of `take_ready`, handing `served` its Effects
//!  end       give the list back; draining: close the quiescent ones
//! ```
//!
//! The pieces both loops share live here too: the wake-up eventfd
//! ([`Wake`]), a connection handed over by the acceptor ([`NewConn`]),
//! containing a panic to its connection ([`contain`]) and the bookkeeping
//! of a closed connection ([`close`]).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use strata_store::Ticket;

use crate::network::conn::{Conn, Effects};
use crate::network::listen::Stream;
use crate::observability::counters::WorkerStats;
use crate::observability::watch::{self, WatchList};
use crate::{CloseReason, ConnInfo, Shared};

/// How a loop reaches the connections the scheduler decides about, by the
/// slot index its I/O names them with.
pub(crate) trait Slots {
    /// How many slots there are (some may be empty).
    fn len(&self) -> usize;

    /// Slot `i`'s connection, unless the slot is empty.
    fn conn(&mut self, i: usize) -> Option<&mut Conn>;

    /// Slot `i` is on its way out already (io_uring: waiting for its
    /// operations to come back): no sweep or drain closes it again.
    fn closing(&self, _i: usize) -> bool {
        false
    }

    /// Something of slot `i` is under way that its connection does not
    /// know of, so a graceful stop must wait for it: a send in flight, TLS
    /// records unsent, bytes the client sent still in the socket.
    fn under_way(&mut self, i: usize) -> bool;

    /// Closes slot `i`'s connection (its close reason already given).
    fn close(&mut self, i: usize);
}

/// A slot's scheduling state.
#[derive(Debug, Default, Clone, Copy)]
struct Mark {
    /// On the ready list or the again list: served once per turn.
    queued: bool,
    /// On the held list (its replies wait for the durability log).
    held: bool,
}

/// One worker's scheduler (see the module docs).
pub(crate) struct Sched {
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    /// The worker's wake-up, which watchers write.
    wake: Arc<Wake>,
    marks: Vec<Mark>,
    /// This turn's connections to serve.
    ready: Vec<usize>,
    /// Connections with work left that needs no new input: served next
    /// turn, which then does not wait for I/O.
    again: Vec<usize>,
    /// Connections whose replies wait for the durability log.
    held: Vec<usize>,
    parked: Parked,
    watching: WatchList,
    /// The store clock's second of the last idle sweep.
    last_sweep: u32,
}

impl Sched {
    /// The scheduler of the worker that owns `store`, whose reads from
    /// flash and writes waiting for memory end by waking `wake`.
    pub fn new(
        shared: Arc<Shared>,
        stats: Arc<WorkerStats>,
        wake: Arc<Wake>,
        store: &mut strata_store::Worker,
    ) -> Sched {
        let w = wake.clone();
        store.enable_async_flash(Box::new(move || w.wake()));
        let w = wake.clone();
        store.enable_memory_waits(Box::new(move || w.wake()));
        let last_sweep = shared.store.clock().now();
        Sched {
            shared,
            stats,
            wake,
            marks: Vec::new(),
            ready: Vec::new(),
            again: Vec::new(),
            held: Vec::new(),
            parked: Parked::default(),
            watching: WatchList::default(),
            last_sweep,
        }
    }

    /// Connections have work left from the last turn: the loop is not to
    /// wait for I/O, only to collect what is already there.
    pub fn work_left(&self) -> bool {
        !self.again.is_empty()
    }

    fn mark_of(&mut self, i: usize) -> &mut Mark {
        mark_of(&mut self.marks, i)
    }

    /// Slot `i` is to be served this turn (once, however often marked).
    pub fn mark(&mut self, i: usize) {
        queue(&mut self.marks, &mut self.ready, i);
    }

    /// A new connection in slot `i`: served this turn. Lists that still
    /// name the slot for its previous connection let it go (a held entry
    /// stays only if the new connection is held too).
    pub fn adopt(&mut self, i: usize) {
        self.mark_of(i).held = false;
        self.mark(i);
    }

    /// Starts a turn: seals the worker's segments if a snapshot asked,
    /// puts the connections with work left first, and those whose replies
    /// the durability log has freed (or whose log failed: they close).
    pub fn begin(&mut self, store: &mut strata_store::Worker, slots: &mut impl Slots) {
        crate::network::sched::seal_if_asked(&self.shared, &self.stats, store);
        self.ready.clear();
        self.ready.append(&mut self.again);
        let Some(wal) = &self.shared.durable_acks else { return };
        let (marks, ready) = (&mut self.marks, &mut self.ready);
        self.held.retain(|&i| {
            // A slot closed and taken by a new connection since it was
            // listed is listed again only if that one waits too.
            let Some(conn) = slots.conn(i) else { return false };
            if !marks[i].held {
                return false;
            }
            if !conn.release_durable(wal) {
                return true;
            }
            marks[i].held = false;
            queue(marks, ready, i);
            false
        });
    }

    /// After the loop's I/O: closes the idle connections (`-o
    /// idle_timeout`, once a second), then serves those whose flash reads
    /// are done or whose writes may take memory now, and the watchers with
    /// lines waiting.
    pub fn sweep(&mut self, store: &mut strata_store::Worker, slots: &mut impl Slots) {
        self.close_idle(slots);
        // After the loop took the wake-up (epoll drained the counter; the
        // ring's read of it completed): a read that finished since wrote
        // it again, so the next wait returns for it.
        let mut parked = std::mem::take(&mut self.parked);
        parked.finished(store, |i, key| {
            if slots.conn(i).is_some_and(|c| c.unpark(key)) {
                self.mark(i);
            }
        });
        self.parked = parked;
        let mut watching = std::mem::take(&mut self.watching);
        watching.due(|i| {
            if slots.conn(i).is_some() {
                self.mark(i);
            }
        });
        self.watching = watching;
    }

    /// Idle sweep: the store clock moves once a second, and so does this.
    /// A request waiting for flash is not the client's delay (`Conn::idle`).
    fn close_idle(&mut self, slots: &mut impl Slots) {
        let timeout = self.shared.cfg.idle_timeout;
        if timeout == 0 {
            return;
        }
        let now = self.shared.store.clock().now();
        if now == self.last_sweep {
            return;
        }
        self.last_sweep = now;
        for i in 0..slots.len() {
            if slots.closing(i) {
                continue;
            }
            let Some(conn) = slots.conn(i) else { continue };
            if conn.idle(now, timeout) {
                conn.info.set_close_reason(CloseReason::IdleTimeout);
                crate::observability::inc(&self.stats.idle_kicks);
                slots.close(i);
            }
        }
    }

    /// This turn's connections to serve, in order: those with work left,
    /// then the rest as they were marked. Hand it back with [`Sched::end`].
    pub fn take_ready(&mut self) -> Vec<usize> {
        for &i in &self.ready {
            self.marks[i].queued = false;
        }
        std::mem::take(&mut self.ready)
    }

    /// What serving slot `i` left to do (`Conn::service` / `advance`, as
    /// the loop adjusted `more` for its own I/O).
    pub fn served(&mut self, i: usize, effects: Effects) {
        let Effects { more, held, park, watch } = effects;
        if more {
            self.again(i);
        }
        if held && !self.mark_of(i).held {
            self.marks[i].held = true;
            self.held.push(i);
        }
        if let Some(key) = park {
            self.parked.wait(key, i);
        }
        // Lines logged before the wake-up was set woke nobody.
        if let Some(w) = watch {
            if self.watching.attach(i, w, &self.wake) {
                self.again(i);
            }
        }
    }

    fn again(&mut self, i: usize) {
        queue(&mut self.marks, &mut self.again, i);
    }

    /// Ends a turn: takes the ready list back (for its allocation) and,
    /// while the server drains, closes the connections with nothing under
    /// way, theirs or the loop's.
    pub fn end(&mut self, mut ready: Vec<usize>, slots: &mut impl Slots) {
        ready.clear();
        if self.ready.is_empty() {
            self.ready = ready;
        }
        if !self.shared.run.draining() {
            return;
        }
        for i in 0..slots.len() {
            if slots.closing(i) {
                continue;
            }
            let quiescent = slots.conn(i).is_some_and(|c| c.quiescent());
            if quiescent && !slots.under_way(i) {
                if let Some(c) = slots.conn(i) {
                    c.info.set_close_reason(CloseReason::Shutdown);
                }
                slots.close(i);
            }
        }
    }
}

fn mark_of(marks: &mut Vec<Mark>, i: usize) -> &mut Mark {
    if i >= marks.len() {
        marks.resize(i + 1, Mark::default());
    }
    &mut marks[i]
}

/// Puts slot `i` on `list` unless it is on a list already.
fn queue(marks: &mut Vec<Mark>, list: &mut Vec<usize>, i: usize) {
    let m = mark_of(marks, i);
    if !m.queued {
        m.queued = true;
        list.push(i);
    }
}

/// Connections parked for reads from flash (`conn/`), by the read they
/// wait for, and those whose writes wait for memory (by
/// [`Ticket::MEMORY`]).
#[derive(Default)]
struct Parked {
    by_read: std::collections::HashMap<Ticket, Vec<usize>>,
    done: Vec<Ticket>,
}

impl Parked {
    /// Slot `i` waits for read `key`.
    fn wait(&mut self, key: Ticket, i: usize) {
        self.by_read.entry(key).or_default().push(i);
    }

    /// Hands `wake` each slot waiting for a read that is done. A slot
    /// closed since (or taken by another connection) is handed over too:
    /// `Conn::unpark` checks that it waits for that read.
    fn finished(&mut self, store: &mut strata_store::Worker, wake: impl FnMut(usize, Ticket)) {
        self.done.clear();
        store.completions(&mut self.done);
        let done = std::mem::take(&mut self.done);
        self.wake_for(&done, wake);
        self.done = done;
    }

    fn wake_for(&mut self, done: &[Ticket], mut wake: impl FnMut(usize, Ticket)) {
        for &key in done {
            for i in self.by_read.remove(&key).unwrap_or_default() {
                wake(i, key);
            }
        }
    }
}

pub(crate) use crate::wake::Wake;

/// A connection handed over by the acceptor.
pub(crate) struct NewConn {
    pub id: u64,
    pub stream: Stream,
    pub info: Arc<ConnInfo>,
    /// Its TLS state, from a TLS listener.
    pub tls: Option<Box<rustls::ServerConnection>>,
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
            crate::observability::inc(&stats.panics);
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
        if crate::observability::verbose::on(shared) {
            crate::observability::verbose::closed(info.fd);
        }
    }
    shared.curr_conns.fetch_sub(1, Relaxed);
    crate::network::bufpool::note_closed();
}

#[cfg(test)]
#[path = "sched_tests.rs"]
mod tests;

/// Called by a worker between turns: seals its segments if a snapshot
/// asked, or a writer found no segment to take (`Store::on_starved`).
#[inline]
pub(crate) fn seal_if_asked(shared: &Shared, stats: &WorkerStats, store: &mut strata_store::Worker) {
    let want = shared.seal_gen.load(std::sync::atomic::Ordering::Acquire);
    if stats.sealed.load(Relaxed) != want {
        store.seal_active();
        stats.sealed.store(want, std::sync::atomic::Ordering::Release);
    }
    store.seal_if_starved();
}
