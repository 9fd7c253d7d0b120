//! A snapshot's cut, through the store's API (`cut.rs`): what is copied is
//! as of the cut, whatever happens to the cut's segments before they are
//! copied — overwritten, deleted, cleaned, evicted, reused — and nothing
//! written after it. Sized for Miri.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::testing::scaled;
use crate::*;

const SEG: usize = 16 << 10;

fn store(segments: usize) -> (Arc<Store>, Worker) {
    crate::tests::store_of(Config {
        memory_limit: segments * SEG,
        segment_size: SEG,
        item_size_max: 4 << 10,
        hash_power: 8,
        ..Config::default()
    })
}

/// Each live item of an image, to `f`.
pub(crate) fn each_item(img: &SegmentImage, mut f: impl FnMut(crate::item::Item<'_>)) {
    for &off in &img.live {
        let b = &img.bytes[off as usize..];
        let n = crate::item::Header::lengths_len(b[1]);
        let h = crate::item::Header::parse_lengths(&b[..n]);
        f(crate::item::Item::new(h, &b[..h.total_len()]));
    }
}

/// The live items of an image, key to value.
fn items_of(img: &SegmentImage) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut out = HashMap::new();
    each_item(img, |it| {
        assert!(out.insert(it.key().to_vec(), it.value().to_vec()).is_none(), "a key twice in one image");
    });
    out
}

/// Copies what the cut holds as a snapshot would: handed-off images and
/// the cut's sealed segments, until none is left; each image to `f`.
/// Returns how many were handed off.
pub(crate) fn drain_images(s: &Store, mut f: impl FnMut(&SegmentImage)) -> usize {
    let mut handed = 0;
    loop {
        while let Some(img) = s.take_handoff() {
            handed += 1;
            f(&img);
            s.release_dicts(img.dicts);
        }
        let p = s.cut_pending();
        assert_eq!(p.unsealed, 0, "everything sealed");
        if p.sealed.is_empty() {
            return handed;
        }
        let mut img = SegmentImage::default();
        for seg in p.sealed {
            if s.image(seg.segment, &mut img) {
                f(&img);
            }
        }
    }
}

/// [`drain_images`]: the keys and values, and how many were handed off.
fn drain(s: &Store) -> (HashMap<Vec<u8>, Vec<u8>>, usize) {
    let mut got = HashMap::new();
    let handed = drain_images(s, |img| {
        for (k, v) in items_of(img) {
            assert!(got.insert(k, v).is_none(), "a key twice in one cut");
        }
    });
    (got, handed)
}

fn v(i: usize, gen: u8) -> Vec<u8> {
    vec![b'a' + gen; 200 + i % 300]
}

#[test]
fn a_cut_holds_each_key_as_it_was_when_it_was_made() {
    let n = scaled(200, 60);
    let (s, mut w) = store(64);
    for i in 0..n {
        w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, 0)).unwrap();
    }
    w.delete(b"k0");
    s.begin_cut();
    // After the cut: overwrite a third, delete a third, add new keys.
    for i in (0..n).step_by(3) {
        w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, 1)).unwrap();
    }
    for i in (1..n).step_by(3) {
        w.delete(format!("k{i}").as_bytes());
    }
    for i in 0..20 {
        w.set(SetOp::Set, format!("new{i}").as_bytes(), 0, 0, b"after").unwrap();
    }
    w.seal_active();
    let (got, _) = drain(&s);
    s.end_cut();
    let want: HashMap<Vec<u8>, Vec<u8>> = (1..n).map(|i| (format!("k{i}").into_bytes(), v(i, 0))).collect();
    assert_eq!(got, want, "every key as at the cut, k0 deleted before it, nothing written after");
}

