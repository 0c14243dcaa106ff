//! Secrets (the API token, BMC passwords) read from a file or an
//! environment variable, held in a type that never prints them.

use std::fmt;
use std::path::Path;

use crate::config::CredentialSource;

/// A secret value: `Debug` and `Display` print `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Why a secret could not be read. Never carries the value.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{setting}: cannot read {path}: {source}")]
    File {
        setting: String,
        path: String,
        source: std::io::Error,
    },
    #[error("{setting}: the environment variable {name} is not set")]
    Env { setting: String, name: String },
    #[error("{setting}: {what} is empty")]
    Empty { setting: String, what: String },
}

/// Reads a secret from `path`, without its trailing line break.
pub fn from_file(setting: &str, path: &Path) -> Result<Secret, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::File {
        setting: setting.to_owned(),
        path: path.display().to_string(),
        source,
    })?;
    let value = text.trim_end_matches(['\n', '\r']);
    if value.is_empty() {
        return Err(Error::Empty {
            setting: setting.to_owned(),
            what: path.display().to_string(),
        });
    }
    Ok(Secret::new(value))
}

/// Reads a secret from the environment variable `name`.
pub fn from_env(setting: &str, name: &str) -> Result<Secret, Error> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Ok(Secret::new(value)),
        Ok(_) => Err(Error::Empty {
            setting: setting.to_owned(),
            what: name.to_owned(),
        }),
        Err(_) => Err(Error::Env {
            setting: setting.to_owned(),
            name: name.to_owned(),
        }),
    }
}

/// The secret `source` names (its file first), or `None` when it names
/// nothing.
pub fn read(setting: &str, source: &CredentialSource) -> Result<Option<Secret>, Error> {
    if let Some(path) = &source.file {
        return from_file(&format!("{setting}.file"), path).map(Some);
    }
    if let Some(name) = &source.env {
        return from_env(&format!("{setting}.env"), name).map(Some);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?} {secret}"), "[redacted] [redacted]");
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn files_lose_their_line_break_and_errors_name_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("password");
        std::fs::write(&path, "s3cret\n").unwrap();
        let source = CredentialSource {
            file: Some(path),
            env: None,
        };
        assert_eq!(
            read("x.password", &source).unwrap().unwrap().expose(),
            "s3cret"
        );
        let missing = CredentialSource {
            file: Some(dir.path().join("nope")),
            env: None,
        };
        let err = read("x.password", &missing).unwrap_err().to_string();
        assert!(err.starts_with("x.password.file: cannot read"), "{err}");
        let unset = CredentialSource {
            file: None,
            env: Some("INSTANCEHA_AGENT_TEST_SURELY_UNSET".to_owned()),
        };
        let err = read("x.password", &unset).unwrap_err().to_string();
        assert!(err.contains("is not set"), "{err}");
        assert!(read("x", &CredentialSource::default()).unwrap().is_none());
    }
}
