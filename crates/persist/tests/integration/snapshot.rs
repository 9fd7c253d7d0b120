//! Snapshots end to end through the store: save, restart on a resumed
//! clock, load, and check every value; then the same with every fault the
//! backend can inject and every kind of damage to the file.

// Test code: a panic is how a test fails (clippy.toml allows unwrap in
// #[test] functions; these helpers live beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use strata_io::sim::{FaultBackend, Faults};
use strata_persist::backend::Backend;
use strata_persist::format::{HEADER_LEN, RECORD_LEN};
use strata_persist::{load, read_header, save, OsBackend, SnapshotError, SNAPSHOT_FILE};
use strata_store::{Clock, Config, SetOp, Store, StoreOutcome, Worker};

const T0: i64 = 1_700_000_000;

fn cfg(mem: usize) -> Config {
    Config { memory_limit: mem, segment_size: 64 << 10, item_size_max: 16 << 10, hash_power: 8, ..Config::default() }
}

fn store_at(cfg: Config, clock: Clock) -> (Arc<Store>, Worker) {
    let s = Store::new(cfg, Arc::new(clock)).unwrap();
    let w = s.worker();
    (s, w)
}

type Items = HashMap<Vec<u8>, (Vec<u8>, u32, u64)>;

fn get(w: &mut Worker, k: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
    w.get(k, |it| (it.value.to_vec(), it.flags, it.cas))
}

/// Fills a store with `n` items of varied sizes and flags, some with TTLs.
fn fill(s: &Store, w: &mut Worker, n: usize) -> Items {
    let mut want = HashMap::new();
    for i in 0..n {
        let k = format!("key:{i}").into_bytes();
        let v = format!("{i}-").repeat(1 + i % 50).into_bytes();
        let exp = if i % 3 == 0 { s.clock().expiry(1000) } else { 0 };
        assert_eq!(w.set(SetOp::Set, &k, i as u32, exp, &v), Ok(StoreOutcome::Stored));
        let cas = get(w, &k).map_or(0, |g| g.2);
        want.insert(k, (v, i as u32, cas));
    }
    want
}

fn snap(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join(SNAPSHOT_FILE)
}

fn no_seal() -> impl FnMut() {
    || {}
}

/// Saves `s` (its worker dropped first, as at shutdown) to `dir`.
fn save_all(s: &Store, b: &dyn Backend, dir: &Path) -> strata_persist::SaveReport {
    save(s, b, dir, &mut no_seal()).unwrap_or_else(|e| panic!("save: {e}"))
}

/// A new store continuing `dir`'s snapshot, `later` seconds after it.
fn restart(dir: &Path, b: &dyn Backend, mem: usize, later: i64) -> (Arc<Store>, Worker, strata_persist::LoadReport) {
    let h = read_header(b, dir).unwrap().unwrap_or_else(|| panic!("no snapshot"));
    let clock =
        Clock::resume_at(h.unix_time + later, h.process_started, h.now, false).unwrap_or_else(|| panic!("timeline"));
    let s = Store::new(cfg(mem), Arc::new(clock)).unwrap();
    let r = load(&s, b, dir, 1, 0, false).unwrap_or_else(|e| panic!("load: {e}"));
    let w = s.worker();
    (s, w, r)
}

fn check_all(w: &mut Worker, want: &Items) -> usize {
    let mut found = 0;
    for (k, v) in want {
        if let Some(got) = get(w, k) {
            assert_eq!(&got, v, "{}", String::from_utf8_lossy(k));
            found += 1;
        }
    }
    found
}

