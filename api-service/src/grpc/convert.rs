//! Conversions between the generated `instanceha.v1` messages and the
//! domain types, with exhaustive matches: a new enum value breaks the build
//! here. Shape errors (a malformed UUID, an unknown enum value, a missing
//! timestamp) name the field.

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use instanceha_proto::ConversionError;
use instanceha_proto::v1 as pb;
use prost_types::Timestamp;

use crate::domain::{
    Host, InvalidField, Notification, NotificationType, ProgressEvent, ProgressState,
    RecoveryMethod, ReturnToService, Segment, VMove, VMoveType, quoted,
};
use crate::status::{NotificationStatus, VMoveStatus};

/// A UUID field.
pub fn id<T: FromStr>(field: &str, value: &str) -> Result<T, InvalidField> {
    if value.is_empty() {
        return Err(InvalidField::new(field, "is required"));
    }
    value
        .parse()
        .map_err(|_| InvalidField::new(field, format!("{} is not a UUID", quoted(value))))
}

/// An optional UUID field (empty means absent).
pub fn optional_id<T: FromStr>(field: &str, value: &str) -> Result<Option<T>, InvalidField> {
    if value.is_empty() {
        Ok(None)
    } else {
        id(field, value).map(Some)
    }
}

pub fn timestamp(at: DateTime<Utc>) -> Option<Timestamp> {
    Some(instanceha_proto::time::timestamp(at))
}

pub fn optional_timestamp(at: Option<DateTime<Utc>>) -> Option<Timestamp> {
    at.and_then(timestamp)
}

pub fn from_timestamp(
    field: &'static str,
    ts: Option<Timestamp>,
) -> Result<DateTime<Utc>, InvalidField> {
    instanceha_proto::time::required(field, ts).map_err(|e| match e {
        ConversionError::MissingField(_) => InvalidField::new(field, "is required"),
        ConversionError::InvalidData { reason, .. } => InvalidField::new(field, reason),
        ConversionError::UnexpectedEnumVariant { value, .. } => unknown(field, value),
    })
}

pub fn payload(map: std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    map.into_iter().collect()
}

fn unknown(field: &str, value: i32) -> InvalidField {
    InvalidField::new(field, format!("{value} is not a known value"))
}

// ---- enums -------------------------------------------------------------------

pub fn recovery_method(field: &str, value: i32) -> Result<RecoveryMethod, InvalidField> {
    match pb::RecoveryMethod::try_from(value).map_err(|_| unknown(field, value))? {
        pb::RecoveryMethod::Unspecified => Err(InvalidField::new(
            field,
            "is required (auto, reserved_host, auto_priority or rh_priority)",
        )),
        pb::RecoveryMethod::Auto => Ok(RecoveryMethod::Auto),
        pb::RecoveryMethod::ReservedHost => Ok(RecoveryMethod::ReservedHost),
        pb::RecoveryMethod::AutoPriority => Ok(RecoveryMethod::AutoPriority),
        pb::RecoveryMethod::RhPriority => Ok(RecoveryMethod::RhPriority),
    }
}

/// A segment's return to service, as a request sets it.
pub fn return_to_service(field: &str, value: i32) -> Result<ReturnToService, InvalidField> {
    ReturnToService::from_wire("", value).map_err(|_| {
        InvalidField::new(field, format!("{value} is neither manual (1) nor auto (2)"))
    })
}

pub fn recovery_method_pb(method: RecoveryMethod) -> pb::RecoveryMethod {
    match method {
        RecoveryMethod::Auto => pb::RecoveryMethod::Auto,
        RecoveryMethod::ReservedHost => pb::RecoveryMethod::ReservedHost,
        RecoveryMethod::AutoPriority => pb::RecoveryMethod::AutoPriority,
        RecoveryMethod::RhPriority => pb::RecoveryMethod::RhPriority,
    }
}

pub fn notification_type(field: &str, value: i32) -> Result<NotificationType, InvalidField> {
    match pb::NotificationType::try_from(value).map_err(|_| unknown(field, value))? {
        pb::NotificationType::Unspecified => Err(InvalidField::new(
            field,
            "is required (COMPUTE_HOST, PROCESS or VM)",
        )),
        pb::NotificationType::ComputeHost => Ok(NotificationType::ComputeHost),
        pb::NotificationType::Process => Ok(NotificationType::Process),
        pb::NotificationType::Vm => Ok(NotificationType::Vm),
    }
}

pub fn notification_type_pb(kind: NotificationType) -> pb::NotificationType {
    match kind {
        NotificationType::ComputeHost => pb::NotificationType::ComputeHost,
        NotificationType::Process => pb::NotificationType::Process,
        NotificationType::Vm => pb::NotificationType::Vm,
    }
}

