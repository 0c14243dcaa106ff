//! Notifications and their progress events in the database, and the intake
//! transaction that checks a new failure report against its host, segment
//! and recent reports atomically.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, Query};
use sea_orm::{
    ActiveValue::NotSet, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use super::entity::{host, notification, progress_event, segment};
use super::hosts::to_host;
use super::segments::{page_of, to_segment};
use super::{Error, Result, Store, now, parse_enum, parse_uuid};
use crate::domain::{
    Host, NewNotification, Notification, NotificationFields, NotificationFilter, NotificationId,
    NotificationType, Page, PageRequest, ProgressEvent, ProgressState, Segment, SegmentId,
};
use crate::status::{IntakeVerdict, NotificationEvent, NotificationStatus, Transition as _};

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
    let query = notification::Entity::find()
        .filter(notification::Column::SegmentUuid.eq(segment.to_string()))
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
        attempts: u32::try_from(row.attempts).unwrap_or_default(),
        created_at: row.created_at,
        updated_at: row.updated_at,
    };
    Ok(Notification::restore(fields, status))
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
    /// payload, generated within `window` of this one (either side), that
    /// have not failed (a new report is how a monitor retries a failed
    /// recovery).
    pub duplicates: Vec<Notification>,
    /// The host is on maintenance because of a recovery that then failed:
    /// the maintenance is that recovery's, not an operator's.
    pub maintenance_by_failed_recovery: bool,
}

/// What the intake transaction did with one report of a batch.
#[derive(Debug)]
pub enum Intake<E> {
    /// Stored with the status the rules decided.
    Created(Notification),
    /// Its idempotency key already names this notification (stored before,
    /// or created from an earlier report of the same batch); nothing was
    /// stored for it. Whether it is the same report is the caller's rule.
    KeyUsed(Notification),
    /// The rules refused it; nothing was stored for it.
    Refused(E),
}

/// A report's outcome before the batch's rows are read back.
enum Slot<E> {
    Created(String),
    KeyOfBatch(String),
    KeyUsed(Notification),
    Refused(E),
}

/// Whether `candidate` is a duplicate of `new`: the same host, type and
/// payload, generated within `window` of it (either side: a report stamped
/// ahead by a fast clock must not swallow the ones after it).
fn is_duplicate(
    candidate: &notification::Model,
    new: &NewNotification,
    host_uuid: &str,
    payload: &str,
    window: chrono::Duration,
) -> bool {
    candidate.source_host_uuid == host_uuid
        && candidate.status != NotificationStatus::Failed.as_str()
        && candidate.r#type == new.notification_type.as_str()
        && candidate.payload == payload
        && (candidate.generated_time - new.generated_time).abs() <= window
}

