//! Asynchronous reads from flash through the store's API: an operation
//! that needs a record not yet read returns `Flow::Wait` with a ticket and
//! changes nothing; once an I/O thread has read it, the operation runs again
//! without a second read; reads of one address coalesce; a parked
//! operation whose record was let go reads it itself; a failed read is a
//! miss. (Files on disk: not under Miri.)

// Test code: a panic is how a test fails (clippy.toml allows unwrap in
// #[test] functions; these helpers live beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use strata_io::sim::Faults;

use crate::tier_tests::{fill, flash_stats, key, tier_cfg, value, Tier};
use crate::*;

/// Counts the I/O threads' wake-ups.
struct Signal(Mutex<u64>, Condvar);

/// 20,000 items over 8 MiB of memory (keys 0.. are on flash), and a
/// worker with asynchronous reads on, `recache_rate` as given. The device
/// says no record is in memory, so every read goes to the I/O threads.
fn async_tier(recache_rate: u32) -> (Tier, Arc<Signal>) {
    let (t, sig) = async_tier_cached(recache_rate);
    t.faults.set(Faults { uncached: true, ..Faults::default() });
    (t, sig)
}

/// [`async_tier`] with the records in the page cache (just written).
fn async_tier_cached(recache_rate: u32) -> (Tier, Arc<Signal>) {
    let mut t = tier_cfg(8, 64, recache_rate, 2);
    fill(&mut t, 20_000);
    assert!(flash_stats(&t.store).items > 10_000);
    let sig = Arc::new(Signal(Mutex::new(0), Condvar::new()));
    let s = sig.clone();
    let on = t.w.enable_async_flash(Box::new(move || {
        *s.0.lock() += 1;
        s.1.notify_all();
    }));
    assert!(on, "the store has I/O threads");
    (t, sig)
}

/// Waits (at most 10 s) until no read is in flight; the tickets of the
/// reads that finished.
fn finished(t: &mut Tier, sig: &Signal) -> Vec<Ticket> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    loop {
        let idle = flash_stats(&t.store).io_queue == 0;
        // A read leaves the queue before it is handed over: look once more.
        t.w.completions(&mut out);
        if idle {
            return out;
        }
        assert!(Instant::now() < deadline, "reads still in flight after 10 s");
        let mut n = sig.0.lock();
        sig.1.wait_for(&mut n, Duration::from_millis(20));
    }
}

/// A plain read that may wait, as a connection runs it: the value copied.
fn read_as(t: &mut Tier, k: &[u8], reading: Reading) -> Flow<Result<Option<Vec<u8>>, StoreError>> {
    Flow::of(t.w.find(k, &ReadOpts::GET, reading, |it| it.value.to_vec())).map(|r| {
        r.map(|found| match found {
            Found::Read(v) => Some(v),
            Found::Missing => None,
            Found::Fetch(f) => f.read(&mut t.w, |it| it.value.to_vec()),
        })
    })
}

fn read(t: &mut Tier, k: &[u8]) -> Flow<Result<Option<Vec<u8>>, StoreError>> {
    read_as(t, k, Reading::MayWait)
}

/// The ticket a flow waits for; fails the test if it is ready.
fn waits<T: std::fmt::Debug>(f: Flow<T>) -> Ticket {
    match f {
        Flow::Wait(t) => t,
        Flow::Ready(r) => panic!("expected to wait, got {r:?}"),
    }
}

/// The value of a ready flow; fails the test if it waits.
fn ready<T>(f: Flow<T>) -> T {
    match f {
        Flow::Ready(r) => r,
        Flow::Wait(t) => panic!("expected a ready result, waits for {t:?}"),
    }
}

#[test]
fn a_read_waits_for_the_io_threads_then_needs_no_second_read() {
    let (mut t, sig) = async_tier(0);
    let before = flash_stats(&t.store);
    let ticket = waits(read(&mut t, &key(0)));
    assert!(finished(&mut t, &sig).contains(&ticket), "the ticket comes back");
    assert!(*sig.0.lock() >= 1, "the worker was woken");
    assert_eq!(ready(read_as(&mut t, &key(0), Reading::Resumed(ticket))), Ok(Some(value(0, 1))));
    let after = flash_stats(&t.store);
    assert_eq!(after.reads - before.reads, 1, "one read, by an I/O thread");
    assert_eq!((after.reads_async, after.hits - before.hits), (1, 1));
    assert_eq!(after.items, before.items, "a plain read leaves the item on flash");
}

#[test]
fn reads_of_one_record_coalesce() {
    let (mut t, sig) = async_tier(0);
    for _ in 0..3 {
        waits(read(&mut t, &key(1)));
    }
    let fs = flash_stats(&t.store);
    assert_eq!((fs.reads_async, fs.reads_coalesced), (1, 2));
    finished(&mut t, &sig);
    for _ in 0..3 {
        assert_eq!(ready(read(&mut t, &key(1))), Ok(Some(value(1, 1))));
    }
    assert_eq!(flash_stats(&t.store).reads_async, 1);
}