#[test]
fn a_restart_brings_back_every_item_with_its_flags_cas_and_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(8 << 20), Clock::manual(T0));
    let want = fill(&s, &mut w, 3000);
    w.set(SetOp::Set, b"short", 0, s.clock().expiry(10), b"lived").unwrap();
    w.set(SetOp::Set, b"n", 0, 0, b"41").unwrap();
    drop(w);
    let report = save_all(&s, &OsBackend, &snap(&dir));
    assert!(report.segments > 1 && report.items >= 3002, "{report:?}");
    let epoch_before = s.epoch();
    drop(s);

    let (s2, mut w2, r) = restart(&snap(&dir), &OsBackend, 8 << 20, 20);
    assert!(r.complete && !r.damaged(), "{r:?}");
    assert_eq!(check_all(&mut w2, &want), want.len());
    assert_eq!(s2.stats().curr_items, 3001, "the 10 s item expired during the 20 s downtime");
    assert_eq!(get(&mut w2, b"short"), None);
    assert_eq!(w2.arith(b"n", true, 1), Ok(strata_store::ArithOutcome::Value(42)));
    // New writes get CAS values no client can hold from before.
    w2.set(SetOp::Set, b"fresh", 0, 0, b"x").unwrap();
    let fresh = get(&mut w2, b"fresh").map_or(0, |g| g.2);
    assert!(want.values().all(|v| v.2 < fresh));
    assert!(s2.epoch() > epoch_before);
    // TTLs continue: the 1000 s items die 980 s after the restart.
    s2.clock().advance(979);
    assert_eq!(get(&mut w2, b"key:0").map(|g| g.1), Some(0));
    s2.clock().advance(1);
    assert_eq!(get(&mut w2, b"key:0"), None);
    assert!(get(&mut w2, b"key:1").is_some());
}

#[test]
fn a_flush_before_the_snapshot_stays_in_effect() {
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(8 << 20), Clock::manual(T0));
    fill(&s, &mut w, 500);
    s.flush_all(None).unwrap();
    w.set(SetOp::Set, b"after", 5, 0, b"flush").unwrap();
    // A delayed flush, due after the restart.
    s.flush_all(Some(s.clock().now() + 100)).unwrap();
    drop(w);
    save_all(&s, &OsBackend, &snap(&dir));
    let (s2, mut w2, _) = restart(&snap(&dir), &OsBackend, 8 << 20, 10);
    assert_eq!(get(&mut w2, b"key:1"), None);
    assert_eq!(get(&mut w2, b"after").map(|g| g.0), Some(b"flush".to_vec()));
    s2.clock().advance(95);
    assert_eq!(get(&mut w2, b"after"), None, "the scheduled flush came due");
    // Down for longer than the delay: the flush came due meanwhile.
    let (_s3, mut w3, _) = restart(&snap(&dir), &OsBackend, 8 << 20, 200);
    assert_eq!(get(&mut w3, b"after"), None, "due while the server was down");
}

#[test]
fn a_key_overwritten_during_a_snapshot_loads_its_value_at_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(8 << 20), Clock::manual(T0));
    let want = fill(&s, &mut w, 2000);
    // Overwrites and deletes while the snapshot copies (the seal request
    // comes after its cut): the snapshot holds the values at the cut.
    let mut round = 0;
    let mut seal = || {
        round += 1;
        if round == 1 {
            for i in (0..2000).step_by(7) {
                w.set(SetOp::Set, format!("key:{i}").as_bytes(), 9, 0, b"newer").unwrap();
                w.delete(format!("key:{}", i + 1).as_bytes());
            }
        }
        w.seal_active();
    };
    let report = save(&s, &OsBackend, &snap(&dir), &mut seal).unwrap();
    assert!(report.passes >= 1 && report.items >= 2000, "{report:?}");
    drop(s);
    let (_s2, mut w2, _) = restart(&snap(&dir), &OsBackend, 8 << 20, 1);
    assert_eq!(check_all(&mut w2, &want), want.len());
}

#[test]
fn a_smaller_memory_limit_keeps_the_newest_items() {
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(8 << 20), Clock::manual(T0));
    let want = fill(&s, &mut w, 20_000);
    drop(w);
    save_all(&s, &OsBackend, &snap(&dir));
    let (s2, mut w2, r) = restart(&snap(&dir), &OsBackend, 1 << 20, 1);
    assert!(r.loose_segments > 0 && r.evicted > 0, "{r:?}");
    let found = check_all(&mut w2, &want);
    assert!(found > 0 && (found as u64) == s2.stats().curr_items, "{found}");
    assert!(get(&mut w2, b"key:19999").is_some(), "the newest item is kept");
    assert_eq!(get(&mut w2, b"key:0"), None, "the oldest are evicted");
}

