//! memcached's run-time tuning commands (`slabs`, `lru`, `lru_crawler
//! crawl|sleep|tocrawl|enable|disable`, `extstore`): the settings they
//! change, what each does here, and the LRU crawler's thread.
//!
//! strata has no slab classes, no hot/warm/cold LRUs and no slab mover, so
//! most of these settings have nothing to steer: they are checked as
//! memcached checks them, answered as memcached answers, recorded, and
//! reported by `stats settings`, so that operators' scripts run unchanged.
//! What does act: `lru_crawler crawl` walks the index on its own thread and
//! unlinks expired items (`strata_store::Worker::crawl`), paced by `sleep`
//! and bounded by `tocrawl`; `lru_crawler disable` turns it and the
//! metadump off as in memcached; `extstore item_size|item_age|recache_rate`
//! change the flash tier. docs/protocol.md lists each command.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::Arc;
use strata_protocol::reply::text as r;

use parking_lot::Mutex;
use strata_protocol::text::admin::{AutomoveParam, ExtSetting, Tune};
use strata_store::Store;

use crate::config::{Recorded, TuningConfig};

/// The settings as the commands left them.
#[derive(Debug)]
pub(crate) struct Tuning {
    pub crawler: AtomicBool,
    pub crawler_sleep_us: AtomicU32,
    pub crawler_tocrawl: AtomicU32,
    /// A crawl is running.
    pub crawling: AtomicBool,
    /// Crawls started (memcached's `lru_crawler_starts`).
    pub crawler_starts: AtomicU64,
    pub slab_automove: AtomicU32,
    /// The other recorded settings, by memcached's `stats settings` name.
    pub recorded: Mutex<Recorded>,
    /// [`TuningConfig::no_effect`].
    pub no_effect: Vec<&'static str>,
    /// memcached's `oldest_live`, for `stats settings`' `oldest`: the
    /// relative time before which `flush_all` invalidated items (0: no
    /// flush yet).
    pub oldest_live: AtomicU32,
}

impl Recorded {
    fn note_ext(&mut self, name: &'static str, value: String) {
        self.ext.retain(|(n, _)| *n != name);
        self.ext.push((name, value));
    }
}

impl Tuning {
    pub(crate) fn new(cfg: &TuningConfig) -> Tuning {
        Tuning {
            crawler: AtomicBool::new(cfg.crawler),
            crawler_sleep_us: AtomicU32::new(cfg.crawler_sleep_us),
            crawler_tocrawl: AtomicU32::new(cfg.crawler_tocrawl),
            crawling: AtomicBool::new(false),
            crawler_starts: AtomicU64::new(0),
            slab_automove: AtomicU32::new(cfg.slab_automove),
            recorded: Mutex::new(cfg.recorded.clone()),
            no_effect: cfg.no_effect.clone(),
            oldest_live: AtomicU32::new(0),
        }
    }
}

/// Carries out `t` and gives memcached's reply. `lru_maintainer` is
/// whether the background reclaimer runs (memcached answers `lru mode`
/// and `lru temp_ttl` only with its LRU maintainer thread).
pub(crate) fn tune(store: &Arc<Store>, tuning: &Arc<Tuning>, lru_maintainer: bool, t: Tune) -> &'static [u8] {
    let mut rec = tuning.recorded.lock();
    match t {
        Tune::SlabsAutomove(level) => tuning.slab_automove.store(level, Relaxed),
        Tune::SlabsAutomoveParam(AutomoveParam::Ratio, v) => rec.slab_automove_ratio = v,
        Tune::SlabsAutomoveParam(AutomoveParam::FreeRatio, v) => rec.slab_automove_freeratio = v,
        Tune::SlabsAutomoveParam(AutomoveParam::Window, v) => rec.slab_automove_window = v,
        Tune::SlabsReassign(ids) => return reassign(store, rec.slab_reassign, ids),
        Tune::Crawl { classes } => {
            drop(rec);
            return crawl(store, tuning, classes);
        }
        Tune::CrawlerSleep(us) => tuning.crawler_sleep_us.store(us, Relaxed),
        Tune::CrawlerToCrawl(n) => tuning.crawler_tocrawl.store(n, Relaxed),
        Tune::CrawlerEnable(on) => {
            // memcached answers an enable of a running crawler with this
            // (its thread start fails); a disable always succeeds.
            if on && tuning.crawler.swap(true, Relaxed) {
                return r::CRAWLER_START_FAILED;
            }
            tuning.crawler.store(on, Relaxed);
        }
        Tune::LruSegmented(_) | Tune::LruTempTtl(_) if !lru_maintainer => return r::ERROR,
        Tune::LruSegmented(on) => rec.lru_segmented = on,
        // A negative TTL turns the temporary LRU off and keeps the TTL.
        Tune::LruTempTtl(ttl) if ttl < 0 => rec.temp_lru = false,
        Tune::LruTempTtl(ttl) => (rec.temp_lru, rec.temporary_ttl) = (true, ttl),
        Tune::LruTune { hot_pct, warm_pct, hot_factor, warm_factor } => {
            (rec.hot_lru_pct, rec.warm_lru_pct) = (hot_pct, warm_pct);
            (rec.hot_max_factor, rec.warm_max_factor) = (hot_factor, warm_factor);
        }
        Tune::Extstore(setting, v) => extstore(store, &mut rec, setting, v),
    }
    r::OK
}

