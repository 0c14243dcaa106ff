//! The things the simulated cloud is made of: hosts, servers, volumes, attachments, migrations and
//! instance actions, with their Nova and Cinder state vocabularies.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::clock::SimTime;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every wire spelling, in declaration order.
            pub const ALL: &'static [&'static str] = &[$($text),+];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }

            /// Parses the wire spelling.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some(Self::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                Self::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("unknown value {text:?}")))
            }
        }
    };
}

string_enum!(
    /// Nova's `vm_state`.
    VmState {
        Active => "active",
        Building => "building",
        Paused => "paused",
        Suspended => "suspended",
        Stopped => "stopped",
        Rescued => "rescued",
        Resized => "resized",
        SoftDeleted => "soft-delete",
        Deleted => "deleted",
        Shelved => "shelved",
        ShelvedOffloaded => "shelved_offloaded",
        Error => "error",
    }
);

string_enum!(
    /// Nova's `task_state`.
    TaskState {
        Scheduling => "scheduling",
        BlockDeviceMapping => "block_device_mapping",
        Networking => "networking",
        Spawning => "spawning",
        ImageSnapshot => "image_snapshot",
        Rebooting => "rebooting",
        RebootPending => "reboot_pending",
        RebootStarted => "reboot_started",
        RebootingHard => "rebooting_hard",
        Pausing => "pausing",
        Unpausing => "unpausing",
        Suspending => "suspending",
        Resuming => "resuming",
        PoweringOff => "powering-off",
        PoweringOn => "powering-on",
        Rescuing => "rescuing",
        Unrescuing => "unrescuing",
        Rebuilding => "rebuilding",
        RebuildBlockDeviceMapping => "rebuild_block_device_mapping",
        RebuildSpawning => "rebuild_spawning",
        Migrating => "migrating",
        ResizePrep => "resize_prep",
        ResizeMigrating => "resize_migrating",
        ResizeMigrated => "resize_migrated",
        ResizeFinish => "resize_finish",
        Deleting => "deleting",
        Shelving => "shelving",
        Unshelving => "unshelving",
    }
);

string_enum!(
    /// A Nova migration record's status.
    MigrationStatus {
        Accepted => "accepted",
        PreMigrating => "pre-migrating",
        Done => "done",
        Completed => "completed",
        Failed => "failed",
        Error => "error",
    }
);

string_enum!(
    /// A Cinder attachment's `attach_status`. Cinder has no `detaching`
    /// attachment: a detach in progress (`os-begin_detaching`) shows only in
    /// the volume's status.
    AttachStatus {
        Reserved => "reserved",
        Attaching => "attaching",
        Attached => "attached",
        Detached => "detached",
        ErrorAttaching => "error_attaching",
        ErrorDetaching => "error_detaching",
    }
);

/// The ways an evacuation can be made to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvacuationFailure {
    /// NoValidHost: vm_state error with a fault, migration `error`, event `rebuild_server` Error.
    Scheduling,
    /// Claim on the destination fails: vm_state unchanged, task_state cleared, migration `failed`.
    Claim,
    /// Any other compute error: vm_state error, migration `failed`.
    Compute,
}

/// Nova's `status` derived from vm_state and task_state (`nova/api/openstack/common.py`).
pub fn server_status(vm: VmState, task: Option<TaskState>) -> &'static str {
    use TaskState as T;
    let rebuilding = matches!(
        task,
        Some(T::Rebuilding | T::RebuildBlockDeviceMapping | T::RebuildSpawning)
    );
    match vm {
        VmState::Active => match task {
            _ if rebuilding => "REBUILD",
            Some(T::Migrating) => "MIGRATING",
            Some(T::ResizePrep | T::ResizeMigrating | T::ResizeMigrated | T::ResizeFinish) => {
                "RESIZE"
            }
            Some(T::Rebooting | T::RebootPending | T::RebootStarted) => "REBOOT",
            Some(T::RebootingHard) => "HARD_REBOOT",
            Some(T::ImageSnapshot) => "ACTIVE",
            _ => "ACTIVE",
        },
        VmState::Stopped | VmState::Error if rebuilding => "REBUILD",
        VmState::Stopped => "SHUTOFF",
        VmState::Error => "ERROR",
        VmState::Building => "BUILD",
        VmState::Resized => "VERIFY_RESIZE",
        VmState::Paused => "PAUSED",
        VmState::Suspended => "SUSPENDED",
        VmState::Rescued => "RESCUE",
        VmState::SoftDeleted => "SOFT_DELETED",
        VmState::Deleted => "DELETED",
        VmState::Shelved => "SHELVED",
        VmState::ShelvedOffloaded => "SHELVED_OFFLOADED",
    }
}

