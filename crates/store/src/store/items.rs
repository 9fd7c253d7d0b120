//! Items in the store: CAS, finding an item under its bucket lock and
//! judging it alive, linking and unlinking it (with the totals and size
//! bands that follow it), the index's growth, and the in-place changes to
//! a published item's header.

use super::*;

impl Store {
    /// Walks the items of `seg` below `end` a batch at a time: each batch's
    /// index buckets are asked for (prefetched) before `f` sees it, so that
    /// the cache miss every item's lookup waits on overlaps the others'
    /// (a save of 3 M small items spent 88% of its time on them one by
    /// one). `f` gets each item's offset, length and key's location, and
    /// returns false to stop the walk.
    ///
    /// # Safety
    ///
    /// Every byte of `seg` below `end` was written before the walk, and no
    /// header's lengths or key change while it runs: the segment is sealed
    /// and pinned, or owned by the caller (rule 4 of `arena.rs`).
    pub(crate) unsafe fn walk_prefetched(
        &self,
        seg: u32,
        end: usize,
        mut f: impl FnMut(&[(usize, usize, Loc)]) -> bool,
    ) {
        const BATCH: usize = 16;
        let mut batch = [(0usize, 0usize, Loc::default()); BATCH];
        let mut scan = 0;
        while scan < end {
            let mut n = 0;
            while n < BATCH && scan < end {
                // SAFETY: the caller's: written below `end`, and `header`
                // reads only the lengths, which never change.
                let Some(h) = (unsafe { self.arena().header(seg, scan, end) }) else {
                    scan = end;
                    break;
                };
                // SAFETY: as above; `header` checked the item ends by `end`,
                // and a key is never rewritten.
                let key = unsafe { self.arena().bytes(seg, scan + h.header_len(), usize::from(h.klen)) };
                let loc = self.index().locate(key);
                self.index().prefetch(loc);
                batch[n] = (scan, h.total_len(), loc);
                n += 1;
                scan += self.aligned(h.total_len());
            }
            if !f(&batch[..n]) {
                return;
            }
        }
    }

    /// Bytes of per-item overhead counted against `-I` (the worst-case header).
    pub const ITEM_OVERHEAD: usize = MAX_HEADER_LEN;

    pub(crate) fn derived_cas(&self, seg: u32, off: usize) -> u64 {
        self.cas_at(self.segs[seg as usize].epoch.load(Relaxed), off)
    }

    /// The CAS derived for an item at `off` of a segment opened at `epoch`.
    pub(crate) fn cas_at(&self, epoch: u64, off: usize) -> u64 {
        debug_assert!((off as u64) < 1 << self.cas_off_bits);
        (epoch << self.cas_off_bits) | off as u64
    }

    /// Bits of a CAS below its epoch's: offsets within a segment.
    pub(crate) fn cas_off_bits(&self) -> u32 {
        self.cas_off_bits
    }

    pub(crate) fn cas_of(&self, s: u64, it: &Item<'_>) -> u64 {
        if !self.cfg.cas {
            return 0;
        }
        it.explicit_cas().unwrap_or_else(|| self.derived_cas(slot::seg(s), self.byte_off(s)))
    }

