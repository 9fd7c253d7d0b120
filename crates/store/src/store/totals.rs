//! Store-wide changes and figures: `flush_all` (now or at a time), the
//! `stats` totals summed from every worker's counters, `stats reset`, and
//! where the memory holding nothing is ([`Store::idle`]).

use super::*;

impl Store {
    /// `flush_all`: now if `at` is `None` or not in the future, else at `at`.
    /// Returns the journal position of the change (0 without a journal).
    /// Refused, with nothing changed, once the journal has failed: a flush
    /// the log does not hold would be undone by a crash
    /// ([`StoreError::NotLogged`]).
    pub fn flush_all(&self, at: Option<u32>) -> Result<u64, StoreError> {
        // Under the flush lock, so the journal's order is the flushes' order.
        let _g = self.flush_lock.lock();
        self.check_journal()?;
        Ok(match at {
            Some(t) if t > self.clock.now() => {
                self.epochs.set_flush_at(t);
                self.journal().map_or(0, |j| j.flush_at(t))
            }
            _ => {
                self.epochs.set_flush_at(0);
                self.flush_now();
                self.journal().map_or(0, |j| j.flush())
            }
        })
    }

    /// A delayed `flush_all` that has come due takes effect. It does so
    /// even after the journal failed: it was acknowledged while the log
    /// worked and is logged as "flush at", and recovery makes a "flush at"
    /// whose time has passed take effect on the first request, so the
    /// cache after a crash is what it is here (the `Flush` record written
    /// now only marks the moment for the records that follow, and none
    /// follow a failed log).
    pub(crate) fn maybe_flush(&self) {
        let at = self.epochs.flush_at();
        if at != 0 && self.clock.now() >= at {
            let _g = self.flush_lock.lock();
            if self.epochs.flush_at() == at {
                self.flush_now();
                self.epochs.set_flush_at(0);
                // The moment it took effect: writes journaled after this
                // record were made after the flush.
                if let Some(j) = self.journal() {
                    j.flush();
                }
            }
        }
    }

    /// Invalidates everything written so far in O(1): every segment opened
    /// up to now is flushed. Writers move off flushed segments before their
    /// next write, and lookups and eviction drop flushed items lazily.
    pub(crate) fn flush_now(&self) {
        self.epochs.flush_now();
    }

    pub fn stats(&self) -> StoreStats {
        let mut s = StoreStats {
            segments_total: self.segs.len() as u64,
            segments_free: self.budget.free_len() as u64,
            segments_in_use: u64::from(self.budget.in_use()),
            segment_size: self.arena.segment_size() as u64,
            memory_limit: self.memory_limit() as u64,
            index_bytes: self.index.memory() as u64,
            hash_power: usize::BITS - 1 - self.index.main_buckets().leading_zeros(),
            ..StoreStats::default()
        };
        for i in 0..self.index.stripes() {
            let st = self.index.lock(i);
            s.curr_items += st.items;
            s.bytes += st.bytes;
            s.compressed_items += st.zitems;
            s.compressed_plain_bytes += st.zplain;
            s.compressed_stored_bytes += st.zstored;
        }
        for c in self.roster.counters().iter() {
            s.total_items += c.total_items.load(Relaxed);
            s.get_expired += c.get_expired.load(Relaxed);
            s.get_flushed += c.get_flushed.load(Relaxed);
            s.evictions += c.evictions.load(Relaxed);
            s.evicted_unfetched += c.evicted_unfetched.load(Relaxed);
            s.evicted_nonzero += c.evicted_nonzero.load(Relaxed);
            s.expired_unfetched += c.expired_unfetched.load(Relaxed);
            s.expired_unlinked += c.expired_unlinked.load(Relaxed);
            s.reinserted += c.reinserted.load(Relaxed);
            s.overwritten_in_place += c.overwritten_in_place.load(Relaxed);
            s.alloc_last_resort += c.alloc_last_resort.load(Relaxed);
            s.alloc_waited += c.alloc_waited.load(Relaxed);
            s.reclaim_inline += c.reclaim_inline.load(Relaxed);
            s.reclaim_waited += c.reclaim_waited.load(Relaxed);
            s.memory_waits += c.memory_waits.load(Relaxed);
            s.reclaim_background += c.reclaim_background.load(Relaxed);
            s.reclaim_cheap += c.reclaim_cheap.load(Relaxed);
            s.segments_evicted += c.segments_evicted.load(Relaxed);
            s.segments_reclaimed += c.segments_reclaimed.load(Relaxed);
            s.bytes_stored += c.bytes_stored.load(Relaxed);
            s.bytes_copied += c.bytes_copied.load(Relaxed);
            s.segments_cleaned += c.segments_cleaned.load(Relaxed);
            s.dead_reclaimed += c.dead_reclaimed.load(Relaxed);
            s.cleaner_us += c.cleaner_ns.load(Relaxed) / 1000;
            s.decompress_errors += c.decompress_errors.load(Relaxed);
        }
        s.compression = self.codec.as_ref().map(|c| c.stats());
        s.flash = self.flash_stats();
        s.dead_bytes = self.dead_bytes() as u64;
        let idle = self.idle();
        s.idle_bytes = (idle.free + idle.open + idle.sealed) as u64;
        (s.idle_free_bytes, s.idle_open_bytes) = (idle.free as u64, idle.open as u64);
        s.idle_sealed_bytes = idle.sealed as u64;
        s.evicted_age = self.evicted_age.load(Relaxed);
        s
    }

