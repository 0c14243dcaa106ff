//! The scenario: the simulated cloud's settings, identities, hosts, instances and volumes,
//! loadable from TOML or JSON, buildable in code, expanded from compact generator forms and validated
//! (`expand`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::world::model::{TaskState, VmState};

mod expand;
mod settings;

pub(crate) use expand::Expanded;
pub use settings::{Durations, FailureProbability, MessageBusOutage, Settings};

/// Why a scenario cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read scenario file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot parse scenario as TOML: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("cannot parse scenario as JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("invalid scenario: {field}: {message}")]
    Invalid { field: String, message: String },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// A whole simulated cloud.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    pub settings: Settings,
    /// Users, added to the built-in ones (a user with a built-in name replaces it).
    pub users: Vec<UserSpec>,
    pub application_credentials: Vec<AppCredentialSpec>,
    /// Flavors, added to the built-in m1.tiny/small/medium/large/xlarge.
    pub flavors: Vec<FlavorSpec>,
    pub aggregates: Vec<AggregateSpec>,
    pub hosts: Vec<HostSpec>,
    pub host_groups: Vec<HostGroupSpec>,
    pub instances: Vec<InstanceSpec>,
    pub instance_groups: Vec<InstanceGroupSpec>,
    pub volumes: Vec<VolumeSpec>,
}

/// A Keystone user with a role assignment on one project.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    pub name: String,
    pub password: String,
    #[serde(default = "default_domain")]
    pub domain: String,
    pub project: String,
    #[serde(default)]
    pub roles: Vec<String>,
}

impl UserSpec {
    pub fn new(name: &str, password: &str, project: &str, roles: &[&str]) -> UserSpec {
        UserSpec {
            name: name.into(),
            password: password.into(),
            domain: default_domain(),
            project: project.into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        }
    }
}

fn default_domain() -> String {
    "Default".into()
}

/// A Keystone application credential of a user (its project and roles are the user's).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AppCredentialSpec {
    /// Fixed id; generated from the seed when absent.
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    pub user: String,
    pub secret: String,
}

/// A flavor (`name`, `vcpus` and `ram_mb` required; `extra_specs` shown in servers from 2.47).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FlavorSpec {
    pub name: String,
    pub vcpus: u32,
    pub ram_mb: u64,
    pub disk_gb: u64,
    pub extra_specs: BTreeMap<String, String>,
}

/// A host aggregate. `hosts` entries may use `*` wildcards.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AggregateSpec {
    pub name: String,
    #[serde(default)]
    pub availability_zone: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// A compute host and its nova-compute service.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HostSpec {
    pub name: String,
    /// Defaults to `<name>.example.org`.
    pub hypervisor_hostname: Option<String>,
    /// Defaults to an address in 192.0.2.0/24 (or 198.51.100.0/24 past 250 hosts).
    pub ip: Option<String>,
    pub vcpus: u32,
    pub ram_mb: u64,
    pub disk_gb: u64,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub forced_down: bool,
    pub powered_on: bool,
}

impl Default for HostSpec {
    fn default() -> HostSpec {
        HostSpec {
            name: String::new(),
            hypervisor_hostname: None,
            ip: None,
            vcpus: 64,
            ram_mb: 262_144,
            disk_gb: 2000,
            enabled: true,
            disabled_reason: None,
            forced_down: false,
            powered_on: true,
        }
    }
}

impl HostSpec {
    pub fn new(name: &str) -> HostSpec {
        HostSpec {
            name: name.into(),
            ..HostSpec::default()
        }
    }

    pub fn capacity(mut self, vcpus: u32, ram_mb: u64) -> HostSpec {
        self.vcpus = vcpus;
        self.ram_mb = ram_mb;
        self
    }

    pub fn disabled(mut self, reason: &str) -> HostSpec {
        self.enabled = false;
        self.disabled_reason = Some(reason.into());
        self
    }

    pub fn powered_off(mut self) -> HostSpec {
        self.powered_on = false;
        self
    }
}

