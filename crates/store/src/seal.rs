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
//!
//! This module is the requests alone ([`Seals`], reached through
//! `Store::seals`); a worker acts on them in `Active::seal_if_starved`
//! (`active.rs`), the age pass asks in `tier/age.rs`.

use std::sync::atomic::Ordering::*;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::OnceLock;

/// The store's requests to seal, and what wakes the workers for them.
#[derive(Default)]
pub(crate) struct Seals {
    /// Bumped by a writer that found no segment to take.
    starved: AtomicU64,
    /// Bumped by the age pass when an open segment holds items written
    /// at or before `idle_before`.
    idle: AtomicU64,
    idle_before: AtomicU32,
    /// Wakes the workers so that idle ones seal too (`Store::on_starved`).
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

/// What a worker is asked to seal ([`Seals::asked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    Nothing,
    /// A writer starved: everything it holds.
    All,
    /// The segments it holds whose items were all written at or before
    /// this time.
    IdleBefore(u32),
}

impl Seals {
    /// Sets what wakes the workers (once; later calls change nothing).
    pub(crate) fn set_hook(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let _ = self.hook.set(wake);
    }

    /// The requests as they stand, for a worker that starts.
    pub(crate) fn now(&self) -> Seen {
        Seen { starved: self.starved.load(Relaxed), idle: self.idle.load(Acquire) }
    }

    /// A writer found no segment to take: every worker is to seal what it
    /// holds, and the idle ones are woken to. Returns the new count.
    pub(crate) fn starve(&self) -> u64 {
        let n = self.starved.fetch_add(1, Relaxed) + 1;
        self.wake();
        n
    }

    /// The age pass found open segments with items written at or before
    /// `cutoff`: every worker is to seal those it holds.
    pub(crate) fn ask_idle(&self, cutoff: u32) {
        self.idle_before.store(cutoff, Relaxed);
        self.idle.fetch_add(1, Release);
        self.wake();
    }

    fn wake(&self) {
        if let Some(wake) = self.hook.get() {
            wake();
        }
    }

    /// What was asked since `seen` (one relaxed load each when nothing
    /// was), noted in `seen` as acted on.
    pub(crate) fn asked(&self, seen: &mut Seen) -> Ask {
        let now = self.now();
        if now.starved != seen.starved {
            *seen = now;
            Ask::All
        } else if now.idle != seen.idle {
            seen.idle = now.idle;
            Ask::IdleBefore(self.idle_before.load(Relaxed))
        } else {
            Ask::Nothing
        }
    }
}

impl Seen {
    /// Notes starved count `n` as acted on: this worker sealed for it.
    pub(crate) fn starved(&mut self, n: u64) {
        self.starved = n;
    }
}
