//! Results and their three renderings: JSON (everything, for re-analysis),
//! a Markdown table (for `docs/benchmarks.md`) and SVG bar charts
//! (latency percentiles, throughput, server CPU per op, side by side).
//! The charts are a few rectangles and labels, written directly rather than
//! through a plotting crate (`svg.rs`).

mod svg;

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::{Mode, Workload};
pub use crate::driver::BANDS;
use crate::driver::{Bytes, Totals, BAND_LABELS, BAND_TOPS};
use crate::proto::Protocol;
use crate::server::Cpu;
use svg::{svg, Panel};

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Percentiles {
    pub fn of(t: &Totals) -> Percentiles {
        let h = &t.latency;
        let us = |ns: u64| ns as f64 / 1000.0;
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

/// Capacity mode's findings.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Capacity {
    /// Distinct keys written.
    pub written: u64,
    /// Items the server reports holding at the end.
    pub items: u64,
    pub evictions: u64,
    /// Keys written when the first eviction was seen.
    pub first_eviction_at: Option<u64>,
    pub rss_bytes_per_item: f64,
    /// Strata's `strata_compression_ratio` (original bytes over stored
    /// bytes of the values it holds compressed), with compression on.
    pub compression_ratio: Option<f64>,
}

/// Single-key gets of values in one size band.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeBand {
    pub band: String,
    /// The band's value sizes, bytes: `min_bytes..=max_bytes` (no
    /// `max_bytes`: unbounded).
    pub min_bytes: u64,
    pub max_bytes: Option<u64>,
    pub gets: u64,
    pub hits: u64,
    pub hit_ratio: f64,
    /// Bytes of the values asked for (a miss counts the key's size) and
    /// of those returned.
    pub requested_bytes: u64,
    pub hit_bytes: u64,
    pub byte_hit_ratio: Option<f64>,
}

impl SizeBand {
    /// The bands that occurred in `bands` (indexed by [`band_of`]).
    pub fn of(bands: &[Bytes; BANDS]) -> Vec<SizeBand> {
        bands
            .iter()
            .enumerate()
            .filter(|(_, b)| b.gets > 0)
            .map(|(i, b)| SizeBand {
                band: BAND_LABELS[i].into(),
                min_bytes: if i == 0 { 0 } else { BAND_TOPS[i - 1] + 1 },
                max_bytes: BAND_TOPS.get(i).copied(),
                gets: b.gets,
                hits: b.hits,
                hit_ratio: b.hits as f64 / b.gets as f64,
                requested_bytes: b.requested,
                hit_bytes: b.hit,
                byte_hit_ratio: (b.requested > 0).then(|| b.hit as f64 / b.requested as f64),
            })
            .collect()
    }
}

/// One workload against one server.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub workload: Workload,
    pub server: String,
    pub version: String,
    pub command: String,
    pub protocol: Protocol,
    pub elapsed_secs: f64,
    pub requests: u64,
    pub sets: u64,
    pub gets: u64,
    /// Keys read by gets.
    pub keys: u64,
    pub hits: u64,
    pub misses: u64,
    pub errors: u64,
    pub requests_per_sec: f64,
    /// Sets plus keys read, per second (a 16-key multi-get is 16 ops).
    pub ops_per_sec: f64,
    pub latency_us: Percentiles,
    pub server_cpu_secs: Option<Cpu>,
    /// Server CPU (user + system) per op, µs.
    pub server_cpu_us_per_op: Option<f64>,
    pub server_cpu_us_per_request: Option<f64>,
    /// Share of server CPU spent in the kernel.
    pub server_system_share: Option<f64>,
    pub client_cpu_us_per_op: Option<f64>,
    pub server_rss_bytes: Option<u64>,
    pub hit_ratio: Option<f64>,
    /// Bytes of values returned on hits over bytes of values asked for, a
    /// miss counting the size the key's value has (single-key gets only;
    /// none without them).
    pub byte_hit_ratio: Option<f64>,
    pub requested_bytes: u64,
    pub hit_bytes: u64,
    /// Hits by value size, the bands that occurred (single-key gets).
    pub size_bands: Vec<SizeBand>,
    /// Strata's `strata_write_amplification` after the measured phase:
    /// cumulative since the server started, so it covers the warm-up too.
    pub write_amplification: Option<f64>,
    pub capacity: Option<Capacity>,
    /// Which of `--repeat` rounds this was, from 0.
    pub round: u32,
}

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub description: String,
    pub command_line: String,
    pub machine: Machine,
    pub memory_mb: u64,
    pub server_threads: usize,
    pub redis_io_threads: usize,
    pub started_unix: u64,
    /// Rounds per workload (`--repeat`).
    pub repeat: u32,
    pub runs: Vec<RunResult>,
}

