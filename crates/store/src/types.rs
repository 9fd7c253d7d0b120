//! The store's request and outcome types: what a protocol-neutral request
//! asks of the store ([`Write`], [`ReadOpts`], [`Delete`], [`Arith`]) and
//! what it did ([`Stored`], [`ItemView`], [`Counted`], [`DeleteOutcome`],
//! [`Inspect`]), the settings ([`Config`]), the errors, and the totals for
//! `stats`. No behaviour lives here.

/// Why an operation was not done. The store is unchanged by it and the
/// caller's connection carries on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No segment could be freed for the write (`-M`, or every candidate
    /// pinned).
    #[error("out of memory")]
    OutOfMemory,
    /// Header, key and value exceed `-I`.
    #[error("object too large for cache")]
    TooLarge,
    /// The item kept changing under concurrent writers for
    /// [`MAX_RETRIES`](crate::MAX_RETRIES) attempts.
    #[error("the item kept changing under concurrent writers")]
    Contended,
    /// The durability log cannot be written (`--durability`): nothing was
    /// changed, since the change could not be kept.
    #[error("durability log failed")]
    NotLogged,
}

/// Why one attempt at an operation stopped, inside the store: failed, or
/// at a flash slot its key may be in, which the store brings into memory
/// before it tries again ([`Worker::with_flash`](crate::Worker)). Never
/// leaves the crate: a caller sees the failure, or a [`Flow`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    Failed(StoreError),
    OnFlash,
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Stop {
        Stop::Failed(e)
    }
}

/// What an operation that may need a value from flash came to: done, or
/// waiting for a read the I/O threads are doing (memcached's `io_pending`),
/// or, a write, for a free segment ([`Ticket::MEMORY`], `memwait.rs`).
/// Waiting changed nothing and counted nothing (but the wait): the caller runs the same
/// operation again once [`Worker::completions`](crate::Worker::completions)
/// hands the ticket back, passing [`Reading::Resumed`] with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Flow<T> {
    Ready(T),
    Wait(Ticket),
}

impl<T> Flow<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Flow<U> {
        match self {
            Flow::Ready(t) => Flow::Ready(f(t)),
            Flow::Wait(t) => Flow::Wait(t),
        }
    }
}

impl<T, E> Flow<Result<T, E>> {
    /// `Ok(Flow)` turned inside out, the shape a caller that counts
    /// outcomes wants: waiting first, then success or failure.
    pub fn of(r: Result<Flow<T>, E>) -> Flow<Result<T, E>> {
        match r {
            Ok(Flow::Ready(t)) => Flow::Ready(Ok(t)),
            Ok(Flow::Wait(t)) => Flow::Wait(t),
            Err(e) => Flow::Ready(Err(e)),
        }
    }
}

/// The result of an operation run with [`Reading::Now`], which reads
/// everything synchronously and so never waits.
pub(crate) fn now<T>(r: Result<Flow<T>, StoreError>) -> Result<T, StoreError> {
    match r {
        Ok(Flow::Ready(t)) => Ok(t),
        // Cannot happen (nothing is asked of the I/O threads); reported as
        // a lost race rather than a panic on a request's path.
        Ok(Flow::Wait(_)) => Err(StoreError::Contended),
        Err(e) => Err(e),
    }
}

/// A read from flash in flight that an operation waits for: which record
/// (an opaque token), handed back when the read is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(pub(crate) u64);

impl Ticket {
    /// A ticket no read is behind, for tests of code that parks on
    /// tickets (the server's scheduler): distinct `n`, distinct tickets.
    /// Only with the test hooks: a real ticket comes from the store.
    #[cfg(feature = "test-hooks")]
    pub const fn unbacked(n: u64) -> Ticket {
        Ticket(n)
    }
}

