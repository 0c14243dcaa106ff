//! Domain types to and from Masakari's JSON, with exhaustive matches: a new
//! enum value breaks the build here until it has a Masakari name.
//!
//! Shapes follow Masakari's objects as its API serialises them
//! (`masakari/objects/*.py` through oslo's `to_primitive`): every column,
//! the integer `id` beside the `uuid`, times as `YYYY-MM-DDTHH:MM:SS.ffffff`
//! in UTC without a zone, `updated_at` null until the first change, and
//! `deleted`/`deleted_at` (always false/null: deletes here are real).

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use serde::Serialize;

use crate::domain::{
    Host, Notification, NotificationType, ProgressEvent, ProgressState, RecoveryMethod, Segment,
    VMove, VMoveType,
};
use crate::status::{NotificationStatus, VMoveStatus};

// ---- enums -----------------------------------------------------------------------

pub const RECOVERY_METHODS: [&str; 4] = ["auto", "reserved_host", "auto_priority", "rh_priority"];
pub const NOTIFICATION_TYPES: [&str; 3] = ["COMPUTE_HOST", "VM", "PROCESS"];

pub fn recovery_method_name(method: RecoveryMethod) -> &'static str {
    match method {
        RecoveryMethod::Auto => "auto",
        RecoveryMethod::ReservedHost => "reserved_host",
        RecoveryMethod::AutoPriority => "auto_priority",
        RecoveryMethod::RhPriority => "rh_priority",
    }
}

pub fn recovery_method(name: &str) -> Option<RecoveryMethod> {
    match name {
        "auto" => Some(RecoveryMethod::Auto),
        "reserved_host" => Some(RecoveryMethod::ReservedHost),
        "auto_priority" => Some(RecoveryMethod::AutoPriority),
        "rh_priority" => Some(RecoveryMethod::RhPriority),
        _ => None,
    }
}

pub fn notification_type_name(kind: NotificationType) -> &'static str {
    match kind {
        NotificationType::ComputeHost => "COMPUTE_HOST",
        NotificationType::Vm => "VM",
        NotificationType::Process => "PROCESS",
    }
}

pub fn notification_type(name: &str) -> Option<NotificationType> {
    match name {
        "COMPUTE_HOST" => Some(NotificationType::ComputeHost),
        "VM" => Some(NotificationType::Vm),
        "PROCESS" => Some(NotificationType::Process),
        _ => None,
    }
}

/// Masakari spells statuses as the status rules do (`status.rs`).
pub fn notification_status_name(status: NotificationStatus) -> &'static str {
    status.as_str()
}

pub fn notification_status(name: &str) -> Option<NotificationStatus> {
    NotificationStatus::parse(name)
}

pub fn vmove_status_name(status: VMoveStatus) -> &'static str {
    status.as_str()
}

pub fn vmove_status(name: &str) -> Option<VMoveStatus> {
    VMoveStatus::parse(name)
}

/// Masakari's three types, and ours for instance restarts (which only VM
/// notifications have, and Masakari shows no vmoves for those).
pub fn vmove_type_name(kind: VMoveType) -> &'static str {
    match kind {
        VMoveType::Evacuation => "evacuation",
        VMoveType::Migration => "migration",
        VMoveType::LiveMigration => "live_migration",
        VMoveType::Restart => "restart",
    }
}

pub fn vmove_type(name: &str) -> Option<VMoveType> {
    match name {
        "evacuation" => Some(VMoveType::Evacuation),
        "migration" => Some(VMoveType::Migration),
        "live_migration" => Some(VMoveType::LiveMigration),
        "restart" => Some(VMoveType::Restart),
        _ => None,
    }
}

/// TaskFlow's atom state for a task whose last event had `state`.
fn taskflow_state(state: ProgressState) -> Option<&'static str> {
    match state {
        ProgressState::Started => Some("RUNNING"),
        ProgressState::Succeeded => Some("SUCCESS"),
        ProgressState::Failed => Some("FAILURE"),
        ProgressState::Skipped => Some("IGNORE"),
        ProgressState::Info => None,
    }
}

// ---- times -----------------------------------------------------------------------

/// oslo's `PERFECT_TIME_FORMAT`.
pub fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

/// `updated_at` as Masakari shows it: null until the row first changed.
fn updated(created: DateTime<Utc>, updated: DateTime<Utc>) -> Option<String> {
    (updated != created).then(|| time(updated))
}