/// Many hosts named `<name_prefix><number>`, the number zero-padded to `width` digits.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HostGroupSpec {
    pub name_prefix: String,
    pub count: usize,
    pub start: usize,
    pub width: usize,
    pub vcpus: u32,
    pub ram_mb: u64,
    pub disk_gb: u64,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    /// The hosts' hypervisor hostnames are `<name>.<hypervisor_domain>`; empty: the host name
    /// itself, as Nova reports when `[DEFAULT]host` and the hypervisor's own hostname agree
    /// (libvirt's default on a host whose hostname is not qualified, or the fake driver).
    pub hypervisor_domain: String,
}

impl Default for HostGroupSpec {
    fn default() -> HostGroupSpec {
        let host = HostSpec::default();
        HostGroupSpec {
            name_prefix: "compute-".into(),
            count: 0,
            start: 1,
            width: 2,
            vcpus: host.vcpus,
            ram_mb: host.ram_mb,
            disk_gb: host.disk_gb,
            enabled: true,
            disabled_reason: None,
            hypervisor_domain: "example.org".into(),
        }
    }
}

/// One server.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct InstanceSpec {
    pub name: String,
    pub host: String,
    pub project: String,
    /// The owning user's name; defaults to a user of the project, else a generated id.
    pub user: Option<String>,
    pub flavor: String,
    pub vm_state: String,
    pub task_state: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Sets metadata `HA_Enabled` to "True" or "False".
    pub ha_enabled: Option<bool>,
    pub locked: bool,
    pub locked_reason: Option<String>,
    /// Boot from a root volume `<name>-root` instead of an image.
    pub boot_from_volume: bool,
    pub root_volume_size: u64,
    pub root_volume_multiattach: bool,
    /// The root volume carries a stale attachment on this host (see the README).
    pub stale_attachment: bool,
    /// Leave the root volume's attachment in this attach_status (error_detaching, attaching,
    /// error_attaching), or its detach in progress (detaching: the volume `detaching`, its
    /// attachment `attached`, as `os-begin_detaching` leaves them).
    pub root_attach_status: Option<String>,
}

impl Default for InstanceSpec {
    fn default() -> InstanceSpec {
        InstanceSpec {
            name: String::new(),
            host: String::new(),
            project: "demo".into(),
            user: None,
            flavor: "m1.small".into(),
            vm_state: "active".into(),
            task_state: None,
            metadata: BTreeMap::new(),
            ha_enabled: None,
            locked: false,
            locked_reason: None,
            boot_from_volume: false,
            root_volume_size: 20,
            root_volume_multiattach: false,
            stale_attachment: false,
            root_attach_status: None,
        }
    }
}

impl InstanceSpec {
    pub fn new(name: &str, host: &str) -> InstanceSpec {
        InstanceSpec {
            name: name.into(),
            host: host.into(),
            ..InstanceSpec::default()
        }
    }

    pub fn ha(mut self, enabled: bool) -> InstanceSpec {
        self.ha_enabled = Some(enabled);
        self
    }

    pub fn project(mut self, project: &str) -> InstanceSpec {
        self.project = project.into();
        self
    }

    pub fn flavor(mut self, flavor: &str) -> InstanceSpec {
        self.flavor = flavor.into();
        self
    }

    pub fn vm_state(mut self, state: &str) -> InstanceSpec {
        self.vm_state = state.into();
        self
    }

    pub fn boot_from_volume(mut self) -> InstanceSpec {
        self.boot_from_volume = true;
        self
    }

    pub fn stale_attachment(mut self) -> InstanceSpec {
        self.boot_from_volume = true;
        self.stale_attachment = true;
        self
    }

    pub fn root_attach_status(mut self, status: &str) -> InstanceSpec {
        self.boot_from_volume = true;
        self.root_attach_status = Some(status.into());
        self
    }

    pub fn multiattach_root(mut self) -> InstanceSpec {
        self.boot_from_volume = true;
        self.root_volume_multiattach = true;
        self
    }

