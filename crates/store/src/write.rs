//! Writes: set/add/replace/cas (a whole new item), append/prepend, delete,
//! incr/decr, and the rewrite every read-modify-write shares.
//!
//! A whole new item is written into the worker's active segment first and
//! linked under its bucket lock after (add/replace/cas decide there). A
//! rewrite plans under the lock, reserves space without it (reserving may
//! evict, which takes other bucket locks), then commits under the lock only
//! if the item is unchanged, retrying otherwise.

use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use strata_compress::Codec;

use crate::index::slot;
use crate::item::{encoded_len, parse_counter, state, write_head, Fields, Item};
use crate::segments::{ttl_class, Placed};
use crate::store::{bump, Miss};
use crate::types::{
    now, Arith, ArithOutcome, Counted, Delete, DeleteOutcome, Flow, Reading, SetOp, Stop, StoreError, StoreOutcome,
    Stored, Write,
};
use crate::worker::{Worker, Zip};
use crate::MAX_RETRIES;

/// What a rewrite of an existing item will write.
pub(crate) struct Plan {
    pub(crate) fields: Fields,
    pub(crate) vlen: usize,
    /// Only the layout changes: keep the read count and the write time.
    pub(crate) keep: bool,
}

pub(crate) enum Step<E, T> {
    Write(Plan, E),
    Done(T),
}

pub(crate) enum Rewritten<E, T> {
    Missing,
    Done(T),
    /// Written, with the new item's CAS.
    Written(E, u64),
}

impl Worker {
    /// set/add/replace/append/prepend/cas. `expiry` is relative server time
    /// (see [`Clock::expiry`]).
    pub fn set(
        &mut self,
        op: SetOp,
        key: &[u8],
        flags: u32,
        expiry: u32,
        value: &[u8],
    ) -> Result<StoreOutcome, StoreError> {
        Ok(now(self.set_with(&Write::new(op, key, flags, expiry, value), Reading::Now))?.outcome)
    }

    /// A storage request with the meta protocol's options; it waits for a
    /// read from flash (add/replace/cas/append on a key there), or for a
    /// free segment (`memwait.rs`), as `reading` allows.
    pub fn set_with(&mut self, w: &Write<'_>, reading: Reading) -> Result<Flow<Stored>, StoreError> {
        self.store.check_journal()?;
        if self.must_wait_for_memory(w, reading) {
            return Ok(Flow::Wait(crate::Ticket::MEMORY));
        }
        // A write that replaces the key or fails without changing it needs
        // only a look at its record on flash (`tier/peek.rs`); append and
        // prepend need its value back in memory.
        let r = match w.op {
            SetOp::Append | SetOp::Prepend => self.with_flash(w.key, reading, |wk| wk.set_once(w).map(Flow::Ready)),
            _ => self.with_flash_peek(w.key, reading, |wk| wk.set_once(w).map(Flow::Ready)),
        };
        #[cfg(feature = "test-hooks")]
        if matches!(r, Ok(Flow::Ready(Stored { outcome: StoreOutcome::Stored, .. }))) {
            self.flash_every_write(w.key);
        }
        r
    }

    fn set_once(&mut self, w: &Write<'_>) -> Result<Stored, Stop> {
        self.store.maybe_flush();
        match w.op {
            SetOp::Append | SetOp::Prepend => self.concat(w),
            _ => {
                let state = if w.binary_key { state::KEY_BINARY } else { 0 };
                let f = Fields { flags: w.flags, expiry: w.expiry, cas: w.new_cas, state, compressed: false };
                self.store_item(w, f)
            }
        }
    }

    /// Writes a whole new item (set/add/replace/cas) with fields `f`,
    /// compressed if that pays.
    pub(crate) fn store_item(&mut self, w: &Write<'_>, fresh: Fields) -> Result<Stored, Stop> {
        // `-I` applies to what the client sent, compressed or not.
        if encoded_len(w.key.len(), w.value.len(), &fresh) > self.store.config().item_size_max {
            return Err(StoreError::TooLarge.into());
        }
        let Some(mut zip) = self.zip.take() else { return self.store_form(w, fresh, w.value) };
        let r = if zip.compress(w.value) {
            let r = self.store_form(w, Fields { compressed: true, ..fresh }, &zip.stored);
            // The segment took its own reference when the form was written.
            zip.codec().release(strata_compress::dict_id(&zip.stored));
            r
        } else {
            self.store_form(w, fresh, w.value)
        };
        self.zip = Some(zip);
        r
    }

