//! A worker thread's handle on the store: the shared [`Store`], the
//! worker's active segments and counters, its compression state, and
//! read-ahead (prefetching what a batch of reads will touch). The
//! operations themselves are in `read.rs` and `write.rs`.

use std::sync::Arc;

use strata_compress::{Codec, CompressError, Ctx};

use crate::index::{slot, Loc};
use crate::segments::Active;
use crate::store::{Counters, Store};

/// Where [`Worker::prefetch_bucket`] found a key's bucket, for
/// [`Worker::prefetch_items`].
/// (The default, a placeholder for arrays of hints, is harmless to prefetch.)
#[derive(Debug, Clone, Copy, Default)]
pub struct Hint(Loc);

/// One worker thread's handle: the shared store and the worker's own state.
pub struct Worker {
    pub(crate) store: Arc<Store>,
    pub(crate) active: Active,
    /// With compression on.
    pub(crate) zip: Option<Zip>,
    /// The highest journal position this worker's changes reached.
    pub(crate) journaled: u64,
    /// Where flash records are read into, and the flash slots a key's
    /// read looks at, each with its region's generation then (kept, so a
    /// read from flash allocates nothing).
    pub(crate) flash_buf: Vec<u8>,
    pub(crate) flash_candidates: Vec<(u64, u64)>,
    /// What the running add, replace, cas or delete found of its key on
    /// flash (`tier/peek.rs`); `None` outside one.
    pub(crate) flash_peek: Option<crate::tier::peeked::Peek>,
    /// Reads from flash left before one brings its item back
    /// (`ext_recache_rate`).
    pub(crate) flash_reads: u32,
    /// With asynchronous flash reads on ([`Worker::enable_async_flash`]).
    pub(crate) reads: Option<crate::aio::Reads>,
    /// With writes that wait for memory off the event loop
    /// ([`Worker::enable_memory_waits`], `memwait.rs`).
    pub(crate) memory: Option<std::sync::Arc<crate::reclaim::MemoryWait>>,
    /// Waits for memory in a row by writes run again (`memwait.rs`).
    pub(crate) memory_rewaits: u32,
}

impl Store {
    /// A handle for one worker thread.
    pub fn worker(self: &Arc<Self>) -> Worker {
        let counters = Arc::new(Counters::default());
        self.roster().worker_started(&counters);
        // Without a context (zstd could not allocate one) this worker
        // stores values plain and reads compressed ones as misses.
        let zip = self.codec().and_then(|c| Zip::new(c.clone()).ok());
        let active = Active::new(self, counters, false);
        Worker {
            store: self.clone(),
            active,
            zip,
            journaled: 0,
            flash_buf: Vec::new(),
            flash_candidates: Vec::new(),
            flash_peek: None,
            flash_reads: 0,
            reads: None,
            memory: None,
            memory_rewaits: 0,
        }
    }
}

/// A compressed value is stored again at the cold level (`rezip.rs`) if
/// that saves at least this share of its stored form: moving it costs a
/// copy and leaves its old place for the cleaner, and at 19 against 3 JSON
/// objects and pages save 9-14% on average.
pub(crate) const COLD_MIN_SAVING_PERCENT: usize = 4;

/// A buffer that grew past this for one large value is let go after it.
const KEEP_BUFFER: usize = 1 << 20;

/// A worker's compression state: zstd's contexts and the buffers a value
/// passes through.
pub(crate) struct Zip {
    ctx: Ctx,
    /// A value's stored form, between compressing and writing it.
    pub(crate) stored: Vec<u8>,
    /// The last value decompressed for a reader.
    pub(crate) plain: Vec<u8>,
}

impl Zip {
    pub(crate) fn new(codec: Arc<Codec>) -> Result<Zip, CompressError> {
        Ok(Zip { ctx: Ctx::new(codec)?, stored: Vec::new(), plain: Vec::new() })
    }

    pub(crate) fn codec(&self) -> &Arc<Codec> {
        self.ctx.codec()
    }

    /// Puts `value`'s stored form in `self.stored` if storing it compressed
    /// pays. The form holds a reference to its dictionary (`dict_id`),
    /// for the caller to give back once the item's segment holds its own.
    /// A value incr/decr could count on is never compressed, so counters
    /// are always read in place.
    pub(crate) fn compress(&mut self, value: &[u8]) -> bool {
        if self.stored.capacity() > KEEP_BUFFER {
            self.stored = Vec::new();
        }
        crate::item::parse_counter(value).is_none() && self.ctx.compress(value, &mut self.stored)
    }