pub fn notification_status(field: &str, value: i32) -> Result<NotificationStatus, InvalidField> {
    match pb::NotificationStatus::try_from(value).map_err(|_| unknown(field, value))? {
        pb::NotificationStatus::Unspecified => Err(InvalidField::new(
            field,
            "must be a status (new, running, error, failed, ignored or finished)",
        )),
        pb::NotificationStatus::New => Ok(NotificationStatus::New),
        pb::NotificationStatus::Running => Ok(NotificationStatus::Running),
        pb::NotificationStatus::Error => Ok(NotificationStatus::Error),
        pb::NotificationStatus::Failed => Ok(NotificationStatus::Failed),
        pb::NotificationStatus::Ignored => Ok(NotificationStatus::Ignored),
        pb::NotificationStatus::Finished => Ok(NotificationStatus::Finished),
    }
}

pub fn notification_status_pb(status: NotificationStatus) -> pb::NotificationStatus {
    match status {
        NotificationStatus::New => pb::NotificationStatus::New,
        NotificationStatus::Running => pb::NotificationStatus::Running,
        NotificationStatus::Error => pb::NotificationStatus::Error,
        NotificationStatus::Failed => pb::NotificationStatus::Failed,
        NotificationStatus::Ignored => pb::NotificationStatus::Ignored,
        NotificationStatus::Finished => pb::NotificationStatus::Finished,
    }
}

pub fn vmove_status(field: &str, value: i32) -> Result<VMoveStatus, InvalidField> {
    match pb::VmoveStatus::try_from(value).map_err(|_| unknown(field, value))? {
        pb::VmoveStatus::Unspecified => Err(InvalidField::new(
            field,
            "must be a status (pending, ongoing, succeeded, failed or ignored)",
        )),
        pb::VmoveStatus::Pending => Ok(VMoveStatus::Pending),
        pb::VmoveStatus::Ongoing => Ok(VMoveStatus::Ongoing),
        pb::VmoveStatus::Succeeded => Ok(VMoveStatus::Succeeded),
        pb::VmoveStatus::Failed => Ok(VMoveStatus::Failed),
        pb::VmoveStatus::Ignored => Ok(VMoveStatus::Ignored),
    }
}

pub fn vmove_status_pb(status: VMoveStatus) -> pb::VmoveStatus {
    match status {
        VMoveStatus::Pending => pb::VmoveStatus::Pending,
        VMoveStatus::Ongoing => pb::VmoveStatus::Ongoing,
        VMoveStatus::Succeeded => pb::VmoveStatus::Succeeded,
        VMoveStatus::Failed => pb::VmoveStatus::Failed,
        VMoveStatus::Ignored => pb::VmoveStatus::Ignored,
    }
}

pub fn vmove_type(field: &str, value: i32) -> Result<VMoveType, InvalidField> {
    match pb::VmoveType::try_from(value).map_err(|_| unknown(field, value))? {
        pb::VmoveType::Unspecified => Err(InvalidField::new(
            field,
            "must be a type (evacuation, migration, live_migration or restart)",
        )),
        pb::VmoveType::Evacuation => Ok(VMoveType::Evacuation),
        pb::VmoveType::Migration => Ok(VMoveType::Migration),
        pb::VmoveType::LiveMigration => Ok(VMoveType::LiveMigration),
        pb::VmoveType::Restart => Ok(VMoveType::Restart),
    }
}

pub fn vmove_type_pb(kind: VMoveType) -> pb::VmoveType {
    match kind {
        VMoveType::Evacuation => pb::VmoveType::Evacuation,
        VMoveType::Migration => pb::VmoveType::Migration,
        VMoveType::LiveMigration => pb::VmoveType::LiveMigration,
        VMoveType::Restart => pb::VmoveType::Restart,
    }
}

// ---- resources -----------------------------------------------------------------

impl From<Segment> for pb::Segment {
    fn from(s: Segment) -> Self {
        Self {
            id: s.id.to_string(),
            name: s.name,
            description: s.description.unwrap_or_default(),
            service_type: s.service_type,
            recovery_method: recovery_method_pb(s.recovery_method) as i32,
            enabled: s.enabled,
            return_to_service: pb::ReturnToService::from(s.return_to_service) as i32,
            created_at: timestamp(s.created_at),
            updated_at: timestamp(s.updated_at),
        }
    }
}