/// Nova power_state codes.
pub mod power_state {
    pub const NOSTATE: u8 = 0;
    pub const RUNNING: u8 = 1;
    pub const PAUSED: u8 = 3;
    pub const SHUTDOWN: u8 = 4;
    pub const SUSPENDED: u8 = 7;
}

/// A host aggregate.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Aggregate {
    pub id: u64,
    pub uuid: String,
    pub name: String,
    pub availability_zone: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub hosts: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// A compute host with its nova-compute service and hypervisor record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    pub hypervisor_hostname: String,
    pub ip: String,
    /// Integer id of the service (before microversion 2.53).
    pub service_id: u64,
    /// UUID of the service (2.53+).
    pub service_uuid: String,
    /// Integer id of the hypervisor (before 2.53).
    pub hypervisor_id: u64,
    /// UUID of the compute node (2.53+).
    pub hypervisor_uuid: String,
    pub vcpus: u32,
    pub ram_mb: u64,
    pub disk_gb: u64,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub forced_down: bool,
    pub powered_on: bool,
    /// When nova-compute started (None while the host is off or booting); it reports at start
    /// and then every report_interval, offset by `heartbeat_phase`.
    pub heartbeat_origin: Option<SimTime>,
    pub heartbeat_phase: f64,
    /// The last heartbeat before the host went off.
    pub last_heartbeat_before_off: Option<SimTime>,
    /// Bumped on every power change so stale boot events are ignored.
    pub power_generation: u64,
    pub service_updated: DateTime<Utc>,
}

/// A flavor as embedded in a server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    pub vcpus: u32,
    pub ram_mb: u64,
    pub disk_gb: u64,
    /// Shown in the server view from 2.47, as Nova embeds them.
    #[serde(default)]
    pub extra_specs: BTreeMap<String, String>,
}

/// An image Glance holds (the compute API's image proxy shows it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Image {
    pub id: String,
    pub name: String,
    /// Bytes.
    pub size: u64,
    pub min_disk_gb: u64,
    pub min_ram_mb: u64,
    pub created: DateTime<Utc>,
}

/// A block device mapping: which volume a server uses and which Cinder attachment Nova holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BlockDeviceMapping {
    pub uuid: String,
    pub volume_id: String,
    /// The attachment Nova references (None for a legacy BDM).
    pub attachment_id: Option<String>,
    pub device: String,
    pub boot_index: Option<u32>,
    pub delete_on_termination: bool,
}

/// A server fault (shown while the server is ERROR).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Fault {
    pub code: u16,
    pub message: String,
    pub details: String,
    pub created: DateTime<Utc>,
}

/// A server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Instance {
    pub id: String,
    pub name: String,
    /// libvirt-style name, `instance-0000002a`.
    pub instance_name: String,
    pub project_id: String,
    pub user_id: String,
    pub flavor: Flavor,
    /// None for a server booted from volume.
    pub image_id: Option<String>,
    pub vm_state: VmState,
    pub task_state: Option<TaskState>,
    pub power_state: u8,
    pub metadata: BTreeMap<String, String>,
    pub locked: bool,
    pub locked_reason: Option<String>,
    /// "admin" or "owner".
    pub locked_by: Option<String>,
    pub host: Option<String>,
    pub node: Option<String>,
    pub bdms: Vec<BlockDeviceMapping>,
    pub fault: Option<Fault>,
    pub created: DateTime<Utc>,
    pub updated: DateTime<Utc>,
    pub launched_at: DateTime<Utc>,
    /// Bumped by every operation so superseded timed events are ignored.
    pub generation: u64,
}

