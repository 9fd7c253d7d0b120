//! Size bands: what `stats slabs` and `stats items` report per item size.
//!
//! strata has no slab classes (items of every size share segments), but
//! memcached's tools (`memcached-tool display`, memcached_exporter's
//! per-slab series) read those stats as rows per item size. So the store
//! counts its items in bands whose upper bounds are memcached's chunk sizes
//! for the same `-f` and `-n` (48 + `-n` bytes, times `-f` per class,
//! rounded up to 8, up to half a 1 MiB page; the last band takes the rest),
//! and an operator sees the rows memcached would show for the same data.
//! An item falls in the first band whose bound is at least the size
//! memcached would give the same item ([`Bands::class_len`]: its 48-byte
//! header, the key and a NUL, the flags when non-zero, the value and its
//! CRLF, and 8 bytes of CAS unless `-C`), not the bytes strata stores (its
//! header is smaller, and grows by 4 with a TTL, which memcached's does
//! not): so `slab=5` holds what memcached's class 5 would. A compressed
//! value counts by its original length, as the client stored it.
//!
//! Counts that change on every write live in a few [`BandGroup`]s, picked
//! by the item's segment (so a worker filling its segment writes one
//! group, and an item leaves the group it was counted in), updated with
//! relaxed atomics: contention stays low without growing the index's
//! stripes, which are one cache line each. Eviction and expiry detail is counted where those happen.
//! The age and the segments of a band are read from the segments when
//! asked: each segment keeps a bit per band of the items written into it.
//! Items on flash are counted in the first band (their size is on flash).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::types::SizeClasses;

/// At most this many bands (memcached's `MAX_NUMBER_OF_SLAB_CLASSES` less
/// its unused class 0); a bit each in [`crate::segments::SegMeta`]'s mask.
pub const MAX_BANDS: usize = 63;

/// memcached's item header (`sizeof(item)` on 64-bit), which its class
/// sizes start from.
const MEMCACHED_ITEM_HEADER: usize = 48;

/// memcached's largest chunk: half its 1 MiB slab page.
/// (memcached stores a larger item as chunks of this size behind a small
/// header item, which it counts in a small class: strata counts it in the
/// last band, docs/compat.md.)
const MEMCACHED_CHUNK_MAX: usize = 512 << 10;

/// Groups of counts; segment `n` counts in group `n % GROUPS`.
const GROUPS: usize = 16;

impl SizeClasses {
    /// The bands' upper bounds in bytes, ascending, as memcached computes
    /// its chunk sizes.
    pub fn bounds(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let factor = if self.growth_factor > 1.0 { self.growth_factor } else { 1.25 };
        let mut size = (MEMCACHED_ITEM_HEADER + self.min_size) as f64;
        while out.len() < MAX_BANDS - 1 && size < MEMCACHED_CHUNK_MAX as f64 / factor {
            // memcached truncates, then rounds up to 8; a factor so small
            // that this gives the same size again gives it repeated classes
            // there, the next multiple of 8 here.
            let aligned = ((size as usize).div_ceil(8) * 8) as u32;
            let aligned = out.last().map_or(aligned, |&l: &u32| aligned.max(l + 8));
            out.push(aligned);
            size = f64::from(aligned) * factor;
        }
        out.push(MEMCACHED_CHUNK_MAX as u32);
        out
    }
}

/// One band's counts in one group.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct BandCell {
    items: AtomicU64,
    bytes: AtomicU64,
    evicted: AtomicU64,
    evicted_nonzero: AtomicU64,
    evicted_unfetched: AtomicU64,
    reclaimed: AtomicU64,
    expired_unfetched: AtomicU64,
    outofmemory: AtomicU64,
}

pub(crate) type BandGroup = Box<[BandCell]>;

/// The bands' bounds and counts.
#[derive(Debug)]
pub(crate) struct Bands {
    pub(crate) bounds: Box<[u32]>,
    /// memcached's `use_cas` (off with `-C`): 8 bytes of every item.
    cas: bool,
    groups: Box<[BandGroup]>,
    /// Per band: seconds the latest evicted item of the band had been
    /// stored (memcached's `evicted_time`).
    evicted_time: Box<[AtomicU32]>,
    /// Per band: items the crawler looked at and reclaimed (one crawler
    /// at a time, so no groups).
    crawled: Box<[[AtomicU64; 2]]>,
}