/// Where it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned()))
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            cpu_model,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned(),
        }
    }
}

/// Optional columns of the load/hit-ratio tables.
#[derive(Debug, Clone, Copy)]
struct Columns {
    /// Write amplification (strata reports it).
    wa: bool,
    /// Byte hit ratio (runs with single-key gets).
    bh: bool,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.digits$}"))
}

fn describe(w: &Workload) -> String {
    let mut d = format!("{} conns", w.connections);
    if w.pipeline > 1 {
        let _ = write!(d, ", pipeline {}", w.pipeline);
    }
    if w.multiget > 1 {
        let _ = write!(d, ", {}-key get", w.multiget);
    }
    if w.mode == Mode::Load {
        let _ = write!(d, ", {}:{} set:get", w.ratio.sets, w.ratio.gets);
    }
    match &w.replay {
        Some(t) => {
            let _ = write!(d, ", replay of {}", t.display());
        }
        None => {
            let _ = write!(d, ", {} B values, {} keys {}", w.value_size, w.keys, w.key_dist);
        }
    }
    if let Some(r) = w.rate {
        let _ = write!(d, ", open loop {r:.0}/s");
    }
    d
}

impl Report {
    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "### {}\n", self.scenario);
        if !self.description.is_empty() {
            let _ = writeln!(m, "{}\n", self.description);
        }
        let _ = writeln!(
            m,
            "`{}` — {} × {}, Linux {}; every server `-m {}` (redis `maxmemory {}mb`, `allkeys-lru`), \
             {} worker threads (redis: one command thread, `io-threads {}`).\n",
            self.command_line,
            self.machine.cpus,
            self.machine.cpu_model,
            self.machine.kernel,
            self.memory_mb,
            self.memory_mb,
            self.server_threads,
            self.redis_io_threads
        );
        let mut versions: Vec<(String, String)> =
            self.runs.iter().map(|r| (r.server.clone(), r.version.clone())).collect();
        versions.dedup();
        versions.sort();
        versions.dedup();
        let v: Vec<String> = versions.iter().map(|(s, v)| format!("{s}: {v}")).collect();
        let _ = writeln!(m, "Versions: {}.\n", v.join("; "));
        for name in self.workload_names() {
            let runs: Vec<&RunResult> = self.runs.iter().filter(|r| r.workload.name == name).collect();
            let _ = writeln!(m, "\n**{}** — {}\n", name, describe(&runs[0].workload));
            let load = runs[0].workload.mode != Mode::Capacity;
            let cols = Columns {
                // Only when a server reported it (strata).
                wa: runs.iter().any(|r| r.write_amplification.is_some()),
                // Only when there were single-key gets.
                bh: runs.iter().any(|r| r.byte_hit_ratio.is_some()),
            };
            if load {
                m.push_str("| server | proto | req/s | ops/s | p50 µs | p90 | p99 | p99.9 | max | hit % |");
                if cols.bh {
                    m.push_str(" byte hit % |");
                }
                m.push_str(" server CPU µs/op | of which kernel | client CPU µs/op | RSS MB |");
                m.push_str(if cols.wa { " write amp. |\n" } else { "\n" });
                m.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
                m.push_str(if cols.bh { "---:|" } else { "" });
                m.push_str("---:|---:|---:|---:|");
                m.push_str(if cols.wa { "---:|\n" } else { "\n" });
            } else {
                m.push_str(
                    "| server | keys written | items held | evictions | RSS MB | RSS bytes/item | compression |\n",
                );
                m.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
            }
            for r in &runs {
                self.row(&mut m, r, cols);
            }
            if load && self.repeat > 1 {
                self.summary(&mut m, &runs, cols);
            }
            if load {
                self.bands(&mut m, &runs);
            }
        }
        m
    }

    /// Each run's hit ratio by value size, when more than one size band
    /// occurred, and the share of the gets each band had.
    fn bands(&self, m: &mut String, runs: &[&RunResult]) {
        let mut gets = [0u64; BANDS];
        for b in runs.iter().flat_map(|r| &r.size_bands) {
            if let Some(i) = BAND_LABELS.iter().position(|l| *l == b.band) {
                gets[i] += b.gets;
            }
        }
        let seen: Vec<usize> = (0..BANDS).filter(|&i| gets[i] > 0).collect();
        if seen.len() < 2 {
            return;
        }
        let _ = writeln!(m, "\nHit % by value size (KB = 1024 B, tops inclusive; single-key gets):\n");
        m.push_str("| server |");
        for &i in &seen {
            let _ = write!(m, " {} |", BAND_LABELS[i]);
        }
        m.push_str("\n|---|");
        m.push_str(&"---:|".repeat(seen.len()));
        m.push('\n');
        for r in runs {
            let _ = write!(m, "| {} |", self.server_label(r));
            for &i in &seen {
                let hit = r.size_bands.iter().find(|b| b.band == BAND_LABELS[i]).map(|b| b.hit_ratio * 100.0);
                let _ = write!(m, " {} |", opt(hit, 1));
            }
            m.push('\n');
        }
        let total: u64 = gets.iter().sum();
        m.push_str("| share of gets |");
        for &i in &seen {
            let _ = write!(m, " {:.1}% |", gets[i] as f64 * 100.0 / total as f64);
        }
        m.push('\n');
    }

    fn server_label(&self, r: &RunResult) -> String {
        match self.repeat {
            1 => r.server.clone(),
            _ => format!("{} ({})", r.server, r.round + 1),
        }
    }

    /// Workload names in the order they ran.
    fn workload_names(&self) -> Vec<&str> {
        first_seen(self.runs.iter().map(|r| r.workload.name.as_str()))
    }

    fn row(&self, m: &mut String, r: &RunResult, cols: Columns) {
        let rss = r.server_rss_bytes.map(|b| b as f64 / 1_048_576.0);
        let server = self.server_label(r);
        match (&r.workload.mode, &r.capacity) {
            (Mode::Capacity, Some(c)) => {
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} | {} | {:.1} | {} |",
                    server,
                    c.written,
                    c.items,
                    c.evictions,
                    opt(rss, 0),
                    c.rss_bytes_per_item,
                    c.compression_ratio.map_or_else(|| "–".into(), |r| format!("{r:.2}×")),
                );
            }
            _ => {
                let l = r.latency_us;
                let _ = write!(
                    m,
                    "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                    server,
                    r.protocol,
                    r.requests_per_sec,
                    r.ops_per_sec,
                    l.p50,
                    l.p90,
                    l.p99,
                    l.p999,
                    l.max,
                    opt(r.hit_ratio.map(|h| h * 100.0), 1),
                );
                if cols.bh {
                    let _ = write!(m, " {} |", opt(r.byte_hit_ratio.map(|h| h * 100.0), 1));
                }
                let _ = write!(
                    m,
                    " {} | {} | {} | {} |",
                    opt(r.server_cpu_us_per_op, 2),
                    r.server_system_share.map_or_else(|| "–".into(), |s| format!("{:.0}%", s * 100.0)),
                    opt(r.client_cpu_us_per_op, 2),
                    opt(rss, 0),
                );
                if cols.wa {
                    let _ = write!(m, " {} |", opt(r.write_amplification, 2));
                }
                m.push('\n');
            }
        }
    }

    /// Medians and ranges over the rounds, and each server's figures over
    /// memcached's from the same round (paired, so drift between rounds
    /// cancels).
    fn summary(&self, m: &mut String, runs: &[&RunResult], cols: Columns) {
        let servers = servers_of(runs);
        let _ = writeln!(m, "\nOver {} rounds, median (min–max):\n", self.repeat);
        m.push_str("| server | server CPU µs/op | CPU ÷ memcached's | p99 µs | p99 ÷ memcached's | hit % |");
        m.push_str(if cols.bh { " byte hit % |" } else { "" });
        m.push_str(if cols.wa { " write amp. |\n" } else { "\n" });
        m.push_str("|---|---:|---:|---:|---:|---:|");
        m.push_str(if cols.bh { "---:|" } else { "" });
        m.push_str(if cols.wa { "---:|\n" } else { "\n" });
        let cpu = |r: &RunResult| r.server_cpu_us_per_op;
        let p99 = |r: &RunResult| Some(r.latency_us.p99);
        let hits = |r: &RunResult| r.hit_ratio.map(|h| h * 100.0);
        for server in &servers {
            let mine: Vec<&RunResult> = runs.iter().copied().filter(|r| r.server == *server).collect();
            let _ = write!(
                m,
                "| {} | {} | {} | {} | {} | {} |",
                server,
                spread(&values(&mine, cpu), 2),
                spread(&paired_ratios(runs, server, cpu), 2),
                spread(&values(&mine, p99), 0),
                spread(&paired_ratios(runs, server, p99), 2),
                spread(&values(&mine, hits), 1),
            );
            if cols.bh {
                let _ = write!(m, " {} |", spread(&values(&mine, |r| r.byte_hit_ratio.map(|h| h * 100.0)), 1));
            }
            if cols.wa {
                let _ = write!(m, " {} |", spread(&values(&mine, |r| r.write_amplification), 2));
            }
            m.push('\n');
        }
    }

    /// One SVG per load workload: latency percentiles, throughput and server
    /// CPU per op, one colour per server.
    pub fn charts(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for name in self.workload_names() {
            let all: Vec<&RunResult> =
                self.runs.iter().filter(|r| r.workload.name == name && r.workload.mode != Mode::Capacity).collect();
            let runs = representatives(&all);
            if runs.is_empty() {
                continue;
            }
            let servers: Vec<String> = runs.iter().map(|r| r.server.clone()).collect();
            let latency = Panel {
                title: "latency, µs",
                groups: ["p50", "p90", "p99", "p99.9"]
                    .iter()
                    .enumerate()
                    .map(|(i, g)| {
                        let v = runs
                            .iter()
                            .map(|r| {
                                let l = r.latency_us;
                                [l.p50, l.p90, l.p99, l.p999][i]
                            })
                            .collect();
                        (g.to_string(), v)
                    })
                    .collect(),
            };
            let throughput = Panel {
                title: "throughput, ops/s",
                groups: vec![(String::new(), runs.iter().map(|r| r.ops_per_sec).collect())],
            };
            let cpu = Panel {
                title: "server CPU, µs per op",
                groups: vec![(String::new(), runs.iter().map(|r| r.server_cpu_us_per_op.unwrap_or(0.0)).collect())],
            };
            let title = format!("{} / {}: {}", self.scenario, name, describe(&runs[0].workload));
            out.push((format!("{}-{}.svg", self.scenario, name), svg(&title, &servers, &[latency, throughput, cpu])));
        }
        out
    }
}

