//! TLS on the gateway's own listener (`--tls-cert` / `--tls-key`, PEM files): loading and
//! checking the files at startup, and the acceptor the listener wraps each connection in.
//!
//! Owns: turning PEM files into a rustls server configuration, or one [`ConfigError`] naming the
//! setting and the fix. Does not own: accepting or serving connections (`listen.rs`).
//!
//! HTTP/1.1 only, as in cleartext (see `listen.rs`): ALPN offers `http/1.1`, so a client that
//! asks for HTTP/2 falls back to it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::setting::ConfigError;

/// A checked TLS configuration, ready for the listener. `Debug` shows the file paths only: the
/// private key never reaches a log.
#[derive(Clone)]
pub struct TlsSettings {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    config: Arc<ServerConfig>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl TlsSettings {
    /// Reads and checks a PEM certificate chain and its PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self, ConfigError> {
        let cert_error = |problem: String| ConfigError {
            setting: "--tls-cert".into(),
            problem,
            fix: "point --tls-cert / tls_cert at a PEM file holding the certificate chain".into(),
        };
        let key_error = |problem: String| ConfigError {
            setting: "--tls-key".into(),
            problem,
            fix: "point --tls-key / tls_key at the PEM private key of that certificate".into(),
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_path)
            .map_err(|e| cert_error(format!("cannot read {}: {e}", cert_path.display())))?
            .collect::<Result<_, _>>()
            .map_err(|e| cert_error(format!("{} is not PEM: {e}", cert_path.display())))?;
        if certs.is_empty() {
            return Err(cert_error(format!(
                "{} holds no CERTIFICATE block",
                cert_path.display()
            )));
        }
        // The error of a key file never quotes its content.
        let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| {
            key_error(format!(
                "{} holds no readable PEM private key ({})",
                key_path.display(),
                pem_problem(&e)
            ))
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| cert_error(format!("no TLS protocol version available: {e}")))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| ConfigError {
                setting: "--tls-key".into(),
                problem: format!("the key does not fit the certificate: {e}"),
                fix: "give the private key that belongs to the --tls-cert certificate".into(),
            })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            config: Arc::new(config),
        })
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.clone())
    }
}

/// What went wrong reading a PEM file, without any of its bytes.
fn pem_problem(e: &rustls_pki_types::pem::Error) -> &'static str {
    use rustls_pki_types::pem::Error;
    match e {
        Error::Io(_) => "cannot read it",
        Error::NoItemsFound => "no PRIVATE KEY block",
        _ => "malformed PEM",
    }
}

/// Both files or neither: a certificate without its key (or the reverse) is a mistake.
pub fn settings(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<TlsSettings>, ConfigError> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => TlsSettings::load(&cert, &key).map(Some),
        (Some(_), None) => Err(ConfigError {
            setting: "--tls-key".into(),
            problem: "--tls-cert is set without a key".into(),
            fix: "also pass --tls-key FILE (PEM), or drop --tls-cert to serve plain HTTP".into(),
        }),
        (None, Some(_)) => Err(ConfigError {
            setting: "--tls-cert".into(),
            problem: "--tls-key is set without a certificate".into(),
            fix: "also pass --tls-cert FILE (PEM), or drop --tls-key to serve plain HTTP".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn good_files_load_and_bad_ones_name_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = write(dir.path(), "cert.pem", &made.cert.pem());
        let key = write(dir.path(), "key.pem", &made.signing_key.serialize_pem());
        let loaded = TlsSettings::load(&cert, &key).expect("a fresh pair loads");
        assert!(!format!("{loaded:?}").contains("PRIVATE"));

        let garbage = write(dir.path(), "garbage.pem", "not pem at all");
        let e = TlsSettings::load(&garbage, &key).unwrap_err();
        assert_eq!(e.setting, "--tls-cert");
        let e = TlsSettings::load(&cert, &garbage).unwrap_err();
        assert_eq!(e.setting, "--tls-key");
        let e = TlsSettings::load(&dir.path().join("missing.pem"), &key).unwrap_err();
        assert_eq!(e.setting, "--tls-cert");

        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let other_key = write(dir.path(), "other.pem", &other.signing_key.serialize_pem());
        let e = TlsSettings::load(&cert, &other_key).unwrap_err();
        assert_eq!(e.setting, "--tls-key", "{e}");
        assert!(!e.to_string().contains("PRIVATE KEY-----"));

        assert_eq!(settings(Some(cert), None).unwrap_err().setting, "--tls-key");
        assert_eq!(settings(None, Some(key)).unwrap_err().setting, "--tls-cert");
    }
}
