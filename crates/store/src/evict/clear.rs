//! Clearing a victim: every live item copied forward (the cleaner, and
//! eviction's second chance) or unlinked (eviction), under its bucket
//! lock; and what is told of an eviction (`watch evictions`, counters).

use super::*;

impl Store {
    /// Whether nothing in sealed segment `s` can be read any more: every
    /// item expired, or the segment predates the last `flush_all`.
    pub(crate) fn all_expired(&self, s: u32, now: u32) -> bool {
        let e = self.seg(s).max_expire.load(Relaxed);
        (e != NEVER && e <= now) || self.is_flushed(s)
    }

    /// Unlinks or moves every live item of `victim`, which the caller has
    /// taken off its queue and so owns, and waits until nobody copies from
    /// it: afterwards it can be reused. False (with `-M` only) if a live
    /// item could not be moved: then it cannot.
    pub(crate) fn clear_segment(&self, victim: u32, how: Clear, active: &mut Active) -> bool {
        let started = Instant::now();
        let c = active.counters.clone();
        let dead = self.dead_bytes_of(victim, self.clock().now());
        let cleared = if self.seg(victim).live_items.load(Acquire) == 0 {
            // Every item was overwritten or deleted: nothing links here.
            Cleared::default()
        } else {
            self.sweep(victim, how, active)
        };
        // Its items bound for flash are written and repointed before the
        // victim can be reused.
        self.flush_flash(active);
        add(&c.bytes_copied, cleared.bytes_copied);
        if cleared.stuck {
            return false;
        }
        if let Clear::Clean(_) = how {
            bump(&c.segments_cleaned);
            add(&c.dead_reclaimed, dead as u64);
            add(&c.cleaner_ns, started.elapsed().as_nanos() as u64);
        }
        bump(if cleared.evicted { &c.segments_evicted } else { &c.segments_reclaimed });
        // A reader that pinned the segment while one of its items was
        // linked may still be copying from it.
        self.wait_unpinned(victim);
        true
    }

    fn sweep(&self, victim: u32, how: Clear, active: &mut Active) -> Cleared {
        let end = self.seg(victim).write_off.load(Acquire) as usize;
        if let Clear::Evict(..) = how {
            let items = self.segs().iter().map(|m| u64::from(m.live_items.load(Relaxed))).sum();
            self.sketch().set_items(items);
            self.ghost().set_items(items);
            active.copies.density().victim(end, self.arena().segment_size(), self.copy_divisor(items));
            let m = self.seg(victim);
            let live = m.live_items.load(Relaxed) as usize;
            active.copies.density().victim_mean((m.live_bytes.load(Relaxed) as usize).checked_div(live).unwrap_or(0));
        }
        let now = self.clock().now();
        let mut cleared = Cleared::default();
        let clear = |batch: &[(usize, usize, Loc)]| {
            for &(off, _, loc) in batch {
                self.clear_item(victim, off, loc, how, now, active, &mut cleared);
                if cleared.stuck {
                    return false;
                }
            }
            true
        };
        // SAFETY: the segment is sealed and owned by us: every byte below
        // `end` was written before it was sealed, and nothing writes it now
        // but expiry fields, which the walk does not read.
        unsafe { self.walk_prefetched(victim, end, clear) };
        cleared
    }