    /// Live items evicted so far: `stats().evictions` without visiting
    /// every stripe.
    #[cfg(test)]
    pub(crate) fn evictions(&self) -> u64 {
        self.roster.counters().iter().map(|c| c.evictions.load(Relaxed)).sum()
    }

    /// Sets who is told of items evicted from memory (once; later calls
    /// are ignored).
    pub fn on_evict(&self, watcher: Arc<dyn EvictionWatcher>) {
        let _ = self.evict_hook.set(watcher);
    }

    /// Zeroes the counters `stats reset` resets.
    pub fn reset_stats(&self) {
        self.bands.reset();
        for c in self.roster.counters().iter() {
            let all = [
                &c.total_items,
                &c.get_expired,
                &c.get_flushed,
                &c.evictions,
                &c.evicted_unfetched,
                &c.evicted_nonzero,
                &c.expired_unfetched,
                &c.expired_unlinked,
                &c.reinserted,
                &c.overwritten_in_place,
                &c.alloc_last_resort,
                &c.alloc_waited,
                &c.reclaim_inline,
                &c.reclaim_waited,
                &c.memory_waits,
                &c.reclaim_background,
                &c.reclaim_cheap,
                &c.bytes_stored,
                &c.bytes_copied,
                &c.segments_cleaned,
                &c.dead_reclaimed,
                &c.cleaner_ns,
                &c.flash_hits,
                &c.flash_recached,
                &c.flash_misses,
                &c.flash_moved,
                &c.flash_evicted,
                &c.flash_copied,
                &c.flash_reads_async,
                &c.flash_reads_coalesced,
                &c.flash_evicted_bytes,
                &c.flash_aged,
                &c.flash_copy_lost,
                &c.flash_oom,
            ];
            for a in all {
                a.store(0, Relaxed);
            }
        }
    }
}

/// Room in the segment budget that holds nothing ([`Store::idle`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Idle {
    pub(crate) free: usize,
    pub(crate) open: usize,
    pub(crate) sealed: usize,
}

impl Store {
    /// Bytes of the segment budget that hold nothing, live or dead, by
    /// where they are: free segments within the budget, the unwritten
    /// ends of segments being written (workers' open segments and copy
    /// targets), and the tails of sealed ones (sealed before they filled:
    /// an item larger than the room left, a snapshot's cut).
    pub(crate) fn idle(&self) -> Idle {
        let in_use = self.in_use();
        let size = self.arena().segment_size();
        let mut sealed = vec![false; in_use.len()];
        {
            let q = self.lock_evict();
            for &s in q.small.iter().chain(&q.main) {
                sealed[s as usize] = true;
            }
        }
        let (mut used, mut open, mut tails) = (0, 0, 0);
        for (i, m) in self.segs().iter().enumerate().filter(|&(i, _)| in_use[i]) {
            let room = size.saturating_sub(m.write_off.load(Relaxed) as usize);
            used += 1;
            if sealed[i] {
                tails += room;
            } else {
                open += room;
            }
        }
        let free = (self.segment_budget() as usize).saturating_sub(used) * size;
        Idle { free, open, sealed: tails }
    }
}
