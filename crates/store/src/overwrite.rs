//! Overwrites written over the old version of their key, in place, when the
//! new item has the old one's layout: the same value length, the same
//! optional fields, nothing compressed.
//!
//! **Why.** A set of a key that is already cached otherwise writes a new
//! version at the end of the writer's open segment and leaves the old one
//! dead where it was. On workloads that overwrite hot keys (workload 6,
//! zipf overwrites; workload 16, three sets to a get) the dead versions
//! were about 5 MB of `-m 64`, and the cleaner that wins them back copied
//! 2.4 bytes per byte stored (write amplification 3.4). Written in place,
//! an overwrite leaves nothing dead and nothing to copy.
//!
//! **What eviction must make up for.** A new version is also a free move to
//! the head of the queue: it starts its stay in memory again. In place, the
//! item stays where its first version was, in a segment that eviction
//! reaches early. Measured with eviction as it was (non-LTO, one round
//! each, docs/benchmarks-history.md "Issue 42, twelfth step"): hits 74.4%
//! against 76.2% on workload 6 at ten times the keys, 69.3% against 72.3%
//! on 16. So an item overwritten in place is marked ([`state::IN_PLACE`])
//! and eviction keeps it once whatever its reads and the copy credit
//! (`evict/clear.rs`): the copy it makes then is the move the new version
//! would have made, paid once however many times the key was written
//! meanwhile. The mark goes with that copy.
//!
//! **Layout.** An item written over a live version of its key with the same
//! value length is laid out for the next such write: a state byte
//! ([`state::OVERWRITTEN`]) and, with CAS on, an explicit CAS, 9 bytes more
//! than a first version. The first overwrite of a key writes its new version
//! that way (a second try of the write, as when its fields change under the
//! lock); the ones after it go in place while the value length stays.
//!
//! **CAS.** Each write in place takes a CAS no item ever had, above the
//! key's CAS before it: the worker takes an epoch of its own (no segment is
//! opened at it) and hands out its `2^cas_off_bits` offsets one by one
//! ([`Active::fresh_cas`]), taking a new epoch (above every CAS handed out
//! yet) when they run out or no longer exceed the key's. Epochs stay under
//! the snapshot's epoch lease as segments' do. The new CAS is also what
//! tells a read-modify-write (incr, append, a touch's relayout:
//! `Worker::rewrite`), which plans from the item under its lock, reserves
//! without it and commits under it again, that the item it planned from
//! changed though it did not move: without it an `incr` planned from the
//! old value undid a set acknowledged meanwhile (a wire test,
//! `test_read_modify_write_races.py`, saw it 4 times in 30,000 sets). So there
//! is nothing in place with CAS off (`-C`), nor for a client's `E` equal
//! to the old CAS.
//!
//! **Write time.** A segment's write times are marks by offset (`timelog.rs`)
//! that cannot say an item in their middle was written later. An item
//! written in place reads as written at its segment's latest write in
//! place (`SegMeta::rewritten_at`): at once after the write, the time of
//! the write; later, no earlier than it. Right after a set `mg … l` is 0, as
//! in memcached.
//!
//! **Soundness.** The bytes change under the item's bucket lock, as the
//! expiry and state bytes already did (arena rule 4): every reader of a
//! value in memory copies it under that lock, but for values read without
//! it from a pinned segment (`Config::unlocked_read_min` bytes or more,
//! compressed values) and for the recompression pass, which reads values
//! of sealed segments without it. So an overwrite goes in place only for
//! values under `unlocked_read_min` and without compression; never in a
//! segment of a running snapshot's cut (`cut.rs`: nothing there changes
//! after the cut), nor in one with items in a batch for flash
//! (`SegMeta::batched`): the batch copied the item under its bucket lock
//! and repoints its slot later if it still points at the item, which an
//! overwrite in place would leave pointing there with the old value on
//! flash. The lengths and key, which the segment scanner reads without the
//! lock, are not written at all.

use std::sync::atomic::Ordering::*;