/// How an operation may read from flash what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// A record not in memory or the page cache is asked of the I/O
    /// threads and the operation returns [`Flow::Wait`] (on a worker with
    /// [`Worker::enable_async_flash`](crate::Worker::enable_async_flash);
    /// without it every read is synchronous).
    MayWait,
    /// The operation waited for this ticket and runs again: that one
    /// record is read here and now if it was pushed out of the worker's
    /// ready records meanwhile, so every wait ends in progress. Others
    /// may still wait.
    Resumed(Ticket),
    /// Every read is synchronous: for operations that cannot run again
    /// later (a refused write's delete, its data being discarded), and
    /// the store's own convenience methods.
    Now,
}

impl Reading {
    /// Whether the record at `addr` must be read here and now.
    pub(crate) fn synchronous(self, addr: u64) -> bool {
        match self {
            Reading::MayWait => false,
            Reading::Resumed(t) => t.0 == addr,
            Reading::Now => true,
        }
    }
}

/// Why a store could not be built or a setting changed: a configuration
/// mistake, reported once at start (or to `cache_memlimit`), never per
/// request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid store configuration: {0}")]
    Invalid(&'static str),
}

/// Store settings, from the server's flags.
#[derive(Debug, Clone)]
pub struct Config {
    /// `-m`: bytes of item memory.
    pub memory_limit: usize,
    /// Address space reserved for segments, so `cache_memlimit` can raise the
    /// limit up to it at run time; untouched pages cost no RAM. 0: `memory_limit`.
    pub memory_reserve: usize,
    /// `-I`: the largest item (header, key and value).
    pub item_size_max: usize,
    /// Segment size; 0 picks max(1 MiB, `item_size_max`).
    pub segment_size: usize,
    /// `-M` turns this off.
    pub evictions: bool,
    /// `-C` turns this off: CAS values read as 0 and `cas` never matches
    /// (EXISTS), as in memcached.
    pub cas: bool,
    /// log2 of the number of index buckets at start (the index grows with
    /// the items); 0 picks 2^16, or fewer for a small memory limit.
    pub hash_power: u32,
    /// Values of at least this many bytes are read without their bucket
    /// lock (see [`Found::Fetch`](crate::Found::Fetch)): copying a large
    /// value under the lock would hold up every key of its stripe.
    pub unlocked_read_min: usize,
    /// Store values compressed where it pays (`-o compression=on`); `None`
    /// stores every value as sent.
    pub compression: Option<strata_compress::Config>,
    /// The flash tier (`-o ext_path=`): evicted values go there.
    pub flash: Option<FlashTier>,
    /// `-f` and `-n`: the size bands items are counted in for `stats
    /// items` and `stats slabs` (`bands.rs`).
    pub size_classes: SizeClasses,
    /// A test setting (`--debug-reclaim-delay`): the background reclaimer
    /// sleeps this long before each round, as one that falls behind the
    /// writers. Honoured only with the `test-hooks` feature.
    pub reclaim_delay: std::time::Duration,
}

/// [`FlashTier::item_age`] off (memcached's default, `UINT_MAX`).
pub const NO_ITEM_AGE: u32 = u32::MAX;

