//! The scheduler's decisions, over a table of connections without sockets:
//! whom a turn serves and in what order, work left, watchers, the idle
//! sweep, draining, parked reads.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use strata_store::Ticket;

use super::*;
use crate::config::ServerConfig;
use crate::network::conn::tests::Fixture;
use crate::network::transport::Received;

/// A loop's table as the scheduler sees it: connections, and what the
/// loop would say of each.
struct Table {
    conns: Vec<Option<Conn>>,
    closing: Vec<bool>,
    under_way: Vec<bool>,
    closed: Vec<usize>,
}

impl Table {
    /// `n` connections, each of them as if it had just completed a request.
    fn new(f: &Fixture, n: usize) -> Table {
        let mut t = Table { conns: Vec::new(), closing: vec![false; n], under_way: vec![false; n], closed: Vec::new() };
        for _ in 0..n {
            t.conns.push(Some(conn(f)));
        }
        t
    }
}

fn conn(f: &Fixture) -> Conn {
    let now = f.shared.store.clock().now();
    let info = ConnInfo::new(0, "test".into(), "test".into(), now, f.shared.replies.clone());
    Conn::new(Arc::new(info))
}

impl Slots for Table {
    fn len(&self) -> usize {
        self.conns.len()
    }

    fn conn(&mut self, i: usize) -> Option<&mut Conn> {
        self.conns.get_mut(i)?.as_mut()
    }

    fn closing(&self, i: usize) -> bool {
        self.closing[i]
    }

    fn under_way(&mut self, i: usize) -> bool {
        self.under_way[i]
    }

    fn close(&mut self, i: usize) {
        if self.conns[i].take().is_some() {
            self.closed.push(i);
        }
    }
}

fn sched(f: &mut Fixture) -> Sched {
    Sched::new(f.shared.clone(), f.stats.clone(), Arc::new(Wake::new().unwrap()), &mut f.store)
}

fn more() -> Effects {
    Effects { more: true, ..Effects::default() }
}

#[test]
fn work_left_comes_first_and_each_connection_once_a_turn() {
    let mut f = Fixture::new(ServerConfig::default());
    let mut t = Table::new(&f, 3);
    let mut s = sched(&mut f);
    for i in 0..3 {
        s.adopt(i);
    }
    s.mark(1);
    let ready = s.take_ready();
    assert_eq!(ready, [0, 1, 2]);
    s.served(0, Effects::default());
    s.served(2, more());
    s.served(1, more());
    s.end(ready, &mut t);
    assert!(s.work_left(), "the loop must not wait for I/O");
    s.begin(&mut f.store, &mut t);
    s.mark(0);
    s.mark(2);
    s.mark(0);
    assert_eq!(s.take_ready(), [2, 1, 0]);
    assert!(!s.work_left());
}

#[test]
fn a_slot_taken_by_a_new_connection_while_listed_is_served_once() {
    let mut f = Fixture::new(ServerConfig::default());
    let mut t = Table::new(&f, 1);
    let mut s = sched(&mut f);
    s.adopt(0);
    let ready = s.take_ready();
    s.served(0, more());
    s.end(ready, &mut t);
    t.close(0);
    t.conns[0] = Some(conn(&f));
    s.begin(&mut f.store, &mut t);
    s.adopt(0);
    assert_eq!(s.take_ready(), [0]);
}

#[test]
fn a_new_watcher_with_lines_waiting_is_served_again_and_whenever_lines_wait() {
    let mut f = Fixture::new(ServerConfig::default());
    let mut t = Table::new(&f, 2);
    let mut s = sched(&mut f);
    let w = f.shared.watchers.add(crate::observability::watch::FETCHERS).unwrap();
    f.shared.watchers.log(crate::observability::watch::FETCHERS, format_args!("type=item_get key=a"));
    s.adopt(0);
    s.adopt(1);
    let ready = s.take_ready();
    s.served(0, Effects { watch: Some(w.clone()), ..Effects::default() });
    s.served(1, Effects::default());
    s.end(ready, &mut t);
    assert!(s.work_left(), "lines logged before it watched woke nobody");
    s.begin(&mut f.store, &mut t);
    s.sweep(&mut f.store, &mut t);
    let ready = s.take_ready();
    assert_eq!(ready, [0]);
    s.end(ready, &mut t);
    // Nobody took the lines: every sweep serves it until someone does.
    s.begin(&mut f.store, &mut t);
    s.sweep(&mut f.store, &mut t);
    let ready = s.take_ready();
    assert_eq!(ready, [0]);
    s.end(ready, &mut t);
    let mut out = Vec::new();
    w.take(&mut out);
    assert!(!out.is_empty());
    s.begin(&mut f.store, &mut t);
    s.sweep(&mut f.store, &mut t);
    assert!(s.take_ready().is_empty());
}

