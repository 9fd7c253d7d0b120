//! The durability log: group commit from many threads, reading back, torn
//! tails, rotation, failures, and replaying into a store.

// Test code: a panic is how a test fails (clippy.toml allows unwrap in
// #[test] functions; these helpers live beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;

use strata_io::sim::{FaultBackend, Faults};
use strata_persist::backend::Backend;
use strata_persist::wal::{log_files, log_path, read_log, replay, Op};
use strata_persist::{Durability, OsBackend, Wal, WalJournal};
use strata_store::{Clock, Config, SetOp, Store, Worker};

fn snap(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("strata.snapshot")
}

fn read_all(b: &dyn Backend, path: &std::path::Path) -> (Vec<(Op, Vec<u8>)>, bool) {
    let mut out = Vec::new();
    let r = read_log(b, path, &mut |e| out.push((e.op, e.payload))).unwrap();
    (out, r.torn)
}

#[test]
fn group_commit_keeps_every_record_in_order_and_shares_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(Wal::open(Arc::new(OsBackend), &snap(&dir), 1, Durability::Always).unwrap());
    // The helper fills zeros ahead while the writer commits.
    wal.set_prealloc(8 << 10);
    let woken = Arc::new(AtomicU64::new(0));
    let w2 = woken.clone();
    wal.on_durable(Box::new(move || {
        w2.fetch_add(1, Relaxed);
    }));
    let writer = {
        let wal = wal.clone();
        std::thread::spawn(move || wal.run())
    };
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let wal = wal.clone();
            s.spawn(move || {
                for i in 0..500u32 {
                    let at = wal.append(Op::Delete, &[&[t], &i.to_le_bytes()]);
                    // Wait for durability, as a client's reply does.
                    while wal.durable() < at {
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
    wal.stop();
    writer.join().unwrap_or_else(|_| panic!("writer"));
    let (records, torn) = read_all(&OsBackend, &log_path(&snap(&dir), 1));
    assert!(!torn);
    assert_eq!(records.len(), 2000);
    let mut next = [0u32; 4];
    for (op, p) in records {
        assert_eq!(op, Op::Delete);
        let (t, i) = (p[0] as usize, u32::from_le_bytes([p[1], p[2], p[3], p[4]]));
        assert_eq!(i, next[t], "thread {t}'s records in its order");
        next[t] += 1;
    }
    let syncs = wal.syncs.load(Relaxed);
    assert!((1..=2000).contains(&syncs), "{syncs}");
    assert!(woken.load(Relaxed) >= syncs);
}

#[test]
fn a_torn_tail_reads_its_whole_records_and_rotation_trims() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(Arc::new(OsBackend), &snap(&dir), 1, Durability::Always).unwrap();
    for i in 0..10u8 {
        wal.append(Op::State, &[&[i], b"key"]);
    }
    assert_eq!(wal.rotate().ok(), Some(2), "rotation writes what is pending to the old file");
    wal.append(Op::Flush, &[]);
    wal.flush().unwrap();
    let p1 = log_path(&snap(&dir), 1);
    let bytes = std::fs::read(&p1).unwrap();
    assert_eq!(read_all(&OsBackend, &p1).0.len(), 10);
    std::fs::write(&p1, &bytes[..bytes.len() - 3]).unwrap();
    let (records, torn) = read_all(&OsBackend, &p1);
    assert!(torn);
    assert_eq!(records.len(), 9);
    let mut flipped = bytes.clone();
    flipped[40] ^= 1;
    std::fs::write(&p1, &flipped).unwrap();
    let (records, torn) = read_all(&OsBackend, &p1);
    assert!(torn && records.len() < 10);
    assert_eq!(log_files(&OsBackend, &snap(&dir)).len(), 2);
    strata_persist::wal::trim_before(&OsBackend, &snap(&dir), 2);
    let left: Vec<u64> = log_files(&OsBackend, &snap(&dir)).into_iter().map(|(n, _)| n).collect();
    assert_eq!(left, vec![2]);
}

#[test]
fn a_failed_write_or_fsync_stops_the_log_and_says_so() {
    for faults in [
        Faults { fail_write_at: Some((100, libc::ENOSPC)), ..Faults::default() },
        Faults { fail_sync: true, ..Faults::default() },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let fb = FaultBackend::new(OsBackend);
        let wal = Arc::new(Wal::open(Arc::new(fb.clone()), &snap(&dir), 1, Durability::Always).unwrap());
        fb.set(faults);
        let writer = {
            let wal = wal.clone();
            std::thread::spawn(move || wal.run())
        };
        let mut at = 0;
        for i in 0..100u32 {
            at = wal.append(Op::Delete, &[&i.to_le_bytes(), &[0; 20]]);
        }
        let durable_before = wal.durable();
        let t0 = std::time::Instant::now();
        while !wal.failed() && t0.elapsed().as_secs() < 5 {
            std::thread::yield_now();
        }
        assert!(wal.failed(), "the failure is reported");
        assert!(wal.durable() < at && wal.durable() == durable_before, "nothing unwritten is called durable");
        wal.stop();
        writer.join().unwrap_or_else(|_| panic!("writer"));
    }
}

fn store(mem: usize) -> (Arc<Store>, Worker) {
    let cfg = Config {
        memory_limit: mem,
        segment_size: 64 << 10,
        item_size_max: 16 << 10,
        hash_power: 8,
        ..Config::default()
    };
    let s = Store::new(cfg, Arc::new(Clock::manual(1_700_000_000))).unwrap();
    let w = s.worker();
    (s, w)
}

fn get(w: &mut Worker, k: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
    w.get(k, |it| (it.value.to_vec(), it.flags, it.cas))
}

#[test]
fn replaying_the_journal_rebuilds_what_clients_changed() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(Wal::open(Arc::new(OsBackend), &snap(&dir), 1, Durability::Always).unwrap());
    let (s, mut w) = store(8 << 20);
    s.set_journal(Arc::new(WalJournal(wal.clone())));
    let mut want = HashMap::new();
    for i in 0..300u32 {
        let k = format!("k{i}").into_bytes();
        let exp = if i % 5 == 0 { s.clock().expiry(100) } else { 0 };
        w.set(SetOp::Set, &k, i, exp, format!("v{i}").as_bytes()).unwrap();
    }
    assert!(w.take_journaled() > 0, "changes report their log position");
    for i in (0..300u32).step_by(3) {
        w.delete(format!("k{i}").as_bytes());
    }
    w.set(SetOp::Append, b"k1", 0, 0, b"+more").unwrap();
    w.set(SetOp::Set, b"n", 0, 0, b"41").unwrap();
    w.arith(b"n", true, 1).unwrap();
    w.touch(b"k2", s.clock().expiry(50)).unwrap();
    for i in 0..300u32 {
        let k = format!("k{i}").into_bytes();
        want.insert(k.clone(), get(&mut w, &k));
    }
    want.insert(b"n".to_vec(), get(&mut w, b"n"));
    wal.flush().unwrap();
    drop(w);

    // A fresh store on the same timeline, 60 s later: replay brings back
    // every value, flag and CAS; the touched key has expired.
    let clock = Clock::resume_at(s.clock().unix_now() + 60, s.clock().process_started(), s.clock().now(), false)
        .unwrap_or_else(|| panic!("clock"));
    let s2 = Store::new(s.config().clone(), Arc::new(clock)).unwrap();
    let mut w2 = s2.worker();
    let r = replay(&OsBackend, &snap(&dir), 0, &mut w2).unwrap();
    assert_eq!((r.files, r.skipped, r.torn), (1, 0, 0), "{r:?}");
    for (k, v) in &want {
        let got = get(&mut w2, k);
        if k == b"k2" {
            assert_eq!(got, None, "touched to 50 s, 60 s ago");
        } else {
            assert_eq!(&got, v, "{}", String::from_utf8_lossy(k));
        }
    }
    // A flush in the log empties what came before it.
    let (s3, mut w3) = store(8 << 20);
    s3.set_journal(Arc::new(WalJournal(wal.clone())));
    w3.set(SetOp::Set, b"x", 0, 0, b"1").unwrap();
    s3.flush_all(None).unwrap();
    w3.set(SetOp::Set, b"y", 0, 0, b"2").unwrap();
    wal.flush().unwrap();
    let mut w4 = s2.worker();
    replay(&OsBackend, &snap(&dir), 0, &mut w4).unwrap();
    assert_eq!(get(&mut w4, b"x"), None);
    assert_eq!(get(&mut w4, b"k5"), None, "the flush took everything before it");
    assert_eq!(get(&mut w4, b"y").map(|g| g.0), Some(b"2".to_vec()));
}

/// A log of records of every small size, as bytes, and where each ends.
fn small_log(dir: &tempfile::TempDir) -> (Vec<u8>, Vec<usize>) {
    let wal = Wal::open(Arc::new(OsBackend), &snap(dir), 1, Durability::Always).unwrap();
    for i in 0..6u8 {
        wal.append(Op::Delete, &[&vec![i; usize::from(i) * 3]]);
    }
    wal.flush().unwrap();
    let bytes = std::fs::read(log_path(&snap(dir), 1)).unwrap();
    let mut ends = vec![16];
    for i in 0..6usize {
        ends.push(ends[i] + 12 + i * 3);
    }
    assert_eq!(ends.last(), Some(&bytes.len()));
    (bytes, ends)
}

#[test]
fn a_log_cut_at_every_byte_reads_exactly_its_whole_records() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = small_log(&dir);
    let path = log_path(&snap(&dir), 1);
    for cut in 0..=bytes.len() {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let (records, torn) = read_all(&OsBackend, &path);
        let whole = ends.iter().filter(|&&e| e <= cut).count().saturating_sub(1);
        assert_eq!(records.len(), whole, "cut at {cut}");
        for (i, (op, p)) in records.iter().enumerate() {
            assert_eq!((*op, p.as_slice()), (Op::Delete, vec![i as u8; i * 3].as_slice()), "cut at {cut}");
        }
        assert_eq!(torn, cut != 0 && !ends.contains(&cut), "cut at {cut}");
    }
}

