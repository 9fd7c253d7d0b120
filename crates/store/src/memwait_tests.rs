//! Writes that wait for memory off the event loop (`memwait.rs`): a write
//! that needs a segment while none is free waits with
//! [`Ticket::MEMORY`] having changed nothing, its worker is woken once
//! when the reclaimer frees one, and a write run again waits again only a
//! bounded number of times in a row.
//! The reclaimer's thread is not run: its rounds are called here.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use crate::*;

const SEG: usize = 64 << 10;

/// A store of `n` segments of 64 KiB with its reclaimer (not running) and
/// a worker whose writes wait for memory; the count of its wake-ups.
fn store(n: usize) -> (Arc<Store>, Reclaimer, Worker, Arc<AtomicUsize>) {
    let (s, mut w) = crate::tests::store_of(Config {
        memory_limit: n * SEG,
        segment_size: SEG,
        item_size_max: 16 << 10,
        hash_power: 10,
        ..Config::default()
    });
    let r = s.reclaimer();
    let woken = Arc::new(AtomicUsize::new(0));
    let count = woken.clone();
    w.enable_memory_waits(Box::new(move || {
        count.fetch_add(1, Relaxed);
    }));
    (s, r, w, woken)
}

fn write<'a>(key: &'a [u8], value: &'a [u8]) -> Write<'a> {
    Write::new(SetOp::Set, key, 0, 0, value)
}

/// Sets new keys from `*next` on until one waits for memory; its number.
/// Every write before it is stored. At most `bound` writes.
fn fill_until_wait(w: &mut Worker, next: &mut usize, value: &[u8], bound: usize) -> usize {
    for _ in 0..bound {
        let i = *next;
        *next += 1;
        let key = format!("k{i}");
        match w.set_with(&write(key.as_bytes(), value), Reading::MayWait) {
            Ok(Flow::Ready(s)) => assert_eq!(s.outcome, StoreOutcome::Stored, "{key}"),
            Ok(Flow::Wait(t)) => {
                assert_eq!(t, Ticket::MEMORY, "{key} waits for memory, not for flash");
                return i;
            }
            Err(e) => panic!("{key}: {e}"),
        }
    }
    panic!("{bound} writes and none waited for memory");
}

fn completions(w: &mut Worker) -> Vec<Ticket> {
    let mut out = Vec::new();
    w.completions(&mut out);
    out
}

#[test]
#[cfg_attr(miri, ignore = "waits for the reclaimer on a clock (20 ms): too slow under Miri")]
fn a_write_waits_for_memory_changing_nothing_and_runs_again() {
    let (s, mut r, mut w, woken) = store(16);
    let value = vec![b'v'; 4000];
    let mut next = 0;
    // The fill stops at the first write that needs a segment once none is
    // free: well before twice the memory.
    let k = fill_until_wait(&mut w, &mut next, &value, 2 * 16 * SEG / 4000);
    let key = format!("k{k}");
    assert!(k > 16 * SEG / 4000 / 2, "waited only after memory filled: {k}");
    assert_eq!(w.get(key.as_bytes(), |_| ()), None, "waiting stored nothing");
    assert_eq!(s.stats().memory_waits, 1);
    assert_eq!(s.stats().reclaim_waited + s.stats().reclaim_inline, 0, "no write waited on its thread");
    assert_eq!(woken.load(Relaxed), 0, "nothing was freed");
    assert_eq!(completions(&mut w), [], "no wait ended");

    // A round of the reclaimer wakes the worker, once, and the write run
    // again takes a segment it freed.
    assert!(r.round() || s.stats().reclaim_background > 0);
    assert!(s.stats().reclaim_background > 0);
    assert_eq!(woken.load(Relaxed), 1, "woken once however many segments were freed");
    assert_eq!(completions(&mut w), [Ticket::MEMORY]);
    assert_eq!(completions(&mut w), [], "handed back once");
    let done = w.set_with(&write(key.as_bytes(), &value), Reading::Resumed(Ticket::MEMORY));
    assert!(matches!(done, Ok(Flow::Ready(Stored { outcome: StoreOutcome::Stored, .. }))), "{done:?}");
    assert!(w.get(key.as_bytes(), |_| ()).is_some());
    assert_eq!(s.stats().reclaim_waited + s.stats().reclaim_inline, 0, "{:?}", s.stats());

    // Run again with nothing freed meanwhile, a write waits again, up to
    // MAX_REWAITS times in a row; then it takes memory as a write without
    // the waits does: it reclaims itself once the reclaimer's wait runs out.
    let k = fill_until_wait(&mut w, &mut next, &value, 16 * SEG / 4000);
    assert_eq!(s.stats().memory_waits, 2);
    let key = format!("k{k}");
    for n in 1..=crate::memwait::MAX_REWAITS {
        let again = w.set_with(&write(key.as_bytes(), &value), Reading::Resumed(Ticket::MEMORY));
        assert_eq!(again, Ok(Flow::Wait(Ticket::MEMORY)), "wait {n} again");
    }
    assert_eq!(s.stats().memory_waits, 2 + u64::from(crate::memwait::MAX_REWAITS));
    assert_eq!(w.get(key.as_bytes(), |_| ()), None);
    let last = w.set_with(&write(key.as_bytes(), &value), Reading::Resumed(Ticket::MEMORY));
    assert!(matches!(last, Ok(Flow::Ready(Stored { outcome: StoreOutcome::Stored, .. }))), "{last:?}");
    assert!(w.get(key.as_bytes(), |_| ()).is_some());
    assert_eq!(s.stats().reclaim_inline, 1, "{:?}", s.stats());
    assert_eq!(s.stats().memory_waits, 2 + u64::from(crate::memwait::MAX_REWAITS));
    // And the count starts again: the next write short of memory waits.
    fill_until_wait(&mut w, &mut next, &value, 16 * SEG / 4000);
    s.stop_reclaimer();
}

