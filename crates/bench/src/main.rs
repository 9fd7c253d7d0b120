//! `strata-bench`: measures strata, memcached and Redis side by side in one
//! run, on one machine, with the same workload, memory and threads.
//!
//! It starts each server itself (or targets one already running), drives a
//! workload over its protocol from client threads, and reports throughput,
//! latency percentiles, hits and misses, the server's CPU time per op (from
//! `/proc`, before and after) and its RSS, as JSON, a Markdown table and SVG
//! charts, and strata's write amplification from its `stats`. Modes: `load`
//! (a request mix), `capacity` (distinct keys until the server evicts) and
//! `hit-ratio` (cache-aside over a key space larger than memory; request
//! and byte hit ratio, and hits by value size). Scenario files in
//! `bench/scenarios/` hold the workloads users asked about;
//! `docs/benchmarks.md` records their results.

mod args;
mod config;
mod driver;
mod gen;
mod proto;
mod report;
mod server;
mod tls;
mod trace;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use clap::Parser as _;
use indicatif::{ProgressBar, ProgressStyle};

use args::{Cli, Cmd, Common, RunArgs, ScenarioArgs};
use config::{Mode, Scenario, ServerKind, ValueSize, Workload};
use driver::{Plan, Scan, Source, Totals};
use gen::{KeyChooser, Values};
use proto::Protocol;
use report::{Capacity, Machine, Percentiles, Report, RunResult, SizeBand};
use server::{Binaries, Settings, Target};

/// Why a benchmark could not finish.
#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Server(#[from] server::ServerError),
    #[error("{server}: {source}")]
    Driver { server: String, source: driver::DriverError },
    #[error("writing {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("{0}")]
    Other(String),
}

fn main() {
    let cli = Cli::parse();
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let result = match cli.command {
        Cmd::Run(a) => run_cmd(*a, command_line),
        Cmd::Scenario(a) => scenario_cmd(*a, command_line),
    };
    if let Err(e) = result {
        eprintln!("strata-bench: {e}");
        std::process::exit(1);
    }
}

fn run_cmd(a: RunArgs, command_line: String) -> Result<(), BenchError> {
    let w = Workload {
        name: a.name.clone(),
        mode: a.mode,
        protocol: a.protocol,
        connections: a.connections,
        threads: a.threads,
        pipeline: a.pipeline,
        multiget: a.multiget,
        ratio: a.ratio,
        keys: a.keys,
        key_size: a.key_size,
        key_dist: a.key_dist,
        value_size: a.value_size,
        duration_secs: a.duration,
        ops: a.ops,
        rate: a.rate,
        warmup: a.warmup,
        fill_order: a.fill_order,
        warmup_ops: a.warmup_ops,
        overfill: a.overfill,
        seed: a.seed,
        replay: a.replay,
        replay_fills: true,
        ttls: a.ttls,
        scan_every: a.scan_every,
        scan_keys: a.scan_keys,
    };
    w.validate()?;
    let mut runs = toml::Table::new();
    runs.insert("name".into(), toml::Value::String(a.name.clone()));
    let scenario = Scenario {
        name: a.name,
        description: String::new(),
        servers: a.common.servers.clone(),
        memory_mb: a.memory_mb,
        server_threads: a.server_threads,
        redis_io_threads: a.redis_io_threads,
        defaults: toml::Table::new(),
        runs: vec![runs],
    };
    let report = measure(&a.common, &scenario, &[w], command_line)?;
    emit(&a.common, &report)
}

fn scenario_cmd(a: ScenarioArgs, command_line: String) -> Result<(), BenchError> {
    for file in &a.files {
        let mut scenario = Scenario::load(file)?;
        if a.common.servers != default_servers() {
            scenario.servers = a.common.servers.clone();
        }
        let workloads: Vec<Workload> =
            scenario.workloads()?.into_iter().filter(|w| a.only.is_empty() || a.only.contains(&w.name)).collect();
        let report = measure(&a.common, &scenario, &workloads, command_line.clone())?;
        emit(&a.common, &report)?;
    }
    Ok(())
}

fn default_servers() -> Vec<ServerKind> {
    vec![ServerKind::Strata, ServerKind::Memcached, ServerKind::Redis]
}

