//! Running requests: the executors that turn parsed requests (text, meta,
//! binary) into store operations through the semantic core, and outcomes
//! into replies; reply ordering; the admin and tuning commands;
//! authentication. No socket I/O.

pub(crate) mod admin;
pub(crate) mod auth;
pub(crate) mod binary;
pub(crate) mod changes;
pub(crate) mod core;
pub(crate) mod dispatch;
pub(crate) mod meta;
pub(crate) mod replies;
