//! add, replace, cas and delete of keys only on flash, answered from a look
//! at the record (`tier/peek.rs`): what each does is what it does to an
//! item in memory, and the item is not brought back into memory for it.

use crate::testing::Now;
use crate::tests::get;
use crate::tier_tests::{fill, flash_stats, in_memory, key, tier_with, value, Tier};
use crate::*;

/// Reads served from flash (recache rate 0), keys 0..20,000 written, the
/// first thousands long on flash.
fn on_flash() -> Tier {
    let mut t = tier_with(8, 64, 0);
    fill(&mut t, 20_000);
    for i in 1..10 {
        assert!(!in_memory(&t.store, &key(i)), "key {i} on flash");
    }
    t
}

fn brought_back(t: &Tier) -> u64 {
    flash_stats(&t.store).recached
}

#[test]
fn add_replace_cas_and_delete_answer_from_the_record() {
    let mut t = on_flash();
    let before = brought_back(&t);
    assert_eq!(t.w.set(SetOp::Add, &key(1), 0, 0, b"x"), Ok(StoreOutcome::NotStored));
    assert!(!in_memory(&t.store, &key(1)), "a failed add leaves it on flash");
    assert_eq!(t.w.set(SetOp::Replace, &key(2), 7, 0, b"replaced"), Ok(StoreOutcome::Stored));
    assert!(in_memory(&t.store, &key(2)));
    // The unique a read from flash hands out is the one cas compares.
    let (_, _, unique) = get(&mut t.w, &key(3)).unwrap_or_else(|| panic!("key 3"));
    let k3 = key(3);
    let cas = |u| Write { compare: Some(u), ..Write::new(SetOp::Set, &k3, 0, 0, b"swapped") };
    assert_eq!(t.w.set_now(&cas(unique + 1)).map(|s| s.outcome), Ok(StoreOutcome::Exists));
    assert!(!in_memory(&t.store, &k3));
    assert_eq!(t.w.set_now(&cas(unique)).map(|s| s.outcome), Ok(StoreOutcome::Stored));
    let k4 = key(4);
    let wrong = Delete { compare: Some(1), ..Delete::default() };
    assert_eq!(t.w.delete_now(&k4, &wrong), Ok(DeleteOutcome::Exists));
    assert!(t.w.delete(&k4), "delete finds it");
    assert!(!t.w.delete(&k4));
    assert_eq!(brought_back(&t), before, "nothing came back into memory");
    assert_eq!(flash_stats(&t.store).dropped_by_write, 0, "each record was read, not dropped unread");
    // What each wrote holds, and nothing of the old versions is left.
    assert_eq!(get(&mut t.w, &key(1)).map(|g| (g.0, g.1)), Some((value(1, 1), 1)));
    assert_eq!(get(&mut t.w, &key(2)).map(|g| (g.0, g.1)), Some((b"replaced".to_vec(), 7)));
    assert_eq!(get(&mut t.w, &k3).map(|g| g.0), Some(b"swapped".to_vec()));
    assert_eq!(get(&mut t.w, &k4), None);
    assert!(t.w.delete(&key(2)) && t.w.delete(&k3));
    assert_eq!((get(&mut t.w, &key(2)), get(&mut t.w, &k3)), (None, None), "no older version under them");
}

#[test]
fn a_dead_record_is_no_item_to_add_replace_or_delete() {
    let mut t = tier_with(8, 64, 0);
    let now = t.store.clock().now();
    for i in 0..20_000 {
        let ttl = if i < 100 { now + 50 } else { 0 };
        assert_eq!(t.w.set(SetOp::Set, &key(i), 0, ttl, &value(i, 1)), Ok(StoreOutcome::Stored));
    }
    assert!(!in_memory(&t.store, &key(1)));
    t.store.clock().advance(60);
    let misses = flash_stats(&t.store).misses;
    assert_eq!(t.w.set(SetOp::Replace, &key(1), 0, 0, b"r"), Ok(StoreOutcome::NotStored));
    assert!(!t.w.delete(&key(2)));
    assert_eq!(t.w.set(SetOp::Add, &key(3), 0, 0, b"a"), Ok(StoreOutcome::Stored));
    assert_eq!(flash_stats(&t.store).misses, misses + 3, "each expired record unlinked");
    assert_eq!(get(&mut t.w, &key(3)).map(|g| g.0), Some(b"a".to_vec()));
    assert_eq!(get(&mut t.w, &key(1)), None);
}

#[test]
fn a_plain_set_over_a_flash_item_takes_a_cas_above_its_old_one() {
    // A plain set drops the key's flash slot without reading its record;
    // its new CAS is still above the old one (memcached's only grow).
    let mut t = tier_with(8, 64, 0);
    // Another worker's segment, opened before the keys were written: its
    // derived CAS values are below theirs.
    let mut other = t.store.worker();
    assert_eq!(other.set(SetOp::Set, b"early", 0, 0, b"x"), Ok(StoreOutcome::Stored));
    fill(&mut t, 20_000);
    for i in 1..10 {
        assert!(!in_memory(&t.store, &key(i)), "key {i} on flash");
        let (_, _, old) = get(&mut t.w, &key(i)).unwrap_or_else(|| panic!("key {i}"));
        assert_eq!(other.set(SetOp::Set, &key(i), 0, 0, b"new"), Ok(StoreOutcome::Stored));
        let (_, _, new) = get(&mut t.w, &key(i)).unwrap_or_else(|| panic!("key {i} again"));
        assert!(new > old, "key {i}: CAS {old} -> {new}");
    }
}
