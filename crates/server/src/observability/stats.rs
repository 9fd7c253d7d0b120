//! The `stats` family: general, `settings`, `items`, `slabs`, `conns`,
//! `reset`, with memcached's field names where the meaning matches.
//!
//! Each group is filled in as a structured [`Snapshot`] (name, kind, help,
//! value); the text and binary protocols render it
//! ([`strata_protocol::stats`]), so no wire parses another's output.
//!
//! Segments replace slab classes: `stats slabs` and `stats items` report
//! a row per size band (the store's `bands.rs`: memcached's class sizes for
//! the same `-f` and `-n`), whose pages are the segments holding items of
//! that size; `docs/protocol.md` spells out the mapping.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use strata_protocol::stats::{Reply, Snapshot, Value};
use strata_protocol::text::Tokens;

pub(crate) use super::counters::WorkerStats;
use super::counters::WORKER_FIELDS;
use super::settings::settings;
use crate::{ConnState, Shared};

/// The version `version` and `stats` report: the memcached release whose
/// protocol strata implements, and nothing else, because clients parse it
/// (node's `memcached` takes the last three numbers of the line, so a
/// suffix like `-strata-0.1.0` read as version 0.1.0). strata's own version
/// is `stats`' `strata_version`.
pub(crate) const VERSION: &str = "1.6.38";

/// strata's own version (`strata -V`, `stats` → `strata_version`).
pub(crate) const STRATA_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The worker counter `name` of [`WORKER_FIELDS`], summed, where `stats`
/// shows it apart from the run of the others.
fn worker_counter(s: &mut Snapshot, shared: &Shared, name: &str) {
    if let Some(&(name, help, _, f)) = WORKER_FIELDS.iter().find(|f| f.0 == name) {
        s.counter(name, help, sum(shared, f));
    }
}

fn sum(shared: &Shared, f: fn(&WorkerStats) -> &AtomicU64) -> u64 {
    shared.workers.iter().map(|w| f(w).load(Relaxed)).sum()
}

fn rusage() -> (f64, f64) {
    // Read from /proc to avoid a libc dependency for one call.
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return (0.0, 0.0) };
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    (ticks(11), ticks(12))
}

/// Runs a `stats` command: the snapshot of a group, or what to answer.
pub(crate) fn command(shared: &Shared, args: Tokens<'_>) -> Reply {
    let args: Vec<&[u8]> = args.iter().collect();
    let snapshot = match args.first().copied() {
        None => general(shared),
        Some(b"reset") => {
            for w in &shared.workers {
                for (_, _, _, f) in WORKER_FIELDS {
                    f(w).store(0, Relaxed);
                }
            }
            shared.total_conns.store(0, Relaxed);
            shared.rejected_conns.store(0, Relaxed);
            shared.store.reset_stats();
            shared.detail.clear();
            return Reply::Reset;
        }
        Some(b"settings") => settings(shared),
        Some(b"items") => items(shared),
        Some(b"slabs") => slabs(shared),
        Some(b"conns") => conns(shared),
        Some(b"sizes") => sizes(shared),
        Some(b"sizes_enable") | Some(b"sizes_disable") => {
            shared.store.track_sizes(args.first() == Some(&&b"sizes_enable"[..]));
            return Reply::Unterminated(sizes_status(shared));
        }
        Some(b"extstore") => extstore(shared),
        Some(b"detail") => {
            // memcached ignores anything after the subcommand.
            return match args.get(1).copied() {
                Some(b"on") => {
                    shared.detail.set_enabled(true);
                    Reply::Done
                }
                Some(b"off") => {
                    shared.detail.set_enabled(false);
                    Reply::Done
                }
                Some(b"dump") => Reply::Lines("detailed", shared.detail.dump()),
                _ => Reply::Usage(strata_protocol::reply::text::DETAIL_USAGE),
            };
        }
        Some(_) => return Reply::Unknown,
    };
    Reply::Stats(snapshot)
}

/// What `/metrics` is made from: `stats`, `stats settings`, `stats items`
/// (memcached_exporter's per-class series) and `stats slabs`
/// (`total_malloced`).
pub(crate) fn for_metrics(shared: &Shared) -> Vec<Snapshot> {
    vec![general(shared), settings(shared), items(shared), slabs(shared)]
}

