//! Configuration of `instanceha-engine`: defaults, a TOML file,
//! `INSTANCEHA_ENGINE_*` variables (nested keys joined by `__`) and flags.
//! OpenStack credentials and TLS come from `[openstack]`, from a
//! `clouds.yaml` cloud (`[openstack] cloud = "name"` or `OS_CLOUD`, with its
//! `secure.yaml` part), or from `OS_*`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use instanceha_runtime::connections::ConnectionSettings;
use instanceha_runtime::environment::{self, LoadError, SettingsEnvironment};
use instanceha_runtime::shutdown::ShutdownSettings;
use instanceha_runtime::telemetry::{LogSettings, TelemetrySettings};
use instanceha_runtime::tls::ServerTlsSettings;
use serde::{Deserialize, Serialize};

mod link;
mod workflows;

pub use link::LinkSettings;
pub use workflows::{
    HostFailureSettings, InstanceFailureSettings, ProcessFailureSettings, RecoverySettings,
    SegmentSelection,
};

use crate::recovery::WorkflowSettings;
use openstack_client::ClientSettings;
use openstack_client::clouds::load_cloud_from_env;
use openstack_client::credentials::{self, AuthSettings, Credentials};
use openstack_client::microversion::Microversion;
use openstack_client::retry::RetryPolicy;
use openstack_client::tls::TlsSettings;

/// Everything `instanceha-engine` can be told.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Where the `instanceha.engine.v1.Engine` service listens.
    pub listen: SocketAddr,
    pub link: LinkSettings,
    pub openstack: OpenStackSettings,
    pub recovery: RecoverySettings,
    pub host_failure: HostFailureSettings,
    pub instance_failure: InstanceFailureSettings,
    pub process_failure: ProcessFailureSettings,
    pub log: LogSettings,
    pub telemetry: TelemetrySettings,
    /// TLS of the Recover service; with `client_ca_file`, only clients
    /// (the API) with a certificate it signed may connect.
    pub tls: ServerTlsSettings,
    /// The connection budget of the link and metrics ports.
    pub connections: ConnectionSettings,
    pub shutdown: ShutdownSettings,
    /// Where the engine keeps the link token it makes on first start when
    /// `link.token_file` is not set (`STATE_DIR/link-token`; the API reads
    /// the same file). Default: `$STATE_DIRECTORY`,
    /// `$XDG_STATE_HOME/instanceha`, `~/.local/state/instanceha` or
    /// `/var/lib/instanceha`.
    pub state_dir: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 15870)),
            link: LinkSettings::default(),
            openstack: OpenStackSettings::default(),
            recovery: RecoverySettings::default(),
            host_failure: HostFailureSettings::default(),
            instance_failure: InstanceFailureSettings::default(),
            process_failure: ProcessFailureSettings::default(),
            log: LogSettings::default(),
            telemetry: TelemetrySettings::default(),
            tls: ServerTlsSettings::default(),
            connections: ConnectionSettings::default(),
            shutdown: ShutdownSettings::default(),
            state_dir: None,
        }
    }
}