#[test]
fn bytes_after_the_last_record_are_a_torn_tail_not_a_failed_start() {
    // A crash mid-append leaves 1-11 bytes of a record head after the last
    // whole record (issue 30: start panicked in `read_at`).
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = small_log(&dir);
    let path = log_path(&snap(&dir), 1);
    for extra in 1..=40usize {
        let mut b = bytes.clone();
        b.extend((0..extra).map(|i| (i * 37 + 5) as u8));
        std::fs::write(&path, &b).unwrap();
        let (records, torn) = read_all(&OsBackend, &path);
        assert_eq!((records.len(), torn), (6, true), "{extra} bytes after");
        let (_s, mut w) = store(8 << 20);
        let r = replay(&OsBackend, &snap(&dir), 0, &mut w).unwrap();
        assert_eq!((r.records, r.torn), (6, 1), "{extra} bytes after");
    }
}

#[test]
fn rotation_never_calls_durable_what_the_writer_has_not_written() {
    // The writer thread takes the pending records and writes them; a
    // rotation in between used to publish their position as durable
    // before they were written, and the writer then put them in the new
    // file. Appends from four threads while another rotates: every record
    // is in exactly one file, in order, and `durable` never passes what
    // the files hold.
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(Wal::open(Arc::new(OsBackend), &snap(&dir), 1, Durability::Always).unwrap());
    // Fills of the old file may still run when a rotation starts the next.
    wal.set_prealloc(8 << 10);
    let writer = {
        let wal = wal.clone();
        std::thread::spawn(move || wal.run())
    };
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rotator = {
        let (wal, done) = (wal.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Relaxed) {
                let _ = wal.rotate();
                std::thread::yield_now();
            }
        })
    };
    let dir = &dir;
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let wal = wal.clone();
            s.spawn(move || {
                for i in 0..300u32 {
                    let at = wal.append(Op::Delete, &[&[t], &i.to_le_bytes()]);
                    while wal.durable() < at {
                        std::thread::yield_now();
                    }
                    if i % 25 == 0 {
                        // Called durable: it is in a file now.
                        let want = [&[t][..], &i.to_le_bytes()].concat();
                        let on_disk = log_files(&OsBackend, &snap(dir)).iter().any(|(_, path)| {
                            let mut hit = false;
                            let _ = read_log(&OsBackend, path, &mut |e| hit |= e.payload == want);
                            hit
                        });
                        assert!(on_disk, "thread {t} record {i} acknowledged before it was written");
                    }
                }
            });
        }
    });
    done.store(true, Relaxed);
    rotator.join().unwrap_or_else(|_| panic!("rotator"));
    wal.stop();
    writer.join().unwrap_or_else(|_| panic!("writer"));
    let mut next = [0u32; 4];
    let mut total = 0;
    for (_, path) in log_files(&OsBackend, &snap(dir)) {
        let (records, torn) = read_all(&OsBackend, &path);
        assert!(!torn);
        for (_, p) in records {
            let (t, i) = (p[0] as usize, u32::from_le_bytes([p[1], p[2], p[3], p[4]]));
            assert_eq!(i, next[t], "thread {t}'s records once each, in order across files");
            next[t] += 1;
            total += 1;
        }
    }
    assert_eq!(total, 1200);
}