    /// The linked item a slot points at.
    ///
    /// Callers hold the slot's stripe lock, which is what keeps the item alive
    /// and its bytes visible (arena rules 2 and 3).
    pub(crate) fn item_at(&self, s: u64) -> Option<Item<'_>> {
        if slot::is_flash(s) {
            return None;
        }
        // SAFETY: the slot is linked and the caller holds its bucket lock.
        unsafe { self.arena.item(slot::seg(s), self.byte_off(s)) }
    }

    /// The slot of `key`, if linked (expired or not).
    pub(crate) fn find(&self, st: &Stripe, loc: Loc, key: &[u8]) -> Option<(Pos, u64)> {
        st.find(loc.bucket, |s| slot::tag(s) == loc.tag && self.item_at(s).is_some_and(|it| it.key() == key))
    }

    /// The slot of `key` if it is linked and alive; an expired or flushed
    /// item found on the way is unlinked, and the miss says which it was.
    pub(crate) fn lookup(
        &self,
        st: &mut Stripe,
        loc: Loc,
        key: &[u8],
        now: u32,
        c: &Counters,
    ) -> Result<(Pos, u64), Miss> {
        let Some((pos, s)) = self.find(st, loc, key) else {
            // The key in memory is its newest version; without one, a
            // flash slot with its tags may hold it.
            return Err(if self.flash_candidate(st, loc).is_some() { Miss::OnFlash } else { Miss::Absent });
        };
        let it = self.item_at(s).ok_or(Miss::Absent)?;
        let Some(miss) = self.dead(s, &it, now) else { return Ok((pos, s)) };
        let class_len = self.class_len_of(&it, sizes(&it).1);
        self.unlink(st, loc.bucket, pos, s);
        if miss == Miss::Flushed {
            bump(&c.flushed_unlinked);
        } else {
            bump(&c.expired_unlinked);
            if !slot::is_flash(s) {
                self.bands.expired(slot::seg(s), class_len, false);
            }
        }
        Err(miss)
    }

    /// Why the linked item at slot `s` no longer counts (flushed or
    /// expired), if it does not.
    pub(crate) fn dead(&self, s: u64, it: &Item<'_>, now: u32) -> Option<Miss> {
        if self.is_flushed(slot::seg(s)) {
            Some(Miss::Flushed)
        } else if Clock::is_expired(it.expiry(), now) {
            Some(Miss::Expired)
        } else {
            None
        }
    }

    pub(crate) fn unlink(&self, st: &mut Stripe, bucket: u32, pos: Pos, s: u64) {
        st.remove(bucket, pos);
        self.unaccount(st, s);
    }

    /// [`Store::unaccount`] for `s` replaced by `new` (a newer version or
    /// a copy), linked in its place under the same bucket lock. A new
    /// version in a segment of a running snapshot's cut is saved from
    /// there (`cut.rs`): the old one is then not noted, or the snapshot
    /// would hold two versions of the key. Outside a race that cannot be:
    /// writers and copy targets take no segment of the cut. But the cut is
    /// published without the bucket locks, so it can begin between a
    /// writer's or a copy's check of its segment and this unlink (the wire
    /// test of snapshots with large values saw one key's copy and its
    /// original both saved, once in ~45 runs), or between two looks at it
    /// here: so one look decides both (`cut_tests.rs`, a cut that begins
    /// inside an overwrite). The same holds for a value brought back from
    /// flash into memory (`tier/read.rs`).
    pub(crate) fn unaccount_replaced(&self, st: &mut Stripe, s: u64, new: u64) {
        let g = self.cut_gen();
        #[cfg(test)]
        crate::cut::after_cut_look();
        let saved = !slot::is_flash(new) && self.frozen_in(g, slot::seg(new));
        self.unaccount_as(st, s, if saved { 0 } else { g });
    }

    /// Takes the item at slot `s`, no longer linked, out of the totals.
    pub(crate) fn unaccount(&self, st: &mut Stripe, s: u64) {
        self.unaccount_as(st, s, self.cut_gen());
    }

    /// [`Store::unaccount`], noting the death for cut `g` (0: none) if it
    /// is running and holds the item.
    fn unaccount_as(&self, st: &mut Stripe, s: u64, g: u64) {
        if slot::is_flash(s) {
            // Linked at a running snapshot's cut, it is still saved (`cut.rs`).
            self.note_flash_death(g, flash::addr(s));
            st.items -= 1;
            self.bands.flash_unlinked();
            if let Some(t) = &self.cfg.flash {
                t.log.unlink(t.log.region_of(t.log.from_slot(flash::addr(s))));
            }
            return;
        }
        let (len, class_len, plain, stored) = self.item_sizes(s);
        st.items -= 1;
        st.bytes -= len as u64;
        self.band_unlinked(s, len, class_len);
        self.sizes.unlinked(class_len);
        if stored != 0 {
            st.zitems -= 1;
            st.zplain -= plain;
            st.zstored -= stored;
        }
        // Linked at a running snapshot's cut, it is still saved (`cut.rs`).
        self.note_death(g, slot::seg(s), self.byte_off(s));
        let m = &self.segs[slot::seg(s) as usize];
        // Release: a pin taken on the segment before this item left is
        // seen by whoever finds the segment empty (`clear_segment`).
        m.live_items.fetch_sub(1, Release);
        m.live_bytes.fetch_sub(len as u32, Relaxed);
    }

    /// memcached's `stats sizes_enable` / `sizes_disable` (`-o
    /// track_sizes` at start): counts items linked from now on by size.
    pub fn track_sizes(&self, on: bool) {
        if on {
            self.sizes.enable();
        } else {
            self.sizes.disable();
        }
    }

    /// `stats sizes`: `(size, items)` per 32-byte bucket holding items,
    /// `None` while not tracking ([`Store::track_sizes`]).
    pub fn item_sizes_report(&self) -> Option<Vec<(usize, u64)>> {
        self.sizes.report()
    }

    /// The item at memory slot `s`: its stored bytes, memcached's size for
    /// it, and for a compressed value its original and stored lengths.
    fn item_sizes(&self, s: u64) -> (usize, usize, u64, u64) {
        self.item_at(s).map_or((0, 0, 0, 0), |it| self.sizes_of(&it))
    }

    /// [`Store::item_sizes`] of an item in hand.
    pub(crate) fn sizes_of(&self, it: &Item<'_>) -> (usize, usize, u64, u64) {
        let (len, plain, stored) = sizes(it);
        (len, self.class_len_of(it, plain), plain, stored)
    }

    /// Counts the item at slot `s`, just linked, in the totals.
    pub(crate) fn account(&self, st: &mut Stripe, s: u64) {
        if slot::is_flash(s) {
            st.items += 1;
            self.bands.flash_linked();
            if let Some(t) = &self.cfg.flash {
                t.log.link(t.log.region_of(t.log.from_slot(flash::addr(s))));
            }
            return;
        }
        let (len, class_len, plain, stored) = self.item_sizes(s);
        Self::account_in_stripe(st, len, plain, stored);
        self.band_linked(s, len, class_len);
        self.sizes.linked(class_len);
        let m = &self.segs[slot::seg(s) as usize];
        m.live_items.fetch_add(1, Relaxed);
        m.live_bytes.fetch_add(len as u32, Relaxed);
    }

    /// [`Store::account`]'s share in the stripe's totals: a load counts
    /// the rest for a whole segment at once ([`Store::account_segment`]).
    pub(crate) fn account_in_stripe(st: &mut Stripe, len: usize, plain: u64, stored: u64) {
        st.items += 1;
        st.bytes += len as u64;
        if stored != 0 {
            st.zitems += 1;
            st.zplain += plain;
            st.zstored += stored;
        }
    }

    /// Counts an item memcached would size at `class_len` bytes in `stats
    /// sizes` (while tracking): [`Store::account`]'s share there.
    pub(crate) fn count_size(&self, class_len: usize) {
        self.sizes.linked(class_len);
    }

    /// [`Store::account`]'s share outside the stripe, for the items of
    /// `seg` that `tally` counted (see [`SegTally`]).
    pub(crate) fn account_segment(&self, seg: u32, tally: &SegTally) {
        let m = &self.segs[seg as usize];
        for (band, &(items, bytes)) in tally.bands.iter().enumerate() {
            if items > 0 {
                self.bands.linked_many(seg, band, items, bytes);
                m.bands.fetch_or(1u64 << band, Relaxed);
            }
        }
        m.live_items.fetch_add(tally.items, Relaxed);
        m.live_bytes.fetch_add(tally.bytes, Relaxed);
    }

    /// Notes that `seg` holds a value compressed with dictionary `id`: the
    /// segment keeps a reference to the dictionary until it is emptied
    /// (`unuse`), so a dictionary outlives every value that names it
    /// without a count per item (and without visiting items when whole
    /// segments expire or are flushed). The caller holds a reference to
    /// the dictionary (its fresh stored form's, or the item it copies).
    pub(crate) fn attach_dict(&self, seg: u32, id: u8) {
        let Some(codec) = &self.codec else { return };
        if id == NO_DICT {
            return;
        }
        let (word, bit) = (&self.segs[seg as usize].dicts, 1u64 << (id & strata_compress::MAX_DICT_ID));
        // The bit is set once per segment and dictionary: the load keeps
        // later writers off the shared line's locked instruction.
        if word.load(Relaxed) & bit == 0 && word.fetch_or(bit, Relaxed) & bit == 0 {
            let held = codec.retain(id);
            debug_assert!(held, "a dictionary is attached only while referenced");
        }
    }

    /// Gives back the dictionary references of an emptied segment.
    pub(crate) fn detach_dicts(&self, seg: u32) {
        let Some(codec) = &self.codec else { return };
        let mut bits = self.segs[seg as usize].dicts.swap(0, Relaxed);
        while bits != 0 {
            let id = bits.trailing_zeros() as u8;
            bits &= bits - 1;
            codec.release(id);
        }
    }

    /// Links a new item written at `at` for `loc`, replacing `old` if given.
    /// `freq` carries the read count over when only the layout changed.
    /// Returns the journal position of the change (0 without a journal).
    pub(crate) fn link(
        &self,
        st: &mut Stripe,
        loc: Loc,
        old: Option<(Pos, u64)>,
        at: Placed,
        freq: u8,
        c: &Counters,
    ) -> u64 {
        let Placed { seg, off, len } = at;
        add(&c.bytes_stored, len as u64);
        let new = slot::pack(loc.tag, freq, seg, self.granules(off));
        match old {
            Some((pos, s)) => {
                st.set(pos, new);
                self.unaccount_replaced(st, s, new);
            }
            None => {
                let before = st.footprint();
                st.insert(loc.bucket, new);
                self.account(st, new);
                if st.wants_growth() {
                    self.grow(loc.stripe, st, c);
                }
                self.index.note_footprint(before, st.footprint());
                bump(&c.total_items);
                return self.journal_item(new);
            }
        }
        self.account(st, new);
        bump(&c.total_items);
        self.journal_item(new)
    }

    /// Doubles stripe `stripe`'s table: memory items are re-placed by
    /// their keys, flash items by the hash bits their slots carry.
    pub(crate) fn grow(&self, stripe: usize, st: &mut Stripe, c: &Counters) {
        let bits = st.table_bits();
        let dropped = self.index.grow(stripe, st, |s, b| {
            if slot::is_flash(s) {
                return crate::index::replace_flash(s, b, bits);
            }
            Some((self.item_at(s).map_or(0, |it| self.index.locate(it.key()).bucket), s))
        });
        for s in dropped {
            self.unaccount(st, s);
            bump(&c.flash_dropped_growth);
        }
    }
}

