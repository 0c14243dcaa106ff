//! The CLI's own view of the API's resources: the enums operators type and
//! read (in Masakari's spelling), the records `--format json|yaml` prints,
//! and the requests the commands make. No generated protobuf type appears
//! here; `convert` is the only place that translates.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// The model's enums, one definition for the API, the engine and the CLI
/// (`instanceha_proto::model`): operators type and read their Masakari
/// names, and `--help` lists each value with what it means.
pub use instanceha_proto::model::{
    NotificationStatus, NotificationType, RecoveryMethod, ReturnToService,
    VMoveStatus as VmoveStatus, VMoveType as VmoveType,
};

// ---- records ------------------------------------------------------------------
//
// Enum fields are `Option`: `None` (printed as null) when the API sent a
// value this CLI does not know.

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Segment {
    pub id: String,
    pub name: String,
    pub description: String,
    pub service_type: String,
    pub recovery_method: Option<RecoveryMethod>,
    pub enabled: bool,
    pub return_to_service: Option<ReturnToService>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Host {
    pub id: String,
    pub name: String,
    pub segment_id: String,
    #[serde(rename = "type")]
    pub host_type: String,
    pub control_attributes: String,
    pub reserved: bool,
    pub on_maintenance: bool,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Notification {
    pub id: String,
    #[serde(rename = "type")]
    pub notification_type: Option<NotificationType>,
    pub hostname: String,
    pub generated_time: Option<DateTime<Utc>>,
    pub payload: BTreeMap<String, String>,
    pub status: Option<NotificationStatus>,
    pub source_host_id: String,
    pub segment_id: String,
    pub message: String,
    pub attempts: u32,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    /// Filled by `notification show` and `watch`; empty in lists.
    pub progress_events: Vec<ProgressEvent>,
}

impl Notification {
    pub fn is_terminal(&self) -> bool {
        self.status.is_some_and(NotificationStatus::is_terminal)
    }
}

/// One step of a recovery, as the engine reported it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProgressEvent {
    pub sequence: u64,
    pub task: String,
    /// "started", "succeeded", "failed", "skipped" or "info".
    pub state: String,
    pub message: String,
    pub time: Option<DateTime<Utc>>,
    pub instance_id: String,
}

/// The per-instance record of a recovery.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Vmove {
    pub id: String,
    pub notification_id: String,
    pub instance_id: String,
    pub instance_name: String,
    pub source_host: String,
    pub dest_host: String,
    #[serde(rename = "type")]
    pub vmove_type: Option<VmoveType>,
    pub status: Option<VmoveStatus>,
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    pub message: String,
    pub attempts: u32,
    pub step: String,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl Vmove {
    /// The instance as an operator names it: its name, else its UUID.
    pub fn instance_label(&self) -> &str {
        if self.instance_name.is_empty() {
            &self.instance_id
        } else {
            &self.instance_name
        }
    }
}

/// One message of `WatchNotification`.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchUpdate {
    /// The whole current state (first, and again after the watcher lagged).
    Snapshot {
        notification: Notification,
        vmoves: Vec<Vmove>,
    },
    Notification(Notification),
    Vmove(Vmove),
    Progress(ProgressEvent),
}

/// One page of a list and whether another follows.
#[derive(Clone, Debug, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_page_token: Option<String>,
}

// ---- requests -----------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
pub struct NewSegment {
    pub name: String,
    pub description: Option<String>,
    pub service_type: String,
    pub recovery_method: RecoveryMethod,
    pub enabled: bool,
    pub return_to_service: Option<ReturnToService>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegmentFilter {
    pub recovery_method: Option<RecoveryMethod>,
    pub service_type: Option<String>,
    pub enabled: Option<bool>,
    pub name: Option<String>,
}

/// Only the fields that are `Some` change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegmentChanges {
    pub name: Option<String>,
    pub description: Option<String>,
    pub service_type: Option<String>,
    pub recovery_method: Option<RecoveryMethod>,
    pub enabled: Option<bool>,
    pub return_to_service: Option<ReturnToService>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NewHost {
    pub segment_id: String,
    pub name: String,
    pub host_type: String,
    pub control_attributes: String,
    pub reserved: bool,
    pub on_maintenance: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostFilter {
    pub segment_id: Option<String>,
    pub host_type: Option<String>,
    pub reserved: Option<bool>,
    pub on_maintenance: Option<bool>,
    pub name: Option<String>,
}

/// Only the fields that are `Some` change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostChanges {
    pub name: Option<String>,
    pub host_type: Option<String>,
    pub control_attributes: Option<String>,
    pub reserved: Option<bool>,
    pub on_maintenance: Option<bool>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NewNotification {
    pub notification_type: NotificationType,
    pub hostname: String,
    pub generated_time: DateTime<Utc>,
    pub payload: BTreeMap<String, String>,
    pub idempotency_key: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NotificationFilter {
    pub status: Option<NotificationStatus>,
    pub notification_type: Option<NotificationType>,
    pub hostname: Option<String>,
    pub source_host_id: Option<String>,
    pub segment_id: Option<String>,
    pub generated_since: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct VmoveFilter {
    pub status: Option<VmoveStatus>,
    pub vmove_type: Option<VmoveType>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn enums_print_as_operators_type_them() {
        assert_eq!(RecoveryMethod::ReservedHost.to_string(), "reserved_host");
        assert_eq!(RecoveryMethod::RhPriority.to_string(), "rh_priority");
        assert_eq!(NotificationType::ComputeHost.to_string(), "COMPUTE_HOST");
        assert_eq!(NotificationType::Vm.to_string(), "VM");
        assert_eq!(NotificationStatus::Finished.to_string(), "finished");
        assert_eq!(VmoveType::LiveMigration.to_string(), "live_migration");
        assert_eq!(
            serde_json::to_value(RecoveryMethod::AutoPriority).unwrap(),
            "auto_priority"
        );
        assert_eq!(
            serde_json::to_value(NotificationType::ComputeHost).unwrap(),
            "COMPUTE_HOST"
        );
        assert_eq!(
            RecoveryMethod::from_str("rh_priority", false).unwrap(),
            RecoveryMethod::RhPriority
        );
        assert_eq!(
            NotificationType::from_str("compute_host", true).unwrap(),
            NotificationType::ComputeHost
        );
    }

    #[test]
    fn terminal_statuses() {
        let terminal: Vec<_> = NotificationStatus::value_variants()
            .iter()
            .filter(|s| s.is_terminal())
            .map(ToString::to_string)
            .collect();
        assert_eq!(terminal, ["failed", "ignored", "finished"]);
        let terminal: Vec<_> = VmoveStatus::value_variants()
            .iter()
            .filter(|s| s.is_resolved())
            .map(ToString::to_string)
            .collect();
        assert_eq!(terminal, ["succeeded", "failed", "ignored"]);
    }
}