    pub fn locked(mut self, reason: Option<&str>) -> InstanceSpec {
        self.locked = true;
        self.locked_reason = reason.map(str::to_string);
        self
    }
}

/// `count` servers on every host matching `host` (a name or `*` pattern), named
/// `<name_prefix>-<number>` with a number running across the whole group.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct InstanceGroupSpec {
    pub host: String,
    pub count: usize,
    pub name_prefix: String,
    pub project: String,
    pub user: Option<String>,
    pub flavor: String,
    pub vm_state: String,
    pub ha_enabled: bool,
    pub metadata: BTreeMap<String, String>,
    /// Share of the group booted from volume, spread evenly through the group.
    pub boot_from_volume_fraction: f64,
    /// Booted-from-volume members carry a stale attachment on their host.
    pub stale_attachments: bool,
    pub locked: bool,
}

impl Default for InstanceGroupSpec {
    fn default() -> InstanceGroupSpec {
        InstanceGroupSpec {
            host: String::new(),
            count: 0,
            name_prefix: "vm".into(),
            project: "demo".into(),
            user: None,
            flavor: "m1.small".into(),
            vm_state: "active".into(),
            ha_enabled: true,
            metadata: BTreeMap::new(),
            boot_from_volume_fraction: 0.0,
            stale_attachments: false,
            locked: false,
        }
    }
}

/// A data volume, optionally attached to servers.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct VolumeSpec {
    pub name: String,
    pub size: u64,
    pub multiattach: bool,
    pub bootable: bool,
    pub volume_type: String,
    /// Defaults to the project of the first attached server, else "demo".
    pub project: Option<String>,
    /// Names of the servers it is attached to.
    pub attached_to: Vec<String>,
    /// The backend still holds a session on the attached server's host that Nova's BDM does not
    /// reference (a stale attachment). Only for a non-multiattach volume attached to one server.
    pub stale_attachment: bool,
    /// Leave the attachment in this attach_status (error_detaching, attaching, error_attaching),
    /// or its detach in progress (detaching: the volume `detaching`, the attachment `attached`).
    pub attach_status: Option<String>,
}

impl Default for VolumeSpec {
    fn default() -> VolumeSpec {
        VolumeSpec {
            name: String::new(),
            size: 10,
            multiattach: false,
            bootable: false,
            volume_type: "lvmdriver-1".into(),
            project: None,
            attached_to: Vec::new(),
            stale_attachment: false,
            attach_status: None,
        }
    }
}

impl VolumeSpec {
    pub fn new(name: &str) -> VolumeSpec {
        VolumeSpec {
            name: name.into(),
            ..VolumeSpec::default()
        }
    }

    pub fn attached_to(mut self, server: &str) -> VolumeSpec {
        self.attached_to.push(server.into());
        self
    }

    pub fn multiattach(mut self) -> VolumeSpec {
        self.multiattach = true;
        self
    }

    pub fn stale_attachment(mut self) -> VolumeSpec {
        self.stale_attachment = true;
        self
    }

    pub fn attach_status(mut self, status: &str) -> VolumeSpec {
        self.attach_status = Some(status.into());
        self
    }
}

/// vm_states a scenario may declare.
pub const VM_STATES: &[&str] = VmState::ALL;

/// task_states a scenario may declare.
pub const TASK_STATES: &[&str] = TaskState::ALL;

/// Attach statuses a scenario may leave an attachment in.
pub const STUCK_ATTACH_STATUSES: &[&str] = &[
    "detaching",
    "error_detaching",
    "attaching",
    "error_attaching",
];

/// The id of the built-in application credential of `admin`.
pub const BUILTIN_APP_CREDENTIAL_ID: &str = "423f19a4ac1e4f48bbb4180756e6eb6c";
/// The secret of the built-in application credential of `admin`.
pub const BUILTIN_APP_CREDENTIAL_SECRET: &str = "rEaqvJka48mpv";

