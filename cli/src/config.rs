//! Connection and output settings: command-line flags win over environment
//! variables (clap reads both), which win over the configuration file
//! (`--config`, else `$XDG_CONFIG_HOME/instanceha/cli.toml`, else
//! `~/.config/instanceha/cli.toml`), which wins over the defaults. Every
//! error names the setting and where it came from; none shows the token.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ValueEnum;
use serde::Deserialize;

use crate::output::Format;

pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:15869";
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A bearer token: the one secret type, which never appears in `Debug`
/// output or messages.
pub type Token = instanceha_runtime::secret::Secret;

/// What the flags and environment variables said (`None`: not given).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub endpoint: Option<String>,
    pub token: Option<Token>,
    pub format: Option<Format>,
    pub timeout: Option<Duration>,
    /// An explicit configuration file; it must exist.
    pub config: Option<PathBuf>,
}

/// The settings a command runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub endpoint: String,
    /// No flag, variable or file named the endpoint: a Keystone login may
    /// take it from the catalog (`login`).
    pub endpoint_is_default: bool,
    pub token: Option<Token>,
    pub format: Format,
    pub timeout: Duration,
    /// A CA to trust for an `https://` endpoint besides the system's roots
    /// (`--os-cacert`, `OS_CACERT` or the cloud's `cacert`).
    pub ca_file: Option<PathBuf>,
}

/// The configuration file's keys, all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    endpoint: Option<String>,
    token: Option<String>,
    format: Option<String>,
    timeout: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("configuration file {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("{setting} (from {origin}): {reason}")]
    Invalid {
        setting: &'static str,
        origin: String,
        reason: String,
    },
}

/// Where the configuration file is looked for when `--config` is not given.
pub fn default_path(xdg_config_home: Option<PathBuf>, home: Option<PathBuf>) -> Option<PathBuf> {
    let base = xdg_config_home
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| h.join(".config")))?;
    Some(base.join("instanceha").join("cli.toml"))
}

/// The default path from this process's environment.
pub fn default_path_from_env() -> Option<PathBuf> {
    default_path(
        std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

impl Settings {
    /// Layers `overrides` over the file (`overrides.config`, else
    /// `default_file` if it exists) over the defaults.
    pub fn load(overrides: Overrides, default_file: Option<&Path>) -> Result<Self, Error> {
        let (file, path) = match (&overrides.config, default_file) {
            (Some(path), _) => (read_file(path)?, Some(path.clone())),
            (None, Some(path)) if path.is_file() => (read_file(path)?, Some(path.to_owned())),
            (None, _) => (FileSettings::default(), None),
        };
        let file_origin = || match &path {
            Some(path) => path.display().to_string(),
            None => "the configuration file".to_owned(),
        };

        let endpoint_is_default = overrides.endpoint.is_none() && file.endpoint.is_none();
        let (endpoint, origin) = match (overrides.endpoint, file.endpoint) {
            (Some(flag), _) => (flag, "--endpoint or INSTANCEHA_CLI_ENDPOINT".to_owned()),
            (None, Some(from_file)) => (from_file, file_origin()),
            (None, None) => (DEFAULT_ENDPOINT.to_owned(), "the default".to_owned()),
        };
        let endpoint = check_endpoint(endpoint).map_err(|reason| Error::Invalid {
            setting: "endpoint",
            origin,
            reason,
        })?;

        let token = match (overrides.token, file.token) {
            (Some(token), _) => Some(token),
            (None, Some(secret)) => Some(Token::new(secret)),
            (None, None) => None,
        };
        let token = token.filter(|t| !t.expose().is_empty());
        if let Some(token) = &token {
            check_token(token).map_err(|reason| Error::Invalid {
                setting: "token",
                origin: "--token, INSTANCEHA_CLI_TOKEN or the configuration file".to_owned(),
                reason,
            })?;
        }

        let format = match (overrides.format, file.format) {
            (Some(format), _) => format,
            (None, Some(name)) => Format::from_str(&name, true).map_err(|_| Error::Invalid {
                setting: "format",
                origin: file_origin(),
                reason: format!("{name:?} is not one of table, json, yaml, value or csv"),
            })?,
            (None, None) => Format::Table,
        };

        let timeout = match (overrides.timeout, file.timeout) {
            (Some(timeout), _) => timeout,
            (None, Some(text)) => parse_timeout(&text).map_err(|reason| Error::Invalid {
                setting: "timeout",
                origin: file_origin(),
                reason,
            })?,
            (None, None) => DEFAULT_TIMEOUT,
        };

        Ok(Self {
            endpoint,
            endpoint_is_default,
            token,
            format,
            timeout,
            ca_file: None,
        })
    }
}

fn read_file(path: &Path) -> Result<FileSettings, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| Error::Parse {
        path: path.to_owned(),
        reason: e.message().to_owned()
            + &e.span()
                .map(|span| format!(" (at byte {})", span.start))
                .unwrap_or_default(),
    })
}

/// A duration such as `30s`, `2m` or `1m 30s`, more than zero.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration such as 30s or 2m ({e})"))?;
    if duration.is_zero() {
        return Err("must be more than zero".to_owned());
    }
    Ok(duration)
}

