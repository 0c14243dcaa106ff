//! Notifications and their progress events in the database, and the intake
//! transaction that checks a new failure report against its host, segment
//! and recent reports atomically.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect,
};

use super::entity::{host, notification, progress_event, segment};
use super::hosts::to_host;
use super::segments::{page_of, to_segment};
use super::{Error, Result, Store, now, parse_enum, parse_uuid};
use crate::domain::{
    Host, NewNotification, Notification, NotificationFilter, NotificationId, NotificationType,
    Page, PageRequest, ProgressEvent, ProgressState, Segment, SegmentId,
};
use crate::status::{NotificationEvent, NotificationStatus};

/// The statuses that count as unfinished.
pub(super) const UNFINISHED: [NotificationStatus; 3] = [
    NotificationStatus::New,
    NotificationStatus::Running,
    NotificationStatus::Error,
];

/// A segment's notifications that are new, running or error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unfinished {
    pub count: u64,
    /// A few of them, to name in an error message.
    pub examples: Vec<NotificationId>,
}

pub(super) async fn unfinished_in_segment<C: ConnectionTrait>(
    conn: &C,
    segment: SegmentId,
) -> Result<Unfinished> {
    let query = notification::Entity::find()
        .filter(notification::Column::SegmentUuid.eq(segment.to_string()))
        .filter(notification::Column::Status.is_in(UNFINISHED.map(|s| s.as_str())));
    let count = query.clone().count(conn).await?;
    let examples = if count == 0 {
        Vec::new()
    } else {
        query
            .order_by_asc(notification::Column::Id)
            .limit(3)
            .all(conn)
            .await?
            .iter()
            .map(|row| parse_uuid("notifications", "uuid", &row.uuid))
            .collect::<Result<Vec<_>>>()?
    };
    Ok(Unfinished { count, examples })
}

