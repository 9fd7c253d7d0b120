//! The store's side of the journal (`journal.rs`): each change reported
//! as the store makes it, changes refused once the journal failed, and
//! journaled records replayed into a store being recovered.

use crate::clock::Clock;
use crate::item::{Fields, Header, Item};
use crate::journal::ReplayError;
use crate::segments::ttl_class;
use crate::store::Store;
use crate::types::StoreError;
use crate::worker::Worker;

impl Store {
    /// The journal cannot be written any more: every change is to be
    /// refused. The server asks this once per request that would change
    /// the cache, before running it; the store's own checks
    /// ([`Store::check_journal`]) stay behind it for a log that fails while
    /// the request runs.
    pub fn journal_failed(&self) -> bool {
        self.journal().is_some_and(|j| j.failed())
    }

    /// Refuses a change the journal could not keep.
    pub(crate) fn check_journal(&self) -> Result<(), StoreError> {
        match self.journal_failed() {
            true => Err(StoreError::NotLogged),
            false => Ok(()),
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

    /// [`Store::flush_all`] made by this worker's request: its journal
    /// position counts among the worker's changes, so that under
    /// `--durability always` the `OK` waits for the flush to be on disk
    /// like any other change's reply.
    pub fn flush_all(&mut self, at: Option<u32>) -> Result<(), StoreError> {
        let pos = self.store.flush_all(at)?;
        self.journaled = self.journaled.max(pos);
        Ok(())
    }

    /// Marks this worker as replaying a log at recovery: when memory is
    /// full, its writes clean the segment with the most dead bytes, however
    /// live it is, while there is a segment's worth of them, as a snapshot
    /// load's [`crate::Restorer`] does. A log holds every version written
    /// since its snapshot; replayed into a limit the live items fit, the
    /// dead ones must never push a live one out.
    pub fn replaying(&mut self) {
        self.active.restoring = true;
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
        let class_len = st.bands().class_len(it.key().len(), it.value().len(), fields.flags != 0);
        let (seg, off) = self.active.reserve(st, ttl_class(fields.expiry, now), (len, class_len), now)?;
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
        self.store.epochs().set_flush_at(0);
        // Writes that follow in the log go to segments opened after it.
        self.seal_active();
    }

    /// Replays a journaled delayed `flush_all`. One already due takes
    /// effect on the first request: had it taken effect before the crash,
    /// its `Flush` record would follow and cancel it.
    pub fn replay_flush_at(&mut self, at: u32) {
        self.store.epochs().set_flush_at(at);
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;

    use crate::journal::Journal;
    use crate::testing::Now;
    use crate::tests::{get, set, store_of};
    use crate::{Config, Delete, DeleteOutcome, ReadOpts, SetOp, StoreError};

    /// A journal that counts its records and can be made to fail.
    #[derive(Default)]
    struct Fake {
        records: AtomicU64,
        failed: AtomicBool,
    }

    impl Fake {
        fn record(&self) -> u64 {
            if self.failed() {
                return 0;
            }
            self.records.fetch_add(1, Relaxed) + 1
        }
    }

    impl Journal for Fake {
        fn item(&self, _: u64, _: &[u8]) -> u64 {
            self.record()
        }
        fn delete(&self, _: &[u8]) -> u64 {
            self.record()
        }
        fn state(&self, _: &[u8], _: u8) -> u64 {
            self.record()
        }
        fn flush(&self) -> u64 {
            self.record()
        }
        fn flush_at(&self, _: u32) -> u64 {
            self.record()
        }
        fn failed(&self) -> bool {
            self.failed.load(Relaxed)
        }
    }

    fn journaled() -> (Arc<crate::Store>, crate::Worker, Arc<Fake>) {
        let (s, w) = store_of(Config { memory_limit: 4 << 20, ..Config::default() });
        let j = Arc::new(Fake::default());
        s.set_journal(j.clone());
        (s, w, j)
    }

    #[test]
    fn a_flush_all_is_refused_once_the_journal_failed() {
        let (s, mut w, j) = journaled();
        set(&mut w, SetOp::Set, b"a", b"1");
        j.failed.store(true, Relaxed);
        assert!(s.journal_failed());
        assert_eq!(s.flush_all(None), Err(StoreError::NotLogged));
        assert_eq!(w.flush_all(Some(s.clock().now() + 10)), Err(StoreError::NotLogged));
        s.clock().advance(20);
        assert_eq!(get(&mut w, b"a").map(|g| g.0), Some(b"1".to_vec()), "neither flush took effect");
    }

    #[test]
    fn a_flush_all_counts_among_the_workers_changes() {
        // Under `always` its reply waits for this position, as a set's does.
        let (s, mut w, j) = journaled();
        assert_eq!(w.take_journaled(), 0);
        w.flush_all(None).unwrap();
        assert_eq!(w.take_journaled(), j.records.load(Relaxed));
        w.flush_all(Some(s.clock().now() + 10)).unwrap();
        assert_eq!(w.take_journaled(), j.records.load(Relaxed));
        assert_eq!(j.records.load(Relaxed), 2);
    }

    #[test]
    fn a_delayed_flush_due_after_the_journal_failed_still_takes_effect() {
        // Acknowledged and logged as "flush at" while the log worked; a
        // recovery makes it take effect too, once its time has passed.
        let (s, mut w, j) = journaled();
        set(&mut w, SetOp::Set, b"a", b"1");
        w.flush_all(Some(s.clock().now() + 10)).unwrap();
        j.failed.store(true, Relaxed);
        assert!(get(&mut w, b"a").is_some());
        s.clock().advance(10);
        assert!(get(&mut w, b"a").is_none());
    }

    #[test]
    fn a_read_that_would_win_the_recache_token_is_refused_once_the_journal_failed() {
        let (s, mut w, j) = journaled();
        set(&mut w, SetOp::Set, b"stale", b"v");
        let d = Delete { invalidate: true, ..Delete::default() };
        assert_eq!(w.delete_now(b"stale", &d), Ok(DeleteOutcome::Deleted));
        let exp = s.clock().expiry(100);
        assert_eq!(w.set(SetOp::Set, b"near", 0, exp, b"v"), Ok(crate::StoreOutcome::Stored));
        j.failed.store(true, Relaxed);
        let tokens = ReadOpts { tokens: true, ..ReadOpts::GET };
        let recache = ReadOpts { recache_before: Some(s.clock().expiry(200)), ..tokens };
        let before = j.records.load(Relaxed);
        assert_eq!(w.read(b"stale", &tokens, |_| ()).err(), Some(StoreError::NotLogged));
        assert_eq!(w.read(b"near", &recache, |_| ()).err(), Some(StoreError::NotLogged));
        // Reads that hand nothing out are served.
        assert_eq!(w.read(b"stale", &ReadOpts::GET, |it| it.stale), Ok(Some(true)));
        assert_eq!(w.read(b"near", &tokens, |it| it.won), Ok(Some(false)));
        assert_eq!(j.records.load(Relaxed), before);
        // And the token is still there for a reader once a log works again
        // (after a restart): nothing was handed out.
        j.failed.store(false, Relaxed);
        assert_eq!(w.read(b"stale", &tokens, |it| it.won), Ok(Some(true)));
    }
}
