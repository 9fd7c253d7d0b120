//! `stats settings`: memcached 1.6.18's keys in memcached's order, every
//! one of them always (as memcached prints them), then strata's own.
//!
//! What a key reports (docs/compat.md, "Settings"): where strata has the
//! machinery, the value it runs with; where it has none (slab classes and
//! their mover, chunked items, the segmented LRU, extstore while the flash
//! tier is off), the value the operator gave, by flag, `-o` or tuning
//! command, else memcached's default — or, for `slab_reassign` and
//! `slab_automove`, the value that says what strata does (nothing moves).
//! `no_effect` names the settings given at start that do nothing here; each
//! also had a line in the log at start.

use std::sync::atomic::Ordering::Relaxed;

use strata_protocol::stats::Snapshot;

use crate::config::Recorded;
use crate::Shared;

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// As memcached prints a path it does not have.
fn path_or(p: Option<&std::path::PathBuf>, none: &str) -> String {
    p.map_or_else(|| none.to_string(), |p| p.display().to_string())
}

const RECORDED: &str = "As given (flag, -o or tuning command); no effect here (docs/compat.md).";

pub(crate) fn settings(shared: &Shared) -> Snapshot {
    let mut s = Snapshot::default();
    let rec = shared.tuning.recorded.lock().clone();
    listeners(&mut s, shared);
    limits(&mut s, shared);
    slabs(&mut s, shared, &rec);
    lru(&mut s, shared, &rec);
    ext(&mut s, shared, &rec);
    tls(&mut s, shared);
    strata(&mut s, shared);
    s
}

/// From `maxbytes` to `num_threads_per_udp`.
fn listeners(s: &mut Snapshot, shared: &Shared) {
    let c = &shared.cfg;
    let sc = shared.store.config();
    s.info("maxbytes", "Memory limit in bytes.", shared.store.memory_limit());
    s.info("maxconns", "Connection limit (-c).", c.max_conns);
    s.info("tcpport", "TCP port (-p; 0 with -s).", if c.unix_socket.is_some() { 0 } else { u32::from(c.port) });
    s.info("udpport", "UDP port (-U; 0: no UDP).", u32::from(c.udp_port));
    s.info("inter", "Listen addresses (-l).", c.listen.join(","));
    s.info("verbosity", "Log level (-v, verbosity).", shared.verbosity.load(Relaxed));
    s.info(
        "oldest",
        "Relative time (strata's clock) before which flush_all invalidated items (0: no flush_all yet).",
        shared.tuning.oldest_live.load(Relaxed),
    );
    s.info("evictions", "on unless -M.", if sc.evictions { "on" } else { "off" });
    s.info("domain_socket", "Unix socket path (-s).", path_or(c.unix_socket.as_ref(), "NULL"));
    s.info("umask", "Unix socket permissions (-a).", format!("{:o}", c.unix_mask));
    s.info("shutdown_command", "Whether shutdown is allowed (-A).", yes_no(c.shutdown_enabled));
    let classes = sc.size_classes;
    s.info(
        "growth_factor",
        "Size bands of stats items and slabs grow by this factor (-f).",
        format!("{:.2}", classes.growth_factor),
    );
    s.info("chunk_size", "Bytes of key, value and flags in the smallest size band (-n).", classes.min_size);
    s.info("num_threads", "Worker threads (-t).", c.threads);
    s.info("num_threads_per_udp", "Threads reading each UDP socket: one of its own.", 1u32);
}

