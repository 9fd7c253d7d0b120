//! `--metrics-listen ADDR:PORT`: `GET /metrics` in Prometheus' text format.
//! Stats memcached_exporter (github.com/prometheus/memcached_exporter)
//! serves are served under its names, labels and meaning, so dashboards
//! and alerts written for memcached keep working; every other numeric stat
//! of `stats` and `stats settings` is `strata_<name>` (counters end in
//! `_total`), text values are labels of `strata_info`, and request latency
//! histograms by command family (`latency.rs`) come last. docs/monitoring.md
//! has the mapping. A small blocking HTTP/1.x
//! responder on its own thread: one request per connection, at most 8 KiB
//! of request head, two seconds to send it, then the connection closes.
//! Anything but `GET /metrics` is a 404 (a `HEAD`, a 405).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use strata_protocol::stats::{metric_name, Exposition, Kind, Snapshot, Stat};

use crate::Shared;

/// The most a request head may take before it is refused.
const MAX_HEAD: usize = 8 << 10;

/// Binds the metrics address (before the server starts, so a bad one
/// stops it at start-up).
pub(crate) fn bind(addr: &str) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// How long one wait for a scrape lasts before the thread looks whether
/// the server is stopping (its thread is joined at the stop).
const STOP_CHECK_MS: i32 = 200;