/// Only a write whose size is known waits: an append, a write run again
/// after a flash read, and a worker without the waits take memory as before; a segment any of them frees wakes the
/// waiting worker.
#[test]
#[cfg_attr(miri, ignore = "waits for the reclaimer on a clock (20 ms): too slow under Miri")]
fn appends_resumed_writes_and_plain_workers_do_not_wait() {
    let (s, _r, mut w, woken) = store(16);
    let value = vec![b'v'; 4000];
    let mut next = 0;
    let k = fill_until_wait(&mut w, &mut next, &value, 2 * 16 * SEG / 4000);
    let app = Write::new(SetOp::Append, b"k0", 0, 0, b"more");
    let r = w.set_with(&app, Reading::MayWait);
    assert!(matches!(r, Ok(Flow::Ready(_))), "an append allocates as before: {r:?}");
    let key = format!("k{k}");
    let r = w.set_with(&write(key.as_bytes(), &value), Reading::Resumed(Ticket::unbacked(7)));
    assert!(matches!(r, Ok(Flow::Ready(_))), "resumed after a flash read: {r:?}");
    let mut plain = s.worker();
    for i in 0..16 * SEG / 4000 {
        let key = format!("p{i}");
        let r = plain.set_with(&write(key.as_bytes(), &value), Reading::MayWait);
        assert!(matches!(r, Ok(Flow::Ready(_))), "{key}: {r:?}");
    }
    assert_eq!(s.stats().memory_waits, 1);
    assert!(s.stats().reclaim_inline > 0, "{:?}", s.stats());
    assert_eq!(woken.load(Relaxed), 1, "woken once, by what the others freed");
    assert_eq!(completions(&mut w), [Ticket::MEMORY]);
    s.stop_reclaimer();
}

/// A stop wakes a waiting worker (its writes run again and find memory
/// themselves), and after it no write waits.
#[test]
fn a_stopped_reclaimer_wakes_the_waiting_and_is_not_waited_for() {
    let (s, _r, mut w, woken) = store(16);
    let value = vec![b'v'; 4000];
    let mut next = 0;
    fill_until_wait(&mut w, &mut next, &value, 2 * 16 * SEG / 4000);
    s.stop_reclaimer();
    assert_eq!(woken.load(Relaxed), 1);
    for i in 0..16 * SEG / 4000 {
        let key = format!("after{i}");
        let r = w.set_with(&write(key.as_bytes(), &value), Reading::MayWait);
        assert!(matches!(r, Ok(Flow::Ready(_))), "{key}: {r:?}");
    }
    assert_eq!(s.stats().memory_waits, 1);
}

