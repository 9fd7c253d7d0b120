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

use lifecycle::process;
use lifecycle::stages::{hook_store, keep, pid_file, start_udp, start_workers, started, Helpers, Ports};
use network::{accept, sched, tls};

use std::io;
use std::sync::Arc;
use std::time::Duration;

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
