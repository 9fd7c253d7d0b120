//! Asking the workers to seal the segments they hold open.
//!
//! A worker's open segments (one per TTL class it writes, and its copy
//! targets) are its own: nobody else seals them, and eviction, the cleaner
//! and the flash tier's age pass take sealed segments only. Two things ask
//! every worker to seal, each a counter a worker compares with the one it
//! last acted on (one relaxed load per write, [`Active::reserve`]) and a
//! hook that wakes the idle ones (they act between requests):
//!
//! - **a writer starved**: it found no segment it may take, so every
//!   worker seals everything it holds, and what they held can be evicted
//!   (`evict/`, "The last resort");
//! - **idle segments**, with `ext_item_age`: the age pass found no sealed
//!   segment old enough, but an open one holds items written before the
//!   cutoff (a worker that went quiet half-way through a segment). Each
//!   worker seals its open segments whose newest item is that old, so the
//!   next pass sends them to flash, as memcached flushes an idle item
//!   whatever slab page it is in. Without it those items stayed in memory
//!   for good: memcached's `t/extstore.t` waits for them forever.

use std::sync::atomic::Ordering::*;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::OnceLock;

use crate::segments::Active;
use crate::store::Store;

/// The store's requests to seal, and what wakes the workers for them.
#[derive(Default)]
pub(crate) struct Seals {
    /// Bumped by a writer that found no segment to take.
    starved: AtomicU64,
    /// Bumped by the age pass when an open segment holds items written
    /// at or before `idle_before`.
    idle: AtomicU64,
    idle_before: AtomicU32,
    /// Wakes the workers so that idle ones seal too ([`Store::on_starved`]).
    hook: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Seals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seals").field("starved", &self.starved).field("idle", &self.idle).finish()
    }
}

/// What a worker last acted on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    starved: u64,
    idle: u64,
}

impl Store {
    /// Sets what wakes the workers when a writer finds no segment it may
    /// take, or the age pass wants idle segments sealed: each then calls
    /// [`Worker::seal_if_starved`](crate::Worker::seal_if_starved) between
    /// requests, so that an idle worker's half-filled segments can be
    /// evicted or sent to flash too.
    pub fn on_starved(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let _ = self.seals().hook.set(wake);
    }

    /// The requests as they stand, for a worker that starts.
    pub(crate) fn seals_now(&self) -> Seen {
        Seen { starved: self.seals().starved.load(Relaxed), idle: self.seals().idle.load(Acquire) }
    }

    /// A writer found no segment to take: every worker is to seal what it
    /// holds, and the idle ones are woken to. Returns the new count.
    pub(crate) fn starve(&self) -> u64 {
        let n = self.seals().starved.fetch_add(1, Relaxed) + 1;
        self.wake_workers();
        n
    }

    /// The age pass found open segments with items written at or before
    /// `cutoff`: every worker is to seal those it holds.
    pub(crate) fn ask_seal_idle(&self, cutoff: u32) {
        self.seals().idle_before.store(cutoff, Relaxed);
        self.seals().idle.fetch_add(1, Release);
        self.wake_workers();
    }

    fn wake_workers(&self) {
        if let Some(wake) = self.seals().hook.get() {
            wake();
        }
    }

    /// Whether a segment no queue holds (one some worker has open) holds
    /// items written at or before `cutoff` that the age pass has not been
    /// through: then its worker is to seal it.
    pub(crate) fn idle_open(&self, cutoff: u32) -> bool {
        let in_use = self.in_use();
        let ev = self.lock_evict();
        let mut queued = vec![false; in_use.len()];
        for &s in ev.small.iter().chain(ev.main.iter()) {
            queued[s as usize] = true;
        }
        drop(ev);
        (0..in_use.len()).any(|s| in_use[s] && !queued[s] && self.idle_since(s as u32, cutoff))
    }

    /// `seg` holds items and was last written at or before `cutoff`.
    fn idle_since(&self, seg: u32, cutoff: u32) -> bool {
        let m = self.seg(seg);
        m.live_items.load(Relaxed) > 0 && m.times.lock().latest().is_some_and(|t| t <= cutoff)
    }
}

impl Active {
    /// Seals what the store asked to since this worker last looked: every
    /// segment it holds if a writer starved, its idle ones if the age pass
    /// asked (one relaxed load each when nothing was asked).
    pub(crate) fn seal_if_starved(&mut self, st: &Store) {
        let now = st.seals_now();
        if now.starved != self.seen.starved {
            self.seen = now;
            self.seal_all(st);
        } else if now.idle != self.seen.idle {
            self.seen.idle = now.idle;
            let cutoff = st.seals().idle_before.load(Relaxed);
            self.seal_idle(st, cutoff);
        }
    }

    /// Seals the segments this worker holds whose items were all written
    /// at or before `cutoff`.
    pub(crate) fn seal_idle(&mut self, st: &Store, cutoff: u32) {
        self.seal_where(st, |s| st.idle_since(s, cutoff));
    }

    /// Notes starved count `n` as acted on: this worker sealed for it.
    pub(crate) fn seen_starved(&mut self, n: u64) {
        self.seen.starved = n;
    }
}
