//! The stages [`crate::run`] goes through, in its order: the ports bound
//! (all before anything else), the pid file, the store's calls into the
//! server hooked, the workers' event loops built and their threads
//! started, the UDP threads, the threads beside them (clock, reclaimer,
//! durability log, metrics, snapshots) started and stopped, and the cache
//! kept at the end.

use std::io;
use std::net::{TcpListener, UdpSocket};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::Poll;

use crate::lifecycle::{process, snapshot};
use crate::network::{accept, epoll, listen, sched, udp, uring};
use crate::observability::{metrics, stats, verbose};
use crate::{ExtendTimeout, IoBackend, ServerConfig, ServerError, Shared};

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
pub(crate) fn started(shared: &Shared, io: &str) {
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

/// The sockets the server serves on, all bound before anything else
/// happens, so that a port in use stops the start at once.
pub(crate) struct Ports {
    pub(crate) listeners: Vec<listen::Listener>,
    pub(crate) udp: Vec<(UdpSocket, String)>,
    pub(crate) metrics: Option<TcpListener>,
}

impl Ports {
    pub(crate) fn bind(cfg: &ServerConfig) -> Result<Ports, ServerError> {
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
pub(crate) fn pid_file(cfg: &ServerConfig) -> Option<process::PidFile> {
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
pub(crate) fn hook_store(shared: &Shared, wakes: &[Arc<sched::Wake>]) {
    shared.store.on_evict(shared.watchers.clone());
    let wakes = wakes.to_vec();
    shared.store.on_starved(Box::new(move || wakes.iter().for_each(|w| w.wake())));
}

/// The running workers, as `run` holds them.
pub(crate) struct Workers {
    /// How the acceptor hands each its connections and wakes it.
    pub(crate) links: Vec<accept::WorkerLink>,
    /// Their threads, then the UDP threads.
    pub(crate) threads: Vec<JoinHandle<()>>,
    /// The name of the first one's event loop.
    pub(crate) io: &'static str,
}

/// Builds each worker's event loop (a failure stops the start) and starts
/// its thread.
pub(crate) fn start_workers(shared: &Arc<Shared>, wakes: &[Arc<sched::Wake>]) -> io::Result<Workers> {
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
pub(crate) fn start_udp(
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
pub(crate) struct Helpers {
    clock: JoinHandle<()>,
    reclaimer: Option<JoinHandle<()>>,
    metrics: Option<JoinHandle<()>>,
    savers: Savers,
}

/// The threads that keep the cache, stopped last.
pub(crate) struct Savers {
    wal_writer: Option<JoinHandle<()>>,
    snapshotter: Option<JoinHandle<()>>,
}

impl Helpers {
    pub(crate) fn start(
        shared: &Arc<Shared>,
        wakes: Vec<Arc<sched::Wake>>,
        metrics: Option<TcpListener>,
    ) -> io::Result<Helpers> {
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
    pub(crate) fn stop(self, shared: &Shared) -> Savers {
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
pub(crate) fn keep(shared: &Shared, savers: Savers) -> Result<(), String> {
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
