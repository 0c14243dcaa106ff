//! The intake transaction: a batch of failure reports stored at once (a
//! group commit), each checked against what the intake rules need, read
//! with its host locked: its segment, earlier reports of the same incident,
//! the notification that put the host on maintenance, the host's recent
//! failures. The rules themselves are the lifecycle's
//! (`lifecycle::intake`), applied by the caller's `decide`; a flapping host
//! is held in the same transaction.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, Query};
use sea_orm::{
    ActiveValue::NotSet, ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect,
};

use super::entity::{host, notification, segment};
use super::hosts::to_host;
use super::notifications::to_notification;
use super::segments::to_segment;
use super::{Error, Result, Store};
use crate::domain::{
    Host, NewNotification, Notification, NotificationId, NotificationType, Segment,
};
use crate::lifecycle::intake::{Admitted, IntakeFacts};

/// What the intake transaction did with one report of a batch.
#[derive(Debug)]
pub enum Intake<E> {
    /// Stored with the status the rules decided.
    Created(Notification),
    /// Stored, and its host held out of service for flapping.
    CreatedHoldingHost(Notification),
    /// Its idempotency key already names this notification (stored before,
    /// or created from an earlier report of the same batch); nothing was
    /// stored for it. Whether it is the same report is the caller's rule.
    KeyUsed(Notification),
    /// The rules refused it; nothing was stored for it.
    Refused(E),
}

/// The windows the intake reads earlier reports within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntakeWindows {
    /// Duplicates: either side of a report's `generated_time`.
    pub duplicate: Duration,
    /// A host's recent failures: before a report's `generated_time`.
    pub flapping: Duration,
}

impl IntakeWindows {
    /// No earlier report is read.
    pub const NONE: Self = Self {
        duplicate: Duration::ZERO,
        flapping: Duration::ZERO,
    };
}

/// A report's outcome before the batch's rows are read back.
enum Slot<E> {
    Created(String),
    CreatedHolding(String),
    KeyOfBatch(String),
    KeyUsed(Notification),
    Refused(E),
}

/// What the batch's first statements locked and read.
struct Locked {
    segments: HashMap<String, Segment>,
    hosts: HashMap<String, Host>,
    /// The notifications that put the batch's hosts on maintenance.
    maintainers: HashMap<NotificationId, Notification>,
}

fn chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}

fn payload_text(new: &NewNotification) -> String {
    serde_json::to_string(&new.payload).expect("a string map serialises")
}

