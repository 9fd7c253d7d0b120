//! Reads: `get`, and reads that also touch the item, hand out the meta
//! protocol's recache token, or create the item on a miss; `me`'s inspect.
//!
//! A read looks the key up under its bucket lock, makes the in-place
//! changes it asks for (expiry, state byte), and hands the item to the
//! caller's closure while the lock still pins it. When the item's layout
//! has no room for a change (no expiry field, no state byte), the item is
//! rewritten first (`write.rs`) and the read starts again.

use crate::index::slot;
use crate::item::{state, Fields, Item};
use crate::store::{bump, Miss};
use crate::types::{Inspect, ItemView, ReadOpts, SetOp, StoreError, StoreOutcome, Write};
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

impl Worker {
    /// Reads `key`, handing the item to `f` while it is pinned by its bucket lock.
    pub fn get<R>(&mut self, key: &[u8], f: impl FnOnce(ItemView<'_>) -> R) -> Option<R> {
        // A plain read never rewrites, so it cannot fail.
        self.read(key, &ReadOpts::GET, f).ok().flatten()
    }

    /// Reads `key` as `opts` says (touching, handing out the recache token,
    /// creating it on a miss), then hands the item to `f` under its bucket
    /// lock. The token is handed out under that lock, so exactly one reader
    /// gets it. `None` on a miss.
    pub fn read<R>(
        &mut self,
        key: &[u8],
        opts: &ReadOpts,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<Option<R>, StoreError> {
        self.store.maybe_flush();
        let loc = self.store.index.locate(key);
        // What earlier rounds did: a rewrite that handed us the token, or
        // created the item; the expiry first seen.
        let (mut won, mut created, mut first_expiry, mut relaid) = (false, false, None, false);
        for _ in 0..MAX_RETRIES {
            let st = &*self.store;
            let now = st.clock.now();
            let mut stripe = st.index.lock(loc.stripe);
            let c = &self.active.counters;
            // An item this read just touched into the past (`touch k -1`)
            // still counts as found by it, as when touched in place.
            let alive_at = match opts.touch {
                Some(e) if relaid && e != 0 => now.min(e - 1),
                _ => now,
            };
            let (pos, s) = match st.lookup(&mut stripe, loc, key, alive_at, c) {
                Ok(found) => found,
                Err(miss) => {
                    match miss {
                        Miss::Expired => bump(&c.get_expired),
                        Miss::Flushed => bump(&c.get_flushed),
                        Miss::Absent => {}
                    }
                    drop(stripe);
                    let Some(expiry) = opts.vivify else { return Ok(None) };
                    let f = Fields { expiry, cas: opts.new_cas, state: state::TOKEN_SENT, flags: 0 };
                    let w = Write { new_cas: opts.new_cas, ..Write::new(SetOp::Add, key, 0, expiry, b"") };
                    if self.store_item(&w, f)?.outcome == StoreOutcome::Stored {
                        (won, created) = (true, true);
                    }
                    continue;
                }
            };
            // What the in-place writes below need, read before them: the
            // view `it` must be dead once they start (arena rule 4).
            let (header, bits, expiry, wins) = {
                let Some(it) = st.item_at(s) else { return Ok(None) };
                (it.header, it.state(), it.expiry(), wins_token(opts, &it))
            };
            let touch = opts.touch.filter(|&e| e != expiry);
            let relayout =
                (wins && header.state_at().is_none()) || touch.is_some_and(|e| e != 0 && header.expiry_at().is_none());
            let expiry_before = *first_expiry.get_or_insert(expiry);
            if relayout {
                drop(stripe);
                won |= self.relayout(key, opts, touch)?;
                relaid = true;
                continue;
            }
            if wins {
                st.set_state(s, header, bits | state::TOKEN_SENT);
                won = true;
            }
            if let Some(e) = touch {
                st.set_expiry(s, header, e);
            }
            let freq = slot::freq(s);
            if opts.bump && freq < 15 {
                stripe.set(pos, slot::with_freq(s, freq + 1));
            }
            // A fresh view, taken after the writes.
            let Some(it) = st.item_at(s) else { return Ok(None) };
            let view = ItemView {
                key: it.key(),
                value: it.value(),
                flags: it.flags(),
                cas: st.cas_of(s, &it),
                expiry_before,
                expiry: touch.unwrap_or(expiry),
                fetched: !created && (freq > 0 || bits & state::FETCHED != 0),
                written: if opts.written { st.written_at(s) } else { 0 },
                stale: bits & state::STALE != 0,
                token_sent: bits & state::TOKEN_SENT != 0 && !won,
                won,
                created,
                binary_key: bits & state::KEY_BINARY != 0,
            };
            return Ok(Some(f(view)));
        }
        Err(StoreError::Contended)
    }

    /// Moves an item to a layout with room for the expiry and state a read
    /// wants to change in place, handing out the recache token on the way if
    /// the read wins it. Returns whether it did.
    pub(crate) fn relayout(&mut self, key: &[u8], opts: &ReadOpts, touch: Option<u32>) -> Result<bool, StoreError> {
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

    /// Everything known about `key`, without counting it as a read (`me`).
    pub fn inspect(&mut self, key: &[u8]) -> Option<Inspect> {
        let st = &*self.store;
        st.maybe_flush();
        let loc = st.index.locate(key);
        let now = st.clock.now();
        let mut stripe = st.index.lock(loc.stripe);
        let (_, s) = st.lookup(&mut stripe, loc, key, now, &self.active.counters).ok()?;
        let it = st.item_at(s)?;
        Some(Inspect {
            expiry: it.expiry(),
            written: st.written_at(s),
            cas: st.cas_of(s, &it),
            fetched: slot::freq(s) > 0 || it.state() & state::FETCHED != 0,
            size: it.header.total_len(),
            binary_key: it.state() & state::KEY_BINARY != 0,
        })
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