#[test]
fn segments_of_the_cut_freed_before_their_copy_are_handed_off() {
    // A store the writes fill: segments of the cut are evicted and
    // cleaned (overwrites leave them dead) before the snapshot copies
    // any of them, and reused.
    // Half of memory in the cut (the index takes a segment's worth).
    let (s, mut w) = store(12);
    let keys = 240;
    for i in 0..keys {
        w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, 0)).unwrap();
    }
    s.begin_cut();
    // Twice memory and more, so the cut's segments are reused (two
    // rounds do it already: under Miri, where each set costs, two).
    let rounds = scaled(8, 2);
    for g in 1..=rounds {
        for i in 0..keys {
            w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, g as u8)).unwrap();
        }
    }
    w.seal_active();
    let (got, handed) = drain(&s);
    assert!(handed > 0, "some segment of the cut was freed before its copy");
    assert_eq!(s.cut_failed(), None);
    s.end_cut();
    assert_eq!(s.stats().evictions, 0, "live data fits: overwrites are cleaned, not evicted");
    for i in 0..keys {
        let k = format!("k{i}").into_bytes();
        assert_eq!(got.get(&k), Some(&v(i, 0)), "k{i} as at the cut ({handed} handed off)");
    }
}

/// Eviction copies read items of a quarter of a segment into its main
/// target and the spares it keeps open beside it (`Copies::new_target`):
/// a cut made while spares hold items has each of them, as written before
/// the cut, though writes that go on evicting and copying fill the store
/// several times over before the snapshot copies anything.
#[test]
fn a_cut_holds_what_the_spare_copy_targets_held() {
    let (s, mut w) = store(16);
    let value = |i: usize, gen: u8| vec![b'a' + gen; 2500 + i * 97 % 1500];
    let keys = scaled(120, 60);
    // Read after each set: eviction copies them forward.
    let write_round = |w: &mut Worker, gen: u8| {
        for i in 0..keys {
            let k = format!("k{i}").into_bytes();
            w.set(SetOp::Set, &k, 0, 0, &value(i, gen)).unwrap();
            assert!(w.get(&k, |_| ()).is_some());
        }
    };
    let mut rounds = 0;
    while w.active.copies.spares().next().is_none() {
        write_round(&mut w, 0);
        rounds += 1;
        assert!(rounds < 20, "no spare kept: {:?}", s.stats());
    }
    let spares: Vec<u32> = w.active.copies.spares().collect();
    let in_spares: usize = spares.iter().map(|&t| s.seg(t).live_items.load(Relaxed) as usize).sum();
    assert!(in_spares > 0, "the spares hold items");
    let live = s.stats().curr_items as usize;
    s.begin_cut();
    assert!(spares.iter().all(|&t| s.frozen(t)), "the spares are in the cut");
    // What a snapshot asks each worker to do once its cut is made.
    w.seal_active();
    assert_eq!(s.cut_pending().unsealed, 0, "the worker's seal leaves nothing of the cut open");
    for g in 1..=scaled(4, 1) as u8 {
        write_round(&mut w, g);
    }
    w.seal_active();
    let (got, _) = drain(&s);
    s.end_cut();
    assert!(s.stats().evictions > 0);
    assert_eq!(got.len(), live, "every item live at the cut");
    for (k, v) in &got {
        let i: usize = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
        assert_eq!(*v, value(i, 0), "k{i} as written before the cut");
    }
}

#[test]
fn a_write_that_raced_the_cut_moves_to_a_segment_after_it() {
    let (s, mut w) = store(16);
    w.set(SetOp::Set, b"a", 0, 0, b"before").unwrap();
    // The worker's active segment is in the cut: the next write there is
    // refused under the lock and made in a new segment.
    s.begin_cut();
    w.set(SetOp::Set, b"b", 0, 0, b"after").unwrap();
    w.set(SetOp::Append, b"a", 0, 0, b"+later").unwrap();
    w.seal_active();
    let (got, _) = drain(&s);
    s.end_cut();
    assert_eq!(got.get(&b"a"[..]), Some(&b"before".to_vec()));
    assert_eq!(got.get(&b"b"[..]), None, "written after the cut");
    assert_eq!(w.get(b"a", |it| it.value.to_vec()), Some(b"before+later".to_vec()));
}