/// Each distinct name once, in the order first seen.
fn first_seen<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    for n in names {
        if !seen.contains(&n) {
            seen.push(n);
        }
    }
    seen
}

/// Servers in the order they first ran.
fn servers_of<'a>(runs: &[&'a RunResult]) -> Vec<&'a str> {
    first_seen(runs.iter().map(|r| r.server.as_str()))
}

fn values(runs: &[&RunResult], f: impl Fn(&RunResult) -> Option<f64>) -> Vec<f64> {
    runs.iter().filter_map(|r| f(r)).collect()
}

/// `server`'s figure over memcached's, one per round that measured both.
fn paired_ratios(runs: &[&RunResult], server: &str, f: impl Fn(&RunResult) -> Option<f64>) -> Vec<f64> {
    let of = |name: &str, round: u32| runs.iter().find(|r| r.server == name && r.round == round).and_then(|r| f(r));
    let rounds = runs.iter().filter(|r| r.server == server).map(|r| r.round);
    rounds
        .filter_map(|round| match (of(server, round), of("memcached", round)) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        })
        .collect()
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// "median (min–max)", or "–" with nothing to show.
fn spread(v: &[f64], digits: usize) -> String {
    let Some(mid) = median(v) else { return "–".into() };
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.len() == 1 {
        return format!("{mid:.digits$}");
    }
    format!("{mid:.digits$} ({lo:.digits$}–{hi:.digits$})")
}

/// One run per server for the charts: the one with the median CPU per op
/// (the lower middle for an even count), so a chart shows a run that
/// happened rather than a blend of several.
fn representatives<'a>(runs: &[&'a RunResult]) -> Vec<&'a RunResult> {
    servers_of(runs)
        .iter()
        .filter_map(|server| {
            let mut mine: Vec<&RunResult> = runs.iter().copied().filter(|r| r.server == *server).collect();
            mine.sort_by(|a, b| {
                a.server_cpu_us_per_op.unwrap_or(0.0).total_cmp(&b.server_cpu_us_per_op.unwrap_or(0.0))
            });
            mine.get(mine.len().saturating_sub(1) / 2).copied()
        })
        .collect()
}

#[cfg(test)]
mod tests;
