//! Keys evicted unread lately, and whether they were asked for since:
//! S3-FIFO's ghost queue (Yang et al., SOSP 2023) as a table of hashes,
//! which eviction consults (issue 42).
//!
//! An item leaves the small queue unread and is gone; if its key is asked
//! for again soon (a miss, then the client's set) the new item starts over
//! in the small queue, where a warm key read once per hundred thousand
//! requests is rarely read in its short stay, and leaves again. The ghost
//! remembers the keys eviction dropped unread; a miss on one of them marks
//! it asked; and when the small queue evicts that key's new item unread,
//! it counts one access for eviction's copy-forward (`density.rs` still
//! chooses by accesses per byte), so the key goes on into the main queue.
//! S3-FIFO sends such a key to the main queue at its insertion; here it
//! goes at its small-queue exit, the same key a little later, and only if
//! it was asked for by a read, not merely set again (workload 6 sets keys
//! without reading them: a re-set alone cost it 1.3 points).
//!
//! Each entry is one `u16` in a table indexed by the key's hash, in sets
//! of four; a key's entry may be in any slot of its set, and a new one
//! replaces the set's oldest (a hint may be lost, or found for another key
//! whose fingerprint matches: 1 in 64 lookups of a full set, which then
//! also needs that entry asked for to count):
//!
//! ```text
//!  15          8    7      6        0
//! +-------------+-------+------------+
//! | fingerprint | asked | stamp 7    |
//! +-------------+-------+------------+
//! ```
//!
//! The stamp is the count of evictions recorded when the entry was, in
//! units of about a thirty-second of the table's slots (so it wraps after
//! four times the slots' records, by which time a set has had far more
//! than four younger entries), and an entry is remembered while fewer than
//! [`WINDOW_PERCENT`] of the items in memory were recorded after it, at
//! most twice the slots (S3-FIFO's ghost holds 90% of the cache's objects;
//! this one's window is longer because eviction from the main queue
//! records too, and because a key's new item is judged at its small-queue
//! exit, not at its insertion).
//!
//! Its memory is counted inside `-m` (beside the sketch's): two slots of two
//! bytes per KiB of the limit, 0.4%: at 1 KB items two slots per item in
//! memory, room for the whole window; items of 100 bytes are ten to a
//! KiB, and a fifth of them is remembered. With one slot per KiB workload
//! 13 hit 67.8% against 68.4% (LTO, medians of three); the second slot's
//! 0.2% of `-m` is what the sketch's counters gave back when they went from
//! a byte to four bits (`sketch.rs`), so that the two take what they took
//! with one slot, and scenario 4's 1000-byte items stay over their bar of
//! 1.03 M held at `-m 1024`.

use std::sync::atomic::AtomicU16;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::index::Loc;

/// Slots per KiB of the memory limit.
const SLOTS_PER_KIB: usize = 2;
/// Slots per set (8 bytes): a key's entry may be in any of its set's, and
/// a new one replaces the oldest, so that an entry is lost to another key
/// only once its set has had four younger ones.
const WAYS: usize = 4;
/// How long an entry is remembered: while fewer evictions than this share
/// of the items in memory were recorded after it. Workload 13 (a zipf
/// cache with a scan; one round each): 68.1% hits at 100, 68.6% at 150
/// and at 200 (64.7% without a ghost); workload 16 71.9, 72.1 and 71.9%
/// (72.0% without). With one slot per set instead of four (entries lost
/// to other keys sooner): 65.4% at 50, 67.0% at 90, 68.1% at 150.
const WINDOW_PERCENT: u64 = 150;
const ASKED: u16 = 1 << 7;
const STAMP: u16 = ASKED - 1;
const FINGERPRINT: u16 = !(ASKED | STAMP);

/// The table.
pub(crate) struct Ghost {
    slots: Box<[AtomicU16]>,
    /// Evictions recorded since start.
    recorded: AtomicU64,
    /// log2 of evictions per stamp unit.
    unit_shift: u32,
    /// The window, in evictions: [`WINDOW_PERCENT`] of the items in memory
    /// as eviction last counted them (none remembered before that).
    window: AtomicU64,
}

impl std::fmt::Debug for Ghost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ghost({} slots)", self.slots.len())
    }
}

/// The first slot of the key's set (chosen by the hash's high bits, as a
/// fraction of the sets: the table need not be a power of two) and its
/// fingerprint (the low 8 bits) for the key at `loc`.
fn place(loc: Loc, slots: usize) -> (usize, u16) {
    let h = crate::sketch::fingerprint(loc);
    let set = ((u128::from(h) * (slots / WAYS) as u128) >> 64) as usize;
    (set * WAYS, (h as u16 & 0xff) << 8)
}

impl Ghost {
    /// Sized for a memory limit of `limit` bytes ([`SLOTS_PER_KIB`], in
    /// whole sets, 64 to 8 Mi slots, fewer under Miri).
    pub(crate) fn new(limit: usize) -> Ghost {
        let most = if cfg!(miri) { 1 << 10 } else { 1 << 23 };
        let n = (limit / 1024 * SLOTS_PER_KIB).clamp(64, most) / WAYS * WAYS;
        Ghost {
            slots: (0..n).map(|_| AtomicU16::new(0)).collect(),
            recorded: AtomicU64::new(0),
            unit_shift: (n / 32).max(1).ilog2(),
            window: AtomicU64::new(0),
        }
    }

    /// Bytes it takes, counted inside `-m`.
    pub(crate) fn memory(&self) -> usize {
        self.slots.len() * std::mem::size_of::<AtomicU16>()
    }