impl From<Host> for pb::Host {
    fn from(h: Host) -> Self {
        Self {
            id: h.id.to_string(),
            name: h.name,
            segment_id: h.segment_id.to_string(),
            r#type: h.host_type,
            control_attributes: h.control_attributes,
            reserved: h.reserved,
            on_maintenance: h.on_maintenance,
            created_at: timestamp(h.created_at),
            updated_at: timestamp(h.updated_at),
        }
    }
}

impl From<Notification> for pb::Notification {
    fn from(n: Notification) -> Self {
        let status = n.status();
        Self {
            id: n.id.to_string(),
            r#type: notification_type_pb(n.notification_type) as i32,
            hostname: n.hostname,
            generated_time: timestamp(n.generated_time),
            payload: n.payload.into_iter().collect(),
            status: notification_status_pb(status) as i32,
            source_host_id: n.source_host_id.to_string(),
            segment_id: n.segment_id.to_string(),
            message: n.message.unwrap_or_default(),
            attempts: n.attempts,
            created_at: timestamp(n.created_at),
            updated_at: timestamp(n.updated_at),
            progress_events: Vec::new(),
        }
    }
}

pub fn progress_state_pb(state: ProgressState) -> pb::ProgressState {
    match state {
        ProgressState::Started => pb::ProgressState::Started,
        ProgressState::Succeeded => pb::ProgressState::Succeeded,
        ProgressState::Failed => pb::ProgressState::Failed,
        ProgressState::Skipped => pb::ProgressState::Skipped,
        ProgressState::Info => pb::ProgressState::Info,
    }
}

impl From<ProgressEvent> for pb::ProgressEvent {
    fn from(e: ProgressEvent) -> Self {
        Self {
            sequence: e.sequence,
            task: e.task,
            state: progress_state_pb(e.state) as i32,
            message: e.message,
            time: timestamp(e.time),
            instance_id: e.instance_id.unwrap_or_default(),
        }
    }
}

impl From<VMove> for pb::Vmove {
    fn from(v: VMove) -> Self {
        Self {
            id: v.id.to_string(),
            notification_id: v.notification_id.to_string(),
            instance_id: v.instance_id,
            instance_name: v.instance_name,
            source_host: v.source_host,
            dest_host: v.record.dest_host().unwrap_or_default().to_owned(),
            r#type: vmove_type_pb(v.vmove_type) as i32,
            status: vmove_status_pb(v.record.status()) as i32,
            start_time: optional_timestamp(v.record.start_time()),
            end_time: optional_timestamp(v.record.end_time()),
            message: v.record.message().unwrap_or_default().to_owned(),
            attempts: v.record.attempts(),
            step: v.step.unwrap_or_default(),
            created_at: timestamp(v.created_at),
            updated_at: timestamp(v.updated_at),
            step_message: v.step_message.unwrap_or_default(),
            step_time: optional_timestamp(v.step_time),
            locked: v.locked,
            retryable: v.record.retryable(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_unspecified_enum_values_name_the_field() {
        let err = recovery_method("recovery_method", 0).unwrap_err();
        assert_eq!(err.field, "recovery_method");
        let err = recovery_method("recovery_method", 99).unwrap_err();
        assert!(err.reason.contains("99"), "{err}");
        assert!(notification_type("type", 7).is_err());
        for method in RecoveryMethod::ALL {
            assert_eq!(
                recovery_method("m", recovery_method_pb(method) as i32),
                Ok(method)
            );
        }
        for status in NotificationStatus::ALL {
            assert_eq!(
                notification_status("s", notification_status_pb(status) as i32),
                Ok(status)
            );
        }
        for status in VMoveStatus::ALL {
            assert_eq!(
                vmove_status("s", vmove_status_pb(status) as i32),
                Ok(status)
            );
        }
        for kind in VMoveType::ALL {
            assert_eq!(vmove_type("t", vmove_type_pb(kind) as i32), Ok(kind));
        }
    }

    #[test]
    fn timestamps_are_checked() {
        assert!(from_timestamp("generated_time", None).is_err());
        let bad = Timestamp {
            seconds: 0,
            nanos: -1,
        };
        assert!(from_timestamp("generated_time", Some(bad)).is_err());
        let huge = Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        };
        assert!(from_timestamp("generated_time", Some(huge)).is_err());
    }

    #[test]
    fn ids_must_be_uuids() {
        let err = id::<uuid::Uuid>("id", "nope").unwrap_err();
        assert_eq!(err.field, "id");
        assert!(id::<uuid::Uuid>("id", "").is_err());
        assert_eq!(optional_id::<uuid::Uuid>("segment_id", "").unwrap(), None);
    }
}
