//! What a write that replaces a key, or fails without changing it, needs
//! of the key when it is only on flash: whether its record is there and
//! alive, and its CAS, expiry and state. `add`, `replace`, `cas` and a plain
//! `delete` read that from the record and leave the item where it is;
//! the write then unlinks its slot under the bucket lock, as a plain `set`
//! drops whatever the key's flash slots hold.
//!
//! **Why.** Settling the key (`read.rs`) brings the old item back into
//! memory first, and the write then needs room for the new one as well: at
//! `-m 2` with values near `-I` over a flash tier, four connections of
//! `add` and `replace` got `SERVER_ERROR out of memory` for 2% of their
//! writes, and every replace of a 1 MB item on flash read and copied 1 MB
//! that it then threw away. memcached answers these from the item header it
//! keeps in memory; strata keeps no key in memory for a flash item, so it
//! reads the record, but no more.
//!
//! **Sound.** The peek is made without the bucket lock; it holds for the
//! write only if, under the lock, the key's tags lead to no flash slot it
//! did not look at, and to the live record's slot if it found one
//! ([`Store::peek_holds`]). Else the write peeks again.

use super::peeked::{Peek, Peeked};
use super::read::Back;
use super::*;

impl Store {
    /// Whether `peek` still describes `loc`'s flash slots; the caller holds
    /// `loc`'s lock.
    pub(crate) fn peek_holds(&self, st: &Stripe, loc: Loc, peek: &Peek) -> bool {
        let (mut unseen, mut live) = (false, peek.live.is_none());
        st.for_each_in_chain(loc.bucket, |s| {
            if is_candidate(s, loc, st.table_bits()) {
                let at = flash::location(s);
                unseen |= !peek.seen.contains(&at);
                live |= peek.live.is_some_and(|p| flash::location(p.slot) == at);
            }
        });
        !unseen && live
    }

    /// Unlinks the peeked record's slot: the write that replaced it, or
    /// deleted it, holds `loc`'s lock. (Not counted as a set's drop without
    /// a read, `strata_extstore_dropped_by_write`: this record was read.)
    pub(crate) fn drop_peeked(&self, st: &mut Stripe, loc: Loc, p: &Peeked) {
        if let Some((pos, s)) = same_slot(st, loc.bucket, p.slot) {
            self.unlink(st, loc.bucket, pos, s);
        }
    }

    /// Unlinks flash slot `s` of `loc`'s chain if it is still there (its
    /// record was dead or damaged).
    pub(super) fn unlink_flash_slot(&self, loc: Loc, s: u64, c: &Counters) {
        let mut st = self.index().lock(loc.stripe);
        if let Some((pos, x)) = same_slot(&st, loc.bucket, s) {
            self.unlink(&mut st, loc.bucket, pos, x);
            bump(&c.flash_misses);
        }
    }
}

impl Worker {
    /// Runs `op` (an add, replace, cas or delete) until it no longer stops
    /// at a flash slot, peeking at `key`'s records in between
    /// ([`Worker::peek_flash`]) instead of bringing the item back, or until
    /// a read must be waited for.
    pub(crate) fn with_flash_peek<T>(
        &mut self,
        key: &[u8],
        reading: Reading,
        op: impl FnMut(&mut Worker) -> Result<Flow<T>, Stop>,
    ) -> Result<Flow<T>, StoreError> {
        let r = self.retry_on_flash(key, reading, op, Worker::peek_flash);
        self.flash_peek = None;
        r
    }

    /// Reads `key`'s flash records (each slot with its tags) into
    /// `self.flash_peek`, unlinking those dead or damaged; stops at the
    /// first that must be waited for. Two live records of the key (never
    /// written so) are settled instead, as any other operation's.
    fn peek_flash(&mut self, key: &[u8], reading: Reading) -> Result<Flow<()>, StoreError> {
        let store = self.store.clone();
        let Some(log) = store.flash_log() else { return Ok(Flow::Ready(())) };
        let loc = store.index().locate(key);
        let mut candidates = std::mem::take(&mut self.flash_candidates);
        store.flash_candidates(loc, &mut candidates);
        let mut buf = std::mem::take(&mut self.flash_buf);
        let mut peek = Peek::default();
        let mut r = Ok(Flow::Ready(()));
        let c = self.active.counters.clone();
        for &(s, gen) in &candidates {
            let addr = log.from_slot(flash::addr(s));
            let back = self.read_back(log, loc, (s, gen), &mut buf, reading);
            if let (Some(reads), false) = (self.reads.as_mut(), matches!(back, Back::Pending(_))) {
                reads.forget(addr);
            }
            let epoch = match back {
                Back::Pending(t) => {
                    r = Ok(Flow::Wait(t));
                    break;
                }
                // Unlinked or written again since: the write looks again.
                Back::Moved => continue,
                Back::Bad => {
                    store.unlink_flash_slot(loc, s, &c);
                    continue;
                }
                Back::Record { epoch, .. } => epoch,
            };
            let Some(it) = parse_item(&buf) else { continue };
            if it.key() != key {
                peek.seen.push(flash::location(s));
                continue;
            }
            if epoch <= store.epochs().flushed() || Clock::is_expired(it.expiry(), store.clock().now()) {
                store.unlink_flash_slot(loc, s, &c);
                continue;
            }
            if peek.live.is_some() {
                r = self.settle(key, reading);
                peek = Peek::default();
                break;
            }
            let cas = if store.config().cas { it.explicit_cas().unwrap_or(0) } else { 0 };
            peek.live = Some(Peeked { slot: s, cas, expiry: it.expiry(), state: it.state() });
            peek.seen.push(flash::location(s));
        }
        self.flash_buf = buf;
        self.flash_candidates = candidates;
        if matches!(r, Ok(Flow::Ready(()))) {
            self.flash_peek = Some(peek);
        }
        r
    }
}