/// `[openstack]`: how to reach the cloud.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenStackSettings {
    /// A cloud of `clouds.yaml` to take credentials, region and interface
    /// from (`OS_CLOUD` if unset).
    pub cloud: Option<String>,
    /// Credentials; any field set here wins over `clouds.yaml` and `OS_*`.
    pub auth: AuthSettings,
    /// A second identity with the `service` role, whose token goes in
    /// `X-Service-Token` when Cinder requires a service caller. Unneeded if
    /// the engine's own user has the `service` role.
    pub service_auth: Option<AuthSettings>,
    /// TLS towards the cloud; any field set here wins over the cloud's
    /// `cacert`, `verify`, `cert`, `key` and `OS_CACERT`, `OS_CERT`,
    /// `OS_KEY`, `OS_INSECURE`.
    pub tls: TlsSettings,
    pub region_name: Option<String>,
    /// Catalog interfaces in order of preference (`OS_INTERFACE` or the
    /// cloud's `interface` go first when set).
    pub interfaces: Vec<String>,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Per service update. Disabling a compute Nova still believes up
    /// answers only after Nova's RPC timeout (60 s), though the status is
    /// written at once: past this wait the update is confirmed by reading
    /// the service.
    #[serde(with = "humantime_serde")]
    pub service_update_timeout: Duration,
    /// Every this long the engine makes a cheap authenticated call to Nova
    /// (and Cinder), so that its token stays validated in their
    /// keystonemiddleware cache (300 s by default) and the first
    /// evacuation after a quiet period does not wait on Keystone. 0: off.
    #[serde(with = "humantime_serde")]
    pub token_warmup_interval: Duration,
    pub retry: RetryPolicy,
    /// Fix the Nova microversion (e.g. "2.94") instead of negotiating.
    pub nova_microversion: Option<String>,
    /// Fix the Cinder microversion (e.g. "3.44") instead of negotiating.
    pub cinder_microversion: Option<String>,
}

impl Default for OpenStackSettings {
    fn default() -> Self {
        let client = ClientSettings::default();
        Self {
            cloud: None,
            auth: AuthSettings::default(),
            service_auth: None,
            tls: TlsSettings::default(),
            region_name: None,
            interfaces: client.interfaces,
            connect_timeout: client.connect_timeout,
            request_timeout: client.request_timeout,
            service_update_timeout: client.service_update_timeout,
            token_warmup_interval: Duration::from_secs(240),
            // The outage tolerance bounds the tries, not their number.
            retry: RetryPolicy {
                max_attempts: 0,
                ..client.retry
            },
            nova_microversion: None,
            cinder_microversion: None,
        }
    }
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration file {path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("configuration: {0}")]
    Invalid(String),
    #[error("openstack credentials: {0}")]
    Credentials(#[from] credentials::Error),
}

impl From<LoadError> for Error {
    fn from(err: LoadError) -> Self {
        match err {
            LoadError::File { path, reason } => Self::File { path, reason },
            LoadError::Invalid(reason) => Self::Invalid(reason),
        }
    }
}

/// Settings given as flags; they win over everything else.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub cloud: Option<String>,
    pub log_format: Option<String>,
}

impl Settings {
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, Error> {
        let mut flags: Vec<(&str, String)> = Vec::new();
        if let Some(listen) = overrides.listen {
            flags.push(("listen", listen.to_string()));
        }
        if let Some(cloud) = &overrides.cloud {
            flags.push(("openstack.cloud", cloud.clone()));
        }
        if let Some(format) = &overrides.log_format {
            flags.push(("log.format", format.clone()));
        }
        let settings: Settings = environment::load(&env_settings(), file, &flags)?;
        settings.validate()?;
        Ok(settings)
    }

    pub fn validate(&self) -> Result<(), Error> {
        let r = &self.recovery;
        if r.max_concurrent_instances == 0 || r.max_concurrent_instances_total == 0 {
            return Err(Error::Invalid(
                "recovery.max_concurrent_instances and recovery.max_concurrent_instances_total must be at least 1".to_owned(),
            ));
        }
        if r.poll_interval.is_zero() {
            return Err(Error::Invalid(
                "recovery.poll_interval must be more than 0".to_owned(),
            ));
        }
        if r.stalled_evacuation_after.is_zero()
            || r.stalled_evacuation_after >= r.evacuation_timeout
        {
            return Err(Error::Invalid(format!(
                "recovery.stalled_evacuation_after ({}) must be more than 0 and less than recovery.evacuation_timeout ({}): \
                 an evacuation is judged lost before it times out",
                humantime::format_duration(r.stalled_evacuation_after),
                humantime::format_duration(r.evacuation_timeout)
            )));
        }
        self.host_failure.validate().map_err(Error::Invalid)?;
        self.telemetry.validate().map_err(Error::Invalid)?;
        self.connections
            .validate("connections")
            .map_err(Error::Invalid)?;
        // `openstack.retry.max_attempts = 0` is the default: no count, the
        // outage tolerance alone bounds the retries of a call.
        for (key, value) in [
            ("recovery.outage_tolerance", r.outage_tolerance),
            ("openstack.request_timeout", self.openstack.request_timeout),
            (
                "openstack.service_update_timeout",
                self.openstack.service_update_timeout,
            ),
        ] {
            if value.is_zero() {
                return Err(Error::Invalid(format!("{key} must be more than 0")));
            }
        }
        for (key, value) in [
            (
                "openstack.nova_microversion",
                &self.openstack.nova_microversion,
            ),
            (
                "openstack.cinder_microversion",
                &self.openstack.cinder_microversion,
            ),
        ] {
            if let Some(v) = value {
                v.parse::<Microversion>()
                    .map_err(|reason| Error::Invalid(format!("{key}: {reason}")))?;
            }
        }
        Ok(())
    }

