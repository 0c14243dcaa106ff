//! TLS towards OpenStack's APIs as `clouds.yaml` and the `OS_*` variables
//! describe it: `cacert` (a PEM bundle trusted besides the system's roots),
//! `verify: false` (no certificate check at all), `cert` and `key` (a client
//! certificate). Errors name the setting and the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How the HTTP client checks the cloud's certificates, and which it shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM file of CA certificates to trust besides the system's roots (a
    /// site's private CA).
    pub cacert: Option<PathBuf>,
    /// `false` turns certificate verification off (unset: on).
    pub verify: Option<bool>,
    /// PEM client certificate (it may hold the key too).
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
}

/// A TLS setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("{setting}: cannot read {path}: {reason}")]
    Read {
        setting: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{setting}: {path}: {reason}")]
    Invalid {
        setting: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("key ({0}) needs cert: a client key without its certificate")]
    KeyWithoutCert(PathBuf),
}

impl TlsSettings {
    /// Fills unset fields from `other`.
    pub fn or(self, other: TlsSettings) -> TlsSettings {
        TlsSettings {
            cacert: self.cacert.or(other.cacert),
            verify: self.verify.or(other.verify),
            cert: self.cert.or(other.cert),
            key: self.key.or(other.key),
        }
    }

    /// `OS_CACERT`, `OS_CERT`, `OS_KEY` and `OS_INSECURE` of `env`.
    pub fn from_env(env: &BTreeMap<String, String>) -> TlsSettings {
        let get = |key: &str| env.get(key).filter(|v| !v.is_empty());
        TlsSettings {
            cacert: get("OS_CACERT").map(PathBuf::from),
            verify: get("OS_INSECURE")
                .and_then(|v| parse_bool(v))
                .map(|insecure| !insecure),
            cert: get("OS_CERT").map(PathBuf::from),
            key: get("OS_KEY").map(PathBuf::from),
        }
    }

    /// Whether certificates go unchecked (`verify: false`): callers warn.
    pub fn insecure(&self) -> bool {
        self.verify == Some(false)
    }

    /// `builder` with these settings applied (files read now, so that a
    /// wrong path shows at start).
    pub fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, TlsError> {
        if let Some(path) = &self.cacert {
            let pem = read("cacert", path)?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| invalid("cacert", path, e.to_string()))?;
            if certs.is_empty() {
                return Err(invalid("cacert", path, "no PEM certificate in it".into()));
            }
            builder = builder.tls_certs_merge(certs);
        }
        match (&self.cert, &self.key) {
            (None, None) => {}
            (None, Some(key)) => return Err(TlsError::KeyWithoutCert(key.clone())),
            (Some(cert), key) => {
                let mut pem = read("cert", cert)?;
                if let Some(key) = key {
                    pem.push(b'\n');
                    pem.extend(read("key", key)?);
                }
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    invalid("cert", cert, format!("not a PEM certificate and key ({e})"))
                })?;
                builder = builder.identity(identity);
            }
        }
        if self.insecure() {
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        Ok(builder)
    }
}

/// A boolean as `clouds.yaml` and the variables spell it.
pub fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" | "on" => Some(true),
        "false" | "no" | "0" | "off" => Some(false),
        _ => None,
    }
}

fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        setting,
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

fn invalid(setting: &'static str, path: &Path, reason: String) -> TlsError {
    TlsError::Invalid {
        setting,
        path: path.to_owned(),
        reason,
    }
}

/// Whether `err` failed on the server's certificate (an unknown CA, a
/// wrong name, an expired certificate): worth no retry, and worth a hint.
pub(crate) fn is_certificate_error(err: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(err);
    while let Some(e) = source {
        if let Some(rustls) = e.downcast_ref::<rustls::Error>() {
            return matches!(
                rustls,
                rustls::Error::InvalidCertificate(_)
                    | rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA)
            );
        }
        // hyper-util's connector passes the handshake's error on wrapped
        // in an `io::Error`, whose `source` skips it: read its message.
        if e.to_string().starts_with("invalid peer certificate") {
            return true;
        }
        source = e.source();
    }
    false
}

/// What to do about a certificate error.
pub(crate) const CERTIFICATE_HINT: &str = "the server's certificate is not trusted: \
     give its CA as cacert in clouds.yaml or OS_CACERT (verify: false turns the check off, \
     unsafely)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_merging() {
        let env = BTreeMap::from([
            ("OS_CACERT".to_owned(), "/etc/ca.pem".to_owned()),
            ("OS_INSECURE".to_owned(), "true".to_owned()),
        ]);
        let from_env = TlsSettings::from_env(&env);
        assert_eq!(from_env.cacert, Some(PathBuf::from("/etc/ca.pem")));
        assert!(from_env.insecure());
        let cloud = TlsSettings {
            cacert: Some("/cloud/ca.pem".into()),
            verify: Some(true),
            ..TlsSettings::default()
        };
        let merged = cloud.or(from_env);
        assert_eq!(merged.cacert, Some(PathBuf::from("/cloud/ca.pem")));
        assert!(!merged.insecure());
    }

    #[test]
    fn unreadable_or_empty_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = TlsSettings {
            cacert: Some(dir.path().join("nope.pem")),
            ..TlsSettings::default()
        };
        let err = missing.apply(reqwest::Client::builder()).unwrap_err();
        assert!(err.to_string().starts_with("cacert: cannot read"), "{err}");
        assert!(err.to_string().contains("nope.pem"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = TlsSettings {
            cacert: Some(empty),
            ..TlsSettings::default()
        }
        .apply(reqwest::Client::builder())
        .unwrap_err();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        let err = TlsSettings {
            key: Some("/k.pem".into()),
            ..TlsSettings::default()
        }
        .apply(reqwest::Client::builder())
        .unwrap_err();
        assert!(err.to_string().contains("needs cert"), "{err}");
    }
}