/// An item's bytes, and for a compressed value its original and stored
/// value lengths ((0, 0) for a plain one).
pub(crate) fn sizes(it: &Item<'_>) -> (usize, u64, u64) {
    let len = it.header.total_len();
    if !it.compressed() {
        return (len, 0, 0);
    }
    let plain = strata_compress::original_len(it.value()).unwrap_or(0) as u64;
    (len, plain, it.value().len() as u64)
}

/// Why a lookup found nothing alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    Absent,
    Expired,
    Flushed,
    /// Not in memory, but a flash slot may hold it: bring it in first.
    OnFlash,
}

impl Store {
    /// The CAS an item written at `seg`/`off` with fields `f` reads back as.
    pub(crate) fn placed_cas(&self, seg: u32, off: usize, f: &Fields) -> u64 {
        if !self.cfg.cas {
            return 0;
        }
        f.cas.unwrap_or_else(|| self.derived_cas(seg, off))
    }

    /// Rewrites the state byte of a linked item in place. Takes the
    /// item's header, not a view of it: no view of the item's bytes may be
    /// alive across this write (arena rule 4), so callers read what they
    /// need first and take a new view after.
    pub(crate) fn set_state(&self, s: u64, header: Header, bits: u8) {
        if let Some(at) = header.state_at() {
            // SAFETY: the caller holds the item's bucket lock, the only way
            // anyone reads or writes a state byte (arena rule 4).
            let dst = unsafe { self.arena.bytes_mut(slot::seg(s), self.byte_off(s) + at, 1) };
            dst[0] = bits;
        }
    }

