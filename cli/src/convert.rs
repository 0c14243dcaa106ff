//! The one place where generated `instanceha.v1` messages meet the CLI's
//! own types: requests are built from `resources` and responses become
//! `resources` records. Enum matches are exhaustive, so a new value in the
//! proto breaks the build here and nowhere else.

use chrono::{DateTime, Utc};
use instanceha_proto::v1 as pb;
use prost_types::Timestamp;

use crate::resources::{
    Host, HostChanges, HostFilter, NewHost, NewNotification, NewSegment, Notification,
    NotificationFilter, NotificationStatus, NotificationType, ProgressEvent, RecoveryMethod,
    ReturnToService, Segment, SegmentChanges, SegmentFilter, Vmove, VmoveFilter, VmoveStatus,
    VmoveType, WatchUpdate,
};

// ---- time ---------------------------------------------------------------------

pub fn timestamp(at: DateTime<Utc>) -> Timestamp {
    instanceha_proto::time::timestamp(at)
}

/// `None` for a missing or out-of-range timestamp.
pub fn time(ts: Option<Timestamp>) -> Option<DateTime<Utc>> {
    instanceha_proto::time::optional("time", ts).ok().flatten()
}

// ---- enums --------------------------------------------------------------------

// The model's one conversion (`instanceha_proto::model`); a value this CLI
// does not know (or an unspecified one) reads as `None`.

pub fn recovery_method_pb(method: RecoveryMethod) -> pb::RecoveryMethod {
    method.into()
}

pub fn recovery_method(value: i32) -> Option<RecoveryMethod> {
    RecoveryMethod::from_wire("recovery_method", value).ok()
}

pub fn notification_type_pb(kind: NotificationType) -> pb::NotificationType {
    kind.into()
}

pub fn notification_type(value: i32) -> Option<NotificationType> {
    NotificationType::from_wire("type", value).ok()
}

pub fn notification_status_pb(status: NotificationStatus) -> pb::NotificationStatus {
    status.into()
}

pub fn notification_status(value: i32) -> Option<NotificationStatus> {
    NotificationStatus::from_wire("status", value).ok()
}

pub fn vmove_status_pb(status: VmoveStatus) -> pb::VmoveStatus {
    status.into()
}

pub fn vmove_status(value: i32) -> Option<VmoveStatus> {
    VmoveStatus::from_wire("status", value).ok()
}

pub fn vmove_type_pb(kind: VmoveType) -> pb::VmoveType {
    kind.into()
}

pub fn vmove_type(value: i32) -> Option<VmoveType> {
    VmoveType::from_wire("type", value).ok()
}

// ---- responses ----------------------------------------------------------------

impl From<pb::Segment> for Segment {
    fn from(s: pb::Segment) -> Self {
        Self {
            id: s.id,
            name: s.name,
            description: s.description,
            service_type: s.service_type,
            recovery_method: recovery_method(s.recovery_method),
            enabled: s.enabled,
            return_to_service: ReturnToService::from_wire("", s.return_to_service).ok(),
            created_at: time(s.created_at),
            updated_at: time(s.updated_at),
        }
    }
}

impl From<pb::Host> for Host {
    fn from(h: pb::Host) -> Self {
        Self {
            id: h.id,
            name: h.name,
            segment_id: h.segment_id,
            host_type: h.r#type,
            control_attributes: h.control_attributes,
            reserved: h.reserved,
            on_maintenance: h.on_maintenance,
            created_at: time(h.created_at),
            updated_at: time(h.updated_at),
        }
    }
}

impl From<pb::Notification> for Notification {
    fn from(n: pb::Notification) -> Self {
        Self {
            id: n.id,
            notification_type: notification_type(n.r#type),
            hostname: n.hostname,
            generated_time: time(n.generated_time),
            payload: n.payload.into_iter().collect(),
            status: notification_status(n.status),
            source_host_id: n.source_host_id,
            segment_id: n.segment_id,
            message: n.message,
            attempts: n.attempts,
            created_at: time(n.created_at),
            updated_at: time(n.updated_at),
            progress_events: n.progress_events.into_iter().map(Into::into).collect(),
        }
    }
}

/// The lowercase name of a progress state, as the API's REST facade and
/// Masakari spell it; a value this version does not know shows as such.
fn progress_state(value: i32) -> &'static str {
    match pb::ProgressState::try_from(value) {
        Ok(pb::ProgressState::Started) => "started",
        Ok(pb::ProgressState::Succeeded) => "succeeded",
        Ok(pb::ProgressState::Failed) => "failed",
        Ok(pb::ProgressState::Skipped) => "skipped",
        Ok(pb::ProgressState::Info) => "info",
        Ok(pb::ProgressState::Unspecified) | Err(_) => "unknown",
    }
}