/// An ISO 8601 date or date-time as oslo's `parse_isotime` reads it: `T`
/// or a space between date and time, optional seconds and fraction, and
/// `Z` or an offset (none means UTC).
pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Some(at.with_timezone(&Utc));
    }
    let (date, rest) = match text.get(..10) {
        Some(date) if text.len() > 10 => (date, &text[10..]),
        _ => (text, ""),
    };
    let date = NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
    if rest.is_empty() {
        return Some(Utc.from_utc_datetime(&date.and_time(NaiveTime::MIN)));
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (clock, offset) = split_offset(rest)?;
    let clock = clock.replace(',', ".");
    let time = ["%H:%M:%S%.f", "%H:%M:%S", "%H:%M"]
        .iter()
        .find_map(|f| NaiveTime::parse_from_str(&clock, f).ok())?;
    let naive = NaiveDateTime::new(date, time);
    Some(match offset {
        None => Utc.from_utc_datetime(&naive),
        Some(offset) => offset
            .from_local_datetime(&naive)
            .single()?
            .with_timezone(&Utc),
    })
}

/// The clock and its zone (`Z`, `±HH`, `±HHMM` or `±HH:MM`).
fn split_offset(rest: &str) -> Option<(&str, Option<FixedOffset>)> {
    if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        return Some((clock, FixedOffset::east_opt(0)));
    }
    let Some(at) = rest.rfind(['+', '-']) else {
        return Some((rest, None));
    };
    let (clock, zone) = rest.split_at(at);
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !matches!(digits.len(), 2 | 4) {
        return None;
    }
    let hours: i32 = digits[..2].parse().ok()?;
    let minutes: i32 = if digits.len() == 4 {
        digits[2..].parse().ok()?
    } else {
        0
    };
    Some((
        clock,
        FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60)),
    ))
}

// ---- resources -------------------------------------------------------------------

#[derive(Clone, Debug, Serialize)]
pub struct SegmentView {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub description: Option<String>,
    pub service_type: String,
    pub recovery_method: &'static str,
    pub enabled: bool,
    pub created_at: String,
    pub updated_at: Option<String>,
    pub deleted_at: Option<String>,
    pub deleted: bool,
}