fn general(shared: &Shared) -> Snapshot {
    let clock = shared.store.clock();
    let st = shared.store.stats();
    let (user, sys) = rusage();
    let mut s = Snapshot::default();
    s.info("pid", "Process id.", std::process::id());
    s.counter("uptime", "Seconds since the server started.", shared.uptime().as_secs());
    s.gauge("time", "The server's unix time.", clock.unix_now());
    s.info("version", "The memcached release whose protocol this implements.", VERSION);
    s.info("strata_version", "strata's own version.", STRATA_VERSION);
    s.info("pointer_size", "Bits in a pointer.", usize::BITS);
    s.counter("rusage_user", "User CPU seconds.", Value::Seconds(user));
    s.counter("rusage_system", "System CPU seconds.", Value::Seconds(sys));
    s.gauge("max_connections", "Connection limit (-c).", shared.cfg.max_conns);
    s.gauge("curr_connections", "Open client connections.", shared.curr_conns.load(Relaxed));
    s.counter("total_connections", "Connections accepted.", shared.total_conns.load(Relaxed));
    s.counter("rejected_connections", "Connections refused over the limit.", shared.rejected_conns.load(Relaxed));
    let structures = shared.curr_conns.load(Relaxed) + shared.listeners().len();
    s.gauge("connection_structures", "Connections and listeners.", structures);
    for &(name, help, _, f) in WORKER_FIELDS.iter().filter(|f| f.2) {
        s.counter(name, help, sum(shared, f));
    }
    s.counter("get_expired", "Reads that found the item expired.", st.get_expired);
    s.counter("get_flushed", "Reads that found the item invalidated by flush_all.", st.get_flushed);
    s.gauge("limit_maxbytes", "Memory limit in bytes (-m, or cache_memlimit).", st.memory_limit);
    s.gauge(
        "accepting_conns",
        "1 while the listeners accept connections (0 in a graceful stop).",
        u64::from(shared.run.get() == crate::Run::Serving),
    );
    s.info("threads", "Worker threads (-t).", shared.cfg.threads);
    worker_counter(&mut s, shared, "conn_yields");
    s.gauge("hash_power_level", "log2 of the index's buckets now.", st.hash_power);
    s.gauge("hash_bytes", "Bytes of the index.", st.index_bytes);
    // A stripe of the index grows at once, under its lock: never midway
    // when stats can look.
    s.gauge("hash_is_expanding", "Always 0: the index grows a stripe at a time, under its lock.", 0u64);
    s.gauge(
        "slab_global_page_pool",
        "Free segments, not yet holding items (memcached's pages in no class).",
        st.segments_free,
    );
    s.gauge("bytes", "Bytes of the items stored (header, key, value).", st.bytes);
    s.gauge("curr_items", "Items stored.", st.curr_items);
    s.counter("total_items", "Items stored since start.", st.total_items);
    let w = &shared.watchers;
    s.counter("log_worker_written", "Events logged for watch.", w.written.load(Relaxed));
    s.counter("log_watcher_skipped", "Event lines lost to watchers too slow to read them.", w.skipped.load(Relaxed));
    s.counter("log_watcher_sent", "Event lines handed to watchers.", w.sent.load(Relaxed));
    s.gauge("log_watchers", "Connections in watch.", w.count());
    s.counter("expired_unfetched", "Expired items reclaimed that were never read.", st.expired_unfetched);
    s.counter("evicted_unfetched", "Evicted items that were never read.", st.evicted_unfetched);
    s.counter("evictions", "Live items evicted to free memory.", st.evictions);
    s.counter("reclaimed", "Expired items whose memory was reused.", st.expired_unlinked);
    let t = &shared.tuning;
    s.gauge("lru_crawler_running", "1 while a crawl (lru_crawler crawl) runs.", u64::from(t.crawling.load(Relaxed)));
    s.counter("lru_crawler_starts", "Classes crawls were started for.", t.crawler_starts.load(Relaxed));
    let (checked, reclaimed) = shared.store.crawler_totals();
    s.counter("crawler_reclaimed", "Expired items the crawler unlinked.", reclaimed);
    s.counter("crawler_items_checked", "Items the crawler looked at.", checked);
    strata_memory(&mut s, shared, &st);
    if let Some(tls) = &shared.tls {
        s.counter("ssl_handshake_errors", "TLS handshakes that failed.", tls.handshake_errors.load(Relaxed));
        let loaded = i64::try_from(tls.loaded_at.load(Relaxed)).unwrap_or(i64::MAX);
        let since = clock.unix_now().saturating_sub(loaded).max(0);
        s.gauge("time_since_server_cert_refresh", "Seconds since the certificates were loaded.", since);
    }
    compression(&mut s, &st);
    flash(&mut s, &st);
    snapshots(&mut s, shared);
    s
}

