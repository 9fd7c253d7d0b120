//! The cache engine: segments, hash index, expiry, eviction, CAS, counters.
//!
//! Owns every byte of cached data and the index that finds it. Thread-safe,
//! no networking: the server gives each worker thread a [`Worker`] handle and
//! calls it directly — there is no storage thread and no global lock on the
//! request path (DESIGN §1.3).
//!
//! - [`item`]: the compact item layout inside a segment.
//! - [`arena`]: the one allocation all segments live in.
//! - [`index`]: the bucketed hash index of packed 8-byte slots, striped locks.
//! - [`clock`]: server time and memcached's expiry rules, injectable for tests.
//! - [`store`]: segments' life cycle, eviction, and the operations.

pub mod arena;
pub mod clock;
pub mod index;
pub mod item;
pub mod store;
pub mod timelog;

pub use clock::Clock;
pub use store::{
    Arith, ArithOutcome, Config, Counted, Delete, DeleteOutcome, Hint, Inspect, ItemView, ReadOpts, SetOp, Store,
    StoreError, StoreOutcome, StoreStats, Stored, Worker, Write,
};
