//! `--metrics-listen ADDR:PORT`: `GET /metrics` in Prometheus' text format,
//! every numeric stat of `stats` and `stats settings` with its help and
//! type (`strata_protocol::stats::prometheus`), and request latency
//! histograms by command family (`latency.rs`). A small blocking HTTP/1.x
//! responder on its own thread: one request per connection, at most 8 KiB
//! of request head, two seconds to send it, then the connection closes.
//! Anything but `GET /metrics` is a 404 (a `HEAD`, a 405).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use crate::Shared;

/// The most a request head may take before it is refused.
const MAX_HEAD: usize = 8 << 10;

/// Binds the metrics address (before the server starts, so a bad one
/// stops it at start-up).
pub(crate) fn bind(addr: &str) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serves scrapes until the server stops.
pub(crate) fn run(shared: Arc<Shared>, listener: TcpListener) {
    while !shared.shutdown.load(Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = serve(&shared, stream) {
                    tracing::debug!(error = %e, "metrics request failed");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn serve(shared: &Shared, mut s: TcpStream) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return respond(&mut s, "431 Request Header Fields Too Large", b"");
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    match (method, path) {
        (b"GET", b"/metrics") => {
            let snaps = crate::stats::for_metrics(shared);
            let mut body = Vec::with_capacity(16 << 10);
            strata_protocol::stats::prometheus(&mut body, &snaps.iter().collect::<Vec<_>>(), "memcached_");
            let workers: Vec<_> = shared.workers.iter().map(|w| &w.latency).collect();
            crate::latency::prometheus(&mut body, &workers);
            respond(&mut s, "200 OK", &body)
        }
        (b"GET", _) => respond(&mut s, "404 Not Found", b"only /metrics is served here\n"),
        _ => respond(&mut s, "405 Method Not Allowed", b""),
    }
}

fn respond(s: &mut TcpStream, status: &str, body: &[u8]) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    s.flush()
}
