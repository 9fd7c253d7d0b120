//! The network side of strata: listeners, worker event loops, connections,
//! request dispatch, `stats`, signals and graceful shutdown.
//!
//! Owns sockets and threads; owns no cached data (that is `strata-store`).
//! Wire syntax is `strata-protocol`'s (fixed reply lines are its
//! `reply::text` constants, UDP's frame header its `udp`), but for some
//! lines formatted here: `VERSION`, cachedump's `ITEM`, watch's events
//! (docs/design.md).
//!
//! [`run`] is the server's life in order: start, serve, stop, keep the
//! cache. While it serves, the acceptor (`accept`) hands new connections
//! round-robin to `-t` worker threads; each worker runs its own event loop
//! over its own connections and executes requests itself against its
//! [`strata_store::Worker`] handle — no request crosses threads. Beside
//! them: the clock thread, the snapshot and log-writer threads
//! (`--snapshot-dir`, `--durability`) and the metrics responder
//! (`--metrics-listen`). Once the ports are open: the pid file and the
//! switch away from root (`process`). What the threads share is
//! `Shared` (`shared`).
//!
//! The modules are grouped by job: `network` moves bytes (listeners, the
//! acceptor, the two event loops and their scheduler, connections, TLS,
//! UDP), `execution` runs requests, `observability` reports on the server,
//! `lifecycle` holds the process and snapshot machinery.

mod auth;
pub mod config;
mod execution;
mod lifecycle;
mod network;
mod observability;
mod shared;
mod state;
mod wake;

use lifecycle::{process, snapshot};
use network::{accept, epoll, listen, sched, tls, udp, uring};
use observability::{metrics, stats, verbose};

use std::io;
use std::net::{TcpListener, UdpSocket};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::Poll;
use strata_store::Store;

pub use auth::{AuthError, Credentials};
pub use config::{IoBackend, Protocol, ServerConfig};
pub use config::{Loaded, SnapshotConfig};
pub use config::{MinVersion, TlsSettings};
pub use config::{Recorded as RecordedSettings, TuningConfig};
pub use lifecycle::process::{ExtendTimeout, PrivilegeError};
pub use network::tls::TlsError;

pub(crate) use shared::Shared;
pub(crate) use state::{CloseReason, ConnInfo, ConnState, ReplyBudget, Run, RunState};

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

/// Runs the server until SIGTERM, SIGINT or `shutdown`. Returns once every
/// connection is closed and every thread has stopped.
///
/// The server's life, in order: it starts (the ports open, then the pid
/// file and the switch away from root, then the threads), serves (the
/// acceptor, until a stop or the end of a drain), stops (the workers finish
/// what their connections sent, then the threads beside them) and keeps
/// the cache (the durability log's last writes, the snapshot).
pub fn run(cfg: ServerConfig, store: Arc<Store>) -> Result<(), ServerError> {
    let tls = cfg.tls.clone().map(tls::Tls::new).transpose()?;
    let ports = Ports::bind(&cfg)?;
    // Bound: now the pid file, then the switch away from root.
    let _pid_file = pid_file(&cfg);
    process::drop_privileges(cfg.user.as_deref())?;
    let mut acceptor = accept::Acceptor::new(ports.listeners, &cfg)?;
    let wakes = (0..cfg.threads.max(1)).map(|_| sched::Wake::new().map(Arc::new)).collect::<io::Result<Vec<_>>>()?;
    let shared = Arc::new(Shared::new(cfg, store, tls, acceptor.waker(), acceptor.listeners(), &ports.udp));
    hook_store(&shared, &wakes);
    let mut workers = start_workers(&shared, &wakes)?;
    started(&shared, workers.io);
    start_udp(&shared, ports.udp, &mut workers.threads)?;
    let helpers = Helpers::start(&shared, wakes, ports.metrics)?;
    // Listening, workers running: a `Type=notify` unit is started.
    process::notify(&format!("READY=1\nMAINPID={}", std::process::id()));

    acceptor.serve(&shared, &workers.links)?;

    shared.run.stop();
    process::notify("STOPPING=1");
    for (_, wake) in &workers.links {
        wake.wake();
    }
    for h in workers.threads {
        let _ = h.join();
    }
    let savers = helpers.stop(&shared);
    acceptor.close();
    if let Some(path) = &shared.cfg.unix_socket {
        let _ = std::fs::remove_file(path);
    }

    if let Err(why) = keep(&shared, savers) {
        tracing::error!("stopped without keeping the cache: {why}");
        return Err(ServerError::NotKept(why));
    }
    tracing::info!("stopped");
    Ok(())
}

/// The sockets the server serves on, all bound before anything else
/// happens, so that a port in use stops the start at once.
struct Ports {
    listeners: Vec<listen::Listener>,
    udp: Vec<(UdpSocket, String)>,
    metrics: Option<TcpListener>,
}

impl Ports {
    fn bind(cfg: &ServerConfig) -> Result<Ports, ServerError> {
        let listeners = listen::bind(cfg)?;
        let udp = listen::bind_udp(cfg)?;
        let metrics = match &cfg.metrics_listen {
            Some(addr) => Some(
                metrics::bind(addr)
                    .map_err(|source| ServerError::Listen { addr: format!("metrics {addr}"), source })?,
            ),
            None => None,
        };
        Ok(Ports { listeners, udp, metrics })
    }
}

/// `-P`'s file. One that cannot be written is logged and the server goes
/// on, as memcached does: a pid file is for the tools around the server,
/// and a supervisor that restarts on failure would otherwise restart a
/// server that cannot start, over and over (docs/running.md).
fn pid_file(cfg: &ServerConfig) -> Option<process::PidFile> {
    let path = cfg.pid_file.as_ref()?;
    match process::PidFile::create(path) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::error!("could not write the pid file {}: {e}; serving without it", path.display());
            None
        }
    }
}