/// From `stat_key_prefix` to `hashpower_init`.
fn limits(s: &mut Snapshot, shared: &Shared) {
    let c = &shared.cfg;
    let delimiter = char::from(shared.detail.delimiter()).to_string();
    s.info("stat_key_prefix", "Delimiter ending a key's prefix for stats detail (-D).", delimiter);
    s.info("detail_enabled", "Whether stats detail counts (stats detail on|off, -D).", yes_no(shared.detail.enabled()));
    s.info("reqs_per_event", "Requests per connection per turn (-R).", c.reqs_per_event);
    s.info("cas_enabled", "no with -C.", yes_no(shared.store.config().cas));
    s.info("tcp_backlog", "Listen backlog (-b).", u64::try_from(c.backlog).unwrap_or(0));
    let binding = match c.protocol {
        crate::config::Protocol::Auto => "auto-negotiate",
        crate::config::Protocol::Ascii => "ascii",
        crate::config::Protocol::Binary => "binary",
    };
    s.info("binding_protocol", "Protocols accepted (-B).", binding);
    s.info("auth_enabled_sasl", "Binary clients authenticate with SASL (-S).", yes_no(c.sasl.is_some()));
    let ascii = c.auth_file.as_ref().map_or("no".to_string(), |f| f.source.clone());
    s.info("auth_enabled_ascii", "ASCII authentication file (-Y), or no.", ascii);
    s.info("item_size_max", "Largest item in bytes (-I).", c.item_size_max);
    s.info("maxconns_fast", "Always yes: a connection over -c is told so and closed at once.", "yes");
    s.info("hashpower_init", "log2 of the index's buckets at start.", shared.store.hash_power());
}

/// The slab mover's settings and the crawler's, to `dump_enabled`.
fn slabs(s: &mut Snapshot, shared: &Shared, rec: &Recorded) {
    let t = &shared.tuning;
    s.info(
        "slab_reassign",
        "As given (-o slab_reassign), else no: segments serve every size.",
        yes_no(rec.slab_reassign),
    );
    s.info(
        "slab_automove",
        "As given (-o slab_automove, slabs automove), else 0: nothing moves.",
        t.slab_automove.load(Relaxed),
    );
    s.info("slab_automove_ratio", RECORDED, format!("{:.2}", rec.slab_automove_ratio));
    s.info("slab_automove_window", RECORDED, format!("{:.0}", rec.slab_automove_window));
    s.info("slab_chunk_max", RECORDED, rec.slab_chunk_max);
    s.info(
        "lru_crawler",
        "lru_crawler crawl is allowed: it unlinks expired items on a thread of its own (lru_crawler enable|disable).",
        yes_no(t.crawler.load(Relaxed)),
    );
    s.info("lru_crawler_sleep", "Microseconds a crawl pauses between index stripes.", t.crawler_sleep_us.load(Relaxed));
    s.info("lru_crawler_tocrawl", "Items a crawl looks at per class (0: all).", t.crawler_tocrawl.load(Relaxed));
    s.info("tail_repair_time", RECORDED, rec.tail_repair_time);
    s.info("flush_enabled", "no with -F.", yes_no(shared.cfg.flush_enabled));
    s.info(
        "dump_enabled",
        "no with -X: key dumps (cachedump, metadump, mgdump) refused.",
        yes_no(shared.cfg.dump_enabled),
    );
}

/// From `hash_algorithm` to `inline_ascii_response`.
fn lru(s: &mut Snapshot, shared: &Shared, rec: &Recorded) {
    s.info(
        "hash_algorithm",
        "The key hash that runs: aHash, seeded at start (-o hash_algorithm has no effect).",
        "ahash",
    );
    s.info(
        "lru_maintainer_thread",
        "yes while the background reclaimer keeps segments free ahead of the writers (-o no_lru_maintainer: no).",
        yes_no(shared.cfg.background_reclaim),
    );
    s.info("lru_segmented", RECORDED, yes_no(rec.lru_segmented));
    s.info("hot_lru_pct", RECORDED, rec.hot_lru_pct);
    s.info("warm_lru_pct", RECORDED, rec.warm_lru_pct);
    s.info("hot_max_factor", RECORDED, format!("{:.2}", rec.hot_max_factor));
    s.info("warm_max_factor", RECORDED, format!("{:.2}", rec.warm_max_factor));
    s.info("temp_lru", RECORDED, yes_no(rec.temp_lru));
    s.info("temporary_ttl", RECORDED, i64::from(rec.temporary_ttl));
    s.info(
        "idle_timeout",
        "Seconds a connection may go without completing a request (0: no limit).",
        shared.cfg.idle_timeout,
    );
    s.info(
        "watcher_logbuf_size",
        "Bytes of lines a watcher may have waiting (-o watcher_logbuf_size, in KiB).",
        shared.watchers.buffer(),
    );
    s.info("worker_logbuf_size", RECORDED, rec.worker_logbuf_size);
    s.info(
        "read_buf_mem_limit",
        "Bytes of unread replies across connections beyond each one's 64 KiB (0: no limit).",
        shared.replies.limit,
    );
    let tracking = shared.store.item_sizes_report().is_some();
    s.info("track_sizes", "Whether items are counted by size (stats sizes).", if tracking { "yes" } else { "no" });
    s.info("inline_ascii_response", "Always no, as in memcached 1.6.", "no");
}

