//! Tests of the log: on the OS's files and on the simulated disk
//! (`strata_io::sim::SimFs`), where the power is cut before and after
//! syncs and what survives is checked: synced records read back verified,
//! unsynced ones verified or rejected, and never wrong bytes.

use std::path::Path;

use strata_io::sim::SimFs;
use strata_io::{Backend, OsBackend};

use super::*;

const MIB: u64 = 1 << 20;

fn flash_on(b: &dyn Backend, path: &Path, size: u64) -> Flash {
    let d = b.open_device(path, size).unwrap();
    Flash::new(&Config { region_size: MIB, max_record: 4096 }, vec![d]).unwrap()
}

/// Runs `test` on a file of the OS and on one of the simulated disk.
fn on_both(test: impl Fn(&dyn Backend, &Path)) {
    let dir = tempfile::tempdir().unwrap();
    test(&OsBackend, &dir.path().join("f"));
    test(&SimFs::new(), Path::new("/sim/f"));
}

fn at(r: Option<Reserve>) -> u64 {
    match r {
        Some(Reserve::At(a)) => a,
        other => panic!("{other:?}"),
    }
}

#[test]
fn layouts() {
    assert_eq!(std::mem::size_of::<Region>(), 40);
}

#[test]
fn records_round_trip_and_the_ring_reclaims_oldest_first() {
    on_both(|b, path| {
        let fl = flash_on(b, path, 3 * MIB);
        assert_eq!((fl.regions(), fl.granule()), (3, 8));
        let mut batch = Vec::new();
        record::encode(&mut batch, 8, 5, 6, 100, |d| d.fill(b'a'));
        record::encode(&mut batch, 8, 5, 6, 3000, |d| d.fill(b'b'));
        let mut w = fl.writer();
        let a = at(w.reserve(batch.len()));
        assert_eq!(a, 64, "after the region header");
        w.write(a, &mut batch, 2).unwrap();
        drop(w);
        let mut buf = Vec::new();
        let second = a + record::padded_len(100, 8) as u64;
        let r = fl.read(second, fl.generation(0), &mut buf).unwrap();
        assert_eq!((r.epoch, r.written, r.item.len()), (5, 6, 3000));
        assert!(r.item.iter().all(|&b| b == b'b'));
        // Fill regions 1 and 2; the ring then asks for region 0 back.
        let mut w = fl.writer();
        let big = vec![0u8; (1 << 20) - 1000];
        assert_eq!(at(w.reserve(big.len())), (1 << 20) + 64);
        w.write((1 << 20) + 64, &mut big.clone(), 1).unwrap();
        assert_eq!(at(w.reserve(big.len())), (2 << 20) + 64);
        w.write((2 << 20) + 64, &mut big.clone(), 1).unwrap();
        assert_eq!(w.reserve(big.len()), Some(Reserve::Reclaim(0)));
        let mut seen = Vec::new();
        w.scan(0, &mut buf, |addr, rec| seen.push((addr, rec.item.len()))).unwrap();
        assert_eq!(seen, vec![(64, 100), (second, 3000)]);
        // Each region's header names its generation, each one new.
        let gens: Vec<_> = (0..3).map(|r| fl.disk_generation(r).unwrap_or(0)).collect();
        assert_eq!(gens, vec![1, 2, 3]);
        let gen = fl.generation(0);
        w.recycle(0);
        assert_ne!(fl.generation(0), gen);
        assert_eq!(at(w.reserve(big.len())), 64);
        w.write(64, &mut big.clone(), 1).unwrap();
        assert!(fl.disk_generation(0).unwrap_or(0) > 3);
        assert_eq!(w.reserve(fl.max_write() + 1), None, "longer than a region takes");
        drop(w);
        fl.sync().unwrap();
    });
}