/// What a band holds and has lost, for `stats items` and `stats slabs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BandStats {
    /// The band's upper bound: items up to this many bytes.
    pub chunk_size: u32,
    pub items: u64,
    pub bytes: u64,
    /// Segments in use that hold live items and were written items of
    /// this band since they were opened.
    pub segments: u64,
    /// Seconds since the oldest of those segments was first written.
    pub age: u32,
    pub evicted: u64,
    pub evicted_nonzero: u64,
    pub evicted_unfetched: u64,
    pub evicted_time: u32,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub outofmemory: u64,
    /// Items `lru_crawler crawl` looked at, and reclaimed (expired or
    /// flushed).
    pub crawler_items_checked: u64,
    pub crawler_reclaimed: u64,
}

/// Counts go up and down in the group of the item's segment, so no
/// group's part goes below zero; summing reads groups one at a time.
fn up(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Relaxed);
}

fn down(a: &AtomicU64, n: u64) {
    a.fetch_sub(n, Relaxed);
}

impl Bands {
    /// Band `i`'s counts summed over the groups, with its crawler's
    /// figures (the store adds what the segments say: `Store::size_bands`).
    pub(crate) fn row(&self, i: usize) -> BandStats {
        let mut s = BandStats { chunk_size: self.bounds[i], ..BandStats::default() };
        for g in self.groups.iter() {
            let c = &g[i];
            s.items = s.items.wrapping_add(c.items.load(Relaxed));
            s.bytes = s.bytes.wrapping_add(c.bytes.load(Relaxed));
            s.evicted += c.evicted.load(Relaxed);
            s.evicted_nonzero += c.evicted_nonzero.load(Relaxed);
            s.evicted_unfetched += c.evicted_unfetched.load(Relaxed);
            s.reclaimed += c.reclaimed.load(Relaxed);
            s.expired_unfetched += c.expired_unfetched.load(Relaxed);
            s.outofmemory += c.outofmemory.load(Relaxed);
        }
        // Counts read group by group while writers move items may
        // pass through a negative sum for an instant.
        if s.items > u64::MAX / 2 || s.bytes > u64::MAX / 2 {
            (s.items, s.bytes) = (0, 0);
        }
        s.evicted_time = self.evicted_time[i].load(Relaxed);
        s.crawler_items_checked = self.crawled[i][0].load(Relaxed);
        s.crawler_reclaimed = self.crawled[i][1].load(Relaxed);
        s
    }

    /// Items `lru_crawler crawl` looked at and reclaimed, all bands.
    pub(crate) fn crawler_totals(&self) -> (u64, u64) {
        self.crawled.iter().fold((0, 0), |(c, r), b| (c + b[0].load(Relaxed), r + b[1].load(Relaxed)))
    }

    pub(crate) fn new(classes: SizeClasses, cas: bool) -> Bands {
        let bounds: Box<[u32]> = classes.bounds().into();
        let n = bounds.len();
        let groups = (0..GROUPS).map(|_| (0..n).map(|_| BandCell::default()).collect()).collect();
        Bands {
            evicted_time: (0..n).map(|_| AtomicU32::new(0)).collect(),
            crawled: (0..n).map(|_| Default::default()).collect(),
            bounds,
            cas,
            groups,
        }
    }

    /// The size memcached gives an item (`ITEM_ntotal`: `sizeof(item)`,
    /// the key and its NUL, the client flags when non-zero, the value with
    /// its CRLF, and the CAS unless `-C`), which picks its band.
    pub(crate) fn class_len(&self, klen: usize, vlen: usize, flags: bool) -> usize {
        MEMCACHED_ITEM_HEADER + klen + 1 + if flags { 4 } else { 0 } + vlen + 2 + if self.cas { 8 } else { 0 }
    }

    /// The band of an item memcached would give `len` bytes
    /// ([`Bands::class_len`]).
    pub(crate) fn band_of(&self, len: usize) -> usize {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        self.bounds.partition_point(|&b| b < len).min(self.bounds.len() - 1)
    }

    fn cell(&self, seg: u32, band: usize) -> &BandCell {
        &self.groups[seg as usize % GROUPS][band]
    }