pub(super) fn to_notification(row: notification::Model) -> Result<Notification> {
    let payload: BTreeMap<String, String> =
        serde_json::from_str(&row.payload).map_err(|_| Error::Corrupt {
            table: "notifications",
            column: "payload",
            value: row.payload.clone(),
        })?;
    Ok(Notification {
        id: parse_uuid("notifications", "uuid", &row.uuid)?,
        row_id: row.id,
        notification_type: parse_enum(
            "notifications",
            "type",
            &row.r#type,
            NotificationType::parse,
        )?,
        source_host_id: parse_uuid("notifications", "source_host_uuid", &row.source_host_uuid)?,
        segment_id: parse_uuid("notifications", "segment_uuid", &row.segment_uuid)?,
        status: parse_enum(
            "notifications",
            "status",
            &row.status,
            NotificationStatus::parse,
        )?,
        hostname: row.hostname,
        generated_time: row.generated_time,
        payload,
        message: row.message,
        attempts: u32::try_from(row.attempts).unwrap_or_default(),
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

fn to_progress_event(row: progress_event::Model) -> Result<ProgressEvent> {
    Ok(ProgressEvent {
        sequence: u64::try_from(row.sequence).unwrap_or_default(),
        state: parse_enum("progress_events", "state", &row.state, ProgressState::parse)?,
        task: row.task,
        message: row.message,
        time: row.time,
        instance_id: row.instance_uuid,
    })
}

/// What the intake rules see about a new report, read inside the intake
/// transaction with the host locked.
#[derive(Clone, Debug)]
pub struct IntakeContext<'a> {
    pub new: &'a NewNotification,
    /// The host named by the report, if registered.
    pub host: Option<Host>,
    /// The host's segment.
    pub segment: Option<Segment>,
    /// Earlier reports of the same type for the same host, with the same
    /// payload, generated within `window` of this one (either side).
    pub duplicates: Vec<Notification>,
}

/// What the intake rules decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntakeDecision {
    /// `New`, or `Ignored` (for example: the segment is disabled).
    pub status: NotificationStatus,
    pub message: Option<String>,
}

impl Store {
    /// Stores a failure report in one transaction: reads the host (locked,
    /// with its segment share-locked) and the duplicate candidates, lets
    /// `decide` apply the intake rules, and inserts what it decided.
    pub async fn create_notification<E: From<Error>>(
        &self,
        new: &NewNotification,
        duplicate_window: chrono::Duration,
        decide: impl FnOnce(IntakeContext<'_>) -> Result<IntakeDecision, E>,
    ) -> Result<Notification, E> {
        let txn = self.begin_write().await?;
        // Lock order: segment (shared), then host, as segment deletes do.
        let unlocked = host::Entity::find()
            .filter(host::Column::Name.eq(new.hostname.as_str()))
            .one(&txn)
            .await
            .map_err(Error::from)?;
        let (host, segment) = match unlocked {
            None => (None, None),
            Some(row) => {
                let segment = segment::Entity::find()
                    .filter(segment::Column::Uuid.eq(row.segment_uuid.as_str()))
                    .lock_shared()
                    .one(&txn)
                    .await
                    .map_err(Error::from)?;
                let host = host::Entity::find()
                    .filter(host::Column::Uuid.eq(row.uuid.as_str()))
                    .lock_exclusive()
                    .one(&txn)
                    .await
                    .map_err(Error::from)?;
                (
                    host.map(to_host).transpose()?,
                    segment.map(to_segment).transpose()?,
                )
            }
        };
        let duplicates = match &host {
            None => Vec::new(),
            Some(host) => {
                // Within the window either side: a report stamped ahead
                // (a fast clock) must not swallow the ones after it.
                let since = new
                    .generated_time
                    .checked_sub_signed(duplicate_window)
                    .unwrap_or(DateTime::<Utc>::MIN_UTC);
                let until = new
                    .generated_time
                    .checked_add_signed(duplicate_window)
                    .unwrap_or(DateTime::<Utc>::MAX_UTC);
                notification::Entity::find()
                    .filter(notification::Column::SourceHostUuid.eq(host.id.to_string()))
                    .filter(notification::Column::Type.eq(new.notification_type.as_str()))
                    .filter(notification::Column::GeneratedTime.between(since, until))
                    .order_by_asc(notification::Column::Id)
                    .all(&txn)
                    .await
                    .map_err(Error::from)?
                    .into_iter()
                    .map(to_notification)
                    .filter(|n| n.as_ref().map_or(true, |n| n.payload == new.payload))
                    .collect::<Result<Vec<_>>>()?
            }
        };
        let context = IntakeContext {
            new,
            host: host.clone(),
            segment: segment.clone(),
            duplicates,
        };
        let decision = decide(context)?;
        let (Some(host), Some(segment)) = (host, segment) else {
            // The rules refuse reports for unknown hosts; nothing to store.
            return Err(Error::not_found("host", &new.hostname).into());
        };

        let at = now();
        let row = notification::ActiveModel {
            uuid: Set(NotificationId::new().to_string()),
            r#type: Set(new.notification_type.as_str().to_owned()),
            hostname: Set(new.hostname.clone()),
            source_host_uuid: Set(host.id.to_string()),
            segment_uuid: Set(segment.id.to_string()),
            generated_time: Set(new.generated_time),
            payload: Set(serde_json::to_string(&new.payload).expect("a string map serialises")),
            status: Set(decision.status.as_str().to_owned()),
            message: Set(decision.message),
            idempotency_key: Set(new.idempotency_key.clone()),
            attempts: Set(0),
            run_id: Set(None),
            run_sequence: Set(0),
            claimed_by: Set(None),
            lease_until: Set(None),
            next_attempt_at: Set(None),
            trace_context: Set(new.trace_context.clone()),
            created_at: Set(at),
            updated_at: Set(at),
            ..Default::default()
        }
        .insert(&txn)
        .await
        .map_err(|e| {
            Error::unique(e, || {
                format!(
                    "idempotency_key {:?} was used by another request",
                    new.idempotency_key.as_deref().unwrap_or_default()
                )
            })
        })?;
        txn.commit().await.map_err(Error::from)?;
        Ok(to_notification(row)?)
    }

    pub async fn notification(&self, id: NotificationId) -> Result<Notification> {
        let row = notification::Entity::find()
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("notification", id))?;
        to_notification(row)
    }

    pub async fn notification_by_idempotency_key(&self, key: &str) -> Result<Option<Notification>> {
        notification::Entity::find()
            .filter(notification::Column::IdempotencyKey.eq(key))
            .one(&self.db)
            .await?
            .map(to_notification)
            .transpose()
    }

    /// The notification's progress events, in order.
    pub async fn progress_events(&self, id: NotificationId) -> Result<Vec<ProgressEvent>> {
        progress_event::Entity::find()
            .filter(progress_event::Column::NotificationUuid.eq(id.to_string()))
            .order_by_asc(progress_event::Column::Sequence)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_progress_event)
            .collect()
    }

    /// Newest first.
    pub async fn list_notifications(
        &self,
        filter: &NotificationFilter,
        page: PageRequest,
    ) -> Result<Page<Notification>> {
        let mut query = notification::Entity::find().order_by_desc(notification::Column::Id);
        if let Some(after) = page.after {
            query = query.filter(notification::Column::Id.lt(after.after));
        }
        if let Some(status) = filter.status {
            query = query.filter(notification::Column::Status.eq(status.as_str()));
        }
        if let Some(kind) = filter.notification_type {
            query = query.filter(notification::Column::Type.eq(kind.as_str()));
        }
        if let Some(hostname) = &filter.hostname {
            query = query.filter(notification::Column::Hostname.eq(hostname.as_str()));
        }
        if let Some(host) = filter.source_host_id {
            query = query.filter(notification::Column::SourceHostUuid.eq(host.to_string()));
        }
        if let Some(segment) = filter.segment_id {
            query = query.filter(notification::Column::SegmentUuid.eq(segment.to_string()));
        }
        // Nothing is stored before 1970 (intake refuses it): an earlier
        // bound is no bound. A later one is kept within what every backend
        // can compare (PostgreSQL refuses years past 294276, SQLite
        // compares text).
        if let Some(since) = filter
            .generated_since
            .filter(|since| *since > DateTime::<Utc>::UNIX_EPOCH)
        {
            let latest = DateTime::<Utc>::from_timestamp(253_402_300_799, 0) // 9999-12-31T23:59:59Z
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            query = query.filter(notification::Column::GeneratedTime.gte(since.min(latest)));
        }
        let rows = query.limit(u64::from(page.size) + 1).all(&self.db).await?;
        page_of(rows, page.size, |r| r.id, to_notification)
    }

    /// Moves a notification from `from` by `event`, as a compare-and-set:
    /// the row changes only if its status is still `from`, so of two
    /// writers that read the same status exactly one wins; the other gets
    /// [`Error::Stale`].
    pub async fn transition_notification(
        &self,
        id: NotificationId,
        from: NotificationStatus,
        event: NotificationEvent,
        message: Option<String>,
    ) -> Result<Notification> {
        let to = from.on(event).map_err(Error::Illegal)?;
        let changed = notification::Entity::update_many()
            .col_expr(notification::Column::Status, Expr::value(to.as_str()))
            .col_expr(notification::Column::Message, Expr::value(message))
            .col_expr(notification::Column::UpdatedAt, Expr::value(now()))
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .filter(notification::Column::Status.eq(from.as_str()))
            .exec(&self.db)
            .await?
            .rows_affected;
        if changed == 0 {
            let current = self.notification(id).await?;
            return Err(Error::Stale(format!(
                "notification {id} is {} now, not {from}",
                current.status
            )));
        }
        self.notification(id).await
    }

    /// Counts notifications by status (for the scans and for tests).
    pub async fn count_notifications(&self, status: NotificationStatus) -> Result<u64> {
        Ok(notification::Entity::find()
            .filter(notification::Column::Status.eq(status.as_str()))
            .count(&self.db)
            .await?)
    }
}