#[test]
fn a_checkpoint_keeps_only_regions_unchanged_since() {
    on_both(|b, path| {
        // 300 records: most of a region.
        let mut big = Vec::new();
        for _ in 0..300 {
            record::encode(&mut big, 8, 1, 2, 3000, |d| d.fill(7));
        }
        let cp = {
            let fl = flash_on(b, path, 3 * MIB);
            let mut w = fl.writer();
            for _ in 0..3 {
                let a = at(w.reserve(big.len()));
                w.write(a, &mut big.clone(), 1).unwrap();
            }
            drop(w);
            let cp = fl.checkpoint();
            // After the checkpoint region 0 is reclaimed and rewritten.
            let mut w = fl.writer();
            assert_eq!(w.reserve(big.len()), Some(Reserve::Reclaim(0)));
            w.recycle(0);
            let a = at(w.reserve(big.len()));
            w.write(a, &mut big.clone(), 1).unwrap();
            cp
        };
        assert_eq!((cp.head, cp.wrapped, cp.regions.len()), (2, false, 3));
        // A restart: generations go on above the disk's.
        let fl = flash_on(b, path, 3 * MIB);
        let kept = fl.restore(&cp).unwrap_or_else(|| panic!("same layout"));
        assert_eq!(kept, vec![false, true, true]);
        let mut n = 0;
        fl.scan_region(1, &mut Vec::new(), |_, _| n += 1).unwrap();
        assert_eq!(n, 300);
        let mut w = fl.writer();
        // Writing goes on after the checkpoint's head: region 0, which
        // holds nothing the checkpoint knows.
        let a = at(w.reserve(100));
        assert_eq!(a, 64);
        w.write(a, &mut [0; 100], 1).unwrap();
        assert!(fl.disk_generation(0) > Some(cp.regions[2].1));
        let other = Checkpoint { region_size: 2 << 20, ..cp };
        assert!(fl.restore(&other).is_none());
    });
}

#[test]
fn a_restart_without_writes_checkpoints_what_it_restored() {
    on_both(|b, path| {
        let mut big = Vec::new();
        for _ in 0..300 {
            record::encode(&mut big, 8, 1, 2, 3000, |d| d.fill(7));
        }
        let first = {
            let fl = flash_on(b, path, 4 * MIB);
            let mut w = fl.writer();
            for _ in 0..3 {
                let a = at(w.reserve(big.len()));
                w.write(a, &mut big.clone(), 1).unwrap();
            }
            drop(w);
            fl.checkpoint()
        };
        // Two clean restarts, nothing written in between: each one's
        // checkpoint is the one it restored, and keeps every region.
        let mut cp = first.clone();
        for restart in 0..2 {
            let fl = flash_on(b, path, 4 * MIB);
            let kept = fl.restore(&cp).unwrap_or_else(|| panic!("same layout"));
            assert_eq!(kept, vec![true, true, true, false], "restart {restart}");
            cp = fl.checkpoint();
            assert_eq!(cp, first, "restart {restart}");
        }
    });
}

#[test]
fn addresses_fit_the_slot_for_large_devices() {
    // 1 TiB of (sparse, never written) 64 MiB regions: granules grow
    // so that every address fits 33 bits.
    let dir = tempfile::tempdir().unwrap();
    let d = OsBackend.open_device(&dir.path().join("f"), 1 << 40).unwrap();
    let fl = Flash::new(&Config { region_size: 64 << 20, max_record: 4096 }, vec![d]).unwrap();
    assert!(fl.to_slot(fl.capacity() - 1) < 1 << ADDR_BITS);
    assert_eq!(fl.granule(), 256);
}

/// Records of `n` items, each its own length and bytes (`tag` makes the
/// bytes differ between calls), written at the head; their addresses and
/// items.
fn write_records(fl: &Flash, n: usize, tag: u8) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut w = fl.writer();
    for i in 0..n {
        let item: Vec<u8> = (0..200 + i * 37 % 900).map(|j| (j as u8) ^ (i as u8) ^ tag).collect();
        let mut rec = Vec::new();
        record::encode(&mut rec, fl.granule(), 1, i as u32, item.len(), |d| d.copy_from_slice(&item));
        let a = at(w.reserve(rec.len()));
        w.write(a, &mut rec, 1).unwrap();
        out.push((a, item));
    }
    out
}