impl From<pb::ProgressEvent> for ProgressEvent {
    fn from(p: pb::ProgressEvent) -> Self {
        Self {
            sequence: p.sequence,
            task: p.task,
            state: progress_state(p.state).to_owned(),
            message: p.message,
            time: time(p.time),
            instance_id: p.instance_id,
        }
    }
}

impl From<pb::Vmove> for Vmove {
    fn from(v: pb::Vmove) -> Self {
        Self {
            id: v.id,
            notification_id: v.notification_id,
            instance_id: v.instance_id,
            instance_name: v.instance_name,
            source_host: v.source_host,
            dest_host: v.dest_host,
            vmove_type: vmove_type(v.r#type),
            status: vmove_status(v.status),
            start_time: time(v.start_time),
            end_time: time(v.end_time),
            message: v.message,
            attempts: v.attempts,
            step: v.step,
            created_at: time(v.created_at),
            updated_at: time(v.updated_at),
        }
    }
}

/// `None` for an empty message (a newer server's update kind this CLI does
/// not know, or a snapshot without its notification).
pub fn watch_update(update: pb::NotificationUpdate) -> Option<WatchUpdate> {
    use pb::notification_update::Update;
    Some(match update.update? {
        Update::Snapshot(snapshot) => WatchUpdate::Snapshot {
            notification: snapshot.notification?.into(),
            vmoves: snapshot.vmoves.into_iter().map(Into::into).collect(),
        },
        Update::Notification(n) => WatchUpdate::Notification(n.into()),
        Update::Vmove(v) => WatchUpdate::Vmove(v.into()),
        Update::ProgressEvent(p) => WatchUpdate::Progress(p.into()),
    })
}

// ---- requests -----------------------------------------------------------------

pub fn create_segment(new: NewSegment) -> pb::CreateSegmentRequest {
    pb::CreateSegmentRequest {
        name: new.name,
        description: new.description,
        service_type: new.service_type,
        recovery_method: recovery_method_pb(new.recovery_method) as i32,
        enabled: Some(new.enabled),
        return_to_service: new.return_to_service.map(i32::from),
    }
}

pub fn list_segments(
    filter: &SegmentFilter,
    page_size: u32,
    page_token: String,
) -> pb::ListSegmentsRequest {
    pb::ListSegmentsRequest {
        page_size: page_size_pb(page_size),
        page_token,
        recovery_method: filter.recovery_method.map(|m| recovery_method_pb(m) as i32),
        service_type: filter.service_type.clone(),
        enabled: filter.enabled,
        name: filter.name.clone(),
    }
}

pub fn update_segment(id: String, changes: SegmentChanges) -> pb::UpdateSegmentRequest {
    pb::UpdateSegmentRequest {
        id,
        name: changes.name,
        description: changes.description,
        service_type: changes.service_type,
        recovery_method: changes
            .recovery_method
            .map(|m| recovery_method_pb(m) as i32),
        enabled: changes.enabled,
        return_to_service: changes.return_to_service.map(i32::from),
    }
}

pub fn create_host(new: NewHost) -> pb::CreateHostRequest {
    pb::CreateHostRequest {
        segment_id: new.segment_id,
        name: new.name,
        r#type: new.host_type,
        control_attributes: new.control_attributes,
        reserved: new.reserved,
        on_maintenance: new.on_maintenance,
    }
}

pub fn list_hosts(filter: &HostFilter, page_size: u32, page_token: String) -> pb::ListHostsRequest {
    pb::ListHostsRequest {
        page_size: page_size_pb(page_size),
        page_token,
        segment_id: filter.segment_id.clone(),
        r#type: filter.host_type.clone(),
        reserved: filter.reserved,
        on_maintenance: filter.on_maintenance,
        name: filter.name.clone(),
    }
}

pub fn update_host(id: String, segment_id: String, changes: HostChanges) -> pb::UpdateHostRequest {
    pb::UpdateHostRequest {
        id,
        segment_id,
        name: changes.name,
        r#type: changes.host_type,
        control_attributes: changes.control_attributes,
        reserved: changes.reserved,
        on_maintenance: changes.on_maintenance,
    }
}

pub fn create_notification(new: NewNotification) -> pb::CreateNotificationRequest {
    pb::CreateNotificationRequest {
        r#type: notification_type_pb(new.notification_type) as i32,
        hostname: new.hostname,
        generated_time: Some(timestamp(new.generated_time)),
        payload: new.payload.into_iter().collect(),
        idempotency_key: new.idempotency_key.unwrap_or_default(),
    }
}

pub fn list_notifications(
    filter: &NotificationFilter,
    page_size: u32,
    page_token: String,
) -> pb::ListNotificationsRequest {
    pb::ListNotificationsRequest {
        page_size: page_size_pb(page_size),
        page_token,
        status: filter.status.map(|s| notification_status_pb(s) as i32),
        r#type: filter
            .notification_type
            .map(|t| notification_type_pb(t) as i32),
        hostname: filter.hostname.clone(),
        source_host_id: filter.source_host_id.clone(),
        segment_id: filter.segment_id.clone(),
        generated_since: filter.generated_since.map(timestamp),
    }
}

pub fn list_vmoves(
    notification_id: String,
    filter: &VmoveFilter,
    page_size: u32,
    page_token: String,
) -> pb::ListVmovesRequest {
    pb::ListVmovesRequest {
        notification_id,
        page_size: page_size_pb(page_size),
        page_token,
        status: filter.status.map(|s| vmove_status_pb(s) as i32),
        r#type: filter.vmove_type.map(|t| vmove_type_pb(t) as i32),
    }
}

/// Sizes beyond `i32` are sent as `i32::MAX`, and the API names the field
/// in its refusal.
fn page_size_pb(size: u32) -> i32 {
    i32::try_from(size).unwrap_or(i32::MAX)
}

pub fn next_page_token(token: String) -> Option<String> {
    Some(token).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    #[test]
    fn enums_round_trip_through_the_wire_values() {
        for &m in RecoveryMethod::value_variants() {
            assert_eq!(recovery_method(recovery_method_pb(m) as i32), Some(m));
        }
        for &t in NotificationType::value_variants() {
            assert_eq!(notification_type(notification_type_pb(t) as i32), Some(t));
        }
        for &s in NotificationStatus::value_variants() {
            assert_eq!(
                notification_status(notification_status_pb(s) as i32),
                Some(s)
            );
        }
        for &s in VmoveStatus::value_variants() {
            assert_eq!(vmove_status(vmove_status_pb(s) as i32), Some(s));
        }
        for &t in VmoveType::value_variants() {
            assert_eq!(vmove_type(vmove_type_pb(t) as i32), Some(t));
        }
    }

    #[test]
    fn unknown_and_unspecified_values_are_none() {
        assert_eq!(recovery_method(0), None);
        assert_eq!(recovery_method(99), None);
        assert_eq!(notification_status(-1), None);
        assert_eq!(vmove_type(0), None);
    }

    #[test]
    fn timestamps_round_trip_and_bad_ones_are_none() {
        let at = DateTime::parse_from_rfc3339("2025-03-04T05:06:07.123456789Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(time(Some(timestamp(at))), Some(at));
        assert_eq!(time(None), None);
        assert_eq!(
            time(Some(Timestamp {
                seconds: 0,
                nanos: -1
            })),
            None
        );
    }

    #[test]
    fn an_empty_page_token_means_the_last_page() {
        assert_eq!(next_page_token(String::new()), None);
        assert_eq!(next_page_token("abc".into()), Some("abc".into()));
    }

    #[test]
    fn a_snapshot_without_its_notification_is_dropped() {
        use pb::notification_update::Update;
        let empty = pb::NotificationUpdate {
            update: Some(Update::Snapshot(pb::NotificationSnapshot {
                notification: None,
                vmoves: vec![],
            })),
        };
        assert_eq!(watch_update(empty), None);
        assert_eq!(watch_update(pb::NotificationUpdate { update: None }), None);
    }
}