/// The cut published between a replacing unlink's look at the new
/// version's segment and its note of the old version's death: both
/// versions were saved (the wire test of snapshots with large values, once
/// in five `make test` runs). One look decides both.
#[test]
fn a_cut_that_begins_inside_an_overwrite_holds_one_version() {
    let (s, mut w) = store(16);
    w.set(SetOp::Set, b"a", 0, 0, b"before").unwrap();
    let cutter = s.clone();
    crate::cut::AFTER_CUT_LOOK.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || {
            cutter.begin_cut();
        }))
    });
    // A different length: not written in place.
    w.set(SetOp::Set, b"a", 0, 0, b"meanwhile").unwrap();
    assert!(s.cut_active(), "the hook began the cut");
    w.seal_active();
    let (got, _) = drain(&s);
    s.end_cut();
    assert_eq!(got.get(&b"a"[..]), Some(&b"meanwhile".to_vec()), "the version linked at the cut");
}

/// A cut that ended (its snapshot written) between a delete's look at it
/// and its note of the death: the note stayed in the segment's died list,
/// and the next cut saved the deleted item.
#[test]
fn a_death_noted_as_a_cut_ends_is_not_saved_by_the_next() {
    let (s, mut w) = store(16);
    w.set(SetOp::Set, b"a", 0, 0, b"deleted").unwrap();
    w.set(SetOp::Set, b"b", 0, 0, b"kept").unwrap();
    w.seal_active();
    s.begin_cut();
    let ender = s.clone();
    crate::cut::AFTER_CUT_LOOK.with(|h| *h.borrow_mut() = Some(Box::new(move || ender.end_cut())));
    assert!(w.delete(b"a"));
    assert!(!s.cut_active(), "the hook ended the cut");
    s.begin_cut();
    let (got, _) = drain(&s);
    s.end_cut();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got.get(&b"b"[..]), Some(&b"kept".to_vec()));
}

/// Rounds of overwriting every key: several times memory, so the cut's
/// segments are freed and reused while the snapshot has not copied them.
const ROUNDS: usize = 8;

fn overwrite_all(s: &Arc<Store>, keys: usize) -> std::thread::JoinHandle<()> {
    overwrite_share(s, keys, 0, 1)
}

/// A writer thread overwriting keys `k<i>` with `i % of == share`.
fn overwrite_share(s: &Arc<Store>, keys: usize, share: usize, of: usize) -> std::thread::JoinHandle<()> {
    let s = s.clone();
    std::thread::spawn(move || {
        let mut w = s.worker();
        for g in 1..=ROUNDS {
            for i in (share..keys).step_by(of) {
                w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, g as u8)).unwrap();
            }
        }
        w.seal_active();
    })
}

