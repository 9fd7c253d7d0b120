//! Recompression: values stored before the current compression dictionary
//! are stored again with it, by the background reclaimer.
//!
//! A value is compressed once, when it is written, with the dictionary
//! current then. Before the first dictionary is trained (4 MiB of samples
//! and a training's second) values are stored plain or compressed without
//! one, and after a retraining (the workload's values drifted) the older
//! ones keep the dictionary that no longer fits them. On a cache filled
//! once that is most of what it holds: 100-250-byte JSON objects into `-m
//! 64` held 1.98x compressed where the dictionary gives 2.8x
//! (`docs/benchmarks.md`, "Compression").
//!
//! When the reclaimer sees a new dictionary current it notes the second
//! (`Rezip::since`); every sealed segment holding items written by that
//! second is then gone through once (`SegMeta::rezipped`), newest first
//! (the main queue's, then the small queue's), a few per round, given up
//! after [`PROBE`] items none of which was worth it: each item that is
//! plain (and may be compressed) and was written by then, or is compressed
//! with another dictionary, is compressed with the current one, and if
//! that saves the codec's minimum saving it is written into the
//! reclaimer's copy target of the segment's queue and linked there in its
//! place, with its CAS, flags, expiry and read count,
//! as the cleaner moves items. What it left behind is dead: the cleaner
//! takes the segment back as for overwrites (a segment left a quarter live
//! or less before fresh memory).
//!
//! It takes a free segment for a target only beyond the cleaner's reserve
//! and what writers asked for (under a small budget, where the reclaimer
//! keeps none free unasked, it asks for one as a writer does and goes on
//! at a later round), stops (for a later round) when a writer is short of
//! one, and never runs
//! while a snapshot's cut holds (the segments of the cut take nothing, and
//! an item moved out of one would be noted dead there; the cleaner's rule,
//! `cut.rs`); a segment left half-way is gone through again later. The
//! dictionary current when the reclaimer starts (one a snapshot brought
//! back) starts nothing: loaded values were compressed before the restart
//! with the dictionaries they name.
//!
//! The cold pass (`compression_cold_level`): once that pass finds nothing,
//! every sealed segment is gone through once per dictionary
//! (`SegMeta::cold_gen`), newest first, and each value is stored again the
//! same way at the codec's cold level where that saves
//! `COLD_MIN_SAVING_PERCENT` of it counting the explicit CAS a moved item
//! carries; after each segment the pass pauses so as to take
//! `cold_cpu_percent` of a core ([`cold_pause`]), and once it has caught
//! up it lets its compression context go (1.6-2.6 MB, counted in `-m`).

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

use strata_compress::NO_DICT;

use crate::clock::Clock;
use crate::image::Queue;
use crate::index::{slot, Loc};
use crate::item::{encoded_len, Fields};
use crate::segments::{Active, SegMeta};
use crate::store::{add, Store};
use crate::worker::Zip;

/// Sealed segments one round goes through before the reclaimer gets back
/// to freeing segments (it comes back for more).
const REZIP_PER_ROUND: usize = 2;

/// Items of a segment tried before the rest is given up if none was worth
/// storing again: after a retraining the values of the dictionary before
/// are tried with the new one, and those it was not trained for (the
/// schema before a change) mostly gain nothing from it.
const PROBE: usize = 16;

/// The pass's state, kept by the reclaimer: a compression context of its
/// own, and the dictionary it last saw current.
pub(crate) struct Rezip {
    zip: Zip,
    dict: u8,
    /// The second `dict` was first seen current (at least 1): items
    /// written by then are what the pass is for.
    since: u32,
    /// The cold pass's state; None without a cold level.
    cold: Option<Cold>,
}

/// The cold pass: sealed segments gone through once per dictionary, their
/// values stored again at the codec's cold level.
struct Cold {
    /// Marks the segments gone through with the current dictionary
    /// (`SegMeta::cold_gen`): from 1, one more whenever it changes.
    gen: u32,
    /// Not before then does the pass take another segment: its share of
    /// a core (`cold_cpu_percent`), or a look again for new ones.
    resume: Instant,
    /// Segments gone through with this dictionary, up to
    /// [`COLD_JUDGE_SEGMENTS`], and the bytes that saved.
    judged: (u32, u64),
}

/// Segments the cold pass goes through with a dictionary before it judges
/// whether its context pays for itself ([`Store::cold_pays`]).
const COLD_JUDGE_SEGMENTS: u32 = 4;

/// How long the cold pass waits for more sealed segments once it went
/// through all it found.
const COLD_LOOK_AGAIN: Duration = Duration::from_millis(100);

