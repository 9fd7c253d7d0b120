//! memcached's UDP protocol (`-U PORT`; off by default, as in memcached
//! since 1.5.6).
//!
//! Every datagram starts with an 8-byte frame header, big-endian:
//!
//! ```text
//! 0      2        4         6          8
//! +------+--------+---------+----------+------------------------+
//! | id   | seq    | total   | reserved | requests (text, meta,  |
//! |      |        |         |          | binary), complete      |
//! +------+--------+---------+----------+------------------------+
//! ```
//!
//! A request must fit one datagram (`total` 1, as memcached requires;
//! others are dropped). Its requests run as a connection's would (the same
//! [`Conn`] state machine, fed the payload and then the end of input), and
//! the replies go back in datagrams of at most [`DATAGRAM`] bytes, each
//! with the request's id, its sequence number and the count.
//!
//! UDP lets a spoofed source address aim the replies at someone else
//! (memcached's 2018 amplification attacks). Beyond keeping it off by
//! default, strata bounds a reply at [`MAX_DATAGRAMS`] datagrams: a larger
//! one is replaced by one `SERVER_ERROR` line (memcached has no bound).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;
use strata_protocol::reply::text as r;

use crate::conn::{Conn, Effects, Status};
use crate::dispatch::Ctx;
use crate::stats::WorkerStats;
use crate::transport::Transport;
use crate::{ConnInfo, Shared};
use strata_store::Reading;

/// The frame header's bytes.
pub(crate) const HEADER: usize = 8;

/// Largest datagram sent, header included (memcached's
/// `UDP_MAX_PAYLOAD_SIZE`).
pub(crate) const DATAGRAM: usize = 1400;

/// Most datagrams one request may be answered with (about 87 KiB).
pub(crate) const MAX_DATAGRAMS: usize = 64;

/// Sent instead of a reply over [`MAX_DATAGRAMS`].
pub(crate) const TOO_LARGE: &[u8] = r::UDP_TOO_LARGE;

/// The frame header of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    pub id: u16,
    pub seq: u16,
    pub total: u16,
}

impl Frame {
    /// The header of a request datagram, if it is one strata serves.
    pub fn parse(datagram: &[u8]) -> Option<Frame> {
        let h = datagram.get(..HEADER)?;
        let f = Frame {
            id: u16::from_be_bytes([h[0], h[1]]),
            seq: u16::from_be_bytes([h[2], h[3]]),
            total: u16::from_be_bytes([h[4], h[5]]),
        };
        // memcached serves single-datagram requests only (whatever the
        // sequence number and the reserved bytes say).
        (f.total == 1).then_some(f)
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.total.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
    }
}

/// Splits `reply` into the datagrams that carry it for request `id`,
/// handing each to `send`.
pub(crate) fn frames(id: u16, reply: &[u8], mut send: impl FnMut(&[u8])) {
    let body = if reply.len() > MAX_DATAGRAMS * (DATAGRAM - HEADER) { TOO_LARGE } else { reply };
    let chunks: Vec<&[u8]> = body.chunks(DATAGRAM - HEADER).collect();
    let total = u16::try_from(chunks.len()).unwrap_or(u16::MAX);
    let mut dgram = Vec::with_capacity(DATAGRAM);
    for (seq, chunk) in chunks.into_iter().enumerate() {
        dgram.clear();
        Frame { id, seq: u16::try_from(seq).unwrap_or(u16::MAX), total }.write(&mut dgram);
        dgram.extend_from_slice(chunk);
        send(&dgram);
    }
}

/// A request datagram's payload as a connection's input (then its end),
/// and the replies it writes.
struct Datagram<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl Transport for Datagram<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.input.len().min(buf.len());
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Ok(n)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Past the bound the reply is dropped anyway: stop taking it, and
        // the connection stops running what would only add to it.
        if self.output.len() > MAX_DATAGRAMS * (DATAGRAM - HEADER) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn available(&self) -> usize {
        self.input.len()
    }
}