#[test]
fn damage_in_the_middle_of_a_log_ends_its_readable_part_there() {
    // Issue 41: reading went on after a damaged record at the next offset
    // where a whole record began, which may lie inside a value a client
    // stored. Now a file's readable part ends at its first bad record, as
    // SQLite's WAL and PostgreSQL stop: the records before it are read,
    // none after (docs/durability.md says what damage loses).
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = small_log(&dir);
    let path = log_path(&snap(&dir), 1);
    for (i, w) in ends.windows(2).enumerate() {
        for at in [w[0], w[0] + 4, w[0] + 9, w[1] - 1] {
            let mut b = bytes.clone();
            b[at] ^= 0x20;
            std::fs::write(&path, &b).unwrap();
            let (records, torn) = read_all(&OsBackend, &path);
            let want: Vec<Vec<u8>> = (0..i).map(|j| vec![j as u8; j * 3]).collect();
            let got: Vec<Vec<u8>> = records.into_iter().map(|(_, p)| p).collect();
            assert!(torn, "record {i}, byte {at}");
            assert_eq!(got, want, "record {i}, byte {at}: the records before it, in order");
        }
    }
}

/// A log whose records' payloads are themselves whole log records (a
/// delete of `forged!`, a flush), as a client's value may be: the bytes
/// and where each record ends.
fn forged_log(dir: &tempfile::TempDir) -> (Vec<u8>, Vec<usize>) {
    let inner = {
        let d = tempfile::tempdir().unwrap();
        let wal = Wal::open(Arc::new(OsBackend), &snap(&d), 1, Durability::Always).unwrap();
        wal.append(Op::Delete, &[b"forged!"]);
        wal.append(Op::Flush, &[]);
        wal.flush().unwrap();
        std::fs::read(log_path(&snap(&d), 1)).unwrap()[16..].to_vec()
    };
    let wal = Wal::open(Arc::new(OsBackend), &snap(dir), 1, Durability::Always).unwrap();
    let mut ends = vec![16];
    for i in 0..8usize {
        let mut v = vec![b'v'; i * 37 % 200];
        for _ in 0..=i % 3 {
            v.extend_from_slice(&inner);
        }
        wal.append(Op::Delete, &[&v]);
        ends.push(ends[i] + 12 + v.len());
    }
    wal.flush().unwrap();
    let bytes = std::fs::read(log_path(&snap(dir), 1)).unwrap();
    assert_eq!(ends.last(), Some(&bytes.len()));
    (bytes, ends)
}

