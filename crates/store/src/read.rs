//! Reads: `get`, and reads that also touch the item, hand out the meta
//! protocol's recache token, or create the item on a miss; `me`'s inspect.
//!
//! A read has two phases. [`Worker::find`] looks the key up under its
//! bucket lock, makes the in-place changes the read asks for (expiry, state
//! byte), and then either hands the item to the caller's closure while the
//! lock still holds it ([`Found::Read`], the fast path for values in RAM) or
//! says where the value is, to be read without the lock
//! ([`Found::Fetch`]; [`Fetch::read`]): today a value of
//! `Config::unlocked_read_min` bytes or more, whose segment it pins; with
//! the flash tier and compression, a value on flash or one to decompress,
//! neither of which may hold a bucket lock. [`Worker::read`] does both
//! phases for callers that need no more.
//!
//! When the item's layout has no room for a change (no expiry field, no
//! state byte), the item is rewritten first (`write.rs`) and the read
//! starts again.

use std::sync::Arc;

use crate::index::slot;
use crate::item::{state, Fields, Item};
use crate::store::{bump, Miss, Store};
use crate::types::{
    now, FlashRead, Flow, Inspect, ItemView, ReadOpts, Reading, SetOp, Stop, StoreError, StoreOutcome, Write,
};
use crate::worker::Worker;
use crate::write::{Plan, Rewritten, Step};
use crate::MAX_RETRIES;

/// Whether a read of an item in this state takes the recache token: it is
/// stale, or expires before `recache_before`, and nobody has the token.
pub(crate) fn wins_token(opts: &ReadOpts, it: &Item<'_>) -> bool {
    let st = it.state();
    if !opts.tokens || st & state::TOKEN_SENT != 0 {
        return false;
    }
    let expiry = it.expiry();
    st & state::STALE != 0 || opts.recache_before.is_some_and(|r| expiry != 0 && expiry < r)
}

/// What earlier rounds of a read did (a round that rewrites or creates
/// the item starts the read again): won the recache token in a rewrite,
/// created the item, relaid it; and the expiry it first saw.
#[derive(Debug, Default, Clone, Copy)]
struct Rounds {
    won: bool,
    created: bool,
    relaid: bool,
    first_expiry: Option<u32>,
}

impl Rounds {
    /// Nothing done yet: the read has changed nothing.
    fn fresh(&self) -> bool {
        !self.won && !self.created && !self.relaid
    }
}

/// What the first phase of a read found.
#[derive(Debug)]
pub enum Found<R> {
    /// The value was in RAM and the reader's closure ran under the bucket
    /// lock, with this result.
    Read(R),
    /// Nothing alive under the key (and the read created nothing).
    Missing,
    /// The item is alive and the read's changes to it are made; its value
    /// is read in a second phase, without the bucket lock.
    Fetch(Fetch),
}

/// An item whose value a reader reads without its bucket lock: everything
/// about the item was settled under the lock; its key and value bytes stay
/// where they are while this holds their segment's pin (arena rule 5).
/// Dropping it releases the pin.
pub struct Fetch {
    store: Arc<Store>,
    /// The view the reader gets, but for its key and value.
    view: ItemView<'static>,
    seg: u32,
    key_at: usize,
    klen: usize,
    value_at: usize,
    /// Bytes of the value as stored.
    vlen: usize,
    /// The value's original length if it is stored compressed.
    plain_len: Option<usize>,
}

impl Fetch {
    /// Bytes of the value (as the client stored it).
    pub fn value_len(&self) -> usize {
        self.plain_len.unwrap_or(self.vlen)
    }

