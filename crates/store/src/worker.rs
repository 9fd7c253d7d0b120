//! A worker thread's handle on the store: the shared [`Store`], the
//! worker's active segments and counters, and read-ahead (prefetching what a
//! batch of reads will touch). The operations themselves are in `read.rs`
//! and `write.rs`.

use std::sync::Arc;

use crate::image::Queue;
use crate::index::{slot, Loc};
use crate::segments::Active;
use crate::store::Store;

/// Where [`Worker::prefetch_bucket`] found a key's bucket, for
/// [`Worker::prefetch_items`].
/// (The default, a placeholder for arrays of hints, is harmless to prefetch.)
#[derive(Debug, Clone, Copy, Default)]
pub struct Hint(Loc);

/// One worker thread's handle: the shared store and the worker's own state.
pub struct Worker {
    pub(crate) store: Arc<Store>,
    pub(crate) active: Active,
}

impl Drop for Worker {
    fn drop(&mut self) {
        for seg in self.active.segs.iter_mut().filter_map(Option::take) {
            self.store.seal(seg, Queue::Small);
        }
        let [small, main] = &mut self.active.targets;
        for (t, q) in [(small.take(), Queue::Small), (main.take(), Queue::Main)] {
            if let Some(t) = t {
                self.store.seal(t, q);
            }
        }
        self.store.workers.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Worker {
    /// Starts loading what reading `keys` will touch (each key's index
    /// bucket, then its item) into the CPU cache, a batch at a time, before
    /// they are read one by one. A read waits on memory twice (bucket, then
    /// item, each depending on the last) and reads one after another under
    /// a lock cannot overlap those waits; prefetched, a whole multi-get or
    /// pipeline of gets waits about twice in all. Changes nothing: a key that
    /// is missing or moves meanwhile only costs a wasted prefetch.
    pub fn prefetch(&self, keys: &[&[u8]]) {
        const BATCH: usize = 16;
        for chunk in keys.chunks(BATCH) {
            let mut hints = [Hint::default(); BATCH];
            for (hint, key) in hints.iter_mut().zip(chunk) {
                *hint = self.prefetch_bucket(key);
            }
            self.prefetch_items(&hints[..chunk.len()]);
        }
    }

    /// The first half of [`Worker::prefetch`] for one key: starts loading
    /// its index bucket and returns where to look for its item. For callers
    /// that gather keys from several places (the io_uring worker reads
    /// ahead across every connection a turn serves).
    pub fn prefetch_bucket(&self, key: &[u8]) -> Hint {
        let loc = self.store.index.locate(key);
        self.store.index.prefetch(loc);
        Hint(loc)
    }

    /// The second half: by now the first buckets have arrived; starts
    /// loading the items they point at.
    pub fn prefetch_items(&self, hints: &[Hint]) {
        let st = &*self.store;
        // The lock is needed to read a slot, as a table may be replaced
        // while it is read.
        for Hint(loc) in hints {
            let found = st.index.lock(loc.stripe).find(loc.bucket, |s| slot::tag(s) == loc.tag);
            if let Some((_, s)) = found {
                st.arena.prefetch(slot::seg(s), st.byte_off(s));
            }
        }
    }
}