impl Store {
    /// Stores a batch of failure reports in one transaction: a group
    /// commit, one round of statements for many concurrent reports. For
    /// every report it reads what a report alone needs: the notification
    /// its idempotency key already names, its host (locked, with the
    /// segment share-locked) and its duplicate candidates; `decide(i, …)`
    /// applies the intake rules to report `i`, and what they decided is
    /// inserted. Earlier reports of the batch count as stored for later
    /// ones (duplicates, idempotency keys).
    ///
    /// Segments, then hosts, are locked in id order, so that batches never
    /// wait for each other in a circle. An error stores nothing of the
    /// batch; [`Error::is_contention`] says whether trying it again can
    /// succeed (another transaction took one of its idempotency keys, or
    /// the database broke a deadlock).
    pub async fn create_notifications<E: From<Error>>(
        &self,
        batch: &[NewNotification],
        duplicate_window: chrono::Duration,
        mut decide: impl FnMut(usize, IntakeContext<'_>) -> Result<IntakeVerdict, E>,
    ) -> Result<Vec<Intake<E>>> {
        let txn = self.begin_write().await?;

        let mut names: Vec<&str> = batch.iter().map(|n| n.hostname.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        // The reports' segments share-locked, then their hosts locked (the
        // order segment deletes take too), each in id order.
        let mut segments: HashMap<String, Segment> = HashMap::new();
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
            .all(&txn)
            .await?
        {
            segments.insert(row.uuid.clone(), to_segment(row)?);
        }
        let mut hosts: HashMap<String, Host> = HashMap::new();
        for row in host::Entity::find()
            .filter(host::Column::Name.is_in(names))
            .order_by_asc(host::Column::Uuid)
            .lock_exclusive()
            .all(&txn)
            .await?
        {
            hosts.insert(row.name.clone(), to_host(row)?);
        }

        // Hosts a failed recovery left on maintenance.
        let maintainers: Vec<String> = hosts
            .values()
            .filter(|h| h.on_maintenance)
            .filter_map(|h| h.maintenance_by.map(|id| id.to_string()))
            .collect();
        let failed_maintainers: std::collections::HashSet<String> = if maintainers.is_empty() {
            std::collections::HashSet::new()
        } else {
            notification::Entity::find()
                .filter(notification::Column::Uuid.is_in(maintainers))
                .filter(notification::Column::Status.eq(NotificationStatus::Failed.as_str()))
                .all(&txn)
                .await?
                .into_iter()
                .map(|row| row.uuid)
                .collect()
        };

        // After the locks: a report sent twice at once with one key takes
        // the same host lock, so the second batch reads the first's row
        // here (READ COMMITTED) instead of taking it for a duplicate.
        let mut keys: Vec<&str> = batch
            .iter()
            .filter_map(|n| n.idempotency_key.as_deref())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let mut by_key: HashMap<String, Slot<E>> = HashMap::new();
        if !keys.is_empty() {
            for row in notification::Entity::find()
                .filter(notification::Column::IdempotencyKey.is_in(keys))
                .all(&txn)
                .await?
            {
                if let Some(key) = row.idempotency_key.clone() {
                    by_key.insert(key, Slot::KeyUsed(to_notification(row)?));
                }
            }
        }

        // Each report's payload as stored (a sorted map's JSON, so equal
        // maps are equal text), and the candidates for all of them in one
        // query; the comparison is redone exactly below (MySQL compares
        // text without regard to case).
        let payloads: Vec<String> = batch
            .iter()
            .map(|n| serde_json::to_string(&n.payload).expect("a string map serialises"))
            .collect();
        let mut host_ids: Vec<String> = Vec::new();
        let mut kinds: Vec<&str> = Vec::new();
        let mut wanted_payloads: Vec<&str> = Vec::new();
        let mut span: Option<(DateTime<Utc>, DateTime<Utc>)> = None;
        for (new, payload) in batch.iter().zip(&payloads) {
            let Some(host) = hosts.get(&new.hostname) else {
                continue;
            };
            host_ids.push(host.id.to_string());
            kinds.push(new.notification_type.as_str());
            wanted_payloads.push(payload.as_str());
            let since = new
                .generated_time
                .checked_sub_signed(duplicate_window)
                .unwrap_or(DateTime::<Utc>::MIN_UTC);
            let until = new
                .generated_time
                .checked_add_signed(duplicate_window)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            span = Some(match span {
                None => (since, until),
                Some((a, b)) => (a.min(since), b.max(until)),
            });
        }
        host_ids.sort_unstable();
        host_ids.dedup();
        kinds.sort_unstable();
        kinds.dedup();
        wanted_payloads.sort_unstable();
        wanted_payloads.dedup();
        let mut candidates: Vec<notification::Model> = match span {
            Some((since, until)) => {
                notification::Entity::find()
                    .filter(notification::Column::SourceHostUuid.is_in(host_ids))
                    .filter(notification::Column::Type.is_in(kinds))
                    .filter(notification::Column::GeneratedTime.between(since, until))
                    .filter(notification::Column::Payload.is_in(wanted_payloads))
                    .order_by_asc(notification::Column::Id)
                    .all(&txn)
                    .await?
            }
            None => Vec::new(),
        };

        let at = now();
        let mut slots: Vec<Slot<E>> = Vec::with_capacity(batch.len());
        let mut rows: Vec<notification::ActiveModel> = Vec::new();
        for (i, (new, payload)) in batch.iter().zip(&payloads).enumerate() {
            if let Some(key) = &new.idempotency_key {
                match by_key.get(key) {
                    Some(Slot::KeyUsed(earlier)) => {
                        slots.push(Slot::KeyUsed(earlier.clone()));
                        continue;
                    }
                    Some(Slot::Created(uuid) | Slot::KeyOfBatch(uuid)) => {
                        slots.push(Slot::KeyOfBatch(uuid.clone()));
                        continue;
                    }
                    Some(Slot::Refused(_)) | None => {}
                }
            }
            let host = hosts.get(&new.hostname).cloned();
            // A host moved to another segment since the first statement has
            // no locked segment here: the report is refused, as for a host
            // in no segment.
            let segment = host
                .as_ref()
                .and_then(|h| segments.get(&h.segment_id.to_string()))
                .cloned();
            let duplicates = match &host {
                None => Vec::new(),
                Some(host) => {
                    let host_uuid = host.id.to_string();
                    candidates
                        .iter()
                        .filter(|c| is_duplicate(c, new, &host_uuid, payload, duplicate_window))
                        .cloned()
                        .map(to_notification)
                        .collect::<Result<Vec<_>>>()?
                }
            };
            let maintenance_by_failed_recovery = host.as_ref().is_some_and(|h| {
                h.maintenance_by
                    .is_some_and(|by| failed_maintainers.contains(&by.to_string()))
            });
            let context = IntakeContext {
                new,
                host: host.clone(),
                segment: segment.clone(),
                duplicates,
                maintenance_by_failed_recovery,
            };
            let verdict = match decide(i, context) {
                Ok(verdict) => verdict,
                Err(refused) => {
                    slots.push(Slot::Refused(refused));
                    continue;
                }
            };
            let (Some(host), Some(segment)) = (host, segment) else {
                // The rules refuse reports for unknown hosts; nothing to store.
                slots.push(Slot::Refused(
                    Error::not_found("host", &new.hostname).into(),
                ));
                continue;
            };
            let uuid = NotificationId::new().to_string();
            let row = notification::Model {
                id: 0,
                uuid: uuid.clone(),
                r#type: new.notification_type.as_str().to_owned(),
                hostname: new.hostname.clone(),
                source_host_uuid: host.id.to_string(),
                segment_uuid: segment.id.to_string(),
                generated_time: new.generated_time,
                payload: payload.clone(),
                status: crate::status::at_intake(&verdict).as_str().to_owned(),
                message: verdict.message().map(str::to_owned),
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
                trace_context: new.trace_context.clone(),
                created_at: at,
                updated_at: at,
            };
            let mut active: notification::ActiveModel = row.clone().into();
            active.id = NotSet;
            rows.push(active);
            // Later reports of the batch see this one as stored.
            candidates.push(row);
            if let Some(key) = &new.idempotency_key {
                by_key.insert(key.clone(), Slot::Created(uuid.clone()));
            }
            slots.push(Slot::Created(uuid));
        }

        let mut stored: HashMap<String, Notification> = HashMap::new();
        if !rows.is_empty() {
            let uuids: Vec<String> = slots
                .iter()
                .filter_map(|slot| match slot {
                    Slot::Created(uuid) => Some(uuid.clone()),
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
            // PostgreSQL and SQLite return the rows (with their ids) from
            // the insert itself; MySQL has them read back.
            let rows = if txn.support_returning() {
                inserted.exec_with_returning(&txn).await.map_err(unique)?
            } else {
                inserted
                    .exec_without_returning(&txn)
                    .await
                    .map_err(unique)?;
                notification::Entity::find()
                    .filter(notification::Column::Uuid.is_in(uuids))
                    .all(&txn)
                    .await?
            };
            for row in rows {
                stored.insert(row.uuid.clone(), to_notification(row)?);
            }
        }
        txn.commit().await?;

        let read_back = |uuid: &str| {
            stored.get(uuid).cloned().ok_or_else(|| {
                Error::Database(format!("notification {uuid} just inserted is not there"))
            })
        };
        slots
            .into_iter()
            .map(|slot| {
                Ok(match slot {
                    Slot::Created(uuid) => Intake::Created(read_back(&uuid)?),
                    Slot::KeyOfBatch(uuid) => Intake::KeyUsed(read_back(&uuid)?),
                    Slot::KeyUsed(earlier) => Intake::KeyUsed(earlier),
                    Slot::Refused(refused) => Intake::Refused(refused),
                })
            })
            .collect()
    }
}

impl Store {
    pub async fn notification(&self, id: NotificationId) -> Result<Notification> {
        let row = notification::Entity::find()
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("notification", id))?;
        to_notification(row)
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
                current.status()
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
