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

use crate::clock::Clock;
use crate::item::{Fields, Header, Item};
use crate::segments::ttl_class;
use crate::store::Store;
use crate::types::StoreError;
use crate::worker::Worker;

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

impl Store {
    /// Refuses a change the journal could not keep.
    pub(crate) fn check_journal(&self) -> Result<(), StoreError> {
        match self.journal() {
            Some(j) if j.failed() => Err(StoreError::NotLogged),
            _ => Ok(()),
        }
    }

    /// Journals the item linked at slot `s` (under its bucket lock).
    pub(crate) fn journal_item(&self, s: u64) -> u64 {
        let (Some(j), Some(it)) = (self.journal(), self.item_at(s)) else { return 0 };
        let cas = self.cas_of(s, &it);
        j.item(cas, it.bytes())
    }
}

impl Worker {
    /// The highest journal position this worker's changes reached since
    /// the last call (0: none): a reply may go out once it is durable.
    pub fn take_journaled(&mut self) -> u64 {
        std::mem::take(&mut self.journaled)
    }

    /// Replays a journaled item: writes it with its CAS, replacing what
    /// the key holds. An expired item removes the key. For recovery, before
    /// the server serves.
    pub fn replay_item(&mut self, cas: u64, item: &[u8]) -> Result<(), ReplayError> {
        let Some(h) = parse(item) else { return Err(ReplayError::Malformed) };
        let it = Item::new(h, item);
        if it.key().is_empty() {
            return Err(ReplayError::Malformed);
        }
        let now = self.store.clock().now();
        if Clock::is_expired(it.expiry(), now) {
            self.replay_delete(it.key());
            return Ok(());
        }
        let fields = Fields { cas: Some(cas), ..it.fields() };
        if it.compressed() {
            // Values are journaled as stored; with compression the log is
            // refused at start (see the server), so this is a damaged log.
            return Err(ReplayError::Malformed);
        }
        let len = crate::item::encoded_len(it.key().len(), it.value().len(), &fields);
        let st = &*self.store;
        let (seg, off) = self.active.reserve(st, ttl_class(fields.expiry, now), len, now)?;
        // SAFETY: freshly reserved by this worker in its active segment.
        let dst = unsafe { st.arena().bytes_mut(seg, off, len) };
        let v = crate::item::write_head(dst, it.key(), it.value().len(), &fields);
        dst[v..].copy_from_slice(it.value());
        st.note_expiry(seg, fields.expiry);
        let loc = st.index().locate(it.key());
        let mut stripe = st.index().lock(loc.stripe);
        let found = st.find(&stripe, loc, it.key());
        st.link(&mut stripe, loc, found, crate::segments::Placed { seg, off, len }, 0, &self.active.counters);
        Ok(())
    }

    /// Replays a journaled delete.
    pub fn replay_delete(&mut self, key: &[u8]) {
        let st = &*self.store;
        let loc = st.index().locate(key);
        let mut stripe = st.index().lock(loc.stripe);
        if let Some((pos, s)) = st.find(&stripe, loc, key) {
            st.unlink(&mut stripe, loc.bucket, pos, s);
        }
    }

    /// Replays a journaled in-place expiry or state change.
    pub fn replay_in_place(&mut self, key: &[u8], expiry: Option<u32>, state: Option<u8>) {
        let st = &*self.store;
        let loc = st.index().locate(key);
        let stripe = st.index().lock(loc.stripe);
        let Some((_, s)) = st.find(&stripe, loc, key) else { return };
        let Some(header) = st.item_at(s).map(|it| it.header) else { return };
        if let Some(e) = expiry {
            st.set_expiry(s, header, e);
        }
        if let Some(b) = state {
            st.set_state(s, header, b);
        }
        drop(stripe);
    }

    /// Replays a journaled `flush_all` (or a delayed one taking effect,
    /// which cancels its schedule: a schedule left standing would flush
    /// what the log wrote after it once the server runs).
    pub fn replay_flush(&mut self) {
        self.store.flush_now();
        self.store.set_flush_at(0);
        // Writes that follow in the log go to segments opened after it.
        self.seal_active();
    }

    /// Replays a journaled delayed `flush_all`. One already due takes
    /// effect on the first request: had it taken effect before the crash,
    /// its `Flush` record would follow and cancel it.
    pub fn replay_flush_at(&mut self, at: u32) {
        self.store.set_flush_at(at);
    }
}

/// The header of a journaled item, if its bytes hold a whole one.
fn parse(b: &[u8]) -> Option<Header> {
    if b.len() < 2 {
        return None;
    }
    let n = Header::lengths_len(b[1]);
    if b.len() < n {
        return None;
    }
    let h = Header::parse_lengths(&b[..n]);
    (h.total_len() == b.len()).then_some(h)
}
