//! Reporting changes for the durability log: every change a client makes
//! to the cache is handed to a [`Journal`] as the store makes it, under the
//! item's bucket lock, so that for any one key the journal sees changes in
//! the order they happened. The journal returns a position; a worker keeps
//! the highest it was given ([`Worker::take_journaled`]), and the server
//! holds the request's reply until the journal says that position is on
//! disk. Replaying what was journaled ([`Worker::replay_item`] and friends)
//! over a restored snapshot brings the cache back to where it was.
//!
//! Moves (the cleaner, eviction's copy-forward), expiry, eviction and reads
//! are not changes a client made and are not journaled; the `FETCHED` state
//! bit is not either.
//!
//! This module is the interface; the store's side (reporting, refusing
//! once the journal failed, replaying) is `journaling.rs`.

use crate::types::StoreError;

/// Where changes are reported (the server's write-ahead log). Each call
/// returns the position the change reached, which only grows.
pub trait Journal: Send + Sync {
    /// An item written (set, add, replace, cas, append, prepend, incr,
    /// decr, a stale mark that rewrote it) or touched (a new expiry is
    /// journaled as the whole item: a recovery that finds the old item
    /// expired must still bring it back): its CAS and its bytes as laid
    /// out in a segment (`item.rs`).
    fn item(&self, cas: u64, item: &[u8]) -> u64;
    fn delete(&self, key: &[u8]) -> u64;
    /// A new state byte, written in place (the recache token handed out).
    fn state(&self, key: &[u8], state: u8) -> u64;
    /// `flush_all` took effect.
    fn flush(&self) -> u64;
    /// `flush_all` with a delay, due at this time.
    fn flush_at(&self, at: u32) -> u64;
    /// The journal cannot be written any more: changes are refused
    /// ([`StoreError::NotLogged`]) rather than made and lost.
    fn failed(&self) -> bool {
        false
    }
}

/// Why a journaled item could not be replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("malformed journal record")]
    Malformed,
    #[error(transparent)]
    Store(#[from] StoreError),
}