/// memcached's extstore keys, always (as memcached built with extstore
/// prints them): the flash tier's values while it is on; otherwise, and
/// for what strata's tier does not have, as given, else memcached's
/// default.
fn ext(s: &mut Snapshot, shared: &Shared, rec: &Recorded) {
    let flash = shared.store.config().flash.as_ref();
    // An `extstore <setting>` change, else the -o value.
    let given = |k: &str| {
        let noted = flash.map_or(&[][..], |t| &t.noted[..]);
        rec.ext.iter().map(|(n, v)| (*n, v)).chain(noted.iter().map(|(n, v)| (n.as_str(), v))).find(|(n, _)| *n == k)
    };
    let or = |k: &str, default: &str| given(k).map_or_else(|| default.to_string(), |(_, v)| v.clone());
    let number = |k: &str, default: u64| given(k).and_then(|(_, v)| v.parse().ok()).unwrap_or(default);
    // The values now: `extstore item_age|item_size|recache_rate` change
    // them while running.
    let running = flash.map(|t| shared.store.flash_tuning().unwrap_or((t.item_age, t.min_item, t.recache_rate)));
    let (age, min_item, recache) = match running {
        Some((age, min_item, recache)) => (u64::from(age), min_item as u64, u64::from(recache)),
        None => (
            number("ext_item_age", u64::from(u32::MAX)),
            number("ext_item_size", 512),
            number("ext_recache_rate", 2000),
        ),
    };
    const OFF: &str = "As memcached's extstore would have it; the flash tier is off (-o ext_path).";
    const NOTED: &str = "Accepted for memcached compatibility; no effect here.";
    let live = |help: &'static str| if flash.is_some() { help } else { OFF };
    s.info("ext_item_size", live("Smaller items are evicted rather than moved to flash."), min_item);
    s.info(
        "ext_item_age",
        live(
            "Items written this many seconds ago and not read since go to flash early (4294967295: only when evicted).",
        ),
        age,
    );
    s.info("ext_low_ttl", NOTED, or("ext_low_ttl", "0"));
    s.info("ext_recache_rate", live("One read from flash in this many brings the item back into memory."), recache);
    let wbuf = flash.map_or_else(|| number("ext_wbuf_size", 4 << 20), |t| t.write_buffer as u64);
    s.info("ext_wbuf_size", live("Bytes gathered before a write to flash."), wbuf);
    s.info("ext_compact_under", NOTED, or("ext_compact_under", "0"));
    s.info("ext_drop_under", NOTED, or("ext_drop_under", "0"));
    s.info("ext_max_sleep", NOTED, or("ext_max_sleep", "1000000"));
    s.info("ext_max_frag", NOTED, or("ext_max_frag", "0.80"));
    s.info("slab_automove_freeratio", RECORDED, format!("{:.3}", rec.slab_automove_freeratio));
    s.info("ext_drop_unread", NOTED, or("ext_drop_unread", "no"));
    if let Some(t) = flash {
        let paths: Vec<String> = t.paths.iter().map(|(p, n)| format!("{}:{n}", p.display())).collect();
        s.info("ext_path", "The flash tier's files or devices and their sizes (-o ext_path).", paths.join(","));
        s.info("ext_page_size", "Bytes per flash region.", t.log.region_size());
        s.info("ext_threads", "Threads reading from flash (0: workers read synchronously).", t.io_threads);
        if let Some((_, v)) = given("ext_io_depth") {
            s.info("ext_io_depth", NOTED, v.clone());
        }
    }
}