#[test]
fn live_items_load_whatever_dead_versions_the_segments_hold() {
    // Issue 41, failure 2: segments full of dead versions (each key
    // overwritten many times, nothing cleaned yet) must not push live
    // items out at load, at the limit they were saved at or a smaller one
    // the live items fit.
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(16 << 20), Clock::manual(T0));
    let mut want = Items::new();
    for round in 0..8u32 {
        for i in 0..1200u32 {
            let k = format!("ow:{i}").into_bytes();
            let v = vec![b'a' + (round % 26) as u8; 900 + (i as usize % 200)];
            assert_eq!(w.set(SetOp::Set, &k, round, 0, &v), Ok(StoreOutcome::Stored));
            let cas = get(&mut w, &k).map_or(0, |g| g.2);
            want.insert(k, (v, round, cas));
        }
    }
    drop(w);
    assert_eq!(s.stats().evictions, 0);
    save_all(&s, &OsBackend, &snap(&dir));
    for mem in [16 << 20, 4 << 20] {
        let (_s2, mut w2, r) = restart(&snap(&dir), &OsBackend, mem, 1);
        assert_eq!((r.evicted, r.skipped_segments), (0, 0), "-m {mem}: {r:?}");
        assert_eq!(check_all(&mut w2, &want), want.len(), "-m {mem}: {r:?}");
    }
}

#[test]
fn live_items_load_however_few_each_segment_sealed_early_holds() {
    // Found by the crash simulator (snapshots alone, seed 0, crash point
    // 18): a snapshot of segments sealed part-filled (a snapshot seals
    // every worker's segments, a starved writer an idle worker's) holds
    // more segments than a smaller limit restores whole, though their
    // items fit in a few. The load's cleaner counted dead bytes only, not
    // the empty tails, and evicted live items instead of compacting them.
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(16 << 20), Clock::manual(T0));
    let mut want = Items::new();
    for i in 0..150u32 {
        let k = format!("part:{i}").into_bytes();
        let v = vec![b'a' + (i % 26) as u8; 100];
        assert_eq!(w.set(SetOp::Set, &k, i, 0, &v), Ok(StoreOutcome::Stored));
        let cas = get(&mut w, &k).map_or(0, |g| g.2);
        want.insert(k, (v, i, cas));
        w.seal_active();
    }
    drop(w);
    save_all(&s, &OsBackend, &snap(&dir));
    // 150 segments of 64 KiB; their items take 20 KB, which -m 4 MiB
    // (64 segments, the index and the open segments included) holds.
    let (_s2, mut w2, r) = restart(&snap(&dir), &OsBackend, 4 << 20, 1);
    assert!(r.loose_segments > 0, "the load went item by item: {r:?}");
    assert_eq!((r.evicted, r.skipped_segments), (0, 0), "{r:?}");
    assert_eq!(check_all(&mut w2, &want), want.len(), "{r:?}");
}

#[test]
fn mismatched_settings_and_versions_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(8 << 20), Clock::manual(T0));
    fill(&s, &mut w, 10);
    drop(w);
    save_all(&s, &OsBackend, &snap(&dir));
    let other = Store::new(Config { item_size_max: 32 << 10, ..cfg(8 << 20) }, Arc::new(Clock::manual(T0))).unwrap();
    let e = load(&other, &OsBackend, &snap(&dir), 1, 0, false).err().unwrap_or_else(|| panic!("expected an error"));
    assert!(matches!(e, SnapshotError::Mismatch { what: "item size limit (-I)", .. }), "{e}");
    let path = snap(&dir);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8] = 9;
    std::fs::write(&path, &bytes).unwrap();
    let e = read_header(&OsBackend, &snap(&dir)).err().unwrap_or_else(|| panic!("expected an error"));
    assert_eq!(e.to_string(), "snapshot format version 9, this server reads versions 1 to 2");
    std::fs::write(&path, b"").unwrap();
    assert!(read_header(&OsBackend, &snap(&dir)).is_err(), "a zero-length file is not a snapshot");
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(read_header(&OsBackend, &snap(&dir)), Ok(None)));
}

