//! memcached-compatible command-line flags (short and long forms, same
//! meanings and defaults where they make sense), turned into the store's and
//! the server's configuration. Anything unknown or invalid is an error.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{ArgAction, Parser};
use strata_persist::Durability;
use strata_server::{Credentials, Loaded, Protocol, ServerConfig, SnapshotConfig};
use strata_store::Config as StoreConfig;

use crate::options::parse_size;

pub use crate::error::ConfigError;

/// Strata: a memcached-compatible cache server.
#[derive(Debug, Parser)]
// Negative numbers are taken as values, so that `-c -5` is refused as
// memcached refuses it ("Maximum connections must be greater than 0"), not
// as an unknown flag `-5`.
#[command(
    name = "strata",
    version,
    disable_version_flag = true,
    about,
    args_override_self = true,
    allow_negative_numbers = true
)]
pub struct Args {
    /// Read flags from a memcached configuration file first (Debian's
    /// /etc/memcached.conf format: one flag per line, # comments,
    /// `logfile PATH`); flags on the command line come after its
    #[arg(long = "config", value_name = "FILE")]
    #[allow(dead_code)] // Expanded before parsing (conffile.rs): declared for --help.
    config: Option<PathBuf>,

    /// Run in the background (the working directory is kept)
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,

    /// Started as root: switch to this user once the ports are open
    #[arg(short = 'u', long = "user")]
    user: Option<String>,

    /// Write the process id to this file once listening (removed at exit)
    #[arg(short = 'P', long = "pidfile")]
    pid_file: Option<PathBuf>,

    /// Lock all paged memory (mlockall), as memcached
    #[arg(short = 'k', long = "lock-memory")]
    pub lock_memory: bool,

    /// Ask for transparent huge pages for item memory (madvise)
    #[arg(short = 'L', long = "enable-largepages")]
    pub large_pages: bool,

    /// TCP port to listen on
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,

    /// UDP port on the -l addresses, memcached's UDP frame protocol (0:
    /// off, the default)
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u16,

    /// Unix socket path to listen on (disables TCP)
    #[arg(short = 's', long = "unix-socket")]
    unix_socket: Option<PathBuf>,

    /// Access mask for the unix socket, in octal
    #[arg(short = 'a', long = "unix-mask", default_value = "0700")]
    unix_mask: String,

    /// Interfaces to listen on, comma separated (default 127.0.0.1)
    #[arg(short = 'l', long = "listen", action = ArgAction::Append)]
    listen: Vec<String>,