impl Rezip {
    /// None without compression.
    pub(crate) fn new(st: &Store) -> Option<Rezip> {
        let codec = st.codec()?.clone();
        let dict = codec.current_id();
        let cold = codec.cold_on().then(|| Cold { gen: 1, resume: Instant::now(), judged: (0, 0) });
        let zip = Zip::new(codec).ok()?;
        Some(Rezip { zip, dict, since: 0, cold })
    }
}

/// The pause after `spent` going through a segment at the cold level
/// that keeps the pass at `percent` of a core.
pub(crate) fn cold_pause(spent: Duration, percent: u8) -> Duration {
    let p = u32::from(percent.clamp(1, 100));
    spent * (100 - p) / p
}

/// What became of one item.
enum Moved {
    /// Stored again, this many bytes smaller.
    Saved(usize),
    /// Not linked there any more, or expired: nothing to do.
    Gone,
    /// No copy target with room, and no free segment beyond the reserve.
    NoRoom,
}

impl Store {
    /// Goes through up to [`REZIP_PER_ROUND`] segments written before the
    /// current dictionary (see the module doc). True if there may be more.
    pub(crate) fn rezip(&self, rz: &mut Rezip, active: &mut Active) -> bool {
        let id = rz.zip.codec().current_id();
        if id != rz.dict {
            rz.dict = id;
            rz.since = self.clock().now().max(1);
            if let Some(c) = rz.cold.as_mut() {
                c.gen = c.gen.wrapping_add(1).max(1);
                c.judged = (0, 0);
            }
        }
        if id == NO_DICT || self.cut_active() {
            self.drop_want(active);
            return false;
        }
        for _ in 0..REZIP_PER_ROUND {
            let Some((seg, q)) = self.pick_stale(rz.since) else {
                // Nothing left to go through with the dictionary: the
                // cold pass, if any, goes on.
                return self.rezip_cold(rz, active);
            };
            let done = self.rezip_segment(seg, q, rz, active, false);
            if !done {
                // Left half-way: gone through again at a later round,
                // unless cleared and opened again meanwhile.
                let _ = self.seg(seg).rezipped.compare_exchange(rz.since, 0, Relaxed, Relaxed);
                return false;
            }
        }
        true
    }

    /// The newest sealed segment holding items written by the second
    /// `since` that the pass has not gone through for it (see
    /// [`Store::pick_newest`]). Segments written after are marked as they
    /// are passed over, so each is looked at once per dictionary. Newest
    /// first: the oldest are eviction's next victims, and what storing
    /// them again wins lasts only until then.
    fn pick_stale(&self, since: u32) -> Option<(u32, Queue)> {
        if since == 0 {
            return None;
        }
        self.pick_newest(|m| &m.rezipped, since, |m| m.times.lock().earliest().is_some_and(|t| t <= since))
    }

    /// The newest sealed segment with live items, the main queue's first,
    /// whose `mark` is not `value`, and that nobody has pinned: marked
    /// `value`, and if it is `wanted`, pinned (under the eviction lock, so
    /// nobody takes it as a victim meanwhile) and returned.
    fn pick_newest(
        &self,
        mark: impl Fn(&SegMeta) -> &AtomicU32,
        value: u32,
        wanted: impl Fn(&SegMeta) -> bool,
    ) -> Option<(u32, Queue)> {
        let ev = self.lock_evict();
        let queues =
            ev.main.iter().rev().map(|&s| (s, Queue::Main)).chain(ev.small.iter().rev().map(|&s| (s, Queue::Small)));
        for (s, q) in queues {
            let m = self.seg(s);
            if mark(m).load(Relaxed) == value
                || m.live_items.load(Relaxed) == 0
                || self.is_pinned(s)
                || self.frozen(s)
                || self.is_flushed(s)
            {
                continue;
            }
            mark(m).store(value, Relaxed);
            if wanted(m) {
                self.pin(s);
                return Some((s, q));
            }
        }
        None
    }

