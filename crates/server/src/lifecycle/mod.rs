//! The server's life beside serving: the pid file, the switch away from
//! root and the service manager's notifications (`process`); snapshots'
//! shared state (`snapshots`) and their thread (`snapshot`); the stages
//! `run` (lib.rs) goes through to start, stop and keep the cache
//! (`stages`). Draining is the acceptor's (`network::accept`).

pub(crate) mod process;
pub(crate) mod snapshot;
pub(crate) mod snapshots;
pub(crate) mod stages;