/// strata's own figures after memcached's: segments, reclaim and the
/// cleaner, write amplification, dead and idle bytes, and the worker
/// counters strata adds.
fn strata_memory(s: &mut Snapshot, shared: &Shared, st: &strata_store::StoreStats) {
    s.info("strata_segment_size", "Bytes per segment.", st.segment_size);
    s.gauge("strata_segments_total", "Segments the memory reserve holds.", st.segments_total);
    s.gauge("strata_segments_free", "Segments on the free list.", st.segments_free);
    s.counter("strata_segments_evicted", "Segments freed by evicting live items.", st.segments_evicted);
    s.counter("strata_segments_reclaimed", "Segments freed without evicting.", st.segments_reclaimed);
    s.counter("strata_items_reinserted", "Items copied forward by eviction or the cleaner.", st.reinserted);
    s.counter(
        "strata_overwritten_in_place",
        "Overwrites written over the old version of their key, which left no dead version behind.",
        st.overwritten_in_place,
    );
    s.counter(
        "strata_alloc_last_resort",
        "Segment allocations that had to seal half-filled segments, evict read items or wait for one.",
        st.alloc_last_resort,
    );
    s.counter(
        "strata_alloc_waited",
        "Waits of up to a millisecond for a segment another thread was clearing, rather than evict live items.",
        st.alloc_waited,
    );
    s.counter(
        "strata_reclaim_inline",
        "Segment allocations that found none free and reclaimed on the request's time (background reclaimer on).",
        st.reclaim_inline,
    );
    s.counter(
        "strata_reclaim_waited",
        "Segment allocations that found none free and waited for the background reclaimer.",
        st.reclaim_waited,
    );
    s.counter(
        "strata_memory_waits",
        "Writes that waited for the background reclaimer to free a segment while their worker served its other connections.",
        st.memory_waits,
    );
    s.counter("strata_reclaim_background", "Segments the background reclaimer freed.", st.reclaim_background);
    s.counter(
        "strata_reclaim_cheap",
        "Segments writers of large items freed in the background reclaimer's stead (victims of at most 16 items).",
        st.reclaim_cheap,
    );
    s.gauge(
        "strata_reply_bytes_charged",
        "Unread reply bytes beyond each connection's 64 KiB, counted against -o read_buf_mem_limit.",
        shared.replies.charged(),
    );
    worker_counter(s, shared, "idle_kicks");
    worker_counter(s, shared, "strata_worker_panics");
    worker_counter(s, shared, "strata_auth_closed");
    s.counter("strata_bytes_stored", "Bytes of items written by requests (header, key, value).", st.bytes_stored);
    s.counter("strata_bytes_copied", "Bytes of items copied forward by the cleaner and eviction.", st.bytes_copied);
    let wa =
        if st.bytes_stored == 0 { 1.0 } else { (st.bytes_stored + st.bytes_copied) as f64 / st.bytes_stored as f64 };
    s.gauge("strata_write_amplification", "Bytes written to segments per byte of items stored.", Value::Fixed2(wa));
    s.counter(
        "strata_segments_cleaned",
        "Segments the cleaner emptied by copying their live items.",
        st.segments_cleaned,
    );
    s.counter(
        "strata_dead_bytes_reclaimed",
        "Dead bytes (overwritten, deleted) the cleaner won back.",
        st.dead_reclaimed,
    );
    s.counter("strata_cleaner_us", "Microseconds spent cleaning.", st.cleaner_us);
    s.gauge("strata_dead_bytes", "Dead bytes in sealed segments now.", st.dead_bytes);
    s.gauge(
        "strata_idle_bytes",
        "Bytes of -m's segments holding nothing: free segments and the unwritten ends of those in use.",
        st.idle_bytes,
    );
    s.gauge("strata_idle_free_bytes", "Of strata_idle_bytes: free segments.", st.idle_free_bytes);
    s.gauge(
        "strata_idle_open_bytes",
        "Of strata_idle_bytes: the unwritten ends of segments being written (open segments, copy targets).",
        st.idle_open_bytes,
    );
    s.gauge(
        "strata_idle_sealed_bytes",
        "Of strata_idle_bytes: the empty tails of sealed segments (an item larger than the room left).",
        st.idle_sealed_bytes,
    );
    worker_counter(s, shared, "strata_store_contended");
}