/// The flash tier's store-side settings, and its log.
#[derive(Debug, Clone)]
pub struct FlashTier {
    pub log: std::sync::Arc<strata_flash::Flash>,
    /// Items smaller than this (header, key and value) are evicted as
    /// without flash (memcached's `ext_item_size`). This and
    /// `recache_rate` and `item_age` are the values at start: the store's
    /// setters ([`Store::set_flash_min_item`](crate::Store::set_flash_min_item)
    /// and the others) change them while it runs.
    pub min_item: usize,
    /// Items written at least this many seconds ago and not read since go
    /// to flash before memory is full (memcached's `ext_item_age`, which
    /// counts from the last access: strata keeps no access time per
    /// item). [`NO_ITEM_AGE`]: only eviction sends items to flash.
    pub item_age: u32,
    /// Other `ext_*` options given, with memcached's names and the values
    /// as given, for `stats settings` (accepted, no effect here).
    pub noted: Vec<(String, String)>,
    /// Bytes gathered before a write to flash (`ext_wbuf_size`); at most a
    /// region.
    pub write_buffer: usize,
    /// The paths and sizes it was opened from, for `stats settings`.
    pub paths: Vec<(std::path::PathBuf, u64)>,
    /// A test setting (`--debug-flash-writes`): every item written goes to
    /// flash at once, so that test suites read from flash. Honoured only
    /// with the `test-hooks` feature (it compiles the check in); kept in
    /// every build so that the configuration has one shape whatever
    /// features cargo unifies.
    pub every_write: bool,
    /// One read from flash in this many brings the item back into memory
    /// (memcached's `ext_recache_rate`; 1: every read, 0: none); the others
    /// are served from flash. A change to an item always brings it back.
    pub recache_rate: u32,
    /// Threads that read from flash for the workers (`ext_threads`), so a
    /// worker serves others while a read is in flight; 0: workers read
    /// synchronously.
    pub io_threads: usize,
    /// With `io_threads`: a record already in memory (the page cache) is
    /// read by the worker at once, and only reads that would wait for the
    /// device go to the threads (handing a read over costs more than a
    /// copy from the page cache). False (a test setting,
    /// `--debug-flash-async`, honoured only with the `test-hooks`
    /// feature): every read goes to the threads.
    pub read_cached_inline: bool,
    /// A test setting (`--debug-flash-read-delay`): every read by those
    /// threads waits this long first, so tests can hold a read in flight.
    /// Honoured only with the `test-hooks` feature (as `every_write`).
    pub read_delay: std::time::Duration,
}

impl FlashTier {
    /// The tier over `log` with memcached's defaults — `ext_item_size` 512
    /// bytes, `ext_wbuf_size` 4 MiB (at most half a region),
    /// `ext_recache_rate` 2000, no `ext_item_age` — and 4 I/O threads
    /// (`ext_threads`: memcached starts one; reads from an SSD overlap
    /// only as far as there are threads to wait on them, and an idle thread
    /// costs nothing). Callers change the fields they were given.
    pub fn new(log: std::sync::Arc<strata_flash::Flash>) -> FlashTier {
        let write_buffer = (4usize << 20).min((log.region_size() / 2) as usize);
        FlashTier {
            log,
            min_item: 512,
            item_age: NO_ITEM_AGE,
            noted: Vec::new(),
            write_buffer,
            paths: Vec::new(),
            every_write: false,
            recache_rate: 2000,
            io_threads: 4,
            read_cached_inline: true,
            read_delay: std::time::Duration::ZERO,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            memory_limit: 64 << 20,
            memory_reserve: 0,
            item_size_max: 1 << 20,
            segment_size: 0,
            evictions: true,
            cas: true,
            hash_power: 0,
            unlocked_read_min: 64 << 10,
            compression: None,
            flash: None,
            size_classes: SizeClasses::default(),
            reclaim_delay: std::time::Duration::ZERO,
        }
    }
}

/// Storage modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOp {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// Result of a storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    Stored,
    NotStored,
    Exists,
    NotFound,
}

/// A storage request with every option the protocols can ask for.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub op: SetOp,
    pub key: &'a [u8],
    pub flags: u32,
    /// Server-relative expiry (see [`Clock::expiry`]), 0 for never.
    pub expiry: u32,
    pub value: &'a [u8],
    /// Store only if the item's CAS is this (`ms C`); with `Set`, a missing
    /// item is `NotFound`, as for `cas`.
    pub compare: Option<u64>,
    /// With `compare`: a compare value older than the item's CAS still stores,
    /// but the new item is stale (`ms I`).
    pub invalidate: bool,
    /// The stored item's CAS, instead of a fresh one (`ms E`).
    pub new_cas: Option<u64>,
    /// Append/prepend to a missing item creates it with this expiry (`ms N`).
    pub vivify: Option<u32>,
    /// The key came in base64 (`ms b`): the item remembers, for replies.
    pub binary_key: bool,
}

