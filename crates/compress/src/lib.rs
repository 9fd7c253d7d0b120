//! Value compression for the store: zstd with dictionaries trained online
//! from the values themselves, and the decision whether a value is stored
//! compressed at all. No I/O, no networking, no knowledge of items: the
//! store hands values in and gets stored forms out.
//!
//! Why dictionaries: cached values are mostly small JSON, HTML fragments or
//! serialized objects, with a lot of structure shared *across* values and
//! little inside one. zstd on one 170-byte object alone gains ~1.2×; with a
//! dictionary trained on a few MB of sampled values, ~2.5× (figures in
//! `../shared/ANCHORS.md`).
//!
//! A compressed value's stored form:
//!
//! ```text
//!  0                          1 (or 2)
//! +------------+-------------+------------------------------------------+
//! | header (2) | dict id (6) | [FHD] [window] content size  zstd blocks |
//! +------------+-------------+------------------------------------------+
//!   bits 7-6     bits 5-0      a magicless zstd frame, no dict id, no
//!                              checksum; its first byte (the frame header
//!                              descriptor, FHD) is left out unless the
//!                              header bits are 3
//! ```
//!
//! Dictionary id 0 is "no dictionary" (plain zstd, until the first one is
//! trained); ids 1–63 name trained ones. The frame keeps zstd's content
//! size field, which tells a reader that reports a size (`mg s`, `VALUE …
//! <bytes>`) the original length without decompressing: 1 byte under 256
//! bytes, 2 up to 64 KiB, 4 beyond, and since the frame then fits one
//! window zstd leaves out the window byte. The FHD of such a frame says
//! only that (single segment, no dictionary id, no checksum, the size
//! field's width), so the top two bits of the first byte carry it: 0, 1, 2
//! for a 1-, 2- or 4-byte size; 3 when any other FHD follows in full. Every
//! other optional field zstd would add is dropped (magic number, dictionary
//! id, checksum): 9–15 bytes less than zstd's default frame on a 60-byte
//! frame, which is 15–25% of a 170-byte JSON object compressed with a
//! dictionary, and each byte is ~1% of the items a cache holds.
//!
//! Dictionaries ([`Codec`]): values of at least `min_size` bytes are
//! sampled (one in `sample_one_in`) until `train_bytes` are held, then a
//! dictionary of `dict_size` bytes is trained (on a thread of its own in the
//! server: [`Codec::spawn_trainer`]; synchronously with
//! [`Codec::train_now`]) and becomes the one new values use. Each stored
//! form references its dictionary from the moment [`Ctx::compress`] makes
//! it; the store takes references of its own with [`Codec::retain`] (one
//! per segment holding such values) and gives them back with
//! [`Codec::release`], and a dictionary that is no longer current is
//! dropped once nothing references it. Its id
//! is then free, but ids are handed out round-robin, so one comes back only
//! after 62 others. When the ratio new values get falls well below the
//! ratio measured when the current dictionary was trained, sampling starts
//! again and a new dictionary replaces it.
//!
//! Per-thread state ([`Ctx`]): zstd's compression and decompression
//! contexts, which are not shareable; one per worker.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use zstd::zstd_safe::{self, CCtx, CDict, CParameter, DCtx, DDict, DParameter, FrameFormat};

mod ctx;
mod frame;

pub use ctx::Ctx;
use frame::*;
pub use frame::{dict_id, original_len};

/// Dictionary id of values compressed without a dictionary.
pub const NO_DICT: u8 = 0;

/// Dictionary ids are 0 ([`NO_DICT`]) to this: six bits of the stored
/// form's first byte.
pub const MAX_DICT_ID: u8 = 63;

/// The FHDs the stored form's header bits 0, 1 and 2 stand for: single
/// segment, a 1-, 2- or 4-byte content size, nothing else.
const IMPLIED_FHD: [u8; 3] = [0x20, 0x60, 0xa0];

/// Header bits 3: the frame's FHD follows in full.
const FULL_FHD: u8 = 3;

