//! Large values received straight into the segment they are stored in
//! (issue 45: a 1 MB set cost 1.36× memcached's CPU, most of the gap one
//! copy of the value from the connection's read buffer into its segment,
//! where memcached reads a large value into its item).
//!
//! A connection that has the command line of a large `set` and waits for
//! its value asks for a [`Landing`] ([`Worker::land`]): a free segment,
//! taken as a write that needs a fresh one takes it, with the item's
//! header and key written at its start and the value's room lent to the
//! socket's receives. The segment is *private* while it lands:
//!
//! - nobody else reaches it: it is on no eviction queue and in no worker's
//!   open segments, so it is not evicted, cleaned, sealed or moved to
//!   flash while the kernel writes into it, however long the client takes;
//! - a snapshot's cut does not take it (`Store::begin_cut` skips it, and a
//!   cut that marked it before it was marked landing is undone): it holds
//!   nothing linked, so it has nothing to save, and the snapshot never
//!   waits for a slow client to finish a value.
//!
//! When the request runs, the value is already where the item goes: the
//! store's write (`write.rs`, `store_form`) uses the landing in place of a
//! reservation when the item's layout is the one landed (same length):
//! it stamps the segment with a new epoch (its CAS and flush standing are
//! those of a segment opened now), rewrites the header with the fields
//! decided then, and under the bucket lock, once the write is decided,
//! *adopts* it: no longer landing (under the cut's lock, as a segment is
//! opened), the item linked, and the segment made the worker's open
//! segment of its TTL class, as a fresh segment an item was written into
//! would be. Any other outcome (not stored, a layout that changed, written
//! in place over the old version) copies from the landing, or nothing, as
//! from a read buffer, and the segment goes back to the free list when the
//! connection lets the landing go ([`Landing`]'s `Drop`).
//!
//! This file holds the landing and its segment's states; the worker's side
//! (taking one, offering it to a write) is `land.rs`, the write's is
//! `write.rs`.

use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use crate::store::Store;

/// Room in a private segment for one large value on its way in (see the
/// module doc). Dropped without being adopted, it frees the segment.
pub struct Landing {
    pub(crate) store: Arc<Store>,
    pub(crate) seg: u32,
    /// Where the value starts in the segment, and its length.
    pub(crate) value_at: usize,
    pub(crate) vlen: usize,
    /// The item's length as landed (header, key and value).
    pub(crate) len: usize,
    /// The store linked the item here: the segment is a worker's now.
    pub(crate) adopted: bool,
}

impl std::fmt::Debug for Landing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Landing").field("seg", &self.seg).field("vlen", &self.vlen).finish()
    }
}

impl Landing {
    /// The value's length.
    pub fn value_len(&self) -> usize {
        self.vlen
    }

    /// The value's room, for receives (the event loop lends it to the
    /// kernel, which writes it while nothing else touches it).
    pub fn value_ptr(&mut self) -> *mut u8 {
        // SAFETY: the segment is private to this landing (module doc):
        // nobody else reads or writes it, and the range was reserved.
        unsafe { self.store.arena().bytes_mut(self.seg, self.value_at, self.vlen) }.as_mut_ptr()
    }

    /// Copies `src` into the value from byte `at` on, past the caches (the
    /// segment's memory is cold, and the bytes are not read again soon).
    pub fn fill(&mut self, at: usize, src: &[u8]) {
        crate::arena::copy_cold(&mut self.value_mut()[at..at + src.len()], src);
    }

    /// The value's room.
    pub fn value_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `value_ptr`; `&mut self` keeps it the only view.
        unsafe { self.store.arena().bytes_mut(self.seg, self.value_at, self.vlen) }
    }

    /// The value, borrowed apart from the landing, for the request that
    /// offers the landing to the worker that runs it
    /// ([`Worker::offer_landing`]) while its value is borrowed.
    ///
    /// # Safety
    ///
    /// Used only by that request, after the receives are done: until the
    /// request returns, the bytes are not written (the segment is private,
    /// or adopted as the worker's open segment, which only this thread
    /// seals), and the slice is not used once the landing is dropped.
    pub unsafe fn value_detached<'a>(&self) -> &'a [u8] {
        let v = self.value();
        // SAFETY: the caller's; the arena's memory is never unmapped while
        // the store lives, and the landing holds the store.
        unsafe { std::slice::from_raw_parts(v.as_ptr(), v.len()) }
    }

    /// The value as received so far (all of it once the receives are done).
    pub fn value(&self) -> &[u8] {
        // SAFETY: as in `value_ptr`; nothing writes it while this borrow
        // lives (receives write through `value_ptr`/`value_mut`, which
        // take `&mut self`).
        unsafe { self.store.arena().bytes(self.seg, self.value_at, self.vlen) }
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if !self.adopted {
            self.store.release_landing(self.seg);
        }
    }
}

impl Store {
    /// `seg`, just taken, lands a value: out of any cut (under the cut's
    /// lock, which a cut is made under).
    pub(crate) fn mark_landing(&self, seg: u32) {
        let _cut = self.cut().lock.lock();
        let m = self.seg(seg);
        m.landing.store(true, Relaxed);
        m.snap.store(0, Relaxed);
    }

    /// A new epoch for landing `seg`, as if it were opened now.
    pub(crate) fn restamp_landing(&self, seg: u32) {
        let _cut = self.cut().lock.lock();
        self.seg(seg).epoch.store(self.next_epoch(), Relaxed);
    }

    /// `seg` stops landing: a cut made from now on takes it.
    pub(crate) fn adopt_landing(&self, seg: u32) {
        let _cut = self.cut().lock.lock();
        self.seg(seg).landing.store(false, Relaxed);
    }

    /// A landing let go: its segment back on the free list.
    pub(crate) fn release_landing(&self, seg: u32) {
        {
            let _cut = self.cut().lock.lock();
            self.seg(seg).landing.store(false, Relaxed);
        }
        self.unuse(seg);
    }
}

/// The write decided to link its item into the segment of `landing` (the
/// worker's, under the item's bucket lock): the segment stops landing, and
/// is the worker's once linked (`Active::open_landed`).
pub(crate) fn adopt(st: &Store, landing: &mut Option<Landing>) {
    if let Some(l) = landing.as_mut() {
        st.adopt_landing(l.seg);
        l.adopted = true;
    }
}