/// Runs the requests of one datagram's payload; returns their replies.
pub(crate) fn serve(payload: &[u8], info: &Arc<ConnInfo>, ctx: &mut Ctx<'_>) -> Vec<u8> {
    let mut conn = Conn::new(info.clone());
    let mut t = Datagram { input: payload, output: Vec::new() };
    // A multi-get larger than the reply limit is served a part per pass;
    // the bound on what a datagram may be answered with ends it.
    while let Status::Open(Effects { more: true, .. }) = conn.service(&mut t, ctx) {
        if t.output.len() > MAX_DATAGRAMS * (DATAGRAM - HEADER) {
            break;
        }
    }
    // With `--durability always` the replies to changes wait until the log
    // has them on disk, as on TCP; a datagram's wait is bounded (its
    // replies are lost otherwise, as UDP may lose them anyway).
    if let Some(wal) = &ctx.shared.durable_acks {
        let deadline = std::time::Instant::now() + DURABLE_WAIT;
        while conn.held_for_durability() && std::time::Instant::now() < deadline {
            if conn.release_durable(wal) {
                let _ = conn.service(&mut t, ctx);
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    conn.report_traffic(ctx);
    t.output
}

/// The longest a datagram's replies wait for the durability log.
const DURABLE_WAIT: Duration = Duration::from_secs(2);

/// Serves `sock` until the server stops: one thread, reading request
/// datagrams and answering each to its sender. `info` is the socket's
/// entry in `stats conns`.
pub(crate) fn run(shared: Arc<Shared>, stats: Arc<WorkerStats>, sock: UdpSocket, info: Arc<ConnInfo>) {
    // The stop flag is looked at between datagrams.
    if let Err(e) = sock.set_read_timeout(Some(Duration::from_millis(200))) {
        tracing::error!(error = %e, "UDP socket unusable");
        return;
    }
    let mut store = shared.store.worker();
    let mut buf = vec![0u8; 64 << 10];
    while !shared.run.stopping() {
        // A snapshot waits for every worker to seal its segments, this
        // thread's too (between datagrams, at least every 200 ms).
        crate::snapshot::seal_if_asked(&shared, &stats, &mut store);
        let (n, peer): (usize, SocketAddr) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "UDP receive failed");
                continue;
            }
        };
        let Some(frame) = Frame::parse(&buf[..n]) else { continue };
        let mut ctx = Ctx { shared: &shared, store: &mut store, stats: &stats, fd: info.fd, reading: Reading::Now };
        let reply = crate::sched::contain(&stats, || serve(&buf[HEADER..n], &info, &mut ctx)).unwrap_or_default();
        frames(frame.id, &reply, |d| {
            // A full socket buffer or an unreachable peer loses the reply,
            // as UDP may.
            let _ = sock.send_to(d, peer);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_headers_and_single_datagram_requests() {
        assert_eq!(Frame::parse(&[0, 7, 0, 3, 0, 1, 0, 9, b'x']), Some(Frame { id: 7, seq: 3, total: 1 }));
        assert_eq!(Frame::parse(&[0, 7, 0, 0, 0, 2, 0, 0]), None, "a request in two datagrams");
        assert_eq!(Frame::parse(&[0, 7, 0, 0, 0, 1, 0]), None, "short header");
    }

    #[test]
    fn replies_split_into_numbered_datagrams() {
        let reply = vec![b'v'; 3000];
        let mut got = Vec::new();
        frames(0x1234, &reply, |d| got.push(d.to_vec()));
        assert_eq!(got.len(), 3);
        for (i, d) in got.iter().enumerate() {
            assert!(d.len() <= DATAGRAM);
            assert_eq!(
                Frame::parse(&[&d[..4], &[0, 1, 0, 0]].concat()).map(|f| (f.id, f.seq)),
                Some((0x1234, i as u16))
            );
            assert_eq!(&d[4..8], &[0, 3, 0, 0]);
        }
        assert_eq!(got.iter().map(|d| d.len() - HEADER).sum::<usize>(), 3000);
    }

    #[test]
    fn a_reply_over_the_bound_becomes_one_error() {
        let reply = vec![b'v'; MAX_DATAGRAMS * (DATAGRAM - HEADER) + 1];
        let mut got = Vec::new();
        frames(1, &reply, |d| got.push(d.to_vec()));
        assert_eq!(got, vec![[&[0, 1, 0, 0, 0, 1, 0, 0][..], TOO_LARGE].concat()]);
    }
}
