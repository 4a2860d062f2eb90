//! A certificate authority made at test time, and the PEM files it signs in a temp dir: for servers that
//! demand TLS (nats-server, PostgreSQL) and the clients that verify them.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use std::path::PathBuf;

pub struct Pki {
    dir: tempfile::TempDir,
    ca: (rcgen::Certificate, KeyPair),
}

impl Pki {
    /// A new CA named `name`; its certificate is `path("ca.pem")`.
    pub fn new(name: &str) -> Pki {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("a self-signed CA certificate");
        let pki = Pki { dir: tempfile::tempdir().expect("a temp dir"), ca: (cert, key) };
        std::fs::write(pki.path("ca.pem"), pki.ca.0.pem()).expect("writing ca.pem");
        pki
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// A certificate for `san` (an IP address or a name) signed by this CA: (`<name>.pem`, `<name>-key.pem`).
    pub fn issue(&self, name: &str, san: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(vec![san.to_string()]).expect("certificate parameters");
        params.distinguished_name.push(DnType::CommonName, san);
        let cert = params.signed_by(&key, &self.ca.0, &self.ca.1).expect("a certificate signed by the CA");
        let (c, k) = (self.path(&format!("{name}.pem")), self.path(&format!("{name}-key.pem")));
        std::fs::write(&c, cert.pem()).expect("writing the certificate");
        std::fs::write(&k, key.serialize_pem()).expect("writing the key");
        (c, k)
    }
}