    /// Item memory in megabytes
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64)]
    memory_limit: usize,

    /// Maximum simultaneous connections
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    conn_limit: i64,

    /// Worker threads (default: number of cores)
    #[arg(short = 't', long = "threads")]
    threads: Option<i64>,

    /// Largest item, e.g. 1m, 512k or bytes (min 1k, max 1g, at most half of -m)
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    max_item_size: String,

    /// Disable CAS
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,

    /// Return an error on memory exhausted instead of evicting
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,

    /// Enable the shutdown command
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,

    /// Disable flush_all
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,

    /// Disable the key dumps: stats cachedump, lru_crawler metadump and
    /// mgdump
    #[arg(short = 'X', long = "disable-dumping")]
    disable_dumping: bool,

    /// Disable the watch command (live event logs)
    #[arg(short = 'W', long = "disable-watch")]
    disable_watch: bool,

    /// Enable TLS on the TCP listeners (but those given as -l notls:ADDR);
    /// needs -o ssl_chain_cert=FILE
    #[arg(short = 'Z', long = "enable-ssl")]
    enable_ssl: bool,

    /// Delimiter between a key's prefix and the rest, for stats detail
    /// (default ':'); giving it turns stats detail on, as in memcached
    #[arg(short = 'D', long = "prefix-delimiter")]
    prefix_delimiter: Option<String>,

    /// Requests served per connection before turning to others
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20)]
    max_reqs_per_event: i64,

    /// Listen backlog
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    listen_backlog: i32,

    /// Verbose logging, at memcached's levels: -v errors and warnings,
    /// -vv each command and reply, -vvv internal state too
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,

    /// Size bands of `stats items` and `stats slabs`: each band's largest
    /// item is this factor times the previous one's, as memcached's slab
    /// classes grow (strata packs every size into the same segments)
    #[arg(short = 'f', long = "slab-growth-factor", default_value_t = 1.25)]
    growth_factor: f64,

    /// The smallest size band: items of key, value and flags up to this
    /// many bytes (plus memcached's 48-byte header), as memcached's
    /// smallest slab class
    #[arg(short = 'n', long = "slab-min-size", default_value_t = 48)]
    slab_min_size: usize,

    /// Raise the core file size limit to its maximum, so a crash leaves a
    /// core dump
    #[arg(short = 'r', long = "enable-coredumps")]
    pub enable_coredumps: bool,

    /// memcached's NAPI ids for its worker threads' sockets: accepted, no
    /// effect (strata's workers take connections as they come)
    #[arg(short = 'N', long = "napi_ids", value_name = "NUM")]
    napi_ids: Option<u32>,

    /// Print the license and exit
    #[arg(short = 'i', long = "license")]
    pub license: bool,

    /// Extended options, comma separated: hashpower=N, max_get_line=BYTES, io=auto|uring|epoll, io_buffers=N,
    /// compression=on|off, compression_level=1..19, compression_min_size=BYTES,
    /// compression_min_saving=PERCENT, compression_dict_size=BYTES, compression_train_bytes=BYTES,
    /// compression_sample=N, compression_retrain_drop=PERCENT, compression_cold_level=0..19,
    /// compression_cold_cpu=PERCENT (docs/compression.md);
    /// idle_timeout=SECONDS (close connections that complete no request for that long),
    /// lru_maintainer / no_lru_maintainer (reclaim memory on a background thread, the default, or on writers' time),
    /// read_buf_mem_limit=MB (unread replies across connections; 0: no limit);
    /// ext_path=PATH:SIZE (repeatable), ext_item_size=BYTES, ext_wbuf_size=MB, ext_page_size=MB,
    /// ext_recache_rate=N, ext_threads=N (docs/flash.md)
    #[arg(short = 'o', long = "extended", action = ArgAction::Append)]
    extended: Vec<String>,

    /// Protocol: auto (the default: the first byte decides per connection),
    /// ascii or binary
    #[arg(short = 'B', long = "protocol")]
    protocol: Option<String>,

    /// Require SASL PLAIN authentication (binary protocol only); users come
    /// from --sasl-pwdb or the MEMCACHED_SASL_PWDB environment variable
    #[arg(short = 'S', long = "enable-sasl")]
    enable_sasl: bool,

    /// SASL password file: `user:password` lines (memcached's sasl_pwdb)
    #[arg(long = "sasl-pwdb", env = "MEMCACHED_SASL_PWDB")]
    sasl_pwdb: Option<PathBuf>,

    /// ASCII protocol authentication: `user:password` lines; clients send
    /// `set <any> 0 0 <len>` with data `<user> <password>` first
    #[arg(short = 'Y', long = "auth-file")]
    auth_file: Option<PathBuf>,

    /// Snapshot directory: the cache is saved to DIR/strata.snapshot at
    /// shutdown (and on the `snapshot` command) and loaded at start
    #[arg(long = "snapshot-dir")]
    snapshot_dir: Option<PathBuf>,

    /// memcached's warm-restart file: strata keeps its snapshot at exactly
    /// this path (a synonym for --snapshot-dir naming the file)
    #[arg(short = 'e', long = "memory-file")]
    memory_file: Option<PathBuf>,

    /// Also snapshot every N seconds while serving (0: only at shutdown
    /// and on the `snapshot` command)
    #[arg(long = "snapshot-interval", default_value_t = 0)]
    snapshot_interval: u64,

    /// Durability: off (a cache), interval (at most a second of acknowledged
    /// writes lost on a crash) or always (a write is acknowledged once it is
    /// on disk); needs --snapshot-dir
    #[arg(long = "durability", default_value = "off")]
    durability: String,

    /// Refuse to start if the snapshot is damaged or was taken with
    /// different settings (default: report it and load what is whole)
    #[arg(long = "snapshot-strict")]
    snapshot_strict: bool,

    /// Serve Prometheus metrics (GET /metrics: memcached_exporter's names,
    /// strata_* for the rest) on this address, e.g. 127.0.0.1:9150
    #[arg(long = "metrics-listen")]
    metrics_listen: Option<String>,

    /// Print version and exit
    #[arg(short = 'V', long = "version", action = ArgAction::Version)]
    version: Option<bool>,

    /// The test suites' hidden flags (`--enable-debug-clock`,
    /// `--debug-flash-*`): only in builds with the `test-hooks` feature.
    #[cfg(feature = "test-hooks")]
    #[command(flatten)]
    hooks: crate::hooks::TestHooks,
}