    /// The engine's credentials, the service identity's, and the client
    /// settings, resolved from this configuration, `clouds.yaml` and `env`.
    pub fn openstack_client(
        &self,
        env: &BTreeMap<String, String>,
    ) -> Result<(Credentials, Option<Credentials>, ClientSettings), Error> {
        let os = &self.openstack;
        let cloud_name = os.cloud.clone().or_else(|| env.get("OS_CLOUD").cloned());
        let cloud = match &cloud_name {
            Some(name) => Some(load_cloud_from_env(name, env)?),
            None => None,
        };
        let mut auth = os.auth.clone();
        if let Some(cloud) = &cloud {
            auth = auth.or(cloud.auth.clone());
        }
        auth = auth.or(AuthSettings::from_env(env));
        let credentials = auth.credentials().map_err(|e| {
            Error::Invalid(format!(
                "openstack credentials: {e} (set [openstack.auth] in the configuration, openstack.cloud or OS_CLOUD with a clouds.yaml, or the OS_* variables)"
            ))
        })?;
        let service = match &os.service_auth {
            Some(service) => Some(
                service
                    .clone()
                    .or(AuthSettings {
                        auth_url: Some(credentials.auth_url().to_owned()),
                        ..AuthSettings::default()
                    })
                    .credentials()?,
            ),
            None => None,
        };
        let mut interfaces = os.interfaces.clone();
        let first = env
            .get("OS_INTERFACE")
            .cloned()
            .or_else(|| cloud.as_ref().and_then(|c| c.interface.clone()));
        if let Some(first) = first {
            interfaces.retain(|i| i != &first);
            interfaces.insert(0, first);
        }
        let region = os
            .region_name
            .clone()
            .or_else(|| cloud.as_ref().and_then(|c| c.region_name.clone()))
            .or_else(|| env.get("OS_REGION_NAME").cloned());
        let mut tls = os.tls.clone();
        if let Some(cloud) = &cloud {
            tls = tls.or(cloud.tls.clone());
        }
        let tls = tls.or(TlsSettings::from_env(env));
        let parse = |v: &Option<String>| v.as_ref().and_then(|v| v.parse().ok());
        Ok((
            credentials,
            service,
            ClientSettings {
                interfaces,
                region,
                connect_timeout: os.connect_timeout,
                request_timeout: os.request_timeout,
                service_update_timeout: os.service_update_timeout,
                retry: RetryPolicy {
                    budget: self.recovery.outage_tolerance,
                    ..os.retry.clone()
                },
                tls,
                nova_microversion: parse(&os.nova_microversion),
                cinder_microversion: parse(&os.cinder_microversion),
            },
        ))
    }