impl<'a> Write<'a> {
    pub fn new(op: SetOp, key: &'a [u8], flags: u32, expiry: u32, value: &'a [u8]) -> Write<'a> {
        Write {
            op,
            key,
            flags,
            expiry,
            value,
            compare: None,
            invalidate: false,
            new_cas: None,
            vivify: None,
            binary_key: false,
        }
    }
}

/// What a storage request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub outcome: StoreOutcome,
    /// The CAS of the item written (0 if nothing was written).
    pub cas: u64,
    /// Value length of the item written (after append/prepend).
    pub size: usize,
}

/// How a read treats the item it finds.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOpts {
    /// Count the read toward keeping the item (memcached's LRU bump;
    /// `mg u` turns it off).
    pub bump: bool,
    /// Set this expiry on a hit (`touch`, `gat`, `mg T`).
    pub touch: Option<u32>,
    /// Hand out the recache token of a stale item (`mg`; classic reads
    /// return stale items without taking part).
    pub tokens: bool,
    /// Hand out the recache token if the item expires before this
    /// server-relative time (`mg R`).
    pub recache_before: Option<u32>,
    /// On a miss, create an empty item with this expiry and hand out its
    /// recache token (`mg N`).
    pub vivify: Option<u32>,
    /// CAS of an item the read creates (`mg E`).
    pub new_cas: Option<u64>,
    /// Look up when the item was written (`mg l`; it takes a lock, so
    /// only on request).
    pub written: bool,
}

impl ReadOpts {
    /// A plain `get`.
    pub const GET: ReadOpts = ReadOpts {
        bump: true,
        touch: None,
        tokens: false,
        recache_before: None,
        vivify: None,
        new_cas: None,
        written: false,
    };
}

/// An item as handed to a reader, valid only inside the reader's closure:
/// the protocol crate's type, which its reply encoders take as it is.
pub use strata_protocol::ItemView;

/// Result of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    Value(u64),
    NotFound,
    NonNumeric,
    /// The compare value did not match (`ma C`).
    Exists,
    /// A created item could not be stored (`ma N` losing a race it retries
    /// too often).
    NotStored,
}

/// An incr/decr request with the meta protocol's options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arith {
    pub incr: bool,
    pub delta: u64,
    pub compare: Option<u64>,
    pub new_cas: Option<u64>,
    /// New expiry on success (`ma T`).
    pub touch: Option<u32>,
    /// On a miss, create the item holding `initial` with this expiry (`ma N`, `J`).
    pub vivify: Option<u32>,
    pub initial: u64,
}

/// What incr/decr did, and the item after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub outcome: ArithOutcome,
    pub cas: u64,
    /// Expiry before the request changed it (0 for a created item).
    pub expiry_before: u32,
    pub expiry: u32,
    /// The item did not exist and `vivify` created it.
    pub created: bool,
}

/// A delete request with the meta protocol's options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delete {
    pub compare: Option<u64>,
    pub new_cas: Option<u64>,
    /// Keep the item, marked stale, with a new CAS (`md I`).
    pub invalidate: bool,
    /// New expiry of an item kept by `invalidate` (else unchanged) or
    /// emptied by `remove_value` (else never).
    pub touch: Option<u32>,
    /// Keep the item with an empty value, client flags `flags` and the same
    /// CAS (`md x`; with `invalidate` it then gets a new one).
    pub remove_value: bool,
    pub flags: u32,
}

/// Result of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    Exists,
}

/// Everything known about an item, for `me`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspect {
    pub expiry: u32,
    pub written: u32,
    pub cas: u64,
    pub fetched: bool,
    /// Bytes the item occupies (header, key and value).
    pub size: usize,
    /// Bytes of the value, as the client stored it.
    pub value_len: usize,
    /// Its size class: the id memcached would class it in
    /// (`stats items`, `lru_crawler metadump`, `stats cachedump`).
    pub class: usize,
    pub binary_key: bool,
}

