//! Notifications: failure reports from monitoring agents, and the progress
//! of their recovery.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::payload::NotificationPayload;
use super::validation::{InvalidField, TextRule, filter_text, hostname, safe_text};
use super::{HostId, NotificationId, SegmentId};
use crate::status::NotificationStatus;

pub use instanceha_proto::model::{NotificationType, ProgressState};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    pub id: NotificationId,
    /// The row's integer key (Masakari's `id`), in creation order.
    pub row_id: i64,
    pub notification_type: NotificationType,
    pub hostname: String,
    pub source_host_id: HostId,
    pub segment_id: SegmentId,
    pub generated_time: DateTime<Utc>,
    pub payload: BTreeMap<String, String>,
    /// Private: only the status rules change it (in the store, through
    /// `NotificationStatus::on`); everything else reads it.
    status: NotificationStatus,
    pub message: Option<String>,
    /// Recovery runs started so far.
    pub attempts: u32,
    /// When it reached a terminal status.
    pub ended_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A notification as persisted, without its status: what
/// [`Notification::restore`] puts together with the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotificationFields {
    pub id: NotificationId,
    pub row_id: i64,
    pub notification_type: NotificationType,
    pub hostname: String,
    pub source_host_id: HostId,
    pub segment_id: SegmentId,
    pub generated_time: DateTime<Utc>,
    pub payload: BTreeMap<String, String>,
    pub message: Option<String>,
    pub attempts: u32,
    pub ended_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Notification {
    /// A notification read back from the store with the status it holds.
    pub fn restore(fields: NotificationFields, status: NotificationStatus) -> Self {
        let NotificationFields {
            id,
            row_id,
            notification_type,
            hostname,
            source_host_id,
            segment_id,
            generated_time,
            payload,
            message,
            attempts,
            ended_at,
            created_at,
            updated_at,
        } = fields;
        Self {
            id,
            row_id,
            notification_type,
            hostname,
            source_host_id,
            segment_id,
            generated_time,
            payload,
            status,
            message,
            attempts,
            ended_at,
            created_at,
            updated_at,
        }
    }

    pub fn status(&self) -> NotificationStatus {
        self.status
    }
}

/// Longest idempotency key a client may send.
pub const IDEMPOTENCY_KEY_MAX: usize = 255;

/// A failure report to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewNotification {
    pub notification_type: NotificationType,
    pub hostname: String,
    pub generated_time: DateTime<Utc>,
    pub payload: BTreeMap<String, String>,
    pub idempotency_key: Option<String>,
    /// W3C `traceparent` of the creating request, so the recovery joins
    /// its trace.
    pub trace_context: Option<String>,
}

impl NewNotification {
    /// Validates the report and returns its typed payload.
    pub fn validate(&self) -> Result<NotificationPayload, InvalidField> {
        hostname("hostname", &self.hostname)?;
        if let Some(key) = &self.idempotency_key {
            if key.is_empty() || key.chars().count() > IDEMPOTENCY_KEY_MAX {
                return Err(InvalidField::new(
                    "idempotency_key",
                    format!("must be 1 to {IDEMPOTENCY_KEY_MAX} characters"),
                ));
            }
            // A key is an opaque token: control characters have no place
            // in it, and PostgreSQL refuses NUL in text.
            safe_text("idempotency_key", key, TextRule::Strict)?;
        }
        NotificationPayload::parse(self.notification_type, &self.payload)
    }
}

/// What to list; `None` matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotificationFilter {
    pub status: Option<NotificationStatus>,
    pub notification_type: Option<NotificationType>,
    pub hostname: Option<String>,
    pub source_host_id: Option<HostId>,
    pub segment_id: Option<SegmentId>,
    pub generated_since: Option<DateTime<Utc>>,
}

impl NotificationFilter {
    /// The text filters are values a notification can have.
    pub fn validate(&self) -> Result<(), InvalidField> {
        filter_text("hostname", self.hostname.as_deref())
    }
}

/// One step of a recovery, in order within its notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressEvent {
    pub sequence: u64,
    pub task: String,
    pub state: ProgressState,
    pub message: String,
    pub time: DateTime<Utc>,
    pub instance_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(key: &str) -> NewNotification {
        NewNotification {
            notification_type: NotificationType::ComputeHost,
            hostname: "compute-01".into(),
            generated_time: Utc::now(),
            payload: BTreeMap::from([("event".to_owned(), "STOPPED".to_owned())]),
            idempotency_key: Some(key.to_owned()),
            trace_context: None,
        }
    }

    #[test]
    fn idempotency_keys_are_bounded_printable_text() {
        assert!(report("agent-1/compute-01/1796144497").validate().is_ok());
        for bad in ["", "a\0a", "line\nbreak", "tab\there"] {
            let err = report(bad).validate().unwrap_err();
            assert_eq!(err.field, "idempotency_key", "{bad:?}: {err}");
        }
        let long = "k".repeat(IDEMPOTENCY_KEY_MAX + 1);
        assert_eq!(
            report(&long).validate().unwrap_err().field,
            "idempotency_key"
        );
    }
}