/// The store's calls into the server: evictions for `watch`, and a writer
/// that finds every segment held by workers' half-filled ones wakes them,
/// so that idle ones seal theirs.
fn hook_store(shared: &Shared, wakes: &[Arc<sched::Wake>]) {
    shared.store.on_evict(shared.watchers.clone());
    let wakes = wakes.to_vec();
    shared.store.on_starved(Box::new(move || wakes.iter().for_each(|w| w.wake())));
}

/// The running workers, as `run` holds them.
struct Workers {
    /// How the acceptor hands each its connections and wakes it.
    links: Vec<accept::WorkerLink>,
    /// Their threads, then the UDP threads.
    threads: Vec<JoinHandle<()>>,
    /// The name of the first one's event loop.
    io: &'static str,
}

/// Builds each worker's event loop (a failure stops the start) and starts
/// its thread.
fn start_workers(shared: &Arc<Shared>, wakes: &[Arc<sched::Wake>]) -> io::Result<Workers> {
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
    Ok(Workers { links: workers, threads: handles, io })
}

/// Starts a thread per UDP socket (`-U`), after the workers' in `threads`.
fn start_udp(
    shared: &Arc<Shared>,
    sockets: Vec<(UdpSocket, String)>,
    threads: &mut Vec<JoinHandle<()>>,
) -> io::Result<()> {
    let first = shared.cfg.threads.max(1);
    for (i, ((sock, name), info)) in sockets.into_iter().zip(shared.udp().iter().cloned()).enumerate() {
        tracing::info!(addr = %name, "listening");
        if verbose::on(shared) {
            verbose::listening(info.fd, None);
        }
        let sh = shared.clone();
        let stats = shared.workers[first + i].clone();
        threads
            .push(std::thread::Builder::new().name(format!("udp-{i}")).spawn(move || udp::run(sh, stats, sock, info))?);
    }
    Ok(())
}

/// The threads beside the workers: the clock, the background reclaimer,
/// the durability log's writer, the metrics responder and the snapshot
/// thread.
struct Helpers {
    clock: JoinHandle<()>,
    reclaimer: Option<JoinHandle<()>>,
    metrics: Option<JoinHandle<()>>,
    savers: Savers,
}

/// The threads that keep the cache, stopped last.
struct Savers {
    wal_writer: Option<JoinHandle<()>>,
    snapshotter: Option<JoinHandle<()>>,
}

impl Helpers {
    fn start(shared: &Arc<Shared>, wakes: Vec<Arc<sched::Wake>>, metrics: Option<TcpListener>) -> io::Result<Helpers> {
        let clock = {
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
        let wal_writer = match shared.snapshots.as_ref().and_then(|s| s.cfg.wal.clone()) {
            Some(wal) => {
                let wakes = wakes.clone();
                // Workers holding replies for durability look again when it moves.
                wal.on_durable(Box::new(move || wakes.iter().for_each(|w| w.wake())));
                Some(std::thread::Builder::new().name("wal".into()).spawn(move || wal.run())?)
            }
            None => None,
        };
        let metrics = match metrics {
            Some(l) => {
                let sh = shared.clone();
                Some(std::thread::Builder::new().name("metrics".into()).spawn(move || metrics::run(sh, l))?)
            }
            None => None,
        };
        let snapshotter = match &shared.snapshots {
            Some(snaps) => {
                let (sh, sn) = (shared.clone(), snaps.clone());
                Some(std::thread::Builder::new().name("snapshot".into()).spawn(move || snapshot::run(sh, sn, wakes))?)
            }
            None => None,
        };
        Ok(Helpers { clock, reclaimer, metrics, savers: Savers { wal_writer, snapshotter } })
    }

    /// Once the workers are gone: stops the reclaimer, the clock and the
    /// metrics responder; the threads that keep the cache go on.
    fn stop(self, shared: &Shared) -> Savers {
        // Before the shutdown snapshot: the reclaimer seals its copy targets.
        if let Some(t) = self.reclaimer {
            shared.store.stop_reclaimer();
            let _ = t.join();
        }
        self.clock.thread().unpark();
        let _ = self.clock.join();
        if let Some(t) = self.metrics {
            let _ = t.join();
        }
        self.savers
    }
}

/// With `--snapshot-dir`: writes the durability log's last writes and the
/// snapshot, once the workers are gone and the port is closed. Why the
/// cache is not kept, if it is not.
fn keep(shared: &Shared, savers: Savers) -> Result<(), String> {
    let mut kept: Result<(), String> = Ok(());
    if let Some(snaps) = &shared.snapshots {
        // A large cache takes longer to save than TimeoutStopSec, after
        // which systemd would kill the save half-way.
        let _more_time = ExtendTimeout::start("saving the snapshot");
        snapshot::stop(snaps);
        if let Some(t) = savers.snapshotter {
            let _ = t.join();
        }
        if let Some(wal) = &snaps.cfg.wal {
            wal.stop();
            if let Some(t) = savers.wal_writer {
                let _ = t.join();
            }
            if let Err(e) = wal.flush() {
                tracing::error!(error = %e, "durability log: the last writes could not be written");
                kept = Err(format!("durability log: {e}"));
            }
        }
        // The workers are gone and sealed everything they wrote: one pass
        // copies the whole cache. The port is already closed.
        if let Err(e) = snaps.save(&shared.store, &mut snapshot::AtShutdown(shared)) {
            kept = Err(format!("snapshot: {e}"));
        }
        snaps.keep_lease(shared.store.epoch());
    }
    kept
}
