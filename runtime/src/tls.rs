//! TLS for the gRPC links (rustls through tonic) and the REST listener
//! (rustls directly, [`ServerTlsSettings::rustls`]): a server's certificate
//! and key, with client-certificate authentication when a client CA is
//! given; and a client's trusted CA, certificate and key. Settings name
//! files; errors name the setting and the file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use serde::{Deserialize, Serialize};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// TLS of a gRPC server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerTlsSettings {
    /// PEM certificate chain; with `key_file`, turns TLS on.
    pub cert_file: Option<PathBuf>,
    /// PEM private key.
    pub key_file: Option<PathBuf>,
    /// PEM CA bundle: when set, clients must present a certificate it
    /// signed (mutual TLS).
    pub client_ca_file: Option<PathBuf>,
}

/// TLS of a gRPC client.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientTlsSettings {
    /// PEM CA bundle to trust for the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain and key presented to the server (mutual TLS).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The name to check the server's certificate against (default: the
    /// URL's host).
    pub domain_name: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{setting}: cannot read {path}: {source}")]
    Read {
        setting: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Incomplete(String),
    #[error("{setting}: {path}: {reason}")]
    Invalid {
        setting: String,
        path: PathBuf,
        reason: String,
    },
}

fn read(setting: String, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        setting,
        path: path.to_owned(),
        source,
    })
}

impl ServerTlsSettings {
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some() || self.key_file.is_some()
    }

    /// The tonic configuration, or `None` when TLS is off; `section` names
    /// the settings' place in error messages (e.g. `tls`).
    pub fn load(&self, section: &str) -> Result<Option<ServerTlsConfig>, TlsError> {
        let (cert, key) = match (&self.cert_file, &self.key_file) {
            (None, None) => {
                if self.client_ca_file.is_some() {
                    return Err(TlsError::Incomplete(format!(
                        "{section}.client_ca_file needs {section}.cert_file and {section}.key_file"
                    )));
                }
                return Ok(None);
            }
            (Some(cert), Some(key)) => (cert, key),
            _ => {
                return Err(TlsError::Incomplete(format!(
                    "{section}.cert_file and {section}.key_file go together"
                )));
            }
        };
        let identity = Identity::from_pem(
            read(format!("{section}.cert_file"), cert)?,
            read(format!("{section}.key_file"), key)?,
        );
        let mut config = ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca_file {
            config = config.client_ca_root(Certificate::from_pem(read(
                format!("{section}.client_ca_file"),
                ca,
            )?));
        }
        Ok(Some(config))
    }
}

impl ServerTlsSettings {
    /// The same settings as a rustls configuration, for a listener that
    /// is not tonic's (the REST API); HTTP/2 and HTTP/1.1 are offered.
    pub fn rustls(&self, section: &str) -> Result<Option<Arc<rustls::ServerConfig>>, TlsError> {
        // The checks and messages of `load`.
        if self.load(section)?.is_none() {
            return Ok(None);
        }
        let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) else {
            return Ok(None);
        };
        let invalid = |setting: &str, path: &Path, reason: String| TlsError::Invalid {
            setting: format!("{section}.{setting}"),
            path: path.to_owned(),
            reason,
        };
        let certificates = |setting: &str, path: &Path| {
            let pem = read(format!("{section}.{setting}"), path)?;
            let certificates = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(setting, path, e.to_string()))?;
            if certificates.is_empty() {
                return Err(invalid(setting, path, "no certificate".to_owned()));
            }
            Ok(certificates)
        };
        let chain = certificates("cert_file", cert)?;
        let private_key = PrivateKeyDer::from_pem_slice(&read(format!("{section}.key_file"), key)?)
            .map_err(|e| invalid("key_file", key, e.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Incomplete(format!("{section}: {e}")))?;
        let builder = match &self.client_ca_file {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for certificate in certificates("client_ca_file", ca)? {
                    roots
                        .add(certificate)
                        .map_err(|e| invalid("client_ca_file", ca, e.to_string()))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(|e| invalid("client_ca_file", ca, e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, private_key)
            .map_err(|e| invalid("key_file", key, e.to_string()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Some(Arc::new(config)))
    }
}

impl ClientTlsSettings {
    pub fn enabled(&self) -> bool {
        self.ca_file.is_some() || self.cert_file.is_some()
    }

    pub fn load(&self, section: &str) -> Result<Option<ClientTlsConfig>, TlsError> {
        if !self.enabled() {
            return Ok(None);
        }
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &self.ca_file {
            config = config.ca_certificate(Certificate::from_pem(read(
                format!("{section}.ca_file"),
                ca,
            )?));
        }
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(
                    read(format!("{section}.cert_file"), cert)?,
                    read(format!("{section}.key_file"), key)?,
                ));
            }
            (None, None) => {}
            _ => {
                return Err(TlsError::Incomplete(format!(
                    "{section}.cert_file and {section}.key_file go together"
                )));
            }
        }
        if let Some(domain) = &self.domain_name {
            config = config.domain_name(domain.clone());
        }
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_configured_tls_is_refused_naming_the_settings() {
        let server = ServerTlsSettings {
            cert_file: Some("cert.pem".into()),
            ..ServerTlsSettings::default()
        };
        let err = server.load("tls").unwrap_err();
        assert!(
            err.to_string().contains("tls.cert_file and tls.key_file"),
            "{err}"
        );
        let server = ServerTlsSettings {
            cert_file: Some("/nonexistent/cert.pem".into()),
            key_file: Some("/nonexistent/key.pem".into()),
            ..ServerTlsSettings::default()
        };
        let err = server.load("tls").unwrap_err();
        assert!(
            err.to_string().contains("tls.cert_file: cannot read"),
            "{err}"
        );
        assert!(ServerTlsSettings::default().load("tls").unwrap().is_none());
    }

    #[test]
    fn generated_certificates_load() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("c.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("k.pem"), key.serialize_pem()).unwrap();
        let server = ServerTlsSettings {
            cert_file: Some(dir.path().join("c.pem")),
            key_file: Some(dir.path().join("k.pem")),
            client_ca_file: Some(dir.path().join("c.pem")),
        };
        assert!(server.load("tls").unwrap().is_some());
        assert!(server.rustls("tls").unwrap().is_some());
        assert!(
            ServerTlsSettings::default()
                .rustls("tls")
                .unwrap()
                .is_none()
        );
        let swapped = ServerTlsSettings {
            cert_file: Some(dir.path().join("k.pem")),
            key_file: Some(dir.path().join("c.pem")),
            client_ca_file: None,
        };
        let err = swapped.rustls("tls").unwrap_err();
        assert!(err.to_string().contains("tls.cert_file"), "{err}");
        let client = ClientTlsSettings {
            ca_file: Some(dir.path().join("c.pem")),
            ..ClientTlsSettings::default()
        };
        assert!(client.load("dispatch.tls").unwrap().is_some());
    }
}
