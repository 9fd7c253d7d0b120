//! The `stats` family: general, `settings`, `items`, `slabs`, `conns`,
//! `reset`, with memcached's field names where the meaning matches.
//!
//! Segments replace slab classes, so `stats slabs` and `stats items` report
//! one class (id 1) whose pages are segments; `docs/protocol.md` spells out
//! the mapping.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use strata_protocol::reply::{stat, text as r};
use strata_protocol::text::Tokens;

use crate::Shared;

/// The version `version` and `stats` report: the memcached protocol level
/// implemented, tagged with strata's own version.
pub(crate) const VERSION: &str = concat!("1.6.38-strata-", env!("CARGO_PKG_VERSION"));

/// One worker's request counters. Only its worker writes them (plain load
/// and store, no locked instructions); `stats` reads them from any thread.
#[derive(Debug, Default)]
pub(crate) struct WorkerStats {
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub delete_hits: AtomicU64,
    pub delete_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_badval: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
    pub store_too_large: AtomicU64,
    pub store_no_memory: AtomicU64,
    /// Operations that lost the race for an item to concurrent writers
    /// [`strata_store::MAX_RETRIES`] times in a row.
    pub store_contended: AtomicU64,
    /// Authentication attempts (SASL and ASCII) and the failed ones.
    pub auth_cmds: AtomicU64,
    pub auth_errors: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
}

macro_rules! fields {
    ($m:ident) => {
        $m!(cmd_get);
        $m!(cmd_set);
        $m!(cmd_flush);
        $m!(cmd_touch);
        $m!(get_hits);
        $m!(get_misses);
        $m!(delete_misses);
        $m!(delete_hits);
        $m!(incr_misses);
        $m!(incr_hits);
        $m!(decr_misses);
        $m!(decr_hits);
        $m!(cas_misses);
        $m!(cas_hits);
        $m!(cas_badval);
        $m!(touch_hits);
        $m!(touch_misses);
        $m!(store_too_large);
        $m!(store_no_memory);
        $m!(auth_cmds);
        $m!(auth_errors);
        $m!(bytes_read);
        $m!(bytes_written);
    };
}

fn sum(shared: &Shared, f: impl Fn(&WorkerStats) -> &AtomicU64) -> u64 {
    shared.workers.iter().map(|w| f(w).load(Relaxed)).sum()
}

fn rusage() -> (f64, f64) {
    // Read from /proc to avoid a libc dependency for one call.
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return (0.0, 0.0) };
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    (ticks(11), ticks(12))
}

/// Runs a `stats` command.
pub(crate) fn command(shared: &Shared, args: Tokens<'_>, out: &mut Vec<u8>) {
    let args: Vec<&[u8]> = args.iter().collect();
    match args.first().copied() {
        None => general(shared, out),
        Some(b"reset") => {
            for w in &shared.workers {
                macro_rules! zero {
                    ($f:ident) => {
                        w.$f.store(0, Relaxed)
                    };
                }
                fields!(zero);
                w.store_contended.store(0, Relaxed);
            }
            shared.total_conns.store(0, Relaxed);
            shared.rejected_conns.store(0, Relaxed);
            shared.store.reset_stats();
            out.extend_from_slice(r::RESET);
            return;
        }
        Some(b"settings") => settings(shared, out),
        Some(b"items") => items(shared, out),
        Some(b"slabs") => slabs(shared, out),
        Some(b"conns") => conns(shared, out),
        Some(b"detail") => {
            out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n");
            return;
        }
        Some(_) => {
            out.extend_from_slice(r::ERROR);
            return;
        }
    }
    out.extend_from_slice(r::END);
}

