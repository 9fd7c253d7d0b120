//! The network side of strata: listeners, worker event loops, connections,
//! request dispatch, `stats`, signals and graceful shutdown.
//!
//! Owns sockets and threads; owns no cached data (that is `strata-store`).
//! Wire syntax is `strata-protocol`'s (fixed reply lines are its
//! `reply::text` constants), but for some lines formatted here: `VERSION`,
//! cachedump's `ITEM`, watch's events, UDP's frame header (docs/design.md). One acceptor thread hands new
//! connections round-robin to `-t` worker threads; each worker runs its own
//! `mio` event loop over its own connections and executes requests itself
//! against its [`strata_store::Worker`] handle — no request crosses threads.
//! Beside them: the clock thread, the snapshot and log-writer threads
//! (`--snapshot-dir`, `--durability`) and the metrics responder
//! (`--metrics-listen`). Once the ports are open: the pid file and the
//! switch away from root (`process`).

pub mod admin;
pub mod auth;
mod binary;
mod bufpool;
mod bufring;
pub mod config;
mod conn;
mod core;
mod detail;
mod dispatch;
mod epoll;
mod latency;
mod listen;
mod meta;
mod metrics;
mod process;
mod replies;
mod sched;
pub mod snapshot;
mod stats;
mod tls;
mod transport;
mod udp;
mod uring;
mod verbose;
mod watch;

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};
use parking_lot::Mutex;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook_mio::v1_0::Signals;
use strata_store::Store;

pub use auth::{AuthError, Credentials};
pub use config::{IoBackend, Protocol, ServerConfig};
pub use process::{ExtendTimeout, PrivilegeError};
pub use snapshot::{Loaded, SnapshotConfig};
pub use tls::{MinVersion, TlsError, TlsSettings};

/// What changes the log level when a client sends `verbosity N` (set once
/// by the binary, which owns logging).
pub(crate) static VERBOSITY_HOOK: std::sync::OnceLock<Box<dyn Fn(u32) + Send + Sync>> = std::sync::OnceLock::new();

/// Lets `verbosity N` change the log level while serving: `set` gets N
/// (0 to 2, as `-v` counts). The first call wins.
pub fn on_verbosity(set: Box<dyn Fn(u32) + Send + Sync>) {
    let _ = VERBOSITY_HOOK.set(set);
}

/// Errors that stop the server from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: String, source: io::Error },
    #[error("invalid listen address {0:?}")]
    BadAddress(String),
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("could not write the pid file {path}: {source}")]
    PidFile { path: String, source: io::Error },
    #[error(transparent)]
    Privileges(#[from] process::PrivilegeError),
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The snapshot at shutdown (or the durability log's last write)
    /// failed: what the cache held is not kept, and a supervisor must hear
    /// of it (a non-zero exit).
    #[error("stopped without keeping the cache: {0}")]
    NotKept(String),
}

/// A connection's entry in `stats conns`.
#[derive(Debug)]
pub(crate) struct ConnInfo {
    pub fd: i32,
    pub addr: String,
    pub listen_addr: String,
    pub last_cmd: AtomicU32,
    /// A [`ConnState`], as its `u32`.
    pub state: AtomicU32,
    /// Reply bytes queued across every connection beyond each one's
    /// allowance ([`ReplyBudget`]), shared by all connections.
    pub replies: Arc<ReplyBudget>,
    /// Why it closes, as `watch connevents` gives it: a [`CloseReason`],
    /// as its `u8`. Set where the close is decided; a connection closed
    /// without one (a read or write failed) closed for an error, as in
    /// memcached.
    pub close_reason: AtomicU8,
}

impl ConnInfo {
    /// A connection (or UDP socket) entry with nothing yet to report.
    pub fn new(fd: i32, addr: String, listen_addr: String, now: u32, replies: Arc<ReplyBudget>) -> ConnInfo {
        ConnInfo {
            fd,
            addr,
            listen_addr,
            last_cmd: AtomicU32::new(now),
            state: AtomicU32::new(0),
            replies,
            close_reason: AtomicU8::new(CloseReason::Error as u8),
        }
    }

    pub fn set_close_reason(&self, why: CloseReason) {
        self.close_reason.store(why as u8, Relaxed);
    }

    pub fn close_reason(&self) -> CloseReason {
        CloseReason::from_u8(self.close_reason.load(Relaxed))
    }
}

/// Why a connection closed: memcached's `reason=` in `watch connevents`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CloseReason {
    /// A protocol error (a line too long, a malformed binary request, too
    /// many failed authentications) or a failed read or write.
    Error = 0,
    /// The client closed it, or sent `quit`.
    Normal = 1,
    /// `-o idle_timeout`.
    IdleTimeout = 2,
    /// `shutdown` from it, or the server stopping.
    Shutdown = 3,
}

