//! memcached's wire protocols (classic text, meta, binary) as pure functions
//! over bytes.
//!
//! This crate owns parsing requests out of a connection's read buffer, the
//! exact byte strings of replies, and UDP's frame header ([`udp`]). It does no I/O and knows nothing of storage:
//! the server crate feeds it bytes and executes what it returns.
//!
//! Parsing is check-then-parse (as in mini-redis): a request that is not fully
//! buffered yields [`text::Parse::Incomplete`], which is a normal state, not an
//! error. Keys and values are borrowed from the caller's buffer, never copied.

pub mod binary;
pub mod numbers;
pub mod ops;
pub mod peek;
pub mod reply;
pub mod stats;
pub mod text;
pub mod udp;
pub mod view;

pub use text::meta;
pub use view::ItemView;

/// memcached's longest key, in bytes (`KEY_MAX_LENGTH`).
pub const KEY_MAX_LENGTH: usize = 250;
