//! A notification row as the run lifecycle sees it: its `RunState` read
//! from the row, and written back as a compare-and-set on the status and
//! the run.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};

use super::entity::notification;
use super::{Error, Result, parse_enum};
use crate::domain::{NotificationId, RunId, RunKind};
use crate::lifecycle::{ActiveRun, RunState};
use crate::status::NotificationStatus;

/// The run state a row holds.
pub(super) fn run_state(row: &notification::Model) -> Result<RunState> {
    let status = parse_enum(
        "notifications",
        "status",
        &row.status,
        NotificationStatus::parse,
    )?;
    let kind = row
        .run_kind
        .as_deref()
        .map(|kind| parse_enum("notifications", "run_kind", kind, RunKind::parse))
        .transpose()?;
    let sequence = u64::try_from(row.run_sequence).map_err(|_| Error::Corrupt {
        table: "notifications",
        column: "run_sequence",
        value: row.run_sequence.to_string(),
    })?;
    let attempts = u32::try_from(row.attempts).map_err(|_| Error::Corrupt {
        table: "notifications",
        column: "attempts",
        value: row.attempts.to_string(),
    })?;
    let run = row.run_id.as_ref().map(|id| ActiveRun {
        id: RunId::from(id.as_str()),
        kind: kind.unwrap_or(RunKind::Recover),
        sequence,
        claimed_by: row.claimed_by.clone().unwrap_or_default(),
        // A run without a lease (never written so) counts as lost.
        lease_until: row.lease_until.unwrap_or(DateTime::<Utc>::UNIX_EPOCH),
    });
    Ok(RunState {
        status,
        attempts,
        next_kind: if run.is_some() { None } else { kind },
        run,
        next_attempt_at: row.next_attempt_at,
        retry_until: row.retry_until,
        lock_release_at: row.lock_release_at,
        message: row.message.clone(),
        note: row.note.clone(),
        ended_at: row.ended_at,
    })
}

/// Writes `new` over the row, if it still holds `old`'s status and run
/// (compare-and-set); false if another writer changed it first.
pub(super) async fn write_state<C: ConnectionTrait>(
    conn: &C,
    row: &notification::Model,
    new: &RunState,
    at: DateTime<Utc>,
) -> Result<bool> {
    let run = new.run.as_ref();
    let kind = run.map(|r| r.kind).or(new.next_kind);
    // What clients see changed: the row's update time moves; a lease
    // renewed or a sequence advanced does not move it.
    let visible = new.status.as_str() != row.status || new.message != row.message;
    let updated_at = if visible { at } else { row.updated_at };
    let same_run = match &row.run_id {
        Some(old) => notification::Column::RunId.eq(old.as_str()),
        None => notification::Column::RunId.is_null(),
    };
    let changed = notification::Entity::update_many()
        .col_expr(
            notification::Column::Status,
            Expr::value(new.status.as_str()),
        )
        .col_expr(
            notification::Column::Attempts,
            Expr::value(new.attempts as i32),
        )
        .col_expr(
            notification::Column::RunId,
            Expr::value(run.map(|r| r.id.to_string())),
        )
        .col_expr(
            notification::Column::RunKind,
            Expr::value(kind.map(|k| k.as_str().to_owned())),
        )
        .col_expr(
            notification::Column::RunSequence,
            Expr::value(run.map_or(0, |r| r.sequence as i64)),
        )
        .col_expr(
            notification::Column::ClaimedBy,
            Expr::value(run.map(|r| r.claimed_by.clone())),
        )
        .col_expr(
            notification::Column::LeaseUntil,
            Expr::value(run.map(|r| r.lease_until)),
        )
        .col_expr(
            notification::Column::NextAttemptAt,
            Expr::value(new.next_attempt_at),
        )
        .col_expr(
            notification::Column::RetryUntil,
            Expr::value(new.retry_until),
        )
        .col_expr(
            notification::Column::LockReleaseAt,
            Expr::value(new.lock_release_at),
        )
        .col_expr(
            notification::Column::Message,
            Expr::value(new.message.clone()),
        )
        .col_expr(notification::Column::EndedAt, Expr::value(new.ended_at))
        .col_expr(notification::Column::UpdatedAt, Expr::value(updated_at))
        .filter(notification::Column::Uuid.eq(row.uuid.as_str()))
        .filter(notification::Column::Status.eq(row.status.as_str()))
        .filter(same_run)
        .exec(conn)
        .await?
        .rows_affected;
    Ok(changed == 1)
}

pub(super) async fn notification_row<C: ConnectionTrait>(
    conn: &C,
    id: NotificationId,
    lock: bool,
) -> Result<notification::Model> {
    let query = notification::Entity::find().filter(notification::Column::Uuid.eq(id.to_string()));
    let query = if lock { query.lock_exclusive() } else { query };
    query
        .one(conn)
        .await?
        .ok_or_else(|| Error::not_found("notification", id))
}
