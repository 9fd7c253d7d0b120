//! A worker's side of landings (`landing.rs`): taking one for a large
//! value, offering it to the write that stores the value, and the write's
//! look at whether the item goes where it landed.

use std::sync::atomic::Ordering::*;

use crate::active::COPY_CREDIT_DIV;
use crate::item::{encoded_len, write_head, Fields};
use crate::landing::Landing;
use crate::worker::Worker;

impl Worker {
    /// Room for the `vlen`-byte value of a plain `set`, `add`, `replace`
    /// or `cas` of `key` with `flags` and server-relative `expiry`, in a
    /// private segment (module doc); `None` where the write is better made
    /// as usual: compression on (the value is stored compressed), an item
    /// over `-I` or a segment (the write refuses it), the durability log
    /// failed (the write reports it), or no segment to be had without
    /// waiting for one.
    pub fn land(&mut self, key: &[u8], flags: u32, expiry: u32, vlen: usize) -> Option<Landing> {
        let st = &*self.store;
        if st.codec().is_some() || st.check_journal().is_err() {
            return None;
        }
        let f = Fields { flags, expiry, cas: None, state: 0, compressed: false };
        let len = encoded_len(key.len(), vlen, &f);
        let aligned = st.aligned(len);
        if len > st.config().item_size_max || aligned > st.arena().segment_size() {
            return None;
        }
        // Never a wait for memory on the event loop: the reclaimer is asked
        // for a segment, and the connection asks again as more of the value
        // comes (or the write, made as usual, waits off the loop:
        // `memwait.rs`).
        if !self.segment_at_hand() {
            self.store.want_segment(&mut self.active);
            return None;
        }
        let st = &*self.store;
        let seg = st.alloc_segment(&mut self.active).ok()?;
        st.mark_landing(seg);
        st.seg(seg).write_off.store(aligned as u32, Release);
        st.note_written(seg, 0, st.clock().now());
        // As a reservation of its length adds (`Active::reserve`).
        self.active.copy_credit += aligned / COPY_CREDIT_DIV;
        // SAFETY: just taken and private (module doc).
        let dst = unsafe { st.arena().bytes_mut(seg, 0, len) };
        let value_at = write_head(dst, key, vlen, &f);
        Some(Landing { store: self.store.clone(), seg, value_at, vlen, len, adopted: false })
    }

    /// Offers `landing` to the next storage request this worker runs,
    /// whose value is [`Landing::value_detached`]; [`Worker::take_landing`]
    /// after it.
    pub fn offer_landing(&mut self, landing: Option<Landing>) {
        self.landing = landing;
    }

    /// The landing on offer, unless the write adopted it (then `None`: the
    /// segment holds the item and is the worker's).
    pub fn take_landing(&mut self) -> Option<Landing> {
        self.landing.take().filter(|l| !l.adopted)
    }

    /// The segment of the landing on offer if `value` is its value and the
    /// item, laid out with `f`, is `len` bytes as landed: stamped anew,
    /// its header rewritten for `f` (`write.rs`).
    pub(crate) fn landed_for(&mut self, key: &[u8], value: &[u8], f: &Fields, len: usize) -> Option<u32> {
        let l = self.landing.as_ref().filter(|l| !l.adopted)?;
        if l.value().as_ptr() != value.as_ptr() || l.vlen != value.len() || l.len != len || f.compressed {
            return None;
        }
        let st = &*self.store;
        st.restamp_landing(l.seg);
        // SAFETY: private (module doc); the header and key end where the
        // value begins, so `value` is not overlapped.
        let dst = unsafe { st.arena().bytes_mut(l.seg, 0, l.value_at) };
        let at = write_head(dst, key, l.vlen, f);
        debug_assert_eq!(at, l.value_at, "the same length, the same layout");
        Some(l.seg)
    }
}
