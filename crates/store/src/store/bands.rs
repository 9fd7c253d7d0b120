//! The store's side of the size bands (`bands.rs`): `stats items` and
//! `stats slabs` rows over every segment, the crawler's totals, and the
//! counting of each item linked or unlinked in its band and segment.

use std::sync::atomic::Ordering::Relaxed;

use super::Store;
use crate::bands::BandStats;
use crate::index::slot;

impl Store {
    /// Every band, with what it holds and has lost: memcached's per-class
    /// rows of `stats items` and `stats slabs` (the server leaves out empty
    /// ones, as memcached does). Visits each segment's metadata once.
    pub fn size_bands(&self) -> Vec<BandStats> {
        let b = self.bands();
        let mut out: Vec<BandStats> = (0..b.bounds.len()).map(|i| b.row(i)).collect();
        let now = self.clock().now();
        let mut oldest = vec![u32::MAX; out.len()];
        // A segment counts for its bands while it is in use, its items
        // live or not yet cleaned away, as memcached's pages stay with
        // their class once its items expire (t/lru-crawler.t reads
        // `1:used_chunks 0` after a crawl, not a missing row).
        let in_use = self.in_use();
        for (m, _) in self.segs().iter().zip(&in_use).filter(|(_, &used)| used) {
            let mask = m.bands.load(Relaxed);
            if mask == 0 {
                continue;
            }
            let earliest = if m.live_items.load(Relaxed) > 0 { m.times.lock().earliest() } else { None };
            for (i, s) in out.iter_mut().enumerate().filter(|(i, _)| mask & (1 << i) != 0) {
                s.segments += 1;
                if let Some(t) = earliest {
                    oldest[i] = oldest[i].min(t);
                }
            }
        }
        for (s, t) in out.iter_mut().zip(oldest) {
            if t != u32::MAX {
                s.age = now.saturating_sub(t);
            }
        }
        out
    }

    /// Items `lru_crawler crawl` looked at and reclaimed, all bands
    /// (without [`Store::size_bands`]' visit of every segment).
    pub fn crawler_totals(&self) -> (u64, u64) {
        self.bands().crawler_totals()
    }

    /// The size band (memcached's class id less one) an item memcached
    /// would give `len` bytes is counted in ([`crate::Inspect::class`]).
    pub fn band_of(&self, len: usize) -> usize {
        self.bands().band_of(len)
    }

    /// The class id (band + 1) of an item of this key and value (no
    /// client flags), for `watch` lines about an item the caller does not
    /// hold.
    pub fn class_of(&self, key_len: usize, value_len: usize) -> usize {
        self.bands().band_of(self.bands().class_len(key_len, value_len, false)) + 1
    }

    /// Counts the item at memory slot `s`, of `len` stored bytes and
    /// memcached's size `class_len`, as linked, and marks its band in its
    /// segment.
    pub(crate) fn band_linked(&self, s: u64, len: usize, class_len: usize) {
        let band = self.bands().band_of(class_len);
        self.bands().linked(slot::seg(s), band, len);
        let m = self.seg(slot::seg(s));
        let bit = 1u64 << band;
        // A load first: the bit is set by the segment's first item of the
        // band, so the common case writes nothing shared.
        if m.bands.load(Relaxed) & bit == 0 {
            m.bands.fetch_or(bit, Relaxed);
        }
    }

    pub(crate) fn band_unlinked(&self, s: u64, len: usize, class_len: usize) {
        self.bands().unlinked(slot::seg(s), self.bands().band_of(class_len), len);
    }

    /// memcached's size for the item `it` ([`Bands::class_len`]); `plain`
    /// is its value's original length when it is stored compressed.
    pub(crate) fn class_len_of(&self, it: &crate::item::Item<'_>, plain: u64) -> usize {
        let vlen = if it.compressed() { plain as usize } else { it.value().len() };
        self.bands().class_len(it.key().len(), vlen, it.fields().flags != 0)
    }
}