    /// The settings the workflows run with.
    pub fn recovery_settings(&self) -> WorkflowSettings {
        let h = &self.host_failure;
        let (selection, segment_selection) = h.selection_rules();
        WorkflowSettings {
            max_concurrent_instances: self.recovery.max_concurrent_instances,
            poll_interval: self.recovery.poll_interval,
            migration_poll_interval: self.recovery.migration_poll_interval,
            evacuation_timeout: self.recovery.evacuation_timeout,
            stalled_evacuation_after: self.recovery.stalled_evacuation_after,
            power_timeout: self.recovery.power_timeout,
            lock_reason_prefix: self.recovery.lock_reason_prefix.clone(),
            require_fencing: h.require_fencing,
            force_down: h.force_down,
            host_disable_reason: h.service_disable_reason.clone(),
            wait_after_service_update: h.wait_after_service_update,
            service_down_timeout: h.service_down_timeout,
            selection,
            segment_selection,
            add_reserved_host_to_aggregate: h.add_reserved_host_to_aggregate,
            clear_blocking_volume_attachments: h.clear_blocking_volume_attachments,
            process_all_instances: self.instance_failure.process_all_instances,
            vm_ha_enabled_key: self
                .instance_failure
                .ha_enabled_instance_metadata_key
                .clone(),
            process_disable_reason: self.process_failure.service_disable_reason.clone(),
            enable_on_process_started: self.process_failure.enable_on_started,
        }
    }
}

/// The prefix of the environment variables that set settings:
/// `INSTANCEHA_ENGINE_RECOVERY__POLL_INTERVAL` sets `recovery.poll_interval`.
const ENV_PREFIX: &str = "INSTANCEHA_ENGINE_";

/// The `INSTANCEHA_ENGINE_*` variables: only those naming a settings section
/// (`listen`, `log`, ...) set something; [`ignored_variables`] lists the
/// others (a typo, another tool's variable) so that they are reported.
fn env_settings() -> SettingsEnvironment {
    SettingsEnvironment::new(ENV_PREFIX, &Settings::default(), &[])
}