/// Totals for `stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub curr_items: u64,
    pub get_expired: u64,
    pub get_flushed: u64,
    pub bytes: u64,
    pub total_items: u64,
    pub evictions: u64,
    /// Evicted items never read; evicted items that had an expiry time;
    /// expired items reclaimed by eviction or the cleaner never read.
    pub evicted_unfetched: u64,
    pub evicted_nonzero: u64,
    pub expired_unfetched: u64,
    /// Seconds the item evicted last had been stored.
    pub evicted_age: u32,
    pub expired_unlinked: u64,
    pub reinserted: u64,
    /// Overwrites written over the old version of their key in place.
    pub overwritten_in_place: u64,
    /// Allocations that found no segment the usual way and took the last
    /// resort (sealing half-filled segments, evicting read items, waiting
    /// for pins and the other workers).
    pub alloc_last_resort: u64,
    /// Allocation steps (a millisecond at most each) that waited for a
    /// segment another thread was clearing, rather than evict live items.
    pub alloc_waited: u64,
    /// With the background reclaimer: allocations that found no segment
    /// free and reclaimed on the request's time.
    pub reclaim_inline: u64,
    /// With the background reclaimer: allocations that found none free
    /// and waited for it to free one.
    pub reclaim_waited: u64,
    /// Writes that waited for a free segment with their worker serving
    /// its other connections meanwhile.
    pub memory_waits: u64,
    /// Segments the background reclaimer freed.
    pub reclaim_background: u64,
    /// Segments writers of large items freed in the reclaimer's stead:
    /// victims of a few items, cheaper cleared than the reclaimer woken.
    pub reclaim_cheap: u64,
    pub segments_evicted: u64,
    pub segments_reclaimed: u64,
    /// Bytes of items written by clients' requests (header, key, value).
    pub bytes_stored: u64,
    /// Bytes of items copied forward by cleaning and eviction: write
    /// amplification is `(bytes_stored + bytes_copied) / bytes_stored`.
    pub bytes_copied: u64,
    /// Segments cleaned (live items copied, none evicted), the dead bytes
    /// that won back, and the time it took in all, µs.
    pub segments_cleaned: u64,
    pub dead_reclaimed: u64,
    pub cleaner_us: u64,
    /// Dead bytes in sealed segments now (overwritten, deleted or expired
    /// items not yet cleaned away).
    pub dead_bytes: u64,
    /// Bytes of the segment budget holding nothing, live or dead: free
    /// segments within it and the unwritten ends of segments in use.
    pub idle_bytes: u64,
    /// Of `idle_bytes`: free segments; the unwritten ends of segments
    /// being written (open segments, copy targets); the empty tails of
    /// sealed segments (an item larger than the room left).
    pub idle_free_bytes: u64,
    pub idle_open_bytes: u64,
    pub idle_sealed_bytes: u64,
    pub segments_total: u64,
    pub segments_free: u64,
    /// Segments holding items or being written (off the free and parked
    /// lists).
    pub segments_in_use: u64,
    pub segment_size: u64,
    pub memory_limit: u64,
    pub index_bytes: u64,
    /// log2 of the index's main buckets now (rounded down: stripes grow
    /// one at a time).
    pub hash_power: u32,
    /// Items held compressed now, their values' original bytes and the
    /// bytes they take.
    pub compressed_items: u64,
    pub compressed_plain_bytes: u64,
    pub compressed_stored_bytes: u64,
    /// Reads of compressed values that failed to decompress (served as
    /// misses; a bug or corrupted memory, never expected).
    pub decompress_errors: u64,
    /// The codec's counters and dictionaries (with compression on).
    pub compression: Option<strata_compress::CompressStats>,
    /// The flash tier's figures (with it on).
    pub flash: Option<FlashStats>,
}