#[test]
fn changes_wait_for_the_read_and_then_run_once() {
    let (mut t, sig) = async_tier(0);
    let now = t.store.clock().now();
    let k3 = key(3);
    let append = Write::new(SetOp::Append, &k3, 0, 0, b"+tail");
    let touch = ReadOpts { touch: Some(now + 100), ..ReadOpts::default() };
    let incr = Arith { incr: true, delta: 1, ..Arith::default() };
    let may = Reading::MayWait;
    waits(Flow::of(t.w.set_with(&append, may)));
    waits(Flow::of(t.w.find(&key(5), &touch, may, |_| ())));
    waits(Flow::of(t.w.delete_with(&key(4), &Delete::default(), may)));
    waits(Flow::of(t.w.arith_with(&key(6), &incr, may)));
    waits(Flow::of(t.w.inspect_with(&key(7), may)));
    let fs = flash_stats(&t.store);
    finished(&mut t, &sig);
    // Run again, each once, with the records in hand.
    assert_eq!(ready(Flow::of(t.w.set_with(&append, may))).map(|s| s.outcome), Ok(StoreOutcome::Stored));
    assert!(matches!(ready(Flow::of(t.w.find(&key(5), &touch, may, |_| ()))), Ok(Found::Read(()))));
    assert_eq!(ready(Flow::of(t.w.delete_with(&key(4), &Delete::default(), may))), Ok(DeleteOutcome::Deleted));
    assert_eq!(ready(Flow::of(t.w.arith_with(&key(6), &incr, may))).map(|c| c.outcome), Ok(ArithOutcome::NonNumeric));
    assert_eq!(
        ready(Flow::of(t.w.inspect_with(&key(7), may))).map(|i| i.map(|i| i.value_len)),
        Ok(Some(value(7, 1).len()))
    );
    assert_eq!(flash_stats(&t.store).reads_async, fs.reads_async, "no record read twice");
    let mut appended = value(3, 1);
    appended.extend_from_slice(b"+tail");
    assert_eq!(ready(read(&mut t, &key(3))), Ok(Some(appended)));
    assert_eq!(t.w.inspect(&key(5)).map(|i| i.expiry), Some(now + 100));
    assert_eq!(ready(read(&mut t, &key(4))), Ok(None));
    assert_eq!(ready(read(&mut t, &key(6))), Ok(Some(value(6, 1))), "a failed incr changes nothing");
}

#[test]
fn a_parked_operation_may_read_its_own_record_and_nothing_else() {
    let (mut t, sig) = async_tier(0);
    let ticket = waits(read(&mut t, &key(7)));
    // As if its record had been let go before the connection ran again.
    let resumed = Reading::Resumed(ticket);
    waits(read_as(&mut t, &key(8), resumed));
    // Seen once in make test (2026-11-29, not in 360 runs alone): key 7
    // waited again, for Ticket(4472). The message names both tickets: the
    // same address would be a resumed read refused, another one a record
    // of key 7 that moved or a chain read of another key's record first.
    let own = match read_as(&mut t, &key(7), resumed) {
        Flow::Ready(r) => r,
        Flow::Wait(again) => panic!("resumed with {ticket:?}, key 7 waits again for {again:?}"),
    };
    assert_eq!(own, Ok(Some(value(7, 1))), "its own is read here and now");
    finished(&mut t, &sig);
    assert_eq!(ready(read(&mut t, &key(8))), Ok(Some(value(8, 1))));
}

#[test]
fn a_failed_read_is_a_miss_never_a_value() {
    let (mut t, sig) = async_tier(0);
    let uncached = Faults { uncached: true, ..Faults::default() };
    t.faults.set(Faults { fail_read_at: Some(0), ..uncached.clone() });
    waits(read(&mut t, &key(9)));
    finished(&mut t, &sig);
    assert_eq!(ready(read(&mut t, &key(9))), Ok(None));
    t.faults.set(uncached);
    let fs = flash_stats(&t.store);
    assert!(fs.read_errors >= 1 && fs.misses >= 1, "{fs:?}");
    waits(read(&mut t, &key(10)));
    finished(&mut t, &sig);
    assert_eq!(ready(read(&mut t, &key(10))), Ok(Some(value(10, 1))), "the next read works");
}

#[test]
fn prefetched_records_are_read_together() {
    let (mut t, sig) = async_tier(0);
    let keys: Vec<Vec<u8>> = (20..30).map(key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    t.w.prefetch_flash(&refs);
    t.w.prefetch_flash(&refs);
    assert_eq!(flash_stats(&t.store).reads_async, 10, "each asked for once");
    finished(&mut t, &sig);
    for i in 20..30 {
        assert_eq!(ready(read(&mut t, &key(i))), Ok(Some(value(i, 1))), "key {i}");
    }
    assert_eq!(flash_stats(&t.store).reads_async, 10, "no more reads");
    // A key in memory is not asked for.
    t.w.prefetch_flash(&[key(19_999).as_slice()]);
    assert_eq!(flash_stats(&t.store).reads_async, 10);
}

#[test]
fn a_record_in_the_page_cache_is_read_at_once() {
    let (mut t, _sig) = async_tier_cached(0);
    let before = flash_stats(&t.store);
    for i in 0..100 {
        assert_eq!(ready(read(&mut t, &key(i))), Ok(Some(value(i, 1))), "key {i}");
    }
    let after = flash_stats(&t.store);
    assert_eq!((after.reads_async, after.hits - before.hits), (0, 100), "no read handed over");
    // The same records once the device says they are not in memory.
    t.faults.set(Faults { uncached: true, ..Faults::default() });
    waits(read(&mut t, &key(100)));
}

#[test]
fn the_store_own_methods_never_wait() {
    let (mut t, _sig) = async_tier(0);
    let now = t.store.clock().now();
    assert_eq!(t.w.read(&key(11), &ReadOpts::GET, |it| it.value.to_vec()), Ok(Some(value(11, 1))));
    assert_eq!(t.w.touch(&key(12), now + 100), Ok(true));
    assert_eq!(t.w.arith(&key(13), true, 1), Ok(ArithOutcome::NonNumeric));
    assert!(t.w.delete(&key(14)));
    assert_eq!(t.w.set(SetOp::Append, &key(15), 0, 0, b"+"), Ok(StoreOutcome::Stored));
    assert_eq!(t.w.inspect(&key(16)).map(|i| i.value_len), Some(value(16, 1).len()));
    assert_eq!(flash_stats(&t.store).reads_async, 0, "read here and now");
}
