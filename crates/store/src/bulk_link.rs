//! A load's index links, put off and made in bucket order.
//!
//! A snapshot load links every item it brings back. Linked one by one in
//! the file's order, each link waits on memory: the key's bucket, then
//! its overflow bucket, somewhere in an index of tens of megabytes, each
//! behind a TLB miss. Prefetching a batch's buckets left 10 M small items
//! at about 200 ns a link, 2.2 s of a 2.8 s load. [`Links`] keeps the
//! links a restore would make and, a chunk at a time, sorts them by
//! stripe and by bucket within the stripe's table, then makes them
//! walking each table in address order, where the hardware's prefetcher
//! runs ahead: about 35 ns a link, plus 10-20 for the sort.
//!
//! The sort is stable (a radix sort, `radsort`): two versions of one key
//! (the key overwritten between the copies of two segments, both saved)
//! sort together and keep the file's order, so the later one replaces the
//! earlier, as linking in the file's order did. The order is computed from
//! each stripe's table as it is at the flush, for every entry of the
//! chunk alike, so a table that doubled between two entries' restores
//! cannot part two versions of a key.
//!
//! The loader hands full chunks to a thread of their own
//! ([`Links::hand_off`]), which links one while the loader restores the
//! images of the next.
//!
//! Each entry carries what linking needs of its item (sizes, the key's
//! hash bits), so the flush reads an item's bytes only for a tag that
//! matches: the items are in segments all over memory and reading each
//! in bucket order would bring the misses back.

use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::time::{Duration, Instant};

use crate::index::{slot, Loc};
use crate::store::{Counters, Store};

/// One link put off (32 bytes, pinned by a test).
#[derive(Debug, Clone, Copy)]
struct Deferred {
    seg: u32,
    /// The item's offset in its segment, in granules (as in its slot).
    gran: u32,
    /// The key's hash bits a stripe takes its bucket from ([`Loc::bucket`]).
    bucket: u32,
    /// The sort key: stripe, then bucket in the stripe's table.
    order: u32,
    /// Stored bytes, and a compressed value's original and stored lengths
    /// (0 if not compressed): the stripe's totals count them.
    len: u32,
    plain: u32,
    stored: u32,
    stripe: u16,
    tag: u16,
}

/// A stripe's table has at most 2^22 buckets (`index::MAX_STRIPE_BUCKETS`)
/// and there are at most 2^10 stripes: the two fit a `u32` sort key.
const STRIPE_BITS: u32 = 10;

/// Links put off, made a chunk at a time in bucket order, here or by
/// another thread ([`Links::hand_off`]).
#[derive(Debug)]
pub(crate) struct Links {
    pending: Vec<Deferred>,
    chunk: usize,
    /// Counts a table's doubling during a flush (memory items only here:
    /// nothing is on flash while segments are restored).
    counters: Counters,
    handoff: Option<Handoff>,
}

/// Where full chunks go when another thread links them.
#[derive(Debug)]
struct Handoff {
    chunks: SyncSender<Vec<Deferred>>,
    /// Closed by the linking thread once it has linked every chunk.
    done: Receiver<()>,
}

/// The receiving end of [`Links::hand_off`]: a thread that runs it links
/// the chunks in the order they were filled.
#[derive(Debug)]
pub struct LinkChunks {
    chunks: Receiver<Vec<Deferred>>,
    done: Sender<()>,
}

impl LinkChunks {
    /// Links each chunk as it comes, until the sender finishes; returns
    /// the time spent linking.
    pub fn run(self, store: &Store) -> Duration {
        let counters = Counters::default();
        let mut busy = Duration::ZERO;
        for mut chunk in self.chunks.iter() {
            let t = Instant::now();
            link_chunk(store, &mut chunk, &counters);
            busy += t.elapsed();
        }
        // The sender waits for this (or for the channel to close, if
        // this thread is gone) before it links anything itself.
        let _ = self.done.send(());
        busy
    }
}

impl Links {
    /// Links flushed every `chunk` (at least one).
    pub fn new(chunk: usize) -> Links {
        Links { pending: Vec::new(), chunk: chunk.max(1), counters: Counters::default(), handoff: None }
    }

