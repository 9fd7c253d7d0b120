//! Running requests: the executors that turn parsed requests (text, meta,
//! binary) into store operations through the semantic core, and outcomes
//! into reply bytes; the admin and tuning commands; authentication. No
//! socket I/O: nothing here imports `network` or `lifecycle`
//! (`tests/tool/test_layers.py`).

pub(crate) mod admin;
pub(crate) mod binary;
pub(crate) mod changes;
pub(crate) mod core;
pub(crate) mod ctx;
pub(crate) mod dispatch;
pub(crate) mod meta;
