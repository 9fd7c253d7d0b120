//! Tests of the log, on the OS's files and on the simulated disk
//! (`strata_io::sim::SimFs`).

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
        w.write(a, &batch, 2).unwrap();
        drop(w);
        let mut buf = Vec::new();
        let second = a + record::padded_len(100, 8) as u64;
        let r = fl.read(second, &mut buf).unwrap();
        assert_eq!((r.epoch, r.written, r.item.len()), (5, 6, 3000));
        assert!(r.item.iter().all(|&b| b == b'b'));
        // Fill regions 1 and 2; the ring then asks for region 0 back.
        let mut w = fl.writer();
        let big = vec![0u8; (1 << 20) - 1000];
        assert_eq!(at(w.reserve(big.len())), (1 << 20) + 64);
        w.write((1 << 20) + 64, &big, 1).unwrap();
        assert_eq!(at(w.reserve(big.len())), (2 << 20) + 64);
        w.write((2 << 20) + 64, &big, 1).unwrap();
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
        w.write(64, &big, 1).unwrap();
        assert!(fl.disk_generation(0).unwrap_or(0) > 3);
        assert_eq!(w.reserve(fl.max_write() + 1), None, "longer than a region takes");
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
                w.write(a, &big, 1).unwrap();
            }
            drop(w);
            let cp = fl.checkpoint();
            // After the checkpoint region 0 is reclaimed and rewritten.
            let mut w = fl.writer();
            assert_eq!(w.reserve(big.len()), Some(Reserve::Reclaim(0)));
            w.recycle(0);
            let a = at(w.reserve(big.len()));
            w.write(a, &big, 1).unwrap();
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
        w.write(a, &[0; 100], 1).unwrap();
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
                w.write(a, &big, 1).unwrap();
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