/// The flash tier's figures, with `-o ext_path`: memcached's extstore
/// names where the meaning matches (docs/protocol.md lists them).
fn flash(s: &mut Snapshot, st: &strata_store::StoreStats) {
    let Some(f) = &st.flash else { return };
    s.counter("get_extstore", "Reads that found their value on flash.", f.hits);
    s.counter("get_oom_extstore", "Flash items that could not come back into memory for want of it (-M).", f.oom);
    s.counter("miss_from_extstore", "Reads of flash items found gone (expired, flushed, damaged).", f.misses);
    s.counter("badcrc_from_extstore", "Flash records that failed their checksum (misses).", f.checksum_errors);
    s.counter("recache_from_extstore", "Flash items brought back into memory.", f.recached);
    s.gauge("extstore_io_queue", "Flash reads asked of the I/O threads and not yet done.", f.io_queue);
    s.counter("extstore_objects_written", "Records written to flash.", f.objects_written);
    s.counter("extstore_bytes_written", "Bytes written to flash.", f.bytes_written);
    s.counter("extstore_objects_read", "Records read from flash.", f.reads);
    s.counter("extstore_bytes_read", "Bytes read from flash.", f.bytes_read);
    s.gauge("extstore_objects_used", "Items whose value is on flash now.", f.items);
    s.gauge("extstore_bytes_used", "Flash bytes written and not yet reclaimed.", f.bytes_used);
    s.gauge("extstore_limit_maxbytes", "Flash capacity in bytes.", f.capacity);
    s.gauge("extstore_page_size", "Bytes per flash region.", f.region_size);
    s.gauge("extstore_pages_total", "Flash regions.", f.regions);
    s.counter("extstore_compact_rescues", "Read flash items a region's reclaim wrote again at the head.", f.copied);
    s.counter("extstore_compact_lost", "Read flash items a reclaim could not write again (dropped).", f.copy_lost);
    s.counter("extstore_page_allocs", "Flash regions the head moved into to write.", f.regions_opened);
    s.counter(
        "extstore_page_evictions",
        "Flash regions reclaimed while the index still linked records in them.",
        f.regions_evicted,
    );
    s.counter("extstore_page_reclaims", "Flash regions emptied for reuse (oldest first).", f.regions_reclaimed);
    s.gauge("extstore_pages_free", "Flash regions holding no records.", f.regions.saturating_sub(f.regions_used));
    s.gauge("extstore_pages_used", "Flash regions holding records, or being written.", f.regions_used);
    s.counter("extstore_objects_evicted", "Flash items dropped by a region's reclaim.", f.evicted);
    s.counter("extstore_bytes_evicted", "Bytes of the flash records dropped by a region's reclaim.", f.evicted_bytes);
    s.counter("strata_extstore_moved", "Items moved from memory to flash.", f.moved);
    s.counter("strata_extstore_aged", "Of those, items ext_item_age sent before memory was full.", f.aged);
    s.counter(
        "strata_extstore_copied_forward",
        "Items a region's reclaim wrote again at the head (read since they went to flash).",
        f.copied,
    );
    s.counter("strata_extstore_read_errors", "Flash reads that failed (misses).", f.read_errors);
    s.counter("strata_extstore_write_errors", "Flash writes that failed (their items evicted).", f.write_errors);
    s.counter(
        "strata_extstore_dropped_by_write",
        "Flash slots a set dropped unread (the key's old version, rarely another key's).",
        f.dropped_by_write,
    );
    s.counter(
        "strata_extstore_dropped_by_growth",
        "Flash slots dropped because their index stripe outgrew their hash bits.",
        f.dropped_by_growth,
    );
    s.counter(
        "strata_extstore_reads_async",
        "Flash reads done by the I/O threads while the worker served others.",
        f.reads_async,
    );
    s.counter(
        "strata_extstore_reads_coalesced",
        "Requests that waited for a flash read already in flight for another.",
        f.reads_coalesced,
    );
    s.gauge(
        "strata_extstore_ram_bytes",
        "RAM the flash items cost: their index slots and region metadata.",
        f.ram_bytes,
    );
    let per = |a: u64, b: u64| Value::Fixed2(if b == 0 { 0.0 } else { a as f64 / b as f64 });
    s.gauge("strata_extstore_ram_per_item", "Bytes of RAM per flash item.", per(f.ram_bytes, f.items));
    // Items that come back into memory on a read and leave again are
    // written again: flash bytes per byte clients stored says how much.
    s.gauge(
        "strata_extstore_write_amplification",
        "Bytes written to flash per byte of items clients stored.",
        per(f.bytes_written, st.bytes_stored),
    );
}