impl CloseReason {
    pub fn from_u8(v: u8) -> CloseReason {
        match v {
            1 => CloseReason::Normal,
            2 => CloseReason::IdleTimeout,
            3 => CloseReason::Shutdown,
            _ => CloseReason::Error,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CloseReason::Error => "error",
            CloseReason::Normal => "normal",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shutdown => "shutdown",
        }
    }
}

/// The server-wide budget for queued replies (`-o read_buf_mem_limit`):
/// each connection may queue [`ReplyBudget::ALLOWANCE`] bytes of replies its
/// client has not read; what it queues beyond that is charged here, and
/// while the charges reach the limit, connections holding more than their
/// allowance stop running requests (the largest holders, as their clients
/// are the ones not reading) until their clients read. A client that never
/// reads can so hold its allowance and a share of the limit, never more.
#[derive(Debug, Default)]
pub(crate) struct ReplyBudget {
    charged: AtomicUsize,
    /// Bytes; 0: no limit.
    pub limit: usize,
}

impl ReplyBudget {
    /// Unread reply bytes a connection keeps without a charge.
    pub const ALLOWANCE: usize = 64 << 10;

    /// Whether a connection with `pending` unsent reply bytes must stop
    /// running requests for now.
    pub fn holds_back(&self, pending: usize) -> bool {
        self.limit != 0 && pending >= Self::ALLOWANCE && self.charged.load(Relaxed) >= self.limit
    }

    /// Moves a connection's charge from `was` to what `pending` calls for;
    /// returns the new charge.
    pub fn charge(&self, was: usize, pending: usize) -> usize {
        let now = pending.saturating_sub(Self::ALLOWANCE);
        if now > was {
            self.charged.fetch_add(now - was, Relaxed);
        } else if now < was {
            self.charged.fetch_sub(was - now, Relaxed);
        }
        now
    }

    pub fn charged(&self) -> usize {
        self.charged.load(Relaxed)
    }
}

/// What `stats conns` shows a connection doing, in memcached's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum ConnState {
    /// Waiting for, or parsing, the next request.
    ParseCmd = 0,
    /// Part of a request is buffered; the rest is awaited.
    Nread = 1,
    /// Discarding the data of a refused request.
    Swallow = 2,
}

impl ConnState {
    pub fn from_u32(v: u32) -> ConnState {
        match v {
            1 => ConnState::Nread,
            2 => ConnState::Swallow,
            _ => ConnState::ParseCmd,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ConnState::ParseCmd => "conn_parse_cmd",
            ConnState::Nread => "conn_nread",
            ConnState::Swallow => "conn_swallow",
        }
    }
}

/// Where the server is in its life. It only moves forward: serving, then
/// possibly draining (`shutdown graceful`, SIGUSR1: no new connections;
/// each open one is closed once nothing of it is under way, for at most
/// [`DRAIN_LIMIT`]), then stopping (`shutdown`, SIGTERM, SIGINT, or the end
/// of a drain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Run {
    Serving = 0,
    Draining = 1,
    Stopping = 2,
}

/// The shared [`Run`], read by every loop on each turn.
#[derive(Debug, Default)]
pub(crate) struct RunState(std::sync::atomic::AtomicU8);

