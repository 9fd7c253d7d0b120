//! The small types the server's layers share about connections and the
//! server's run: a connection's `stats conns` entry ([`ConnInfo`]) and why it
//! closed ([`CloseReason`]), the reply-memory budget ([`ReplyBudget`]),
//! memcached's connection state names ([`ConnState`]), and whether the
//! server runs or stops ([`Run`], [`RunState`]).

use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::Arc;

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
    /// A budget of `limit` bytes (0: no limit), nothing charged.
    pub fn new(limit: usize) -> ReplyBudget {
        ReplyBudget { limit, ..ReplyBudget::default() }
    }

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