    /// Unlinks or copies forward the item at `off` of `victim`, if the index
    /// still points at it.
    #[allow(clippy::too_many_arguments)]
    fn clear_item(
        &self,
        victim: u32,
        off: usize,
        loc: Loc,
        how: Clear,
        now: u32,
        active: &mut Active,
        cleared: &mut Cleared,
    ) {
        let c = active.counters.clone();
        let granule_off = self.granules(off);
        let (mut promote, mut made_target) = (true, false);
        // At most three rounds: for an item promoted out of the small
        // queue that finds no room in the main queue's target, again into
        // the small queue's; after making room in the target, which takes
        // the eviction and free-list locks, so not under the bucket lock.
        for _ in 0..3 {
            let mut st = self.index().lock(loc.stripe);
            let Some((pos, s)) = st.find(loc.bucket, |s| slot::seg(s) == victim && slot::off(s) == granule_off) else {
                // Overwritten or deleted since: nothing links here.
                return;
            };
            let Some(it) = self.item_at(s) else { return };
            let expired = self.is_flushed(victim) || Clock::is_expired(it.expiry(), now);
            let (target_q, freq) = destination(how, s, promote);
            let fetched = if freq == 0 && slot::was_read(s) { state::FETCHED } else { 0 };
            // Written over in place since it was placed: this copy is the
            // move its new version would have made (`overwrite.rs`), kept
            // whatever its reads, free of the credit as that move was.
            let moved_late = it.state() & state::IN_PLACE != 0 && !matches!(how, Clear::Evict(_, Keep::Nothing));
            let f = Fields { cas: Some(self.cas_of(s, &it)), state: it.fields().state | fetched, ..it.fields() };
            let len = encoded_len(it.key().len(), it.value().len(), &f);
            let evicting = matches!(how, Clear::Evict(..)) && self.config().evictions;
            let copied =
                !expired && (!evicting || moved_late || self.evicted_keeps(s, loc, how, self.aligned(len), active));
            let keep = copied && !(matches!(how, Clear::Evict(_, Keep::ReadUnlessFlash)) && self.flash_eligible(&it));
            if keep {
                // A target in a snapshot's cut takes nothing more (`cut.rs`):
                // a new one is opened below.
                if let Some(t) = active.copies.target_for(self, target_q, self.aligned(len)) {
                    let moved = self.copy_into(t, s, (it.key(), it.value()), &f, freq);
                    st.set(pos, moved);
                    self.unaccount_replaced(&mut st, s, moved);
                    self.account(&mut st, moved);
                    bump(&c.reinserted);
                    cleared.bytes_copied += len as u64;
                    if evicting && !moved_late {
                        active.copies.pay(self.aligned(len));
                    }
                    return;
                }
                drop(st);
                let promoted = matches!(how, Clear::Clean(Queue::Small)) && target_q == Queue::Main;
                if promoted {
                    // Only into room the main target has: the segment
                    // claimed for this clean is for the items that stay,
                    // and a fresh one for the main queue would be one more
                    // segment held open per worker (in the crash
                    // simulator's small stores, whose cleans never evict,
                    // it changed every schedule).
                    promote = false;
                    continue;
                }
                if !made_target && active.copies.new_target(self, target_q) {
                    made_target = true;
                    continue;
                }
                // No segment for a target (or none it fits): the item
                // cannot move. With -M it stays, and so does its segment.
                if !self.config().evictions {
                    cleared.stuck = true;
                    return;
                }
                cleared.evicted |= self.evict_unmoved(victim, granule_off, loc, now, active);
                return;
            }
            if !expired && matches!(how, Clear::Evict(..)) && self.flash_eligible(&it) {
                // To flash instead of away; written once the batch fills,
                // or at the end of the victim (`clear_segment`).
                let full = self.batch_for_flash(active, s, &it, loc, false);
                drop(st);
                if full {
                    self.flush_flash(active);
                }
                cleared.evicted = true;
                return;
            }
            let class_len = self.class_len_of(&it, crate::store::sizes(&it).1);
            let gone = Some((it.state(), it.expiry(), class_len));
            if !expired {
                self.tell_evicted(s, &it, now);
            }
            self.unlink(&mut st, loc.bucket, pos, s);
            if expired {
                bump(&c.expired_unlinked);
                let unfetched = !slot::was_read(s) && it.state() & state::FETCHED == 0;
                if unfetched {
                    bump(&c.expired_unfetched);
                }
                self.bands().expired(victim, class_len, unfetched);
            } else {
                if slot::freq(s) == 0 {
                    // Neither read nor overwritten in its stay.
                    self.ghost().record(loc);
                }
                self.note_evicted(&c, s, gone, now);
                cleared.evicted = true;
            }
            return;
        }
    }

    /// Evicts the live item at granule `granule_off` of `victim` (of key
    /// `loc`) that eviction would have kept but found no room for: to
    /// flash with the tier, else away. False if nothing links it any more.
    fn evict_unmoved(&self, victim: u32, granule_off: u32, loc: Loc, now: u32, active: &mut Active) -> bool {
        let mut st = self.index().lock(loc.stripe);
        let Some((pos, s)) = st.find(loc.bucket, |s| slot::seg(s) == victim && slot::off(s) == granule_off) else {
            return false;
        };
        if let Some(it) = self.item_at(s).filter(|it| self.flash_eligible(it)) {
            let full = self.batch_for_flash(active, s, &it, loc, false);
            drop(st);
            if full {
                self.flush_flash(active);
            }
            return true;
        }
        let gone = self.item_at(s).map(|it| {
            self.tell_evicted(s, &it, now);
            (it.state(), it.expiry(), it.header.total_len())
        });
        self.unlink(&mut st, loc.bucket, pos, s);
        self.note_evicted(&active.counters, s, gone, now);
        true
    }

    /// Tells the eviction hook (`watch evictions`), if there is one.
    fn tell_evicted(&self, s: u64, it: &crate::item::Item<'_>, now: u32) {
        let Some(hook) = self.eviction_watcher() else { return };
        let expiry = it.expiry();
        hook.evicted(&crate::store::Evicted {
            key: it.key(),
            fetched: slot::was_read(s) || it.state() & state::FETCHED != 0,
            ttl: if expiry == 0 { -1 } else { i64::from(expiry) - i64::from(now) },
            age: now.saturating_sub(self.written_at(s)),
            size: it.value().len(),
            class: self.bands().band_of(self.class_len_of(it, crate::store::sizes(it).1)) + 1,
        });
    }