#[test]
fn a_value_holding_whole_log_records_is_never_read_as_one() {
    // Issue 41, failure 4: a value holding a log record was replayed as a
    // record after a power cut tore the record holding it. Every cut, and
    // every 512-byte block lost (zeros where it was, the bytes after it
    // there), must read a prefix of the records written, and never the
    // delete or flush inside a value.
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = forged_log(&dir);
    let path = log_path(&snap(&dir), 1);
    let written: Vec<Vec<u8>> = {
        let (r, torn) = read_all(&OsBackend, &path);
        assert!(!torn);
        r.into_iter().map(|(_, p)| p).collect()
    };
    assert_eq!(written.len(), 8);
    let mut damaged = Vec::new();
    for cut in 16..bytes.len() {
        damaged.push((format!("cut at {cut}"), bytes[..cut].to_vec()));
    }
    for block in (0..bytes.len()).step_by(512) {
        let mut b = bytes.clone();
        b[block.max(16)..(block + 512).min(bytes.len())].fill(0);
        damaged.push((format!("block at {block} lost"), b));
    }
    for (what, b) in damaged {
        std::fs::write(&path, &b).unwrap();
        let (records, _) = read_all(&OsBackend, &path);
        assert!(records.iter().all(|(op, p)| *op == Op::Delete && p.as_slice() != b"forged!"), "{what}");
        let got: Vec<Vec<u8>> = records.into_iter().map(|(_, p)| p).collect();
        assert_eq!(got[..], written[..got.len()], "{what}: a prefix of what was written");
        let whole = ends.iter().filter(|&&e| e <= b.len() && b[..e] == bytes[..e]).count() - 1;
        assert_eq!(got.len(), whole, "{what}: every whole record before the damage");
    }
}