/// Unread replies across connections, beyond each one's 64 KiB, unless
/// `-o read_buf_mem_limit` says otherwise: a quarter of `-m`, at least
/// 32 MiB. (memcached has no limit by default.)
fn reply_budget_default(memory_limit: usize) -> usize {
    (memory_limit / 4).max(32 << 20)
}

/// Whether `--durability` asks for anything but off (checked fully later).
fn durability_requested(v: &str) -> bool {
    v != "off"
}

/// Address space to reserve for `cache_memlimit` raises: four times `-m`,
/// at most the machine's RAM (and never less than `-m`). Only pages that are
/// written count against RSS.
fn memory_reserve(limit: usize) -> usize {
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<usize>().ok()
        })
        .map_or(limit, |kib| kib.saturating_mul(1024));
    limit.saturating_mul(4).min(ram).max(limit)
}

impl Args {
    pub fn into_configs(self) -> Result<(StoreConfig, ServerConfig), ConfigError> {
        let lim = self.limits()?;
        let o = crate::options::parse(&self.extended)?;
        o.zcfg.validate().map_err(|e| e.to_string())?;
        let mut tuning = o.tuning.finish(lim.item_size_max, self.slab_min_size)?;
        for (k, v) in o.ext.without_effect() {
            tuning.recorded.ext.push((k, v));
            if !tuning.no_effect.contains(&k) {
                tuning.no_effect.push(k);
            }
        }
        if o.ext.enabled() && durability_requested(&self.durability) {
            // Items on flash are not in the snapshot a recovery starts from.
            return Err("--durability does not work with -o ext_path yet".into());
        }
        let flash = o.ext.open(lim.item_size_max)?;
        #[cfg(feature = "test-hooks")]
        let flash = self.hooks.flash(flash)?;
        let store = StoreConfig {
            memory_limit: lim.memory_limit,
            memory_reserve: memory_reserve(lim.memory_limit),
            item_size_max: lim.item_size_max,
            segment_size: 0,
            evictions: !self.disable_evictions,
            cas: !self.disable_cas,
            hash_power: o.hash_power,
            compression: o.compression.then_some(o.zcfg),
            flash,
            size_classes: strata_store::SizeClasses { growth_factor: self.growth_factor, min_size: self.slab_min_size },
            ..StoreConfig::default()
        };
        #[cfg(feature = "test-hooks")]
        let store = StoreConfig { reclaim_delay: self.hooks.reclaim_delay(), ..store };
        let (protocol, sasl, auth_file) = self.protocol_and_auth()?;
        // memcached takes the first byte of -D's argument.
        let prefix_delimiter = match self.prefix_delimiter.as_deref().map(str::as_bytes) {
            None => b':',
            Some([c, ..]) => *c,
            Some([]) => return Err("invalid -D \"\" (a delimiter character)".into()),
        };
        let snapshot = self.snapshot(store.compression.is_some())?;
        let tls = o.tls.settings(self.enable_ssl)?;
        let listen = if self.listen.is_empty() { vec!["127.0.0.1".to_string()] } else { self.listen };
        let server = ServerConfig {
            tls,
            snapshot,
            metrics_listen: self.metrics_listen,
            user: self.user,
            pid_file: self.pid_file,
            idle_timeout: o.idle_timeout,
            background_reclaim: o.background_reclaim,
            tuning,
            reply_budget: o
                .read_buf_mem_limit
                .map_or_else(|| reply_budget_default(lim.memory_limit), |mb| mb.saturating_mul(1 << 20)),
            port: self.port,
            udp_port: self.udp_port,
            listen,
            unix_socket: self.unix_socket,
            unix_mask: lim.unix_mask,
            max_conns: lim.max_conns,
            threads: lim.threads,
            backlog: self.listen_backlog,
            reqs_per_event: lim.reqs_per_event,
            shutdown_enabled: self.enable_shutdown,
            flush_enabled: !self.disable_flush_all,
            dump_enabled: !self.disable_dumping,
            watch_enabled: !self.disable_watch,
            verbosity: u32::from(self.verbose),
            item_size_max: lim.item_size_max,
            max_get_line: o.max_get_line,
            max_output: 256 << 10,
            #[cfg(feature = "test-hooks")]
            debug_clock: self.hooks.enable_debug_clock,
            #[cfg(not(feature = "test-hooks"))]
            debug_clock: false,
            protocol,
            sasl,
            auth_file,
            io: o.io,
            io_buffers: o.io_buffers,
            prefix_delimiter,
            detail_enabled: self.prefix_delimiter.is_some(),
        };
        Ok((store, server))
    }

