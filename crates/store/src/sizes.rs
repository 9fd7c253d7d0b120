//! memcached's item size histogram (`stats sizes`, `stats sizes_enable`,
//! `stats sizes_disable`, `-o track_sizes`): items linked while it is on,
//! counted by the size memcached would give them
//! ([`crate::bands::Bands::class_len`]) rounded up to 32 bytes.
//!
//! As in memcached it counts only what is linked and unlinked while it is
//! on: turned on again, it starts from nothing. Off, it costs one relaxed
//! load per link and unlink; its 32-byte buckets up to `-I` (8 bytes each:
//! 256 KiB at the default 1 MiB) are allocated the first time it is
//! turned on.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::OnceLock;

/// memcached's bucket width.
const BUCKET: usize = 32;

/// The histogram (see the module doc).
#[derive(Debug)]
pub(crate) struct Sizes {
    on: AtomicBool,
    /// Buckets of [`BUCKET`] bytes up to the largest item; larger sizes
    /// count in the last.
    hist: OnceLock<Box<[AtomicU64]>>,
    item_size_max: usize,
}

impl Sizes {
    pub(crate) fn new(item_size_max: usize) -> Sizes {
        Sizes { on: AtomicBool::new(false), hist: OnceLock::new(), item_size_max }
    }

    /// Turns counting on, from nothing (memcached's `stats sizes_enable`).
    pub(crate) fn enable(&self) {
        let hist =
            self.hist.get_or_init(|| (0..=self.item_size_max.div_ceil(BUCKET)).map(|_| AtomicU64::new(0)).collect());
        for b in hist.iter() {
            b.store(0, Relaxed);
        }
        self.on.store(true, Relaxed);
    }

    pub(crate) fn disable(&self) {
        self.on.store(false, Relaxed);
    }

    pub(crate) fn enabled(&self) -> bool {
        self.on.load(Relaxed)
    }

    fn bucket(&self, class_len: usize) -> Option<&AtomicU64> {
        if !self.enabled() {
            return None;
        }
        let hist = self.hist.get()?;
        hist.get(class_len.div_ceil(BUCKET).min(hist.len() - 1))
    }

    /// An item memcached would size at `class_len` bytes was linked.
    pub(crate) fn linked(&self, class_len: usize) {
        if let Some(b) = self.bucket(class_len) {
            b.fetch_add(1, Relaxed);
        }
    }

    /// ... and unlinked: an item linked before counting began is not in a
    /// bucket, which stays at zero (memcached's does the same).
    pub(crate) fn unlinked(&self, class_len: usize) {
        if let Some(b) = self.bucket(class_len) {
            let _ = b.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        }
    }

    /// `(size, items)` per bucket that holds items, smallest first;
    /// `None` while off.
    pub(crate) fn report(&self) -> Option<Vec<(usize, u64)>> {
        if !self.enabled() {
            return None;
        }
        let hist = self.hist.get()?;
        Some(hist.iter().enumerate().map(|(i, b)| (i * BUCKET, b.load(Relaxed))).filter(|&(_, n)| n > 0).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_while_on_by_32_byte_bucket_from_nothing() {
        // -I 1 MiB, but 32 KiB under Miri: turning it on zeroes a bucket
        // per 32 bytes, and each report reads them all (58 s of Miri's
        // clock at 1 MiB, the slowest of the store's tests there).
        let max = crate::testing::scaled(1 << 20, 32 << 10);
        let s = Sizes::new(max);
        s.linked(160);
        assert_eq!(s.report(), None, "off: nothing kept");
        s.enable();
        s.linked(160);
        s.linked(164);
        s.linked(161);
        assert_eq!(s.report(), Some(vec![(160, 1), (192, 2)]));
        s.unlinked(160);
        s.unlinked(160);
        assert_eq!(s.report(), Some(vec![(192, 2)]), "no bucket goes below zero");
        s.disable();
        assert_eq!(s.report(), None);
        s.enable();
        assert_eq!(s.report(), Some(vec![]), "on again: from nothing");
        s.linked(5 * max);
        assert_eq!(s.report(), Some(vec![(max / 32 * 32, 1)]), "past -I: the last bucket");
    }
}