/// What can go wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CompressError {
    /// The stored form is cut short or its length prefix is malformed.
    #[error("compressed value is malformed")]
    Malformed,
    /// The value names a dictionary that is not loaded.
    #[error("compressed value names dictionary {0}, which is not loaded")]
    UnknownDict(u8),
    /// zstd refused (corrupt frame, wrong dictionary, size mismatch).
    #[error("zstd: {0}")]
    Zstd(&'static str),
    /// Training found too little to learn from, or zstd's trainer failed.
    #[error("dictionary training failed: {0}")]
    Training(String),
    /// A setting is out of range.
    #[error("invalid compression setting: {0}")]
    Config(&'static str),
}

/// Settings (`-o compression=…` and friends; defaults in [`Config::default`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// zstd level (1–19; 3 is zstd's default and the knee of its speed
    /// curve for small inputs).
    pub level: i32,
    /// Values shorter than this are stored as they are: below ~64 bytes
    /// even a dictionary rarely saves the prefix and frame header.
    pub min_size: usize,
    /// A value is stored compressed only when that saves at least this
    /// percentage of its length (else reading it back costs CPU for little).
    pub min_saving_percent: u8,
    /// Bytes of a trained dictionary. 256 KiB compresses API-response
    /// objects ~4% and pages ~5% better than 64 KiB (docs/benchmarks.md,
    /// the compression settings sweep), for ~1.6 MB of prepared dictionary
    /// and no slower training.
    pub dict_size: usize,
    /// Bytes of sampled values a training learns from.
    pub train_bytes: usize,
    /// One eligible value in this many is sampled.
    pub sample_one_in: u32,
    /// Retrain when new values compress this many percent worse than the
    /// current dictionary did on its held-out samples. 8: an API whose
    /// field names changed to camelCase (`api-change:` in strata-bench)
    /// compressed 11% worse with the old dictionary and was never
    /// retrained at 15, holding 15% fewer objects than a steady stream;
    /// steady streams of objects and pages never retrain at 8
    /// (`docs/benchmarks.md`, "Compression").
    pub retrain_drop_percent: u8,
    /// zstd level the reclaimer stores values again at once they are in a
    /// sealed segment (`strata_store`'s `rezip.rs`); 0, or not above
    /// `level`, for none. Decompressing costs the same at any
    /// level; compressing at 9 costs ~5x level 3, at 19 ~60x.
    pub cold_level: i32,
    /// The share of one core, in percent, that storing values again at
    /// `cold_level` may take on average.
    pub cold_cpu_percent: u8,
    /// The most bytes the cold level's context may take (it is counted in
    /// `-m`); a context found larger once built is let go and not built
    /// again for that dictionary ([`CompressStats::cold_refused`]). Not an
    /// option: the store sets it to a sixteenth of the memory limit, as it
    /// caps the training's samples, so that under a small `-m` the context
    /// does not crowd out the items it was to make room for.
    pub cold_memory_max: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            level: 3,
            min_size: 64,
            min_saving_percent: 10,
            dict_size: 256 << 10,
            train_bytes: 4 << 20,
            sample_one_in: 4,
            retrain_drop_percent: 8,
            cold_level: 0,
            cold_cpu_percent: 10,
            cold_memory_max: usize::MAX,
        }
    }
}

impl Config {
    pub fn validate(&self) -> Result<(), CompressError> {
        if !(1..=19).contains(&self.level) {
            return Err(CompressError::Config("level must be 1 to 19"));
        }
        if self.min_saving_percent >= 100 {
            return Err(CompressError::Config("minimum saving must be under 100%"));
        }
        if self.dict_size < 1024 || self.train_bytes < self.dict_size * 8 {
            return Err(CompressError::Config("dictionary size at least 1 KiB, training bytes at least 8x it"));
        }
        if !(0..=19).contains(&self.cold_level) {
            return Err(CompressError::Config("cold level must be 0 (off) to 19"));
        }
        if !(1..=100).contains(&self.cold_cpu_percent) {
            return Err(CompressError::Config("cold CPU share must be 1 to 100%"));
        }
        if self.sample_one_in == 0 {
            return Err(CompressError::Config("sample rate must be at least one in 1"));
        }
        Ok(())
    }
}