    /// The sizes and counts, checked with memcached's wording.
    fn limits(&self) -> Result<Limits, ConfigError> {
        let item_size_max = parse_size(&self.max_item_size)?;
        // memcached's checks and wording.
        if self.growth_factor <= 1.0 || !self.growth_factor.is_finite() {
            return Err("Factor must be greater than 1 (-f)".into());
        }
        if self.slab_min_size == 0 {
            return Err("Chunk size must be greater than 0 (-n)".into());
        }
        if self.napi_ids.is_some() {
            tracing::info!("-N: accepted for memcached compatibility, no effect here (no NAPI id grouping)");
        }
        if item_size_max < 1024 {
            return Err("item size limit (-I) cannot be less than 1024 bytes".into());
        }
        if item_size_max > 1 << 30 {
            return Err("item size limit (-I) cannot be more than 1 gigabyte".into());
        }
        if self.memory_limit == 0 {
            return Err("memory limit (-m) must be at least 1 megabyte".into());
        }
        let memory_limit = self.memory_limit.checked_mul(1 << 20).ok_or("memory limit (-m) too large")?;
        if item_size_max > memory_limit / 2 {
            return Err("item size limit (-I) cannot be more than half of the memory limit (-m)".into());
        }
        let unix_mask = u32::from_str_radix(&self.unix_mask, 8)
            .ok()
            .filter(|m| *m <= 0o777)
            .ok_or_else(|| format!("invalid unix socket mask {:?} (octal, e.g. 0700)", self.unix_mask))?;
        // memcached's checks and wording.
        let positive = |n: i64, msg: &str| usize::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| msg.to_string());
        let max_conns = positive(self.conn_limit, "Maximum connections must be greater than 0 (-c)")?;
        let reqs_per_event =
            positive(self.max_reqs_per_event, "Number of requests per event must be greater than 0 (-R)")?;
        let threads = match self.threads {
            Some(t) => positive(t, "Number of threads must be greater than 0 (-t)")?,
            None => std::thread::available_parallelism().map_or(4, |n| n.get()),
        };
        Ok(Limits { item_size_max, memory_limit, unix_mask, max_conns, reqs_per_event, threads })
    }

    /// `-B`, `-S` and `-Y`: the protocols a connection may speak and the
    /// credentials they need, as memcached combines them.
    #[allow(clippy::type_complexity)]
    fn protocol_and_auth(&self) -> Result<(Protocol, Option<Arc<Credentials>>, Option<Arc<Credentials>>), ConfigError> {
        // Whether -B was given at all: like memcached, an explicit `-B auto`
        // conflicts with -S and -Y, the default does not.
        let specified = self.protocol.is_some();
        let mut protocol = match self.protocol.as_deref().unwrap_or("auto") {
            "auto" => Protocol::Auto,
            "ascii" => Protocol::Ascii,
            "binary" => Protocol::Binary,
            other => return Err(format!("invalid protocol {other:?} (-B auto, ascii or binary)").into()),
        };
        let sasl = match (self.enable_sasl, &self.sasl_pwdb) {
            (false, _) => None,
            (true, None) => {
                return Err("SASL (-S) needs a password file: --sasl-pwdb FILE or MEMCACHED_SASL_PWDB".into())
            }
            (true, Some(path)) => Some(Arc::new(Credentials::load(path).map_err(|e| e.to_string())?)),
        };
        if sasl.is_some() {
            // As memcached: SASL implies the binary protocol.
            if specified && protocol != Protocol::Binary {
                return Err("ERROR: You cannot allow the ASCII protocol while using SASL.".into());
            }
            protocol = Protocol::Binary;
        }
        let auth_file = match &self.auth_file {
            None => None,
            Some(path) => Some(Arc::new(Credentials::load(path).map_err(|e| e.to_string())?)),
        };
        if auth_file.is_some() {
            // As memcached: ASCII auth turns the binary protocol off, so a
            // binary client cannot walk around it.
            if (specified || sasl.is_some()) && protocol != Protocol::Ascii {
                return Err(
                    "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.".into()
                );
            }
            protocol = Protocol::Ascii;
        }
        Ok((protocol, sasl, auth_file))
    }

    /// `--snapshot-dir` (or `-e`), `--snapshot-interval`, `--snapshot-strict`
    /// and `--durability`, checked together (`compressed`: the values are
    /// compressed, which the durability log does not carry yet).
    fn snapshot(&self, compressed: bool) -> Result<Option<SnapshotConfig>, ConfigError> {
        let snapshot_file = match (self.snapshot_dir.clone(), self.memory_file.clone()) {
            (Some(_), Some(_)) => return Err("give --snapshot-dir or -e/--memory-file, not both".into()),
            (Some(dir), None) => Some(dir.join(strata_persist::SNAPSHOT_FILE)),
            (None, file) => file,
        };
        let durability = match self.durability.as_str() {
            "off" => Durability::Off,
            "interval" => Durability::Interval,
            "always" => Durability::Always,
            other => return Err(format!("invalid durability {other:?} (off, interval or always)").into()),
        };
        if snapshot_file.is_none() && (self.snapshot_interval != 0 || self.snapshot_strict) {
            return Err("--snapshot-interval and --snapshot-strict need --snapshot-dir (or -e)".into());
        }
        if durability != Durability::Off {
            if snapshot_file.is_none() {
                return Err("--durability needs --snapshot-dir (the log is kept beside the snapshot)".into());
            }
            if compressed {
                return Err("--durability does not work with -o compression=on yet".into());
            }
        }
        let snapshot = snapshot_file.map(|file| SnapshotConfig {
            file,
            interval: (self.snapshot_interval != 0).then(|| std::time::Duration::from_secs(self.snapshot_interval)),
            strict: self.snapshot_strict,
            loaded: Loaded::default(),
            durability,
            wal: None,
            recovered: Default::default(),
            lock: None,
            backend: std::sync::Arc::new(strata_persist::OsBackend),
        });
        Ok(snapshot)
    }
}

