//! Static tokens for small sites and the demo: a TOML file of token names,
//! the SHA-256 digests of the tokens (never the tokens themselves) and
//! their roles.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{AuthError, ConfigError, Principal, Role};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    token: Vec<TokenEntry>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    sha256: String,
    roles: Vec<Role>,
}

/// The hex SHA-256 digest of a token, as the file stores it.
pub fn token_sha256(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Clone, Debug)]
pub struct StaticTokens {
    entries: Vec<([u8; 32], String, BTreeSet<Role>)>,
}

impl StaticTokens {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let fail = |reason: String| ConfigError::TokensFile {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        Self::parse(&text).map_err(fail)
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let file: TokensFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut entries = Vec::new();
        for (i, entry) in file.token.into_iter().enumerate() {
            let digest = decode_digest(&entry.sha256).ok_or_else(|| {
                format!(
                    "token[{i}] ({}): sha256 must be 64 hexadecimal digits",
                    entry.name
                )
            })?;
            if entry.roles.is_empty() {
                return Err(format!(
                    "token[{i}] ({}): roles must not be empty",
                    entry.name
                ));
            }
            entries.push((digest, entry.name, entry.roles.into_iter().collect()));
        }
        Ok(Self { entries })
    }

    /// Builds the set from clear tokens (for the demo and tests).
    pub fn from_tokens(tokens: &[(&str, &str, &[Role])]) -> Self {
        Self {
            entries: tokens
                .iter()
                .map(|(name, token, roles)| {
                    (
                        Sha256::digest(token.as_bytes()).into(),
                        (*name).to_owned(),
                        roles.iter().copied().collect(),
                    )
                })
                .collect(),
        }
    }

    pub fn principal(&self, token: &str) -> Result<Principal, AuthError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Compare every entry in full, so timing says nothing about which.
        let mut found = None;
        for (stored, name, roles) in &self.entries {
            let same = stored
                .iter()
                .zip(digest.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            if same {
                found = Some((name, roles));
            }
        }
        let (name, roles) = found.ok_or(AuthError::Invalid)?;
        Ok(Principal {
            name: name.clone(),
            project: None,
            roles: roles.clone(),
        })
    }
}

fn decode_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(chunk).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_digests() {
        let text = format!(
            "[[token]]\nname = \"hostmonitor\"\nsha256 = \"{}\"\nroles = [\"monitoring_agent\"]\n",
            token_sha256("s3cret")
        );
        let tokens = StaticTokens::parse(&text).unwrap();
        let p = tokens.principal("s3cret").unwrap();
        assert_eq!(p.name, "hostmonitor");
        assert!(p.roles.contains(&Role::MonitoringAgent));
        assert_eq!(tokens.principal("guess"), Err(AuthError::Invalid));
    }

    #[test]
    fn bad_files_name_the_problem() {
        let err =
            StaticTokens::parse("[[token]]\nname = \"x\"\nsha256 = \"zz\"\nroles = [\"admin\"]\n")
                .unwrap_err();
        assert!(err.contains("token[0] (x): sha256"), "{err}");
        let err =
            StaticTokens::parse("[[token]]\nname = \"x\"\nsha256 = \"00\"\nroles = [\"king\"]\n")
                .unwrap_err();
        assert!(err.contains("king"), "{err}");
    }
}