/// The last snapshot written and the load at start, with `--snapshot-dir`.
fn snapshots(s: &mut Snapshot, shared: &Shared) {
    let Some(sn) = &shared.snapshots else { return };
    let last = *sn.last.lock();
    let running = sn.running.load(Relaxed);
    s.gauge("snapshot_in_progress", "1 while a snapshot is being written.", u64::from(running));
    s.counter("snapshot_saves", "Snapshots written since start.", last.saves);
    s.counter("snapshot_save_errors", "Snapshots that failed (the previous one was kept).", last.errors);
    let result = match (last.saves + last.errors, last.ok) {
        (0, _) => "none",
        (_, true) => "ok",
        (_, false) => "failed",
    };
    s.info("snapshot_last_result", "Outcome of the last snapshot: none, ok or failed.", result);
    let r = &last.report;
    s.gauge("snapshot_last_time", "Unix time the last good snapshot started (0: none).", r.started_unix);
    s.gauge("snapshot_last_bytes", "Bytes of the last good snapshot.", r.bytes);
    s.gauge("snapshot_last_items", "Items in the last good snapshot.", r.items);
    s.gauge("snapshot_last_duration_us", "Microseconds the last good snapshot took.", r.duration.as_micros() as u64);
    s.gauge(
        "snapshot_last_handed_off",
        "Segments of the last good snapshot's cut copied by the thread that freed them before the snapshot reached them.",
        r.handed_off,
    );
    s.gauge(
        "snapshot_last_writers_waited_us",
        "Microseconds writers waited, all told, for the last good snapshot to take the segments they freed before it copied them.",
        r.writers_waited.as_micros() as u64,
    );
    let l = &sn.cfg.loaded;
    s.info(
        "snapshot_load_result",
        "The load at start: none, ok, damaged (what was whole loaded) or refused.",
        l.result,
    );
    s.gauge("snapshot_loaded_items", "Items loaded at start.", l.items);
    if shared.store.config().flash.is_some() {
        s.gauge("snapshot_loaded_flash_items", "Flash items brought back at start.", l.flash_items);
    }
    s.gauge("snapshot_loaded_segments", "Segments loaded at start.", l.segments);
    s.gauge("snapshot_load_damaged_segments", "Segments dropped at start for a bad checksum.", l.damaged_segments);
    s.gauge(
        "snapshot_load_skipped_segments",
        "Segments left out at start: no memory, and nothing to evict (-M).",
        l.skipped_segments,
    );
    s.gauge(
        "snapshot_load_item_segments",
        "Segments restored item by item at start, once no free segment was left.",
        l.loose_segments,
    );
    s.gauge("snapshot_load_evicted", "Live items evicted at start: the snapshot held more than -m.", l.evicted);
    s.gauge("snapshot_load_duration_us", "Microseconds the load at start took.", l.duration.as_micros() as u64);
    let mode = match sn.cfg.durability {
        strata_persist::Durability::Off => "off",
        strata_persist::Durability::Interval => "interval",
        strata_persist::Durability::Always => "always",
    };
    s.info("durability", "--durability: off, interval or always.", mode);
    let Some(wal) = &sn.cfg.wal else { return };
    let (records, appended) = wal.appended();
    s.counter("durability_log_records", "Changes appended to the log since start.", records);
    s.counter("durability_log_bytes", "Bytes written to the log since start.", wal.bytes.load(Relaxed));
    s.counter("durability_syncs", "fdatasyncs of the log (group commits).", wal.syncs.load(Relaxed));
    s.counter(
        "durability_sync_us",
        "Microseconds the log's fdatasyncs took (divided by durability_syncs: the cost of a commit).",
        wal.sync_ns.load(Relaxed) / 1000,
    );
    s.counter(
        "durability_prealloc_bytes",
        "Zeros written ahead of the log's writer (preallocation) since start.",
        wal.zeroed.load(Relaxed),
    );
    s.gauge(
        "durability_unsynced_bytes",
        "Log bytes appended but not yet on disk.",
        appended - wal.durable().min(appended),
    );
    s.gauge(
        "durability_failed",
        "1 once a log write or fdatasync failed: changes are no longer durable.",
        u64::from(wal.failed()),
    );
    s.info("durability_log_file", "The log file being appended to.", wal.current());
    let r = &sn.cfg.recovered;
    s.gauge("durability_replayed_files", "Log files replayed at start.", r.files);
    s.gauge("durability_replayed_records", "Log records replayed at start.", r.records);
    s.gauge("durability_replay_skipped", "Log records at start that could not be applied.", r.skipped);
    s.gauge(
        "durability_replay_torn",
        "Log files at start whose records ended before non-zero bytes (a crash mid-write, or damage).",
        r.torn,
    );
    s.gauge(
        "durability_replay_trimmed_bytes",
        "Bytes cut off the log files at start: zeros filled ahead, torn tails.",
        r.trimmed,
    );
}

