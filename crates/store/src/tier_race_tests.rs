//! The flash tier under churn from two workers: reads racing the reclaim
//! of their records' regions, and the rewrite at the head of the items read
//! since, never count a sound record as damaged, never unlink it for one,
//! and never serve another key's value.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crate::tests::get;
use crate::tier_tests::{flash_stats, key, tier_with, value};
use crate::*;

#[test]
fn reads_racing_region_reclaims_find_no_damage_on_a_sound_device() {
    // 8 MiB of memory over 8 MiB of flash in 1 MiB regions: a region is
    // reclaimed every few hundred sets, and the reader's items are the
    // read ones it writes again at the head.
    let t = tier_with(8, 8, 0);
    let keys = 30_000;
    let done = AtomicBool::new(false);
    let (store, mut w) = (t.store.clone(), t.w);
    let mut reader = store.worker();
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 0..6u8 {
                for i in 0..keys {
                    assert_eq!(w.set(SetOp::Set, &key(i), 0, 0, &value(i, round)), Ok(StoreOutcome::Stored));
                }
            }
            done.store(true, Relaxed);
        });
        let mut i = 0;
        while !done.load(Relaxed) {
            i = (i + 7919) % keys;
            if let Some((v, _, _)) = get(&mut reader, &key(i)) {
                assert_eq!(v[..8], (i as u64).to_le_bytes(), "key {i} read another key's value");
                assert!(v[8..].iter().all(|&b| b == v[8]), "key {i}: a torn value");
            }
        }
    });
    let fs = flash_stats(&store);
    assert!(fs.regions_reclaimed > 50 && fs.copied > 100, "the reads raced reclaims: {fs:?}");
    assert_eq!((fs.checksum_errors, fs.misses), (0, 0), "{fs:?}");
}
