//! memcached's LRU crawler, for `lru_crawler crawl`: walks the index a
//! stripe at a time and unlinks the expired and flushed items it finds, so
//! their memory counts as dead (and the cleaner wins it back) before the
//! segments holding them come round. strata has no per-class LRUs to walk;
//! a class here is a size band (`bands.rs`).

use crate::index::slot;
use crate::item::state;
use crate::store::{bump, Miss};
use crate::worker::Worker;

/// What one stripe's crawl did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Crawled {
    /// Items in memory looked at (of the classes asked for).
    pub checked: u64,
    /// Of those, the expired or flushed ones unlinked.
    pub reclaimed: u64,
}

impl Worker {
    /// Crawls `stripe`: unlinks each expired or flushed item in memory
    /// whose size band's class id (band + 1) has its bit set in `classes`,
    /// looking at no more than `limit` items (0: all). Holds the stripe's
    /// lock for the stripe only.
    pub fn crawl(&mut self, stripe: usize, classes: u64, limit: u64) -> Crawled {
        let st = &*self.store;
        st.maybe_flush();
        let now = st.clock().now();
        let c = &self.active.counters;
        let mut done = Crawled::default();
        let mut guard = st.index().lock(stripe);
        let mut dead = Vec::new();
        for b in 0..1u32 << guard.table_bits() {
            if limit != 0 && done.checked >= limit {
                break;
            }
            guard.for_each_in_chain(b, |s| {
                if slot::is_flash(s) || (limit != 0 && done.checked >= limit) {
                    return;
                }
                let Some(it) = st.item_at(s) else { return };
                let len = st.class_len_of(&it, crate::store::sizes(&it).1);
                let band = st.bands().band_of(len);
                if classes & (1u64 << ((band + 1) & 63)) == 0 {
                    return;
                }
                done.checked += 1;
                st.bands().crawled(band, 1, 0);
                if let Some(why) = st.dead(s, &it, now) {
                    dead.push((s, why, len, band, it.state()));
                }
            });
            // Unlinked after the walk: each removal moves the chain's last
            // item into the hole.
            for (s, why, len, band, bits) in dead.drain(..) {
                let Some((pos, _)) = guard.find(b, |x| x == s) else { continue };
                st.unlink(&mut guard, b, pos, s);
                done.reclaimed += 1;
                st.bands().crawled(band, 0, 1);
                if why == Miss::Flushed {
                    bump(&c.flushed_unlinked);
                } else {
                    bump(&c.expired_unlinked);
                    let unfetched = !slot::was_read(s) && bits & state::FETCHED == 0;
                    if unfetched {
                        bump(&c.expired_unfetched);
                    }
                    st.bands().expired(slot::seg(s), len, unfetched);
                }
            }
        }
        done
    }
}