/// What a read of each record finds: its item, or none (rejected);
/// another item is never acceptable.
fn read_back(fl: &Flash, records: &[(u64, Vec<u8>)]) -> Vec<bool> {
    let mut buf = Vec::new();
    records
        .iter()
        .map(|(addr, item)| match fl.read(*addr, fl.generation(fl.region_of(*addr)), &mut buf) {
            Ok(r) => {
                assert!(r.item == &item[..], "a record at {addr} read back other bytes");
                true
            }
            Err(ReadError::Record(_)) => false,
            Err(e) => panic!("at {addr}: {e}"),
        })
        .collect()
}

#[test]
fn synced_records_survive_a_power_loss_and_unsynced_ones_are_whole_or_rejected() {
    let fs = SimFs::new();
    let path = Path::new("/sim/flash");
    let fl = flash_on(&fs, path, 4 * MIB);
    let synced = write_records(&fl, 40, 0);
    fl.sync().unwrap();
    // The power goes before the next sync; the restart restores a
    // checkpoint taken after both (as a snapshot that was never synced
    // would name them).
    let unsynced = write_records(&fl, 40, 0x55);
    let cp = fl.checkpoint();
    drop(fl);
    let (mut kept, mut rejected) = (0, 0);
    for seed in 0..200 {
        let after = fs.fork();
        after.power_loss(seed);
        let fl = flash_on(&after, path, 4 * MIB);
        assert_eq!(fl.restore(&cp).map(|k| k[0]), Some(true), "seed {seed}: the synced header");
        assert!(read_back(&fl, &synced).iter().all(|&ok| ok), "seed {seed}: a synced record was lost");
        for ok in read_back(&fl, &unsynced) {
            if ok {
                kept += 1;
            } else {
                rejected += 1;
            }
        }
    }
    assert!(kept > 1000 && rejected > 1000, "kept {kept}, rejected {rejected}: both happen");
}

#[test]
fn a_region_rewritten_after_a_checkpoint_never_serves_new_records_for_old() {
    // Records in regions 0 and 2 (region 1 filled with padding), synced,
    // and a checkpoint, as a snapshot takes it; then region 0 is reclaimed
    // and records with other bytes written at the same addresses, and the
    // power goes before they are synced. A restart from the checkpoint
    // keeps region 0 when its old header survived; its records are then
    // the old ones or rejected, never the new ones: those are salted with
    // the new generation. The disk does keep new records whole under the
    // old header (counted, from the raw bytes): without the salt they
    // would be served as the old keys' items.
    let fs = SimFs::new();
    let path = Path::new("/sim/flash");
    let fl = flash_on(&fs, path, 3 * MIB);
    let pad = vec![0u8; fl.max_write()];
    let old = write_records(&fl, 4, 0);
    let mut w = fl.writer();
    let a = at(w.reserve(pad.len()));
    w.write(a, &mut pad.clone(), 0).unwrap();
    drop(w);
    let other = write_records(&fl, 4, 0x11);
    assert_eq!(fl.region_of(other[0].0), 2);
    // The rest of region 2, so that the next record goes round to region 0.
    let last = other.last().map_or(0, |(a, item)| a + record::padded_len(item.len(), fl.granule()) as u64);
    let mut w = fl.writer();
    let a = at(w.reserve((3 * MIB - last) as usize));
    w.write(a, &mut pad[..(3 * MIB - last) as usize].to_vec(), 0).unwrap();
    drop(w);
    let cp = fl.checkpoint();
    fl.sync().unwrap();
    let mut w = fl.writer();
    assert_eq!(w.reserve(8), Some(Reserve::Reclaim(0)));
    w.recycle(0);
    drop(w);
    let new = write_records(&fl, 4, 0xaa);
    let new_gen = fl.generation(0);
    let addrs = |r: &[(u64, Vec<u8>)]| r.iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(addrs(&new), addrs(&old), "the same addresses, other bytes");
    drop(fl);
    let (mut kept_old, mut new_under_old) = (0, 0);
    for seed in 0..300 {
        let after = fs.fork();
        after.power_loss(seed);
        let new_on_disk = {
            let d = after.open_device(path, 3 * MIB).unwrap();
            let mut buf = vec![0u8; 4096];
            new.iter()
                .filter(|(addr, _)| {
                    read_exact_at(&*d.file, &mut buf, *addr).unwrap() && record::decode(&buf, 4096, new_gen).is_ok()
                })
                .count()
        };
        let fl = flash_on(&after, path, 3 * MIB);
        let kept = fl.restore(&cp).unwrap_or_else(|| panic!("same layout"));
        assert!(kept[2] && read_back(&fl, &other).iter().all(|&ok| ok), "seed {seed}: synced records were lost");
        if kept[0] {
            // Never wrong bytes: read_back asserts it.
            read_back(&fl, &old);
            kept_old += 1;
            new_under_old += new_on_disk;
        }
    }
    assert!(kept_old > 0, "the old header survived in some seeds");
    assert!(new_under_old > 0, "new records were on disk under the old header: the salt rejected them");
}

