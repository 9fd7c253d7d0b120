//! The semantic core: every protocol's requests, as [`strata_protocol::ops`]
//! values, run here against the store, and the stats counters are bumped
//! here, where the outcome is known. The classic text encoder
//! ([`crate::dispatch`]) and the meta encoder ([`crate::meta`]) only turn
//! outcomes into bytes, so a command's semantics exist once.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use strata_protocol::ops;
use strata_store::{
    Arith, ArithOutcome, Counted, Delete, DeleteOutcome, ItemView, ReadOpts, SetOp, StoreError, StoreOutcome, Stored,
    Write,
};

use crate::dispatch::Ctx;

pub(crate) fn inc(c: &AtomicU64) {
    c.store(c.load(Relaxed) + 1, Relaxed);
}

impl Ctx<'_> {
    /// Server-relative expiry of a client exptime (memcached's `realtime`).
    fn expiry(&self, exptime: i32) -> u32 {
        self.shared.store.clock().expiry(i64::from(exptime))
    }

    /// A read. `f` sees the item under its bucket lock; `None` on a miss.
    pub fn get<R>(&mut self, op: &ops::Get<'_>, f: impl FnOnce(ItemView<'_>) -> R) -> Result<Option<R>, StoreError> {
        let opts = ReadOpts {
            bump: op.bump,
            touch: op.touch.map(|t| self.expiry(t)),
            tokens: op.tokens,
            recache_before: op.recache.map(|t| self.expiry(t)),
            vivify: op.vivify.map(|t| self.expiry(t)),
            new_cas: op.new_cas,
            written: op.last_access,
        };
        let r = self.store.read(op.key.as_bytes(), &opts, f);
        let s = self.stats;
        let hit = matches!(r, Ok(Some(_)));
        // memcached counts a touching read (touch, gat, mg T) as a touch only;
        // mg counts its misses as gets.
        match (op.touch.is_some(), hit) {
            (true, true) => (inc(&s.cmd_touch), inc(&s.touch_hits)),
            (true, false) if op.touch_miss_stats => (inc(&s.cmd_touch), inc(&s.touch_misses)),
            (false, true) => (inc(&s.cmd_get), inc(&s.get_hits)),
            (_, false) => (inc(&s.cmd_get), inc(&s.get_misses)),
        };
        r
    }

    /// A write of a whole value or an append/prepend.
    pub fn set(&mut self, op: &ops::Set<'_>) -> Result<Stored, StoreError> {
        let s = self.stats;
        inc(&s.cmd_set);
        let w = Write {
            op: match op.mode {
                ops::Mode::Set => SetOp::Set,
                ops::Mode::Add => SetOp::Add,
                ops::Mode::Replace => SetOp::Replace,
                ops::Mode::Append => SetOp::Append,
                ops::Mode::Prepend => SetOp::Prepend,
            },
            key: op.key.as_bytes(),
            flags: op.flags,
            expiry: self.expiry(op.exptime),
            value: op.data,
            compare: op.compare,
            invalidate: op.invalidate,
            new_cas: op.new_cas,
            vivify: op.vivify.map(|t| self.expiry(t)),
            binary_key: op.binary_key,
        };
        let r = self.store.set_with(&w);
        match &r {
            Ok(st) if op.compare.is_some() && op.mode == ops::Mode::Set => match st.outcome {
                StoreOutcome::Stored => inc(&s.cas_hits),
                StoreOutcome::Exists => inc(&s.cas_badval),
                StoreOutcome::NotFound => inc(&s.cas_misses),
                StoreOutcome::NotStored => {}
            },
            Ok(_) => {}
            Err(StoreError::TooLarge) => inc(&s.store_too_large),
            Err(_) => inc(&s.store_no_memory),
        }
        r
    }

    /// A write refused for size before its data was read: memcached drops
    /// the old value so a stale version cannot outlive the write meant to
    /// replace it.
    pub fn refuse_too_large(&mut self, key: &[u8]) {
        inc(&self.stats.store_too_large);
        self.store.delete(key);
    }

    pub fn delete(&mut self, op: &ops::Delete<'_>) -> Result<DeleteOutcome, StoreError> {
        let d = Delete {
            compare: op.compare,
            new_cas: op.new_cas,
            invalidate: op.invalidate,
            touch: op.touch.map(|t| self.expiry(t)),
            remove_value: op.remove_value,
            flags: op.flags,
        };
        let r = self.store.delete_with(op.key.as_bytes(), &d);
        let s = self.stats;
        match r {
            Ok(DeleteOutcome::Deleted) if !op.invalidate => inc(&s.delete_hits),
            Ok(DeleteOutcome::NotFound | DeleteOutcome::Exists) => inc(&s.delete_misses),
            _ => {}
        }
        r
    }

    pub fn arith(&mut self, op: &ops::Arith<'_>) -> Result<Counted, StoreError> {
        let a = Arith {
            incr: op.incr,
            delta: op.delta,
            compare: op.compare,
            new_cas: op.new_cas,
            touch: op.touch.map(|t| self.expiry(t)),
            vivify: op.vivify.map(|t| self.expiry(t)),
            initial: op.initial,
        };
        let r = self.store.arith_with(op.key.as_bytes(), &a);
        let s = self.stats;
        let (hits, misses) = if op.incr { (&s.incr_hits, &s.incr_misses) } else { (&s.decr_hits, &s.decr_misses) };
        match r {
            Ok(Counted { outcome: ArithOutcome::Value(_), .. }) => inc(hits),
            Ok(Counted { outcome: ArithOutcome::NotFound, .. }) => inc(misses),
            _ => {}
        }
        r
    }
}