/// The `INSTANCEHA_ENGINE_*` variables that are set but name no setting, so were
/// ignored (the configuration file's own `INSTANCEHA_ENGINE_CONFIG` is not listed).
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
            "openstack",
            "host_failure",
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
    fn defaults_are_valid_and_better_than_masakari() {
        let settings = Settings::default();
        settings.validate().unwrap();
        assert!(settings.recovery.max_concurrent_instances > 3);
        assert!(settings.host_failure.force_down);
        assert_eq!(
            settings.host_failure.wait_after_service_update,
            Duration::ZERO
        );
    }

    #[test]
    fn the_example_file_is_the_defaults() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("instanceha-engine.example.toml");
        let settings = Settings::load(Some(&path), &Overrides::default()).unwrap();
        assert_eq!(settings, Settings::default());
    }

    #[test]
    fn errors_name_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engine.toml");
        std::fs::write(&path, "[recovery]\npoll_interval = \"often\"\n").unwrap();
        let err = Settings::load(Some(&path), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("recovery.poll_interval"), "{err}");
        std::fs::write(&path, "[recovery]\nmax_concurrent_instances = 0\n").unwrap();
        let err = Settings::load(Some(&path), &Overrides::default()).unwrap_err();
        assert!(
            err.to_string().contains("max_concurrent_instances"),
            "{err}"
        );
        std::fs::write(&path, "[recovery]\noutage_tolerance = \"0s\"\n").unwrap();
        let err = Settings::load(Some(&path), &Overrides::default()).unwrap_err();
        assert!(
            err.to_string().contains("recovery.outage_tolerance"),
            "{err}"
        );
        std::fs::write(&path, "[openstack]\nnova_microversion = \"2\"\n").unwrap();
        let err = Settings::load(Some(&path), &Overrides::default()).unwrap_err();
        assert!(
            err.to_string().contains("openstack.nova_microversion"),
            "{err}"
        );
        // A stall must be judged before the evacuation times out.
        for stalled in ["0s", "15m", "20m"] {
            std::fs::write(
                &path,
                format!("[recovery]\nstalled_evacuation_after = \"{stalled}\"\n"),
            )
            .unwrap();
            let err = Settings::load(Some(&path), &Overrides::default()).unwrap_err();
            assert!(
                err.to_string()
                    .contains("recovery.stalled_evacuation_after")
                    && err.to_string().contains("recovery.evacuation_timeout"),
                "{err}"
            );
        }
    }

    #[test]
    fn credentials_come_from_config_then_os_variables() {
        let env = BTreeMap::from([
            ("OS_AUTH_URL".to_owned(), "http://k/v3".to_owned()),
            ("OS_USERNAME".to_owned(), "env-user".to_owned()),
            ("OS_PASSWORD".to_owned(), "pw".to_owned()),
            ("OS_PROJECT_NAME".to_owned(), "admin".to_owned()),
            ("OS_INTERFACE".to_owned(), "public".to_owned()),
            ("OS_REGION_NAME".to_owned(), "RegionTwo".to_owned()),
        ]);
        let mut settings = Settings::default();
        settings.openstack.auth.username = Some("config-user".into());
        let (credentials, service, client) = settings.openstack_client(&env).unwrap();
        match credentials {
            Credentials::Password { username, .. } => assert_eq!(username, "config-user"),
            other => panic!("{other:?}"),
        }
        assert!(service.is_none());
        assert_eq!(client.interfaces[0], "public");
        assert_eq!(client.region.as_deref(), Some("RegionTwo"));
        let missing = Settings::default().openstack_client(&BTreeMap::new());
        assert!(missing.unwrap_err().to_string().contains("auth_url"));
    }

    #[test]
    fn the_clouds_tls_and_secure_yaml_reach_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let clouds = dir.path().join("clouds.yaml");
        std::fs::write(
            &clouds,
            "clouds:\n  site:\n    auth_type: v3applicationcredential\n    auth:\n      \
             auth_url: https://keystone.example:5000/v3\n      \
             application_credential_id: ac1\n    cacert: /etc/site-ca.pem\n    \
             cert: /etc/engine.pem\n    key: /etc/engine.key\n",
        )
        .unwrap();
        let secure = dir.path().join("secure.yaml");
        std::fs::write(
            &secure,
            "clouds:\n  site:\n    auth:\n      application_credential_secret: s\n",
        )
        .unwrap();
        let env = BTreeMap::from([
            ("OS_CLOUD".to_owned(), "site".to_owned()),
            (
                "OS_CLIENT_CONFIG_FILE".to_owned(),
                clouds.display().to_string(),
            ),
            (
                "OS_CLIENT_SECURE_FILE".to_owned(),
                secure.display().to_string(),
            ),
            ("OS_CACERT".to_owned(), "/etc/other-ca.pem".to_owned()),
        ]);
        let (credentials, _, client) = Settings::default().openstack_client(&env).unwrap();
        assert!(matches!(
            credentials,
            Credentials::ApplicationCredential { .. }
        ));
        assert_eq!(client.tls.cacert, Some(PathBuf::from("/etc/site-ca.pem")));
        assert_eq!(client.tls.key, Some(PathBuf::from("/etc/engine.key")));
        assert!(!client.tls.insecure());

        // Without the cloud, OS_CACERT; [openstack.tls] wins over both.
        let mut env = env;
        env.remove("OS_CLOUD");
        env.insert("OS_AUTH_URL".into(), "https://k/v3".into());
        env.insert("OS_AUTH_TYPE".into(), "token".into());
        env.insert("OS_TOKEN".into(), "t".into());
        let (credentials, _, client) = Settings::default().openstack_client(&env).unwrap();
        assert!(matches!(credentials, Credentials::Token { .. }));
        assert_eq!(client.tls.cacert, Some(PathBuf::from("/etc/other-ca.pem")));
        let mut settings = Settings::default();
        settings.openstack.tls.verify = Some(false);
        let (_, _, client) = settings.openstack_client(&env).unwrap();
        assert!(client.tls.insecure());

        env.insert("OS_AUTH_TYPE".into(), "v3totp".into());
        let err = Settings::default().openstack_client(&env).unwrap_err();
        assert!(err.to_string().contains("auth_type \"v3totp\""), "{err}");
    }
}