#[test]
fn recovery_cuts_each_replayed_file_to_its_records() {
    // Issue 41, failure 5: each crash-restart left its file preallocated
    // (64 MiB of zeros on a server) and none was removed.
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = preallocated_log(&dir);
    let path = log_path(&snap(&dir), 1);
    // A torn record after the last whole one, then the zeros.
    let mut b = bytes.clone();
    b[ends[12]..ends[12] + 5].copy_from_slice(&[2, 0, 0, 0, 9]);
    std::fs::write(&path, &b).unwrap();
    let (_s, mut w) = store(8 << 20);
    let r = replay(&OsBackend, &snap(&dir), 0, &mut w).unwrap();
    assert_eq!((r.records, r.torn, r.trimmed), (12, 1, (b.len() - ends[12]) as u64));
    assert_eq!(std::fs::read(&path).unwrap(), bytes[..ends[12]], "the records, and nothing after them");
    // Read again, the file is whole and nothing more is cut.
    let (_s, mut w) = store(8 << 20);
    let r = replay(&OsBackend, &snap(&dir), 0, &mut w).unwrap();
    assert_eq!((r.records, r.torn, r.trimmed), (12, 0, 0));
}

#[test]
fn a_cut_that_fails_leaves_the_file_read_the_same_way() {
    // The cut is best effort: one the disk refuses (EIO on its sync, as
    // FaultBackend fails it) neither fails the recovery nor loses a record.
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = preallocated_log(&dir);
    let path = log_path(&snap(&dir), 1);
    let fb = FaultBackend::new(OsBackend);
    fb.set(Faults { fail_sync: true, ..Faults::default() });
    let (_s, mut w) = store(8 << 20);
    let r = replay(&fb, &snap(&dir), 0, &mut w).unwrap();
    assert_eq!((r.records, r.torn, r.trimmed), (12, 0, 0));
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing cut");
    fb.set(Faults::default());
    let (_s, mut w) = store(8 << 20);
    let r = replay(&fb, &snap(&dir), 0, &mut w).unwrap();
    assert_eq!((r.records, r.trimmed), (12, (bytes.len() - ends[12]) as u64));
}

/// A log whose file is filled with zeros 1 KiB ahead, at its start:
/// twelve records, the first six in the gap the fill leaves the writer
/// (an eighth), the seventh across the fill's start, the rest over the
/// zeros. The bytes and where the records end.
fn preallocated_log(dir: &tempfile::TempDir) -> (Vec<u8>, Vec<usize>) {
    let wal = Wal::open(Arc::new(OsBackend), &snap(dir), 1, Durability::Always).unwrap();
    wal.set_prealloc(1024);
    assert!(wal.prepare(), "a fill ahead of the writer");
    assert_eq!(wal.zeroed.load(Relaxed), 1024 - 128);
    let mut ends = vec![16];
    for i in 0..12u8 {
        wal.append(Op::Delete, &[&vec![i + 1; usize::from(i) * 3 + 1]]);
        ends.push(ends[usize::from(i)] + 12 + usize::from(i) * 3 + 1);
    }
    assert!(ends[6] < 16 + 128 && ends[7] > 16 + 128);
    wal.flush().unwrap();
    let bytes = std::fs::read(log_path(&snap(dir), 1)).unwrap();
    (bytes, ends)
}

fn payloads(records: Vec<(Op, Vec<u8>)>) -> Vec<Vec<u8>> {
    records.into_iter().map(|(_, p)| p).collect()
}

fn want_payloads(skip: &[usize]) -> Vec<Vec<u8>> {
    (0..12usize).filter(|i| !skip.contains(i)).map(|i| vec![i as u8 + 1; i * 3 + 1]).collect()
}