    /// Writes `value` (the client's, or its compressed form when
    /// `fresh.compressed`) as a new item.
    fn store_form(&mut self, w: &Write<'_>, fresh: Fields, value: &[u8]) -> Result<Stored, Stop> {
        // A compare value applies to set only (memcached's add ignores it).
        let (op, compare) = match w.op {
            SetOp::Set => (SetOp::Set, w.compare),
            op => (op, None),
        };
        let key = w.key;
        // The item is written before its bucket lock is taken, so what it
        // must look like is only known under the lock: when that differs
        // from what was written (a stale store, below), the write is undone
        // and done again with the right fields.
        let mut f = fresh;
        // Over a flash item it does not read: a bound on the CAS it had.
        let mut replaced = None;
        for _ in 0..MAX_RETRIES {
            let store = &*self.store;
            let plain = Fields { compressed: false, ..f };
            if encoded_len(key.len(), w.value.len(), &plain) > store.config().item_size_max {
                return Err(StoreError::TooLarge.into());
            }
            let len = encoded_len(key.len(), value.len(), &f);
            let now = store.clock().now();
            let class_len = store.bands().class_len(key.len(), w.value.len(), f.flags != 0);
            let (seg, off) = self.active.reserve(store, ttl_class(f.expiry, now), (len, class_len), now)?;
            // SAFETY: freshly reserved by this worker in its active segment.
            let dst = unsafe { store.arena().bytes_mut(seg, off, len) };
            let v = write_head(dst, key, value.len(), &f);
            crate::arena::copy_value(&mut dst[v..], value);
            if f.compressed {
                store.attach_dict(seg, strata_compress::dict_id(value));
            }
            store.note_expiry(seg, f.expiry);

            let loc = store.index().locate(key);
            let mut stripe = store.index().lock(loc.stripe);
            if store.frozen(seg) {
                // A snapshot's cut came between the reservation and now:
                // nothing goes into its segments any more (`cut.rs`); the
                // next reservation moves to a new segment.
                drop(stripe);
                self.active.unreserve(store, seg, off, len);
                continue;
            }
            // On flash, the key's live record as a peek read it (an add,
            // replace or cas: `tier/peek.rs`).
            let mut peeked = None;
            let found = match store.lookup(&mut stripe, loc, key, now, &self.active.counters) {
                Ok(found) => Some(found),
                // A plain set replaces whatever a flash slot holds.
                Err(Miss::OnFlash) if op == SetOp::Set && compare.is_none() => {
                    store.drop_flash_candidates(&mut stripe, loc, &self.active.counters);
                    // Its record is not read: the CAS it had is at most the
                    // top of the epochs so far (unless a client's `E`). Taken
                    // once: a retry's own new CAS moves that top.
                    let top = store.cas_at(store.epoch(), (1 << store.cas_off_bits()) - 1);
                    replaced = replaced.or(Some(top));
                    None
                }
                Err(Miss::OnFlash) => match self.flash_peek.as_ref().filter(|p| store.peek_holds(&stripe, loc, p)) {
                    Some(p) => {
                        peeked = p.live;
                        None
                    }
                    None => {
                        drop(stripe);
                        self.active.unreserve(store, seg, off, len);
                        return Err(Stop::OnFlash);
                    }
                },
                Err(_) => None,
            };
            let have = found
                .and_then(|(_, s)| store.item_at(s).map(|it| (store.cas_of(s, &it), it.expiry(), it.state())))
                .or(peeked.map(|p| (p.cas, p.expiry, p.state)));
            let wanted = match (op, have, compare) {
                (SetOp::Add, Some(_), _) | (SetOp::Replace, None, _) => Err(StoreOutcome::NotStored),
                (_, None, Some(_)) => Err(StoreOutcome::NotFound),
                // With CAS off (-C) memcached can never match a unique.
                (_, Some((have, expiry, bits)), Some(want)) if !store.config().cas || have != want => {
                    if w.invalidate && store.config().cas && want < have {
                        // memcached's CAS_STALE: the value is replaced, but
                        // the item keeps its TTL, is marked stale, and keeps
                        // a recache token already handed out.
                        let state = fresh.state | state::STALE | (bits & state::TOKEN_SENT);
                        Ok(Fields { expiry, state, ..fresh })
                    } else {
                        Err(StoreOutcome::Exists)
                    }
                }
                _ => Ok(fresh),
            };
            match wanted {
                Err(outcome) => {
                    self.active.unreserve(store, seg, off, len);
                    return Ok(Stored { outcome, cas: 0, size: 0 });
                }
                Ok(wanted) => {
                    // An overwrite that fits its old version goes there
                    // (`overwrite.rs`); the new version of one that could
                    // but for the old one's layout is laid out for the next.
                    let wanted = match found {
                        Some(old) => {
                            let a = &mut self.active;
                            if let Some((stored, at)) =
                                a.overwrite_in_place(store, &mut stripe, old, (key, value), &wanted, now)
                            {
                                drop(stripe);
                                a.unreserve(store, seg, off, len);
                                self.journaled = self.journaled.max(at);
                                return Ok(stored);
                            }
                            a.laid_out_for_overwrite(store, wanted, &f, (old.1, value))
                        }
                        None => wanted,
                    };
                    let old_cas = have.map(|h| h.0).or(replaced);
                    let wanted = self.active.cas_above(store, wanted, &f, (seg, off), old_cas);
                    if wanted != f {
                        drop(stripe);
                        self.active.unreserve(store, seg, off, len);
                        f = wanted;
                        continue;
                    }
                }
            }
            // Overwriting a live item is an access to its key, as a set
            // bumps an item in memcached's LRU: the new version starts
            // accessed (not read), so that eviction from the small queue
            // keeps it.
            let freq = if found.is_some() || peeked.is_some() { OVERWRITE_FREQ } else { 0 };
            if let Some(p) = &peeked {
                store.drop_peeked(&mut stripe, loc, p);
            }
            let at = store.link(&mut stripe, loc, found, Placed { seg, off, len }, freq, &self.active.counters);
            self.journaled = self.journaled.max(at);
            let outcome = StoreOutcome::Stored;
            return Ok(Stored { outcome, cas: store.placed_cas(seg, off, &f), size: w.value.len() });
        }
        Err(StoreError::Contended.into())
    }

