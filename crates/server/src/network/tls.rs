//! TLS with rustls: memcached's `-Z` and `ssl_*` options, the server
//! configuration `refresh_certs` replaces, and the two ways a connection
//! is encrypted for [`crate::network::conn::Conn`]: [`TlsIo`], a transport over the
//! socket (epoll loop), and [`RingTls`], where the io_uring loop moves the
//! ciphertext.
//!
//! The connection state machine never sees ciphertext: records go into
//! rustls and plaintext comes out, and what the connection writes is
//! encrypted. rustls holds at most
//! [`TLS_BUFFER`] of unsent records per connection; past that, `write`
//! takes nothing (`WouldBlock`), so the connection's own reply limit and
//! the server-wide reply budget hold back a slow TLS reader exactly as a
//! slow plain one.
//!
//! memcached's options and how they map (docs/protocol.md, "TLS"):
//! `ssl_chain_cert` and `ssl_key` (PEM), `ssl_ca_cert` (PEM roots for
//! client certificates), `ssl_verify_mode` 0 none, 1 ask for a client
//! certificate and verify one if given, 2 require one, 3 as 2 (OpenSSL's
//! "once" re-verifies nothing on renegotiation, which TLS 1.3 and rustls do
//! not do), `ssl_min_version` `tlsv1.2` or `tlsv1.3` (rustls has no older
//! versions: `tlsv1.0`/`tlsv1.1` mean 1.2, with a note), `ssl_ciphers` a
//! colon-separated list of OpenSSL or IANA names of TLS 1.2 suites that
//! rustls offers (as OpenSSL's cipher list, it leaves TLS 1.3's alone).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{CipherSuite, RootCertStore, ServerConfig, ServerConnection, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::network::listen::Stream;
use crate::network::transport::Transport;

/// Unsent TLS records a connection may hold (rustls' own default).
pub(crate) const TLS_BUFFER: usize = 64 << 10;

/// The lowest protocol version offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinVersion {
    Tls12,
    Tls13,
}

/// `-Z` and the `ssl_*` options.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub chain_cert: PathBuf,
    /// The private key; in `chain_cert` when not given.
    pub key: Option<PathBuf>,
    pub ca_cert: Option<PathBuf>,
    pub verify_mode: u8,
    pub min_version: MinVersion,
    pub ciphers: Option<String>,
}

/// Why a TLS configuration could not be built (at start, or for
/// `refresh_certs`).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{what} {path}: {source}")]
    Pem { what: &'static str, path: String, source: rustls_pki_types::pem::Error },
    #[error("no certificate in {0}")]
    NoCertificate(String),
    #[error("ssl_verify_mode {0} needs -o ssl_ca_cert=FILE")]
    NeedsCa(u8),
    #[error("invalid ssl_verify_mode {0} (0 to 3)")]
    VerifyMode(u8),
    #[error("ssl_ciphers {0:?} names no TLS 1.2 suite rustls offers")]
    NoCiphers(String),
    #[error("client certificate verification: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

/// The TLS side of the server: the configuration new connections get,
/// and the counters `stats` shows.
pub(crate) struct Tls {
    pub settings: TlsSettings,
    config: RwLock<Arc<ServerConfig>>,
    /// When the certificates were last loaded (unix seconds).
    pub loaded_at: AtomicU64,
    pub handshake_errors: AtomicU64,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Tls {
    pub fn new(settings: TlsSettings) -> Result<Tls, TlsError> {
        let config = build(&settings)?;
        Ok(Tls {
            settings,
            config: RwLock::new(config),
            loaded_at: AtomicU64::new(now_secs()),
            handshake_errors: AtomicU64::new(0),
        })
    }

    /// `refresh_certs`: loads the files again. Connections accepted from
    /// now on get the new certificates; open ones keep theirs. On failure
    /// the old configuration stays.
    pub fn refresh(&self) -> Result<(), TlsError> {
        let config = build(&self.settings)?;
        *self.config.write() = config;
        self.loaded_at.store(now_secs(), Relaxed);
        Ok(())
    }

    /// The TLS state of a connection just accepted.
    pub fn accept(&self) -> Result<Box<ServerConnection>, rustls::Error> {
        let mut c = ServerConnection::new(self.config.read().clone())?;
        c.set_buffer_limit(Some(TLS_BUFFER));
        Ok(Box::new(c))
    }
}

/// The OpenSSL name of a TLS 1.2 suite rustls offers.
fn openssl_name(suite: CipherSuite) -> Option<&'static str> {
    Some(match suite {
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-ECDSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => return None,
    })
}

/// The suites to offer: every TLS 1.3 one, and the TLS 1.2 ones `list`
/// names (all of them without a list).
fn suites(all: &[SupportedCipherSuite], list: Option<&str>) -> Result<Vec<SupportedCipherSuite>, TlsError> {
    let Some(list) = list else { return Ok(all.to_vec()) };
    let names: Vec<&str> = list.split(':').map(str::trim).filter(|n| !n.is_empty()).collect();
    let chosen = |s: &SupportedCipherSuite| {
        let id = s.suite();
        names.iter().any(|n| Some(*n) == openssl_name(id) || Some(*n) == id.as_str())
    };
    let tls12: Vec<_> = all.iter().filter(|s| s.tls13().is_none() && chosen(s)).copied().collect();
    if tls12.is_empty() {
        return Err(TlsError::NoCiphers(list.to_string()));
    }
    for n in &names {
        if !all.iter().any(|s| Some(*n) == openssl_name(s.suite()) || Some(*n) == s.suite().as_str()) {
            tracing::warn!(cipher = n, "ssl_ciphers: rustls does not offer this one; left out");
        }
    }
    Ok(all.iter().filter(|s| s.tls13().is_some()).copied().chain(tls12).collect())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let shown = || path.display().to_string();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Pem { what: "certificates", path: shown(), source })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(shown()));
    }
    Ok(certs)
}

