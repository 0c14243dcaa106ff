//! The one secret type: passwords, application-credential secrets and API
//! tokens. Held in `secrecy`'s `SecretString` (wiped from memory when
//! dropped, never printed by `Debug`), with the serde and equality the
//! settings need. Read it only where it is sent, with [`Secret::expose`],
//! and compare what a caller presents with [`Secret::matches`] (constant
//! time). Shared secrets live in files (a mounted Kubernetes Secret):
//! [`Secret::read_file`].

use std::fmt;
use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret as _, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use subtle::ConstantTimeEq as _;

/// A secret file that cannot be used; the message names the setting.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    #[error("{setting}: cannot read {path}: {source}")]
    Read {
        setting: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{setting}: cannot create {path}: {source}")]
    Create {
        setting: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{setting}: {path} is empty")]
    Empty { setting: String, path: PathBuf },
}

#[derive(Clone, Default)]
pub struct Secret(SecretString);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    /// The secret itself, for the header or body that carries it.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }

    /// The content of the file `setting` names, without the whitespace
    /// around it (the newline an editor or `kubectl` leaves); an empty file
    /// is refused, it would be a secret anyone knows.
    pub fn read_file(setting: &str, path: &Path) -> Result<Self, SecretFileError> {
        let content = std::fs::read_to_string(path).map_err(|source| SecretFileError::Read {
            setting: setting.to_owned(),
            path: path.to_owned(),
            source,
        })?;
        let secret = Self::new(content.trim());
        if secret.is_empty() {
            return Err(SecretFileError::Empty {
                setting: setting.to_owned(),
                path: path.to_owned(),
            });
        }
        Ok(secret)
    }

    /// The token in `path` (see [`read_file`](Self::read_file)); when no
    /// file is there, a new random token (256 bits, hex) is written first,
    /// 0600 in a 0700 directory ([`crate::private::create_new`]): the
    /// engine and the API of one machine both call this on the same file,
    /// whichever starts first makes it, and both then read the same token.
    pub fn read_or_create_file(setting: &str, path: &Path) -> Result<Self, SecretFileError> {
        if !path.exists() {
            let token: [u8; 32] = rand::random();
            let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
            crate::private::create_new(path, format!("{hex}\n").as_bytes()).map_err(|source| {
                SecretFileError::Create {
                    setting: setting.to_owned(),
                    path: path.to_owned(),
                    source,
                }
            })?;
        }
        Self::read_file(setting, path)
    }

    /// Whether `presented` is this secret, in time that does not depend on
    /// where they differ (only on their lengths).
    pub fn matches(&self, presented: &[u8]) -> bool {
        self.expose().as_bytes().ct_eq(presented).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

/// Settings are serialized to build their defaults and examples: a secret
/// is written as `<redacted>`, never as itself.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_empty() {
            serializer.serialize_str("")
        } else {
            serializer.serialize_str("<redacted>")
        }
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_itself() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "<redacted>");
        assert_eq!(secret.expose(), "hunter2");
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"<redacted>\"");
        let read: Secret = serde_json::from_str("\"s3cret\"").unwrap();
        assert_eq!(read, Secret::new("s3cret"));
    }

    #[test]
    fn a_secret_file_is_read_trimmed_and_an_empty_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        let secret = Secret::read_file("link.token_file", &path).unwrap();
        assert!(secret.matches(b"s3cret"));
        assert!(!secret.matches(b"s3cret\n"));
        assert!(!secret.matches(b"s3creT"));
        assert!(!secret.matches(b""));
        std::fs::write(&path, " \n").unwrap();
        let err = Secret::read_file("link.token_file", &path).unwrap_err();
        assert!(err.to_string().contains("link.token_file"), "{err}");
        let err = Secret::read_file("link.token_file", &dir.path().join("none")).unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
    }

    #[test]
    fn a_missing_token_is_made_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/link-token");
        let made = Secret::read_or_create_file("link.token_file", &path).unwrap();
        assert_eq!(made.expose().len(), 64);
        let again = Secret::read_or_create_file("dispatch.engine_token_file", &path).unwrap();
        assert_eq!(made, again, "the second reader gets the same token");
        assert_eq!(crate::private::mode_of(&path).unwrap(), 0o600);
        assert_eq!(
            crate::private::mode_of(&dir.path().join("state")).unwrap(),
            0o700
        );
    }
}