/// An `http://HOST:PORT` or `https://HOST:PORT` URL, with a hint for the
/// usual mistakes.
pub fn check_endpoint(endpoint: String) -> Result<String, String> {
    let trimmed = endpoint.trim();
    if trimmed.is_empty() {
        return Err("must not be empty (for example http://127.0.0.1:15869)".to_owned());
    }
    if !trimmed.starts_with("http://") && !trimmed.starts_with("https://") {
        return Err(format!(
            "{trimmed:?} is not a URL; write it as http://HOST:PORT (for example \
             http://{trimmed})"
        ));
    }
    match trimmed.parse::<tonic::transport::Uri>() {
        Ok(uri) if uri.host().is_some_and(|h| !h.is_empty()) => Ok(trimmed.to_owned()),
        _ => Err(format!("{trimmed:?} is not a URL such as http://HOST:PORT")),
    }
}

/// The token must fit in an HTTP header.
fn check_token(token: &Token) -> Result<(), String> {
    if token
        .expose()
        .bytes()
        .all(|b| b.is_ascii_graphic() || b == b' ')
    {
        Ok(())
    } else {
        Err("contains characters that cannot be sent in a header (only printable ASCII)".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let path = dir.path().join("cli.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn defaults_without_a_file() {
        let settings = Settings::load(Overrides::default(), None).unwrap();
        assert_eq!(settings.endpoint, DEFAULT_ENDPOINT);
        assert!(settings.endpoint_is_default);
        assert_eq!(settings.token, None);
        assert_eq!(settings.format, Format::Table);
        assert_eq!(settings.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn a_missing_default_file_is_fine_but_a_missing_explicit_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.toml");
        assert!(Settings::load(Overrides::default(), Some(&missing)).is_ok());
        let err = Settings::load(
            Overrides {
                config: Some(missing.clone()),
                ..Overrides::default()
            },
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("nope.toml"), "{err}");
    }

    #[test]
    fn the_file_wins_over_defaults_and_flags_win_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "endpoint = \"http://10.0.0.1:1\"\ntoken = \"from-file\"\nformat = \"yaml\"\ntimeout = \"5s\"\n",
        );
        let from_file = Settings::load(Overrides::default(), Some(&path)).unwrap();
        assert_eq!(from_file.endpoint, "http://10.0.0.1:1");
        assert!(!from_file.endpoint_is_default);
        assert_eq!(from_file.token, Some(Token::new("from-file")));
        assert_eq!(from_file.format, Format::Yaml);
        assert_eq!(from_file.timeout, Duration::from_secs(5));

        let flags = Overrides {
            endpoint: Some("http://10.0.0.2:2".into()),
            token: Some(Token::new("from-flag")),
            format: Some(Format::Json),
            timeout: Some(Duration::from_secs(7)),
            config: Some(path),
        };
        let settings = Settings::load(flags, None).unwrap();
        assert_eq!(settings.endpoint, "http://10.0.0.2:2");
        assert_eq!(settings.token, Some(Token::new("from-flag")));
        assert_eq!(settings.format, Format::Json);
        assert_eq!(settings.timeout, Duration::from_secs(7));
    }

    #[test]
    fn errors_name_the_setting_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        for (text, needle) in [
            ("format = \"xml\"\n", "format"),
            ("timeout = \"soon\"\n", "timeout"),
            ("timeout = \"0s\"\n", "timeout"),
            ("endpoint = \"127.0.0.1:15869\"\n", "http://127.0.0.1:15869"),
            ("endpont = \"http://x:1\"\n", "endpont"),
            ("token = \"caf\u{e9}\"\n", "token"),
        ] {
            let path = write(&dir, text);
            let err = Settings::load(Overrides::default(), Some(&path)).unwrap_err();
            let message = err.to_string();
            assert!(message.contains(needle), "{text}: {message}");
            assert!(
                !message.contains("caf\u{e9}"),
                "the token leaked: {message}"
            );
        }
        let path = write(&dir, "format = \"xml\"\n");
        let err = Settings::load(Overrides::default(), Some(&path)).unwrap_err();
        assert!(err.to_string().contains("cli.toml"), "{err}");
    }

    #[test]
    fn endpoints_must_be_http_or_https_urls() {
        assert!(check_endpoint("http://127.0.0.1:15869".into()).is_ok());
        assert!(check_endpoint("http://api.example:80".into()).is_ok());
        assert!(check_endpoint("https://api.example:15869".into()).is_ok());
        assert!(check_endpoint("grpc://api.example".into()).is_err());
        assert!(check_endpoint("".into()).is_err());
        assert!(check_endpoint("http://".into()).is_err());
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let settings = Settings {
            endpoint: DEFAULT_ENDPOINT.into(),
            endpoint_is_default: true,
            token: Some(Token::new("s3cret")),
            format: Format::Table,
            timeout: DEFAULT_TIMEOUT,
            ca_file: None,
        };
        assert!(!format!("{settings:?}").contains("s3cret"));
    }

    #[test]
    fn the_default_path_prefers_xdg_config_home() {
        assert_eq!(
            default_path(Some("/x".into()), Some("/home/u".into())),
            Some(PathBuf::from("/x/instanceha/cli.toml"))
        );
        assert_eq!(
            default_path(None, Some("/home/u".into())),
            Some(PathBuf::from("/home/u/.config/instanceha/cli.toml"))
        );
        // A relative XDG_CONFIG_HOME is ignored, as the spec says.
        assert_eq!(
            default_path(Some("rel".into()), Some("/home/u".into())),
            Some(PathBuf::from("/home/u/.config/instanceha/cli.toml"))
        );
        assert_eq!(default_path(None, None), None);
    }
}
