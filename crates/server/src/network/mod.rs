//! The network side of a worker: listening and accepting, the two event
//! loops (epoll, io_uring) and the one scheduler they share, connections
//! and their buffers, replies in request order, TLS and UDP transports.
//! Moves bytes; what a request means is `execution`'s.

pub(crate) mod accept;
pub(crate) mod bufpool;
pub(crate) mod bufring;
pub(crate) mod conn;
pub(crate) mod epoll;
pub(crate) mod listen;
pub(crate) mod replies;
pub(crate) mod sched;
pub(crate) mod tls;
pub(crate) mod tls_io;
pub(crate) mod transport;
pub(crate) mod udp;
pub(crate) mod uring;