impl Scenario {
    /// The built-in small scenario (`scenarios/small.toml`).
    pub fn small() -> Scenario {
        Scenario::from_toml_str(include_str!("../scenarios/small.toml"))
            .expect("the built-in small scenario parses")
    }

    /// An empty scenario to build in code.
    pub fn builder() -> ScenarioBuilder {
        ScenarioBuilder {
            scenario: Scenario::default(),
        }
    }

    pub fn from_toml_str(text: &str) -> Result<Scenario, Error> {
        let scenario: Scenario = toml::from_str(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    pub fn from_json_str(text: &str) -> Result<Scenario, Error> {
        let scenario: Scenario = serde_json::from_str(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Loads a `.json` file as JSON and anything else as TOML.
    pub fn from_path(path: &Path) -> Result<Scenario, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        if path.extension().is_some_and(|e| e == "json") {
            Scenario::from_json_str(&text)
        } else {
            Scenario::from_toml_str(&text)
        }
    }

    /// The users the cloud will have: built-ins merged with the scenario's.
    pub fn expand_users(&self) -> Vec<UserSpec> {
        self.expand().map(|e| e.users).unwrap_or_default()
    }

    /// The secret of an application credential by id (built-in or declared).
    pub fn application_credential_secret(&self, id: &str) -> Option<String> {
        let ex = self.expand().ok()?;
        ex.application_credentials
            .iter()
            .find(|a| a.id.as_deref() == Some(id))
            .map(|a| a.secret.clone())
    }

    /// Checks the scenario, naming the first bad field.
    pub fn validate(&self) -> Result<(), Error> {
        self.expand().map(|_| ())
    }
}

/// Builds a [`Scenario`] in code.
#[derive(Debug, Clone)]
pub struct ScenarioBuilder {
    scenario: Scenario,
}

impl ScenarioBuilder {
    pub fn settings(mut self, settings: Settings) -> ScenarioBuilder {
        self.scenario.settings = settings;
        self
    }

    pub fn speed(mut self, speed: f64) -> ScenarioBuilder {
        self.scenario.settings.speed = speed;
        self
    }

    pub fn seed(mut self, seed: u64) -> ScenarioBuilder {
        self.scenario.settings.seed = seed;
        self
    }

    /// Changes settings in place.
    pub fn configure(mut self, change: impl FnOnce(&mut Settings)) -> ScenarioBuilder {
        change(&mut self.scenario.settings);
        self
    }

    pub fn user(mut self, user: UserSpec) -> ScenarioBuilder {
        self.scenario.users.push(user);
        self
    }

    pub fn application_credential(mut self, credential: AppCredentialSpec) -> ScenarioBuilder {
        self.scenario.application_credentials.push(credential);
        self
    }

    pub fn flavor(mut self, flavor: FlavorSpec) -> ScenarioBuilder {
        self.scenario.flavors.push(flavor);
        self
    }

    pub fn aggregate(mut self, aggregate: AggregateSpec) -> ScenarioBuilder {
        self.scenario.aggregates.push(aggregate);
        self
    }

    pub fn host(mut self, host: HostSpec) -> ScenarioBuilder {
        self.scenario.hosts.push(host);
        self
    }

    pub fn host_group(mut self, group: HostGroupSpec) -> ScenarioBuilder {
        self.scenario.host_groups.push(group);
        self
    }

    pub fn instance(mut self, instance: InstanceSpec) -> ScenarioBuilder {
        self.scenario.instances.push(instance);
        self
    }

    pub fn instance_group(mut self, group: InstanceGroupSpec) -> ScenarioBuilder {
        self.scenario.instance_groups.push(group);
        self
    }

    pub fn volume(mut self, volume: VolumeSpec) -> ScenarioBuilder {
        self.scenario.volumes.push(volume);
        self
    }

    /// The scenario, validated.
    pub fn build(self) -> Result<Scenario, Error> {
        self.scenario.validate()?;
        Ok(self.scenario)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(err: Error) -> String {
        match err {
            Error::Invalid { field, .. } => field,
            other => panic!("expected a validation error, got {other}"),
        }
    }

    #[test]
    fn builtin_small_scenario_is_valid_and_has_the_default_users() {
        let expanded = Scenario::small().expand().unwrap();
        for name in ["admin", "nova", "reader"] {
            assert!(expanded.users.iter().any(|u| u.name == name), "{name}");
        }
        assert!(expanded.hosts.len() >= 3);
        assert_eq!(expanded.application_credentials.len(), 1);
    }

    #[test]
    fn unknown_host_is_named() {
        let err = Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .instance(InstanceSpec::new("vm-1", "compute-09"))
            .build()
            .unwrap_err();
        assert_eq!(field_of(err), "instances[0].host (\"vm-1\")");
    }

    #[test]
    fn duplicates_and_bad_states_are_rejected() {
        let dup = Scenario::builder()
            .host(HostSpec::new("c1"))
            .host(HostSpec::new("c1"))
            .build()
            .unwrap_err();
        assert_eq!(field_of(dup), "hosts[1].name");
        let bad_state = Scenario::builder()
            .host(HostSpec::new("c1"))
            .instance(InstanceSpec::new("vm", "c1").vm_state("dancing"))
            .build()
            .unwrap_err();
        assert!(field_of(bad_state).ends_with("vm_state (\"vm\")"));
        let dup_volume = Scenario::builder()
            .host(HostSpec::new("c1"))
            .instance(InstanceSpec::new("vm", "c1").boot_from_volume())
            .volume(VolumeSpec::new("vm-root"))
            .build()
            .unwrap_err();
        assert_eq!(field_of(dup_volume), "volumes[0].name");
    }

    #[test]
    fn stale_attachment_needs_a_single_non_multiattach_attachment() {
        let err = Scenario::builder()
            .host(HostSpec::new("c1"))
            .instance(InstanceSpec::new("a", "c1"))
            .volume(
                VolumeSpec::new("v")
                    .multiattach()
                    .attached_to("a")
                    .stale_attachment(),
            )
            .build()
            .unwrap_err();
        assert!(field_of(err).starts_with("volumes[0].stale_attachment"));
    }

    #[test]
    fn groups_expand_to_many_hosts_and_instances() {
        let scenario = Scenario::builder()
            .host_group(HostGroupSpec {
                count: 4,
                ..HostGroupSpec::default()
            })
            .instance_group(InstanceGroupSpec {
                host: "compute-0*".into(),
                count: 10,
                boot_from_volume_fraction: 0.25,
                stale_attachments: true,
                ..InstanceGroupSpec::default()
            })
            .build()
            .unwrap();
        let expanded = scenario.expand().unwrap();
        assert_eq!(expanded.hosts.len(), 4);
        assert_eq!(expanded.hosts[3].name, "compute-04");
        assert_eq!(expanded.instances.len(), 40);
        assert_eq!(
            expanded
                .instances
                .iter()
                .filter(|i| i.boot_from_volume)
                .count(),
            10
        );
        assert!(
            expanded
                .instances
                .iter()
                .all(|i| i.boot_from_volume == i.stale_attachment)
        );
        assert_eq!(expanded.instances[0].name, "vm-001");
    }

    #[test]
    fn json_and_toml_forms_agree() {
        let toml_text = r#"
            [settings]
            speed = 50.0
            [[hosts]]
            name = "c1"
            [[instances]]
            name = "vm"
            host = "c1"
            ha_enabled = true
        "#;
        let from_toml = Scenario::from_toml_str(toml_text).unwrap();
        let json = serde_json::to_string(&from_toml).unwrap();
        assert_eq!(Scenario::from_json_str(&json).unwrap(), from_toml);
        assert!(matches!(
            Scenario::from_toml_str("[settings]\nspeeed = 1.0"),
            Err(Error::Toml(_))
        ));
    }

    #[test]
    fn bad_speed_is_rejected() {
        let err = Scenario::builder().speed(0.0).build().unwrap_err();
        assert_eq!(field_of(err), "settings.speed");
    }
}