#[test]
fn a_preallocated_log_reads_its_records_and_its_zero_tail_is_no_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = preallocated_log(&dir);
    let last = *ends.last().unwrap();
    assert_eq!(bytes.len(), 16 + 1024, "the file is the fill's length");
    assert!(bytes[last..].iter().all(|&b| b == 0), "zeros after the last record");
    let path = log_path(&snap(&dir), 1);
    let (records, torn) = read_all(&OsBackend, &path);
    assert!(!torn, "a zero tail is the log's end, not a torn record");
    assert_eq!(payloads(records), want_payloads(&[]));
    let (_s, mut w) = store(8 << 20);
    let r = replay(&OsBackend, &snap(&dir), 0, &mut w).unwrap();
    assert_eq!((r.records, r.torn), (12, 0));
}

#[test]
fn damage_or_a_lost_block_in_a_preallocated_log_ends_it_there() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = preallocated_log(&dir);
    let path = log_path(&snap(&dir), 1);
    let before = |i: usize| (i..12).collect::<Vec<usize>>();
    // A flipped byte in any record, head or payload: the records before it.
    for i in 0..12usize {
        for at in [ends[i], ends[i] + 5, ends[i + 1] - 1] {
            let mut b = bytes.clone();
            b[at] ^= 0x40;
            std::fs::write(&path, &b).unwrap();
            let (records, torn) = read_all(&OsBackend, &path);
            assert!(torn, "record {i}, byte {at}");
            assert_eq!(payloads(records), want_payloads(&before(i)), "record {i}, byte {at}");
        }
    }
    // A record zeroed whole (a block that never reached the disk, the
    // ones after it did): the records before it, and the batch's later
    // records are not read (a prefix of the batch is a state the cache
    // passed through; a subset of it need not be).
    for i in 0..11usize {
        let mut b = bytes.clone();
        b[ends[i]..ends[i + 1]].fill(0);
        std::fs::write(&path, &b).unwrap();
        let (records, torn) = read_all(&OsBackend, &path);
        assert!(torn, "record {i} zeroed");
        assert_eq!(payloads(records), want_payloads(&before(i)), "record {i} zeroed");
    }
    // The last batch torn at every byte of its last record: the zeros
    // after the cut are no record, the cut record is lost, and a cut at
    // its very start is a clean end.
    for cut in ends[11]..ends[12] {
        let mut b = bytes.clone();
        b[cut..].fill(0);
        std::fs::write(&path, &b).unwrap();
        let (records, torn) = read_all(&OsBackend, &path);
        assert_eq!(torn, cut != ends[11], "cut at {cut}");
        assert_eq!(payloads(records), want_payloads(&[11]), "cut at {cut}");
    }
}

#[test]
fn the_fill_moves_ahead_as_the_writer_nears_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(Arc::new(OsBackend), &snap(&dir), 1, Durability::Always).unwrap();
    let path = log_path(&snap(&dir), 1);
    assert!(!wal.prepare(), "no preallocation unless asked");
    wal.set_prealloc(16 << 10);
    assert!(wal.prepare());
    let len = || std::fs::metadata(&path).unwrap().len();
    // A new file: the fill begins an eighth ahead of the writer.
    assert_eq!(len(), 16 + (16 << 10));
    assert!(!wal.prepare(), "16 KiB ahead: nothing to do");
    let mut records = 0;
    for round in 0..6 {
        // 10 KiB of records: past half the fill.
        for _ in 0..10 {
            wal.append(Op::Delete, &[&[7u8; 1012]]);
            records += 1;
        }
        wal.flush().unwrap();
        let written = 16 + records * 1024;
        assert!(wal.prepare(), "round {round}");
        assert_eq!(len(), written + (16 << 10), "round {round}: filled a whole chunk ahead again");
        let (got, torn) = read_all(&OsBackend, &path);
        assert_eq!((got.len() as u64, torn), (records, false), "round {round}");
    }
    assert_eq!(wal.zeroed.load(Relaxed), len() - 16 - (2 << 10), "all but the gap the writer grew into");
}