use crate::index::{slot, Pos, Stripe};
use crate::item::{state, write_fields, Fields, Header};
use crate::segments::Active;
use crate::store::{add, bump, Store};
use crate::types::{StoreOutcome, Stored};
use crate::write::OVERWRITE_FREQ;

impl Store {
    /// Whether an overwrite of a `vlen`-byte value may go in place in this
    /// store at all (see the module doc, "Soundness" and "CAS": without CAS
    /// a write in place would leave no trace a read-modify-write sees).
    pub(crate) fn may_overwrite_in_place(&self, vlen: usize) -> bool {
        let min = self.config().unlocked_read_min;
        self.config().cas && self.codec().is_none() && (min == 0 || vlen < min)
    }

    /// Whether items of `seg` wait in a batch for flash (`SegMeta::batched`);
    /// the caller holds the bucket lock of the item it asks for. Nothing is
    /// written into such an item in place (a set here, a touch or recache
    /// token in `read.rs`): the batch's record keeps the bytes it copied.
    pub(crate) fn batched(&self, seg: u32) -> bool {
        self.seg(seg).batched.load(Relaxed) != 0
    }

    /// Writes fields `f` (the layout `h`, the linked item's at slot `s`) and
    /// `value` over that item, leaving its lengths and key as they are. The
    /// caller holds the item's bucket lock and no view of its bytes.
    fn write_over(&self, s: u64, h: Header, f: &Fields, value: &[u8]) {
        let (seg, off) = (slot::seg(s), self.byte_off(s));
        let fields = h.header_len() - h.flags_at();
        // SAFETY: the item is linked and the caller holds its bucket lock,
        // under which alone its fields and value are read or written (arena
        // rule 4); the range is inside the item, after its lengths.
        let dst = unsafe { self.arena().bytes_mut(seg, off + h.flags_at(), fields) };
        write_fields(dst, f);
        let value_at = off + h.header_len() + usize::from(h.klen);
        // SAFETY: as above; the value is the item's last `vlen` bytes, and
        // no reader copies it without the lock (`may_overwrite_in_place`).
        let dst = unsafe { self.arena().bytes_mut(seg, value_at, value.len()) };
        dst.copy_from_slice(value);
    }
}

/// Whether a CAS of a new epoch is above `cas`. Not when a client's `E`
/// gave its key one beyond the epochs (memcached's counter does not jump
/// over those either), nor, in the crash simulator, which keeps no epoch
/// lease, for CAS values replayed from before a crash. A CAS then cannot be
/// made to grow, and a write that tried anew for each retry gave up
/// (`SERVER_ERROR` for a same-length set after an `E`, at cb5bc8c).
fn epochs_reach(st: &Store, cas: u64) -> bool {
    st.cas_at(st.epoch() + 1, 0) > cas
}

impl Active {
    /// A CAS no item had before, above `above` (the key's CAS now, so that
    /// a key's CAS grows from write to write): the next offset of this
    /// worker's own epoch, a new epoch once they are used up or no longer
    /// above (a new epoch is above every CAS handed out yet, but not one a
    /// client gave: see [`epochs_reach`]).
    pub(crate) fn fresh_cas(&mut self, st: &Store, above: u64) -> u64 {
        let (epoch, next) = self.cas_lease;
        if epoch == 0 || next >= 1u64 << st.cas_off_bits() || st.cas_at(epoch, next as usize) <= above {
            self.cas_lease = (st.epochs().next(), 0);
        }
        let (epoch, next) = self.cas_lease;
        self.cas_lease.1 = next + 1;
        st.cas_at(epoch, next as usize)
    }