/// Under a small budget the reclaimer keeps no segment free ahead unasked
/// (one would be 2-6% of the memory, `Store::ahead_on_demand`): it frees
/// one for a writer that waits, and one for a writer of small items whose
/// segment is half full, so that it does not wait; a writer of
/// large items waits instead of asking ahead. Under a budget of 48
/// segments or more it keeps two free, asked or not.
#[test]
#[cfg_attr(miri, ignore = "writes a few megabytes: too slow under Miri")]
fn under_a_small_budget_the_reclaimer_frees_what_writers_ask_for() {
    let (big, _r, _w, _) = store(64);
    assert!(!big.ahead_on_demand());
    assert_eq!(big.reclaim_ahead(), 2);
    let (s, mut r, mut w, woken) = store(16);
    assert!(s.ahead_on_demand());
    let wanted = || s.reclaim_state().wanted.load(Relaxed);
    let free = || s.stats().idle_free_bytes as usize / SEG;
    let freed = || s.stats().reclaim_background;
    // Values of 3,000 bytes (under a sixteenth of a segment): once memory
    // is full, a write waits and asks; one round answers it.
    let small = vec![b'v'; 3000];
    let mut next = 0;
    let k = fill_until_wait(&mut w, &mut next, &small, 2 * 16 * SEG / 3000);
    assert_eq!(wanted(), 1, "the waiting write asked once");
    assert!(r.round() || freed() > 0);
    assert_eq!((freed(), free()), (1, 2), "one freed for it, beside the cleaner's reserve");
    r.round();
    assert_eq!(freed(), 1, "nothing more freed unasked");
    assert_eq!(completions(&mut w), [Ticket::MEMORY]);
    let key = format!("k{k}");
    let done = w.set_with(&write(key.as_bytes(), &small), Reading::Resumed(Ticket::MEMORY));
    assert!(matches!(done, Ok(Flow::Ready(_))), "{done:?}");
    assert_eq!((wanted(), free()), (0, 1), "taken: the reserve alone is free");
    r.round();
    assert_eq!(freed(), 1, "nobody asked");
    // The writer's new segment fills: at half it asks ahead, a
    // round frees one, and the write that needs it does not wait.
    let mut i = 1;
    while wanted() == 0 {
        let key = format!("k{}", k + i);
        let r = w.set_with(&write(key.as_bytes(), &small), Reading::MayWait);
        assert!(matches!(r, Ok(Flow::Ready(_))), "{key}: {r:?}");
        i += 1;
        assert!(i * 3000 < SEG, "asked by the time the segment is full");
    }
    let open = w.active.segs.iter().flatten().copied().collect::<Vec<_>>();
    let used = SEG - s.room(open[0]);
    assert!(used >= SEG / 2 && used - used / i < SEG / 2, "asked at half: {used} of {SEG}");
    r.round();
    assert_eq!((freed(), free()), (2, 2));
    while w.active.segs.iter().flatten().eq(open.iter()) {
        let key = format!("k{}", k + i);
        let r = w.set_with(&write(key.as_bytes(), &small), Reading::MayWait);
        assert!(matches!(r, Ok(Flow::Ready(_))), "the next segment was ready: {key}: {r:?}");
        i += 1;
    }
    assert_eq!((wanted(), free(), s.stats().memory_waits), (0, 1, 1));
    // Values of 12 KB: no asking ahead, the writer waits when it must.
    let large = vec![b'l'; 12_000];
    next = k + i;
    let k = fill_until_wait(&mut w, &mut next, &large, 2 * 16 * SEG / 12_000);
    assert_eq!(s.stats().memory_waits, 2);
    assert_eq!(freed(), 2, "no segment freed ahead for large values");
    assert_eq!(wanted(), 1);
    assert!(w.get(format!("k{k}").as_bytes(), |_| ()).is_none());
    assert_eq!(woken.load(Relaxed), 1);
    drop(w);
    assert_eq!(wanted(), 0, "a worker that leaves asks for nothing");
    s.stop_reclaimer();
}

