//! Configuration of `instanceha-agent`: defaults, then a TOML file, then
//! `INSTANCEHA_AGENT_*` environment variables (nested keys joined by `__`,
//! e.g. `INSTANCEHA_AGENT_API__URL`), then command-line flags. Every error
//! names the setting that is wrong. Secrets (the API token, BMC passwords)
//! are never settings themselves: settings name the file or the
//! environment variable that holds them.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod fencing;
mod heartbeat;

use fencing::validate_fencing;
pub use fencing::{FenceDevice, FenceDevices, FencingSettings};
use heartbeat::validate_heartbeat;
pub use heartbeat::{HeartbeatSettings, PeerSettings};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use instanceha_runtime::connections::ConnectionSettings;
use instanceha_runtime::environment::SettingsEnvironment;
use instanceha_runtime::telemetry::{LogSettings, TelemetrySettings};
use instanceha_runtime::tls::ClientTlsSettings;
use serde::{Deserialize, Serialize};

/// The environment variables' prefix.
pub const ENV_PREFIX: &str = "INSTANCEHA_AGENT_";

/// Everything `instanceha-agent` can be told.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// This compute host's name as registered in the API (nova-compute's
    /// `host`). Default: the system's host name.
    pub hostname: Option<String>,
    pub api: ApiSettings,
    pub spool: SpoolSettings,
    pub host: HostSettings,
    pub fencing: FencingSettings,
    pub process: ProcessSettings,
    pub instance: InstanceSettings,
    pub log: LogSettings,
    pub telemetry: TelemetrySettings,
    /// The connection budget of the metrics port.
    pub connections: ConnectionSettings,
}

/// `[api]`: how to reach `instanceha-api`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    /// `http://HOST:PORT` or `https://HOST:PORT` of the public gRPC API.
    pub url: String,
    /// A file holding the bearer token (static token or Keystone token).
    pub token_file: Option<PathBuf>,
    /// The environment variable holding the bearer token (read when
    /// `token_file` is not set).
    pub token_env: Option<String>,
    /// TLS (and mutual TLS with `cert_file`/`key_file`) to the API.
    pub tls: ClientTlsSettings,
    /// How long one call may take.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Follow each stored notification with `WatchNotification` and log
    /// its progress.
    pub watch: bool,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:15869".to_owned(),
            token_file: None,
            token_env: None,
            tls: ClientTlsSettings::default(),
            timeout: Duration::from_secs(10),
            watch: true,
        }
    }
}

/// `[spool]`: the durable queue of reports not yet acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpoolSettings {
    /// The spool's database file (created when missing).
    pub path: PathBuf,
    /// First delay before resending a report the API did not acknowledge.
    #[serde(with = "humantime_serde")]
    pub retry_initial: Duration,
    /// Longest delay between two attempts.
    #[serde(with = "humantime_serde")]
    pub retry_max: Duration,
    /// How long delivered and refused reports are kept (for the log).
    #[serde(with = "humantime_serde")]
    pub keep_done: Duration,
}