/// Saves a store of 3000 items and returns the directory, the file's
/// bytes and what every key held.
fn saved() -> (tempfile::TempDir, Vec<u8>, Items) {
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(8 << 20), Clock::manual(T0));
    let want = fill(&s, &mut w, 3000);
    drop(w);
    save_all(&s, &OsBackend, &snap(&dir));
    let bytes = std::fs::read(snap(&dir)).unwrap();
    (dir, bytes, want)
}

#[test]
fn a_flipped_byte_anywhere_never_serves_a_wrong_value() {
    let (dir, bytes, want) = saved();
    let path = snap(&dir);
    // Every 997th byte past the header (and each record's first bytes).
    let mut offsets: Vec<usize> = (HEADER_LEN..bytes.len()).step_by(997).collect();
    offsets.extend([HEADER_LEN, HEADER_LEN + 5, HEADER_LEN + RECORD_LEN + 3, bytes.len() - 1]);
    let b = FaultBackend::new(OsBackend);
    for at in offsets {
        b.set(Faults { flip_at: vec![at as u64], ..Faults::default() });
        let (_s, mut w, r) = restart(&snap(&dir), &b, 8 << 20, 1);
        check_all(&mut w, &want);
        assert!(r.damaged(), "flip at {at} went unnoticed: {r:?}");
    }
    // A flip inside one segment's bytes loses that segment only.
    b.set(Faults { flip_at: vec![(HEADER_LEN + RECORD_LEN + 2000) as u64], ..Faults::default() });
    let (_s, mut w, r) = restart(&snap(&dir), &b, 8 << 20, 1);
    assert_eq!((r.damaged_segments, r.truncated), (1, false), "{r:?}");
    let found = check_all(&mut w, &want);
    assert!(found > want.len() / 2 && found < want.len(), "{found}");
    let _ = path;
}

#[test]
fn a_truncated_file_loads_its_complete_prefix() {
    let (dir, bytes, want) = saved();
    let path = snap(&dir);
    let mut last = 0;
    for cut in [HEADER_LEN, HEADER_LEN + 10, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let (_s, mut w, r) = restart(&snap(&dir), &OsBackend, 8 << 20, 1);
        assert!(r.truncated && !r.complete, "{r:?}");
        let found = check_all(&mut w, &want);
        assert!(found >= last, "a longer prefix loads at least as much");
        last = found;
    }
    assert!(last > 0);
    // Strict mode refuses instead.
    let s = Store::new(cfg(8 << 20), Arc::new(Clock::manual(T0))).unwrap();
    assert!(matches!(load(&s, &OsBackend, &snap(&dir), 1, 0, true), Err(SnapshotError::Damaged(_))));
}