/// `extstore <setting> <value>`: what the flash tier has, it takes (a
/// no-op without one, and still `OK`, as memcached built with extstore
/// answers); the rest is recorded.
fn extstore(store: &Store, rec: &mut Recorded, setting: ExtSetting, v: f64) {
    // Parsed as a u32 for every setting but max_frag.
    let n = v as u32;
    match setting {
        ExtSetting::ItemSize => store.set_flash_min_item(n as usize),
        ExtSetting::ItemAge => store.set_flash_item_age(n),
        ExtSetting::RecacheRate => store.set_flash_recache_rate(n),
        ExtSetting::LowTtl => rec.note_ext("ext_low_ttl", n.to_string()),
        ExtSetting::CompactUnder => rec.note_ext("ext_compact_under", n.to_string()),
        ExtSetting::DropUnder => rec.note_ext("ext_drop_under", n.to_string()),
        ExtSetting::MaxSleep => rec.note_ext("ext_max_sleep", n.to_string()),
        ExtSetting::MaxFrag => rec.note_ext("ext_max_frag", format!("{v:.2}")),
        ExtSetting::DropUnread => rec.note_ext("ext_drop_unread", if n != 0 { "yes" } else { "no" }.into()),
        ExtSetting::FreeMemchunks => {}
    }
}

/// `slabs reassign <src> <dst>`: memcached's replies. Off (`stats settings`
/// says `slab_reassign no` unless `-o slab_reassign`), its refusal; on, its
/// checks of the class ids (0, memcached's page pool, up to the largest
/// class), and then what memcached says of a class with fewer than two
/// pages: memory is not divided by size here, so no class ever has a page
/// to give.
fn reassign(store: &Store, on: bool, ids: Option<(i64, i64)>) -> &'static [u8] {
    if !on {
        return r::REASSIGN_DISABLED;
    }
    let Some((src, dst)) = ids else { return r::BAD_FORMAT };
    let largest = store.size_bands().len() as i64;
    if !(0..=largest).contains(&src) || !(0..=largest).contains(&dst) {
        return r::REASSIGN_BADCLASS;
    }
    if src == dst {
        return r::REASSIGN_SAME;
    }
    r::REASSIGN_NOSPARE
}

/// Marks the crawl over when dropped.
struct Crawling(Arc<Tuning>);

impl Drop for Crawling {
    fn drop(&mut self) {
        self.0.crawling.store(false, Relaxed);
    }
}

/// `lru_crawler crawl <classes>`: starts a crawl on its own thread and
/// answers at once, as memcached does.
fn crawl(store: &Arc<Store>, tuning: &Arc<Tuning>, classes: u64) -> &'static [u8] {
    if !tuning.crawler.load(Relaxed) {
        return r::CRAWLER_DISABLED;
    }
    let bands = store.size_bands();
    let with_items = bands.iter().enumerate().filter(|(i, b)| b.items > 0 && classes & (1 << (i + 1)) != 0).count();
    // memcached starts a crawler per class asked for and answers OK,
    // finding nothing in an empty one (its NOTSTARTED means every class
    // asked for was still being crawled): no crawl is needed here.
    if with_items == 0 {
        return r::OK;
    }
    if tuning.crawling.swap(true, Relaxed) {
        return r::CRAWLER_BUSY;
    }
    tuning.crawler_starts.fetch_add(with_items as u64, Relaxed);
    let limit = u64::from(tuning.crawler_tocrawl.load(Relaxed)) * with_items as u64;
    let (store, tuning2) = (store.clone(), tuning.clone());
    let spawned = std::thread::Builder::new().name("strata-crawler".into()).spawn(move || {
        // The crawl is over when this thread ends, however it ends (a
        // panic included): otherwise every later crawl would be BUSY.
        let _done = Crawling(tuning2.clone());
        let mut worker = store.worker();
        let mut left = limit;
        for stripe in 0..worker.stripes() {
            let done = worker.crawl(stripe, classes, left);
            if limit != 0 {
                left = left.saturating_sub(done.checked);
                if left == 0 {
                    break;
                }
            }
            let pause = tuning2.crawler_sleep_us.load(Relaxed);
            if pause > 0 {
                std::thread::sleep(std::time::Duration::from_micros(u64::from(pause)));
            }
        }
    });
    match spawned {
        Ok(_) => r::OK,
        Err(e) => {
            tracing::warn!(error = %e, "lru_crawler: no crawler thread");
            tuning.crawling.store(false, Relaxed);
            r::CRAWLER_FAILED
        }
    }
}
