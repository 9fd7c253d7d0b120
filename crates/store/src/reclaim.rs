//! What the writers and the background reclaimer (`reclaimer.rs`) share:
//! its wake-up, the copy-forward credit writers hand it, the victims being
//! cleared, its copy targets (which a snapshot has sealed), and the
//! workers whose writes wait for it.

use std::sync::atomic::{AtomicBool, AtomicUsize};

use parking_lot::{Condvar, Mutex};

use crate::segments::Active;

/// What writers and the reclaimer share.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) kicked: Mutex<bool>,
    pub(crate) wake: Condvar,
    /// Copy-forward credit handed over by writers.
    pub(crate) credit: AtomicUsize,
    pub(crate) stop: AtomicBool,
    /// Writers waiting for a segment wait on this; the reclaimer notifies
    /// it as it frees one, or finds it can free none.
    pub(crate) freed_lock: Mutex<()>,
    pub(crate) freed_cv: Condvar,
    /// Victims taken off their queues (`Store::step`) and not yet given
    /// back or put back: a segment some thread will soon free.
    pub(crate) clearing: AtomicUsize,
    /// Its last round found nothing to free while none was free: writers
    /// then reclaim themselves at once (the last resort is theirs).
    pub(crate) stuck: AtomicBool,
    /// The reclaimer's copy targets, behind a lock so that a snapshot can
    /// have them sealed (`Store::seal_reclaimer`) as it has the workers'.
    /// Taken once per round, by nobody on a request's path.
    pub(crate) active: Mutex<Option<Active>>,
    /// Workers with a write waiting for a segment off their event loop
    /// (`memwait.rs`), woken when one is freed or the reclaimer gives up.
    pub(crate) waiting: Mutex<Vec<std::sync::Arc<MemoryWait>>>,
    /// Segments writers have asked for and not taken yet (`Asked`):
    /// under a small budget the reclaimer keeps that many free, not more
    /// (`Store::reclaim_ahead`).
    pub(crate) wanted: AtomicUsize,
}

/// One worker's place on the list of writers waiting for memory.
pub(crate) struct MemoryWait {
    /// Wakes the worker's event loop (called from another thread).
    pub(crate) wake: Box<dyn Fn() + Send + Sync>,
    /// On `Shared::waiting` now: listed once however many of its
    /// connections wait.
    pub(crate) listed: AtomicBool,
    /// Woken since the worker last collected its completions.
    pub(crate) freed: AtomicBool,
}
