//! Configuration of `instanceha-api`: defaults, then a TOML file, then
//! `INSTANCEHA_*` environment variables (nested keys joined by `__`, e.g.
//! `INSTANCEHA_DATABASE__URL`), then command-line flags. Every error names
//! the setting that is wrong.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use instanceha_runtime::connections::ConnectionSettings;
use instanceha_runtime::environment::{self, LoadError, SettingsEnvironment};
use instanceha_runtime::telemetry::{LogSettings, TelemetrySettings};
use serde::{Deserialize, Serialize};

use instanceha_runtime::shutdown::ShutdownSettings;
use instanceha_runtime::tls::ServerTlsSettings;

use crate::auth::AuthSettings;
use crate::console::ConsoleSettings;
use crate::dispatch::DispatchSettings;
use crate::rest::RestSettings;
use crate::service::IntakeSettings;
use crate::store::DatabaseSettings;

/// Everything `instanceha-api` can be told.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Where the public gRPC API (`instanceha.v1`, health, reflection)
    /// listens.
    pub listen: SocketAddr,
    pub database: DatabaseSettings,
    pub intake: IntakeSettings,
    pub dispatch: DispatchSettings,
    pub auth: AuthSettings,
    /// The Masakari-compatible REST API.
    pub rest: RestSettings,
    /// The web console, on the REST listener.
    pub console: ConsoleSettings,
    pub log: LogSettings,
    pub telemetry: TelemetrySettings,
    /// TLS of the public APIs: gRPC and, with the same certificate and
    /// client CA, the REST listener.
    pub tls: ServerTlsSettings,
    pub limits: LimitSettings,
    /// The connection budget of every port (gRPC, REST, metrics).
    pub connections: ConnectionSettings,
    pub shutdown: ShutdownSettings,
    /// Where the API finds the engine link's token when
    /// `dispatch.engine_token_file` is not set (`STATE_DIR/link-token`,
    /// made on first start by whichever of the API and the engine starts
    /// first). Default: `$STATE_DIRECTORY`, `$XDG_STATE_HOME/instanceha`,
    /// `~/.local/state/instanceha` or `/var/lib/instanceha`.
    pub state_dir: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 15869)),
            database: DatabaseSettings::default(),
            intake: IntakeSettings::default(),
            dispatch: DispatchSettings::default(),
            auth: AuthSettings::default(),
            rest: RestSettings::default(),
            console: ConsoleSettings::default(),
            log: LogSettings::default(),
            telemetry: TelemetrySettings::default(),
            tls: ServerTlsSettings::default(),
            limits: LimitSettings::default(),
            connections: ConnectionSettings::default(),
            shutdown: ShutdownSettings::default(),
            state_dir: None,
        }
    }
}

/// `[limits]`: protection of the public API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    /// A call not answered within this is cancelled (streams only until
    /// their first response).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Requests per second per authenticated caller, and again for its
    /// failure reports (0: no limit); a caller may burst up to `burst`.
    /// Without authentication, per source address.
    pub requests_per_second: f64,
    pub burst: u32,
    /// Requests per second per source address for calls that could not be
    /// authenticated (and reflection), bursting to `anonymous_burst`.
    pub anonymous_requests_per_second: f64,
    pub anonymous_burst: u32,
    /// The largest request accepted, in bytes.
    pub max_message_bytes: usize,
    /// Concurrent `WatchNotification` streams per caller (user or token
    /// name; without authentication, per address) and in all.
    pub max_watches_per_caller: usize,
    pub max_watches: usize,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
            requests_per_second: 1000.0,
            burst: 2000,
            anonymous_requests_per_second: 20.0,
            anonymous_burst: 40,
            max_message_bytes: crate::grpc::MAX_MESSAGE_BYTES,
            max_watches_per_caller: 100,
            max_watches: 2000,
        }
    }
}

/// Settings given as command-line flags; they win over everything else.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub database_url: Option<String>,
    pub log_format: Option<String>,
    pub engine_url: Option<String>,
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration file {path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("configuration: {0}")]
    Invalid(String),
}

impl From<LoadError> for Error {
    fn from(err: LoadError) -> Self {
        match err {
            LoadError::File { path, reason } => Self::File { path, reason },
            LoadError::Invalid(reason) => Self::Invalid(reason),
        }
    }
}

