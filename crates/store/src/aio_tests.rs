//! Asynchronous reads from flash through the store's API: an operation
//! that needs a record not yet read stops with `Pending` and changes
//! nothing; once an I/O thread has read it, the operation runs again
//! without a second read; reads of one address coalesce; a parked
//! operation whose record was let go reads it itself; a failed read is a
//! miss. (Files on disk: not under Miri.)

// Test code: a panic is how a test fails (clippy.toml allows unwrap in
// #[test] functions; these helpers live beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::tier_tests::{fill, flash_stats, key, tier_cfg, value, Tier};
use crate::*;

/// Counts the I/O threads' wake-ups.
struct Signal(Mutex<u64>, Condvar);

/// 20,000 items over 8 MiB of memory (keys 0.. are on flash), and a
/// worker with asynchronous reads on, `recache_rate` as given. The device
/// says no record is in memory, so every read goes to the I/O threads.
fn async_tier(recache_rate: u32) -> (Tier, Arc<Signal>) {
    let (t, sig) = async_tier_cached(recache_rate);
    t.faults.lock().slow = true;
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

/// Waits (at most 10 s) until no read is in flight; the addresses of
/// the reads that finished.
fn finished(t: &mut Tier, sig: &Signal) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    loop {
        let idle = flash_stats(&t.store).io_queue == 0;
        // A read leaves the queue before it is handed over: look once more.
        t.w.flash_completions(&mut out);
        if idle {
            return out;
        }
        assert!(Instant::now() < deadline, "reads still in flight after 10 s");
        let mut n = sig.0.lock();
        sig.1.wait_for(&mut n, Duration::from_millis(20));
    }
}

fn read(t: &mut Tier, k: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
    t.w.read(k, &ReadOpts::GET, |it| it.value.to_vec())
}

#[test]
fn a_read_waits_for_the_io_threads_then_needs_no_second_read() {
    let (mut t, sig) = async_tier(0);
    let before = flash_stats(&t.store);
    assert_eq!(read(&mut t, &key(0)), Err(StoreError::Pending));
    let addr = t.w.take_blocked().unwrap_or_else(|| panic!("it says what it waits for"));
    assert_eq!(t.w.take_blocked(), None, "said once");
    assert!(finished(&mut t, &sig).contains(&addr));
    assert!(*sig.0.lock() >= 1, "the worker was woken");
    assert_eq!(read(&mut t, &key(0)), Ok(Some(value(0, 1))));
    assert_eq!(t.w.take_blocked(), None);
    let after = flash_stats(&t.store);
    assert_eq!(after.reads - before.reads, 1, "one read, by an I/O thread");
    assert_eq!((after.reads_async, after.hits - before.hits), (1, 1));
    assert_eq!(after.items, before.items, "a plain read leaves the item on flash");
}

#[test]
fn reads_of_one_record_coalesce() {
    let (mut t, sig) = async_tier(0);
    for _ in 0..3 {
        assert_eq!(read(&mut t, &key(1)), Err(StoreError::Pending));
    }
    let fs = flash_stats(&t.store);
    assert_eq!((fs.reads_async, fs.reads_coalesced), (1, 2));
    finished(&mut t, &sig);
    for _ in 0..3 {
        assert_eq!(read(&mut t, &key(1)), Ok(Some(value(1, 1))));
    }
    assert_eq!(flash_stats(&t.store).reads_async, 1);
}

#[test]
fn changes_wait_for_the_read_and_then_run_once() {
    let (mut t, sig) = async_tier(0);
    let now = t.store.clock().now();
    assert_eq!(t.w.set(SetOp::Append, &key(3), 0, 0, b"+tail"), Err(StoreError::Pending));
    assert_eq!(t.w.touch(&key(5), now + 100), Err(StoreError::Pending));
    assert_eq!(t.w.delete_with(&key(4), &Delete::default()), Err(StoreError::Pending));
    assert_eq!(t.w.arith(&key(6), true, 1), Err(StoreError::Pending));
    finished(&mut t, &sig);
    // Run again, each once, with the records in hand.
    assert_eq!(t.w.set(SetOp::Append, &key(3), 0, 0, b"+tail"), Ok(StoreOutcome::Stored));
    assert_eq!(t.w.touch(&key(5), now + 100), Ok(true));
    assert_eq!(t.w.delete_with(&key(4), &Delete::default()), Ok(DeleteOutcome::Deleted));
    assert_eq!(t.w.arith(&key(6), true, 1), Ok(ArithOutcome::NonNumeric));
    let mut appended = value(3, 1);
    appended.extend_from_slice(b"+tail");
    assert_eq!(read(&mut t, &key(3)), Ok(Some(appended)));
    assert_eq!(t.w.inspect(&key(5)).map(|i| i.expiry), Some(now + 100));
    assert_eq!(read(&mut t, &key(4)), Ok(None));
    assert_eq!(read(&mut t, &key(6)), Ok(Some(value(6, 1))), "a failed incr changes nothing");
}

#[test]
fn a_parked_operation_may_read_its_own_record_and_nothing_else() {
    let (mut t, sig) = async_tier(0);
    assert_eq!(read(&mut t, &key(7)), Err(StoreError::Pending));
    let addr = t.w.take_blocked().unwrap_or_else(|| panic!("blocked"));
    // As if its record had been let go before the connection ran again.
    t.w.allow_sync_read(Some(addr));
    assert_eq!(read(&mut t, &key(8)), Err(StoreError::Pending), "another record still waits");
    assert_eq!(read(&mut t, &key(7)), Ok(Some(value(7, 1))), "its own is read here and now");
    t.w.allow_sync_read(None);
    finished(&mut t, &sig);
    assert_eq!(read(&mut t, &key(8)), Ok(Some(value(8, 1))));
}

#[test]
fn a_failed_read_is_a_miss_never_a_value() {
    let (mut t, sig) = async_tier(0);
    t.faults.lock().read_eio = true;
    assert_eq!(read(&mut t, &key(9)), Err(StoreError::Pending));
    finished(&mut t, &sig);
    assert_eq!(read(&mut t, &key(9)), Ok(None));
    t.faults.lock().read_eio = false;
    let fs = flash_stats(&t.store);
    assert!(fs.read_errors >= 1 && fs.misses >= 1, "{fs:?}");
    assert_eq!(read(&mut t, &key(10)), Err(StoreError::Pending));
    finished(&mut t, &sig);
    assert_eq!(read(&mut t, &key(10)), Ok(Some(value(10, 1))), "the next read works");
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
        assert_eq!(read(&mut t, &key(i)), Ok(Some(value(i, 1))), "key {i}");
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
        assert_eq!(read(&mut t, &key(i)), Ok(Some(value(i, 1))), "key {i}");
    }
    let after = flash_stats(&t.store);
    assert_eq!((after.reads_async, after.hits - before.hits), (0, 100), "no read handed over");
    // The same records once the device says they are not in memory.
    t.faults.lock().slow = true;
    assert_eq!(read(&mut t, &key(100)), Err(StoreError::Pending));
}