impl RunState {
    pub fn get(&self) -> Run {
        match self.0.load(Relaxed) {
            0 => Run::Serving,
            1 => Run::Draining,
            _ => Run::Stopping,
        }
    }

    pub fn stopping(&self) -> bool {
        self.get() == Run::Stopping
    }

    pub fn draining(&self) -> bool {
        self.get() == Run::Draining
    }

    /// A graceful stop begins (unless the server is already stopping).
    pub fn drain(&self) {
        self.0.fetch_max(Run::Draining as u8, Relaxed);
    }

    pub fn stop(&self) {
        self.0.store(Run::Stopping as u8, Relaxed);
    }
}

/// State every thread shares.
pub(crate) struct Shared {
    pub cfg: ServerConfig,
    pub store: Arc<Store>,
    /// Serving, draining (a graceful stop) or stopping.
    pub run: RunState,
    pub curr_conns: AtomicUsize,
    pub total_conns: AtomicU64,
    pub rejected_conns: AtomicU64,
    pub verbosity: AtomicU32,
    /// Queued replies across connections (`-o read_buf_mem_limit`).
    pub replies: Arc<ReplyBudget>,
    pub started: Instant,
    pub workers: Vec<Arc<stats::WorkerStats>>,
    pub conns: Mutex<BTreeMap<u64, Arc<ConnInfo>>>,
    pub listeners: Vec<(i32, String)>,
    /// The UDP sockets (`-U`), each an entry in `stats conns` as in
    /// memcached.
    pub udp: Vec<Arc<ConnInfo>>,
    pub acceptor: Arc<Waker>,
    /// `stats detail`'s per-prefix counts.
    pub detail: detail::Detail,
    /// `watch`'s connections and counters.
    pub watchers: Arc<watch::Watchers>,
    /// With `-Z`: the configuration new TLS connections get.
    pub tls: Option<tls::Tls>,
    /// Bumped to ask every worker to seal its active segments (a snapshot
    /// is starting); each notes the last request it carried out.
    pub seal_gen: AtomicU64,
    /// With `--snapshot-dir`.
    pub snapshots: Option<Arc<snapshot::Snapshots>>,
    /// With `--durability always`: the log whose durable position a
    /// change's reply waits for.
    pub durable_acks: Option<Arc<strata_persist::Wal>>,
    /// What memcached's tuning commands set (`admin.rs`).
    pub tuning: Arc<admin::Tuning>,
}

/// The event loop a worker runs, built before its thread starts so that a
/// failure stops the server at start-up.
enum Backend {
    Uring(Box<io_uring::IoUring>),
    Epoll(Poll),
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Uring(_) => "io_uring",
            Backend::Epoll(_) => "epoll",
        }
    }
}

fn backend(cfg: &ServerConfig, wake: &sched::Wake) -> io::Result<Backend> {
    if cfg.io != IoBackend::Epoll {
        match uring::ring(cfg.max_conns) {
            Ok(ring) => return Ok(Backend::Uring(Box::new(ring))),
            Err(e) if cfg.io == IoBackend::Uring => return Err(e),
            Err(e) => tracing::info!(error = %e, "io_uring unavailable, using epoll"),
        }
    }
    Ok(Backend::Epoll(epoll::poll_for(wake)?))
}

/// The acceptor's check of `-c`. `curr_connections` counts a connection
/// from its accept until its worker has closed it, so one its client has
/// already closed still counts until the worker notices. When connections
/// open and close fast on a busy machine (two cores, the acceptor running
/// while the workers wait for a core), accepts run ahead of those closes:
/// 9 clients connecting and closing in a loop were refused 13,192 times
/// in 4 s at `-c 64` (`rejected_connections`), and once 50,985 times at
/// `-c 1024` (memcached refused none at 1024, though thousands at `-c
/// 64`). Here, at the limit the
/// acceptor first wakes the workers and gives them up to
/// [`AtLimit::SETTLE`] to catch up; only a limit that still holds refuses
/// the connection. Having found the limit real, it refuses at once until
/// the count drops below it, so a flood of connections over the limit
/// cannot stall the acceptor.
#[derive(Default)]
struct AtLimit {
    real: bool,
}