impl Settings {
    /// Reads the settings: defaults, `file` (if given), `INSTANCEHA_*`
    /// variables, then `overrides`.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, Error> {
        let mut flags: Vec<(&str, String)> = Vec::new();
        if let Some(listen) = overrides.listen {
            flags.push(("listen", listen.to_string()));
        }
        if let Some(url) = &overrides.database_url {
            flags.push(("database.url", url.clone()));
        }
        if let Some(format) = &overrides.log_format {
            flags.push(("log.format", format.clone()));
        }
        if let Some(url) = &overrides.engine_url {
            flags.push(("dispatch.engine_url", url.clone()));
        }
        let settings: Settings = environment::load(&env_settings(), file, &flags)?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks what types alone cannot.
    pub fn validate(&self) -> Result<(), Error> {
        let url = &self.database.url;
        if ![
            "sqlite:",
            "postgres://",
            "postgresql://",
            "mysql://",
            "mariadb://",
        ]
        .iter()
        .any(|scheme| url.starts_with(scheme))
        {
            return Err(Error::Invalid(format!(
                "database.url: {:?} is not a sqlite://, postgres:// or mysql:// URL",
                crate::store::redact_url(url)
            )));
        }
        self.dispatch.validate().map_err(Error::Invalid)?;
        self.telemetry.validate().map_err(Error::Invalid)?;
        self.console.validate().map_err(Error::Invalid)?;
        if self.limits.max_watches == 0 || self.limits.max_watches_per_caller == 0 {
            return Err(Error::Invalid(
                "limits.max_watches and limits.max_watches_per_caller: must be 1 or more"
                    .to_owned(),
            ));
        }
        if self.limits.anonymous_requests_per_second.is_nan()
            || self.limits.anonymous_requests_per_second < 0.0
        {
            return Err(Error::Invalid(
                "limits.anonymous_requests_per_second: must be 0 (no anonymous calls) or more"
                    .to_owned(),
            ));
        }
        if self.limits.requests_per_second.is_nan() || self.limits.requests_per_second < 0.0 {
            return Err(Error::Invalid(
                "limits.requests_per_second: must be 0 (no limit) or more".to_owned(),
            ));
        }
        if self.limits.max_message_bytes < 1024 {
            return Err(Error::Invalid(
                "limits.max_message_bytes: must be at least 1024".to_owned(),
            ));
        }
        if self.limits.request_timeout.is_zero() {
            return Err(Error::Invalid(
                "limits.request_timeout: must be more than 0".to_owned(),
            ));
        }
        self.connections
            .validate("connections")
            .map_err(Error::Invalid)?;
        if let Some((listener, addr)) = self.open_beyond_loopback() {
            return Err(Error::Invalid(format!(
                "auth.mode = \"none\" makes every caller admin, and {listener} listens on {addr}, reachable beyond this machine: use auth.mode = \"keystone\" or \"static\", or listen on loopback (127.0.0.1 or ::1)"
            )));
        }
        if let Some(url) = &self.rest.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(Error::Invalid(format!(
                "rest.public_url: {url:?} is not an http:// or https:// URL"
            )));
        }
        if self.database.max_connections == 0 {
            return Err(Error::Invalid(
                "database.max_connections: must be at least 1".to_owned(),
            ));
        }
        Ok(())
    }
}

impl Settings {
    /// A listener (`listen`, `rest.listen`) beyond loopback while
    /// authentication is off: refused, as the engine refuses an
    /// unauthenticated link beyond loopback.
    pub fn open_beyond_loopback(&self) -> Option<(&'static str, SocketAddr)> {
        if self.auth.mode != crate::auth::AuthMode::None {
            return None;
        }
        std::iter::once(("listen", self.listen))
            .chain(
                self.rest
                    .enabled
                    .then_some(("rest.listen", self.rest.listen)),
            )
            .find(|(_, addr)| !addr.ip().is_loopback())
    }

    /// The engine link's token file: `dispatch.engine_token_file`, else
    /// `link-token` in the state directory.
    pub fn engine_token_file(&self) -> PathBuf {
        self.dispatch.engine_token_file.clone().unwrap_or_else(|| {
            instanceha_runtime::state::link_token_file(self.state_dir.as_deref())
        })
    }
}

/// The prefix of the environment variables that set settings:
/// `INSTANCEHA_DATABASE__URL` sets `database.url`.
const ENV_PREFIX: &str = "INSTANCEHA_";

/// The `INSTANCEHA_*` variables: only those naming a settings section
/// (`listen`, `log`, ...) set something; [`ignored_variables`] lists the
/// others (a typo, another tool's variable) so that they are reported.
fn env_settings() -> SettingsEnvironment {
    SettingsEnvironment::new(ENV_PREFIX, &Settings::default(), &["ENGINE_", "CLI_"])
}

