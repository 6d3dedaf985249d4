//! A throwaway certificate authority for TLS tests: a CA and server certificates for
//! `localhost` and 127.0.0.1, written as PEM files into a temporary folder.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub dir: tempfile::TempDir,
}

/// PEM files of one server certificate signed by the test CA.
pub struct ServerCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Distinct names for CA and leaf: with rcgen's default name on both, OpenSSL (Python's
        // ssl, redis-server) takes the leaf for self-signed and never looks for its issuer.
        params
            .distinguished_name
            .push(DnType::CommonName, "captcha-gateway test CA");
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), issuer.pem()).unwrap();
        TestCa { issuer, dir }
    }

    /// The CA certificate, which clients are told to trust.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A server certificate for `localhost` and 127.0.0.1, named `name` on disk.
    pub fn server(&self, name: &str) -> ServerCert {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("captcha-gateway test {name}"));
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let out = ServerCert {
            cert: self.dir.path().join(format!("{name}.pem")),
            key: self.dir.path().join(format!("{name}.key")),
        };
        std::fs::write(&out.cert, cert.pem()).unwrap();
        std::fs::write(&out.key, key.serialize_pem()).unwrap();
        out
    }
}