#[test]
fn faults_while_saving_leave_the_previous_snapshot_whole() {
    let (dir, bytes, want) = saved();
    let path = snap(&dir);
    let (s, mut w) = store_at(cfg(8 << 20), Clock::manual(T0 + 100));
    fill(&s, &mut w, 100);
    drop(w);
    let b = FaultBackend::new(OsBackend);
    let enospc = Faults { fail_write_at: Some((3_000, libc::ENOSPC)), ..Faults::default() };
    let eio = Faults { fail_write_at: Some((10, libc::EIO)), short_writes: true, ..Faults::default() };
    let sync = Faults { fail_sync: true, ..Faults::default() };
    let rename = Faults { fail_rename: true, ..Faults::default() };
    for (faults, want_msg) in [(enospc, "No space left"), (eio, "Input/output"), (sync, "fsync"), (rename, "rename")] {
        b.set(faults);
        let e = save(&s, &b, &snap(&dir), &mut no_seal()).err().unwrap_or_else(|| panic!("expected an error"));
        assert!(e.to_string().contains(want_msg), "{e}");
        assert_eq!(std::fs::read(&path).ok().as_deref(), Some(&bytes[..]), "the old snapshot is untouched");
        assert!(!strata_persist::with_suffix(&snap(&dir), ".tmp").exists(), "the partial file is removed");
    }
    // Short writes alone are only slow.
    b.set(Faults { short_writes: true, ..Faults::default() });
    save(&s, &b, &snap(&dir), &mut no_seal()).unwrap();
    let _ = want;
    // Short reads and a read error past the header.
    let (dir2, _, want2) = saved();
    b.set(Faults { short_reads: Some(7), ..Faults::default() });
    let (_s, mut w, r) = restart(&snap(&dir2), &b, 8 << 20, 1);
    assert!(!r.damaged());
    assert_eq!(check_all(&mut w, &want2), want2.len());
    b.set(Faults { fail_read_at: Some(200_000), ..Faults::default() });
    let (_s, mut w, r) = restart(&snap(&dir2), &b, 8 << 20, 1);
    assert!(r.damaged());
    check_all(&mut w, &want2);
}

#[test]
fn a_failed_read_inside_a_segment_loses_that_segment_only() {
    let (dir, _, want) = saved();
    let b = FaultBackend::new(OsBackend);
    // A bad byte inside the first segment record's bytes: the loader's
    // bulk read of that record fails, the records around it load.
    let bad = (HEADER_LEN + RECORD_LEN + 2000) as u64;
    b.set(Faults { fail_read_within: Some(bad..bad + 1), ..Faults::default() });
    let (_s, mut w, r) = restart(&snap(&dir), &b, 8 << 20, 1);
    assert_eq!((r.damaged_segments, r.truncated, r.complete), (1, false, true), "{r:?}");
    let found = check_all(&mut w, &want);
    assert!(found > want.len() / 2 && found < want.len(), "{found}");
    // Strict mode refuses instead.
    let s = Store::new(cfg(8 << 20), Arc::new(Clock::manual(T0))).unwrap();
    assert!(matches!(load(&s, &b, &snap(&dir), 1, 0, true), Err(SnapshotError::Damaged(_))));
}

fn zcfg(mem: usize) -> Config {
    let z = strata_compress::Config {
        dict_size: 1024,
        train_bytes: 8 << 10,
        sample_one_in: 1,
        ..strata_compress::Config::default()
    };
    Config { compression: Some(z), ..cfg(mem) }
}

fn json(i: usize) -> Vec<u8> {
    let words = ["fast", "cache", "server", "value", "shipping", "order", "refund"];
    format!(
        r#"{{"id":{},"user":{{"name":"user {}","email":"user{}@example.com"}},"status":"{}","note":"{}"}}"#,
        i * 7919,
        i % 13,
        i,
        words[i % 7],
        words.iter().cycle().skip(i % 5).take(3 + i % 6).copied().collect::<Vec<_>>().join(" ")
    )
    .into_bytes()
}