#[test]
#[cfg_attr(miri, ignore = "waits on real time")]
fn a_starved_snapshot_holds_writers_back_and_keeps_its_cut() {
    // The snapshot thread gets no CPU for a while (a machine whose cores
    // are all busy, the snapshot at idle priority): the writer fills the
    // hand-off queue and waits for it, however long, as long as the
    // snapshot then takes images. A 50 ms bound on that wait once failed
    // the snapshot here (tests/wire/test_snapshot_point_in_time.py under
    // two busy loops).
    //
    // Two writers: while one waits to hand a segment off, holding the
    // segment it cleared (and maybe the reserve, as its copy target), the
    // other finds nothing free to clean into; it waits for that segment
    // rather than evict live items (it once evicted).
    //
    // Live data is over half of memory: the first round of overwrites
    // cannot finish in the memory the cut left free (its new versions all
    // live), so segments of the cut must be freed, and handed off, at once.
    let keys = 1000;
    let (s, mut w) = store(40);
    for i in 0..keys {
        w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, 0)).unwrap();
    }
    w.seal_active();
    assert_eq!(s.stats().evictions, 0, "every key is in the cut");
    s.begin_cut();
    let writers = [overwrite_share(&s, keys, 0, 2), overwrite_share(&s, keys, 1, 2)];
    let done = |ws: &[std::thread::JoinHandle<()>]| ws.iter().all(|w| w.is_finished());
    let waited = |s: &Store| s.handoff_waiting() || s.handoff_waited() > Duration::ZERO;
    let started = Instant::now();
    while !waited(&s) && !done(&writers) && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(waited(&s), "a writer found the hand-off queue full and waited ({} handed off)", s.handed_off());
    // Starved four times longer than the old bound.
    std::thread::sleep(Duration::from_millis(200));
    assert!(!done(&writers), "the writers are held back while nothing is taken");
    assert_eq!(s.cut_failed(), None, "a slow snapshot is not a failed one");
    let mut got = HashMap::new();
    let mut handed = 0;
    while !done(&writers) {
        while let Some(img) = s.take_handoff() {
            handed += 1;
            got.extend(items_of(&img));
            s.release_dicts(img.dicts);
        }
        s.wait_handoff(Duration::from_millis(1));
    }
    for w in writers {
        w.join().unwrap();
    }
    let (rest, more) = drain(&s);
    assert_eq!(s.cut_failed(), None);
    assert!(s.handoff_waited() >= Duration::from_millis(200), "{:?}", s.handoff_waited());
    s.end_cut();
    for (k, val) in rest {
        assert!(got.insert(k, val).is_none(), "a key twice in one cut");
    }
    assert!(handed + more > 0);
    for i in 0..keys {
        assert_eq!(got.get(format!("k{i}").as_bytes()), Some(&v(i, 0)), "k{i} as at the cut");
    }
    for i in 0..keys {
        let last = Some(v(i, ROUNDS as u8));
        let st = s.stats();
        let why = (st.evictions, st.alloc_waited, st.alloc_last_resort, st.segments_evicted);
        assert_eq!(w.get(format!("k{i}").as_bytes(), |it| it.value.to_vec()), last, "k{i}: every write landed {why:?}");
    }
    assert_eq!(s.stats().evictions, 0, "live data fits: nothing is evicted for a slow snapshot");
}

#[test]
#[cfg_attr(miri, ignore = "waits on real time")]
fn a_cut_whose_snapshot_takes_nothing_fails_and_writes_go_on() {
    // Nobody drains the hand-off queue (a snapshot whose disk hung): past
    // its bound a freeing writer waits the stall bound, then fails the
    // cut, and writes go on.
    let (s, mut w) = store(12);
    s.set_handoff_stall(Duration::from_millis(50));
    for i in 0..360 {
        w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, 0)).unwrap();
    }
    w.seal_active();
    s.begin_cut();
    overwrite_all(&s, 360).join().unwrap();
    let why = s.cut_failed().expect("the hand-off queue outgrew its bound");
    assert!(why.contains("took nothing"), "{why}");
    assert!(!s.cut_active());
    assert!(s.handoff_waited() >= Duration::from_millis(50));
    s.end_cut();
}

