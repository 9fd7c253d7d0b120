//! [`Shared`]: the state every thread of the server shares, and the one way
//! to build it. What the configuration gives (counters, budgets, `stats
//! detail`, the tuning settings, snapshots and the durability log) it
//! fills in itself; the caller brings what only start-up has: the store,
//! the TLS configuration, the acceptor's waker and the sockets.

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Waker;
use parking_lot::Mutex;
use strata_store::Store;

use crate::execution::admin;
use crate::lifecycle::snapshots;
use crate::network::{listen, tls};
use crate::observability::{counters, detail, watch};
use crate::{ConnInfo, ReplyBudget, RunState, ServerConfig};

/// State every thread shares. Nothing changes a field after
/// [`Shared::new`] (the counters and locks change inside). The fields read
/// across the crate are public; the few only `stats` reads are private
/// behind accessors, which also means no other module (or test) can build
/// one by hand.
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
    started: Instant,
    /// The workers', then each UDP thread's.
    pub workers: Vec<Arc<counters::WorkerStats>>,
    pub conns: Mutex<BTreeMap<u64, Arc<ConnInfo>>>,
    listeners: Vec<(i32, String)>,
    udp: Vec<Arc<ConnInfo>>,
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
    pub snapshots: Option<Arc<snapshots::Snapshots>>,
    /// With `--durability always|interval`: the log whose position a
    /// change's reply waits for ([`strata_persist::Wal::acked`]: synced
    /// under `always`, written under `interval`).
    pub durable_acks: Option<Arc<strata_persist::Wal>>,
    /// What memcached's tuning commands set (`admin.rs`).
    pub tuning: Arc<admin::Tuning>,
}

impl Shared {
    /// The shared state of a server on `listeners` and the UDP sockets
    /// `udp` (each with its name), whose acceptor `acceptor` wakes. Work
    /// statistics are kept for `-t` workers and a thread per UDP socket.
    pub fn new(
        cfg: ServerConfig,
        store: Arc<Store>,
        tls: Option<tls::Tls>,
        acceptor: Arc<Waker>,
        listeners: &[listen::Listener],
        udp: &[(UdpSocket, String)],
    ) -> Shared {
        let replies = Arc::new(ReplyBudget::new(cfg.reply_budget));
        let udp: Vec<_> = udp
            .iter()
            .map(|(sock, name)| {
                let now = store.clock().now();
                Arc::new(ConnInfo::new(sock.as_raw_fd(), name.clone(), name.clone(), now, replies.clone()))
            })
            .collect();
        let workers = (0..cfg.threads.max(1) + udp.len()).map(|_| Arc::default()).collect();
        let snapshots = cfg.snapshot.clone().map(|c| Arc::new(snapshots::Snapshots::new(c)));
        if cfg.tuning.track_sizes {
            store.track_sizes(true);
        }
        Shared {
            verbosity: AtomicU32::new(cfg.verbosity),
            replies,
            udp,
            detail: detail::Detail::new(cfg.prefix_delimiter, cfg.detail_enabled),
            watchers: Arc::new(watch::Watchers::with_buffer(cfg.tuning.watcher_buf)),
            tls,
            listeners: listeners.iter().map(|l| (l.fd(), l.name())).collect(),
            tuning: Arc::new(admin::Tuning::new(&cfg.tuning)),
            cfg,
            store,
            run: RunState::default(),
            curr_conns: AtomicUsize::new(0),
            total_conns: AtomicU64::new(0),
            rejected_conns: AtomicU64::new(0),
            started: Instant::now(),
            workers,
            conns: Mutex::new(BTreeMap::new()),
            acceptor,
            seal_gen: AtomicU64::new(0),
            durable_acks: snapshots.as_ref().and_then(|s| s.cfg.wal.clone()),
            snapshots,
        }
    }

    /// How long the server has run.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// The listening sockets at start, each as its descriptor and name.
    pub fn listeners(&self) -> &[(i32, String)] {
        &self.listeners
    }

    /// The UDP sockets (`-U`), each an entry in `stats conns` as in
    /// memcached.
    pub fn udp(&self) -> &[Arc<ConnInfo>] {
        &self.udp
    }
}