fn general(shared: &Shared, out: &mut Vec<u8>) {
    let clock = shared.store.clock();
    let st = shared.store.stats();
    let (user, sys) = rusage();
    stat(out, "pid", std::process::id());
    stat(out, "uptime", shared.started.elapsed().as_secs());
    stat(out, "time", clock.unix_now());
    stat(out, "version", VERSION);
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", format!("{user:.6}"));
    stat(out, "rusage_system", format!("{sys:.6}"));
    stat(out, "max_connections", shared.cfg.max_conns);
    stat(out, "curr_connections", shared.curr_conns.load(Relaxed));
    stat(out, "total_connections", shared.total_conns.load(Relaxed));
    stat(out, "rejected_connections", shared.rejected_conns.load(Relaxed));
    stat(out, "connection_structures", shared.curr_conns.load(Relaxed) + shared.listeners.len());
    macro_rules! line {
        ($f:ident) => {
            stat(out, stringify!($f), sum(shared, |w| &w.$f))
        };
    }
    fields!(line);
    stat(out, "get_expired", st.get_expired);
    stat(out, "get_flushed", st.get_flushed);
    stat(out, "limit_maxbytes", st.memory_limit);
    stat(out, "accepting_conns", 1);
    stat(out, "threads", shared.cfg.threads);
    stat(out, "hash_power_level", st.hash_power);
    stat(out, "hash_bytes", st.index_bytes);
    stat(out, "bytes", st.bytes);
    stat(out, "curr_items", st.curr_items);
    stat(out, "total_items", st.total_items);
    stat(out, "evictions", st.evictions);
    stat(out, "reclaimed", st.expired_unlinked);
    stat(out, "strata_segment_size", st.segment_size);
    stat(out, "strata_segments_total", st.segments_total);
    stat(out, "strata_segments_free", st.segments_free);
    stat(out, "strata_segments_evicted", st.segments_evicted);
    stat(out, "strata_segments_reclaimed", st.segments_reclaimed);
    stat(out, "strata_items_reinserted", st.reinserted);
    stat(out, "strata_store_contended", sum(shared, |w| &w.store_contended));
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn settings(shared: &Shared, out: &mut Vec<u8>) {
    let c = &shared.cfg;
    let sc = shared.store.config();
    stat(out, "maxbytes", shared.store.memory_limit());
    stat(out, "maxconns", c.max_conns);
    stat(out, "tcpport", if c.unix_socket.is_some() { 0 } else { c.port });
    stat(out, "udpport", 0);
    stat(out, "inter", c.listen.join(","));
    stat(out, "verbosity", shared.verbosity.load(Relaxed));
    stat(out, "evictions", if sc.evictions { "on" } else { "off" });
    stat(out, "domain_socket", c.unix_socket.as_ref().map_or("NULL".into(), |p| p.display().to_string()));
    stat(out, "umask", format!("{:o}", c.unix_mask));
    stat(out, "shutdown_command", yes_no(c.shutdown_enabled));
    stat(out, "num_threads", c.threads);
    stat(out, "reqs_per_event", c.reqs_per_event);
    stat(out, "cas_enabled", yes_no(sc.cas));
    stat(out, "tcp_backlog", c.backlog);
    let binding = match c.protocol {
        crate::config::Protocol::Auto => "auto-negotiate",
        crate::config::Protocol::Ascii => "ascii",
        crate::config::Protocol::Binary => "binary",
    };
    stat(out, "binding_protocol", binding);
    stat(out, "auth_enabled_sasl", yes_no(c.sasl.is_some()));
    stat(out, "auth_enabled_ascii", c.auth_file.as_ref().map_or("no", |f| f.source.as_str()));
    stat(out, "item_size_max", c.item_size_max);
    stat(out, "hashpower_init", shared.store.hash_power());
    stat(out, "flush_enabled", yes_no(c.flush_enabled));
    stat(out, "segment_size", sc.segment_size);
}

fn items(shared: &Shared, out: &mut Vec<u8>) {
    let st = shared.store.stats();
    if st.curr_items == 0 {
        return;
    }
    stat(out, "items:1:number", st.curr_items);
    stat(out, "items:1:evicted", st.evictions);
    stat(out, "items:1:reclaimed", st.expired_unlinked);
}

fn slabs(shared: &Shared, out: &mut Vec<u8>) {
    let st = shared.store.stats();
    let used = st.segments_total - st.segments_free;
    if used > 0 {
        stat(out, "1:chunk_size", st.segment_size);
        stat(out, "1:chunks_per_page", 1);
        stat(out, "1:total_pages", used);
        stat(out, "1:total_chunks", used);
        stat(out, "1:used_chunks", used);
        stat(out, "1:free_chunks", 0);
        stat(out, "1:mem_requested", st.bytes);
    }
    stat(out, "active_slabs", u64::from(used > 0));
    stat(out, "total_malloced", used * st.segment_size);
}

fn conns(shared: &Shared, out: &mut Vec<u8>) {
    let now = shared.store.clock().now();
    for (fd, name) in &shared.listeners {
        stat(out, &format!("{fd}:addr"), name);
        stat(out, &format!("{fd}:state"), "conn_listening");
    }
    for c in shared.conns.lock().values() {
        let fd = c.fd;
        stat(out, &format!("{fd}:addr"), &c.addr);
        stat(out, &format!("{fd}:listen_addr"), &c.listen_addr);
        let state = match c.state.load(Relaxed) {
            2 => "conn_swallow",
            1 => "conn_nread",
            _ => "conn_parse_cmd",
        };
        stat(out, &format!("{fd}:state"), state);
        stat(out, &format!("{fd}:secs_since_last_cmd"), now.saturating_sub(c.last_cmd.load(Relaxed)));
    }
}
