//! The cache engine: segments, hash index, expiry, eviction, CAS, counters.
//!
//! Owns every byte of cached data and the index that finds it. Thread-safe,
//! no networking: the server gives each worker thread a [`Worker`] handle and
//! calls it directly — there is no storage thread and no global lock on the
//! request path (DESIGN §1.3).
//!
//! The public API is what a protocol-neutral request needs: [`Store`] (built
//! from a [`Config`], shared), [`Worker`] (one per thread: reads, writes,
//! deletes, counters, read-ahead), the request and outcome types, and the
//! [`Clock`]. Everything else is internal:
//!
//! - `item`: the compact item layout inside a segment.
//! - `arena`: the one allocation all segments live in, and the unsafe
//!   accessors every other module's byte access goes through (each other
//!   `unsafe` block names the arena rule it keeps).
//! - `index`: the bucketed hash index of packed 8-byte slots, striped locks.
//! - `timelog`: per-segment write times.
//! - `bands`: items counted by size, for memcached's per-class stats;
//!   `crawl`: `lru_crawler crawl`, expired items unlinked by a walk.
//! - `store`: the shared state and the helpers every operation uses.
//! - `segments`: segments, the memory budget, TTL classes, reservations.
//! - `evict`: the cleaner and eviction; `density`, `sketch` and `climb`:
//!   which items eviction's copy-forward keeps (reads per byte; reads of
//!   every key lately, resident or not; how selective, tuned to the hit
//!   ratio); `reclaim`: the background reclaimer
//!   that runs them ahead of the writers.
//! - `read`, `write`: the operations; `worker`: the per-thread handle.
//! - `journal`: client changes reported to the durability log, and replayed.
//! - `tier`: the flash tier, store side: evicted items to flash, and
//!   back into memory when a request needs them; `aio`: the I/O threads
//!   that read from flash while workers go on.
//! - `image`: sealed segments copied out consistently for snapshots;
//!   `cut`: the running snapshot's point in time (what is frozen, deaths
//!   after the cut, segments handed off); `restore`: images brought back
//!   at start, their items linked in bucket order by `bulk_link`.
//! - `types`: requests, outcomes, settings, errors, totals.

mod active;
mod aio;
mod arena;
mod bands;
mod bulk_link;
mod capture;
mod climb;
pub mod clock;
mod copies;
mod counters;
mod crawl;
mod cut;
mod cutting;
mod density;
mod evict;
mod ghost;
mod image;
mod index;
mod item;
mod journal;
mod journaling;
mod memwait;
mod overwrite;
mod read;
mod reclaim;
mod reclaimer;
mod restore;
mod rezip;
mod seal;
mod segments;
mod sizes;
mod sketch;
mod store;
mod tier;
mod timelog;
mod types;
mod worker;
mod write;

pub use bands::{BandStats, MAX_BANDS};
pub use bulk_link::LinkChunks;
pub use clock::Clock;
pub use crawl::Crawled;
pub use cut::Pending;
pub use image::{Queue, Sealed, SegmentImage, StoreImage};
pub use index::hash_power_for;
pub use journal::{Journal, ReplayError};
pub use read::{Fetch, Found};
pub use reclaimer::Reclaimer;
pub use restore::{BulkRestore, RestoreError, Restored, Restorer};
pub use store::{Evicted, EvictionWatcher, Store};
pub use tier::{FlashImage, FlashRestored};
pub use types::SizeClasses;
pub use types::{
    Arith, ArithOutcome, Config, ConfigError, Counted, Delete, DeleteOutcome, FlashStats, FlashTier, Flow, Inspect,
    ItemView, ReadOpts, Reading, SetOp, StoreError, StoreOutcome, StoreStats, Stored, Ticket, Write, NO_ITEM_AGE,
};
pub use worker::{Hint, Worker};

/// How many times an operation that lost a race with a concurrent writer
/// (the item changed between planning and committing, or a stale-store
/// retry) starts again before it gives up with [`StoreError::Contended`].
/// Each retry means another writer committed, so 16 losses in a row only
/// happen under a storm of writes to one key.
pub const MAX_RETRIES: usize = 16;