impl Default for SpoolSettings {
    fn default() -> Self {
        Self {
            path: PathBuf::from("/var/lib/instanceha-agent/spool.redb"),
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            keep_done: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Which detection driver watches the segment's hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostDriver {
    /// No host monitoring (process and instance monitors only).
    #[default]
    None,
    /// The agents' own heartbeats.
    Heartbeat,
    /// Pacemaker's view (`crm_mon --as-xml`).
    Pacemaker,
    /// Kubernetes node conditions.
    Kubernetes,
}

/// `[host]`: the host monitor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostSettings {
    pub driver: HostDriver,
    /// A peer silent this long (on every network) is suspected. 6 s: six
    /// heartbeats missed in a row, about what Corosync's defaults take to
    /// form a new membership (token 3 s plus consensus 3.6 s), a tenth of
    /// masakari-hostmonitor's 60 s poll; a host paused or starved for a
    /// few seconds is not suspected.
    #[serde(with = "humantime_serde")]
    pub detect_after: Duration,
    pub heartbeat: HeartbeatSettings,
    pub pacemaker: PacemakerSettings,
    pub kubernetes: KubernetesSettings,
}

impl Default for HostSettings {
    fn default() -> Self {
        Self {
            driver: HostDriver::None,
            detect_after: Duration::from_secs(6),
            heartbeat: HeartbeatSettings::default(),
            pacemaker: PacemakerSettings::default(),
            kubernetes: KubernetesSettings::default(),
        }
    }
}

/// `[host.pacemaker]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PacemakerSettings {
    /// The command printing the cluster's state as XML.
    pub command: Vec<String>,
    /// How often to read it.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

impl Default for PacemakerSettings {
    fn default() -> Self {
        Self {
            command: vec!["crm_mon".to_owned(), "--as-xml".to_owned()],
            interval: Duration::from_secs(2),
        }
    }
}

/// `[host.kubernetes]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesSettings {
    /// The Kubernetes API (default: the in-cluster address from
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`).
    pub api_url: Option<String>,
    pub token_file: PathBuf,
    pub ca_file: Option<PathBuf>,
    /// Only nodes with these labels are compute hosts (`key=value,...`).
    pub label_selector: Option<String>,
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        Self {
            api_url: None,
            token_file: PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount/token"),
            ca_file: Some(PathBuf::from(
                "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
            )),
            label_selector: None,
            interval: Duration::from_secs(2),
        }
    }
}

/// Where a credential comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CredentialSource {
    /// A file holding it (trailing newline ignored).
    pub file: Option<PathBuf>,
    /// An environment variable holding it.
    pub env: Option<String>,
}

/// `[process]`: the process monitor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessSettings {
    /// masakari-monitors' `process_list.yaml`; unset: no process monitor.
    pub list_path: Option<PathBuf>,
    /// How often each process is looked for.
    #[serde(with = "humantime_serde")]
    pub check_interval: Duration,
    /// Restarts tried before the process is reported STOPPED.
    pub restart_retries: u32,
    /// How long a restarted process may take to appear, and the pause
    /// after a failed restart.
    #[serde(with = "humantime_serde")]
    pub restart_interval: Duration,
    /// Longest a start, restart, pre or post command may run.
    #[serde(with = "humantime_serde")]
    pub command_timeout: Duration,
}

impl Default for ProcessSettings {
    fn default() -> Self {
        Self {
            list_path: None,
            check_interval: Duration::from_millis(500),
            restart_retries: 3,
            restart_interval: Duration::from_secs(1),
            command_timeout: Duration::from_secs(30),
        }
    }
}

/// `[instance]`: the instance monitor (libvirt domain events).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InstanceSettings {
    pub enabled: bool,
    /// The libvirt connection URI.
    pub uri: String,
    /// The `virsh` command whose `event --loop` is read.
    pub virsh: String,
}

impl Default for InstanceSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            uri: "qemu:///system".to_owned(),
            virsh: "virsh".to_owned(),
        }
    }
}

/// Why the settings are unusable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Load(#[from] Box<figment::Error>),
    #[error("{setting}: {message}")]
    Invalid { setting: String, message: String },
}

fn invalid(setting: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Invalid {
        setting: setting.into(),
        message: message.into(),
    }
}

/// The environment variables of the agent's settings.
pub fn environment() -> SettingsEnvironment {
    SettingsEnvironment::new(ENV_PREFIX, &Settings::default(), &[])
}

impl Settings {
    /// Defaults, then `file`, then the environment; validated.
    pub fn load(file: Option<&Path>) -> Result<Self, Error> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(path) = file {
            figment = figment.merge(Toml::file_exact(path));
        }
        figment = figment.merge(environment().provider());
        let settings: Settings = figment.extract().map_err(Box::new)?;
        settings.validate()?;
        Ok(settings)
    }

    /// Settings from TOML text only (tests, examples).
    pub fn from_toml(text: &str) -> Result<Self, Error> {
        let settings: Settings = Figment::from(Serialized::defaults(Settings::default()))
            .merge(Toml::string(text))
            .extract()
            .map_err(Box::new)?;
        settings.validate()?;
        Ok(settings)
    }

    /// This host's name: the setting, else the system's host name.
    pub fn hostname(&self) -> String {
        self.hostname.clone().unwrap_or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".to_owned())
        })
    }

    pub fn validate(&self) -> Result<(), Error> {
        if !(self.api.url.starts_with("http://") || self.api.url.starts_with("https://")) {
            return Err(invalid(
                "api.url",
                format!("{:?} is not an http:// or https:// URL", self.api.url),
            ));
        }
        if self.api.timeout.is_zero() {
            return Err(invalid("api.timeout", "must be more than 0"));
        }
        if self.spool.retry_initial.is_zero() || self.spool.retry_max < self.spool.retry_initial {
            return Err(invalid(
                "spool.retry_initial",
                "must be more than 0 and at most spool.retry_max",
            ));
        }
        let hb = &self.host.heartbeat;
        if self.host.driver == HostDriver::Heartbeat {
            if hb.interval.is_zero() {
                return Err(invalid("host.heartbeat.interval", "must be more than 0"));
            }
            if self.host.detect_after < hb.interval * 2 {
                return Err(invalid(
                    "host.detect_after",
                    format!(
                        "must be at least two heartbeat intervals ({}), or one lost packet suspects a host",
                        humantime::format_duration(hb.interval * 2)
                    ),
                ));
            }
            validate_heartbeat(hb, self.host.detect_after)?;
            if hb.peers.is_empty() && hb.segment.is_empty() {
                return Err(invalid(
                    "host.heartbeat.peers",
                    "name the peers, or a segment whose hosts the API lists",
                ));
            }
            let me = self.hostname();
            let mut names = std::collections::BTreeSet::new();
            for (i, peer) in hb.peers.iter().enumerate() {
                if peer.name.is_empty() || peer.name == me {
                    return Err(invalid(
                        format!("host.heartbeat.peers[{i}].name"),
                        format!("{:?} must be another host's name", peer.name),
                    ));
                }
                if !names.insert(peer.name.as_str()) {
                    return Err(invalid(
                        format!("host.heartbeat.peers[{i}].name"),
                        format!("{:?} is listed twice", peer.name),
                    ));
                }
            }
        }
        validate_fencing(&self.fencing)?;
        if self.process.check_interval.is_zero() {
            return Err(invalid("process.check_interval", "must be more than 0"));
        }
        self.telemetry
            .validate()
            .map_err(|message| invalid("telemetry", message))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        hostname = "compute-01"
        [api]
        url = "http://127.0.0.1:15869"
        token_file = "/etc/instanceha-agent/token"
        [host]
        driver = "heartbeat"
        detect_after = "6s"
        [host.heartbeat]
        listen = "127.0.0.1:15871"
        segment = "segment-a"
        key = { file = "/etc/instanceha-agent/heartbeat-key" }
        [[host.heartbeat.peers]]
        name = "compute-02"
        address = "127.0.0.1:15872"
        [fencing.devices.compute-02]
        driver = "redfish"
        url = "https://bmc-02"
        username = "admin"
        password = { file = "/etc/instanceha-agent/bmc-02" }
        [fencing.devices.compute-03]
        driver = "ipmi"
        address = "bmc-03"
        username = "admin"
        password = { env = "BMC_03_PASSWORD" }
    "#;

    #[test]
    fn a_full_example_loads() {
        let settings = Settings::from_toml(EXAMPLE).unwrap();
        assert_eq!(settings.hostname(), "compute-01");
        assert_eq!(settings.host.driver, HostDriver::Heartbeat);
        assert_eq!(settings.host.heartbeat.peers[0].name, "compute-02");
        match &settings.fencing.devices["compute-03"] {
            FenceDevice::Ipmi {
                port, interface, ..
            } => {
                assert_eq!(*port, 623);
                assert_eq!(interface, "lanplus");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_name_the_setting() {
        let err = Settings::from_toml(&format!("{EXAMPLE}\n[spool]\nretry_initial = \"0s\""))
            .unwrap_err();
        assert!(err.to_string().starts_with("spool.retry_initial"), "{err}");
        let err =
            Settings::from_toml(&EXAMPLE.replace("detect_after = \"6s\"", "detect_after = \"1s\""))
                .unwrap_err();
        assert!(err.to_string().starts_with("host.detect_after"), "{err}");
        let err =
            Settings::from_toml(&EXAMPLE.replace("name = \"compute-02\"", "name = \"compute-01\""))
                .unwrap_err();
        assert!(err.to_string().contains("peers[0].name"), "{err}");
        let err = Settings::from_toml("[api]\nurl = \"127.0.0.1:1\"").unwrap_err();
        assert!(err.to_string().starts_with("api.url"), "{err}");
        let err = Settings::from_toml("[api]\nbogus = 1").unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn heartbeats_need_a_key_and_a_named_address() {
        let err = Settings::from_toml(&EXAMPLE.replace(
            "key = { file = \"/etc/instanceha-agent/heartbeat-key\" }",
            "",
        ))
        .unwrap_err();
        assert!(err.to_string().starts_with("host.heartbeat.key"), "{err}");
        let unsigned = EXAMPLE.replace(
            "key = { file = \"/etc/instanceha-agent/heartbeat-key\" }",
            "insecure_unsigned = true",
        );
        Settings::from_toml(&unsigned).expect("an explicit insecure setting");
        let err =
            Settings::from_toml(&EXAMPLE.replace("127.0.0.1:15871", "0.0.0.0:15871")).unwrap_err();
        assert!(
            err.to_string().starts_with("host.heartbeat.listen"),
            "{err}"
        );
        let err =
            Settings::from_toml(&EXAMPLE.replace("listen = \"127.0.0.1:15871\"", "")).unwrap_err();
        assert!(
            err.to_string().starts_with("host.heartbeat.listen"),
            "{err}"
        );
        let err = Settings::from_toml(&format!(
            "{}\nmax_clock_skew = \"7s\"\n",
            EXAMPLE.split("[[host.heartbeat.peers]]").next().unwrap()
        ))
        .unwrap_err();
        assert!(
            err.to_string().starts_with("host.heartbeat.max_clock_skew"),
            "{err}"
        );
    }

    #[test]
    fn the_shipped_configurations_load() {
        for (name, text) in [
            ("example", include_str!("../instanceha-agent.example.toml")),
            // The DaemonSet gives the node's address from the downward API
            // (INSTANCEHA_AGENT_HOST__HEARTBEAT__LISTEN).
            (
                "daemonset",
                &include_str!("../../deploy/kubernetes/agent/config/instanceha-agent.toml")
                    .replace(
                        "[host.heartbeat]\n",
                        "[host.heartbeat]\nlisten = \"192.0.2.10:15871\"\n",
                    ),
            ),
            (
                "systemd",
                include_str!("../../deploy/systemd/instanceha-agent.toml"),
            ),
        ] {
            let settings = Settings::from_toml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(settings.host.detect_after, Duration::from_secs(6), "{name}");
        }
    }

    #[test]
    fn the_default_window_tolerates_short_stalls() {
        let settings = Settings::default();
        assert!(settings.host.detect_after >= settings.host.heartbeat.interval * 5);
    }
}