impl From<&Segment> for SegmentView {
    fn from(s: &Segment) -> Self {
        Self {
            id: s.row_id,
            uuid: s.id.to_string(),
            name: s.name.clone(),
            description: s.description.clone(),
            service_type: s.service_type.clone(),
            recovery_method: recovery_method_name(s.recovery_method),
            enabled: s.enabled,
            created_at: time(s.created_at),
            updated_at: updated(s.created_at, s.updated_at),
            deleted_at: None,
            deleted: false,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct HostView {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub failover_segment_id: String,
    pub failover_segment: SegmentView,
    #[serde(rename = "type")]
    pub host_type: String,
    pub reserved: bool,
    pub control_attributes: String,
    pub on_maintenance: bool,
    pub created_at: String,
    pub updated_at: Option<String>,
    pub deleted_at: Option<String>,
    pub deleted: bool,
}

impl HostView {
    /// `segment` is the host's own.
    pub fn new(h: &Host, segment: &Segment) -> Self {
        Self {
            id: h.row_id,
            uuid: h.id.to_string(),
            name: h.name.clone(),
            failover_segment_id: h.segment_id.to_string(),
            failover_segment: segment.into(),
            host_type: h.host_type.clone(),
            reserved: h.reserved,
            control_attributes: h.control_attributes.clone(),
            on_maintenance: h.on_maintenance,
            created_at: time(h.created_at),
            updated_at: updated(h.created_at, h.updated_at),
            deleted_at: None,
            deleted: false,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct NotificationView {
    pub id: i64,
    pub notification_uuid: String,
    pub generated_time: String,
    pub source_host_uuid: String,
    #[serde(rename = "type")]
    pub notification_type: &'static str,
    pub payload: BTreeMap<String, String>,
    pub status: &'static str,
    pub failover_segment_uuid: String,
    pub message: Option<String>,
    pub created_at: String,
    pub updated_at: Option<String>,
    pub deleted_at: Option<String>,
    pub deleted: bool,
    /// Shown from microversion 1.1 by `GET /notifications/{id}` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_workflow_details: Option<Vec<TaskDetails>>,
}

impl From<&Notification> for NotificationView {
    fn from(n: &Notification) -> Self {
        Self {
            id: n.row_id,
            notification_uuid: n.id.to_string(),
            generated_time: time(n.generated_time),
            source_host_uuid: n.source_host_id.to_string(),
            notification_type: notification_type_name(n.notification_type),
            payload: n.payload.clone(),
            status: notification_status_name(n.status()),
            failover_segment_uuid: n.segment_id.to_string(),
            message: n.message.clone(),
            created_at: time(n.created_at),
            updated_at: updated(n.created_at, n.updated_at),
            deleted_at: None,
            deleted: false,
            recovery_workflow_details: None,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct VMoveView {
    pub id: i64,
    pub uuid: String,
    pub notification_uuid: String,
    pub instance_uuid: String,
    pub instance_name: String,
    pub source_host: String,
    pub dest_host: Option<String>,
    pub start_time: Option<String>,
    pub end_time: Option<String>,
    #[serde(rename = "type")]
    pub vmove_type: &'static str,
    pub status: &'static str,
    pub message: Option<String>,
    pub created_at: String,
    pub updated_at: Option<String>,
    pub deleted_at: Option<String>,
    pub deleted: bool,
}

impl From<&VMove> for VMoveView {
    fn from(v: &VMove) -> Self {
        Self {
            id: v.row_id,
            uuid: v.id.to_string(),
            notification_uuid: v.notification_id.to_string(),
            instance_uuid: v.instance_id.clone(),
            instance_name: v.instance_name.clone(),
            source_host: v.source_host.clone(),
            dest_host: v.record.dest_host().map(str::to_owned),
            start_time: v.record.start_time().map(time),
            end_time: v.record.end_time().map(time),
            vmove_type: vmove_type_name(v.vmove_type),
            status: vmove_status_name(v.record.status()),
            message: v.record.message().map(str::to_owned),
            created_at: time(v.created_at),
            updated_at: updated(v.created_at, v.updated_at),
            deleted_at: None,
            deleted: false,
        }
    }
}

// ---- recovery workflow details ---------------------------------------------------

/// One task of a recovery, as Masakari's `NotificationProgressDetails`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskDetails {
    pub name: String,
    pub progress: f64,
    pub state: &'static str,
    pub progress_details: Vec<ProgressDetail>,
}

/// One step of a task: the time as Python prints it and the progress as a
/// string, as Masakari stores them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProgressDetail {
    pub timestamp: String,
    pub progress: String,
    pub message: String,
}

/// Our progress events in Masakari's shape: one entry per task in the
/// order the tasks began, with every event of the task. A task is at 0.0
/// while it runs and at 1.0 when it ended (succeeded, failed or skipped);
/// a task that only reported information is a finished one-step task.
pub fn workflow_details(events: &[ProgressEvent]) -> Vec<TaskDetails> {
    let mut tasks: Vec<TaskDetails> = Vec::new();
    for event in events {
        let index = match tasks.iter().position(|t| t.name == event.task) {
            Some(index) => index,
            None => {
                tasks.push(TaskDetails {
                    name: event.task.clone(),
                    progress: 0.0,
                    state: "PENDING",
                    progress_details: Vec::new(),
                });
                tasks.len() - 1
            }
        };
        let task = &mut tasks[index];
        let running = task.state == "RUNNING";
        match (taskflow_state(event.state), running) {
            (Some("RUNNING"), _) => {
                task.state = "RUNNING";
                task.progress = 0.0;
            }
            // A skipped item inside a running task, or a note: it runs on.
            (Some("IGNORE") | None, true) => {}
            (Some(state), _) => {
                task.state = state;
                task.progress = 1.0;
            }
            (None, false) => {
                task.state = "SUCCESS";
                task.progress = 1.0;
            }
        }
        task.progress_details.push(ProgressDetail {
            timestamp: event.time.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
            progress: format!("{:.1}", task.progress),
            message: event.message.clone(),
        });
    }
    tasks
}

/// The workflow details a notification shows at 1.1 and later. A
/// process `STARTED` report is no recovery in Masakari 22
/// (`_handle_notification_type_process` in `masakari/engine/manager.py`
/// logs it and runs no flow), so it shows `[]`; the steps our engine
/// skipped for it (`IGNORE`) are left out, one it did (re-enabling
/// nova-compute with `process_failure.enable_on_started`) is shown.
pub fn shown_workflow_details(
    notification: &Notification,
    events: &[ProgressEvent],
) -> Vec<TaskDetails> {
    let mut tasks = workflow_details(events);
    if is_process_started(notification) {
        tasks.retain(|t| t.state != "IGNORE");
    }
    tasks
}

/// A process report whose `event` is `STARTED` (any case, as Masakari
/// compares it).
fn is_process_started(notification: &Notification) -> bool {
    notification.notification_type == NotificationType::Process
        && notification
            .payload
            .get("event")
            .is_some_and(|e| e.eq_ignore_ascii_case("STARTED"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_names_round_trip() {
        for m in RecoveryMethod::ALL {
            assert_eq!(recovery_method(recovery_method_name(m)), Some(m));
        }
        for t in NotificationType::ALL {
            assert_eq!(notification_type(notification_type_name(t)), Some(t));
        }
        for s in NotificationStatus::ALL {
            assert_eq!(notification_status(notification_status_name(s)), Some(s));
        }
        for s in VMoveStatus::ALL {
            assert_eq!(vmove_status(vmove_status_name(s)), Some(s));
        }
        for t in VMoveType::ALL {
            assert_eq!(vmove_type(vmove_type_name(t)), Some(t));
        }
        assert_eq!(recovery_method("AUTO"), None);
    }

    #[test]
    fn times_parse_as_oslo_does() {
        let at = |s: &str| parse_time(s).map(time);
        assert_eq!(
            at("2017-04-24 08:34:46").as_deref(),
            Some("2017-04-24T08:34:46.000000")
        );
        assert_eq!(
            at("2017-04-23T07:18:51.523726").as_deref(),
            Some("2017-04-23T07:18:51.523726")
        );
        assert_eq!(
            at("2017-04-23T09:18:51+02:00").as_deref(),
            Some("2017-04-23T07:18:51.000000")
        );
        assert_eq!(
            at("2017-04-23T09:18+0200").as_deref(),
            Some("2017-04-23T07:18:00.000000")
        );
        assert_eq!(
            at("2017-04-23T07:18:51Z").as_deref(),
            Some("2017-04-23T07:18:51.000000")
        );
        assert_eq!(
            at("2017-04-23").as_deref(),
            Some("2017-04-23T00:00:00.000000")
        );
        for bad in [
            "",
            "yesterday",
            "2017-13-01",
            "2017-04-23T25:00",
            "2017-04-23X07:00",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    fn event(task: &str, state: ProgressState, message: &str) -> ProgressEvent {
        ProgressEvent {
            sequence: 0,
            task: task.to_owned(),
            state,
            message: message.to_owned(),
            time: DateTime::from_timestamp(1_700_000_000, 1_000).unwrap(),
            instance_id: None,
        }
    }

    #[test]
    fn progress_events_become_masakari_tasks() {
        let details = workflow_details(&[
            event("disable_compute_service", ProgressState::Started, "a"),
            event("disable_compute_service", ProgressState::Succeeded, "b"),
            event("list_instances", ProgressState::Started, "c"),
            event("select_instances", ProgressState::Skipped, "d"),
            event("list_instances", ProgressState::Info, "e"),
            event("evacuate_instances", ProgressState::Started, "f"),
            event("evacuate_instances", ProgressState::Failed, "g"),
            event("host_started", ProgressState::Info, "h"),
        ]);
        let summary: Vec<(&str, &str, f64, usize)> = details
            .iter()
            .map(|t| {
                (
                    t.name.as_str(),
                    t.state,
                    t.progress,
                    t.progress_details.len(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("disable_compute_service", "SUCCESS", 1.0, 2),
                ("list_instances", "RUNNING", 0.0, 2),
                ("select_instances", "IGNORE", 1.0, 1),
                ("evacuate_instances", "FAILURE", 1.0, 2),
                ("host_started", "SUCCESS", 1.0, 1),
            ]
        );
        let first = &details[0].progress_details;
        assert_eq!(first[0].progress, "0.0");
        assert_eq!(first[1].progress, "1.0");
        assert_eq!(first[0].timestamp, "2023-11-14 22:13:20.000001");
    }

    fn process_report(event: &str) -> Notification {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let fields = crate::domain::NotificationFields {
            id: crate::domain::NotificationId::new(),
            row_id: 1,
            notification_type: NotificationType::Process,
            hostname: "compute-01".to_owned(),
            source_host_id: crate::domain::HostId::new(),
            segment_id: crate::domain::SegmentId::new(),
            generated_time: at,
            payload: [("event".to_owned(), event.to_owned())].into(),
            message: None,
            attempts: 1,
            ended_at: Some(at),
            created_at: at,
            updated_at: at,
        };
        // The status plays no part here: the intake's, as the rules give it.
        let status = crate::status::at_intake(&crate::status::IntakeVerdict::Accept);
        Notification::restore(fields, status)
    }

    #[test]
    fn a_process_started_report_shows_only_the_steps_it_took() {
        let skipped = [event("enable_compute_node", ProgressState::Skipped, "a")];
        assert!(shown_workflow_details(&process_report("started"), &skipped).is_empty());
        let enabled = [event("enable_compute_node", ProgressState::Succeeded, "b")];
        let shown = shown_workflow_details(&process_report("STARTED"), &enabled);
        assert_eq!(shown[0].state, "SUCCESS");
        // Elsewhere a skipped step is shown, as IGNORE.
        let stopped = shown_workflow_details(&process_report("STOPPED"), &skipped);
        assert_eq!(stopped[0].state, "IGNORE");
    }
}