    /// Writes a set's `value` with fields `w` over the live item the lookup
    /// found under `stripe` (at `pos`, slot `s`) if the store allows it and
    /// the layouts match: what it stored and its journal position. `None`
    /// if it did not (the caller writes a new version).
    pub(crate) fn overwrite_in_place(
        &mut self,
        store: &Store,
        stripe: &mut Stripe,
        (pos, s): (Pos, u64),
        (key, value): (&[u8], &[u8]),
        w: &Fields,
        now: u32,
    ) -> Option<(Stored, u64)> {
        let seg = slot::seg(s);
        if w.compressed || !store.may_overwrite_in_place(value.len()) || store.frozen(seg) || store.batched(seg) {
            return None;
        }
        // The CAS's value does not change the layout (CAS is on: see
        // `may_overwrite_in_place`): it is taken only once the write is
        // sure to go in place.
        let mut f =
            Fields { cas: Some(w.cas.unwrap_or(0)), state: w.state | state::OVERWRITTEN | state::IN_PLACE, ..*w };
        let (h, old_cas) = {
            let it = store.item_at(s)?;
            let h = Header::new(key.len(), value.len(), &f);
            if it.compressed() || it.header != h {
                return None;
            }
            (h, store.cas_of(s, &it))
        };
        // A new CAS is what tells a read-modify-write that planned from the
        // old value that it changed (`Worker::rewrite`): a client's `E`
        // equal to the old one would not.
        if w.cas == Some(old_cas) {
            return None;
        }
        f.cas = Some(w.cas.unwrap_or_else(|| self.fresh_cas(store, old_cas)));
        store.write_over(s, h, &f, value);
        stripe.set(pos, slot::with_freq(s, OVERWRITE_FREQ));
        store.note_expiry(seg, f.expiry);
        store.seg(seg).rewritten_at.fetch_max(now, Relaxed);
        add(&self.counters.bytes_stored, h.total_len() as u64);
        bump(&self.counters.total_items);
        bump(&self.counters.overwritten_in_place);
        let cas = f.cas.unwrap_or(0);
        Some((Stored { outcome: StoreOutcome::Stored, cas, size: value.len() }, store.journal_item(s)))
    }

    /// The fields of a new version (`w`; `tried`: those it was written with
    /// last, at `seg`, `off`) of a key whose CAS is `old`: its CAS is above `old`,
    /// as memcached's one counter would make it (`ms` with `I` compares
    /// CAS values by order). A derived CAS comes from the segment the
    /// version lands in, which may be older than the last version's (another
    /// worker's): then an explicit one, the one tried if still above `old`,
    /// else a fresh one. A client's own CAS (`E`) is taken as given.
    pub(crate) fn cas_above(
        &mut self,
        st: &Store,
        w: Fields,
        tried: &Fields,
        (seg, off): (u32, usize),
        old: Option<u64>,
    ) -> Fields {
        let Some(old) = old.filter(|_| st.config().cas && w.cas.is_none()) else { return w };
        // Once tried with one, a version keeps it: without, it could go
        // back to a segment where it needs one, and so on until the write
        // gave up (the crash simulator's first schedule did).
        if let Some(c) = tried.cas.filter(|&c| c > old || !epochs_reach(st, old)) {
            return Fields { cas: Some(c), ..w };
        }
        if st.derived_cas(seg, off) > old || !epochs_reach(st, old) {
            return w;
        }
        Fields { cas: Some(self.fresh_cas(st, old)), ..w }
    }

    /// The fields a new version written over the live item at slot `s`
    /// takes: laid out for the next overwrite to go in place (a state byte,
    /// an explicit CAS) when this one has the old value's length and could
    /// have gone in place but for the old item's layout. `tried` are the
    /// fields the version was written with last, whose CAS is kept if it
    /// is still above the key's (another write may have come between).
    pub(crate) fn laid_out_for_overwrite(
        &mut self,
        store: &Store,
        w: Fields,
        tried: &Fields,
        (s, value): (u64, &[u8]),
    ) -> Fields {
        let old_cas = match store.item_at(s) {
            Some(it) if !it.compressed() && it.value().len() == value.len() => store.cas_of(s, &it),
            _ => return w,
        };
        if w.compressed || !store.may_overwrite_in_place(value.len()) {
            return w;
        }
        let kept = tried.cas.filter(|&c| c > old_cas || !epochs_reach(store, old_cas));
        let cas = Some(w.cas.or(kept).unwrap_or_else(|| self.fresh_cas(store, old_cas)));
        Fields { cas, state: w.state | state::OVERWRITTEN, ..w }
    }
}
