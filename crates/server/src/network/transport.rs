//! How a connection's bytes reach its peer. [`crate::network::conn::Conn`] does no
//! socket I/O of its own: the event loops hand it a [`Transport`] to read
//! requests from and write replies to.
//!
//! - epoll: the connection's socket ([`Stream`], TCP or unix) is the
//!   transport; `read` and `write` are the system calls.
//! - io_uring: the ring does the socket I/O; what a receive brought is
//!   handed in as [`Received`], and replies leave from the connection's
//!   send buffer (`Conn::next_send`), or through the socket's own `write`
//!   when a turn sends at once.
//! - TLS (`tls.rs`, rustls): on the epoll loop `TlsIo` wraps the socket,
//!   reading ciphertext from it and giving plaintext to `read`, and
//!   encrypting what `write` is given; on the io_uring loop `RingTls` feeds
//!   the ring's receives to rustls and hands the connection plaintext, and
//!   the ring sends rustls' records. The connection never sees ciphertext,
//!   so back-pressure and buffer limits apply to the plaintext it handles
//!   (TLS adds its own bounded record buffers).
//! - Unit tests drive a connection through a fake transport that injects
//!   short writes, `EAGAIN`, resets and half-closes (`conn/`).

use std::io::{self, Read, Write};

use crate::network::listen::Stream;

/// A byte stream to and from a client.
pub(crate) trait Transport {
    /// Reads into `buf`: `Ok(0)` is the end of input (the peer shut its
    /// side down), `WouldBlock` means nothing is there now.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;

    /// Writes from `buf`, returning how much was taken (possibly less than
    /// all of it); `WouldBlock` means nothing can be taken now.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;

    /// Bytes a read would hand over now, when known without reading (0:
    /// unknown), so the reader can make room for them all at once.
    fn available(&self) -> usize {
        0
    }

    /// Known to hold nothing to read now (not the end of input either):
    /// a reader stops without making room for a read that would find
    /// nothing.
    fn exhausted(&self) -> bool {
        false
    }
}

impl Transport for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Read::read(self, buf)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Write::write(self, buf)
    }
}

/// What one io_uring receive brought for a connection: bytes, or the end
/// of input. Reads hand them over once; after that, `WouldBlock`. Writing
/// is not its business (the ring sends), so it never takes anything.
pub(crate) enum Received<'a> {
    Bytes(&'a [u8]),
    End,
}

impl Transport for Received<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Received::End => Ok(0),
            Received::Bytes([]) => Err(io::ErrorKind::WouldBlock.into()),
            Received::Bytes(b) => {
                let n = b.len().min(buf.len());
                buf[..n].copy_from_slice(&b[..n]);
                *b = &b[n..];
                Ok(n)
            }
        }
    }

    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn available(&self) -> usize {
        match self {
            Received::Bytes(b) => b.len(),
            Received::End => 0,
        }
    }

    fn exhausted(&self) -> bool {
        matches!(self, Received::Bytes([]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_bytes_are_read_once_then_would_block() {
        let mut r = Received::Bytes(b"hello");
        let mut buf = [0u8; 3];
        assert_eq!(r.read(&mut buf).ok(), Some(3));
        assert_eq!(&buf, b"hel");
        assert_eq!(r.read(&mut buf).ok(), Some(2));
        assert_eq!(r.read(&mut buf).map_err(|e| e.kind()), Err(io::ErrorKind::WouldBlock));
        assert_eq!(Received::End.read(&mut buf).ok(), Some(0), "end of input");
        assert!(Received::End.write(b"x").is_err(), "the ring sends, not this");
    }
}