/// The compression counters, with compression on (`-o compression=on`).
fn compression(s: &mut Snapshot, st: &strata_store::StoreStats) {
    let Some(z) = &st.compression else { return };
    let ratio = |plain: u64, stored: u64| Value::Fixed2(if stored == 0 { 1.0 } else { plain as f64 / stored as f64 });
    s.gauge("strata_compressed_items", "Items whose value is held compressed now.", st.compressed_items);
    s.gauge("strata_compressed_plain_bytes", "Their values' original bytes.", st.compressed_plain_bytes);
    s.gauge("strata_compressed_stored_bytes", "Bytes their values take.", st.compressed_stored_bytes);
    let held = ratio(st.compressed_plain_bytes, st.compressed_stored_bytes);
    s.gauge("strata_compression_ratio", "Original over stored bytes of the values held compressed.", held);
    s.counter("strata_compress_writes", "Values stored compressed since start.", z.compressed);
    s.counter("strata_compress_bytes_in", "Their original bytes.", z.bytes_in);
    s.counter("strata_compress_bytes_out", "Their stored bytes.", z.bytes_out);
    s.counter("strata_compress_not_worth", "Values tried but stored plain (saved too little).", z.not_worth);
    s.counter("strata_compress_skipped", "Values not tried: random or already compressed bytes.", z.skipped);
    s.counter("strata_compress_us", "Microseconds spent compressing.", z.compress_us);
    s.counter("strata_decompress_reads", "Values decompressed (for readers and for recompression).", z.decompressed);
    s.counter("strata_decompress_us", "Microseconds spent decompressing.", z.decompress_us);
    s.counter(
        "strata_decompress_errors",
        "Compressed values that failed to decompress (served as misses).",
        st.decompress_errors,
    );
    s.gauge("strata_compress_dicts", "Dictionaries loaded (the current one and any still referenced).", z.dicts_live);
    s.gauge("strata_compress_dict_bytes", "Their bytes, prepared for both directions.", z.dict_bytes);
    s.gauge(
        "strata_compress_dict_current",
        "Id of the dictionary new values use (0: none yet).",
        u64::from(z.current_dict),
    );
    s.counter(
        "strata_compress_recompressed",
        "Values stored before the current dictionary and stored again with it.",
        z.recompressed,
    );
    s.counter("strata_compress_recompress_saved", "The bytes that saved.", z.recompress_saved);
    s.counter(
        "strata_compress_cold_recompressed",
        "Values stored again at compression_cold_level by the reclaimer.",
        z.cold_recompressed,
    );
    s.counter("strata_compress_cold_saved", "The bytes that saved.", z.cold_saved);
    s.gauge("strata_compress_cold_dict_bytes", "The dictionary prepared at that level.", z.cold_dict_bytes);
    s.counter(
        "strata_compress_cold_refused",
        "Dictionaries the cold level was given up for: its context over -m/16, or saving too little.",
        z.cold_refused,
    );
    s.counter("strata_compress_trainings", "Dictionaries trained.", z.trainings);
    s.counter("strata_compress_train_us", "Microseconds spent training them.", z.train_us);
    s.gauge("strata_compress_sampling", "1 while values are sampled for the next training.", u64::from(z.sampling));
}