#[test]
fn the_idle_sweep_closes_idle_connections_once_a_second() {
    let mut f = Fixture::new(ServerConfig { idle_timeout: 5, ..ServerConfig::default() });
    let mut t = Table::new(&f, 3);
    t.closing[2] = true;
    let mut s = sched(&mut f);
    let clock = f.shared.store.clock().clone();
    clock.advance(3);
    t.conns[1] = Some(conn(&f));
    clock.advance(2);
    s.sweep(&mut f.store, &mut t);
    assert_eq!(t.closed, [0], "5 s idle: kicked; 2 s: not yet; closing: not again");
    let reason = t.conns[1].as_ref().map(|c| c.info.close_reason());
    assert_ne!(reason, Some(CloseReason::IdleTimeout));
    assert_eq!(f.stats.idle_kicks.load(Relaxed), 1);
    clock.advance(3);
    t.conns[0] = Some(conn(&f));
    clock.advance(5);
    t.closed.clear();
    s.sweep(&mut f.store, &mut t);
    assert_eq!(t.closed, [0, 1]);
    t.conns[0] = Some(conn(&f));
    t.closed.clear();
    s.sweep(&mut f.store, &mut t);
    assert!(t.closed.is_empty(), "the same second is swept once");
    assert_eq!(f.stats.idle_kicks.load(Relaxed), 3);
}

#[test]
fn no_idle_sweep_without_a_timeout() {
    let mut f = Fixture::new(ServerConfig::default());
    let mut t = Table::new(&f, 1);
    let mut s = sched(&mut f);
    f.shared.store.clock().advance(1_000_000);
    s.sweep(&mut f.store, &mut t);
    assert!(t.closed.is_empty());
}

#[test]
fn a_drain_closes_the_connections_with_nothing_under_way() {
    let mut f = Fixture::new(ServerConfig::default());
    let mut t = Table::new(&f, 4);
    let mut s = sched(&mut f);
    if let Some(c) = t.conns[1].as_mut() {
        c.receive(&mut Received::Bytes(b"get a"));
    }
    t.under_way[2] = true;
    t.closing[3] = true;
    s.end(Vec::new(), &mut t);
    assert!(t.closed.is_empty(), "not draining");
    f.shared.run.drain();
    s.end(Vec::new(), &mut t);
    assert_eq!(t.closed, [0], "1 has part of a request, 2 a send in flight, 3 is closing");
    t.under_way[2] = false;
    s.end(Vec::new(), &mut t);
    assert_eq!(t.closed, [0, 2]);
}

#[test]
fn a_finished_read_wakes_every_connection_parked_for_it_once() {
    const T7: Ticket = Ticket::unbacked(7);
    const T9: Ticket = Ticket::unbacked(9);
    let mut p = Parked::default();
    p.wait(T7, 0);
    p.wait(T9, 1);
    p.wait(T7, 2);
    let mut woken = Vec::new();
    p.wake_for(&[T7], |i, key| woken.push((i, key)));
    assert_eq!(woken, [(0, T7), (2, T7)]);
    woken.clear();
    p.wake_for(&[T7, T9], |i, key| woken.push((i, key)));
    assert_eq!(woken, [(1, T9)]);
}

#[test]
fn a_parked_connection_is_listed_by_its_read() {
    let mut f = Fixture::new(ServerConfig::default());
    let mut s = sched(&mut f);
    s.adopt(3);
    let ready = s.take_ready();
    s.served(3, Effects { park: Some(Ticket::unbacked(42)), ..Effects::default() });
    assert!(!s.work_left(), "it waits for the read, not for a turn");
    assert_eq!(s.parked.by_read.get(&Ticket::unbacked(42)).map(Vec::as_slice), Some(&[3][..]));
    drop(ready);
}
