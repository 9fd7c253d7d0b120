//! Opening listening sockets (TCP via socket2 for backlog and SO_REUSEADDR,
//! unix sockets with memcached's `-a` permissions) and the stream type
//! connections are served over.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};
use socket2::{Domain, Socket, Type};

use crate::{ServerConfig, ServerError};

pub(crate) enum Listener {
    /// With whether its connections speak TLS (`-Z`, unless `notls:`).
    Tcp(TcpListener, String, bool),
    Unix(UnixListener, String),
}

impl Listener {
    pub fn name(&self) -> String {
        match self {
            Listener::Tcp(_, n, _) | Listener::Unix(_, n) => n.clone(),
        }
    }

    pub fn fd(&self) -> i32 {
        match self {
            Listener::Tcp(l, _, _) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
        }
    }

    /// Its connections speak TLS.
    pub fn tls(&self) -> bool {
        matches!(self, Listener::Tcp(_, _, true))
    }

    pub fn accept(&mut self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l, _, _) => {
                let (s, _) = l.accept()?;
                // Replies are flushed once per batch, so Nagle only adds delay.
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l, _) => Ok(Stream::Unix(l.accept()?.0)),
        }
    }
}

impl Source for Listener {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l, _, _) => l.register(r, t, i),
            Listener::Unix(l, _) => l.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l, _, _) => l.reregister(r, t, i),
            Listener::Unix(l, _) => l.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Listener::Tcp(l, _, _) => l.deregister(r),
            Listener::Unix(l, _) => l.deregister(r),
        }
    }
}

/// Resolves one `-l` entry: `host`, `host:port` or `[v6]:port`.
fn resolve(entry: &str, port: u16) -> Result<Vec<SocketAddr>, ServerError> {
    let bad = || ServerError::BadAddress(entry.to_string());
    let with_port = if entry.starts_with('[') {
        if entry.contains("]:") {
            entry.to_string()
        } else {
            format!("{entry}:{port}")
        }
    } else if entry.matches(':').count() == 1 {
        entry.to_string()
    } else if entry.contains(':') {
        format!("[{entry}]:{port}")
    } else {
        format!("{entry}:{port}")
    };
    let addrs: Vec<_> = with_port.to_socket_addrs().map_err(|_| bad())?.collect();
    if addrs.is_empty() {
        return Err(bad());
    }
    Ok(addrs)
}

pub(crate) fn bind(cfg: &ServerConfig) -> Result<Vec<Listener>, ServerError> {
    if let Some(path) = &cfg.unix_socket {
        let name = format!("unix:{}", path.display());
        let err = |source| ServerError::Listen { addr: name.clone(), source };
        // A stale socket file from a previous run would make bind fail.
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(path);
        }
        // Bound, given its mask, and only then listening: a client cannot
        // connect while the file still has the umask's mode (memcached
        // sets the umask around its bind; that is process-wide). `-b`
        // applies as to TCP.
        let sock = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(err)?;
        sock.bind(&socket2::SockAddr::unix(path).map_err(err)?).map_err(err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(cfg.unix_mask)).map_err(err)?;
        sock.listen(cfg.backlog).map_err(err)?;
        sock.set_nonblocking(true).map_err(err)?;
        let l: std::os::unix::net::UnixListener = std::os::fd::OwnedFd::from(sock).into();
        return Ok(vec![Listener::Unix(UnixListener::from_std(l), name)]);
    }
    let mut out = Vec::new();
    for (entry, tls) in entries(cfg) {
        for addr in resolve(entry, cfg.port)? {
            let name = format!("tcp:{addr}");
            let err = |source| ServerError::Listen { addr: name.clone(), source };
            let sock = bound(addr, Type::STREAM).map_err(err)?;
            sock.listen(cfg.backlog).map_err(err)?;
            sock.set_nonblocking(true).map_err(err)?;
            let std: std::net::TcpListener = sock.into();
            let name = format!("tcp:{}", std.local_addr().map_err(err)?);
            out.push(Listener::Tcp(TcpListener::from_std(std), name, tls));
        }
    }
    if out.is_empty() {
        return Err(ServerError::BadAddress(cfg.listen.join(",")));
    }
    Ok(out)
}

/// The UDP sockets of `-U`: one on each `-l` address, at the UDP port
/// (none with `-s`, as memcached).
pub(crate) fn bind_udp(cfg: &ServerConfig) -> Result<Vec<(std::net::UdpSocket, String)>, ServerError> {
    if cfg.udp_port == 0 || cfg.unix_socket.is_some() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (entry, _) in entries(cfg) {
        for mut addr in resolve(entry, cfg.udp_port)? {
            addr.set_port(cfg.udp_port);
            let name = format!("udp:{addr}");
            let err = |source| ServerError::Listen { addr: name.clone(), source };
            let std: std::net::UdpSocket = bound(addr, Type::DGRAM).map_err(err)?.into();
            let name = format!("udp:{}", std.local_addr().map_err(err)?);
            out.push((std, name));
        }
    }
    Ok(out)
}

/// The `-l` entries, each with whether its TCP listener speaks TLS: with
/// `-Z`, all but those given with memcached's `notls:` prefix.
fn entries(cfg: &ServerConfig) -> impl Iterator<Item = (&str, bool)> {
    let tls = cfg.tls.is_some();
    cfg.listen.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|e| !e.is_empty()).map(move |e| {
        match e.strip_prefix("notls:") {
            Some(rest) => (rest, false),
            None => (e, tls),
        }
    })
}

/// A socket of type `ty` bound to `addr`, with address reuse (and only
/// IPv6 on an IPv6 address, so `::` and `0.0.0.0` can both be given).
fn bound(addr: SocketAddr, ty: Type) -> io::Result<Socket> {
    let sock = Socket::new(Domain::for_address(addr), ty, None)?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into())?;
    Ok(sock)
}

/// A client connection's byte stream.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn fd(&self) -> i32 {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    pub fn peer_name(&self) -> String {
        match self {
            Stream::Tcp(s) => s.peer_addr().map(|a| format!("tcp:{a}")).unwrap_or_else(|_| "tcp:?".into()),
            Stream::Unix(_) => "unix:".into(),
        }
    }

    /// Whether bytes the peer sent wait in the socket, not yet read: a
    /// graceful stop does not close such a connection as idle (the client
    /// sent part of a request before the stop; it gets to finish it). An
    /// error counts as nothing waiting.
    pub fn unread(&self) -> bool {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int, to `n`, for a descriptor this
        // stream owns and keeps open for the call.
        let rc = unsafe { libc::ioctl(self.fd(), libc::FIONREAD, &mut n) };
        rc == 0 && n > 0
    }

    /// Best-effort error line to a connection we will not serve, then close.
    pub fn reject(&mut self, msg: &[u8]) {
        let _ = self.write(msg);
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unread_sees_bytes_waiting_in_the_socket() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (mut a, b) = (UnixStream::from_std(a), Stream::Unix(UnixStream::from_std(b)));
        assert!(!b.unread());
        a.write_all(b"set k 0 0 10\r\nabc").unwrap();
        assert!(b.unread());
        let Stream::Unix(mut inner) = b else { panic!("unix") };
        let mut buf = [0u8; 64];
        let n = inner.read(&mut buf).unwrap();
        assert_eq!(n, 17);
        assert!(!Stream::Unix(inner).unread());
    }
}
