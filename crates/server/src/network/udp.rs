//! memcached's UDP transport (`-U PORT`; off by default, as in memcached
//! since 1.5.6): a thread per socket, each datagram served as a
//! connection's input.
//!
//! The frame header and how a reply is cut into datagrams (and bounded,
//! against amplification) are wire syntax: `strata_protocol::udp`. A
//! request's payload runs as a connection's would (the same [`Conn`] state
//! machine, fed the payload and then the end of input), and its replies go
//! back through [`udp::frames`].

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;
use strata_protocol::udp::{self, Frame, HEADER, MAX_REPLY};
use strata_store::Reading;

use crate::execution::dispatch::Ctx;
use crate::network::conn::{Conn, Effects, Status};
use crate::network::transport::Transport;
use crate::observability::counters::WorkerStats;
use crate::{ConnInfo, Shared};

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
        if self.output.len() > MAX_REPLY {
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
        if t.output.len() > MAX_REPLY {
            break;
        }
    }
    // With `--durability always|interval` the replies to changes wait until the log
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
        crate::network::sched::seal_if_asked(&shared, &stats, &mut store);
        let (n, peer): (usize, SocketAddr) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "UDP receive failed");
                continue;
            }
        };
        let Some(frame) = Frame::request(&buf[..n]) else { continue };
        let mut ctx = Ctx {
            shared: &shared,
            store: &mut store,
            stats: &stats,
            fd: info.fd,
            reading: Reading::Now,
            replies_queued: false,
        };
        let reply =
            crate::network::sched::contain(&stats, || serve(&buf[HEADER..n], &info, &mut ctx)).unwrap_or_default();
        udp::frames(frame.id, &reply, |d| {
            // A full socket buffer or an unreachable peer loses the reply,
            // as UDP may.
            let _ = sock.send_to(d, peer);
        });
    }
}