    /// Deletes `key`; false if it was not there.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        matches!(now(self.delete_with(key, &Delete::default(), Reading::Now)), Ok(DeleteOutcome::Deleted))
    }

    /// A delete with the meta protocol's options: compare, or keep the item
    /// marked stale, or keep it with an empty value.
    pub fn delete_with(&mut self, key: &[u8], d: &Delete, reading: Reading) -> Result<Flow<DeleteOutcome>, StoreError> {
        self.store.check_journal()?;
        if d.invalidate || d.remove_value {
            // These keep the item, changed: it comes back into memory.
            return self.with_flash(key, reading, |w| w.delete_once(key, d).map(Flow::Ready));
        }
        self.with_flash_peek(key, reading, |w| w.delete_once(key, d).map(Flow::Ready))
    }

    fn delete_once(&mut self, key: &[u8], d: &Delete) -> Result<DeleteOutcome, Stop> {
        self.store.maybe_flush();
        let cas_on = self.store.config().cas;
        if d.invalidate || d.remove_value {
            let r = self.rewrite(
                key,
                |it, cas| {
                    if d.compare.is_some_and(|want| !cas_on || want != cas) {
                        return Step::Done(DeleteOutcome::Exists);
                    }
                    let mut vlen = it.value().len();
                    let mut fields = it.fields();
                    if d.remove_value {
                        // memcached stores a fresh empty item in its place.
                        vlen = 0;
                        let expiry = d.touch.unwrap_or(0);
                        let cas = Some(d.new_cas.unwrap_or(cas));
                        fields = Fields { flags: d.flags, expiry, cas, ..Fields::default() };
                    }
                    if d.invalidate {
                        fields.expiry = d.touch.unwrap_or(fields.expiry);
                        fields.state = (fields.state | state::STALE) & !state::TOKEN_SENT;
                        fields.cas = d.new_cas;
                    }
                    Step::Write(Plan { fields, vlen, keep: false }, ())
                },
                |old, _, dst| dst.copy_from_slice(&old.value()[..dst.len()]),
            )?;
            return Ok(match r {
                Rewritten::Missing => DeleteOutcome::NotFound,
                Rewritten::Done(o) => o,
                Rewritten::Written((), _) => DeleteOutcome::Deleted,
            });
        }
        let st = &*self.store;
        let loc = st.index().locate(key);
        let now = st.clock().now();
        let mut stripe = st.index().lock(loc.stripe);
        match st.lookup(&mut stripe, loc, key, now, &self.active.counters) {
            Ok((pos, s)) => {
                let have = st.item_at(s).map_or(0, |it| st.cas_of(s, &it));
                if d.compare.is_some_and(|want| !st.config().cas || want != have) {
                    return Ok(DeleteOutcome::Exists);
                }
                st.unlink(&mut stripe, loc.bucket, pos, s);
                if let Some(j) = st.journal() {
                    self.journaled = self.journaled.max(j.delete(key));
                }
                Ok(DeleteOutcome::Deleted)
            }
            // Its record on flash as a peek read it (`tier/peek.rs`).
            Err(Miss::OnFlash) => {
                let Some(p) = self.flash_peek.as_ref().filter(|p| st.peek_holds(&stripe, loc, p)) else {
                    return Err(Stop::OnFlash);
                };
                let Some(live) = p.live else { return Ok(DeleteOutcome::NotFound) };
                if d.compare.is_some_and(|want| !st.config().cas || want != live.cas) {
                    return Ok(DeleteOutcome::Exists);
                }
                st.drop_peeked(&mut stripe, loc, &live);
                if let Some(j) = st.journal() {
                    self.journaled = self.journaled.max(j.delete(key));
                }
                Ok(DeleteOutcome::Deleted)
            }
            Err(_) => Ok(DeleteOutcome::NotFound),
        }
    }

    /// Replaces a linked item by one built from it: plan under the lock,
    /// reserve space without it (reserving may evict, which takes other bucket
    /// locks), then re-check the item is unchanged and build under the lock.
    pub(crate) fn rewrite<E, T>(
        &mut self,
        key: &[u8],
        plan: impl FnMut(&Item<'_>, u64) -> Step<E, T>,
        fill: impl Fn(&Item<'_>, &E, &mut [u8]),
    ) -> Result<Rewritten<E, T>, Stop> {
        self.rewrite_prepared(key, plan, |_, _, _| None, fill)
    }

    /// [`Worker::rewrite`] with a step between planning and reserving,
    /// without the bucket lock: `prepare` may change the plan (say, to the
    /// length of a value it compressed), or end the rewrite.
    pub(crate) fn rewrite_prepared<E, T>(
        &mut self,
        key: &[u8],
        mut plan: impl FnMut(&Item<'_>, u64) -> Step<E, T>,
        mut prepare: impl FnMut(&mut Plan, &mut E, Option<&mut Zip>) -> Option<T>,
        fill: impl Fn(&Item<'_>, &E, &mut [u8]),
    ) -> Result<Rewritten<E, T>, Stop> {
        self.store.maybe_flush();
        let loc = self.store.index().locate(key);
        // An explicit CAS for the new version, once its derived one was not
        // above the old version's (`Active::cas_above`).
        let mut above: Option<u64> = None;
        for _ in 0..MAX_RETRIES {
            let store = &*self.store;
            let now = store.clock().now();
            let (seen, epoch, version, mut p, mut extra, written) = {
                let mut stripe = store.index().lock(loc.stripe);
                let s = match store.lookup(&mut stripe, loc, key, now, &self.active.counters) {
                    Ok((_, s)) => s,
                    Err(Miss::OnFlash) => return Err(Stop::OnFlash),
                    Err(_) => return Ok(Rewritten::Missing),
                };
                let Some(it) = store.item_at(s) else { return Ok(Rewritten::Missing) };
                let version = (store.cas_of(s, &it), it.fields());
                match plan(&it, version.0) {
                    Step::Done(t) => return Ok(Rewritten::Done(t)),
                    Step::Write(p, e) => {
                        let written = if p.keep { store.written_at(s) } else { now };
                        (slot::location(s), store.seg(slot::seg(s)).epoch.load(Relaxed), version, p, e, written)
                    }
                }
            };
            if let Some(t) = prepare(&mut p, &mut extra, self.zip.as_mut()) {
                return Ok(Rewritten::Done(t));
            }
            if p.fields.cas.is_none() {
                p.fields.cas = above.filter(|&c| c > version.0);
            }
            let store = &*self.store;
            let len = encoded_len(key.len(), p.vlen, &p.fields);
            if len > store.config().item_size_max {
                return Err(StoreError::TooLarge.into());
            }
            // A compressed rewrite's original length is not at hand: its
            // stored length picks the band an `outofmemory` counts in.
            let class_len = store.bands().class_len(key.len(), p.vlen, p.fields.flags != 0);
            let (seg, off) = self.active.reserve(store, ttl_class(p.fields.expiry, now), (len, class_len), written)?;
            let mut stripe = store.index().lock(loc.stripe);
            if store.frozen(seg) {
                // As in `store_form`: a snapshot's cut came meanwhile.
                drop(stripe);
                self.active.unreserve(store, seg, off, len);
                continue;
            }
            let found = match store.lookup(&mut stripe, loc, key, now, &self.active.counters) {
                Ok(found) => Some(found),
                Err(Miss::OnFlash) => {
                    drop(stripe);
                    self.active.unreserve(store, seg, off, len);
                    return Err(Stop::OnFlash);
                }
                Err(_) => None,
            };
            // The same place is not enough: a set written over the item in
            // place (`overwrite.rs`, which gives it a new CAS) or a touch or
            // state change written into it leaves it there, and the plan,
            // made from what was there before, would undo them.
            let unchanged = found.is_some_and(|(_, s)| {
                slot::location(s) == seen
                    && store.seg(slot::seg(s)).epoch.load(Relaxed) == epoch
                    && store.item_at(s).is_some_and(|it| (store.cas_of(s, &it), it.fields()) == version)
            });
            let tried = p.fields;
            let fields = self.active.cas_above(store, tried, &tried, (seg, off), found.map(|_| version.0));
            if unchanged && fields != tried {
                drop(stripe);
                self.active.unreserve(store, seg, off, len);
                above = fields.cas;
                continue;
            }
            match (found, unchanged) {
                (Some((pos, s)), true) => {
                    let Some(old) = store.item_at(s) else { break };
                    // SAFETY: freshly reserved by this worker in its active segment.
                    let dst = unsafe { store.arena().bytes_mut(seg, off, len) };
                    let v = write_head(dst, key, p.vlen, &p.fields);
                    fill(&old, &extra, &mut dst[v..]);
                    if p.fields.compressed {
                        // Its dictionary is referenced by the old item's
                        // segment, or by what `prepare` compressed.
                        store.attach_dict(seg, strata_compress::dict_id(&dst[v..]));
                    }
                    store.note_expiry(seg, p.fields.expiry);
                    let freq = if p.keep { slot::freq(s) } else { OVERWRITE_FREQ };
                    let at = store.link(
                        &mut stripe,
                        loc,
                        Some((pos, s)),
                        Placed { seg, off, len },
                        freq,
                        &self.active.counters,
                    );
                    self.journaled = self.journaled.max(at);
                    let cas = store.placed_cas(seg, off, &p.fields);
                    return Ok(Rewritten::Written(extra, cas));
                }
                (None, _) => {
                    self.active.unreserve(store, seg, off, len);
                    return Ok(Rewritten::Missing);
                }
                (Some(_), false) => self.active.unreserve(store, seg, off, len),
            }
        }
        Err(StoreError::Contended.into())
    }

    pub(crate) fn concat(&mut self, w: &Write<'_>) -> Result<Stored, Stop> {
        let prepend = w.op == SetOp::Prepend;
        let (key, data) = (w.key, w.value);
        let (cas_on, max) = (self.store.config().cas, self.store.config().item_size_max);
        let min_zip = self.zip.as_ref().map(|z| z.codec().config().min_size);
        let counters = self.active.counters.clone();
        let errors = &counters.decompress_errors;
        for _ in 0..MAX_RETRIES {
            let r = self.rewrite_prepared(
                key,
                |it, cas| {
                    if w.compare.is_some_and(|want| !cas_on || want != cas) {
                        return Step::Done(StoreOutcome::Exists);
                    }
                    let plain_len = if it.compressed() {
                        strata_compress::original_len(it.value()).unwrap_or(usize::MAX / 2)
                    } else {
                        it.value().len()
                    };
                    let vlen = plain_len + data.len();
                    let fields = Fields { cas: w.new_cas, ..it.fields() };
                    if encoded_len(key.len(), vlen, &Fields { compressed: false, ..fields }) > max {
                        return Step::Done(StoreOutcome::NotStored);
                    }
                    // A plain value that stays too short to compress is
                    // joined in place; anything else is decompressed and
                    // compressed again without the lock (`prepare`).
                    if !it.compressed() && !matches!(min_zip, Some(min) if vlen >= min) {
                        return Step::Write(Plan { fields, vlen, keep: false }, (vlen, Body::Join));
                    }
                    let body = Body::Old { bytes: it.value().to_vec(), compressed: it.compressed() };
                    Step::Write(Plan { fields, vlen, keep: false }, (vlen, body))
                },
                |plan, (_, body), zip| {
                    let Body::Old { bytes, compressed } = body else { return None };
                    let Some(zip) = zip else { return Some(StoreOutcome::NotStored) };
                    let old = if *compressed {
                        if zip.decompress(bytes, max).is_err() {
                            bump(errors);
                            return Some(StoreOutcome::NotStored);
                        }
                        std::mem::take(&mut zip.plain)
                    } else {
                        std::mem::take(bytes)
                    };
                    let (a, b) = if prepend { (data, &old[..]) } else { (&old[..], data) };
                    let joined = [a, b].concat();
                    *body = if zip.compress(&joined) {
                        let held = Held { codec: zip.codec().clone(), id: strata_compress::dict_id(&zip.stored) };
                        (plan.vlen, plan.fields.compressed) = (zip.stored.len(), true);
                        Body::Ready { bytes: zip.stored.clone(), _held: Some(held) }
                    } else {
                        (plan.vlen, plan.fields.compressed) = (joined.len(), false);
                        Body::Ready { bytes: joined, _held: None }
                    };
                    None
                },
                |old, (_, body), dst| match body {
                    Body::Ready { bytes, .. } => dst.copy_from_slice(bytes),
                    _ => {
                        let (a, b) = if prepend { (data, old.value()) } else { (old.value(), data) };
                        dst[..a.len()].copy_from_slice(a);
                        dst[a.len()..].copy_from_slice(b);
                    }
                },
            )?;
            return match r {
                Rewritten::Missing => match w.vivify {
                    Some(expiry) => {
                        let add = Write { op: SetOp::Add, expiry, ..*w };
                        let state = if w.binary_key { state::KEY_BINARY } else { 0 };
                        let f = Fields { flags: w.flags, expiry, cas: w.new_cas, state, compressed: false };
                        let s = self.store_item(&add, f)?;
                        if s.outcome == StoreOutcome::NotStored {
                            // Someone created it meanwhile: append to theirs.
                            continue;
                        }
                        Ok(s)
                    }
                    None => Ok(Stored { outcome: StoreOutcome::NotStored, cas: 0, size: 0 }),
                },
                Rewritten::Done(outcome) => Ok(Stored { outcome, cas: 0, size: 0 }),
                Rewritten::Written((size, _), cas) => Ok(Stored { outcome: StoreOutcome::Stored, cas, size }),
            };
        }
        Err(StoreError::Contended.into())
    }

    /// incr/decr. Like memcached, a result with fewer digits than the stored
    /// value keeps the value's length, padded with trailing spaces.
    pub fn arith(&mut self, key: &[u8], incr: bool, delta: u64) -> Result<ArithOutcome, StoreError> {
        Ok(now(self.arith_with(key, &Arith { incr, delta, ..Arith::default() }, Reading::Now))?.outcome)
    }

    /// incr/decr with the meta protocol's options.
    pub fn arith_with(&mut self, key: &[u8], a: &Arith, reading: Reading) -> Result<Flow<Counted>, StoreError> {
        self.store.check_journal()?;
        let r = self.with_flash(key, reading, |w| w.arith_once(key, a).map(Flow::Ready));
        #[cfg(feature = "test-hooks")]
        if matches!(r, Ok(Flow::Ready(Counted { outcome: ArithOutcome::Value(_), .. }))) {
            self.flash_every_write(key);
        }
        r
    }

    fn arith_once(&mut self, key: &[u8], a: &Arith) -> Result<Counted, Stop> {
        let cas_on = self.store.config().cas;
        for _ in 0..MAX_RETRIES {
            let r = self.rewrite(
                key,
                |it, cas| {
                    if a.compare.is_some_and(|want| !cas_on || want != cas) {
                        return Step::Done(ArithOutcome::Exists);
                    }
                    // A value that parses as a number is never compressed.
                    let Some(old) = parse_counter(it.value()).filter(|_| !it.compressed()) else {
                        return Step::Done(ArithOutcome::NonNumeric);
                    };
                    let new = if a.incr { old.wrapping_add(a.delta) } else { old.saturating_sub(a.delta) };
                    let vlen = count_digits(new).max(it.value().len());
                    let expiry = a.touch.unwrap_or(it.expiry());
                    let fields = Fields { expiry, cas: a.new_cas, ..it.fields() };
                    Step::Write(Plan { fields, vlen, keep: false }, (new, it.expiry(), expiry))
                },
                |_, &(new, _, _), dst| {
                    let mut buf = itoa::Buffer::new();
                    let s = buf.format(new).as_bytes();
                    dst[..s.len()].copy_from_slice(s);
                    dst[s.len()..].fill(b' ');
                },
            )?;
            let mut created = false;
            let (outcome, cas, expiry_before, expiry) = match r {
                Rewritten::Missing => match a.vivify {
                    Some(expiry) => {
                        let mut buf = itoa::Buffer::new();
                        let value = buf.format(a.initial).as_bytes();
                        let add = Write { new_cas: a.new_cas, ..Write::new(SetOp::Add, key, 0, expiry, value) };
                        let f = Fields { expiry, cas: a.new_cas, ..Fields::default() };
                        let s = self.store_item(&add, f)?;
                        if s.outcome == StoreOutcome::NotStored {
                            // Someone created it meanwhile: count on theirs.
                            continue;
                        }
                        created = true;
                        (ArithOutcome::Value(a.initial), s.cas, 0, expiry)
                    }
                    None => (ArithOutcome::NotFound, 0, 0, 0),
                },
                Rewritten::Done(o) => (o, 0, 0, 0),
                Rewritten::Written((v, before, expiry), cas) => (ArithOutcome::Value(v), cas, before, expiry),
            };
            return Ok(Counted { outcome, cas, expiry_before, expiry, created });
        }
        Ok(Counted { outcome: ArithOutcome::NotStored, cas: 0, expiry_before: 0, expiry: 0, created: false })
    }
}

/// What an append/prepend writes.
enum Body {
    /// The old value and the new data, joined under the lock.
    Join,
    /// The old value's bytes as stored, copied out to be decompressed.
    Old { bytes: Vec<u8>, compressed: bool },
    /// The joined value, compressed or not, ready to copy.
    Ready { bytes: Vec<u8>, _held: Option<Held> },
}

/// A reference to a dictionary, given back when dropped (a joined value
/// that a lost race throws away gives its back too).
struct Held {
    codec: Arc<Codec>,
    id: u8,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.codec.release(self.id);
    }
}

/// The access count (`index.rs`, "freq") a new version of a live item
/// starts with: an overwrite
/// (set, append, incr…) is an access, as a set bumps an item in
/// memcached's LRU. Without it an overwritten key not read again before
/// its small-queue segment came up was evicted as a one-hit wonder: on
/// workload 6 (zipf overwrites, ten times the keys that fit) the hit ratio
/// went from 74.4% to 75.8% (memcached 74.6%). Carrying the old count, or
/// adding one to it, did no better.
pub(crate) const OVERWRITE_FREQ: u8 = slot::WRITTEN;

pub(crate) fn count_digits(n: u64) -> usize {
    itoa::Buffer::new().format(n).len()
}