impl AtLimit {
    const SETTLE: Duration = Duration::from_millis(100);

    fn full(&mut self, shared: &Shared, workers: &[(mpsc::Sender<sched::NewConn>, Arc<sched::Wake>)]) -> bool {
        let over = || shared.curr_conns.load(Relaxed) >= shared.cfg.max_conns;
        if !over() {
            self.real = false;
            return false;
        }
        if self.real {
            return true;
        }
        let deadline = Instant::now() + Self::SETTLE;
        while over() && Instant::now() < deadline {
            workers.iter().for_each(|(_, w)| w.wake());
            std::thread::sleep(Duration::from_micros(200));
        }
        self.real = over();
        self.real
    }
}

/// The start-up line: the version and the settings in effect (`io`: the
/// workers' event loop), so that an operator's log says what ran.
fn started(shared: &Shared, io: &str) {
    let (cfg, sc) = (&shared.cfg, shared.store.config());
    let flash = sc.flash.as_ref().map_or("off".to_string(), |t| {
        t.paths.iter().map(|(p, n)| format!("{}:{n}", p.display())).collect::<Vec<_>>().join(",")
    });
    let (snapshot, durability) = match &cfg.snapshot {
        Some(s) => (s.file.display().to_string(), format!("{:?}", s.durability).to_lowercase()),
        None => ("off".to_string(), "off".to_string()),
    };
    let listen = match &cfg.unix_socket {
        Some(path) => format!("unix:{}", path.display()),
        None => cfg.listen.join(","),
    };
    tracing::info!(
        version = %stats::STRATA_VERSION,
        protocol = %stats::VERSION,
        port = if cfg.unix_socket.is_some() { 0 } else { cfg.port },
        udp_port = cfg.udp_port,
        listen = %listen,
        memory_mb = shared.store.memory_limit() >> 20,
        max_conns = cfg.max_conns,
        threads = cfg.threads.max(1),
        item_size_max = cfg.item_size_max,
        io = %io,
        flash = %flash,
        snapshot = %snapshot,
        durability = %durability,
        compression = %if sc.compression.is_some() { "on" } else { "off" },
        "strata starting"
    );
}

/// The longest a graceful stop waits for connections to finish.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);

const LISTENER_BASE: usize = 0;
const SIGNALS: Token = Token(usize::MAX - 1);
const ACCEPTOR_WAKE: Token = Token(usize::MAX - 2);

