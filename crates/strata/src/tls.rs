//! memcached's `ssl_*` options (`-o ssl_chain_cert=FILE,...`, used with
//! `-Z`), turned into the server's TLS settings (docs/tls.md).

/// memcached's `ssl_*` options (used with `-Z`).
#[derive(Default)]
pub struct TlsOptions {
    chain_cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
    ca_cert: Option<std::path::PathBuf>,
    verify_mode: u8,
    min_version: Option<strata_server::MinVersion>,
    ciphers: Option<String>,
}

impl TlsOptions {
    /// Takes `-o k=v` if it is a TLS option.
    pub fn take(&mut self, k: &str, v: &str) -> Result<bool, String> {
        match k {
            "ssl_chain_cert" => self.chain_cert = Some(v.into()),
            "ssl_key" => self.key = Some(v.into()),
            "ssl_ca_cert" => self.ca_cert = Some(v.into()),
            "ssl_verify_mode" => {
                self.verify_mode = v
                    .parse()
                    .ok()
                    .filter(|m| *m <= 3)
                    .ok_or_else(|| format!("invalid ssl_verify_mode {v:?} (0 to 3)"))?
            }
            "ssl_min_version" => {
                // memcached's numbers: 0 TLS 1.0, 1 TLS 1.1, 2 TLS 1.2, 3
                // TLS 1.3; its names are taken too.
                self.min_version = Some(match v {
                    "2" | "tlsv1.2" => strata_server::MinVersion::Tls12,
                    "3" | "tlsv1.3" => strata_server::MinVersion::Tls13,
                    "0" | "1" | "tlsv1" | "tlsv1.0" | "tlsv1.1" => {
                        tracing::info!(
                            "-o ssl_min_version={v}: rustls offers TLS 1.2 and 1.3 only; 1.2 is the minimum"
                        );
                        strata_server::MinVersion::Tls12
                    }
                    _ => return Err(format!("invalid ssl_min_version {v:?} (0 to 3)")),
                })
            }
            "ssl_ciphers" => self.ciphers = Some(v.to_string()),
            "ssl_keyformat" => {
                // memcached: 1 is PEM (OpenSSL's SSL_FILETYPE_PEM).
                if !matches!(v, "1" | "PEM" | "pem") {
                    return Err(format!("ssl_keyformat {v:?}: only PEM keys are read"));
                }
            }
            "ssl_wbuf_size" | "ssl_session_cache" | "ssl_kernel_tls" => {
                tracing::info!("-o {k}: accepted for memcached compatibility, no effect here");
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The server's TLS settings with `-Z` (`enabled`); none without.
    pub fn settings(self, enabled: bool) -> Result<Option<strata_server::TlsSettings>, String> {
        if !enabled {
            return Ok(None);
        }
        let chain_cert = self.chain_cert.ok_or("-Z needs -o ssl_chain_cert=FILE (and ssl_key=FILE)")?;
        Ok(Some(strata_server::TlsSettings {
            chain_cert,
            key: self.key,
            ca_cert: self.ca_cert,
            verify_mode: self.verify_mode,
            min_version: self.min_version.unwrap_or(strata_server::MinVersion::Tls12),
            ciphers: self.ciphers,
        }))
    }
}