#[test]
fn a_fill_that_fails_leaves_the_log_writing() {
    for faults in [
        Faults { fail_write_at: Some((8 << 10, libc::ENOSPC)), ..Faults::default() },
        Faults { fail_sync: true, ..Faults::default() },
        Faults { short_writes: true, ..Faults::default() },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let fb = FaultBackend::new(OsBackend);
        let wal = Wal::open(Arc::new(fb.clone()), &snap(&dir), 1, Durability::Always).unwrap();
        wal.set_prealloc(64 << 10);
        fb.set(faults.clone());
        let ok = wal.prepare();
        assert_eq!(ok, faults.short_writes, "{faults:?}");
        assert!(!wal.failed(), "{faults:?}: a fill is not the log");
        fb.set(Faults::default());
        // Filled: nothing to do yet; failed: that file is not filled again.
        assert!(!wal.prepare(), "{faults:?}");
        for i in 0..50u32 {
            wal.append(Op::Delete, &[&i.to_le_bytes(), &[1; 500]]);
        }
        wal.flush().unwrap();
        let (records, torn) = read_all(&OsBackend, &log_path(&snap(&dir), 1));
        assert_eq!((records.len(), torn), (50, false), "{faults:?}");
        // The next file is filled again.
        assert_eq!(wal.rotate().ok(), Some(2));
        assert!(wal.prepare(), "{faults:?}");
    }
}

#[test]
fn a_prefill_at_start_fills_from_the_header_and_recovery_does_it_under_always() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(Arc::new(OsBackend), &snap(&dir), 1, Durability::Always).unwrap();
    wal.set_prealloc(16 << 10);
    assert!(wal.prefill());
    let path = log_path(&snap(&dir), 1);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 + (16 << 10));
    assert_eq!(wal.zeroed.load(Relaxed), 16 << 10, "no gap: the first records go over zeros");
    drop(wal);
    for (mode, want) in [(Durability::Always, 16 + (32 << 10)), (Durability::Interval, 16)] {
        let d = tempfile::tempdir().unwrap();
        let opts = strata_persist::RecoverOpts {
            workers: 1,
            strict: false,
            durability: mode,
            unix_now: Some(1_700_000_000),
            prealloc: 32 << 10,
        };
        let cfg = Config {
            memory_limit: 8 << 20,
            segment_size: 64 << 10,
            item_size_max: 16 << 10,
            hash_power: 8,
            ..Config::default()
        };
        let r = strata_persist::recover(Arc::new(OsBackend), &snap(&d), cfg, &opts).unwrap();
        let wal = r.wal.unwrap();
        let len = std::fs::metadata(log_path(&snap(&d), wal.current())).unwrap().len();
        assert_eq!(len, want, "{mode:?}: preallocated under always only");
    }
}

#[test]
fn a_timed_log_dates_its_records_and_each_file_begins_with_the_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(Clock::manual(1_700_000_000));
    let started = clock.process_started();
    let wal = Wal::open(Arc::new(OsBackend), &snap(&dir), 1, Durability::Always).unwrap().timed(clock.clone());
    wal.append(Op::Delete, &[b"a"]);
    wal.append(Op::Delete, &[b"b"]);
    clock.advance(10);
    wal.append(Op::Delete, &[b"c"]);
    wal.flush().unwrap();
    let time = |t: u32| [&started.to_le_bytes()[..], &t.to_le_bytes()].concat();
    let (records, torn) = read_all(&OsBackend, &log_path(&snap(&dir), 1));
    assert!(!torn);
    let want = [(Op::Time, time(2)), (Op::Delete, b"a".to_vec()), (Op::Delete, b"b".to_vec())];
    assert_eq!(records[..3], want);
    assert_eq!(records[3..], [(Op::Time, time(12)), (Op::Delete, b"c".to_vec())]);
    // A new file begins with the time though the clock has not moved.
    assert_eq!(wal.rotate().unwrap(), 2);
    wal.append(Op::Delete, &[b"d"]);
    wal.flush().unwrap();
    let (records, _) = read_all(&OsBackend, &log_path(&snap(&dir), 2));
    assert_eq!(records, [(Op::Time, time(12)), (Op::Delete, b"d".to_vec())]);
    // Recovery reads the timeline from the first file, and the latest time
    // from every record; time records are not counted as changes.
    assert_eq!(strata_persist::wal::timeline(&OsBackend, &snap(&dir)), Some((started, 2)));
    let (_, mut w) = store(8 << 20);
    let r = replay(&OsBackend, &snap(&dir), 0, &mut w).unwrap();
    assert_eq!((r.records, r.time), (4, Some((started, 12))), "{r:?}");
}