fn emit(common: &Common, report: &Report) -> Result<(), BenchError> {
    let md = report.markdown();
    println!("{md}");
    let Some(dir) = &common.out else { return Ok(()) };
    let write = |name: String, body: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, body).map_err(|source| BenchError::Write { path: path.display().to_string(), source })
    };
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Write { path: dir.display().to_string(), source })?;
    let json = serde_json::to_vec_pretty(report).map_err(|e| BenchError::Other(e.to_string()))?;
    write(format!("{}.json", report.scenario), &json)?;
    write(format!("{}.md", report.scenario), md.as_bytes())?;
    for (name, svg) in report.charts() {
        write(name, svg.as_bytes())?;
    }
    eprintln!("strata-bench: results in {}", dir.display());
    Ok(())
}

fn measure(
    common: &Common,
    scenario: &Scenario,
    workloads: &[Workload],
    command_line: String,
) -> Result<Report, BenchError> {
    let mut bins = Binaries::find();
    if let Some(b) = &common.strata_bin {
        bins.strata = b.clone();
    }
    bins.memcached = common.memcached_bin.clone();
    bins.redis = common.redis_bin.clone();
    let settings = Settings {
        memory_mb: scenario.memory_mb,
        threads: scenario.server_threads,
        redis_io_threads: scenario.redis_io_threads,
    };
    let tls = match common.tls {
        true => Some(tls::TlsFiles::generate().map_err(|e| BenchError::Other(format!("--tls: {e}")))?),
        false => None,
    };
    let started_unix =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut runs = Vec::new();
    for w in workloads {
        let mut w = w.clone();
        w.duration_secs *= common.time_scale;
        let replay = load_replay(&mut w)?;
        let servers: Vec<ServerKind> = match common.addr {
            Some(_) => vec![common.servers.first().copied().unwrap_or(ServerKind::Memcached)],
            None => scenario.servers.clone(),
        };
        for round in 0..common.repeat {
            // Rotating who goes first keeps a drift in the host's load from
            // always landing on the same server.
            let mut order = servers.clone();
            let first = round as usize % order.len().max(1);
            order.rotate_left(first);
            for &kind in &order {
                // Each measurement gets a fresh server: no state carried over.
                let target = match common.addr {
                    Some(addr) => Target::external(kind, addr, common.pid),
                    None => Target::start(kind, &bins, settings, tls.as_ref())?,
                };
                let label = match common.repeat {
                    1 => format!("{}/{} {kind}", scenario.name, w.name),
                    n => format!("{}/{} {kind} (round {}/{n})", scenario.name, w.name, round + 1),
                };
                let record = common.trace && round == 0 && kind == order[0];
                let (mut r, recorded) = measure_one(&target, &w, &label, common.quiet, &replay, record)
                    .map_err(|source| BenchError::Driver { server: label.clone(), source })?;
                r.round = round;
                if let (Some(t), Some(dir)) = (recorded, &common.out) {
                    write_trace(dir, scenario, &w, kind, &t)?;
                }
                if !common.quiet {
                    eprintln!(
                        "{label}: {:.0} ops/s, p99 {:.0} µs, server CPU {} µs/op",
                        r.ops_per_sec,
                        r.latency_us.p99,
                        r.server_cpu_us_per_op.map_or("?".into(), |c| format!("{c:.2}"))
                    );
                }
                runs.push(r);
            }
        }
    }
    Ok(Report {
        scenario: scenario.name.clone(),
        description: scenario.description.clone(),
        command_line,
        machine: Machine::read(),
        memory_mb: scenario.memory_mb,
        server_threads: scenario.server_threads,
        redis_io_threads: scenario.redis_io_threads,
        started_unix,
        repeat: common.repeat,
        runs,
    })
}