/// From `ssl_enabled` to `ssl_min_version`.
fn tls(s: &mut Snapshot, shared: &Shared) {
    let tls = shared.cfg.tls.as_ref();
    let path = |p: Option<&std::path::PathBuf>| path_or(p, "NULL");
    s.info("ssl_enabled", "TLS on the TCP listeners (-Z).", yes_no(tls.is_some()));
    s.info("ssl_chain_cert", "Certificate chain (PEM).", path(tls.map(|t| &t.chain_cert)));
    s.info("ssl_key", "Private key (PEM).", path(tls.and_then(|t| t.key.as_ref())));
    s.info(
        "ssl_verify_mode",
        "Client certificates: 0 none, 1 asked, 2 and 3 required.",
        tls.map_or(0, |t| u32::from(t.verify_mode)),
    );
    s.info("ssl_keyformat", "1: PEM.", 1u64);
    s.info(
        "ssl_ciphers",
        "TLS 1.2 suites offered (NULL: all rustls has).",
        tls.and_then(|t| t.ciphers.clone()).unwrap_or_else(|| "NULL".into()),
    );
    s.info("ssl_ca_cert", "Roots for client certificates (PEM).", path(tls.and_then(|t| t.ca_cert.as_ref())));
    let min = match tls.map(|t| t.min_version) {
        Some(crate::config::MinVersion::Tls13) => "tlsv1.3",
        _ => "tlsv1.2",
    };
    s.info("ssl_min_version", "Lowest TLS version offered.", min);
}

/// strata's own: segments, snapshots, compression, and what had no effect.
fn strata(s: &mut Snapshot, shared: &Shared) {
    let c = &shared.cfg;
    let sc = shared.store.config();
    s.info("segment_size", "Bytes per segment.", sc.segment_size);
    if let Some(sn) = &c.snapshot {
        s.info(
            "snapshot_file",
            "Where snapshots are written and loaded from (--snapshot-dir, -e).",
            sn.file.display().to_string(),
        );
        s.info(
            "snapshot_interval",
            "Seconds between snapshots while serving (0: none).",
            sn.interval.map_or(0, |d| d.as_secs()),
        );
        s.info("snapshot_strict", "Refuse to start on a damaged or mismatched snapshot.", yes_no(sn.strict));
    }
    s.info(
        "compression",
        "Values stored compressed where it pays (-o compression).",
        if sc.compression.is_some() { "on" } else { "off" },
    );
    if let Some(z) = &sc.compression {
        s.info("compression_level", "zstd level.", u64::try_from(z.level).unwrap_or(0));
        s.info("compression_min_size", "Shorter values are stored plain.", z.min_size);
        s.info(
            "compression_min_saving",
            "Percent a value must shrink to be stored compressed.",
            u64::from(z.min_saving_percent),
        );
        s.info("compression_dict_size", "Bytes of a trained dictionary.", z.dict_size);
        s.info("compression_train_bytes", "Bytes of sampled values a training learns from.", z.train_bytes);
        s.info("compression_sample", "One eligible value in this many is sampled.", u64::from(z.sample_one_in));
        s.info(
            "compression_retrain_drop",
            "Retrain when the ratio falls this many percent.",
            u64::from(z.retrain_drop_percent),
        );
        s.info(
            "compression_cold_level",
            "zstd level sealed values are stored again at (0: none).",
            u64::try_from(z.cold_level).unwrap_or(0),
        );
        s.info("compression_cold_cpu", "Percent of a core storing them again may take.", u64::from(z.cold_cpu_percent));
    }
    let none = shared.tuning.no_effect.is_empty();
    s.info(
        "no_effect",
        "Settings given at start that do nothing here, comma separated (none: every one acts).",
        if none { "none".to_string() } else { shared.tuning.no_effect.join(",") },
    );
}
