//! The store's parts, as the crate's other modules reach them.

use super::*;

/// The store's parts, for the crate's other modules: the shared
/// structures they work on (the index, the arena, segment metadata, size
/// bands, the memory budget, the eviction queues), and what they do with
/// the store-wide state (epochs, flush, snapshots, starvation, workers).
/// The hot ones are references, inlined to the same code as a field.
impl Store {
    #[inline]
    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    #[inline]
    pub(crate) fn arena(&self) -> &Arena {
        &self.arena
    }

    /// Segment `seg`'s metadata.
    #[inline]
    pub(crate) fn seg(&self, seg: u32) -> &SegMeta {
        &self.segs[seg as usize]
    }

    /// Every segment's metadata, in segment order.
    #[inline]
    pub(crate) fn segs(&self) -> &[SegMeta] {
        &self.segs
    }

    #[inline]
    pub(crate) fn sketch(&self) -> &crate::sketch::Sketch {
        &self.sketch
    }

    #[inline]
    pub(crate) fn ghost(&self) -> &crate::ghost::Ghost {
        &self.ghost
    }

    #[cfg(test)]
    pub(crate) fn climber(&self) -> &Mutex<crate::climb::Climber> {
        &self.climber
    }

    /// The budget divisor for eviction's copy-forward (`climb.rs`), after a
    /// look at the reads and misses so far with `items` in memory.
    pub(crate) fn copy_divisor(&self, items: u64) -> u64 {
        let (reads, misses) = self.sketch.totals();
        let mut c = self.climber.lock();
        c.observe(reads, misses, 2 * items);
        c.divisor()
    }

    pub(crate) fn bands(&self) -> &crate::bands::Bands {
        &self.bands
    }

    #[inline]
    pub(crate) fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The eviction queues, locked.
    pub(crate) fn lock_evict(&self) -> parking_lot::MutexGuard<'_, Evict> {
        self.evict.lock()
    }

    /// What the background reclaimer and the writers share (`reclaim.rs`).
    pub(crate) fn reclaim_state(&self) -> &crate::reclaim::Shared {
        &self.reclaim
    }

    /// The I/O threads that read from flash, if any.
    pub(crate) fn aio(&self) -> Option<&crate::aio::Pool> {
        self.aio.as_ref()
    }

    /// A slot's offset in its segment, in bytes.
    #[inline]
    pub(crate) fn byte_off(&self, s: u64) -> usize {
        (slot::off(s) as usize) << self.granule_shift
    }

    /// A byte offset in a segment as a slot holds it (in granules).
    #[inline]
    pub(crate) fn granules(&self, off: usize) -> u32 {
        (off >> self.granule_shift) as u32
    }

    /// The unit items are aligned to in segments, in bytes.
    #[inline]
    pub(crate) fn granule(&self) -> usize {
        1 << self.granule_shift
    }

    /// Epochs handed out so far (the snapshot keeps a lease above it, see
    /// `strata-persist`).
    pub fn epoch(&self) -> u64 {
        self.epochs.now()
    }

    /// Segments' epochs, and the flushes by them (`segments.rs`).
    #[inline]
    pub(crate) fn epochs(&self) -> &crate::segments::Epochs {
        &self.epochs
    }

    /// The running snapshot's cut (`cut.rs`).
    pub(crate) fn cut(&self) -> &crate::cut::Cut {
        &self.cut
    }

    /// The requests to seal (`seal.rs`).
    pub(crate) fn seals(&self) -> &crate::seal::Seals {
        &self.seals
    }

    /// Sets what wakes the workers when a writer finds no segment it may
    /// take, or the age pass wants idle segments sealed: each then calls
    /// [`Worker::seal_if_starved`](crate::Worker::seal_if_starved) between
    /// requests, so that an idle worker's half-filled segments can be
    /// evicted or sent to flash too.
    pub fn on_starved(&self, wake: Box<dyn Fn() + Send + Sync>) {
        self.seals.set_hook(wake);
    }

    /// Who wants to hear of evictions now, if anyone.
    pub(crate) fn eviction_watcher(&self) -> Option<&Arc<dyn EvictionWatcher>> {
        self.evict_hook.get().filter(|h| h.wanted())
    }

    /// Notes how long the item evicted last had been stored.
    pub(crate) fn note_evicted_age(&self, age: u32) {
        self.evicted_age.store(age, Relaxed);
    }

    /// Who works on the store, and their counters (`counters.rs`).
    pub(crate) fn roster(&self) -> &crate::counters::Roster {
        &self.roster
    }

    /// The flash tier's `ext_item_size` now.
    pub(crate) fn flash_min_item(&self) -> usize {
        self.flash_tuning.min_item.load(Relaxed)
    }

    /// The flash tier's `ext_item_age` now.
    pub(crate) fn flash_item_age(&self) -> u32 {
        self.flash_tuning.item_age.load(Relaxed)
    }

    /// The flash tier's `ext_recache_rate` now.
    pub(crate) fn flash_recache_rate(&self) -> u32 {
        self.flash_tuning.recache_rate.load(Relaxed)
    }

    /// Starts reporting changes to `journal` (once; before workers write).
    pub fn set_journal(&self, journal: Arc<dyn crate::journal::Journal>) {
        let _ = self.journal.set(journal);
    }

    pub(crate) fn journal(&self) -> Option<&dyn crate::journal::Journal> {
        self.journal.get().map(|j| &**j)
    }
}