/// One measurement's figures: rates, latency percentiles, CPU per
/// operation, hits and bytes by size band, and what the server holds.
fn summarize(
    target: &Target,
    w: &Workload,
    protocol: Protocol,
    out: &PhaseOut,
    cpu: Option<server::Cpu>,
    me: Option<f64>,
) -> RunResult {
    let t = &out.totals;
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    let ops = t.sets + t.keys;
    let per = |total: f64, n: u64| (n > 0).then(|| total * 1e6 / n as f64);
    let rss = target.rss();
    // One `stats` for both: items held (capacity) and, from strata only,
    // write amplification.
    let holdings = target.items().ok();
    let write_amplification = holdings.and_then(|h| h.write_amplification);
    let capacity = (w.mode == Mode::Capacity).then(|| {
        let h = holdings.unwrap_or_default();
        Capacity {
            written: t.sets,
            items: h.items,
            evictions: h.evictions,
            first_eviction_at: out.first_eviction_at,
            rss_bytes_per_item: rss.map_or(0.0, |r| r as f64 / h.items.max(1) as f64),
            compression_ratio: h.compression_ratio,
        }
    });
    let gets = t.hits + t.misses;
    let mut sized = driver::Bytes::default();
    for b in &t.bands {
        sized.add(b);
    }
    RunResult {
        workload: w.clone(),
        server: target.kind.to_string(),
        version: target.version.clone(),
        command: target.command.clone(),
        protocol,
        elapsed_secs: secs,
        requests: t.requests,
        sets: t.sets,
        gets: t.gets,
        keys: t.keys,
        hits: t.hits,
        misses: t.misses,
        errors: t.errors,
        requests_per_sec: t.requests as f64 / secs,
        ops_per_sec: ops as f64 / secs,
        latency_us: Percentiles::of(t),
        server_cpu_secs: cpu,
        server_cpu_us_per_op: cpu.and_then(|c| per(c.user + c.system, ops)),
        server_cpu_us_per_request: cpu.and_then(|c| per(c.user + c.system, t.requests)),
        server_system_share: cpu.and_then(|c| {
            let total = c.user + c.system;
            (total > 0.0).then(|| c.system / total)
        }),
        client_cpu_us_per_op: me.and_then(|c| per(c, ops)),
        server_rss_bytes: rss,
        hit_ratio: (gets > 0).then(|| t.hits as f64 / gets as f64),
        byte_hit_ratio: (sized.requested > 0).then(|| sized.hit as f64 / sized.requested as f64),
        requested_bytes: sized.requested,
        hit_bytes: sized.hit,
        size_bands: SizeBand::of(&t.bands),
        write_amplification,
        capacity,
        round: 0,
    }
}

/// This process's CPU seconds (user + system), for the client's cost.
fn self_cpu() -> Option<f64> {
    let t = Target::external(ServerKind::Strata, SocketAddr::from(([127, 0, 0, 1], 0)), Some(std::process::id()));
    t.cpu().map(|c| c.user + c.system)
}

/// What a phase does between start and stop, besides the load itself.
enum Watch {
    /// Stop after the duration (unless the plan has an op limit).
    Duration(Duration),
    /// Capacity: stop `overfill` beyond the first eviction.
    Evictions { overfill: f64 },
}

struct PhaseOut {
    totals: Totals,
    elapsed: Duration,
    first_eviction_at: Option<u64>,
}

fn phase(
    target: &Target,
    w: &Workload,
    plan: &Plan<'_>,
    watch: Watch,
    label: &str,
    quiet: bool,
) -> Result<PhaseOut, driver::DriverError> {
    let threads = w.threads.min(w.connections).max(1);
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        let bar = match (&watch, plan.limit) {
            (_, Some(n)) => ProgressBar::new(n),
            (Watch::Duration(d), None) if *d < Duration::MAX => ProgressBar::new(d.as_millis() as u64),
            (Watch::Duration(_), None) => ProgressBar::new_spinner(),
            (Watch::Evictions { .. }, None) => ProgressBar::new_spinner(),
        };
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{elapsed_precise}] {wide_bar} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(label.to_owned());
        bar
    };
    let start = Instant::now();
    let mut first_eviction_at = None;
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let conns = w.connections / threads + usize::from(i < w.connections % threads);
                let seed = w.seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
                s.spawn(move || driver::run_thread(plan, target.addr, target.tls.as_ref(), conns, seed))
            })
            .collect();
        let mut last_check = Instant::now();
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            let elapsed = start.elapsed();
            let done = plan.completed.load(Relaxed);
            match (&watch, plan.limit) {
                (_, Some(_)) => bar.set_position(done),
                (Watch::Duration(d), None) => {
                    bar.set_position(elapsed.as_millis().min(d.as_millis()) as u64);
                    if elapsed >= *d {
                        plan.stop.store(true, Relaxed);
                    }
                }
                (Watch::Evictions { overfill }, None) => {
                    bar.tick();
                    if last_check.elapsed() >= Duration::from_millis(250) {
                        last_check = Instant::now();
                        if first_eviction_at.is_none() {
                            if let Ok(h) = target.items() {
                                if h.evictions > 0 {
                                    first_eviction_at = Some(plan.issued.load(Relaxed));
                                }
                            }
                        }
                        if let Some(at) = first_eviction_at {
                            if plan.issued.load(Relaxed) as f64 >= at as f64 * (1.0 + overfill) {
                                plan.stop.store(true, Relaxed);
                            }
                        }
                    }
                }
            }
            bar.set_message(format!("{:.0} req/s", done as f64 / elapsed.as_secs_f64().max(1e-3)));
        }
        handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
    });
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    let mut totals = Totals::new();
    for r in results {
        match r {
            Ok(Ok(t)) => totals.merge(&t),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(driver::DriverError::Setup("a load thread panicked".into())),
        }
    }
    Ok(PhaseOut { totals, elapsed, first_eviction_at })
}