    /// The second phase: hands the item to `f`, with no lock held, its
    /// value decompressed by `w` (a handle on the same store) if need be.
    /// `None` if a compressed value could not be decompressed (counted in
    /// `decompress_errors`): a miss, never wrong bytes.
    pub fn read<R>(self, w: &mut Worker, f: impl FnOnce(ItemView<'_>) -> R) -> Option<R> {
        let arena = self.store.arena();
        // SAFETY: the segment is pinned (arena rule 5) since `find` saw the
        // item linked under its bucket lock, so it is not reused; an item's
        // key and value bytes never change once it is linked (rules 1, 4).
        let (key, value) =
            unsafe { (arena.bytes(self.seg, self.key_at, self.klen), arena.bytes(self.seg, self.value_at, self.vlen)) };
        if self.plain_len.is_none() {
            return Some(f(ItemView { key, value, ..self.view }));
        }
        let max = self.store.config().item_size_max;
        let zip = w.zip.as_mut().filter(|_| Arc::ptr_eq(&self.store, &w.store));
        match zip.map(|z| z.decompress(value, max).map(|()| &z.plain)) {
            Some(Ok(plain)) => Some(f(ItemView { key, value: plain, ..self.view })),
            _ => {
                bump(&w.active.counters.decompress_errors);
                None
            }
        }
    }
}

impl std::fmt::Debug for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetch").field("view", &self.view).field("segment", &self.seg).field("len", &self.vlen).finish()
    }
}

impl Drop for Fetch {
    fn drop(&mut self) {
        self.store.unpin(self.seg);
    }
}