/// The `INSTANCEHA_*` variables that are set but name no setting, so were
/// ignored (the configuration file's own `INSTANCEHA_CONFIG` is not listed).
pub fn ignored_variables() -> Vec<String> {
    env_settings().ignored_variables()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_variables_naming_a_section_are_settings() {
        let env = env_settings();
        let sections = env.sections();
        for section in [
            "listen",
            "log",
            "telemetry",
            "tls",
            "database",
            "limits",
            "shutdown",
        ] {
            assert!(
                sections.iter().any(|s| s == section),
                "{section} in {sections:?}"
            );
        }
        assert!(env.is_setting("log.format"));
        assert!(env.is_setting("LISTEN"));
        assert!(!env.is_setting("test_postgres_url"));
        assert!(!env.is_setting("logg.format"));
        assert!(!env.is_setting("config"));
    }

    #[test]
    fn the_cli_and_engine_variables_are_not_reported_as_ignored() {
        // Exported in the same shell, the CLI's and the engine's variables
        // are not the API's typos; a typo still is.
        let names = [
            "INSTANCEHA_CLI_TOKEN",
            "INSTANCEHA_CLI_ENDPOINT",
            "INSTANCEHA_CLI_CONFIG",
            "INSTANCEHA_ENGINE_LISTEN",
            "INSTANCEHA_CONFIG",
            "INSTANCEHA_LOG__FORMAT",
            "INSTANCEHA_TOKEN",
        ]
        .map(str::to_owned);
        assert_eq!(
            env_settings().ignored_among(names.into_iter()),
            ["INSTANCEHA_TOKEN"]
        );
    }

    #[test]
    fn defaults_are_valid() {
        Settings::default().validate().unwrap();
    }

    #[test]
    fn no_authentication_is_refused_beyond_loopback() {
        let mut settings = Settings::default();
        settings.auth.mode = crate::auth::AuthMode::None;
        settings.validate().expect("on loopback it is allowed");
        settings.listen = "0.0.0.0:15869".parse().unwrap();
        let err = settings.validate().unwrap_err().to_string();
        assert!(err.contains("auth.mode") && err.contains("listen"), "{err}");
        settings.listen = "[::1]:15869".parse().unwrap();
        settings.rest.listen = "192.0.2.7:15868".parse().unwrap();
        let err = settings.validate().unwrap_err().to_string();
        assert!(err.contains("rest.listen"), "{err}");
        settings.rest.enabled = false;
        settings.validate().expect("REST off, gRPC on loopback");
        settings.auth.mode = crate::auth::AuthMode::Static;
        settings.rest.enabled = true;
        assert!(settings.open_beyond_loopback().is_none());
    }

    #[test]
    fn the_example_file_is_the_defaults() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("instanceha-api.example.toml");
        let settings = Settings::load(Some(&path), &Overrides::default()).unwrap();
        assert_eq!(settings, Settings::default());
    }

    #[test]
    fn a_file_and_overrides_are_layered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9000\"\n[database]\nurl = \"sqlite:///tmp/x.db\"\n[intake]\nduplicate_window = \"2m\"\n",
        )
        .unwrap();
        let overrides = Overrides {
            listen: Some("127.0.0.1:9001".parse().unwrap()),
            ..Overrides::default()
        };
        let settings = Settings::load(Some(&path), &overrides).unwrap();
        assert_eq!(settings.listen.port(), 9001);
        assert_eq!(settings.database.url, "sqlite:///tmp/x.db");
        assert_eq!(settings.intake.duplicate_window, Duration::from_secs(120));
    }

    #[test]
    fn errors_name_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.toml");
        std::fs::write(&path, "[intake]\nduplicate_window = \"soon\"\n").unwrap();
        let err = Settings::load(Some(&path), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("intake.duplicate_window"), "{err}");

        std::fs::write(&path, "[database]\nurl = \"oracle://x\"\n").unwrap();
        let err = Settings::load(Some(&path), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("database.url"), "{err}");

        std::fs::write(&path, "[databse]\nurl = \"sqlite://x\"\n").unwrap();
        let err = Settings::load(Some(&path), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("databse"), "{err}");

        let missing = dir.path().join("missing.toml");
        assert!(Settings::load(Some(&missing), &Overrides::default()).is_err());
    }
}