fn new_plan<'a>(
    w: &Workload,
    protocol: Protocol,
    values: &'a Values,
    source: Source<'a>,
    limit: Option<u64>,
    trace: bool,
) -> Plan<'a> {
    Plan {
        protocol,
        source,
        values,
        ttls: w.ttls.clone(),
        trace,
        key_size: w.key_size(),
        pipeline: w.pipeline,
        conn_rate: w.rate.map(|r| r / w.connections as f64),
        limit,
        stop: AtomicBool::new(false),
        issued: AtomicU64::new(0),
        completed: AtomicU64::new(0),
    }
}

/// Replay mode: the trace's lines, and the workload fitted to them: key
/// count from the largest id, key size from the trace's JSON (else the
/// smallest that holds the ids), values as long as the longest line, the
/// warm-up from the JSON unless `warmup_ops` is given.
fn load_replay(w: &mut Workload) -> Result<Vec<trace::Rec>, BenchError> {
    let Some(path) = w.replay.clone() else { return Ok(Vec::new()) };
    let (recs, skipped) = trace::read(&path).map_err(|e| BenchError::Other(e.to_string()))?;
    if skipped > 0 {
        eprintln!("strata-bench: {}: {skipped} lines neither get nor set, left out", path.display());
    }
    let meta: Option<trace::Meta> =
        std::fs::read(trace::meta_path(&path)).ok().and_then(|j| serde_json::from_slice(&j).ok());
    w.keys = recs.iter().map(|r| r.key).max().map_or(1, |k| k + 1);
    if let Some(m) = &meta {
        if w.key_size == 0 && m.key_size >= gen::min_key_size(w.keys) {
            w.key_size = m.key_size;
        }
        if w.warmup_ops == 0 {
            w.warmup_ops = m.warmup.min(recs.len() as u64);
        }
        w.replay_fills = m.fill_on_miss;
    }
    let longest = recs.iter().map(|r| r.size as usize).max().unwrap_or(0).saturating_sub(w.key_size());
    w.value_size = ValueSize::Fixed(longest.max(1));
    w.validate()?;
    Ok(recs)
}

/// Writes a recorded request sequence beside the report.
fn write_trace(
    dir: &std::path::Path,
    scenario: &Scenario,
    w: &Workload,
    kind: ServerKind,
    (recs, warmup): &(Vec<trace::Rec>, u64),
) -> Result<(), BenchError> {
    let path = dir.join(format!("{}.{}.trace.csv", scenario.name, w.name));
    let failed = |source| BenchError::Write { path: path.display().to_string(), source };
    std::fs::create_dir_all(dir).map_err(failed)?;
    let meta = trace::Meta {
        scenario: scenario.name.clone(),
        workload: w.name.clone(),
        server: kind.to_string(),
        memory_mb: scenario.memory_mb,
        warmup: *warmup,
        requests: recs.len() as u64,
        key_size: w.key_size(),
        fill_on_miss: match w.mode {
            Mode::Load | Mode::Capacity => false,
            Mode::HitRatio => true,
            Mode::Replay => w.replay_fills,
        },
    };
    trace::write(&path, recs, &meta).map_err(failed)?;
    eprintln!("strata-bench: {} requests of {} in {}", recs.len(), w.name, path.display());
    Ok(())
}

