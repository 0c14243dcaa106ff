//! Certificates for TLS tests (the `pki` feature): a CA made for the test,
//! and a server and a client certificate it signed, as PEM files in a
//! temporary directory, with the services' TLS settings pointing at them.

use std::path::PathBuf;

use instanceha_runtime::tls::{ClientTlsSettings, ServerTlsSettings};

/// The name the server certificate is for.
pub const SERVER_NAME: &str = "localhost";

/// `ca.pem`; `server.pem` and `server.key` for [`SERVER_NAME`];
/// `client.pem` and `client.key`. Removed when dropped.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A fresh CA and certificates; `client` names the client's.
    pub fn new(client: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ca_key = rcgen::KeyPair::generate().expect("a CA key");
        let mut ca_params =
            rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "instance-ha test CA");
        let ca = ca_params.self_signed(&ca_key).expect("a CA certificate");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("ca.pem written");
        for (file, name) in [("server", SERVER_NAME), ("client", client)] {
            let key = rcgen::KeyPair::generate().expect("a key");
            let mut params =
                rcgen::CertificateParams::new(vec![name.to_owned()]).expect("parameters");
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            let cert = params.signed_by(&key, &issuer).expect("a certificate");
            std::fs::write(dir.path().join(format!("{file}.pem")), cert.pem())
                .expect("a certificate written");
            std::fs::write(dir.path().join(format!("{file}.key")), key.serialize_pem())
                .expect("a key written");
        }
        Self { dir }
    }

    /// One of the files.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// A server's `[tls]` with the server certificate; callers need a
    /// certificate the CA signed if `client_ca`.
    pub fn server(&self, client_ca: bool) -> ServerTlsSettings {
        ServerTlsSettings {
            cert_file: Some(self.path("server.pem")),
            key_file: Some(self.path("server.key")),
            client_ca_file: client_ca.then(|| self.path("ca.pem")),
        }
    }

    /// A client's TLS trusting the CA, presenting the client certificate
    /// if `with_certificate`.
    pub fn client(&self, with_certificate: bool) -> ClientTlsSettings {
        ClientTlsSettings {
            ca_file: Some(self.path("ca.pem")),
            cert_file: with_certificate.then(|| self.path("client.pem")),
            key_file: with_certificate.then(|| self.path("client.key")),
            domain_name: Some(SERVER_NAME.to_owned()),
        }
    }
}