/// memcached's `stats extstore`: a flash region as an extstore page, its
/// generation as the page's version and its bytes written as its bytes
/// (memcached's count falls as items die; a region's only when it is
/// reclaimed). No buckets here: 0. Without the flash tier, nothing, as
/// memcached without `ext_path`.
fn extstore(shared: &Shared) -> Snapshot {
    let mut s = Snapshot::default();
    for (i, (version, bytes)) in shared.store.flash_pages().into_iter().enumerate() {
        s.gauge(format!("{i}:version"), "Times this flash region was written afresh.", version);
        s.gauge(format!("{i}:bytes"), "Bytes written in this flash region since.", bytes);
        s.gauge(format!("{i}:bucket"), "The region's bucket (always 0: strata has none).", 0u64);
        s.gauge(format!("{i}:free_bucket"), "The bucket it is freed to (always 0).", 0u64);
    }
    s
}

fn items(shared: &Shared) -> Snapshot {
    let mut s = Snapshot::default();
    for (i, b) in shared.store.size_bands().iter().enumerate().filter(|(_, b)| b.items > 0) {
        let n = i + 1;
        s.gauge(format!("items:{n}:number"), "Items stored in this size band.", b.items);
        s.gauge(
            format!("items:{n}:age"),
            "Seconds since the oldest segment holding items of this band was first written.",
            b.age,
        );
        s.gauge(format!("items:{n}:mem_requested"), "Bytes of the band's items.", b.bytes);
        s.counter(format!("items:{n}:evicted"), "Live items of this band evicted.", b.evicted);
        s.counter(format!("items:{n}:evicted_nonzero"), "Evicted items that had an expiry time.", b.evicted_nonzero);
        s.gauge(format!("items:{n}:evicted_time"), "Seconds the item evicted last had been stored.", b.evicted_time);
        s.counter(format!("items:{n}:outofmemory"), "Writes refused because no memory could be freed.", b.outofmemory);
        s.counter(format!("items:{n}:reclaimed"), "Expired items whose memory was reused.", b.reclaimed);
        s.counter(
            format!("items:{n}:expired_unfetched"),
            "Expired items reclaimed that were never read.",
            b.expired_unfetched,
        );
        s.counter(format!("items:{n}:evicted_unfetched"), "Evicted items that were never read.", b.evicted_unfetched);
        s.counter(format!("items:{n}:crawler_reclaimed"), "Expired items the crawler unlinked.", b.crawler_reclaimed);
        s.counter(format!("items:{n}:crawler_items_checked"), "Items the crawler looked at.", b.crawler_items_checked);
    }
    s
}

