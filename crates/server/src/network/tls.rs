//! TLS with rustls: memcached's `-Z` and `ssl_*` options and the server
//! configuration `refresh_certs` replaces. How a connection's bytes go
//! through it is `tls_io.rs`'s.
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

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{CipherSuite, RootCertStore, ServerConfig, ServerConnection, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{MinVersion, TlsSettings};

/// Unsent TLS records a connection may hold (rustls' own default).
pub(crate) const TLS_BUFFER: usize = 64 << 10;

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
            chain_cert: std::path::PathBuf::from("/nonexistent/strata-chain.pem"),
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