    /// From now on full chunks go to whichever thread runs the returned
    /// [`LinkChunks`], one at a time (a send waits while it links the one
    /// before: a chunk being linked, its sort's scratch and the one
    /// filling are all there is), so that the caller restores
    /// the next images meanwhile. [`Links::flush`] waits for it.
    pub fn hand_off(&mut self) -> LinkChunks {
        let (chunks, rx) = sync_channel(0);
        let (done_tx, done) = channel();
        self.handoff = Some(Handoff { chunks, done });
        LinkChunks { chunks: rx, done: done_tx }
    }

    /// Puts off linking the item at `gran` granules into `seg`, of key
    /// location `loc` and sizes `len`, `plain`, `stored` (as
    /// [`Store::sizes_of`] gives them); a full chunk is linked or handed
    /// off.
    ///
    /// The item must stay where it is, its segment sealed and unwritten,
    /// until the flush, and nothing but the restore (and the thread it
    /// hands chunks to) may use the store meanwhile.
    pub fn push(&mut self, store: &Store, seg: u32, gran: u32, loc: Loc, sizes: (usize, u64, u64)) {
        let (len, plain, stored) = sizes;
        debug_assert!(loc.stripe < 1 << STRIPE_BITS);
        self.pending.push(Deferred {
            seg,
            gran,
            bucket: loc.bucket,
            order: 0,
            len: len as u32,
            plain: plain as u32,
            stored: stored as u32,
            stripe: loc.stripe as u16,
            tag: loc.tag,
        });
        if self.pending.len() < self.chunk {
            return;
        }
        if let Some(h) = &self.handoff {
            let full = std::mem::replace(&mut self.pending, Vec::with_capacity(self.chunk));
            // A linking thread that is gone (it panicked) sends the chunk
            // back in the error: it is linked here instead.
            match h.chunks.send(full) {
                Ok(()) => return,
                Err(back) => self.pending = back.0,
            }
        }
        link_chunk(store, &mut self.pending, &self.counters);
    }

    /// Links whatever is put off: waits for the thread chunks were handed
    /// to, if any, then links the rest here (later chunks after earlier
    /// ones, so the versions of a key keep their order).
    pub fn flush(&mut self, store: &Store) {
        if let Some(h) = self.handoff.take() {
            drop(h.chunks);
            // Ok once the thread linked every chunk; Err if it is gone.
            let _ = h.done.recv();
        }
        link_chunk(store, &mut self.pending, &self.counters);
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.handoff.is_none()
    }
}

/// Sorts `chunk` by stripe and bucket and links it, leaving it empty.
fn link_chunk(store: &Store, chunk: &mut Vec<Deferred>, counters: &Counters) {
    let index = store.index();
    // The stripe just above the widest table's bits: the keys then span
    // as few bytes as they can, and the radix sort skips the bytes no key
    // uses (three passes, not four, for 10 M items).
    let shift = index.widest_table_bits();
    for d in chunk.iter_mut() {
        let b = index.bucket_hint(d.stripe as usize, d.bucket);
        d.order = ((d.stripe as u32) << shift) | b;
    }
    radsort::sort_by_key(chunk, |d| d.order);
    let mut rest = &chunk[..];
    while let Some(first) = rest.first() {
        let n = rest.iter().position(|d| d.stripe != first.stripe).unwrap_or(rest.len());
        let (run, after) = rest.split_at(n);
        link_run(store, first.stripe as usize, run, counters);
        rest = after;
    }
    chunk.clear();
}

/// Links `run`, entries of one stripe, under one hold of its lock.
fn link_run(store: &Store, stripe: usize, run: &[Deferred], counters: &Counters) {
    let mut st = store.index().lock(stripe);
    for d in run {
        let new = slot::pack(d.tag, 0, d.seg, d.gran);
        let found = st.find(d.bucket, |s| {
            slot::tag(s) == d.tag
                && store.item_at(s).is_some_and(|old| {
                    // SAFETY: `push`'s caller: the item was restored into a
                    // sealed segment that nothing writes while the load runs.
                    let it = unsafe { store.arena().item(d.seg, store.byte_off(new)) };
                    it.is_some_and(|it| it.key() == old.key())
                })
        });
        match found {
            Some((pos, old)) => {
                st.set(pos, new);
                store.unaccount(&mut st, old);
            }
            None => {
                let before = st.footprint();
                st.insert(d.bucket, new);
                if st.wants_growth() {
                    store.grow(stripe, &mut st, counters);
                }
                store.index().note_footprint(before, st.footprint());
            }
        }
        Store::account_in_stripe(&mut st, d.len as usize, u64::from(d.plain), u64::from(d.stored));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferred_link_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Deferred>(), 32);
    }
}
