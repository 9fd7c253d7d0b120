//! The two ways a connection is encrypted for
//! [`crate::network::conn::Conn`]: [`TlsIo`], a transport over the socket
//! (epoll loop), and [`RingTls`], where the io_uring loop moves the
//! ciphertext. The server configuration they start from is `tls.rs`'s.
//!
//! The connection state machine never sees ciphertext: records go into
//! rustls and plaintext comes out, and what the connection writes is
//! encrypted. rustls holds at most
//! [`crate::network::tls::TLS_BUFFER`] of unsent records per connection; past that, `write`
//! takes nothing (`WouldBlock`), so the connection's own reply limit and
//! the server-wide reply budget hold back a slow TLS reader exactly as a
//! slow plain one.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rustls::ServerConnection;

use crate::network::listen::Stream;

use crate::network::transport::Transport;

/// A TLS connection's transport on the epoll loop: the socket below,
/// rustls' state above.
///
/// `read` hands out plaintext until `buf` is full or the socket has
/// nothing more (`WouldBlock` from it), never less with bytes still in the
/// socket: the connection takes a short read to mean the socket is empty,
/// and epoll would not report those bytes again.
pub(crate) struct TlsIo<'a> {
    pub sock: &'a mut Stream,
    pub tls: &'a mut ServerConnection,
    /// Counts handshakes that fail (`ssl_handshake_errors`).
    pub errors: &'a AtomicU64,
}

impl TlsIo<'_> {
    /// Sends what rustls has ready (handshake messages, records, alerts)
    /// until the socket takes no more.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Before the connection closes: says so to the peer, if the socket
    /// takes it now.
    pub fn close(&mut self) {
        self.tls.send_close_notify();
        let _ = self.flush();
    }
}

impl Transport for TlsIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        loop {
            match self.tls.reader().read(&mut buf[n..]) {
                // The peer's close_notify: the end of input.
                Ok(0) => return Ok(n),
                Ok(k) => {
                    n += k;
                    if n == buf.len() {
                        return Ok(n);
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket closed without close_notify: an end of input
                // all the same (a client may not bother).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(n),
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
            self.flush()?;
            match self.tls.read_tls(self.sock) {
                Ok(0) => return Ok(n),
                Ok(_) => {
                    if let Err(e) = self.tls.process_new_packets() {
                        if self.tls.is_handshaking() {
                            self.errors.fetch_add(1, Relaxed);
                        }
                        tracing::debug!(error = %e, "TLS error: closing the connection");
                        // The alert rustls queued, if the socket takes it.
                        let _ = self.flush();
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if n > 0 { Ok(n) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush()?;
        let n = self.tls.writer().write(buf)?;
        self.flush()?;
        if n == 0 && !buf.is_empty() {
            // rustls holds TLS_BUFFER of records the socket has not taken.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}

/// A TLS connection's state on the io_uring loop, where the ring moves
/// the ciphertext: receives are fed in ([`RingTls::received`]), and
/// records leave from `out`, which stays put while a send of it is in
/// flight.
pub(crate) struct RingTls {
    pub tls: Box<ServerConnection>,
    out: Vec<u8>,
    /// Bytes of `out` already sent.
    sent: usize,
}

/// The plaintext rustls has decrypted, as a connection's input.
struct Plain<'a>(&'a mut ServerConnection);

impl Transport for Plain<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.reader().read(buf) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
            r => r,
        }
    }

    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

impl RingTls {
    pub fn new(tls: Box<ServerConnection>) -> RingTls {
        RingTls { tls, out: Vec::new(), sent: 0 }
    }

    /// Feeds received ciphertext to rustls and the plaintext it yields to
    /// `conn`. An error (a bad record, a failed handshake) means close.
    pub fn received(
        &mut self,
        mut bytes: &[u8],
        conn: &mut crate::network::conn::Conn,
        errors: &AtomicU64,
    ) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.tls.read_tls(&mut bytes)? == 0 {
                break;
            }
            if let Err(e) = self.tls.process_new_packets() {
                if self.tls.is_handshaking() {
                    errors.fetch_add(1, Relaxed);
                }
                tracing::debug!(error = %e, "TLS error: closing the connection");
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            conn.receive(&mut Plain(&mut self.tls));
        }
        Ok(())
    }

    /// The peer closed its side: what rustls still holds goes to `conn`
    /// (the end of input follows).
    pub fn drain(&mut self, conn: &mut crate::network::conn::Conn) {
        conn.receive(&mut Plain(&mut self.tls));
    }

    /// Encrypts what `conn` has queued, as far as rustls takes it, and
    /// returns the records to send next (`None`: nothing to send, or a
    /// send of them is still in flight, `in_flight`).
    pub fn outgoing(&mut self, conn: &mut crate::network::conn::Conn, in_flight: bool) -> Option<&[u8]> {
        while let Some(plain) = conn.next_send() {
            let n = self.tls.writer().write(plain).unwrap_or(0);
            if n == 0 {
                break;
            }
            conn.sent(n);
        }
        if in_flight {
            return None;
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            while self.tls.wants_write() {
                if self.tls.write_tls(&mut self.out).is_err() {
                    break;
                }
            }
        }
        (self.sent < self.out.len()).then(|| &self.out[self.sent..])
    }

    /// A send took `n` bytes of what [`RingTls::outgoing`] returned.
    pub fn sent(&mut self, n: usize) {
        self.sent = (self.sent + n).min(self.out.len());
    }
}
