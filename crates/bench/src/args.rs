//! The command line: `strata-bench run` (one workload given by flags) and
//! `strata-bench scenario` (scenario files), and the flags both take.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{KeyDist, Mode, Ratio, ServerKind, ValueSize};
use crate::proto::Protocol;

#[derive(Parser)]
#[command(name = "strata-bench", version, about = "Side-by-side benchmark of strata, memcached and Redis")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Run one workload (given by flags) against one or more servers.
    Run(Box<RunArgs>),
    /// Run scenario files (bench/scenarios/*.toml).
    Scenario(Box<ScenarioArgs>),
}

#[derive(Args)]
pub(crate) struct Common {
    /// Servers to start and measure, in order.
    #[arg(long = "server", value_enum, value_delimiter = ',', default_values = ["strata", "memcached", "redis"])]
    pub(crate) servers: Vec<ServerKind>,
    /// Measure a server already listening here instead of starting one.
    #[arg(long)]
    pub(crate) addr: Option<SocketAddr>,
    /// PID of the server at --addr, to read its CPU time and RSS.
    #[arg(long, requires = "addr")]
    pub(crate) pid: Option<u32>,
    /// strata binary (default: next to strata-bench).
    #[arg(long)]
    pub(crate) strata_bin: Option<PathBuf>,
    #[arg(long, default_value = "memcached")]
    pub(crate) memcached_bin: PathBuf,
    #[arg(long, default_value = "redis-server")]
    pub(crate) redis_bin: PathBuf,
    /// Serve over TLS: strata and memcached start with -Z and a certificate
    /// made for the run (openssl); the load connections use rustls.
    #[arg(long)]
    pub(crate) tls: bool,
    /// Write <name>.json, <name>.md and charts here.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Scale every duration by this factor (e.g. 0.2 for a quick look).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) time_scale: f64,
    /// No progress bar.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// Measure every workload this many times, the servers taking turns in
    /// a rotating order, and report medians and ranges: one run's ±10%
    /// host noise decides nothing, paired rounds do.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) repeat: u32,
    /// Write each workload's request sequence (of its first measurement)
    /// to <out>/<scenario>.<workload>.trace.csv, with a .json beside it:
    /// libCacheSim's CSV, for bench/policies.py.
    #[arg(long, requires = "out")]
    pub(crate) trace: bool,
}

#[derive(Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    #[arg(long, default_value = "run")]
    pub(crate) name: String,
    #[arg(long, value_enum, default_value = "load")]
    pub(crate) mode: Mode,
    /// Protocol for memcached-compatible servers (Redis always speaks RESP).
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) protocol: Protocol,
    #[arg(long, short, default_value_t = 16)]
    pub(crate) connections: usize,
    /// Client threads.
    #[arg(long, short, default_value_t = 2)]
    pub(crate) threads: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub(crate) pipeline: usize,
    /// Keys per get.
    #[arg(long, default_value_t = 1)]
    pub(crate) multiget: u16,
    /// Sets to gets, e.g. 1:2 (1:0 write-only, 0:1 read-only).
    #[arg(long, default_value = "1:2")]
    pub(crate) ratio: Ratio,
    #[arg(long, default_value_t = 100_000)]
    pub(crate) keys: u64,
    /// Key length in bytes (0: 14, or more if the key count needs it).
    #[arg(long, default_value_t = 0)]
    pub(crate) key_size: usize,
    /// uniform, zipf:<alpha>, or sequential (0, 1, 2, … across all connections)
    #[arg(long, default_value = "uniform")]
    pub(crate) key_dist: KeyDist,
    /// N or LO-HI (random letters; in a range each key has its own size, uniform over keys), random:LO-HI
    /// (random bytes), json:LO-HI (padded records), api:LO-HI (realistic API-response JSON objects),
    /// page:LO-HI (pages of ~10)
    #[arg(long, default_value = "1000")]
    pub(crate) value_size: ValueSize,
    #[arg(long, default_value_t = 10.0)]
    pub(crate) duration: f64,
    /// Stop after this many requests instead of a duration.
    #[arg(long)]
    pub(crate) ops: Option<u64>,
    /// Open loop at this many requests per second in total.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Set every key once first (default: when the mix reads).
    #[arg(long)]
    pub(crate) warmup: Option<bool>,
    /// Hit-ratio mode: requests before measuring.
    #[arg(long, default_value_t = 0)]
    pub(crate) warmup_ops: u64,
    /// Load mode: the order of the warm-up's sets of every key.
    #[arg(long, value_enum, default_value = "keys")]
    pub(crate) fill_order: crate::config::FillOrder,
    #[arg(long, default_value_t = 0.1)]
    pub(crate) overfill: f64,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Replay mode: the trace to replay (as --trace writes it).
    #[arg(long)]
    pub(crate) replay: Option<PathBuf>,
    /// TTL classes in seconds, each key's sets carrying one (0: none).
    #[arg(long, value_delimiter = ',')]
    pub(crate) ttls: Vec<u32>,
    /// Hit-ratio mode: of every N requests, the first --scan-keys ask for
    /// cold keys never asked before (0: no scan).
    #[arg(long, default_value_t = 0)]
    pub(crate) scan_every: u64,
    #[arg(long, default_value_t = 0)]
    pub(crate) scan_keys: u64,
    /// Memory for every server, MB.
    #[arg(long, default_value_t = 1024)]
    pub(crate) memory_mb: u64,
    /// Worker threads for every server.
    #[arg(long, default_value_t = 2)]
    pub(crate) server_threads: usize,
    /// Redis io-threads (Redis runs commands on one thread regardless).
    #[arg(long, default_value_t = 1)]
    pub(crate) redis_io_threads: usize,
}

#[derive(Args)]
pub(crate) struct ScenarioArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Scenario files.
    #[arg(required = true)]
    pub(crate) files: Vec<PathBuf>,
    /// Only the runs with these names.
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
}