/// The flash tier's figures, for `stats` (memcached's `extstore_*` names
/// where the meaning matches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlashStats {
    /// Items whose value is on flash now.
    pub items: u64,
    /// Records written, their bytes, and failed writes.
    pub objects_written: u64,
    pub bytes_written: u64,
    pub write_errors: u64,
    /// Bytes written and not yet reclaimed; total capacity.
    pub bytes_used: u64,
    pub capacity: u64,
    pub regions: u64,
    pub region_size: u64,
    pub regions_reclaimed: u64,
    /// Regions reclaimed while the index still linked records in them
    /// (`extstore_page_evictions`), regions the head opened to write
    /// (`extstore_page_allocs`), and regions in use now (`_pages_used`).
    pub regions_evicted: u64,
    pub regions_opened: u64,
    pub regions_used: u64,
    /// Reads, their bytes, I/O errors and damaged records (misses).
    pub reads: u64,
    pub bytes_read: u64,
    pub read_errors: u64,
    pub checksum_errors: u64,
    /// Reads that found the value (`get_extstore`) and that found it gone
    /// (expired, flushed, reclaimed or damaged: `miss_from_extstore`).
    pub hits: u64,
    /// Items brought back into memory (`recache_from_extstore`).
    pub recached: u64,
    pub misses: u64,
    /// Items moved from memory to flash, and dropped from flash by a
    /// region's reclaim (`extstore_objects_evicted`).
    pub moved: u64,
    pub evicted: u64,
    /// Bytes of the records of those dropped items
    /// (`extstore_bytes_evicted`).
    pub evicted_bytes: u64,
    /// Of `moved`, items sent by `ext_item_age` before memory was full.
    pub aged: u64,
    /// Read items a reclaim could not write again (the write failed):
    /// dropped (`extstore_compact_lost`).
    pub copy_lost: u64,
    /// Items that could not come back into memory for want of it (with
    /// `-M`): their request failed (`get_oom_extstore`).
    pub oom: u64,
    /// Items a reclaim wrote again because they were read since they went
    /// to flash.
    pub copied: u64,
    /// Flash slots a write dropped without reading (a 22-bit tag match:
    /// the key's older version, rarely another key's).
    pub dropped_by_write: u64,
    /// Flash slots dropped because their stripe outgrew their hash bits.
    pub dropped_by_growth: u64,
    /// Reads handed to the I/O threads, requests that waited for a read
    /// already in flight, and reads in flight now (`extstore_io_queue`).
    pub reads_async: u64,
    pub reads_coalesced: u64,
    pub io_queue: u64,
    /// RAM the tier costs: its slots in the index (their share of it) and
    /// its region bookkeeping.
    pub ram_bytes: u64,
}

/// `-f` and `-n`: how the bands are cut.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeClasses {
    /// `-f`: each band's bound is this many times the previous one's.
    pub growth_factor: f64,
    /// `-n`: bytes of key, value and flags in the smallest band.
    pub min_size: usize,
}

impl Default for SizeClasses {
    fn default() -> SizeClasses {
        SizeClasses { growth_factor: 1.25, min_size: 48 }
    }
}

/// What a plain read of a key on flash came to (`Worker::read_flash`, `tier/read.rs`).
pub(crate) enum FlashRead {
    /// Served from flash, the item left there.
    Hit(FlashHit),
    /// Every `ext_recache_rate`th read brings its item back: the read's
    /// own choice, which it may drop if there is no memory for it.
    Recache,
    /// To be brought back first (a change to make, a dead or damaged
    /// record, a region reclaimed meanwhile), or a miss.
    Settle,
}

/// A plain read served from flash without bringing the item back: the
/// reader's view but for its key and value, which are in the worker's
/// flash buffer (at `key` and `value`).
pub(crate) struct FlashHit {
    pub view: ItemView<'static>,
    pub key: std::ops::Range<usize>,
    pub value: std::ops::Range<usize>,
}