    /// Eviction counted `items` in memory.
    pub(crate) fn set_items(&self, items: u64) {
        let most = 2 * self.slots.len() as u64;
        self.window.store((items * WINDOW_PERCENT / 100).min(most), Relaxed);
    }

    fn stamp(&self, recorded: u64) -> u16 {
        (recorded >> self.unit_shift) as u16 & STAMP
    }

    /// How many records ago entry `e` was made, given the stamp `now`.
    fn age(&self, e: u16, now: u16) -> u64 {
        u64::from(now.wrapping_sub(e & STAMP) & STAMP) << self.unit_shift
    }

    /// The slot holding the key at `loc` within the window, and its entry.
    fn find(&self, loc: Loc) -> Option<(usize, u16)> {
        let (set, fp) = place(loc, self.slots.len());
        let now = self.stamp(self.recorded.load(Relaxed));
        (set..set + WAYS).find_map(|i| {
            let e = self.slots[i].load(Relaxed);
            let mine = e != 0 && e & FINGERPRINT == fp && self.age(e, now) < self.window.load(Relaxed);
            mine.then_some((i, e))
        })
    }

    /// Eviction dropped the key at `loc` unread: it takes its own entry
    /// in its set, else an empty one, else the oldest.
    pub(crate) fn record(&self, loc: Loc) {
        let (set, fp) = place(loc, self.slots.len());
        let n = self.recorded.fetch_add(1, Relaxed);
        let now = self.stamp(n);
        let ways = &self.slots[set..set + WAYS];
        let rank = |e: u16| match e {
            0 => u64::MAX - 1,
            _ if e & FINGERPRINT == fp => u64::MAX,
            _ => self.age(e, now),
        };
        let oldest = ways.iter().map(|e| rank(e.load(Relaxed))).enumerate().max_by_key(|&(_, r)| r);
        // A zero entry means empty: a zero fingerprint at stamp 0 is
        // stored as stamp 1 (one unit younger: harmless).
        ways[oldest.map_or(0, |(j, _)| j)].store((fp | now).max(1), Relaxed);
    }

    /// A read of the key at `loc` missed: if eviction dropped it lately,
    /// it was asked for again.
    pub(crate) fn missed(&self, loc: Loc) {
        if let Some((i, e)) = self.find(loc) {
            if e & ASKED == 0 {
                self.slots[i].fetch_or(ASKED, Relaxed);
            }
        }
    }

    /// Whether the key at `loc` was dropped unread lately and asked for
    /// since.
    pub(crate) fn returned(&self, loc: Loc) -> bool {
        self.find(loc).is_some_and(|(_, e)| e & ASKED != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(i: u32) -> Loc {
        Loc { stripe: (i % 8) as usize, bucket: i.wrapping_mul(2_654_435_761), tag: (i % 4000 + 1) as u16, ext: 0 }
    }

    #[test]
    #[cfg_attr(miri, ignore = "tables are smaller under Miri")]
    fn takes_four_bytes_per_kib() {
        assert_eq!(std::mem::size_of::<AtomicU16>(), 2);
        for shift in 16..28 {
            let limit = 1usize << shift;
            assert_eq!(Ghost::new(limit).memory(), limit / 256, "-m {limit}");
        }
        assert_eq!(Ghost::new(48 << 20).memory(), (48 << 20) / 256, "not a power of two");
        assert_eq!(Ghost::new(0).memory(), 128);
    }

    #[test]
    fn a_key_dropped_and_asked_for_again_has_returned() {
        let g = Ghost::new(1 << 20);
        g.set_items(1000);
        g.record(loc(1));
        assert!(!g.returned(loc(1)), "dropped, not asked for since");
        g.missed(loc(2));
        assert!(!g.returned(loc(2)), "asked for, never dropped");
        g.missed(loc(1));
        assert!(g.returned(loc(1)));
        // Dropped again: it must be asked for again.
        g.record(loc(1));
        assert!(!g.returned(loc(1)));
    }

    #[test]
    fn nothing_is_remembered_before_eviction_counts_the_items() {
        let g = Ghost::new(1 << 20);
        g.record(loc(1));
        g.missed(loc(1));
        assert!(!g.returned(loc(1)));
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of records: minutes under Miri; no unsafe code")]
    fn the_window_is_a_share_of_the_items() {
        // 2,048 slots, 1,000 items: a window of 1,500 evictions.
        let g = Ghost::new(1 << 20);
        g.set_items(1000);
        g.record(loc(7));
        g.missed(loc(7));
        // Others dropped after it, in slots of their own where possible.
        let mut n = 0;
        let mut k = 100;
        while n < 1_300 {
            k += 1;
            if place(loc(k), 2048).0 != place(loc(7), 2048).0 {
                g.record(loc(k));
                n += 1;
            }
        }
        assert!(g.returned(loc(7)), "within the window");
        while n < 1_700 {
            k += 1;
            if place(loc(k), 2048).0 != place(loc(7), 2048).0 {
                g.record(loc(k));
                n += 1;
            }
        }
        assert!(!g.returned(loc(7)), "past the window");
        // Of the last 1,000 keys dropped, most are remembered (slots are
        // shared: some were replaced), and each asked for has returned.
        let last: Vec<u32> = (k - 999..=k).collect();
        for &key in &last {
            g.missed(loc(key));
        }
        let back = last.iter().filter(|&&key| g.returned(loc(key))).count();
        assert!((600..=1000).contains(&back), "{back} of 1,000 remembered");
    }
}