/// Runs the server until SIGTERM, SIGINT or `shutdown`. Returns once every
/// connection is closed and every thread has stopped.
pub fn run(cfg: ServerConfig, store: Arc<Store>) -> Result<(), ServerError> {
    let tls = cfg.tls.clone().map(tls::Tls::new).transpose()?;
    let mut listeners = listen::bind(&cfg)?;
    let udp_sockets = listen::bind_udp(&cfg)?;
    let metrics_listener = match &cfg.metrics_listen {
        Some(addr) => Some(
            metrics::bind(addr).map_err(|source| ServerError::Listen { addr: format!("metrics {addr}"), source })?,
        ),
        None => None,
    };
    // Bound: now the pid file, then the switch away from root.
    let _pid_file = match &cfg.pid_file {
        Some(path) => Some(
            process::PidFile::create(path)
                .map_err(|source| ServerError::PidFile { path: path.display().to_string(), source })?,
        ),
        None => None,
    };
    process::drop_privileges(cfg.user.as_deref())?;
    let mut poll = Poll::new()?;
    for (i, l) in listeners.iter_mut().enumerate() {
        poll.registry().register(l, Token(LISTENER_BASE + i), Interest::READABLE)?;
        tracing::info!(addr = %l.name(), "listening");
        if cfg.verbosity > 1 {
            verbose::listening(l.fd(), Some(cfg.protocol));
        }
    }
    // memcached's: SIGTERM and SIGINT stop, SIGUSR1 stops gracefully (all
    // three finish what connections sent and save the snapshot), SIGHUP
    // reloads the proxy's configuration there and does nothing here (its
    // default would end the process).
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGUSR1, SIGHUP])?;
    poll.registry().register(&mut signals, SIGNALS, Interest::READABLE)?;
    let acceptor = Arc::new(Waker::new(poll.registry(), ACCEPTOR_WAKE)?);

    let threads = cfg.threads.max(1);
    let wakes = (0..threads).map(|_| sched::Wake::new().map(Arc::new)).collect::<io::Result<Vec<_>>>()?;
    let snapshots = cfg.snapshot.clone().map(|c| Arc::new(snapshot::Snapshots::new(c)));
    // The workers', then each UDP thread's.
    let workers_stats: Vec<_> =
        (0..threads + udp_sockets.len()).map(|_| Arc::new(stats::WorkerStats::default())).collect();
    let watchers: Arc<watch::Watchers> = Arc::default();
    store.on_evict(watchers.clone());
    {
        // A writer that finds every segment held by workers' half-filled
        // ones wakes them so that idle ones seal theirs.
        let wakes = wakes.clone();
        store.on_starved(Box::new(move || wakes.iter().for_each(|w| w.wake())));
    }
    let cfg_tuning = cfg.tuning.clone();
    let replies = Arc::new(ReplyBudget { limit: cfg.reply_budget, ..ReplyBudget::default() });
    let udp: Vec<_> = udp_sockets
        .iter()
        .map(|(sock, name)| {
            let fd = std::os::fd::AsRawFd::as_raw_fd(sock);
            Arc::new(ConnInfo::new(fd, name.clone(), name.clone(), store.clock().now(), replies.clone()))
        })
        .collect();
    let shared = Arc::new(Shared {
        verbosity: AtomicU32::new(cfg.verbosity),
        replies,
        udp: udp.clone(),
        detail: detail::Detail::new(cfg.prefix_delimiter, cfg.detail_enabled),
        watchers,
        tls,
        listeners: listeners.iter().map(|l| (l.fd(), l.name())).collect(),
        cfg,
        store,
        run: RunState::default(),
        curr_conns: AtomicUsize::new(0),
        total_conns: AtomicU64::new(0),
        rejected_conns: AtomicU64::new(0),
        started: Instant::now(),
        workers: workers_stats,
        conns: Mutex::new(BTreeMap::new()),
        acceptor,
        seal_gen: AtomicU64::new(0),
        durable_acks: snapshots
            .as_ref()
            .and_then(|s| s.cfg.wal.clone())
            .filter(|w| w.mode() == strata_persist::Durability::Always),
        snapshots: snapshots.clone(),
        tuning: Arc::new(admin::Tuning::new(&cfg_tuning)),
    });

    let mut handles = Vec::new();
    let mut workers = Vec::new();
    let mut io = "epoll";
    for (i, wake) in wakes.iter().enumerate() {
        let (tx, rx) = mpsc::channel();
        let wake = wake.clone();
        let backend = backend(&shared.cfg, &wake)?;
        if i == 0 {
            io = backend.name();
        }
        let sh = shared.clone();
        let stats = shared.workers[i].clone();
        let w = wake.clone();
        handles.push(std::thread::Builder::new().name(format!("worker-{i}")).spawn(move || match backend {
            Backend::Uring(ring) => uring::run(sh, stats, *ring, w, rx),
            Backend::Epoll(poll) => epoll::run(sh, stats, poll, w, rx),
        })?);
        workers.push((tx, wake));
    }

    started(&shared, io);

    for (i, ((sock, name), info)) in udp_sockets.into_iter().zip(udp).enumerate() {
        tracing::info!(addr = %name, "listening");
        if verbose::on(&shared) {
            verbose::listening(info.fd, None);
        }
        let sh = shared.clone();
        let stats = shared.workers[threads + i].clone();
        handles
            .push(std::thread::Builder::new().name(format!("udp-{i}")).spawn(move || udp::run(sh, stats, sock, info))?);
    }

    let ticker = {
        let sh = shared.clone();
        // With -o idle_timeout the workers look for idle connections once
        // a second; a worker with nothing to do is woken for it.
        let idle_wakes = (sh.cfg.idle_timeout > 0).then(|| wakes.clone());
        // Ticks to the next look (a countdown).
        let mut ticks = 10u32;
        std::thread::Builder::new().name("clock".into()).spawn(move || {
            while !sh.run.stopping() {
                sh.store.clock().tick();
                ticks -= 1;
                if ticks == 0 {
                    ticks = 10;
                    if let Some(w) = &idle_wakes {
                        w.iter().for_each(|w| w.wake());
                    }
                }
                if let Some(snaps) = &sh.snapshots {
                    snaps.keep_lease(sh.store.epoch());
                    snaps.snapshot_if_log_grew((sh.store.memory_limit() as u64).max(64 << 20));
                }
                std::thread::park_timeout(Duration::from_millis(100));
            }
        })?
    };
    let reclaimer = if shared.cfg.background_reclaim {
        let r = shared.store.reclaimer();
        Some(std::thread::Builder::new().name("reclaim".into()).spawn(move || r.run(Duration::from_millis(10)))?)
    } else {
        None
    };
    let wal_writer = match snapshots.as_ref().and_then(|s| s.cfg.wal.clone()) {
        Some(wal) => {
            let wakes = wakes.clone();
            // Workers holding replies for durability look again when it moves.
            wal.on_durable(Box::new(move || wakes.iter().for_each(|w| w.wake())));
            Some(std::thread::Builder::new().name("wal".into()).spawn(move || wal.run())?)
        }
        None => None,
    };
    let metrics = match metrics_listener {
        Some(l) => {
            let sh = shared.clone();
            Some(std::thread::Builder::new().name("metrics".into()).spawn(move || metrics::run(sh, l))?)
        }
        None => None,
    };
    let snapshotter = match &snapshots {
        Some(snaps) => {
            let (sh, sn) = (shared.clone(), snaps.clone());
            Some(std::thread::Builder::new().name("snapshot".into()).spawn(move || snapshot::run(sh, sn, wakes))?)
        }
        None => None,
    };

    // Listening, workers running: a `Type=notify` unit is started.
    process::notify(&format!("READY=1\nMAINPID={}", std::process::id()));
    let mut events = Events::with_capacity(256);
    let mut next = 0usize;
    let mut next_id = 0u64;
    let mut at_limit = AtLimit::default();
    let mut drain_until = None;
    while !shared.run.stopping() {
        if shared.run.draining() {
            let until = *drain_until.get_or_insert_with(|| {
                // Not one more connection: the listeners close, so the
                // kernel refuses new ones rather than queueing them.
                for l in listeners.iter_mut() {
                    let _ = poll.registry().deregister(l);
                }
                listeners.clear();
                for (_, wake) in &workers {
                    wake.wake();
                }
                Instant::now() + DRAIN_LIMIT
            });
            if shared.curr_conns.load(Relaxed) == 0 || Instant::now() >= until {
                break;
            }
        }
        let timeout = drain_until.map(|_| Duration::from_millis(20));
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        for ev in events.iter() {
            match ev.token() {
                SIGNALS => {
                    for sig in signals.pending() {
                        if sig == SIGHUP {
                            tracing::info!("SIGHUP: nothing to reload");
                            continue;
                        }
                        if sig == SIGUSR1 {
                            tracing::info!("SIGUSR1: stopping gracefully");
                            shared.run.drain();
                            continue;
                        }
                        tracing::info!(signal = sig, "shutting down");
                        shared.run.stop();
                    }
                }
                ACCEPTOR_WAKE => {}
                Token(i) => {
                    let Some(l) = listeners.get_mut(i - LISTENER_BASE) else { continue };
                    loop {
                        match l.accept() {
                            Ok(mut stream) => {
                                let tls = match (&shared.tls, l.tls()) {
                                    (Some(t), true) => match t.accept() {
                                        Ok(c) => Some(c),
                                        Err(e) => {
                                            tracing::warn!(error = %e, "TLS connection refused");
                                            continue;
                                        }
                                    },
                                    _ => None,
                                };
                                if at_limit.full(&shared, &workers) {
                                    shared.rejected_conns.fetch_add(1, Relaxed);
                                    stream.reject(strata_protocol::reply::text::TOO_MANY_CONNECTIONS);
                                    continue;
                                }
                                shared.curr_conns.fetch_add(1, Relaxed);
                                shared.total_conns.fetch_add(1, Relaxed);
                                tracing::debug!(peer = %stream.peer_name(), "connection accepted");
                                next_id += 1;
                                let info = Arc::new(ConnInfo::new(
                                    stream.fd(),
                                    stream.peer_name(),
                                    l.name(),
                                    shared.store.clock().now(),
                                    shared.replies.clone(),
                                ));
                                if verbose::on(&shared) {
                                    verbose::accepted(info.fd, shared.cfg.protocol);
                                }
                                if shared.watchers.wants(watch::CONNEVENTS) {
                                    let (rip, rport, transport) = watch::endpoint(&info.addr);
                                    shared.watchers.log(
                                        watch::CONNEVENTS,
                                        format_args!(
                                            "type=conn_new rip={rip} rport={rport} transport={transport} cfd={}",
                                            info.fd
                                        ),
                                    );
                                }
                                shared.conns.lock().insert(next_id, info.clone());
                                let (tx, wake) = &workers[next % workers.len()];
                                next += 1;
                                if tx.send(sched::NewConn { id: next_id, stream, info, tls }).is_ok() {
                                    wake.wake();
                                } else {
                                    // That worker has stopped (the server is
                                    // stopping with it): the stream is dropped,
                                    // so it must not be counted.
                                    sched::close(&shared, next_id);
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Err(e) => {
                                // Out of descriptors and the like: log and keep serving.
                                tracing::warn!(error = %e, "accept failed");
                                break;
                            }
                        }
                    }
                }
            }
        }
    }

    shared.run.stop();
    process::notify("STOPPING=1");
    for (_, wake) in &workers {
        wake.wake();
    }
    for h in handles {
        let _ = h.join();
    }
    // Before the shutdown snapshot: the reclaimer seals its copy targets.
    if let Some(t) = reclaimer {
        shared.store.stop_reclaimer();
        let _ = t.join();
    }
    ticker.thread().unpark();
    let _ = ticker.join();
    if let Some(t) = metrics {
        let _ = t.join();
    }
    drop(listeners);
    if let Some(path) = &shared.cfg.unix_socket {
        let _ = std::fs::remove_file(path);
    }
    let mut kept: Result<(), String> = Ok(());
    if let Some(snaps) = &snapshots {
        // A large cache takes longer to save than TimeoutStopSec, after
        // which systemd would kill the save half-way.
        let _more_time = ExtendTimeout::start("saving the snapshot");
        snapshot::stop(snaps);
        if let Some(t) = snapshotter {
            let _ = t.join();
        }
        if let Some(wal) = &snaps.cfg.wal {
            wal.stop();
            if let Some(t) = wal_writer {
                let _ = t.join();
            }
            if let Err(e) = wal.flush() {
                tracing::error!(error = %e, "durability log: the last writes could not be written");
                kept = Err(format!("durability log: {e}"));
            }
        }
        // The workers are gone and sealed everything they wrote: one pass
        // copies the whole cache. The port is already closed.
        if let Err(e) = snaps.save(&shared, &mut snapshot::AtShutdown(&shared)) {
            kept = Err(format!("snapshot: {e}"));
        }
        snaps.keep_lease(shared.store.epoch());
    }
    if let Err(why) = kept {
        tracing::error!("stopped without keeping the cache: {why}");
        return Err(ServerError::NotKept(why));
    }
    tracing::info!("stopped");
    Ok(())
}