impl Store {
    /// Stores a batch of failure reports in one transaction. For every
    /// report it reads what the rules need ([`IntakeFacts`]); `decide(i,
    /// facts)` applies the rules to report `i`, and what they admitted is
    /// inserted (a flapping host held). Earlier reports of the batch count
    /// as stored for later ones (duplicates, idempotency keys, recent
    /// failures).
    ///
    /// Segments, then hosts, are locked in id order, so that batches never
    /// wait for each other in a circle. An error stores nothing of the
    /// batch; [`Error::is_contention`] says whether trying it again can
    /// succeed.
    pub async fn create_notifications<E: From<Error>>(
        &self,
        batch: &[NewNotification],
        windows: IntakeWindows,
        mut decide: impl FnMut(usize, &IntakeFacts) -> Result<Admitted, E>,
    ) -> Result<Vec<Intake<E>>> {
        let txn = self.begin_write().await?;
        let locked = lock_hosts(&txn, batch).await?;
        // After the host locks: a report sent twice at once with one key
        // takes the same host lock, so the second batch reads the first's
        // row here (READ COMMITTED) instead of taking it for a duplicate.
        let mut by_key = used_keys::<E>(&txn, batch).await?;
        let mut earlier = earlier_reports(&*txn, batch, &locked.hosts, windows).await?;

        let at = self.now();
        let mut slots: Vec<Slot<E>> = Vec::with_capacity(batch.len());
        let mut rows: Vec<notification::ActiveModel> = Vec::new();
        let mut holds: Vec<(String, String)> = Vec::new();
        for (i, new) in batch.iter().enumerate() {
            if let Some(key) = &new.idempotency_key {
                match by_key.get(key) {
                    Some(Slot::KeyUsed(used)) => {
                        slots.push(Slot::KeyUsed(used.clone()));
                        continue;
                    }
                    Some(
                        Slot::Created(uuid) | Slot::CreatedHolding(uuid) | Slot::KeyOfBatch(uuid),
                    ) => {
                        slots.push(Slot::KeyOfBatch(uuid.clone()));
                        continue;
                    }
                    Some(Slot::Refused(_)) | None => {}
                }
            }
            let facts = facts_of(new, &locked, &earlier, windows)?;
            let admitted = match decide(i, &facts) {
                Ok(admitted) => admitted,
                Err(refused) => {
                    slots.push(Slot::Refused(refused));
                    continue;
                }
            };
            let (Some(host), Some(segment)) = (facts.host, facts.segment) else {
                slots.push(Slot::Refused(
                    Error::not_found("host", &new.hostname).into(),
                ));
                continue;
            };
            let row = new_row(new, &host, &segment, &admitted, at);
            if let Some(reason) = admitted.hold_host {
                holds.push((host.name.clone(), reason));
            }
            let uuid = row.uuid.clone();
            let mut active: notification::ActiveModel = row.clone().into();
            active.id = NotSet;
            rows.push(active);
            // Later reports of the batch see this one as stored.
            earlier.push(row);
            if let Some(key) = &new.idempotency_key {
                by_key.insert(key.clone(), Slot::Created(uuid.clone()));
            }
            slots.push(
                if holds.last().is_some_and(|(name, _)| *name == host.name) {
                    Slot::CreatedHolding(uuid)
                } else {
                    Slot::Created(uuid)
                },
            );
        }
        hold_hosts(&txn, &holds, at).await?;
        let stored = insert(&txn, &slots, rows).await?;
        txn.commit().await?;
        read_back(slots, &stored)
    }
}

