//! Server settings, filled from memcached-compatible flags by the binary.

use std::path::PathBuf;
use std::sync::Arc;

use crate::execution::auth::Credentials;

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
    pub tls: Option<crate::network::tls::TlsSettings>,
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
    pub snapshot: Option<crate::lifecycle::snapshot::SnapshotConfig>,
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
    pub tuning: crate::execution::admin::TuningConfig,
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
            tuning: crate::execution::admin::TuningConfig::default(),
        }
    }
}