fn slabs(shared: &Shared) -> Snapshot {
    let st = shared.store.stats();
    let mut s = Snapshot::default();
    let bands = shared.store.size_bands();
    // Bands holding items (memcached: classes with pages); items on flash
    // count in the first band without pages in memory (`bands.rs`).
    let active = bands.iter().filter(|b| b.items > 0).count() as u64;
    // Memory new items may take before eviction starts.
    let free_bytes = shared.store.room_before_eviction();
    for (i, b) in bands.iter().enumerate().filter(|(_, b)| b.segments > 0 || b.items > 0) {
        let n = i + 1;
        s.info(format!("{n}:chunk_size"), "The band's largest item, in bytes.", b.chunk_size);
        s.info(
            format!("{n}:chunks_per_page"),
            "Items of the band's largest size a segment holds.",
            st.segment_size / u64::from(b.chunk_size.max(1)),
        );
        s.gauge(
            format!("{n}:total_pages"),
            "Segments in use that items of this band were written to, live or not yet cleaned away.",
            b.segments,
        );
        // Free memory is not set aside per size: every band's items are
        // packed into the same segments, so a band's free chunks are the
        // items of its size the memory left before eviction would hold
        // (shared by every band), and it is full (memcached-tool's
        // `Full?`) once eviction starts.
        let free = free_bytes / u64::from(b.chunk_size.max(1));
        s.gauge(format!("{n}:total_chunks"), "Items of this band and its free chunks.", b.items + free);
        s.gauge(format!("{n}:used_chunks"), "Items of this band.", b.items);
        s.gauge(format!("{n}:free_chunks"), "Items of the band's size the free memory would hold.", free);
        s.gauge(format!("{n}:free_chunks_end"), "Always 0, as in memcached 1.6.", 0u64);
        s.gauge(format!("{n}:mem_requested"), "Bytes of the band's items.", b.bytes);
    }
    // Segments in use, not the reserve less the free list: segments above
    // `-m` are parked, neither free nor used (`total_malloced` read 192
    // MiB of a 64 MiB limit that way).
    s.gauge("active_slabs", "Size bands holding items.", active);
    s.gauge("total_malloced", "Bytes of the segments in use.", st.segments_in_use * st.segment_size);
    s
}

/// `stats sizes`: items by memcached's size for them, in 32-byte buckets,
/// while tracking is on (`stats sizes_enable`, `-o track_sizes`).
fn sizes(shared: &Shared) -> Snapshot {
    match shared.store.item_sizes_report() {
        Some(buckets) => {
            let mut s = Snapshot::default();
            for (size, items) in buckets {
                s.gauge(size.to_string(), "Items of up to this size (memcached's), in bytes.", items);
            }
            s
        }
        None => sizes_status(shared),
    }
}

fn sizes_status(shared: &Shared) -> Snapshot {
    let mut s = Snapshot::default();
    let on = shared.store.item_sizes_report().is_some();
    s.info("sizes_status", "Whether items are counted by size (stats sizes).", if on { "enabled" } else { "disabled" });
    s
}

fn conns(shared: &Shared) -> Snapshot {
    let now = shared.store.clock().now();
    let mut s = Snapshot::default();
    for (fd, name) in shared.listeners() {
        s.info(format!("{fd}:addr"), "Listening address.", name.clone());
        s.info(format!("{fd}:state"), "Connection state.", "conn_listening");
    }
    // memcached lists each UDP socket as a connection waiting to read,
    // marked `UDP`, without a listening address of its own.
    for u in shared.udp() {
        let fd = u.fd;
        s.info(format!("{fd}:UDP"), "A UDP socket (-U).", "UDP");
        s.info(format!("{fd}:addr"), "Its address.", u.addr.clone());
        s.info(format!("{fd}:state"), "Connection state.", "conn_read");
        let idle = now.saturating_sub(u.last_cmd.load(Relaxed));
        s.gauge(format!("{fd}:secs_since_last_cmd"), "Seconds since its last request.", idle);
    }
    for c in shared.conns.lock().values() {
        let fd = c.fd;
        s.info(format!("{fd}:addr"), "Peer address.", c.addr.clone());
        s.info(format!("{fd}:listen_addr"), "Listening address it came in on.", c.listen_addr.clone());
        s.info(format!("{fd}:state"), "Connection state.", ConnState::from_u32(c.state.load(Relaxed)).name());
        let idle = now.saturating_sub(c.last_cmd.load(Relaxed));
        s.gauge(format!("{fd}:secs_since_last_cmd"), "Seconds since its last request.", idle);
    }
    s
}