/// [`Args::limits`]' checked sizes and counts.
struct Limits {
    item_size_max: usize,
    memory_limit: usize,
    unix_mask: u32,
    max_conns: usize,
    reqs_per_event: usize,
    threads: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<(StoreConfig, ServerConfig), String> {
        let mut v = vec!["strata"];
        v.extend_from_slice(args);
        Args::try_parse_from(v).map_err(|e| e.to_string())?.into_configs().map_err(|e| e.to_string())
    }

    #[test]
    fn memcached_flags_map_onto_configs() {
        let (st, sv) = parse(&[
            "-p",
            "1234",
            "-m",
            "128",
            "-I",
            "2m",
            "-C",
            "-M",
            "-A",
            "-F",
            "-c",
            "7",
            "-t",
            "3",
            "-l",
            "127.0.0.1,::1",
        ])
        .unwrap();
        assert_eq!((sv.port, st.memory_limit, st.item_size_max), (1234, 128 << 20, 2 << 20));
        assert!(!st.cas && !st.evictions && sv.shutdown_enabled && !sv.flush_enabled);
        assert_eq!((sv.max_conns, sv.threads), (7, 3));
        let (_, sv) = parse(&["--port=99", "--listen=0.0.0.0"]).unwrap();
        assert_eq!((sv.port, sv.listen.as_slice()), (99, &["0.0.0.0".to_string()][..]));
    }

    #[test]
    fn operational_flags() {
        let (_, sv) =
            parse(&["-u", "memcache", "-P", "/run/m.pid", "-o", "idle_timeout=30", "-d", "-k", "-L"]).unwrap();
        assert_eq!(sv.user.as_deref(), Some("memcache"));
        assert_eq!(sv.pid_file, Some(PathBuf::from("/run/m.pid")));
        assert_eq!(sv.idle_timeout, 30);
        assert!(parse(&["-o", "idle_timeout=soon"]).is_err());
        assert!(sv.background_reclaim);
        assert!(!parse(&["-o", "no_lru_maintainer"]).map(|(_, sv)| sv.background_reclaim).unwrap_or(true));
        assert!(parse(&[
            "-o",
            "modern,maxconns_fast,slab_reassign,slab_automove=1,lru_crawler,hash_algorithm=murmur3"
        ])
        .is_ok());
        assert!(parse(&["-o", "slab_reasign"]).is_err(), "a misspelt option is an error");
        // memcached's no_modern turns its crawler and LRU maintainer off;
        // options after it still count.
        let (_, sv) = parse(&["-o", "no_modern"]).unwrap();
        assert!(!sv.tuning.crawler && !sv.background_reclaim && !sv.tuning.recorded.lru_segmented);
        let (_, sv) = parse(&["-o", "no_modern,lru_crawler"]).unwrap();
        assert!(sv.tuning.crawler && !sv.background_reclaim);
        assert_eq!(sv.tuning.recorded.slab_chunk_max, 1 << 20, "memcached's page, not half of it");
        // A configuration file's flags come first: the command line's win.
        let (st, sv) = parse(&["-m", "32", "-p", "1", "-p", "2", "-m", "16"]).unwrap();
        assert_eq!((st.memory_limit, sv.port), (16 << 20, 2));
        let (_, sv) = parse(&["-l", "127.0.0.1", "-l", "::1"]).unwrap();
        assert_eq!(sv.listen.len(), 2, "-l adds up");
    }

