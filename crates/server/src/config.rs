//! Server settings, filled from memcached-compatible flags by the binary:
//! plain data, at the bottom of the crate's layers (every other module may
//! read them; this one imports none of theirs but the credentials' type).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use strata_persist::backend::Backend;
use strata_persist::{Durability, Recovery, Wal};

use crate::auth::Credentials;

/// `-B`: which protocol a connection may speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Decided per connection by its first byte (0x80: binary).
    Auto,
    Ascii,
    Binary,
}

/// `-o io=`: how workers do socket I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoBackend {
    /// io_uring where the kernel offers it, else epoll.
    Auto,
    /// io_uring, or refuse to start.
    Uring,
    Epoll,
}

/// Everything the network side needs to know.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `-p`: TCP port for addresses given without one.
    pub port: u16,
    /// `-U`: UDP port on the same addresses (0: no UDP, the default).
    pub udp_port: u16,
    /// `-Z` and the `ssl_*` options: TCP listeners speak TLS (but those
    /// given as `notls:ADDR`).
    pub tls: Option<TlsSettings>,
    /// `-l`: addresses to listen on (`host`, `host:port`, `[v6]:port`).
    pub listen: Vec<String>,
    /// `-s`: a unix socket path; when set, no TCP listener is opened.
    pub unix_socket: Option<PathBuf>,
    /// `-a`: permission bits of the unix socket.
    pub unix_mask: u32,
    /// `-c`: simultaneous client connections.
    pub max_conns: usize,
    /// `-t`: worker threads.
    pub threads: usize,
    /// `-b`: listen backlog.
    pub backlog: i32,
    /// `-R`: requests served from one connection before the worker turns to others.
    pub reqs_per_event: usize,
    /// `-A`: `shutdown` is allowed.
    pub shutdown_enabled: bool,
    /// `-F` clears this: `flush_all` is refused.
    pub flush_enabled: bool,
    /// `-X` clears this: the key dumps (`stats cachedump`, `lru_crawler
    /// metadump` and `mgdump`) are refused.
    pub dump_enabled: bool,
    /// `-W` clears this: `watch` is refused.
    pub watch_enabled: bool,
    /// `-v` count.
    pub verbosity: u32,
    /// `-I`.
    pub item_size_max: usize,
    /// Longest `get` line before the connection is closed.
    pub max_get_line: usize,
    /// Replies buffered for one connection before it stops reading (back-pressure).
    pub max_output: usize,
    /// Enables `debug_advance_clock` and `debug_panic` (tests only: builds
    /// without the `test-hooks` feature have no such commands).
    pub debug_clock: bool,
    /// `-B`.
    pub protocol: Protocol,
    /// `-S`: SASL PLAIN users; binary connections must authenticate.
    pub sasl: Option<Arc<Credentials>>,
    /// `-Y`: users of memcached's ASCII authentication.
    pub auth_file: Option<Arc<Credentials>>,
    /// `-o io=`.
    pub io: IoBackend,
    /// `-o io_buffers=`: receive buffers (8 KiB each) per io_uring worker; a
    /// power of two.
    pub io_buffers: u16,
    /// `-D`: the delimiter that ends a key's prefix for `stats detail`.
    pub prefix_delimiter: u8,
    /// `stats detail` counting from the start (memcached's `-D` turns it on).
    pub detail_enabled: bool,
    /// `--snapshot-dir` / `-e`: snapshots and warm restarts.
    pub snapshot: Option<SnapshotConfig>,
    /// `--metrics-listen`: where `GET /metrics` is served.
    pub metrics_listen: Option<String>,
    /// `-u`: the user to switch to after binding, when started as root.
    pub user: Option<String>,
    /// `-P`: where the process id is written once listening.
    pub pid_file: Option<PathBuf>,
    /// `-o idle_timeout=`: seconds a connection may go without completing
    /// a request before it is closed (0: never).
    pub idle_timeout: u32,
    /// Reclaim memory on a background thread ahead of the writers
    /// (default; memcached's `-o lru_maintainer`), or only on the
    /// writers' own time (`-o no_lru_maintainer`).
    pub background_reclaim: bool,
    /// `-o read_buf_mem_limit=`: bytes of unread replies across all
    /// connections beyond each one's allowance (0: no limit).
    pub reply_budget: usize,
    /// The LRU crawler's and memcached's tuning settings at start.
    pub tuning: TuningConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            udp_port: 0,
            tls: None,
            port: 11211,
            listen: vec!["127.0.0.1".into()],
            unix_socket: None,
            unix_mask: 0o700,
            max_conns: 1024,
            threads: 4,
            backlog: 1024,
            reqs_per_event: 20,
            shutdown_enabled: false,
            flush_enabled: true,
            dump_enabled: true,
            watch_enabled: true,
            verbosity: 0,
            item_size_max: 1 << 20,
            max_get_line: 1 << 20,
            max_output: 256 << 10,
            debug_clock: false,
            protocol: Protocol::Auto,
            sasl: None,
            auth_file: None,
            io: IoBackend::Auto,
            io_buffers: 64,
            prefix_delimiter: b':',
            detail_enabled: false,
            snapshot: None,
            metrics_listen: None,
            user: None,
            pid_file: None,
            idle_timeout: 0,
            background_reclaim: true,
            reply_budget: 64 << 20,
            tuning: TuningConfig::default(),
        }
    }
}