/// Share-locks the batch's segments, then locks its hosts, each in id
/// order (the order segment deletes take too); reads the notifications
/// that put them on maintenance.
async fn lock_hosts(txn: &DatabaseTransaction, batch: &[NewNotification]) -> Result<Locked> {
    let mut names: Vec<&str> = batch.iter().map(|n| n.hostname.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut segments = HashMap::new();
    for row in segment::Entity::find()
        .filter(
            segment::Column::Uuid.in_subquery(
                Query::select()
                    .column(host::Column::SegmentUuid)
                    .from(host::Entity)
                    .and_where(host::Column::Name.is_in(names.iter().copied()))
                    .to_owned(),
            ),
        )
        .order_by_asc(segment::Column::Uuid)
        .lock_shared()
        .all(txn)
        .await?
    {
        segments.insert(row.uuid.clone(), to_segment(row)?);
    }
    let mut hosts = HashMap::new();
    for row in host::Entity::find()
        .filter(host::Column::Name.is_in(names))
        .order_by_asc(host::Column::Uuid)
        .lock_exclusive()
        .all(txn)
        .await?
    {
        hosts.insert(row.name.clone(), to_host(row)?);
    }
    let maintainer_ids: Vec<String> = hosts
        .values()
        .filter(|h: &&Host| h.on_maintenance)
        .filter_map(|h| h.maintenance_by.map(|id| id.to_string()))
        .collect();
    let mut maintainers = HashMap::new();
    if !maintainer_ids.is_empty() {
        for row in notification::Entity::find()
            .filter(notification::Column::Uuid.is_in(maintainer_ids))
            .all(txn)
            .await?
        {
            let n = to_notification(row)?;
            maintainers.insert(n.id, n);
        }
    }
    Ok(Locked {
        segments,
        hosts,
        maintainers,
    })
}

/// The notifications the batch's idempotency keys already name.
async fn used_keys<E>(
    txn: &DatabaseTransaction,
    batch: &[NewNotification],
) -> Result<HashMap<String, Slot<E>>> {
    let mut keys: Vec<&str> = batch
        .iter()
        .filter_map(|n| n.idempotency_key.as_deref())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut by_key = HashMap::new();
    if !keys.is_empty() {
        for row in notification::Entity::find()
            .filter(notification::Column::IdempotencyKey.is_in(keys))
            .all(txn)
            .await?
        {
            if let Some(key) = row.idempotency_key.clone() {
                by_key.insert(key, Slot::KeyUsed(to_notification(row)?));
            }
        }
    }
    Ok(by_key)
}

/// The reports of the batch's hosts generated within either window of the
/// batch's reports, in one query; each report's own are picked (and
/// compared exactly: MySQL compares text without regard to case) in
/// [`facts_of`].
async fn earlier_reports<C: ConnectionTrait>(
    conn: &C,
    batch: &[NewNotification],
    hosts: &HashMap<String, Host>,
    windows: IntakeWindows,
) -> Result<Vec<notification::Model>> {
    let reach = chrono(windows.duplicate.max(windows.flapping));
    let mut host_ids: Vec<String> = Vec::new();
    let mut span: Option<(DateTime<Utc>, DateTime<Utc>)> = None;
    for new in batch {
        let Some(host) = hosts.get(&new.hostname) else {
            continue;
        };
        host_ids.push(host.id.to_string());
        let since = new
            .generated_time
            .checked_sub_signed(reach)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let until = new
            .generated_time
            .checked_add_signed(chrono(windows.duplicate))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        span = Some(match span {
            None => (since, until),
            Some((a, b)) => (a.min(since), b.max(until)),
        });
    }
    let Some((since, until)) = span else {
        return Ok(Vec::new());
    };
    host_ids.sort_unstable();
    host_ids.dedup();
    Ok(notification::Entity::find()
        .filter(notification::Column::SourceHostUuid.is_in(host_ids))
        .filter(notification::Column::GeneratedTime.between(since, until))
        .order_by_asc(notification::Column::Id)
        .all(conn)
        .await?)
}

/// What the rules need about `new`, picked from what the transaction read.
fn facts_of(
    new: &NewNotification,
    locked: &Locked,
    earlier: &[notification::Model],
    windows: IntakeWindows,
) -> Result<IntakeFacts> {
    let host = locked.hosts.get(&new.hostname).cloned();
    // A host moved to another segment since the first statement has no
    // locked segment here: the report is refused, as for a host in no
    // segment.
    let segment = host
        .as_ref()
        .and_then(|h| locked.segments.get(&h.segment_id.to_string()))
        .cloned();
    let Some(known) = &host else {
        return Ok(IntakeFacts {
            host,
            segment,
            ..IntakeFacts::default()
        });
    };
    let host_uuid = known.id.to_string();
    let payload = payload_text(new);
    let duplicate = chrono(windows.duplicate);
    let flapping_since = new
        .generated_time
        .checked_sub_signed(chrono(windows.flapping))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let of_host = earlier.iter().filter(|c| c.source_host_uuid == host_uuid);
    let mut candidates = Vec::new();
    let mut recent = Vec::new();
    for row in of_host {
        if row.r#type == new.notification_type.as_str()
            && row.payload == payload
            && (row.generated_time - new.generated_time).abs() <= duplicate
        {
            candidates.push(to_notification(row.clone())?);
        }
        if row.r#type == NotificationType::ComputeHost.as_str()
            && row.generated_time >= flapping_since
            && row.generated_time <= new.generated_time
        {
            recent.push(to_notification(row.clone())?);
        }
    }
    let maintainer = known
        .maintenance_by
        .filter(|_| known.on_maintenance)
        .and_then(|id| locked.maintainers.get(&id).cloned());
    Ok(IntakeFacts {
        host,
        segment,
        candidates,
        maintainer,
        recent,
    })
}

/// The row of an admitted report.
fn new_row(
    new: &NewNotification,
    host: &Host,
    segment: &Segment,
    admitted: &Admitted,
    at: DateTime<Utc>,
) -> notification::Model {
    let status = crate::status::at_intake(&admitted.verdict);
    notification::Model {
        id: 0,
        uuid: NotificationId::new().to_string(),
        r#type: new.notification_type.as_str().to_owned(),
        hostname: new.hostname.clone(),
        source_host_uuid: host.id.to_string(),
        segment_uuid: segment.id.to_string(),
        generated_time: new.generated_time,
        payload: payload_text(new),
        status: status.as_str().to_owned(),
        message: admitted.verdict.message().map(str::to_owned),
        idempotency_key: new.idempotency_key.clone(),
        attempts: 0,
        run_id: None,
        run_kind: None,
        run_sequence: 0,
        claimed_by: None,
        lease_until: None,
        next_attempt_at: None,
        retry_until: None,
        lock_release_at: None,
        ended_at: status.is_terminal().then_some(at),
        note: match &admitted.verdict {
            crate::status::IntakeVerdict::AcceptNoted { note } => Some(note.clone()),
            crate::status::IntakeVerdict::Accept | crate::status::IntakeVerdict::Ignore { .. } => {
                None
            }
        },
        trace_context: new.trace_context.clone(),
        created_at: at,
        updated_at: at,
    }
}

/// Holds flapping hosts: on maintenance, as an operator's, with the
/// reason.
async fn hold_hosts(
    txn: &DatabaseTransaction,
    holds: &[(String, String)],
    at: DateTime<Utc>,
) -> Result<()> {
    for (name, reason) in holds {
        host::Entity::update_many()
            .col_expr(host::Column::OnMaintenance, Expr::value(true))
            .col_expr(
                host::Column::MaintenanceBy,
                Expr::value(Option::<String>::None),
            )
            .col_expr(host::Column::HeldReason, Expr::value(reason.clone()))
            .col_expr(host::Column::UpdatedAt, Expr::value(at))
            .filter(host::Column::Name.eq(name.as_str()))
            .exec(txn)
            .await?;
    }
    Ok(())
}

/// Inserts the admitted reports; returns them as stored, by uuid.
async fn insert<E>(
    txn: &DatabaseTransaction,
    slots: &[Slot<E>],
    rows: Vec<notification::ActiveModel>,
) -> Result<HashMap<String, Notification>> {
    let mut stored = HashMap::new();
    if rows.is_empty() {
        return Ok(stored);
    }
    let uuids: Vec<String> = slots
        .iter()
        .filter_map(|slot| match slot {
            Slot::Created(uuid) | Slot::CreatedHolding(uuid) => Some(uuid.clone()),
            _ => None,
        })
        .collect();
    let inserted = notification::Entity::insert_many(rows);
    let unique = |e| {
        Error::unique(e, || {
            "an idempotency key of the report was used by another request at the same time"
                .to_owned()
        })
    };
    // PostgreSQL and SQLite return the rows (with their ids) from the insert
    // itself; MySQL has them read back.
    let rows = if txn.support_returning() {
        inserted.exec_with_returning(txn).await.map_err(unique)?
    } else {
        inserted.exec_without_returning(txn).await.map_err(unique)?;
        notification::Entity::find()
            .filter(notification::Column::Uuid.is_in(uuids))
            .all(txn)
            .await?
    };
    for row in rows {
        stored.insert(row.uuid.clone(), to_notification(row)?);
    }
    Ok(stored)
}

fn read_back<E>(
    slots: Vec<Slot<E>>,
    stored: &HashMap<String, Notification>,
) -> Result<Vec<Intake<E>>> {
    let get = |uuid: &str| {
        stored.get(uuid).cloned().ok_or_else(|| {
            Error::Database(format!("notification {uuid} just inserted is not there"))
        })
    };
    slots
        .into_iter()
        .map(|slot| {
            Ok(match slot {
                Slot::Created(uuid) => Intake::Created(get(&uuid)?),
                Slot::CreatedHolding(uuid) => Intake::CreatedHoldingHost(get(&uuid)?),
                Slot::KeyOfBatch(uuid) => Intake::KeyUsed(get(&uuid)?),
                Slot::KeyUsed(earlier) => Intake::KeyUsed(earlier),
                Slot::Refused(refused) => Intake::Refused(refused),
            })
        })
        .collect()
}