/// Counters for `stats`.
#[derive(Debug, Default)]
struct Counters {
    /// Original bytes of values stored compressed.
    bytes_in: AtomicU64,
    /// Their stored bytes (prefix and frame).
    bytes_out: AtomicU64,
    compressed: AtomicU64,
    /// Tried, did not save enough: stored plain.
    not_worth: AtomicU64,
    /// Looked like random or already compressed bytes: not tried.
    skipped: AtomicU64,
    decompressed: AtomicU64,
    recompressed: AtomicU64,
    recompress_saved: AtomicU64,
    cold_recompressed: AtomicU64,
    cold_saved: AtomicU64,
    cold_refused: AtomicU64,
    trainings: AtomicU64,
    train_us: AtomicU64,
    compress_ns: AtomicU64,
    decompress_ns: AtomicU64,
    /// Since the current dictionary was installed, for drift detection.
    window_in: AtomicU64,
    window_out: AtomicU64,
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompressStats {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub compressed: u64,
    pub not_worth: u64,
    pub skipped: u64,
    pub decompressed: u64,
    pub trainings: u64,
    pub train_us: u64,
    pub compress_us: u64,
    pub decompress_us: u64,
    /// Dictionaries loaded (the current one and any still referenced).
    pub dicts_live: u64,
    /// Their bytes, trained and prepared (zstd's CDict and DDict).
    pub dict_bytes: u64,
    /// Id of the dictionary new values use ([`NO_DICT`] before the first).
    pub current_dict: u8,
    /// Values stored before the current dictionary and stored again with
    /// it ([`Codec::note_recompressed`]), and the bytes that saved.
    pub recompressed: u64,
    pub recompress_saved: u64,
    /// Values stored again at the cold level
    /// ([`Codec::note_recompressed`]), the bytes that saved, and the bytes
    /// of the dictionary prepared at that level.
    pub cold_recompressed: u64,
    pub cold_saved: u64,
    pub cold_dict_bytes: u64,
    /// Dictionaries the cold level was given up for ([`Ctx::refuse_cold`]):
    /// its context took more than [`Config::cold_memory_max`], or its user
    /// found it saves too little to pay for itself.
    pub cold_refused: u64,
    /// Whether values are being sampled for a training.
    pub sampling: bool,
}

/// A dictionary as a snapshot keeps it ([`Codec::export`], [`Codec::import`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SavedDict {
    pub id: u8,
    /// New values were using it.
    pub current: bool,
    /// Its held-out compression ratio, against which drift is measured.
    pub ratio: f64,
    pub bytes: Vec<u8>,
}

/// A trained dictionary, prepared for both directions.
struct Dict {
    cdict: CDict<'static>,
    ddict: DDict<'static>,
    /// Items whose stored form names this dictionary.
    refs: AtomicU64,
    /// Compression ratio on held-out samples when trained.
    ratio: f64,
    /// The trained bytes, kept for snapshots ([`Codec::export`]).
    raw: Box<[u8]>,
}

/// Values kept for the next training.
#[derive(Default)]
struct Sampler {
    data: Vec<u8>,
    sizes: Vec<usize>,
}

/// The shared half: dictionaries, sampling, counters. One per store.
pub struct Codec {
    cfg: Config,
    /// Indexed by id; `None` is free.
    dicts: RwLock<Vec<Option<Arc<Dict>>>>,
    /// Id new values use, and the last id handed out (round-robin).
    current: RwLock<(u8, u8)>,
    /// Bumped whenever a dictionary is installed or dropped: a context's
    /// cached dictionary is good only while this is what it saw, since an
    /// id may name a different dictionary later.
    epoch: AtomicU64,
    /// Whether values are being sampled; checked before anything is
    /// locked, so writers pay one load when no training is due.
    sampling: AtomicBool,
    /// Eligible values offered, to take one in `sample_one_in`.
    offered: AtomicU64,
    sampler: Mutex<Sampler>,
    /// Set while a training is queued or running, so only one is.
    training: AtomicBool,
    trainer: Mutex<Option<std::sync::mpsc::Sender<Samples>>>,
    counters: Counters,
    /// Bytes of the loaded dictionaries (raw and prepared), for
    /// [`Codec::memory`].
    dict_memory: AtomicUsize,
    /// Bytes of dictionaries prepared at the cold level by contexts
    /// ([`Ctx::compress_cold`]), for [`Codec::memory`].
    cold_memory: AtomicUsize,
}

/// A batch of samples handed to the trainer.
struct Samples {
    data: Vec<u8>,
    sizes: Vec<usize>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec").field("cfg", &self.cfg).field("stats", &self.stats()).finish()
    }
}

