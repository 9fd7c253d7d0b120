//! The server's life beside serving: the pid file, the switch away from
//! root and the service manager's notifications (`process`); snapshots'
//! shared state (`snapshots`) and their thread (`snapshot`). Start, drain and stop themselves are `run` in
//! lib.rs and the acceptor (`network::accept`).

pub(crate) mod process;
pub(crate) mod snapshot;
pub(crate) mod snapshots;
