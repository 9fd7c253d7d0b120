//! `--tls`: the servers speak TLS (strata and memcached with `-Z`), and the
//! load connections go through rustls. A throw-away CA and a server
//! certificate for 127.0.0.1 are made with the `openssl` command line for
//! the run; the client verifies the server against that CA, as a real
//! client would.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

/// The certificate files of a run.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub dir: PathBuf,
    pub chain: PathBuf,
    pub key: PathBuf,
    ca: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl").args(args).current_dir(dir).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("openssl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr))))
    }
}

impl TlsFiles {
    /// Makes a CA and a server certificate (RSA 2048, as most deployments)
    /// in a new directory under the system's temporary one.
    pub fn generate() -> io::Result<TlsFiles> {
        let dir = std::env::temp_dir().join(format!("strata-bench-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=strata-bench CA",
            ],
        )?;
        openssl(
            &dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        )?;
        std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n")?;
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        )?;
        Ok(TlsFiles { chain: dir.join("server.crt"), key: dir.join("server.key"), ca: dir.join("ca.crt"), dir })
    }

    /// The `-Z -o ssl_…` arguments strata and memcached take alike.
    pub fn server_args(&self) -> Vec<String> {
        vec![
            "-Z".into(),
            "-o".into(),
            format!("ssl_chain_cert={},ssl_key={}", self.chain.display(), self.key.display()),
        ]
    }

    /// A client configuration that trusts the run's CA.
    pub fn client_config(&self) -> io::Result<Arc<ClientConfig>> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&self.ca).map_err(io::Error::other)? {
            roots.add(cert.map_err(io::Error::other)?).map_err(io::Error::other)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(config))
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A load connection's byte stream: the socket, or TLS over it.
pub enum Stream {
    Plain(TcpStream),
    Tls(TcpStream, Box<ClientConnection>),
}

impl Stream {
    pub fn new(sock: TcpStream, tls: Option<&Arc<ClientConfig>>, addr: SocketAddr) -> io::Result<Stream> {
        Ok(match tls {
            None => Stream::Plain(sock),
            Some(config) => {
                let name = ServerName::IpAddress(addr.ip().into());
                let conn = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
                Stream::Tls(sock, Box::new(conn))
            }
        })
    }

    pub fn socket(&mut self) -> &mut TcpStream {
        match self {
            Stream::Plain(s) | Stream::Tls(s, _) => s,
        }
    }

    /// Sends what TLS has ready (the handshake, records) until the socket
    /// takes no more.
    pub fn flush_tls(&mut self) -> io::Result<()> {
        if let Stream::Tls(sock, tls) = self {
            while tls.wants_write() {
                match tls.write_tls(sock) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Takes all of `buf` (TLS buffers what the socket does not take yet).
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(_, tls) => {
                let n = tls.writer().write(buf)?;
                self.flush_tls()?;
                Ok(n)
            }
        }
    }

    /// Reads plaintext; `WouldBlock` once the socket is empty.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Stream::Tls(sock, tls) = self else {
            return match self {
                Stream::Plain(s) => s.read(buf),
                Stream::Tls(..) => Ok(0),
            };
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match tls.read_tls(sock) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    tls.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    // The handshake's next flight.
                    while tls.wants_write() {
                        match tls.write_tls(sock) {
                            Ok(_) => {}
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) => return Err(e),
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}