    pub(crate) fn linked(&self, seg: u32, band: usize, len: usize) {
        let c = self.cell(seg, band);
        up(&c.items, 1);
        up(&c.bytes, len as u64);
    }

    /// [`Bands::linked`] for `items` items of `bytes` in all.
    pub(crate) fn linked_many(&self, seg: u32, band: usize, items: u64, bytes: u64) {
        let c = self.cell(seg, band);
        up(&c.items, items);
        up(&c.bytes, bytes);
    }

    pub(crate) fn unlinked(&self, seg: u32, band: usize, len: usize) {
        let c = self.cell(seg, band);
        down(&c.items, 1);
        down(&c.bytes, len as u64);
    }

    /// An item whose value is on flash keeps only its index slot in
    /// memory, and its size is not known without reading the record: it
    /// is counted in the first band, as memcached counts an extstore
    /// item's in-memory header in one of its smallest classes (its bytes
    /// are not in the band's: they are not in memory).
    pub(crate) fn flash_linked(&self) {
        up(&self.cell(0, 0).items, 1);
    }

    pub(crate) fn flash_unlinked(&self) {
        down(&self.cell(0, 0).items, 1);
    }

    pub(crate) fn evicted(&self, seg: u32, len: usize, unfetched: bool, nonzero: bool, age: u32) {
        let band = self.band_of(len);
        let c = self.cell(seg, band);
        up(&c.evicted, 1);
        if unfetched {
            up(&c.evicted_unfetched, 1);
        }
        if nonzero {
            up(&c.evicted_nonzero, 1);
        }
        self.evicted_time[band].store(age, Relaxed);
    }

    pub(crate) fn expired(&self, seg: u32, len: usize, unfetched: bool) {
        let c = self.cell(seg, self.band_of(len));
        up(&c.reclaimed, 1);
        if unfetched {
            up(&c.expired_unfetched, 1);
        }
    }

    pub(crate) fn crawled(&self, band: usize, checked: u64, reclaimed: u64) {
        up(&self.crawled[band][0], checked);
        up(&self.crawled[band][1], reclaimed);
    }

    pub(crate) fn out_of_memory(&self, len: usize) {
        up(&self.cell(0, self.band_of(len)).outofmemory, 1);
    }

    /// Zeroes the counters `stats reset` resets (not the items held).
    pub(crate) fn reset(&self) {
        for g in self.groups.iter() {
            for c in g.iter() {
                for a in [
                    &c.evicted,
                    &c.evicted_nonzero,
                    &c.evicted_unfetched,
                    &c.reclaimed,
                    &c.expired_unfetched,
                    &c.outofmemory,
                ] {
                    a.store(0, Relaxed);
                }
            }
        }
        for c in self.crawled.iter().flatten() {
            c.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_memcacheds_chunk_sizes() {
        // memcached 1.6 -vv at -f 1.25 -n 48: 96, 120, 152, 192, 240, ...,
        // and its largest class is 512 KiB.
        let b = SizeClasses::default().bounds();
        assert_eq!(&b[..6], &[96, 120, 152, 192, 240, 304]);
        assert_eq!(b.last(), Some(&(512 << 10)));
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(b.len() <= MAX_BANDS);
        assert_eq!(b.len(), 39);
        let b = SizeClasses { growth_factor: 2.0, min_size: 16 }.bounds();
        assert_eq!(b.len(), 13, "{b:?}");
        assert_eq!(&b[11..], &[131072, 512 << 10]);
        // A factor barely above one still stops at the band limit.
        let b = SizeClasses { growth_factor: 1.01, min_size: 48 }.bounds();
        assert_eq!(b.len(), MAX_BANDS);
        assert_eq!(b.last(), Some(&(512 << 10)));
    }

    #[test]
    fn band_of_takes_the_first_bound_that_holds_the_item() {
        let bands = Bands::new(SizeClasses::default(), true);
        assert_eq!(bands.band_of(1), 0);
        assert_eq!(bands.band_of(96), 0);
        assert_eq!(bands.band_of(97), 1);
        assert_eq!(bands.band_of(1 << 30), bands.bounds.len() - 1);
    }

    #[test]
    fn cells_are_a_cache_line() {
        assert_eq!(std::mem::size_of::<BandCell>(), 64);
    }
}
