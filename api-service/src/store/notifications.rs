//! Notifications and their progress events in the database, and the intake
//! transaction that checks a new failure report against its host, segment
//! and recent reports atomically.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
};

use super::entity::{notification, progress_event};
use super::segments::page_of;
use super::{Error, Result, Store, parse_enum, parse_uuid};
use crate::domain::{
    HostId, Notification, NotificationFields, NotificationFilter, NotificationId, NotificationType,
    Page, PageRequest, ProgressEvent, ProgressState, SegmentId,
};
use crate::status::{NotificationEvent, NotificationStatus, Transition as _};

/// The statuses that count as unfinished, as stored.
pub(super) fn unfinished() -> [&'static str; 3] {
    NotificationStatus::UNFINISHED.map(NotificationStatus::as_str)
}

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
    unfinished_where(
        conn,
        notification::Column::SegmentUuid.eq(segment.to_string()),
    )
    .await
}

pub(super) async fn unfinished_of_host<C: ConnectionTrait>(
    conn: &C,
    host: HostId,
) -> Result<Unfinished> {
    unfinished_where(
        conn,
        notification::Column::SourceHostUuid.eq(host.to_string()),
    )
    .await
}

async fn unfinished_where<C: ConnectionTrait>(
    conn: &C,
    condition: sea_orm::sea_query::SimpleExpr,
) -> Result<Unfinished> {
    let query = notification::Entity::find()
        .filter(condition)
        .filter(notification::Column::Status.is_in(unfinished()));
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
    let status = parse_enum(
        "notifications",
        "status",
        &row.status,
        NotificationStatus::parse,
    )?;
    let fields = NotificationFields {
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
        hostname: row.hostname,
        generated_time: row.generated_time,
        payload,
        message: row.message,
        attempts: u32::try_from(row.attempts).map_err(|_| Error::Corrupt {
            table: "notifications",
            column: "attempts",
            value: row.attempts.to_string(),
        })?,
        ended_at: row.ended_at,
        created_at: row.created_at,
        updated_at: row.updated_at,
    };
    Ok(Notification::restore(fields, status))
}

fn to_progress_event(row: progress_event::Model) -> Result<ProgressEvent> {
    Ok(ProgressEvent {
        sequence: u64::try_from(row.sequence).map_err(|_| Error::Corrupt {
            table: "progress_events",
            column: "sequence",
            value: row.sequence.to_string(),
        })?,
        state: parse_enum("progress_events", "state", &row.state, ProgressState::parse)?,
        task: row.task,
        message: row.message,
        time: row.time,
        instance_id: row.instance_uuid,
    })
}

impl Store {
    pub async fn notification(&self, id: NotificationId) -> Result<Notification> {
        let row = notification::Entity::find()
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .one(&self.db())
            .await?
            .ok_or_else(|| Error::not_found("notification", id))?;
        to_notification(row)
    }

    /// The notification's progress events, in order.
    pub async fn progress_events(&self, id: NotificationId) -> Result<Vec<ProgressEvent>> {
        progress_event::Entity::find()
            .filter(progress_event::Column::NotificationUuid.eq(id.to_string()))
            .order_by_asc(progress_event::Column::Sequence)
            .all(&self.db())
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
        let rows = query
            .limit(u64::from(page.size) + 1)
            .all(&self.db())
            .await?;
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
            .col_expr(notification::Column::UpdatedAt, Expr::value(self.now()))
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .filter(notification::Column::Status.eq(from.as_str()))
            .exec(&self.db())
            .await?
            .rows_affected;
        if changed == 0 {
            let current = self.notification(id).await?;
            return Err(Error::Stale(format!(
                "notification {id} is {} now, not {from}",
                current.status()
            )));
        }
        self.notification(id).await
    }

    /// Counts notifications by status (for the scans and for tests).
    pub async fn count_notifications(&self, status: NotificationStatus) -> Result<u64> {
        Ok(notification::Entity::find()
            .filter(notification::Column::Status.eq(status.as_str()))
            .count(&self.db())
            .await?)
    }
}