/// A Cinder attachment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attachment {
    pub id: String,
    pub volume_id: String,
    pub instance_id: Option<String>,
    /// The connector host (Cinder's `attached_host`).
    pub host_name: Option<String>,
    pub attach_status: AttachStatus,
    pub mode: String,
    pub device: Option<String>,
    pub connector: Option<serde_json::Value>,
    pub connection_info: Option<serde_json::Value>,
    pub attached_at: Option<DateTime<Utc>>,
    pub detached_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// A Cinder volume.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Volume {
    pub id: String,
    pub name: String,
    pub project_id: String,
    pub user_id: String,
    pub size: u64,
    pub multiattach: bool,
    pub bootable: bool,
    pub volume_type: String,
    /// Stored status: recomputed from the attachments on every attachment change, or set by
    /// os-reset_status.
    pub status: String,
    pub migration_status: Option<String>,
    pub attachments: Vec<Attachment>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Volume {
    /// The status the attachments imply: the first attachment in the order
    /// attached > attaching > detaching > reserved decides; none means available.
    pub fn status_from_attachments(&self) -> &'static str {
        let has = |s: AttachStatus| self.attachments.iter().any(|a| a.attach_status == s);
        if has(AttachStatus::Attached) {
            "in-use"
        } else if has(AttachStatus::Attaching) {
            "attaching"
        } else if has(AttachStatus::Reserved) {
            "reserved"
        } else {
            "available"
        }
    }
}

/// A Nova migration record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Migration {
    pub id: u64,
    pub uuid: String,
    pub instance_uuid: String,
    pub migration_type: String,
    pub status: MigrationStatus,
    pub source_compute: String,
    pub source_node: String,
    pub dest_compute: Option<String>,
    pub dest_node: Option<String>,
    pub dest_host: Option<String>,
    pub user_id: String,
    pub project_id: String,
    pub created_at: DateTime<Utc>,
    /// None until the record first changes: Nova's column is NULL on insert.
    pub updated_at: Option<DateTime<Utc>>,
}

/// One event of an instance action.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ActionEvent {
    pub event: String,
    pub start_time: DateTime<Utc>,
    pub finish_time: Option<DateTime<Utc>>,
    /// "Success" or "Error" once finished.
    pub result: Option<String>,
    pub traceback: Option<String>,
    pub host: Option<String>,
    pub details: Option<String>,
}

/// An instance action (`os-instance-actions`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InstanceAction {
    pub action: String,
    pub instance_uuid: String,
    pub request_id: String,
    pub user_id: String,
    pub project_id: String,
    pub start_time: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub message: Option<String>,
    pub events: Vec<ActionEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_the_contract_table() {
        use TaskState as T;
        use VmState as V;
        assert_eq!(server_status(V::Active, None), "ACTIVE");
        for task in [
            T::Rebuilding,
            T::RebuildBlockDeviceMapping,
            T::RebuildSpawning,
        ] {
            for vm in [V::Active, V::Stopped, V::Error] {
                assert_eq!(server_status(vm, Some(task)), "REBUILD");
            }
        }
        assert_eq!(server_status(V::Stopped, None), "SHUTOFF");
        assert_eq!(server_status(V::Error, None), "ERROR");
        assert_eq!(server_status(V::Building, Some(T::Spawning)), "BUILD");
        assert_eq!(server_status(V::Resized, None), "VERIFY_RESIZE");
        assert_eq!(server_status(V::Active, Some(T::PoweringOff)), "ACTIVE");
        assert_eq!(server_status(V::Stopped, Some(T::PoweringOn)), "SHUTOFF");
    }

    #[test]
    fn string_enums_round_trip() {
        for text in TaskState::ALL {
            assert_eq!(TaskState::parse(text).unwrap().as_str(), *text);
        }
        assert_eq!(VmState::parse("soft-delete"), Some(VmState::SoftDeleted));
        assert_eq!(AttachStatus::parse("nope"), None);
    }
}