    /// Stores again, with the current dictionary (at the cold level if
    /// `cold`), each item of `seg` (pinned by [`Store::pick_newest`], which
    /// it unpins) that is worth it.
    /// False if it stopped half-way (no room, or a snapshot's cut began).
    fn rezip_segment(&self, seg: u32, q: Queue, rz: &mut Rezip, active: &mut Active, cold: bool) -> bool {
        let end = self.seg(seg).write_off.load(Acquire) as usize;
        let max = self.config().item_size_max;
        let mut off = 0;
        let mut done = true;
        let (mut tried, mut saved_any) = (0, false);
        while off < end && (saved_any || tried < PROBE) {
            // SAFETY: the segment is sealed and pinned: every byte below
            // `end` was written before it was sealed and is not reused
            // while the pin holds; only expiry fields change, which are
            // read again under the bucket lock before anything is written.
            let Some(it) = (unsafe { self.arena().item_within(seg, off, end) }) else { break };
            let step = self.aligned(it.bytes().len());
            // A plain value written after the dictionary came was tried
            // with it then (one copied forward keeps its first time).
            let stale = if cold {
                // Whatever the level it was stored at (one stored again at
                // the cold level saves nothing and counts as tried).
                it.compressed() || it.value().len() >= rz.zip.codec().config().min_size
            } else if it.compressed() {
                strata_compress::dict_id(it.value()) != rz.dict
            } else {
                it.value().len() >= rz.zip.codec().config().min_size
                    && self.seg(seg).times.lock().time_at(off as u32).is_none_or(|t| t <= rz.since)
            };
            let loc = self.index().locate(it.key());
            // Overwritten or deleted since (the cleaner has not been
            // through): nothing to compress.
            let stale = stale && self.links((seg, off), loc);
            tried += usize::from(stale);
            // A moved item keeps its CAS explicitly: 8 bytes more, unless
            // it carries one already.
            let grows = if it.explicit_cas().is_some() { 0 } else { 8 };
            if stale && rz.zip.recompress(it.value(), it.compressed(), max, cold, grows) {
                let form_dict = strata_compress::dict_id(&rz.zip.stored);
                let moved = self.relink((seg, off), loc, q, &rz.zip.stored, active);
                // The target took its own reference if the form went there.
                rz.zip.codec().release(form_dict);
                match moved {
                    Moved::Saved(saved) => {
                        saved_any = true;
                        rz.zip.codec().note_recompressed(saved as u64, cold);
                    }
                    Moved::Gone => {}
                    Moved::NoRoom => {
                        done = false;
                        break;
                    }
                }
                // Writers come first: the reclaimer frees segments again
                // once a writer is short of one.
                if self.cut_active() || self.writers_short(active) {
                    done = false;
                    break;
                }
            }
            off += step;
        }
        self.unpin(seg);
        done
    }

    /// The cold pass's round: the newest sealed segment it has not gone
    /// through with the current dictionary, its values stored again at the
    /// cold level, if its share of a core allows. True if there may be
    /// more.
    fn rezip_cold(&self, rz: &mut Rezip, active: &mut Active) -> bool {
        let gen = match rz.cold.as_ref() {
            // A context refused for its size is not built again until
            // the dictionary changes.
            Some(c) if Instant::now() >= c.resume && rz.zip.cold_possible() => c.gen,
            _ => {
                self.drop_want(active);
                return false;
            }
        };
        let Some((seg, q)) = self.pick_cold(gen) else {
            self.drop_want(active);
            // Caught up: the context's memory goes back to the items
            // until more is sealed.
            rz.zip.release_cold();
            if let Some(c) = rz.cold.as_mut() {
                c.resume = Instant::now() + COLD_LOOK_AGAIN;
            }
            return false;
        };
        let began = Instant::now();
        let saved_before = rz.zip.codec().stats().cold_saved;
        let done = self.rezip_segment(seg, q, rz, active, true);
        let z = rz.zip.codec().stats();
        let percent = rz.zip.codec().config().cold_cpu_percent;
        let mut judge = None;
        if let Some(c) = rz.cold.as_mut() {
            c.resume = Instant::now() + cold_pause(began.elapsed(), percent);
            if c.judged.0 < COLD_JUDGE_SEGMENTS {
                c.judged = (c.judged.0 + 1, c.judged.1 + z.cold_saved.saturating_sub(saved_before));
                judge = (c.judged.0 == COLD_JUDGE_SEGMENTS).then_some(c.judged.1);
            }
        }
        // (Not if the context was refused for its size meanwhile.)
        if judge.is_some_and(|saved| rz.zip.cold_possible() && !self.cold_pays(saved, z.cold_dict_bytes)) {
            rz.zip.refuse_cold();
        }
        if !done {
            // Gone through again later, unless cleared and reused meanwhile.
            let _ = self.seg(seg).cold_gen.compare_exchange(gen, 0, Relaxed, Relaxed);
        }
        done
    }