/// A writer of large items (12 KB: five to a 64 KiB segment) that finds
/// nothing free clears the reclaimer's next victim itself, as the
/// reclaimer would have (`Store::reclaim_cheap`): no write waits, the
/// reclaimer is never needed, and eviction is what it would have been:
/// the oldest unread items go, the items read are copied forward.
#[test]
#[cfg_attr(miri, ignore = "writes a few megabytes: too slow under Miri")]
fn a_large_write_clears_a_cheap_victim_itself() {
    let (s, _r, mut w, woken) = store(16);
    let large = vec![b'l'; 12_000];
    let n = 4 * 16 * SEG / 12_000;
    for i in 0..n {
        let key = format!("k{i}");
        let r = w.set_with(&write(key.as_bytes(), &large), Reading::MayWait);
        assert!(matches!(r, Ok(Flow::Ready(Stored { outcome: StoreOutcome::Stored, .. }))), "{key}: {r:?}");
        // The first ten are read once each: CLOCK's second chance.
        if i == 10 {
            for j in 0..10 {
                assert!(w.get(format!("k{j}").as_bytes(), |_| ()).is_some(), "k{j}");
            }
        }
    }
    let st = s.stats();
    assert!(st.reclaim_cheap >= (n - 16 * SEG / 12_000) as u64 / 5, "{st:?}");
    assert_eq!((st.memory_waits, st.reclaim_waited, st.reclaim_inline, st.reclaim_background), (0, 0, 0, 0), "{st:?}");
    assert!(st.evictions > 0, "{st:?}");
    assert_eq!(woken.load(Relaxed), 0);
    let mut held = |i: usize| w.get(format!("k{i}").as_bytes(), |_| ()).is_some();
    for j in 0..10 {
        assert!(held(j), "k{j} was read: copied forward, not evicted");
    }
    let unread: Vec<usize> = (10..n).filter(|&i| held(i)).collect();
    // FIFO among the unread: what is held is the newest, in one run.
    let first = unread[0];
    assert_eq!(unread, (first..n).collect::<Vec<_>>(), "the oldest unread items went first");
    assert!(first > 10, "{first}");
    // While a snapshot's cut holds, victims are the reclaimer's again
    // (one in the cut is handed to the snapshot, which may wait).
    s.begin_cut();
    let cheap = s.stats().reclaim_cheap;
    let mut next = n;
    fill_until_wait(&mut w, &mut next, &large, 2 * 16 * SEG / 12_000);
    assert_eq!(s.stats().reclaim_cheap, cheap);
    s.end_cut();
    s.stop_reclaimer();
}

/// A victim of many items is left to the reclaimer: a large write that
/// would take a segment of 3,000-byte items (twenty-one) waits for it,
/// having cleared nothing, and no other victim was taken instead.
#[test]
#[cfg_attr(miri, ignore = "writes a few megabytes: too slow under Miri")]
fn a_large_write_leaves_a_costly_victim_to_the_reclaimer() {
    let (s, mut r, mut w, _) = store(16);
    let small = vec![b'v'; 3000];
    let mut next = 0;
    let k = fill_until_wait(&mut w, &mut next, &small, 2 * 16 * SEG / 3000);
    // Room for the small one waiting is made by a round; the rest of the
    // segment then fills, and one more set of large items follows.
    r.round();
    let done = w.set_with(&write(format!("k{k}").as_bytes(), &small), Reading::Resumed(Ticket::MEMORY));
    assert!(matches!(done, Ok(Flow::Ready(_))), "{done:?}");
    let evicted = s.stats().evictions;
    let large = vec![b'l'; 12_000];
    let k = fill_until_wait(&mut w, &mut next, &large, 2 * 16 * SEG / 12_000);
    let st = s.stats();
    assert_eq!((st.reclaim_cheap, st.evictions), (0, evicted), "nothing cleared by the writer: {st:?}");
    assert!(w.get(format!("k{k}").as_bytes(), |_| ()).is_none());
    r.round();
    assert!(s.stats().evictions > evicted, "the reclaimer evicts it");
    s.stop_reclaimer();
}