    #[test]
    fn sizes_and_limits() {
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert!(parse_size("12x").is_err());
        assert!(parse(&["-I", "100"]).is_err());
        assert!(parse(&["-m", "1", "-I", "1m"]).is_err());
        assert_eq!(parse(&["-U", "11211"]).map(|(_, sv)| sv.udp_port), Ok(11211));
        assert_eq!(parse(&["-U", "0"]).map(|(_, sv)| sv.udp_port), Ok(0));
        assert!(parse(&["-Z"]).is_err(), "TLS needs a certificate");
        let (_, sv) = parse(&["-Z", "-o", "ssl_chain_cert=/c.pem,ssl_min_version=3,ssl_verify_mode=1"]).unwrap();
        let tls = sv.tls.unwrap_or_else(|| panic!("-Z"));
        assert_eq!((tls.verify_mode, tls.min_version), (1, strata_server::MinVersion::Tls13));
        assert!(parse(&["-o", "ssl_verify_mode=4"]).is_err());
        assert!(parse(&["-o", "ssl_keyformat=DER"]).is_err());
        assert!(parse(&["-a", "999"]).is_err());
        assert!(parse(&["-o", "nonsense"]).is_err());
        let (st, _) = parse(&["-o", "compression=on,compression_level=5", "-o", "compression_min_size=1k"]).unwrap();
        let z = st.compression.unwrap_or_else(|| panic!("compression is on"));
        assert_eq!((z.level, z.min_size, z.dict_size), (5, 1024, 256 << 10));
        let (st, _) = parse(&["-o", "compression=off"]).unwrap();
        assert!(st.compression.is_none());
        assert!(parse(&["-o", "compression=maybe"]).is_err());
        assert!(parse(&["-o", "compression=on,compression_level=25"]).is_err());
        assert!(parse(&["-o", "compression_sample=0"]).is_err());
        assert!(parse(&["-o", "compression_dict_size=x"]).is_err());
        let (st, _) = parse(&["-o", "compression=on,compression_cold_level=12,compression_cold_cpu=30"]).unwrap();
        let z = st.compression.unwrap_or_else(|| panic!("compression is on"));
        assert_eq!((z.cold_level, z.cold_cpu_percent), (12, 30));
        assert!(parse(&["-o", "compression=on,compression_cold_level=20"]).is_err());
        assert!(parse(&["-o", "compression=on,compression_cold_cpu=0"]).is_err());
        let (_, sv) = parse(&["-D", "/"]).unwrap();
        assert_eq!((sv.prefix_delimiter, sv.detail_enabled), (b'/', true));
        let (_, sv) = parse(&[]).unwrap();
        assert_eq!((sv.prefix_delimiter, sv.detail_enabled), (b':', false));
        assert!(parse(&["-D", ""]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        // memcached's checks and words, negative values included.
        let refused = |args: &[&str]| parse(args).err().unwrap_or_default();
        assert_eq!(refused(&["-c", "-5"]), "Maximum connections must be greater than 0 (-c)");
        assert_eq!(refused(&["-t", "0"]), "Number of threads must be greater than 0 (-t)");
        assert_eq!(refused(&["-R", "-1"]), "Number of requests per event must be greater than 0 (-R)");
        assert_eq!(refused(&["-f", "-1"]), "Factor must be greater than 1 (-f)");
        assert_eq!(refused(&["-o", "hash_algorithm=crc32"]), "Unknown hash_algorithm option (jenkins, murmur3, xxh3)");
    }
}