    /// Whether the cold level pays for its context: `saved` bytes (net)
    /// on the first [`COLD_JUDGE_SEGMENTS`] segments, as many again on
    /// each segment memory holds, against 1.5 times the context's
    /// `context` bytes (its copy targets' open room costs too). Judged
    /// on strata-bench's values (docs/benchmarks-history.md): pages at
    /// `-m 64` came out at 2.9 (level 19, 6% more items held) and 3.1
    /// (level 9); pages at `-m 32`, level 9, at 1.07 and small objects
    /// at `-m 64`, level 19, at 0.69, both of which held 5% fewer items
    /// with the level kept.
    fn cold_pays(&self, saved: u64, context: u64) -> bool {
        let over_memory = saved * u64::from(self.segment_budget()) / u64::from(COLD_JUDGE_SEGMENTS);
        let pays = over_memory * 2 >= 3 * context;
        tracing::info!(
            saved,
            over_memory,
            context,
            "compression_cold_level {} for the current dictionary",
            if pays { "kept" } else { "given up (it saves too little for its context)" }
        );
        pays
    }

    /// The newest sealed segment not gone through for generation `gen`,
    /// the main queue's first ([`Store::pick_newest`]): the main queue
    /// holds what was read, and the newest stay longest.
    fn pick_cold(&self, gen: u32) -> Option<(u32, Queue)> {
        self.pick_newest(|m| &m.cold_gen, gen, |_| true)
    }

    /// Whether the index links key `loc` to the item at `off` of `seg`.
    fn links(&self, (seg, off): (u32, usize), loc: Loc) -> bool {
        let st = self.index().lock(loc.stripe);
        st.find(loc.bucket, self.at(seg, off)).is_some()
    }

    /// Matches the memory slot of the item at `off` of `seg`.
    fn at(&self, seg: u32, off: usize) -> impl Fn(u64) -> bool {
        let granule_off = self.granules(off);
        move |s| !slot::is_flash(s) && slot::seg(s) == seg && slot::off(s) == granule_off
    }

    /// Writes `form` as the value of the item at `off` of `seg` (key
    /// `loc`) into the copy target of queue `q`, and links it in the
    /// item's place, if the index still links the item there.
    fn relink(&self, (seg, off): (u32, usize), loc: Loc, q: Queue, form: &[u8], active: &mut Active) -> Moved {
        let now = self.clock().now();
        for fresh_target in [false, true] {
            let mut st = self.index().lock(loc.stripe);
            let Some((pos, s)) = st.find(loc.bucket, self.at(seg, off)) else { return Moved::Gone };
            let Some(it) = self.item_at(s) else { return Moved::Gone };
            if Clock::is_expired(it.expiry(), now) || self.is_flushed(seg) {
                return Moved::Gone;
            }
            let f = Fields { cas: Some(self.cas_of(s, &it)), compressed: true, ..it.fields() };
            let len = encoded_len(it.key().len(), form.len(), &f);
            // A target in a snapshot's cut takes nothing (`Copies::target_for`).
            if let Some(t) = active.copies.target_for(self, q, self.aligned(len)) {
                let moved = self.copy_into(t, s, (it.key(), form), &f, slot::freq(s));
                // Net of the header's growth (the explicit CAS).
                let saved = it.bytes().len().saturating_sub(len);
                st.set(pos, moved);
                self.unaccount_replaced(&mut st, s, moved);
                self.account(&mut st, moved);
                add(&active.counters.bytes_copied, len as u64);
                return Moved::Saved(saved);
            }
            drop(st);
            // A target is taken only beyond the cleaner's reserve and what
            // writers asked for. Under a small budget nothing more is kept
            // free unasked: the pass asks, as a writer does, and goes on
            // once the reclaimer has freed one (its next round).
            if fresh_target {
                break;
            }
            if self.spare_unasked(active) == 0 {
                if self.ahead_on_demand() {
                    self.want_segment(active);
                }
                break;
            }
            if !active.copies.new_target(self, q) {
                break;
            }
            self.drop_want(active);
        }
        Moved::NoRoom
    }
}

#[cfg(test)]
impl Rezip {
    /// The pass's state as if the current dictionary had come just now:
    /// every sealed segment is for it (tests).
    pub(crate) fn now(st: &Store) -> Option<Rezip> {
        Rezip::new(st).map(|rz| Rezip { since: st.clock().now() + 1, ..rz })
    }
}

#[cfg(test)]
impl Store {
    /// Runs the pass to its end on this thread ([`Rezip::now`]), into copy
    /// targets of its own (sealed at the end). The values it stored again.
    pub(crate) fn rezip_all(&self) -> u64 {
        let Some(mut rz) = Rezip::now(self) else { return 0 };
        let before = rz.zip.codec().stats().recompressed;
        let mut active = Active::new(self, std::sync::Arc::new(crate::store::Counters::default()), true);
        let mut rounds = 0;
        while self.rezip(&mut rz, &mut active) {
            rounds += 1;
            assert!(rounds < 1 << 20, "the pass does not end");
        }
        active.seal_all(self);
        rz.zip.codec().stats().recompressed - before
    }
}