    /// Counts an item evicted from memory, with memcached's detail.
    /// `gone` is its state bits, expiry time and memcached's size for it
    /// ([`crate::bands::Bands::class_len`]), read before unlinking.
    fn note_evicted(&self, c: &Counters, s: u64, gone: Option<(u8, u32, usize)>, now: u32) {
        bump(&c.evictions);
        let Some((bits, expiry, len)) = gone else { return };
        let unfetched = !slot::was_read(s) && bits & state::FETCHED == 0;
        if unfetched {
            bump(&c.evicted_unfetched);
        }
        if expiry != 0 {
            bump(&c.evicted_nonzero);
        }
        let age = now.saturating_sub(self.written_at(s));
        self.note_evicted_age(age);
        self.bands().evicted(slot::seg(s), len, unfetched, expiry != 0, age);
    }

    /// Whether eviction (`how`) copies forward the live item at slot `s` (of
    /// key `loc`, `aligned` bytes copied). Its score is its reads since
    /// written or copied, or those of its key lately (`sketch.rs`),
    /// whichever is more: a key asked for often, but not in this stay, is
    /// kept as if read in it. An unread item counts one access if it is
    /// small against its victim's others (`density.rs`) or, leaving the
    /// small queue, if its key was evicted unread lately and asked for
    /// again since (`ghost.rs`). What eviction copies is paid from the
    /// worker's credit (a fifth of what it writes): past it, read items go
    /// too.
    fn evicted_keeps(&self, s: u64, loc: Loc, how: Clear, aligned: usize, active: &mut Active) -> bool {
        let est = self.sketch().estimate(loc);
        let returned = || matches!(how, Clear::Evict(Queue::Small, _)) && self.ghost().returned(loc);
        let score = if est >= ADMIT_ESTIMATE {
            slot::freq(s).max(est)
        } else if slot::freq(s) == 0 && returned() {
            1
        } else {
            active.copies.density().accesses(slot::freq(s), aligned)
        };
        score >= 1
            && !matches!(how, Clear::Evict(_, Keep::Nothing))
            && active.copies.density().admits(score, aligned)
            && active.copies.can_pay(aligned)
    }

    /// Writes the item at slot `s` (its `key` and stored `value`, laid out
    /// as `f` says) at the end of this worker's copy target `t`, which has
    /// room for it; returns the slot that links the copy, with access count
    /// `freq`. The caller holds the item's bucket lock, and a reference to
    /// the dictionary a compressed `value` names (the victim's, or a fresh
    /// form's: `rezip.rs`).
    pub(crate) fn copy_into(&self, t: u32, s: u64, (key, value): (&[u8], &[u8]), f: &Fields, freq: u8) -> u64 {
        let len = encoded_len(key.len(), value.len(), f);
        let new_off = self.seg(t).write_off.load(Relaxed) as usize;
        // SAFETY: the target belongs to this worker, and this range is
        // above its write offset, so nobody else can see it (rule 1).
        let dst = unsafe { self.arena().bytes_mut(t, new_off, len) };
        let v = write_head(dst, key, value.len(), f);
        dst[v..].copy_from_slice(value);
        if f.compressed {
            self.attach_dict(t, strata_compress::dict_id(value));
        }
        self.seg(t).write_off.store((new_off + self.aligned(len)) as u32, Release);
        self.note_written(t, new_off, self.written_at(s));
        self.note_expiry(t, f.expiry);
        slot::pack(slot::tag(s), freq, t, self.granules(new_off))
    }

    /// Bytes written to segments but no longer linked, over the sealed
    /// segments (what cleaning can win back before anything is evicted).
    pub(crate) fn dead_bytes(&self) -> usize {
        let ev = self.lock_evict();
        self.survey(&ev, false, false).dead
    }

    /// Dead bytes, and whether the next allocation would clean rather than
    /// evict (step 4's test), from one survey: for the property that
    /// nothing live is evicted while it would.
    #[cfg(test)]
    pub(crate) fn worth_cleaning_now(&self) -> (usize, bool) {
        let ev = self.lock_evict();
        let survey = self.survey(&ev, false, false);
        (survey.dead, self.worth_cleaning(&survey))
    }
}

/// Where a live item of a victim cleared `how` goes, and the access count
/// (`index.rs`, "freq") it takes along.
///
/// Eviction's copy forward is CLOCK's reinsertion into the main queue: the
/// count starts again (the read mark goes into the item's state). Cleaning
/// moves an item within its queue with its count (else a read item cleaned
/// out of the small queue would later be evicted as unread), but for an
/// item accessed in the small queue (read, or overwritten over a live
/// version): with `promote` (while the main queue's target has room) it
/// goes to the main queue, as eviction would have moved it. Under
/// overwrites nearly every small segment is cleaned before its turn to be
/// evicted comes, so without this the small queue kept every live item it
/// was given: on workload 6 S3-FIFO's probation queue (10% intended) held
/// 47 of 57 sealed segments, and cold keys stayed as long as hot ones.
fn destination(how: Clear, s: u64, promote: bool) -> (Queue, u8) {
    match how {
        Clear::Evict(..) => (Queue::Main, 0),
        Clear::Clean(Queue::Small) if promote && slot::freq(s) > 0 => (Queue::Main, 0),
        Clear::Clean(q) => (q, slot::freq(s)),
    }
}