#[test]
fn regions_written_before_the_salt_are_left_out_and_their_generations_not_reused() {
    on_both(|b, path| {
        let cp = {
            let fl = flash_on(b, path, 3 * MIB);
            write_records(&fl, 10, 0);
            fl.sync().unwrap();
            fl.checkpoint()
        };
        // Region 0's header as a version before the salt wrote it:
        // format 0, its CRC right.
        {
            let d = b.open_device(path, 3 * MIB).unwrap();
            let mut h = [0u8; 28];
            assert!(read_exact_at(&*d.file, &mut h, 0).unwrap());
            assert_eq!(&h[20..24], &1u32.to_le_bytes(), "format 1 today");
            h[20..24].fill(0);
            let crc = crc32c::crc32c(&h[..24]);
            h[24..28].copy_from_slice(&crc.to_le_bytes());
            strata_io::write_all_at(&*d.file, &h, 0).unwrap();
        }
        let fl = flash_on(b, path, 3 * MIB);
        assert_eq!(fl.disk_generation(0), None, "another format");
        // The fresh head's generation: above the old header's.
        assert!(fl.generation(0) > cp.regions[0].1, "{} reused", cp.regions[0].1);
        assert_eq!(fl.restore(&cp).map(|k| k[0]), Some(false), "left out, as a reclaimed region");
    });
}

#[test]
fn a_record_reclaimed_since_the_caller_looked_is_not_counted_damaged() {
    // Records in region 0, seen (the address and generation a slot gives)
    // before region 0 is reclaimed and written again at the same
    // addresses. Read against the generation seen, each fails its check
    // and is not counted: nothing on the device is damaged. Checked
    // against the generation loaded at the read, as before, the read
    // found the new bytes and counted them damaged (or served another
    // record, which the store then rejected by its key).
    on_both(|b, path| {
        let fl = flash_on(b, path, 3 * MIB);
        let old = write_records(&fl, 4, 0);
        let seen = fl.generation(0);
        let pad = vec![0u8; fl.max_write()];
        for _ in 0..2 {
            let mut w = fl.writer();
            let a = at(w.reserve(pad.len()));
            w.write(a, &mut pad.clone(), 0).unwrap();
        }
        // Regions 1 and 2 full: the ring comes round to region 0.
        let mut w = fl.writer();
        assert_eq!(w.reserve(8), Some(Reserve::Reclaim(0)));
        w.recycle(0);
        drop(w);
        let new = write_records(&fl, 4, 0xaa);
        assert_eq!(new.iter().map(|r| r.0).collect::<Vec<_>>(), old.iter().map(|r| r.0).collect::<Vec<_>>());
        assert_ne!(fl.generation(0), seen);
        let mut buf = Vec::new();
        for (addr, _) in &old {
            assert!(matches!(fl.read(*addr, seen, &mut buf), Err(ReadError::Record(_))), "at {addr}");
        }
        assert_eq!(fl.stats.checksum_errors.load(Relaxed), 0, "counted damaged");
        assert!(read_back(&fl, &new).iter().all(|&ok| ok), "the new records read back");
    });
}