#[test]
fn compressed_values_come_back_with_their_dictionaries() {
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(zcfg(8 << 20), Clock::manual(T0));
    let codec = s.codec().unwrap_or_else(|| panic!("compression is on")).clone();
    codec.start_sampling();
    let mut want = HashMap::new();
    for i in 0..400 {
        w.set(SetOp::Set, format!("j{i}").as_bytes(), 0, 0, &json(i)).unwrap();
    }
    assert!(matches!(codec.train_now(), Ok(true)));
    for i in 0..400 {
        let k = format!("j{i}").into_bytes();
        w.set(SetOp::Set, &k, 3, 0, &json(i)).unwrap();
        want.insert(k.clone(), get(&mut w, &k).unwrap_or_else(|| panic!("just set")));
    }
    w.set(SetOp::Set, b"plain", 0, 0, b"tiny").unwrap();
    assert!(s.stats().compressed_items > 300);
    drop(w);
    let report = save_all(&s, &OsBackend, &snap(&dir));
    assert!(report.dicts >= 1, "{report:?}");
    drop(s);

    // With compression on, every value reads back, and new values keep
    // using the restored dictionary.
    let h = read_header(&OsBackend, &snap(&dir)).ok().flatten().unwrap_or_else(|| panic!("header"));
    let clock = Clock::resume_at(h.unix_time + 1, h.process_started, h.now, false).unwrap_or_else(|| panic!("clock"));
    let s2 = Store::new(zcfg(8 << 20), Arc::new(clock)).unwrap();
    let r = load(&s2, &OsBackend, &snap(&dir), 1, 0, false).unwrap();
    assert_eq!(r.dropped_items, 0, "{r:?}");
    let mut w2 = s2.worker();
    assert_eq!(check_all(&mut w2, &want), want.len());
    assert_eq!(s2.stats().compressed_items, s2.stats().curr_items - 1);
    let z = s2.stats().compression.unwrap_or_default();
    assert!(z.current_dict != 0 && !z.sampling, "{z:?}");

    // With compression off, compressed items cannot be read: they stay
    // out, and the plain one loads.
    let (_s3, mut w3, r) = restart(&snap(&dir), &OsBackend, 8 << 20, 1);
    assert!(r.dropped_items > 300, "{r:?}");
    assert_eq!(check_all(&mut w3, &want), 0);
    assert_eq!(get(&mut w3, b"plain").map(|g| g.0), Some(b"tiny".to_vec()));
}

#[test]
fn a_restored_cache_snapshots_and_restores_again() {
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(8 << 20), Clock::manual(T0));
    let mut want = fill(&s, &mut w, 1000);
    drop(w);
    save_all(&s, &OsBackend, &snap(&dir));
    drop(s);
    let (s2, mut w2, _) = restart(&snap(&dir), &OsBackend, 8 << 20, 5);
    for i in (0..1000).step_by(10) {
        let k = format!("key:{i}").into_bytes();
        w2.set(SetOp::Set, &k, 1, 0, b"second life").unwrap();
        want.insert(k.clone(), get(&mut w2, &k).unwrap_or_else(|| panic!("set")));
    }
    drop(w2);
    let r = save_all(&s2, &OsBackend, &snap(&dir));
    assert_eq!(r.items, 1000, "{r:?}");
    drop(s2);
    let (_s3, mut w3, _) = restart(&snap(&dir), &OsBackend, 8 << 20, 5);
    assert_eq!(check_all(&mut w3, &want), want.len());
}

#[test]
fn a_zeroed_segment_epoch_is_damage_not_a_silent_drop() {
    let (dir, bytes, want) = saved();
    // The first record is a segment; its body starts with the epoch, which
    // zeroed says "before the last flush": dropped whole, and (before the
    // fix) never checked against its CRC.
    let mut b = bytes.clone();
    let body = HEADER_LEN + RECORD_LEN;
    b[body..body + 8].fill(0);
    std::fs::write(snap(&dir), &b).unwrap();
    let (_s, mut w, r) = restart(&snap(&dir), &OsBackend, 8 << 20, 1);
    assert_eq!(r.damaged_segments, 1, "{r:?}");
    assert!(r.damaged());
    let found = check_all(&mut w, &want);
    assert!(found > want.len() / 2 && found < want.len(), "{found}");
    let s = Store::new(cfg(8 << 20), Arc::new(Clock::manual(T0))).unwrap();
    assert!(matches!(load(&s, &OsBackend, &snap(&dir), 1, 0, true), Err(SnapshotError::Damaged(_))));
}

/// The offsets of a snapshot's record headers, walked as the loader does.
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut at = HEADER_LEN;
    let mut out = Vec::new();
    while at + RECORD_LEN <= bytes.len() {
        out.push(at);
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += RECORD_LEN + len;
    }
    out
}