/// `--snapshot-dir` / `-e` and friends.
#[derive(Debug, Clone)]
pub struct SnapshotConfig {
    /// The snapshot file (`DIR/strata.snapshot`, or `-e`'s path).
    pub file: PathBuf,
    /// `--snapshot-interval`: also snapshot this often while serving.
    pub interval: Option<Duration>,
    /// `--snapshot-strict`: refuse to start on a damaged or mismatched snapshot.
    pub strict: bool,
    /// What the load at start found, for `stats`.
    pub loaded: Loaded,
    /// `--durability`.
    pub durability: Durability,
    /// The durability log, opened at start after recovery (with
    /// `--durability interval|always`).
    pub wal: Option<Arc<Wal>>,
    /// What recovery replayed from the log at start.
    pub recovered: Recovery,
    /// The lock on `<file>.lock`, held while the process runs so that two
    /// servers never share a snapshot and its log.
    pub lock: Option<Arc<strata_persist::backend::Lock>>,
    /// Where the snapshot and its log are read and written (the files of
    /// the operating system; tests may give another).
    pub backend: Arc<dyn Backend>,
}

/// The outcome of the load at start.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// `none` (no snapshot), `ok`, `damaged` (loaded what was whole),
    /// `refused` (a mismatch or unreadable header: started empty).
    pub result: &'static str,
    pub items: u64,
    /// Flash items brought back (with `-o ext_path`).
    pub flash_items: u64,
    pub segments: u64,
    pub damaged_segments: u64,
    pub skipped_segments: u64,
    /// Segments restored item by item once no free segment was left.
    pub loose_segments: u64,
    /// Live items evicted during the load (they did not fit `-m`).
    pub evicted: u64,
    pub duration: Duration,
}

/// The lowest protocol version offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinVersion {
    Tls12,
    Tls13,
}

/// `-Z` and the `ssl_*` options.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub chain_cert: PathBuf,
    /// The private key; in `chain_cert` when not given.
    pub key: Option<PathBuf>,
    pub ca_cert: Option<PathBuf>,
    pub verify_mode: u8,
    pub min_version: MinVersion,
    pub ciphers: Option<String>,
}

/// The settings at start (from the flags).
#[derive(Debug, Clone, PartialEq)]
pub struct TuningConfig {
    /// `-o lru_crawler` / `no_lru_crawler`.
    pub crawler: bool,
    /// `-o lru_crawler_sleep`: microseconds between index stripes.
    pub crawler_sleep_us: u32,
    /// `-o lru_crawler_tocrawl`: items looked at per class per crawl (0:
    /// all).
    pub crawler_tocrawl: u32,
    /// `-o slab_automove`.
    pub slab_automove: u32,
    /// memcached's settings for machinery strata does not have, as the
    /// `-o` options gave them.
    pub recorded: Recorded,
    /// The `stats settings` names of the settings given at start that do
    /// nothing here (`stats settings`' `no_effect`).
    pub no_effect: Vec<&'static str>,
    /// `-o track_sizes`: `stats sizes` counts from the start.
    pub track_sizes: bool,
    /// `-o watcher_logbuf_size` (given in KiB): bytes of lines a `watch`
    /// connection may have waiting before lines are skipped.
    pub watcher_buf: usize,
}

impl Default for TuningConfig {
    fn default() -> Self {
        TuningConfig {
            crawler: true,
            crawler_sleep_us: 100,
            crawler_tocrawl: 0,
            slab_automove: 0,
            recorded: Recorded::default(),
            no_effect: Vec::new(),
            track_sizes: false,
            watcher_buf: WATCHER_BUF,
        }
    }
}

/// Settings recorded for `stats settings` only: strata has no slab
/// classes, slab mover, chunked items or segmented LRU for them to steer.
/// The defaults are memcached 1.6's, but for `slab_reassign`, which says
/// what strata does (no pages are ever moved).
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub slab_reassign: bool,
    pub slab_chunk_max: u64,
    pub tail_repair_time: u32,
    /// Bytes (`-o worker_logbuf_size` gives KiB, as in memcached).
    pub worker_logbuf_size: u64,
    pub slab_automove_ratio: f64,
    pub slab_automove_freeratio: f64,
    pub slab_automove_window: f64,
    pub lru_segmented: bool,
    pub temp_lru: bool,
    pub temporary_ttl: i32,
    pub hot_lru_pct: u32,
    pub warm_lru_pct: u32,
    pub hot_max_factor: f64,
    pub warm_max_factor: f64,
    /// `extstore <setting>` values strata records without acting on them,
    /// by their `stats settings` name (`ext_low_ttl`…); they replace the
    /// `-o` value of the same name.
    pub ext: Vec<(&'static str, String)>,
}

impl Default for Recorded {
    /// memcached 1.6's defaults.
    fn default() -> Self {
        Recorded {
            slab_reassign: false,
            slab_chunk_max: 512 << 10,
            tail_repair_time: 0,
            worker_logbuf_size: 64 << 10,
            slab_automove_ratio: 0.8,
            slab_automove_freeratio: 0.01,
            slab_automove_window: 30.0,
            lru_segmented: true,
            temp_lru: false,
            temporary_ttl: 61,
            hot_lru_pct: 20,
            warm_lru_pct: 40,
            hot_max_factor: 0.2,
            warm_max_factor: 2.0,
            ext: Vec::new(),
        }
    }
}

/// Bytes of lines a watcher may have waiting, by default (memcached's
/// default `watcher_logbuf_size`); past it, lines are skipped.
pub(crate) const WATCHER_BUF: usize = 256 << 10;
