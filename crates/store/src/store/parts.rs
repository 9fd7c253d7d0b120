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

    /// A background reclaimer runs: writers leave reclaiming to it.
    pub(crate) fn reclaiming(&self) -> bool {
        self.reclaiming.load(Relaxed)
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
        self.epoch.load(Relaxed)
    }

    /// A new epoch, for a segment opened for writing.
    pub(crate) fn next_epoch(&self) -> u64 {
        self.epoch.fetch_add(1, Relaxed) + 1
    }

    /// Segments opened at or before this epoch hold only flushed items.
    #[inline]
    pub(crate) fn flush_epoch(&self) -> u64 {
        self.flush_epoch.load(Relaxed)
    }

    /// A delayed `flush_all`'s time (0: none scheduled).
    pub(crate) fn flush_at(&self) -> u32 {
        self.flush_at.load(Relaxed)
    }

    /// Schedules a delayed `flush_all` at `at` (0 cancels it), as a
    /// restart or the log's replay finds it.
    pub(crate) fn set_flush_at(&self, at: u32) {
        self.flush_at.store(at, Relaxed);
    }

    /// Raises the epochs to a snapshot's (see [`Store::resume`]).
    pub(crate) fn raise_epochs(&self, epoch: u64, flush_epoch: u64) {
        self.epoch.fetch_max(epoch, Relaxed);
        self.flush_epoch.fetch_max(flush_epoch, Relaxed);
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

    /// A worker (or the reclaimer) starts: its counters join the totals.
    pub(crate) fn worker_joined(&self, counters: &Arc<Counters>) {
        self.counters.lock().push(counters.clone());
    }

    /// The background reclaimer starts: its counters join the totals and
    /// writers leave reclaiming to it.
    pub(crate) fn reclaimer_joined(&self, counters: &Arc<Counters>) {
        self.worker_joined(counters);
        self.reclaiming.store(true, Relaxed);
    }

    /// A worker starts ([`Store::worker`]): its counters join the totals.
    pub(crate) fn worker_started(&self, counters: &Arc<Counters>) {
        self.worker_joined(counters);
        self.workers.fetch_add(1, Relaxed);
    }

    /// Workers now.
    pub(crate) fn worker_count(&self) -> usize {
        self.workers.load(Relaxed)
    }

    /// A worker ended (its counters stay in the totals).
    pub(crate) fn worker_left(&self) {
        self.workers.fetch_sub(1, Relaxed);
    }

    /// Every worker's counters, locked (for totals).
    pub(crate) fn worker_counters(&self) -> parking_lot::MutexGuard<'_, Vec<Arc<Counters>>> {
        self.counters.lock()
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