/// A server configuration from the settings' files.
fn build(s: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let ring = rustls::crypto::ring::default_provider();
    let provider =
        Arc::new(CryptoProvider { cipher_suites: suites(&ring.cipher_suites, s.ciphers.as_deref())?, ..ring });
    let versions: &[&rustls::SupportedProtocolVersion] = match s.min_version {
        MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(versions)?;
    let roots = || -> Result<Arc<RootCertStore>, TlsError> {
        let path = s.ca_cert.as_ref().ok_or(TlsError::NeedsCa(s.verify_mode))?;
        let mut roots = RootCertStore::empty();
        for cert in certificates(path)? {
            roots.add(cert)?;
        }
        Ok(Arc::new(roots))
    };
    let builder = match s.verify_mode {
        0 => builder.with_no_client_auth(),
        1 => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder_with_provider(roots()?, provider).allow_unauthenticated().build()?,
        ),
        2 | 3 => {
            builder.with_client_cert_verifier(WebPkiClientVerifier::builder_with_provider(roots()?, provider).build()?)
        }
        m => return Err(TlsError::VerifyMode(m)),
    };
    let key_path = s.key.as_deref().unwrap_or(&s.chain_cert);
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|source| TlsError::Pem {
        what: "private key",
        path: key_path.display().to_string(),
        source,
    })?;
    Ok(Arc::new(builder.with_single_cert(certificates(&s.chain_cert)?, key)?))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_lists_keep_tls13_and_choose_among_tls12() {
        let all = rustls::crypto::ring::default_provider().cipher_suites;
        assert_eq!(suites(&all, None).map(|s| s.len()).ok(), Some(all.len()));
        let some = suites(&all, Some("ECDHE-RSA-AES128-GCM-SHA256:TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384:RC4-MD5"))
            .unwrap_or_default();
        let tls12: Vec<_> = some.iter().filter(|s| s.tls13().is_none()).map(|s| s.suite()).collect();
        assert_eq!(
            tls12,
            vec![
                CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
                CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
            ]
            .into_iter()
            .filter(|c| tls12.contains(c))
            .collect::<Vec<_>>()
        );
        assert_eq!(tls12.len(), 2);
        assert!(some.iter().any(|s| s.tls13().is_some()), "TLS 1.3 suites stay");
        assert!(matches!(suites(&all, Some("RC4-MD5:HIGH")), Err(TlsError::NoCiphers(_))));
    }

    #[test]
    fn settings_errors_are_typed() {
        let missing = TlsSettings {
            chain_cert: PathBuf::from("/nonexistent/strata-chain.pem"),
            key: None,
            ca_cert: None,
            verify_mode: 0,
            min_version: MinVersion::Tls12,
            ciphers: None,
        };
        assert!(matches!(build(&missing), Err(TlsError::Pem { .. })));
        let needs_ca = TlsSettings { verify_mode: 2, ..missing.clone() };
        assert!(matches!(build(&needs_ca), Err(TlsError::NeedsCa(2))));
        let bad_mode = TlsSettings { verify_mode: 9, ..missing };
        assert!(matches!(build(&bad_mode), Err(TlsError::VerifyMode(9))));
    }
}