    /// The stored form, with the current dictionary, of a value stored
    /// before it (`stored`, its client's bytes, or its compressed form if
    /// `compressed`) into `self.stored`, if that is smaller than what is
    /// stored now by the codec's minimum saving (`rezip.rs`); with `cold`,
    /// at the codec's cold level, and a smaller saving is enough for a
    /// value already compressed ([`COLD_MIN_SAVING_PERCENT`]). `grows`:
    /// the bytes the item's header grows by where it is stored again (the
    /// explicit CAS a moved item carries), counted against the saving.
    /// Holds a reference to its dictionary as [`Zip::compress`]'s does.
    pub(crate) fn recompress(&mut self, stored: &[u8], compressed: bool, max: usize, cold: bool, grows: usize) -> bool {
        if compressed && self.decompress(stored, max).is_err() {
            return false;
        }
        let plain: &[u8] = if compressed { &self.plain } else { stored };
        if crate::item::parse_counter(plain).is_some() {
            return false;
        }
        let made = if cold {
            self.ctx.compress_cold(plain, &mut self.stored)
        } else {
            self.ctx.compress_again(plain, &mut self.stored)
        };
        if !made {
            return false;
        }
        let saving =
            if cold { COLD_MIN_SAVING_PERCENT } else { usize::from(self.ctx.codec().config().min_saving_percent) };
        if (compressed || grows > 0) && self.stored.len() + grows > stored.len() - stored.len() * saving / 100 {
            self.ctx.codec().release(strata_compress::dict_id(&self.stored));
            return false;
        }
        true
    }

    /// Whether [`Zip::recompress`] may store anything at the cold level
    /// now (`strata_compress::Ctx::cold_possible`).
    pub(crate) fn cold_possible(&self) -> bool {
        self.ctx.cold_possible()
    }

    /// Lets the cold level's context go for good for the current
    /// dictionary (`strata_compress::Ctx::refuse_cold`).
    pub(crate) fn refuse_cold(&mut self) {
        self.ctx.refuse_cold();
    }

    /// Lets the context of [`Zip::recompress`]'s cold level go, with its
    /// memory.
    pub(crate) fn release_cold(&mut self) {
        self.ctx.release_cold();
    }

    /// The original bytes of a stored form, into `self.plain`; a form that
    /// claims more than `max` bytes is refused before anything is allocated.
    pub(crate) fn decompress(&mut self, stored: &[u8], max: usize) -> Result<(), CompressError> {
        let n = strata_compress::original_len(stored)?;
        if n > max {
            return Err(CompressError::Malformed);
        }
        if self.plain.capacity() > KEEP_BUFFER && n <= KEEP_BUFFER {
            self.plain = Vec::new();
        }
        self.ctx.decompress(stored, &mut self.plain)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.seal_active();
        self.store.drop_want(&mut self.active);
        self.store.roster().worker_left();
    }
}

impl Worker {
    /// Seals this worker's active segments and copy targets, so that
    /// everything it wrote so far is on a queue: a snapshot images sealed
    /// segments only, and a segment being written has no consistent image.
    /// The next write opens new segments (with higher epochs).
    pub fn seal_active(&mut self) {
        self.active.seal_all(&self.store);
    }

    /// Seals this worker's segments if a writer found none to take since
    /// it last looked: for a worker between requests, which would
    /// otherwise hold them until its next write (`Store::on_starved`).
    pub fn seal_if_starved(&mut self) {
        self.active.seal_if_starved(&self.store);
    }
}

impl Worker {
    /// Starts loading what reading `keys` will touch (each key's index
    /// bucket, then its item) into the CPU cache, a batch at a time, before
    /// they are read one by one. A read waits on memory twice (bucket, then
    /// item, each depending on the last) and reads one after another under
    /// a lock cannot overlap those waits; prefetched, a whole multi-get or
    /// pipeline of gets waits about twice in all. Changes nothing: a key that
    /// is missing or moves meanwhile only costs a wasted prefetch.
    pub fn prefetch(&self, keys: &[&[u8]]) {
        const BATCH: usize = 16;
        for chunk in keys.chunks(BATCH) {
            let mut hints = [Hint::default(); BATCH];
            for (hint, key) in hints.iter_mut().zip(chunk) {
                *hint = self.prefetch_bucket(key);
            }
            self.prefetch_items(&hints[..chunk.len()]);
        }
    }

    /// The first half of [`Worker::prefetch`] for one key: starts loading
    /// its index bucket and returns where to look for its item. For callers
    /// that gather keys from several places (the io_uring worker reads
    /// ahead across every connection a turn serves).
    pub fn prefetch_bucket(&self, key: &[u8]) -> Hint {
        let loc = self.store.index().locate(key);
        self.store.index().prefetch(loc);
        self.store.sketch().prefetch(loc);
        Hint(loc)
    }

    /// The second half: by now the first buckets have arrived; starts
    /// loading the items they point at.
    pub fn prefetch_items(&self, hints: &[Hint]) {
        let st = &*self.store;
        // The lock is needed to read a slot, as a table may be replaced
        // while it is read.
        for Hint(loc) in hints {
            let found = st.index().lock(loc.stripe).find(loc.bucket, |s| slot::tag(s) == loc.tag);
            if let Some((_, s)) = found.filter(|&(_, s)| !slot::is_flash(s)) {
                st.arena().prefetch(slot::seg(s), st.byte_off(s));
            }
        }
    }
}