#[test]
fn a_damaged_record_header_ends_the_readable_part() {
    let (dir, bytes, want) = saved();
    let records = record_offsets(&bytes);
    let mid = records[records.len() / 2];
    let mut last = usize::MAX;
    for at in [mid, mid + 4, mid + 13, records[0]] {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        std::fs::write(snap(&dir), &b).unwrap();
        let (_s, mut w, r) = restart(&snap(&dir), &OsBackend, 8 << 20, 1);
        assert_eq!((r.damaged_segments, r.truncated, r.complete), (1, true, false), "flip at {at}: {r:?}");
        // What came before loads (and is right: check_all compares).
        let found = check_all(&mut w, &want);
        assert!(found < want.len(), "flip at {at}: {found} of {}", want.len());
        if at == records[0] {
            assert_eq!(found, 0);
        } else {
            assert!(found > 0 && (last == usize::MAX || found == last), "flip at {at}: {found}");
            last = found;
        }
    }
}

#[test]
fn a_value_holding_a_whole_snapshot_record_is_never_loaded_as_one() {
    // Issue 41, failure 4, the snapshot's half: a client stores a value
    // that is exactly a valid segment record (header, body, CRCs) holding
    // another key. However the record around it is damaged, the loader
    // never reads those bytes as a record.
    let forged_dir = tempfile::tempdir().unwrap();
    let (fs, mut fw) = store_at(cfg(8 << 20), Clock::manual(T0));
    fw.set(SetOp::Set, b"forged", 7, 0, b"a value nobody set").unwrap();
    drop(fw);
    save_all(&fs, &OsBackend, &snap(&forged_dir));
    let fb = std::fs::read(snap(&forged_dir)).unwrap();
    let rec = record_offsets(&fb)[0];
    let len = u32::from_le_bytes(fb[rec + 4..rec + 8].try_into().unwrap()) as usize;
    let forged_record = fb[rec..rec + RECORD_LEN + len].to_vec();

    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(8 << 20), Clock::manual(T0));
    for i in 0..40 {
        w.set(SetOp::Set, format!("pad:{i}").as_bytes(), 0, 0, &[b'p'; 700]).unwrap();
    }
    // The forged record, alone and repeated (so some copy sits at any
    // alignment a search could try).
    w.set(SetOp::Set, b"carrier", 0, 0, &forged_record).unwrap();
    w.set(SetOp::Set, b"carrier2", 0, 0, &forged_record.repeat(5)).unwrap();
    drop(w);
    save_all(&s, &OsBackend, &snap(&dir));
    let bytes = std::fs::read(snap(&dir)).unwrap();
    let carrier = bytes.windows(forged_record.len()).position(|x| x == forged_record).unwrap();
    let holder = *record_offsets(&bytes).iter().rfind(|&&r| r < carrier).unwrap();
    // Damage the holding record's header (CRC, length, kind), its body's
    // CRC, and cut the file inside the value.
    let mut cases: Vec<Vec<u8>> = Vec::new();
    for at in [holder, holder + 4, holder + 8, holder + 12, carrier - 1] {
        let mut b = bytes.clone();
        b[at] ^= 0x5A;
        cases.push(b);
    }
    cases.push(bytes[..carrier + forged_record.len() + 3].to_vec());
    for (i, b) in cases.iter().enumerate() {
        std::fs::write(snap(&dir), b).unwrap();
        let (_s, mut w, r) = restart(&snap(&dir), &OsBackend, 8 << 20, 1);
        assert!(r.damaged(), "case {i}: {r:?}");
        assert_eq!(get(&mut w, b"forged"), None, "case {i}: a client's bytes were loaded as a record: {r:?}");
    }
}

/// A saver that writes while the snapshot copies, as clients do: every
/// segment record it hears of, it stores a batch of new keys, so writers
/// need segments and the cleaner looks for victims among those the
/// snapshot has not copied yet.
struct Busy<'a> {
    w: &'a mut Worker,
    n: usize,
}