impl Worker {
    /// Reads `key`, handing the item to `f`.
    pub fn get<R>(&mut self, key: &[u8], f: impl FnOnce(ItemView<'_>) -> R) -> Option<R> {
        // A plain read never rewrites, so it cannot fail.
        self.read(key, &ReadOpts::GET, f).ok().flatten()
    }

    /// Both phases of a read (see [`Worker::find`]): `f` gets the item,
    /// under its bucket lock or (a large value) after it. `None` on a miss.
    /// Reads flash synchronously ([`Reading::Now`]).
    pub fn read<R>(
        &mut self,
        key: &[u8],
        opts: &ReadOpts,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<Option<R>, StoreError> {
        let mut f = Some(f);
        Ok(match now(self.find(key, opts, Reading::Now, |it| f.take().map(|f| f(it))))? {
            Found::Read(r) => r,
            Found::Missing => None,
            Found::Fetch(fetch) => f.take().and_then(|f| fetch.read(self, f)),
        })
    }

    /// The first phase of a read: looks `key` up as `opts` says (touching,
    /// handing out the recache token, creating it on a miss) and, if the
    /// value is in RAM and small, hands the item to `f` under its bucket
    /// lock; otherwise says how to read the value ([`Found::Fetch`]). The
    /// token is handed out under that lock, so exactly one reader gets it.
    /// A value only on flash may have to be waited for, as `reading` allows.
    pub fn find<R>(
        &mut self,
        key: &[u8],
        opts: &ReadOpts,
        reading: Reading,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<Flow<Found<R>>, StoreError> {
        if opts.touch.is_some() || opts.vivify.is_some() {
            self.store.check_journal()?;
        }
        // `f` runs at most once: a round that stops at a flash slot stops
        // before it.
        let mut f = Some(f);
        let found = self.with_flash(key, reading, |w| w.find_once(key, opts, reading, |it| f.take().map(|f| f(it))))?;
        Ok(found.map(|found| match found {
            Found::Read(Some(r)) => Found::Read(r),
            Found::Read(None) | Found::Missing => Found::Missing,
            Found::Fetch(fetch) => Found::Fetch(fetch),
        }))
    }

    fn find_once<R>(
        &mut self,
        key: &[u8],
        opts: &ReadOpts,
        reading: Reading,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<Flow<Found<R>>, Stop> {
        self.store.maybe_flush();
        let loc = self.store.index().locate(key);
        self.store.sketch().touch(loc, &mut self.active.pending);
        let (mut r, mut recache) = (Rounds::default(), true);
        for _ in 0..MAX_RETRIES {
            let st = &*self.store;
            let now = st.clock().now();
            let mut stripe = st.index().lock(loc.stripe);
            let c = &self.active.counters;
            // An item this read just touched into the past (`touch k -1`)
            // still counts as found by it, as when touched in place.
            let alive_at = match opts.touch {
                Some(e) if r.relaid && e != 0 => now.min(e - 1),
                _ => now,
            };
            let (pos, s) = match st.lookup(&mut stripe, loc, key, alive_at, c) {
                Ok(found) => found,
                Err(miss) => {
                    match miss {
                        Miss::Expired => bump(&c.get_expired),
                        Miss::Flushed => bump(&c.get_flushed),
                        Miss::Absent => {}
                        Miss::OnFlash => {
                            drop(stripe);
                            // A read that changes nothing is served from
                            // flash, the item left there.
                            let fresh = r.fresh();
                            let mut recaching = false;
                            if fresh {
                                match self.read_flash(key, opts, reading, recache) {
                                    Flow::Wait(t) => return Ok(Flow::Wait(t)),
                                    Flow::Ready(FlashRead::Hit(h)) => {
                                        let b = &self.flash_buf;
                                        let view = ItemView { key: &b[h.key], value: &b[h.value], ..h.view };
                                        return Ok(Flow::Ready(Found::Read(f(view))));
                                    }
                                    Flow::Ready(FlashRead::Recache) => recaching = true,
                                    Flow::Ready(FlashRead::Settle) => {}
                                }
                            }
                            // Otherwise brought back here rather than by
                            // the caller, so that what earlier rounds did
                            // (a token won, an item created or touched)
                            // still counts: after such a round the read
                            // cannot stop to wait, and reads here and now.
                            let reading = if fresh { reading } else { Reading::Now };
                            match self.settle(key, reading) {
                                Ok(Flow::Wait(t)) => return Ok(Flow::Wait(t)),
                                Ok(Flow::Ready(())) => {}
                                // A recache is the read's own choice: without
                                // the memory for it (-M, memory full), the
                                // item stays on flash and is served from
                                // there, as memcached's recache does.
                                Err(StoreError::OutOfMemory) if recaching => recache = false,
                                Err(e) => return Err(e.into()),
                            }
                            continue;
                        }
                    }
                    drop(stripe);
                    if r.fresh() {
                        st.sketch().missed(&mut self.active.pending);
                        st.ghost().missed(loc);
                    }
                    let Some(expiry) = opts.vivify else { return Ok(Flow::Ready(Found::Missing)) };
                    if self.vivify(key, expiry, opts)? {
                        (r.won, r.created) = (true, true);
                    }
                    continue;
                }
            };
            // What the in-place writes below need, read before them: the
            // view `it` must be dead once they start (arena rule 4).
            let (header, bits, expiry, wins) = {
                let Some(it) = st.item_at(s) else { return Ok(Flow::Ready(Found::Missing)) };
                (it.header, it.state(), it.expiry(), wins_token(opts, &it))
            };
            // Handing out the recache token is a change (a state byte, or
            // a rewrite, journaled). Only here is it known that this read
            // would make it: with the journal failed it is refused, like
            // the ms that would follow it, rather than handed out unlogged.
            if wins {
                st.check_journal()?;
            }
            let touch = opts.touch.filter(|&e| e != expiry);
            // An item of a running snapshot's cut is not changed in place:
            // the snapshot saves its bytes as they were at the cut, so the
            // change goes into a new version, after the cut (`cut.rs`). Nor
            // one waiting in a batch for flash: its record holds the bytes
            // as batched, and the slot is repointed there (`tier/`).
            let seg = slot::seg(s);
            let frozen = (wins || touch.is_some()) && (st.frozen(seg) || st.batched(seg));
            let relayout = frozen
                || (wins && header.state_at().is_none())
                || touch.is_some_and(|e| e != 0 && header.expiry_at().is_none());
            r.first_expiry.get_or_insert(expiry);
            if relayout {
                drop(stripe);
                r.won |= self.relayout(key, opts, touch)?;
                r.relaid = true;
                continue;
            }
            if wins {
                st.set_state(s, header, bits | state::TOKEN_SENT);
                r.won = true;
                if let Some(j) = st.journal() {
                    self.journaled = self.journaled.max(j.state(key, bits | state::TOKEN_SENT));
                }
            }
            if let Some(e) = touch {
                st.set_expiry(s, header, e);
                // The whole item, not the new expiry alone: a recovery
                // that finds the item expired by then (in the snapshot, or
                // in an earlier record) must bring it back as touched.
                self.journaled = self.journaled.max(st.journal_item(s));
            }
            if opts.bump && slot::freq(s) < 15 {
                stripe.set(pos, slot::read_once(s));
            }
            return Ok(Flow::Ready(self.hand_out(s, bits, touch.unwrap_or(expiry), &r, opts, f)));
        }
        Err(StoreError::Contended.into())
    }

    /// Creates the missed item empty, as `mg`'s vivify asks, with the
    /// recache token handed out; true if this read created it (another
    /// may have been first).
    fn vivify(&mut self, key: &[u8], expiry: u32, opts: &ReadOpts) -> Result<bool, Stop> {
        let f = Fields { expiry, cas: opts.new_cas, state: state::TOKEN_SENT, ..Fields::default() };
        let w = Write { new_cas: opts.new_cas, ..Write::new(SetOp::Add, key, 0, expiry, b"") };
        Ok(self.store_item(&w, f)?.outcome == StoreOutcome::Stored)
    }

    /// The item at slot `s` (state `bits`, expiry `expiry` now), found and
    /// changed as the read asked: handed to `f` under its bucket lock,
    /// which the caller holds, or, for a large or compressed value, its
    /// segment pinned and where its bytes are said, to be read without
    /// the lock.
    fn hand_out<R>(
        &self,
        s: u64,
        bits: u8,
        expiry: u32,
        r: &Rounds,
        opts: &ReadOpts,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Found<R> {
        let st = &*self.store;
        // A fresh view, taken after the in-place writes.
        let Some(it) = st.item_at(s) else { return Found::Missing };
        let view = ItemView {
            key: it.key(),
            value: it.value(),
            flags: it.flags(),
            cas: st.cas_of(s, &it),
            expiry_before: r.first_expiry.unwrap_or(expiry),
            expiry,
            fetched: !r.created && (slot::was_read(s) || bits & state::FETCHED != 0),
            written: if opts.written { st.written_at(s) } else { 0 },
            stale: bits & state::STALE != 0,
            token_sent: bits & state::TOKEN_SENT != 0 && !r.won,
            won: r.won,
            created: r.created,
            binary_key: bits & state::KEY_BINARY != 0,
        };
        let vlen = it.value().len();
        // A compressed value is decompressed without the lock.
        let plain_len = it.compressed().then(|| strata_compress::original_len(it.value()).unwrap_or(0));
        if plain_len.is_none() && (vlen < st.config().unlocked_read_min || st.config().unlocked_read_min == 0) {
            return Found::Read(f(view));
        }
        let seg = slot::seg(s);
        st.pin(seg);
        let key_at = st.byte_off(s) + it.header.header_len();
        let view = view.without_bytes();
        let (klen, value_at) = (it.key().len(), key_at + it.key().len());
        let store = self.store.clone();
        Found::Fetch(Fetch { store, view, seg, key_at, klen, value_at, vlen, plain_len })
    }

    /// Moves an item to a layout with room for the expiry and state a read
    /// wants to change in place, handing out the recache token on the way if
    /// the read wins it. Returns whether it did.
    pub(crate) fn relayout(&mut self, key: &[u8], opts: &ReadOpts, touch: Option<u32>) -> Result<bool, Stop> {
        let r = self.rewrite(
            key,
            |it, cas| {
                let wins = wins_token(opts, it);
                let fields = Fields {
                    expiry: touch.unwrap_or(it.expiry()),
                    cas: Some(cas),
                    state: it.state() | if wins { state::TOKEN_SENT } else { 0 },
                    ..it.fields()
                };
                Step::<bool, ()>::Write(Plan { fields, vlen: it.value().len(), keep: true }, wins)
            },
            |old, _, dst| dst.copy_from_slice(old.value()),
        )?;
        Ok(matches!(r, Rewritten::Written(true, _)))
    }

    /// Everything known about `key`, without counting it as a read,
    /// reading flash synchronously.
    pub fn inspect(&mut self, key: &[u8]) -> Option<Inspect> {
        now(self.inspect_with(key, Reading::Now)).ok().flatten()
    }

    /// [`Worker::inspect`] for `me`: a key on flash is brought back first,
    /// which may have to be waited for, as `reading` allows.
    pub fn inspect_with(&mut self, key: &[u8], reading: Reading) -> Result<Flow<Option<Inspect>>, StoreError> {
        self.with_flash(key, reading, |w| w.inspect_once(key).map(Flow::Ready))
    }

    fn inspect_once(&mut self, key: &[u8]) -> Result<Option<Inspect>, Stop> {
        let st = &*self.store;
        st.maybe_flush();
        let loc = st.index().locate(key);
        let now = st.clock().now();
        let mut stripe = st.index().lock(loc.stripe);
        let s = match st.lookup(&mut stripe, loc, key, now, &self.active.counters) {
            Ok((_, s)) => s,
            Err(Miss::OnFlash) => return Err(Stop::OnFlash),
            Err(_) => return Ok(None),
        };
        Ok(st.item_at(s).map(|it| st.inspect_of(s, &it)))
    }

    /// Index stripes, for [`Worker::scan`].
    pub fn stripes(&self) -> usize {
        self.store.index().stripes()
    }

    /// The live items of index stripe `stripe` (neither expired nor
    /// flushed; none counted as read), each with its key, under the
    /// stripe's lock: a dump (`lru_crawler metadump`) walks the stripes one
    /// at a time and never stops the world. A key always hashes to the
    /// same stripe, so a walk over every stripe sees each item that stayed
    /// linked throughout exactly once.
    pub fn scan(&mut self, stripe: usize, mut f: impl FnMut(&[u8], &Inspect)) {
        let st = &*self.store;
        st.maybe_flush();
        let now = st.clock().now();
        let guard = st.index().lock(stripe);
        guard.for_each_item(|s| match st.item_at(s) {
            Some(it) if st.dead(s, &it, now).is_none() => f(it.key(), &st.inspect_of(s, &it)),
            _ => {}
        });
    }

    /// Whether `key` is present (no frequency bump).
    #[cfg(test)]
    pub fn contains(&mut self, key: &[u8]) -> bool {
        self.inspect(key).is_some()
    }

    /// Sets a new expiry; false if the key is missing.
    pub fn touch(&mut self, key: &[u8], expiry: u32) -> Result<bool, StoreError> {
        let opts = ReadOpts { touch: Some(expiry), ..ReadOpts::default() };
        Ok(self.read(key, &opts, |_| ())?.is_some())
    }
}

impl Store {
    /// `me`'s and a dump's view of the linked item at slot `s`.
    pub(crate) fn inspect_of(&self, s: u64, it: &Item<'_>) -> Inspect {
        let (_, plain, stored) = crate::store::sizes(it);
        Inspect {
            expiry: it.expiry(),
            written: self.written_at(s),
            cas: self.cas_of(s, it),
            fetched: slot::was_read(s) || it.state() & state::FETCHED != 0,
            // As the client stored it: a compressed value counts its
            // original length (and the header that length would need).
            size: match stored {
                0 => it.header.total_len(),
                _ => {
                    let plain_fields = Fields { compressed: false, ..it.fields() };
                    crate::item::encoded_len(it.key().len(), plain as usize, &plain_fields)
                }
            },
            value_len: if stored == 0 { it.value().len() } else { plain as usize },
            class: self.band_of(self.class_len_of(it, plain)) + 1,
            binary_key: it.state() & state::KEY_BINARY != 0,
        }
    }
}