/// A store with no segment free, not even the cleaner's reserve (another
/// thread holds it as a copy target, as at a snapshot's cut, when every
/// cleaner needs a new target at once), and two sealed segments nearly
/// dead: cleaning either is worth it but has nowhere to copy its one live
/// item. Returns the reserve segment taken and the keys still live.
fn no_room_to_clean() -> (Arc<Store>, Worker, u32, Vec<Vec<u8>>) {
    let (s, mut w) = store(16);
    let mut keys = Vec::new();
    // Values of 1.5-2 KB: eight or so to a segment, each segment mostly
    // dead once all but one of its items are deleted (smaller ones took
    // 700 sets to fill the store, a minute under Miri).
    while s.spare() > crate::segments::RESERVE_SEGMENTS {
        let k = format!("k{}", keys.len()).into_bytes();
        w.set(SetOp::Set, &k, 0, 0, &vec![b'a'; 1500 + keys.len() * 61 % 500]).unwrap();
        keys.push(k);
    }
    w.seal_active();
    assert_eq!(s.stats().evictions, 0);
    let reserve = s.pop_free(false).expect("the reserve");
    assert_eq!(s.spare(), 0);
    let mut img = SegmentImage::default();
    for seg in s.sealed_segments().iter().take(2) {
        assert!(s.image(seg.segment, &mut img));
        for k in items_of(&img).into_keys().skip(1) {
            assert!(w.delete(&k));
            keys.retain(|x| *x != k);
        }
    }
    (s, w, reserve, keys)
}

#[test]
#[cfg_attr(miri, ignore = "waits on real time")]
fn a_writer_with_nothing_to_clean_into_waits_for_a_segment_being_cleared() {
    // Another thread is clearing a victim: it gives a segment back in
    // 100 ms. The writer waits for it and cleans, rather than evict (a
    // writer once evicted here: tests/wire/test_snapshot_point_in_time.py
    // under two busy loops, 1 to 3 rounds in 8).
    let (s, mut w, reserve, keys) = no_room_to_clean();
    s.reclaim_state().clearing.fetch_add(1, Relaxed);
    let s2 = s.clone();
    let other = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        s2.unuse(reserve);
        s2.cleared(true);
    });
    w.set(SetOp::Set, b"new", 0, 0, &[b'n'; 300]).unwrap();
    other.join().unwrap();
    let st = s.stats();
    assert!(st.alloc_waited > 0, "the writer waited");
    assert_eq!(st.evictions, 0, "nothing evicted while a clean was possible");
    for k in &keys {
        assert!(w.get(k, |_| ()).is_some(), "{} kept", String::from_utf8_lossy(k));
    }
}

#[test]
#[cfg_attr(miri, ignore = "waits on real time")]
fn a_writer_waits_for_a_segment_being_cleared_a_second_at_most() {
    // The segment never comes back (a thread stuck): after a second the
    // writer evicts after all, and its write is not refused.
    let (s, mut w, _reserve, _) = no_room_to_clean();
    s.reclaim_state().clearing.fetch_add(1, Relaxed);
    let started = Instant::now();
    w.set(SetOp::Set, b"new", 0, 0, &[b'n'; 300]).unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(s.stats().evictions > 0);
    assert_eq!(w.get(b"new", |it| it.value.len()), Some(300));
}

#[test]
fn a_clean_claims_the_room_for_its_victim_before_it_starts() {
    // Only the reserve is free, and the worker has no copy target: the
    // step that picks a victim to clean claims the reserve then, not
    // half-way through the victim (when another thread may have taken it,
    // and the rest of the victim was evicted).
    let (s, _w, reserve, _) = no_room_to_clean();
    s.unuse(reserve);
    assert_eq!(s.spare(), 1);
    let mut active = crate::segments::Active::new(&s, Arc::default(), false);
    let Some(crate::evict::Step::Victim(victim, how @ crate::evict::Clear::Clean(_))) =
        s.step(&mut active, crate::evict::Pass::Full, false)
    else {
        panic!("a nearly dead segment is cleaned");
    };
    assert!(active.copies.claimed().is_some(), "a segment claimed for its live items");
    assert_eq!(s.spare(), 0, "the reserve is claimed now");
    assert!(s.free_victim(victim, how, &mut active));
    assert_eq!(active.copies.claimed(), None);
    assert_eq!(active.counters.evictions.load(Relaxed), 0, "its live item was copied");
    assert_eq!(s.spare(), 1, "and the victim refilled the reserve");
}
