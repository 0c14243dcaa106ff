//! `[link]`: who may open a `Recover` stream, and the token it takes:
//! `link.token_file`, else the state directory's, made on first start;
//! mutual TLS may stand in for it; only `link.insecure_unauthenticated`,
//! on loopback, goes without.

use std::path::PathBuf;

use instanceha_runtime::secret::Secret;
use serde::{Deserialize, Serialize};

use super::{Error, Settings};

/// `[link]`: who may open a `Recover` stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkSettings {
    /// A file holding the token the API shares with the engine (the API's
    /// `dispatch.engine_token_file`): a call without it, as
    /// `authorization: Bearer <token>`, is refused UNAUTHENTICATED. Unset
    /// (and no mutual TLS): `link-token` in the state directory, made on
    /// first start.
    pub token_file: Option<PathBuf>,
    /// Accept a `Recover` from any caller, without a token or mutual TLS:
    /// any local process could then force down, disable and evacuate a
    /// healthy host. Only on loopback, and logged as an error at start.
    pub insecure_unauthenticated: bool,
}

impl Settings {
    /// The token a `Recover` call must present, or `None` when mutual TLS
    /// (`tls.client_ca_file`) alone guards the port, or when
    /// `link.insecure_unauthenticated` says nothing does (on loopback
    /// only). Nobody but the API may start a recovery, wherever the engine
    /// listens: without `link.token_file` the token is the state
    /// directory's, made on first start for the API to read.
    pub fn link_token(&self) -> Result<Option<Secret>, Error> {
        self.link_token_made(true)
    }

    /// [`link_token`](Self::link_token), but with `make` false a missing
    /// state-directory token is not made (`None`): `--check` changes
    /// nothing on disk.
    pub fn link_token_made(&self, make: bool) -> Result<Option<Secret>, Error> {
        let mutual_tls = self.tls.enabled() && self.tls.client_ca_file.is_some();
        if self.link.insecure_unauthenticated {
            if self.link.token_file.is_some() || mutual_tls {
                return Err(Error::Invalid(
                    "link.insecure_unauthenticated: set it alone, not with link.token_file or tls.client_ca_file".to_owned(),
                ));
            }
            if !self.listen.ip().is_loopback() {
                return Err(Error::Invalid(format!(
                    "link.insecure_unauthenticated: listen {} is reachable beyond this machine, and anyone reaching it could start a recovery: only loopback may go unauthenticated",
                    self.listen
                )));
            }
            tracing::error!(
                listen = %self.listen,
                "link.insecure_unauthenticated: the recover stream is unauthenticated, any local process may force down, disable and evacuate a host"
            );
            return Ok(None);
        }
        if self.link_token_in_plaintext() {
            tracing::warn!(
                listen = %self.listen,
                "the link token crosses the network in plaintext: set tls.cert_file and tls.key_file (or terminate tls in a mesh)"
            );
        }
        let token = match &self.link.token_file {
            Some(path) => Secret::read_file("link.token_file", path),
            None if mutual_tls => return Ok(None),
            None => {
                let path = instanceha_runtime::state::link_token_file(self.state_dir.as_deref());
                if !make && !path.exists() {
                    return Ok(None);
                }
                Secret::read_or_create_file("link.token_file", &path)
            }
        };
        token.map(Some).map_err(|e| Error::Invalid(e.to_string()))
    }

    /// Whether the link token (`link.token_file`) reaches the engine in
    /// plaintext across the network: TLS off on an address beyond
    /// loopback. Warned about at start.
    pub fn link_token_in_plaintext(&self) -> bool {
        self.link.token_file.is_some() && !self.tls.enabled() && !self.listen.ip().is_loopback()
    }
}

#[cfg(test)]
mod tests {
    use instanceha_runtime::tls::ServerTlsSettings;

    use super::*;

    #[test]
    fn the_link_is_authenticated_wherever_it_listens() {
        let dir = tempfile::tempdir().unwrap();
        for listen in ["0.0.0.0:15870", "127.0.0.1:15870"] {
            let mut settings = Settings {
                listen: listen.parse().unwrap(),
                state_dir: Some(dir.path().join("state")),
                ..Settings::default()
            };
            // No token file: the state directory's, made once, private.
            let made = settings.link_token().unwrap().expect("a token");
            let path = dir.path().join("state/link-token");
            assert_eq!(instanceha_runtime::private::mode_of(&path).unwrap(), 0o600);
            assert_eq!(settings.link_token().unwrap(), Some(made));
            // Mutual TLS alone guards it; a server certificate does not.
            settings.tls.cert_file = Some(dir.path().join("c.pem"));
            settings.tls.key_file = Some(dir.path().join("k.pem"));
            assert!(settings.link_token().unwrap().is_some(), "{listen}");
            settings.tls.client_ca_file = Some(dir.path().join("ca.pem"));
            assert!(settings.link_token().unwrap().is_none(), "{listen}");
            settings.tls = ServerTlsSettings::default();
            // A configured file must exist.
            settings.link.token_file = Some(dir.path().join("missing"));
            let err = settings.link_token().unwrap_err().to_string();
            assert!(err.contains("link.token_file"), "{err}");
            let path = dir.path().join("token");
            std::fs::write(&path, "s3cret\n").unwrap();
            settings.link.token_file = Some(path);
            assert!(settings.link_token().unwrap().unwrap().matches(b"s3cret"));
        }
    }

    #[test]
    fn only_loopback_may_be_unauthenticated_and_only_when_told() {
        let mut settings = Settings::default();
        settings.link.insecure_unauthenticated = true;
        assert!(settings.link_token().unwrap().is_none());
        settings.listen = "0.0.0.0:15870".parse().unwrap();
        let err = settings.link_token().unwrap_err().to_string();
        assert!(err.contains("link.insecure_unauthenticated"), "{err}");
        settings.listen = "127.0.0.1:15870".parse().unwrap();
        settings.link.token_file = Some(PathBuf::from("/etc/instanceha/link/token"));
        assert!(settings.link_token().is_err(), "contradictory settings");
    }

    #[test]
    fn a_link_token_beyond_loopback_without_tls_is_in_plaintext() {
        let mut settings = Settings {
            listen: "0.0.0.0:15870".parse().unwrap(),
            ..Settings::default()
        };
        settings.link.token_file = Some(PathBuf::from("/etc/instanceha/link/token"));
        assert!(settings.link_token_in_plaintext());
        settings.listen = "[fd00::5]:15870".parse().unwrap();
        assert!(settings.link_token_in_plaintext());
        // With TLS, on loopback, or without a token: nothing to warn about.
        let mut with_tls = settings.clone();
        with_tls.tls.cert_file = Some("/etc/instanceha/tls/engine.pem".into());
        with_tls.tls.key_file = Some("/etc/instanceha/tls/engine.key".into());
        assert!(!with_tls.link_token_in_plaintext());
        for loopback in ["127.0.0.1:15870", "[::1]:15870"] {
            let mut on_loopback = settings.clone();
            on_loopback.listen = loopback.parse().unwrap();
            assert!(!on_loopback.link_token_in_plaintext(), "{loopback}");
        }
        settings.link.token_file = None;
        assert!(!settings.link_token_in_plaintext());
    }
}