/// Serves scrapes until the server stops. A scrape is accepted as soon as
/// it arrives (the thread waits in `poll`); a loop that slept 50 ms
/// between `accept`s answered one up to 50 ms late.
pub(crate) fn run(shared: Arc<Shared>, listener: TcpListener) {
    while !shared.run.stopping() {
        if !readable(&listener, STOP_CHECK_MS) {
            continue;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = serve(&shared, stream) {
                    tracing::debug!(error = %e, "metrics request failed");
                }
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
            Err(e) => {
                // Out of descriptors, say: not a hot loop while it lasts.
                tracing::warn!(error = %e, "metrics accept failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Waits up to `ms` milliseconds for a connection to accept on `l`.
fn readable(l: &TcpListener, ms: i32) -> bool {
    let mut p = libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is one valid pollfd that outlives the call, and its
    // descriptor is the listener's, open while `l` is borrowed.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

fn serve(shared: &Shared, mut s: TcpStream) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return respond(&mut s, "431 Request Header Fields Too Large", b"");
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    match (method, path) {
        (b"GET", b"/metrics") => {
            let mut body = Vec::with_capacity(16 << 10);
            exposition(&crate::observability::stats::for_metrics(shared)).render(&mut body);
            let workers: Vec<_> = shared.workers.iter().map(|w| &w.latency).collect();
            crate::observability::latency::prometheus(&mut body, &workers);
            respond(&mut s, "200 OK", &body)
        }
        (b"GET", _) => respond(&mut s, "404 Not Found", b"only /metrics is served here\n"),
        _ => respond(&mut s, "405 Method Not Allowed", b""),
    }
}

fn respond(s: &mut TcpStream, status: &str, body: &[u8]) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    s.flush()
}

/// Stats memcached_exporter serves under names of its own: the stat (of
/// `stats`, `stats settings` or `stats slabs`), the series, its type. Two
/// stats naming one series (`max_connections`, `maxconns`): the first
/// wins. The types are the exporter's, but where it declares a level a
/// counter (`memcached_uptime_seconds`, `memcached_extstore_bytes_used`)
/// it is a gauge here: `promtool check metrics` refuses a counter whose
/// name does not end in `_total`, and the names matter more to the
/// queries that carry over (PromQL does not look at the type).
const EXPORTER: &[(&str, &str, Kind)] = &[
    ("uptime", "memcached_uptime_seconds", Kind::Gauge),
    ("time", "memcached_time_seconds", Kind::Gauge),
    ("rusage_user", "memcached_process_user_cpu_seconds_total", Kind::Counter),
    ("rusage_system", "memcached_process_system_cpu_seconds_total", Kind::Counter),
    ("bytes_read", "memcached_read_bytes_total", Kind::Counter),
    ("bytes_written", "memcached_written_bytes_total", Kind::Counter),
    ("curr_connections", "memcached_current_connections", Kind::Gauge),
    ("max_connections", "memcached_max_connections", Kind::Gauge),
    ("maxconns", "memcached_max_connections", Kind::Gauge),
    ("total_connections", "memcached_connections_total", Kind::Counter),
    ("rejected_connections", "memcached_connections_rejected_total", Kind::Counter),
    ("conn_yields", "memcached_connections_yielded_total", Kind::Counter),
    ("accepting_conns", "memcached_accepting_connections", Kind::Gauge),
    ("bytes", "memcached_current_bytes", Kind::Gauge),
    ("limit_maxbytes", "memcached_limit_bytes", Kind::Gauge),
    ("total_malloced", "memcached_malloced_bytes", Kind::Gauge),
    ("curr_items", "memcached_current_items", Kind::Gauge),
    ("total_items", "memcached_items_total", Kind::Counter),
    ("evictions", "memcached_items_evicted_total", Kind::Counter),
    ("reclaimed", "memcached_items_reclaimed_total", Kind::Counter),
    ("store_too_large", "memcached_item_too_large_total", Kind::Counter),
    ("store_no_memory", "memcached_item_no_memory_total", Kind::Counter),
    ("extstore_page_evictions", "memcached_extstore_pages_evicted_total", Kind::Counter),
    ("extstore_objects_evicted", "memcached_extstore_objects_evicted_total", Kind::Counter),
    ("extstore_objects_read", "memcached_extstore_objects_read_total", Kind::Counter),
    ("extstore_objects_written", "memcached_extstore_objects_written_total", Kind::Counter),
    ("extstore_objects_used", "memcached_extstore_objects_used", Kind::Gauge),
    ("extstore_bytes_written", "memcached_extstore_bytes_written_total", Kind::Counter),
    ("extstore_bytes_read", "memcached_extstore_bytes_read_total", Kind::Counter),
    ("extstore_bytes_used", "memcached_extstore_bytes_used", Kind::Gauge),
    ("extstore_limit_maxbytes", "memcached_extstore_bytes_limit", Kind::Gauge),
    ("extstore_io_queue", "memcached_extstore_io_queue_depth", Kind::Gauge),
    ("lru_crawler_starts", "memcached_lru_crawler_starts_total", Kind::Counter),
    ("crawler_reclaimed", "memcached_lru_crawler_reclaimed_total", Kind::Counter),
    ("crawler_items_checked", "memcached_lru_crawler_items_checked_total", Kind::Counter),
    ("lru_crawler_sleep", "memcached_lru_crawler_sleep", Kind::Gauge),
    ("lru_crawler_tocrawl", "memcached_lru_crawler_to_crawl", Kind::Gauge),
];

/// The stats memcached_exporter folds into `memcached_commands_total`,
/// with its `command` and `status` labels. `set`/`hit` is derived:
/// `cmd_set` less the cas commands, which memcached counts in both.
const COMMANDS: &[(&str, &str, &str)] = &[
    ("get_hits", "get", "hit"),
    ("get_misses", "get", "miss"),
    ("delete_hits", "delete", "hit"),
    ("delete_misses", "delete", "miss"),
    ("incr_hits", "incr", "hit"),
    ("incr_misses", "incr", "miss"),
    ("decr_hits", "decr", "hit"),
    ("decr_misses", "decr", "miss"),
    ("cas_hits", "cas", "hit"),
    ("cas_misses", "cas", "miss"),
    ("cas_badval", "cas", "badval"),
    ("touch_hits", "touch", "hit"),
    ("touch_misses", "touch", "miss"),
    ("cmd_flush", "flush", "hit"),
];

/// memcached_exporter's per-class series from `stats items`, labelled
/// `slab` with the class id: strata's classes are size bands (the store's
/// `bands.rs`), listed once they hold an item as memcached lists its
/// classes. `evicted_time` and `mem_requested` are levels, gauges here
/// (see [`EXPORTER`]).
const SLAB_ITEMS: &[(&str, &str, Kind)] = &[
    ("number", "memcached_slab_current_items", Kind::Gauge),
    ("age", "memcached_slab_items_age_seconds", Kind::Gauge),
    ("evicted", "memcached_slab_items_evicted_total", Kind::Counter),
    ("evicted_nonzero", "memcached_slab_items_evicted_nonzero_total", Kind::Counter),
    ("evicted_time", "memcached_slab_items_evicted_time_seconds", Kind::Gauge),
    ("evicted_unfetched", "memcached_slab_items_evicted_unfetched_total", Kind::Counter),
    ("expired_unfetched", "memcached_slab_items_expired_unfetched_total", Kind::Counter),
    ("outofmemory", "memcached_slab_items_outofmemory_total", Kind::Counter),
    ("reclaimed", "memcached_slab_items_reclaimed_total", Kind::Counter),
    ("crawler_reclaimed", "memcached_slab_items_crawler_reclaimed_total", Kind::Counter),
    ("mem_requested", "memcached_slab_mem_requested_bytes", Kind::Gauge),
];

/// memcached_exporter's per-class series from `stats slabs` (`<id>:<field>`),
/// labelled `slab`: a size band's chunk size, its segments as pages, its
/// items as used chunks (no chunks are set aside per size, so none are
/// free).
const SLAB_SLABS: &[(&str, &str, Kind)] = &[
    ("chunk_size", "memcached_slab_chunk_size_bytes", Kind::Gauge),
    ("chunks_per_page", "memcached_slab_chunks_per_page", Kind::Gauge),
    ("total_pages", "memcached_slab_current_pages", Kind::Gauge),
    ("total_chunks", "memcached_slab_current_chunks", Kind::Gauge),
    ("used_chunks", "memcached_slab_chunks_used", Kind::Gauge),
    ("free_chunks", "memcached_slab_chunks_free", Kind::Gauge),
    ("free_chunks_end", "memcached_slab_chunks_free_end", Kind::Gauge),
];

/// `items:<id>:<field>` or `<id>:<field>`: the class id and the field.
fn per_class<'a>(name: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let (id, field) = name.strip_prefix(prefix)?.split_once(':')?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then_some((id, field))
}

/// strata-only stats whose name the general rule (`strata_` + the name,
/// `_total` on a counter) would leave without its unit, against
/// Prometheus' naming conventions.
const RENAMES: &[(&str, &str)] = &[
    ("idle_timeout", "strata_idle_timeout_seconds"),
    ("snapshot_interval", "strata_snapshot_interval_seconds"),
    ("snapshot_last_time", "strata_snapshot_last_timestamp_seconds"),
    ("time_since_server_cert_refresh", "strata_time_since_server_cert_refresh_seconds"),
];

/// The name and scale a strata-only numeric stat is served under:
/// `strata_<name>` (the stat's own `strata_` prefix not doubled),
/// microseconds (`_us`) as seconds, `_total` on counters and only on
/// them (`strata_segments_total`, a gauge, is `strata_segments`).
fn strata_name(stat: &str, kind: Kind) -> (String, f64) {
    if let Some(&(_, to)) = RENAMES.iter().find(|(from, _)| *from == stat) {
        return (to.to_string(), 1.0);
    }
    let base = stat.strip_prefix("strata_").unwrap_or(stat);
    let (mut name, scale) = match base.strip_suffix("_us") {
        Some(b) => (format!("strata_{b}_seconds"), 1e-6),
        None => (format!("strata_{base}"), 1.0),
    };
    match (kind == Kind::Counter, name.ends_with("_total")) {
        (true, false) => name.push_str("_total"),
        (false, true) => name.truncate(name.len() - "_total".len()),
        _ => {}
    }
    (name, scale)
}

/// What `/metrics` serves, from `stats`, `stats settings`, `stats items`
/// and `stats slabs` taken at once.
pub(crate) fn exposition(snaps: &[Snapshot]) -> Exposition {
    let mut e = Exposition::default();
    let stats: Vec<&Stat> = snaps.iter().flat_map(|s| s.stats.iter()).collect();
    let number = |name: &str| stats.iter().find(|s| s.name == name).and_then(|s| s.value.number());
    // It answers, so it is up: a strata that is down fails the scrape
    // instead, which Prometheus' own `up` series shows.
    e.sample("memcached_up", "Whether the server could be reached (1: this is it answering).", Kind::Gauge, &[], 1.0);
    let mut info: Vec<(&str, String)> = Vec::new();
    for st in &stats {
        let Some(value) = st.value.number() else {
            if st.name == "version" {
                let v = st.value.to_string();
                e.sample("memcached_version", "The memcached version served.", Kind::Gauge, &[("version", &v)], 1.0);
            } else if metric_name(&st.name) && !info.iter().any(|(k, _)| *k == st.name) {
                // One label per name, each a valid one: a label repeated
                // or misspelt would cost the whole strata_info sample.
                info.push((&st.name, st.value.to_string()));
            }
            continue;
        };
        if let Some(&(_, name, kind)) = EXPORTER.iter().find(|(stat, _, _)| *stat == st.name) {
            e.sample(name, st.help, kind, &[], value);
        } else if let Some(&(_, command, status)) = COMMANDS.iter().find(|(stat, _, _)| *stat == st.name) {
            commands(&mut e, command, status, value);
        } else if let Some((id, field)) = per_class(&st.name, "items:") {
            if let Some(&(_, name, kind)) = SLAB_ITEMS.iter().find(|(f, _, _)| *f == field) {
                e.sample(name, st.help, kind, &[("slab", id)], value);
            }
        } else if let Some((id, field)) = per_class(&st.name, "") {
            if let Some(&(_, name, kind)) = SLAB_SLABS.iter().find(|(f, _, _)| *f == field) {
                e.sample(name, st.help, kind, &[("slab", id)], value);
            }
        } else {
            let (name, scale) = strata_name(&st.name, st.kind);
            // The help of a stat in microseconds says so; served in seconds.
            let help =
                if st.name.ends_with("_us") { st.help.replacen("Microseconds", "Seconds", 1) } else { st.help.into() };
            e.sample(&name, &help, st.kind, &[], value * scale);
        }
    }
    if let Some(set) = number("cmd_set") {
        let cas: f64 = ["cas_hits", "cas_misses", "cas_badval"].iter().filter_map(|n| number(n)).sum();
        commands(&mut e, "set", "hit", (set - cas).max(0.0));
    }
    // strata never stops accepting at -c: a connection over it is told
    // so and closed (memcached's maxconns_fast), counted in
    // memcached_connections_rejected_total.
    e.sample(
        "memcached_connections_listener_disabled_total",
        "Times the listener was disabled at the connection limit: always 0, over-limit connections are rejected.",
        Kind::Counter,
        &[],
        0.0,
    );
    if !info.is_empty() {
        let labels: Vec<(&str, &str)> = info.iter().map(|(k, v)| (*k, v.as_str())).collect();
        e.sample("strata_info", "Text-valued stats and settings, as labels.", Kind::Gauge, &labels, 1.0);
    }
    e
}

fn commands(e: &mut Exposition, command: &str, status: &str, value: f64) {
    e.sample(
        "memcached_commands_total",
        "Requests by command (get, set, etc.) and status (hit, miss, badval).",
        Kind::Counter,
        &[("command", command), ("status", status)],
        value,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wait for a scrape: false when none comes within the timeout,
    /// true (and acceptable) once one has connected.
    #[test]
    fn the_listener_is_readable_once_a_scrape_connects() -> io::Result<()> {
        let l = bind("127.0.0.1:0")?;
        assert!(!readable(&l, 10));
        let _c = TcpStream::connect(l.local_addr()?)?;
        assert!(readable(&l, 5_000));
        assert!(l.accept().is_ok());
        Ok(())
    }

    #[test]
    fn strata_names_follow_prometheus_conventions() {
        assert_eq!(strata_name("strata_segments_total", Kind::Gauge), ("strata_segments".into(), 1.0));
        assert_eq!(strata_name("strata_cleaner_us", Kind::Counter), ("strata_cleaner_seconds_total".into(), 1e-6));
        assert_eq!(strata_name("snapshot_last_duration_us", Kind::Gauge).0, "strata_snapshot_last_duration_seconds");
        assert_eq!(strata_name("get_expired", Kind::Counter).0, "strata_get_expired_total");
        assert_eq!(strata_name("hash_bytes", Kind::Gauge).0, "strata_hash_bytes");
        assert_eq!(strata_name("idle_timeout", Kind::Info).0, "strata_idle_timeout_seconds");
    }

    #[test]
    fn exporter_names_labels_and_the_derived_set() {
        let mut s = Snapshot::default();
        s.counter("uptime", "up", 5u64);
        s.info("version", "v", "1.6.38");
        s.counter("cmd_set", "sets", 10u64);
        s.counter("cas_hits", "h", 2u64);
        s.counter("cas_misses", "m", 1u64);
        s.counter("cas_badval", "b", 1u64);
        s.counter("get_hits", "h", 3u64);
        s.gauge("max_connections", "c", 1024u32);
        s.info("maxconns", "c", 7u32);
        s.info("binding_protocol", "p", "auto-negotiate");
        s.info("binding_protocol", "again", "ascii");
        s.info("1:state", "not a label name", "x");
        s.counter("items:1:evicted_unfetched", "e", 4u64);
        s.counter("1:get_hits", "per class", 3u64);
        s.counter("strata_cleaner_us", "Microseconds spent cleaning.", 2_500_000u64);
        let mut out = Vec::new();
        exposition(&[s]).render(&mut out);
        let text = String::from_utf8(out).unwrap_or_default();
        for line in [
            "memcached_up 1\n",
            "# TYPE memcached_uptime_seconds gauge\nmemcached_uptime_seconds 5\n",
            "memcached_version{version=\"1.6.38\"} 1\n",
            "# TYPE memcached_commands_total counter\n",
            "memcached_commands_total{command=\"cas\",status=\"badval\"} 1\n",
            "memcached_commands_total{command=\"get\",status=\"hit\"} 3\n",
            "memcached_commands_total{command=\"set\",status=\"hit\"} 6\n",
            "memcached_max_connections 1024\n",
            "strata_cmd_set_total 10\n",
            "memcached_slab_items_evicted_unfetched_total{slab=\"1\"} 4\n",
            "memcached_connections_listener_disabled_total 0\n",
            "strata_info{binding_protocol=\"auto-negotiate\"} 1\n",
            "# HELP strata_cleaner_seconds_total Seconds spent cleaning.\n",
            "strata_cleaner_seconds_total 2.5\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(!text.contains("1:get_hits") && !text.contains("memcached_max_connections 7"), "{text}");
        assert_eq!(text.matches("# TYPE memcached_commands_total").count(), 1);
    }
}