#[cfg(all(test, not(miri)))]
mod aio_tests;
#[cfg(test)]
mod bulk_restore_tests;
#[cfg(test)]
mod churn_tests;
#[cfg(all(test, not(miri)))]
mod compress_tests;
#[cfg(test)]
mod cut_tests;
#[cfg(test)]
mod image_tests;
#[cfg(test)]
mod memory_tests;
#[cfg(test)]
mod memwait_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod open_tests;
#[cfg(test)]
mod overwrite_tests;
#[cfg(all(test, not(miri)))]
mod peek_tests;
#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod pressure_tests;
#[cfg(all(test, not(miri)))]
mod rezip_tests;
#[cfg(test)]
mod tests;
#[cfg(all(test, not(miri)))]
mod tier_race_tests;
#[cfg(all(test, not(miri)))]
mod tier_tests;

/// What the unit tests share: sizes for running under Miri, which is about
/// a thousand times slower (so loops there are shortened, not skipped) and
/// isolates the test from the file system.
#[cfg(test)]
pub(crate) mod testing {
    /// `n`, or `miri` under Miri.
    pub fn scaled(n: usize, miri: usize) -> usize {
        if cfg!(miri) {
            miri
        } else {
            n
        }
    }

    /// Marsaglia's xorshift64 (13, 7, 17): the tests' one generator of
    /// arbitrary draws, the same for a seed (not 0).
    pub fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// A proptest configuration of `cases` cases (`miri` under Miri, where
    /// proptest may not write its regression files either, and draws with
    /// XorShift: seeding ChaCha for each case was most of a property
    /// test's time there, sampled with `-Zmiri-report-progress`).
    pub fn proptest_config(cases: u32, miri: u32) -> proptest::test_runner::Config {
        use proptest::test_runner::RngAlgorithm;
        let default = proptest::test_runner::Config::default();
        let failure_persistence = if cfg!(miri) { None } else { default.failure_persistence.clone() };
        let rng_algorithm = if cfg!(miri) { RngAlgorithm::XorShift } else { default.rng_algorithm };
        proptest::test_runner::Config {
            cases: scaled(cases as usize, miri as usize) as u32,
            failure_persistence,
            rng_algorithm,
            ..default
        }
    }

    use crate::{
        Arith, Counted, Delete, DeleteOutcome, Found, ItemView, ReadOpts, Reading, StoreError, Stored, Worker, Write,
    };

    /// The operations that may wait for flash, run with
    /// [`Reading::Now`] (never waiting), for tests that are not about
    /// waiting.
    pub trait Now {
        fn set_now(&mut self, w: &Write<'_>) -> Result<Stored, StoreError>;
        fn delete_now(&mut self, key: &[u8], d: &Delete) -> Result<DeleteOutcome, StoreError>;
        fn arith_now(&mut self, key: &[u8], a: &Arith) -> Result<Counted, StoreError>;
        fn find_now<R>(
            &mut self,
            key: &[u8],
            opts: &ReadOpts,
            f: impl FnOnce(ItemView<'_>) -> R,
        ) -> Result<Found<R>, StoreError>;
    }

    impl Now for Worker {
        fn set_now(&mut self, w: &Write<'_>) -> Result<Stored, StoreError> {
            crate::types::now(self.set_with(w, Reading::Now))
        }
        fn delete_now(&mut self, key: &[u8], d: &Delete) -> Result<DeleteOutcome, StoreError> {
            crate::types::now(self.delete_with(key, d, Reading::Now))
        }
        fn arith_now(&mut self, key: &[u8], a: &Arith) -> Result<Counted, StoreError> {
            crate::types::now(self.arith_with(key, a, Reading::Now))
        }
        fn find_now<R>(
            &mut self,
            key: &[u8],
            opts: &ReadOpts,
            f: impl FnOnce(ItemView<'_>) -> R,
        ) -> Result<Found<R>, StoreError> {
            crate::types::now(self.find(key, opts, Reading::Now, f))
        }
    }
}