impl Codec {
    pub fn new(cfg: Config) -> Result<Arc<Codec>, CompressError> {
        cfg.validate()?;
        let mut dicts = Vec::with_capacity(usize::from(MAX_DICT_ID) + 1);
        dicts.resize_with(usize::from(MAX_DICT_ID) + 1, || None);
        Ok(Arc::new(Codec {
            cfg,
            dicts: RwLock::new(dicts),
            current: RwLock::new((NO_DICT, NO_DICT)),
            epoch: AtomicU64::new(0),
            sampling: AtomicBool::new(true),
            offered: AtomicU64::new(0),
            sampler: Mutex::new(Sampler::default()),
            training: AtomicBool::new(false),
            trainer: Mutex::new(None),
            counters: Counters::default(),
            dict_memory: AtomicUsize::new(0),
            cold_memory: AtomicUsize::new(0),
        }))
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Starts the thread that trains dictionaries as samples fill, so no
    /// writer ever waits for a training (hundreds of milliseconds for a few
    /// MB of samples). Without it, trainings happen only on
    /// [`Codec::train_now`].
    pub fn spawn_trainer(self: &Arc<Codec>) -> std::io::Result<()> {
        let (tx, rx) = std::sync::mpsc::channel::<Samples>();
        let weak = Arc::downgrade(self);
        std::thread::Builder::new().name("strata-dict-trainer".into()).spawn(move || {
            while let Ok(s) = rx.recv() {
                let Some(codec) = weak.upgrade() else { return };
                // A failed training leaves the current dictionary in place;
                // sampling starts again and a later one may succeed.
                let _ = codec.train_from(&s);
                codec.training.store(false, Relaxed);
            }
        })?;
        *self.trainer.lock() = Some(tx);
        Ok(())
    }

    /// Trains a dictionary from the samples held now, synchronously, and
    /// makes it current. False if too few samples are held.
    pub fn train_now(&self) -> Result<bool, CompressError> {
        let samples = {
            let mut s = self.sampler.lock();
            if s.sizes.len() < 16 {
                return Ok(false);
            }
            Samples { data: std::mem::take(&mut s.data), sizes: std::mem::take(&mut s.sizes) }
        };
        self.train_from(&samples)?;
        Ok(true)
    }

    /// Starts sampling values for a new dictionary (done by itself when
    /// the ratio drifts; an operator may ask for it too).
    pub fn start_sampling(&self) {
        self.sampling.store(true, Relaxed);
    }

    /// Offers a value the store is about to write, for sampling.
    fn sample(&self, value: &[u8]) {
        if !self.sampling.load(Relaxed) {
            return;
        }
        if !(self.offered.fetch_add(1, Relaxed) + 1).is_multiple_of(u64::from(self.cfg.sample_one_in)) {
            return;
        }
        let mut s = self.sampler.lock();
        if s.data.len() < self.cfg.train_bytes {
            s.data.extend_from_slice(value);
            s.sizes.push(value.len());
            if s.data.len() < self.cfg.train_bytes {
                return;
            }
        }
        // A training's worth is held: it goes to the trainer if there is one
        // and it is idle; otherwise it stays (and grows no more) for
        // `train_now` or a later offer.
        let Some(tx) = self.trainer.lock().clone() else { return };
        if self.training.swap(true, Relaxed) {
            return;
        }
        let samples = Samples { data: std::mem::take(&mut s.data), sizes: std::mem::take(&mut s.sizes) };
        drop(s);
        if tx.send(samples).is_ok() {
            self.sampling.store(false, Relaxed);
        } else {
            self.training.store(false, Relaxed);
        }
    }

    /// Trains on `s` (every tenth sample held out to measure the ratio) and
    /// installs the result as the current dictionary.
    fn train_from(&self, s: &Samples) -> Result<u8, CompressError> {
        let started = Instant::now();
        let (mut train, mut train_sizes, mut held, mut held_sizes) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut at = 0;
        for (i, &n) in s.sizes.iter().enumerate() {
            let Some(v) = s.data.get(at..at + n) else { return Err(CompressError::Malformed) };
            at += n;
            if i % 10 == 9 {
                held.extend_from_slice(v);
                held_sizes.push(n);
            } else {
                train.extend_from_slice(v);
                train_sizes.push(n);
            }
        }
        let bytes = zstd::dict::from_continuous(&train, &train_sizes, self.cfg.dict_size)
            .map_err(|e| CompressError::Training(e.to_string()))?;
        let dict = self.prepare(bytes.into_boxed_slice(), 1.0);
        let ratio = held_out_ratio(&self.cfg, &dict, &held, &held_sizes)?;
        let dict = Arc::new(Dict { ratio, ..dict });
        let id = self.install(dict)?;
        add(&self.counters.trainings, 1);
        add(&self.counters.train_us, started.elapsed().as_micros() as u64);
        Ok(id)
    }

    fn prepare(&self, raw: Box<[u8]>, ratio: f64) -> Dict {
        Dict {
            cdict: CDict::create(&raw, self.cfg.level),
            ddict: DDict::create(&raw),
            refs: AtomicU64::new(0),
            ratio,
            raw,
        }
    }

    /// The loaded dictionaries, for a snapshot: values stored compressed
    /// name their dictionary by id, so a restored store needs the same
    /// bytes under the same ids.
    pub fn export(&self) -> Vec<SavedDict> {
        let current = self.current.read().0;
        let dicts = self.dicts.read();
        (1..=MAX_DICT_ID)
            .filter_map(|id| {
                let d = dicts.get(usize::from(id))?.as_ref()?;
                Some(SavedDict { id, current: id == current, ratio: d.ratio, bytes: d.raw.to_vec() })
            })
            .collect()
    }

    /// Loads a dictionary from a snapshot under its old id, holding one
    /// reference for the caller (given back with [`Codec::release`] once
    /// the restored segments hold theirs). The current one is current
    /// again, so values written after a restart keep using it.
    pub fn import(&self, saved: &SavedDict) -> Result<(), CompressError> {
        if saved.id == NO_DICT || saved.id > MAX_DICT_ID || saved.bytes.is_empty() {
            return Err(CompressError::Malformed);
        }
        let dict = Arc::new(self.prepare(saved.bytes.clone().into_boxed_slice(), saved.ratio));
        dict.refs.store(1, SeqCst);
        let mut dicts = self.dicts.write();
        let mut cur = self.current.write();
        let slot = &mut dicts[usize::from(saved.id)];
        if slot.is_some() {
            return Err(CompressError::Malformed);
        }
        self.dict_memory.fetch_add(memory_of(&dict), Relaxed);
        *slot = Some(dict);
        if saved.current {
            *cur = (saved.id, saved.id);
            // A restored dictionary is as good as when it was trained:
            // sample again only when values drift from it.
            self.sampling.store(false, Relaxed);
        }
        self.epoch.fetch_add(1, SeqCst);
        Ok(())
    }

    /// Makes `dict` current under the next free id, and drops the previous
    /// current one if nothing references it.
    fn install(&self, dict: Arc<Dict>) -> Result<u8, CompressError> {
        let mut dicts = self.dicts.write();
        let mut cur = self.current.write();
        let n = u16::from(MAX_DICT_ID);
        let id = (1..=n)
            .map(|k| ((u16::from(cur.1) + k - 1) % n + 1) as u8)
            .find(|&id| dicts[id as usize].is_none())
            .ok_or(CompressError::Training("all 63 dictionary ids are referenced".into()))?;
        self.dict_memory.fetch_add(memory_of(&dict), Relaxed);
        dicts[id as usize] = Some(dict);
        let old = std::mem::replace(&mut cur.0, id);
        cur.1 = id;
        // The epoch moves before the count is read: see `Ctx::compress`.
        self.epoch.fetch_add(1, SeqCst);
        if old != NO_DICT && dicts[old as usize].as_ref().is_some_and(|d| d.refs.load(SeqCst) == 0) {
            self.forget(&mut dicts, old);
        }
        // What was sampled was for this training; sample again only when
        // the ratio drifts, and from new values: samples that came in
        // while this one trained would otherwise be held (and counted in
        // `memory`) until then.
        self.sampling.store(false, Relaxed);
        *self.sampler.lock() = Sampler::default();
        self.counters.window_in.store(0, Relaxed);
        self.counters.window_out.store(0, Relaxed);
        Ok(id)
    }

    /// One more reference to dictionary `id`, for a holder other than the
    /// stored form [`Ctx::compress`] made (the store counts one per segment
    /// holding values that name it). Only a caller that already holds a
    /// reference may take another, so the dictionary cannot be dropped
    /// meanwhile. False if `id` is not loaded.
    pub fn retain(&self, id: u8) -> bool {
        id == NO_DICT
            || self
                .dicts
                .read()
                .get(usize::from(id))
                .and_then(Option::as_ref)
                .map(|d| d.refs.fetch_add(1, SeqCst))
                .is_some()
    }

    /// Gives back a reference to dictionary `id` ([`Ctx::compress`]'s or
    /// [`Codec::retain`]'s). The last reference to a dictionary that is no
    /// longer current frees it.
    pub fn release(&self, id: u8) {
        if id == NO_DICT {
            return;
        }
        let last = match self.dicts.read().get(usize::from(id)).and_then(Option::as_ref) {
            Some(d) => d.refs.fetch_sub(1, SeqCst) == 1,
            None => false,
        };
        if last {
            let mut dicts = self.dicts.write();
            let cur = self.current.read();
            // The epoch moves before the count is read again (see
            // `Ctx::compress`), and it is read again because a writer may
            // have taken a reference meanwhile, or it may be current.
            self.epoch.fetch_add(1, SeqCst);
            if cur.0 != id && dicts[id as usize].as_ref().is_some_and(|d| d.refs.load(SeqCst) == 0) {
                self.forget(&mut dicts, id);
            }
        }
    }

    /// Drops dictionary `id` from the table (the caller found it unused).
    fn forget(&self, dicts: &mut [Option<Arc<Dict>>], id: u8) {
        if let Some(d) = dicts[id as usize].take() {
            self.dict_memory.fetch_sub(memory_of(&d), Relaxed);
        }
    }

    /// Bytes the codec holds that grow with use: loaded dictionaries and
    /// the samples kept for the next training. The store counts them in
    /// its memory limit, as it does its index.
    pub fn memory(&self) -> usize {
        self.dict_memory.load(Relaxed) + self.cold_memory.load(Relaxed) + self.sampler.lock().data.capacity()
    }

    pub fn stats(&self) -> CompressStats {
        let c = &self.counters;
        let dicts = self.dicts.read();
        let live: Vec<&Arc<Dict>> = dicts.iter().flatten().collect();
        CompressStats {
            bytes_in: c.bytes_in.load(Relaxed),
            bytes_out: c.bytes_out.load(Relaxed),
            compressed: c.compressed.load(Relaxed),
            not_worth: c.not_worth.load(Relaxed),
            skipped: c.skipped.load(Relaxed),
            decompressed: c.decompressed.load(Relaxed),
            trainings: c.trainings.load(Relaxed),
            train_us: c.train_us.load(Relaxed),
            compress_us: c.compress_ns.load(Relaxed) / 1000,
            decompress_us: c.decompress_ns.load(Relaxed) / 1000,
            dicts_live: live.len() as u64,
            dict_bytes: live.iter().map(|d| memory_of(d) as u64).sum(),
            current_dict: self.current.read().0,
            recompressed: c.recompressed.load(Relaxed),
            recompress_saved: c.recompress_saved.load(Relaxed),
            cold_recompressed: c.cold_recompressed.load(Relaxed),
            cold_saved: c.cold_saved.load(Relaxed),
            cold_refused: c.cold_refused.load(Relaxed),
            cold_dict_bytes: self.cold_memory.load(Relaxed) as u64,
            sampling: self.sampling.load(Relaxed),
        }
    }

    /// The id of the dictionary new values use ([`NO_DICT`] before the
    /// first is trained).
    pub fn current_id(&self) -> u8 {
        self.current.read().0
    }

    /// Counts a value stored again with the current dictionary (at the
    /// cold level if `cold`), `saved` bytes smaller than before (for
    /// `stats`).
    pub fn note_recompressed(&self, saved: u64, cold: bool) {
        let c = &self.counters;
        let (n, bytes) =
            if cold { (&c.cold_recompressed, &c.cold_saved) } else { (&c.recompressed, &c.recompress_saved) };
        add(n, 1);
        add(bytes, saved);
    }

    /// Whether values are stored again at a higher level once cold
    /// ([`Config::cold_level`]).
    pub fn cold_on(&self) -> bool {
        self.cfg.cold_level > self.cfg.level
    }

    /// Compares the ratio since the current dictionary was installed with
    /// the ratio it was trained to; starts sampling for a new one if it fell.
    fn check_drift(&self, id: u8, ratio_trained: f64) {
        let c = &self.counters;
        let (inb, outb) = (c.window_in.load(Relaxed), c.window_out.load(Relaxed));
        // Judge only on enough data: a training's worth of values.
        if id == NO_DICT || inb < self.cfg.train_bytes as u64 || outb == 0 {
            return;
        }
        let now = inb as f64 / outb as f64;
        if now < ratio_trained * (100 - self.cfg.retrain_drop_percent) as f64 / 100.0 && !self.training.load(Relaxed) {
            self.sampling.store(true, Relaxed);
        }
        c.window_in.store(0, Relaxed);
        c.window_out.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests;