    /// Rewrites the expiry of a linked item in place; false if it has no
    /// expiry field to rewrite. As for [`Store::set_state`], no view of the
    /// item may be alive across this.
    pub(crate) fn set_expiry(&self, s: u64, header: Header, expiry: u32) -> bool {
        match header.expiry_at() {
            Some(at) => {
                // SAFETY: the caller holds the item's bucket lock, the only
                // way anyone reads or writes an expiry field (arena rule 4).
                let dst = unsafe { self.arena.bytes_mut(slot::seg(s), self.byte_off(s) + at, 4) };
                dst.copy_from_slice(&expiry.to_le_bytes());
                self.note_expiry(slot::seg(s), expiry);
                true
            }
            None => expiry == 0,
        }
    }
}

/// What a load links into one segment, counted item by item and given to
/// the segment's and the bands' shared counters once
/// ([`Store::account_segment`]): one locked addition per segment instead
/// of four per item.
#[derive(Debug, Default)]
pub(crate) struct SegTally {
    pub items: u32,
    pub bytes: u32,
    /// Items and bytes per size band.
    pub bands: Vec<(u64, u64)>,
}

impl SegTally {
    /// Counts an item of `len` stored bytes in `band`.
    pub fn add(&mut self, band: usize, len: usize) {
        if self.bands.len() <= band {
            self.bands.resize(band + 1, (0, 0));
        }
        self.bands[band].0 += 1;
        self.bands[band].1 += len as u64;
        self.items += 1;
        self.bytes += len as u32;
    }

    pub fn clear(&mut self) {
        self.items = 0;
        self.bytes = 0;
        self.bands.iter_mut().for_each(|b| *b = (0, 0));
    }
}