/// One measurement; with `record`, also the requests it sent (in order)
/// and how many of them came before the measured phase.
type Recorded = Option<(Vec<trace::Rec>, u64)>;

fn measure_one(
    target: &Target,
    w: &Workload,
    label: &str,
    quiet: bool,
    replay: &[trace::Rec],
    record: bool,
) -> Result<(RunResult, Recorded), driver::DriverError> {
    let protocol = if target.kind == ServerKind::Redis { Protocol::Resp } else { w.protocol };
    let values = Values::new(w.value_size, w.seed, w.keys);
    let keys = KeyChooser::new(w.key_dist, w.keys).map_err(driver::DriverError::Setup)?;
    let mut recorded = Vec::new();
    let keep = |recorded: &mut Vec<trace::Rec>, out: &mut PhaseOut| {
        let mut t = std::mem::take(&mut out.totals.trace);
        // Stable: a multi-get's keys share their request's number.
        t.sort_by_key(|r| r.seq);
        recorded.extend(t);
    };
    // Warm-up phases are closed loop, pipelined, unmeasured.
    let mut warm = w.clone();
    warm.rate = None;
    warm.pipeline = w.pipeline.max(16);
    let unmeasured = |source| new_plan(&warm, protocol, &values, source, None, record);
    let warm_up = |plan: &Plan<'_>| {
        phase(target, &warm, plan, Watch::Duration(Duration::MAX), &format!("{label} warm-up"), quiet)
    };
    if w.warms_up() {
        let order = gen::fill_order(w.fill_order, w.keys, w.seed);
        let plan = unmeasured(Source::Fill { next: AtomicU64::new(0), limit: w.keys, order });
        keep(&mut recorded, &mut warm_up(&plan)?);
    }
    if w.mode == Mode::HitRatio && w.warmup_ops > 0 {
        let scan = Scan { every: w.scan_every, len: w.scan_keys, first: w.keys };
        let mut plan = unmeasured(Source::CacheAside { keys: keys.clone(), scan });
        plan.limit = Some(w.warmup_ops);
        keep(&mut recorded, &mut warm_up(&plan)?);
    }
    let split = usize::try_from(w.warmup_ops).unwrap_or(usize::MAX).min(replay.len());
    if w.mode == Mode::Replay && split > 0 {
        let plan = unmeasured(Source::Replay { recs: &replay[..split], next: AtomicU64::new(0), fill: w.replay_fills });
        keep(&mut recorded, &mut warm_up(&plan)?);
    }
    let warmup = recorded.len() as u64;
    let (source, watch, limit) = match w.mode {
        Mode::Load => (
            Source::Mix { set_share: w.ratio.set_share(), multiget: w.multiget, keys },
            Watch::Duration(Duration::from_secs_f64(w.duration_secs)),
            w.ops,
        ),
        Mode::Capacity => {
            let fill = Source::Fill { next: AtomicU64::new(0), limit: w.keys, order: None };
            (fill, Watch::Evictions { overfill: w.overfill }, None)
        }
        Mode::HitRatio => {
            // The measured phase's scans start past every key the warm-up's
            // could have asked for: each pass is over keys never seen.
            let warm_passes = w.warmup_ops.checked_div(w.scan_every).map_or(0, |p| p + 1);
            let scan = Scan { every: w.scan_every, len: w.scan_keys, first: w.keys + warm_passes * w.scan_keys };
            (Source::CacheAside { keys, scan }, Watch::Duration(Duration::from_secs_f64(w.duration_secs)), w.ops)
        }
        Mode::Replay => (
            Source::Replay { recs: &replay[split..], next: AtomicU64::new(0), fill: w.replay_fills },
            Watch::Duration(Duration::MAX),
            w.ops,
        ),
    };
    let plan = new_plan(w, protocol, &values, source, limit, record);
    let cpu0 = target.cpu();
    let me0 = self_cpu();
    let mut out = phase(target, w, &plan, watch, label, quiet)?;
    keep(&mut recorded, &mut out);
    let recorded = record.then_some((recorded, warmup));
    let cpu = target.cpu().zip(cpu0).map(|(a, b)| a - b);
    let me = self_cpu().zip(me0).map(|(a, b)| a - b);
    Ok((summarize(target, w, protocol, &out, cpu, me), recorded))
}