impl strata_persist::Saver for Busy<'_> {
    fn seal(&mut self) {
        self.w.seal_active();
    }

    fn progress(&mut self, _bytes: u64) {
        // Enough to need several segments per record copied, not so much
        // that eviction (a legitimate loss) begins.
        for _ in 0..100 {
            if self.n >= 60_000 {
                return;
            }
            let k = format!("during:{}", self.n);
            self.n += 1;
            let _ = self.w.set(SetOp::Set, k.as_bytes(), 0, 0, &[b'd'; 900]);
        }
    }
}

#[test]
fn items_the_cleaner_would_move_during_a_snapshot_are_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let (s, mut w) = store_at(cfg(64 << 20), Clock::manual(T0));
    // Many small sealed segments: each is at most a quarter live, so the
    // cleaner takes it first when a writer needs memory.
    let mut want = Items::new();
    for i in 0..600 {
        let k = format!("before:{i}").into_bytes();
        let v = vec![b'a' + (i % 26) as u8; 500];
        assert_eq!(w.set(SetOp::Set, &k, i, 0, &v), Ok(StoreOutcome::Stored));
        let cas = get(&mut w, &k).map_or(0, |g| g.2);
        want.insert(k, (v, i, cas));
        // The younger segments hold fewer items: the cleaner, which takes
        // the least live first, reaches them before the snapshot, which
        // copies the oldest first.
        if (i < 300 && i % 10 == 9) || (i >= 300 && i % 2 == 1) {
            w.seal_active();
        }
    }
    let mut busy = Busy { w: &mut w, n: 0 };
    save(&s, &OsBackend, &snap(&dir), &mut busy).unwrap_or_else(|e| panic!("save: {e}"));
    assert!(busy.n > 0);
    assert_eq!(s.cut_failed(), None, "the snapshot kept its cut");
    drop(w);
    assert_eq!(s.stats().evictions, 0, "nothing was evicted");
    let (_s2, mut w2, r) = restart(&snap(&dir), &OsBackend, 64 << 20, 1);
    assert!(!r.damaged(), "{r:?}");
    assert_eq!(check_all(&mut w2, &want), want.len(), "every item live when the snapshot began is in it");
}

/// Overwrites the odd keys of 600 with 1 KB values while a snapshot
/// copies; counts writes refused.
struct Overwriter<'a> {
    w: &'a mut Worker,
    n: u32,
    refused: u32,
}

impl strata_persist::Saver for Overwriter<'_> {
    fn seal(&mut self) {
        self.w.seal_active();
    }

    fn progress(&mut self, _bytes: u64) {
        // All of it before the snapshot has copied (and so released) more
        // than its first segment.
        if self.n > 0 {
            return;
        }
        for k in (1..600u32).step_by(2) {
            self.n += 1;
            if self.w.set(SetOp::Set, format!("ow:{k}").as_bytes(), 0, 0, &[b'p'; 1000]).is_err() {
                self.refused += 1;
            }
        }
    }
}

#[test]
fn a_snapshot_never_makes_a_write_fail_for_memory() {
    // With -M nothing is evicted: overwrites live on the cleaner. While a
    // snapshot holds every segment from it, a write that finds no other
    // room cleans a held one (journaled again) rather than fail.
    let dir = tempfile::tempdir().unwrap();
    let c = Config { evictions: false, ..cfg(1 << 20) };
    let (s, mut w) = store_at(c, Clock::manual(T0));
    // Every segment about half dead, none wholly: only cleaning makes room.
    for k in (0..600u32).chain((0..600).step_by(2)) {
        assert!(w.set(SetOp::Set, format!("ow:{k}").as_bytes(), 0, 0, &[b'o'; 1000]).is_ok(), "before: {k}");
    }
    let mut ow = Overwriter { w: &mut w, n: 0, refused: 0 };
    save(&s, &OsBackend, &snap(&dir), &mut ow).unwrap_or_else(|e| panic!("save: {e}"));
    assert_eq!((ow.n, ow.refused), (300, 0), "writes during the snapshot, refused");
}
