//! The dispatcher's persistence: claiming a notification for a run
//! (compare-and-set, so exactly one replica runs it), taking over runs
//! whose replica is gone, persisting a run's events in order and exactly
//! once (by run id and sequence number), and resolving a finished run with
//! the status rules, each in one transaction.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait as _};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseTransaction, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use super::entity::{host, notification, progress_event, vmove};
use super::notifications::{to_notification, unfinished};
use super::vmoves::{to_record, to_vmove};
use super::{Error, Result, Store, now, parse_enum};
use crate::domain::{
    InstanceRef, Notification, NotificationId, ProgressEvent, RunClaim, SequencedEvent, VMove,
    VMoveId, VMoveType,
};
use crate::status::ledger::{LedgerVMove, RunLedger, Step};
use crate::status::{
    NotificationEvent, NotificationStatus, Resolution, RunEnd, RunOutcome, VMoveEvent, VMoveRecord,
    VMoveStatus, VMoveView, resolve_final_status,
};

/// Rows per INSERT, below every backend's parameter limit.
const INSERT_CHUNK: usize = 500;

/// A notification the dispatcher may have work for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    pub id: NotificationId,
    pub status: NotificationStatus,
    pub run_id: Option<String>,
}

/// What persisting a batch of events changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub vmoves: Vec<VMove>,
    pub progress: Vec<ProgressEvent>,
    /// The engine's `Done`, if the batch held it.
    pub done: Option<RunOutcome>,
    /// The highest sequence number now persisted.
    pub sequence: u64,
}

/// What resolving a run changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub notification: Notification,
    pub vmoves: Vec<VMove>,
}

async fn locked_notification(
    txn: &DatabaseTransaction,
    id: NotificationId,
) -> Result<notification::Model> {
    notification::Entity::find()
        .filter(notification::Column::Uuid.eq(id.to_string()))
        .lock_exclusive()
        .one(txn)
        .await?
        .ok_or_else(|| Error::not_found("notification", id))
}

/// The row, if it is running run `run_id`.
fn check_run(row: &notification::Model, run_id: &str) -> Result<()> {
    if status_of(row)? != NotificationStatus::Running || row.run_id.as_deref() != Some(run_id) {
        return Err(Error::Stale(format!(
            "notification {} is {} with run {}, not running run {run_id}",
            row.uuid,
            row.status,
            row.run_id.as_deref().unwrap_or("none")
        )));
    }
    Ok(())
}

fn status_of(row: &notification::Model) -> Result<NotificationStatus> {
    parse_enum(
        "notifications",
        "status",
        &row.status,
        NotificationStatus::parse,
    )
}

fn plus(at: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    at + chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX / 2)
}

/// Writes a vmove's record (and its step, when one is given).
async fn save_vmove(
    txn: &DatabaseTransaction,
    row: &vmove::Model,
    record: &VMoveRecord,
    step: Option<&Step>,
) -> Result<vmove::Model> {
    let mut active: vmove::ActiveModel = row.clone().into();
    set_record(&mut active, record);
    if let Some(step) = step {
        set_step(&mut active, step);
    }
    active.updated_at = Set(now());
    Ok(active.update(txn).await?)
}

fn set_record(active: &mut vmove::ActiveModel, record: &VMoveRecord) {
    active.status = Set(record.status().as_str().to_owned());
    active.start_time = Set(record.start_time());
    active.end_time = Set(record.end_time());
    active.message = Set(record.message().map(str::to_owned));
    active.dest_host = Set(record.dest_host().map(str::to_owned));
    active.attempts = Set(record.attempts() as i32);
}

fn set_step(active: &mut vmove::ActiveModel, step: &Step) {
    active.step = Set(Some(step.name.clone()));
    active.step_message = Set(step.message.clone());
    active.step_time = Set(step.at);
}

fn ledger_vmove(row: &vmove::Model) -> Result<LedgerVMove> {
    Ok(LedgerVMove {
        instance_name: row.instance_name.clone(),
        source_host: row.source_host.clone(),
        vmove_type: parse_enum("vmoves", "type", &row.r#type, VMoveType::parse)?,
        record: to_record(row)?,
        step: row.step.as_ref().map(|name| Step {
            name: name.clone(),
            message: row.step_message.clone(),
            at: row.step_time,
        }),
    })
}

impl Store {
    /// Claims a `new` or due `error` notification for a new run: one
    /// compare-and-set on its status, so of two replicas exactly one wins.
    /// `None` if it is not claimable (any more).
    pub async fn claim(
        &self,
        id: NotificationId,
        replica: &str,
        lease: Duration,
    ) -> Result<Option<(Notification, RunClaim)>> {
        let current = self.notification(id).await?;
        let Ok(to) = current.status().on(NotificationEvent::Start) else {
            return Ok(None);
        };
        let at = now();
        let run_id = uuid::Uuid::new_v4().to_string();
        let changed = notification::Entity::update_many()
            .col_expr(notification::Column::Status, Expr::value(to.as_str()))
            .col_expr(
                notification::Column::Attempts,
                Expr::col(notification::Column::Attempts).add(1),
            )
            .col_expr(notification::Column::RunId, Expr::value(run_id.clone()))
            .col_expr(notification::Column::RunSequence, Expr::value(0i64))
            .col_expr(notification::Column::ClaimedBy, Expr::value(replica))
            .col_expr(
                notification::Column::LeaseUntil,
                Expr::value(plus(at, lease)),
            )
            .col_expr(
                notification::Column::NextAttemptAt,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .col_expr(
                notification::Column::Message,
                Expr::value(Option::<String>::None),
            )
            .col_expr(notification::Column::UpdatedAt, Expr::value(at))
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .filter(notification::Column::Status.eq(current.status().as_str()))
            .filter(
                notification::Column::NextAttemptAt
                    .is_null()
                    .or(notification::Column::NextAttemptAt.lte(at)),
            )
            .exec(&self.db)
            .await?
            .rows_affected;
        if changed == 0 {
            return Ok(None);
        }
        let row = notification::Entity::find()
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("notification", id))?;
        let claimed = RunClaim {
            notification_id: id,
            run_id,
            attempt: u32::try_from(row.attempts).unwrap_or(1),
            trace_context: row.trace_context.clone(),
        };
        Ok(Some((to_notification(row)?, claimed)))
    }

    /// Takes over a `running` notification whose run is lost: its lease
    /// expired, or it was this replica's before a restart. The caller then
    /// resolves the lost run.
    pub async fn take_over(
        &self,
        id: NotificationId,
        run_id: &str,
        replica: &str,
        lease: Duration,
    ) -> Result<bool> {
        let at = now();
        let changed = notification::Entity::update_many()
            .col_expr(notification::Column::ClaimedBy, Expr::value(replica))
            .col_expr(
                notification::Column::LeaseUntil,
                Expr::value(plus(at, lease)),
            )
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .filter(notification::Column::Status.eq(NotificationStatus::Running.as_str()))
            .filter(notification::Column::RunId.eq(run_id))
            .filter(
                notification::Column::ClaimedBy
                    .eq(replica)
                    .or(notification::Column::LeaseUntil.lt(at))
                    .or(notification::Column::LeaseUntil.is_null()),
            )
            .exec(&self.db)
            .await?
            .rows_affected;
        Ok(changed == 1)
    }

    /// Extends the lease of a run this replica is running.
    pub async fn renew_lease(
        &self,
        id: NotificationId,
        run_id: &str,
        lease: Duration,
    ) -> Result<bool> {
        let changed = notification::Entity::update_many()
            .col_expr(
                notification::Column::LeaseUntil,
                Expr::value(plus(now(), lease)),
            )
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .filter(notification::Column::Status.eq(NotificationStatus::Running.as_str()))
            .filter(notification::Column::RunId.eq(run_id))
            .exec(&self.db)
            .await?
            .rows_affected;
        Ok(changed == 1)
    }

    /// The instances of a notification still without a result.
    pub async fn unresolved_vmoves(&self, id: NotificationId) -> Result<Vec<InstanceRef>> {
        Ok(vmove::Entity::find()
            .filter(vmove::Column::NotificationUuid.eq(id.to_string()))
            .filter(vmove::Column::Status.is_in(VMoveStatus::UNRESOLVED.map(VMoveStatus::as_str)))
            .order_by_asc(vmove::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(|row| InstanceRef {
                instance_id: row.instance_uuid,
                instance_name: row.instance_name,
                source_host: row.source_host,
            })
            .collect())
    }

    /// Persists a batch of a run's events in one transaction, in order and
    /// exactly once: the run's state is loaded, the [`RunLedger`] applies
    /// the events (replays skipped; a gap, an instance not in the plan, or
    /// a transition the status rules refuse is [`Error::Rejected`]) and
    /// what it decided is written; a refused batch writes nothing.
    pub async fn apply_run_events(
        &self,
        id: NotificationId,
        run_id: &str,
        events: &[SequencedEvent],
        lease: Duration,
    ) -> Result<Applied> {
        let txn = self.begin_write().await?;
        let row = locked_notification(&txn, id).await?;
        check_run(&row, run_id)?;
        let sequence = u64::try_from(row.run_sequence).unwrap_or_default();
        let nid = id.to_string();

        let mut rows: HashMap<String, vmove::Model> = HashMap::new();
        for chunk in RunLedger::mentioned(events, sequence).chunks(INSERT_CHUNK) {
            for row in vmove::Entity::find()
                .filter(vmove::Column::NotificationUuid.eq(nid.as_str()))
                .filter(vmove::Column::InstanceUuid.is_in(chunk.iter().cloned()))
                .all(&txn)
                .await?
            {
                rows.insert(row.instance_uuid.clone(), row);
            }
        }
        let progress_sequence: i64 = progress_event::Entity::find()
            .select_only()
            .column_as(progress_event::Column::Sequence.max(), "max")
            .filter(progress_event::Column::NotificationUuid.eq(nid.as_str()))
            .into_tuple::<Option<i64>>()
            .one(&txn)
            .await?
            .flatten()
            .unwrap_or(0);
        let known = rows
            .iter()
            .map(|(instance, row)| Ok((instance.clone(), ledger_vmove(row)?)))
            .collect::<Result<HashMap<_, _>>>()?;
        let mut ledger = RunLedger::new(
            run_id,
            sequence,
            u64::try_from(progress_sequence).unwrap_or_default(),
            known,
        );
        let decided = ledger
            .apply_batch(events)
            .map_err(|rejected| Error::Rejected(rejected.0))?;

        let at = now();
        let mut changed: Vec<vmove::Model> = Vec::new();
        let inserts: Vec<vmove::ActiveModel> = decided
            .created
            .iter()
            .filter_map(|instance| ledger.vmove(instance).map(|v| (instance, v)))
            .map(|(instance, v)| {
                let mut active = vmove::ActiveModel {
                    uuid: Set(VMoveId::new().to_string()),
                    notification_uuid: Set(nid.clone()),
                    instance_uuid: Set(instance.clone()),
                    instance_name: Set(v.instance_name.clone()),
                    source_host: Set(v.source_host.clone()),
                    r#type: Set(v.vmove_type.as_str().to_owned()),
                    step: Set(None),
                    step_message: Set(None),
                    step_time: Set(None),
                    lock_held: Set(false),
                    retryable: Set(false),
                    created_at: Set(at),
                    updated_at: Set(at),
                    ..Default::default()
                };
                set_record(&mut active, &v.record);
                if let Some(step) = &v.step {
                    set_step(&mut active, step);
                }
                active
            })
            .collect();
        for chunk in inserts.chunks(INSERT_CHUNK) {
            vmove::Entity::insert_many(chunk.to_vec())
                .exec(&txn)
                .await?;
        }
        for chunk in decided.created.chunks(INSERT_CHUNK) {
            changed.extend(
                vmove::Entity::find()
                    .filter(vmove::Column::NotificationUuid.eq(nid.as_str()))
                    .filter(vmove::Column::InstanceUuid.is_in(chunk.iter().cloned()))
                    .order_by_asc(vmove::Column::Id)
                    .all(&txn)
                    .await?,
            );
        }
        for instance in &decided.updated {
            let (Some(row), Some(v)) = (rows.get(instance), ledger.vmove(instance)) else {
                continue;
            };
            changed.push(save_vmove(&txn, row, &v.record, v.step.as_ref()).await?);
        }
        let progress: Vec<progress_event::ActiveModel> = decided
            .progress
            .iter()
            .map(|p| progress_event::ActiveModel {
                notification_uuid: Set(nid.clone()),
                sequence: Set(p.sequence as i64),
                task: Set(p.task.clone()),
                state: Set(p.state.as_str().to_owned()),
                message: Set(p.message.clone()),
                instance_uuid: Set(p.instance_id.clone()),
                time: Set(p.time),
                ..Default::default()
            })
            .collect();
        for chunk in progress.chunks(INSERT_CHUNK) {
            progress_event::Entity::insert_many(chunk.to_vec())
                .exec(&txn)
                .await?;
        }
        for change in &decided.hosts {
            let mut update = host::Entity::update_many()
                .col_expr(host::Column::UpdatedAt, Expr::value(at))
                .filter(host::Column::Name.eq(change.hostname.as_str()));
            if let Some(flag) = change.on_maintenance {
                update = update.col_expr(host::Column::OnMaintenance, Expr::value(flag));
            }
            if let Some(flag) = change.reserved {
                update = update.col_expr(host::Column::Reserved, Expr::value(flag));
            }
            update.exec(&txn).await?;
        }
        notification::Entity::update_many()
            .col_expr(
                notification::Column::RunSequence,
                Expr::value(decided.sequence as i64),
            )
            .col_expr(
                notification::Column::LeaseUntil,
                Expr::value(plus(at, lease)),
            )
            .filter(notification::Column::Uuid.eq(nid.as_str()))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        Ok(Applied {
            vmoves: changed
                .into_iter()
                .map(to_vmove)
                .collect::<Result<Vec<_>>>()?,
            progress: decided.progress,
            done: decided.done,
            sequence: decided.sequence,
        })
    }

    /// Ends run `run_id`: decides the notification's status from its vmoves
    /// with the status rules, retries or fails the unresolved ones, and
    /// saves it all in one transaction. A retry is due at `retry_at`.
    pub async fn resolve_run(
        &self,
        id: NotificationId,
        run_id: &str,
        end: &RunEnd,
        max_attempts: u32,
        retry_at: DateTime<Utc>,
    ) -> Result<Resolved> {
        let txn = self.begin_write().await?;
        let row = locked_notification(&txn, id).await?;
        check_run(&row, run_id)?;
        let attempt = Ord::max(u32::try_from(row.attempts).unwrap_or(1), 1);
        let rows = vmove::Entity::find()
            .filter(vmove::Column::NotificationUuid.eq(id.to_string()))
            .order_by_asc(vmove::Column::Id)
            .all(&txn)
            .await?;
        let records: Vec<VMoveRecord> = rows.iter().map(to_record).collect::<Result<_>>()?;
        let views: Vec<VMoveView<'_, usize>> = rows
            .iter()
            .zip(&records)
            .enumerate()
            .map(|(i, (row, record))| VMoveView {
                id: i,
                instance: row.instance_name.as_str(),
                status: record.status(),
                message: record.message(),
            })
            .collect();
        let resolution = resolve_final_status(end, &views, attempt, max_attempts);
        let at = now();
        let mut changed = Vec::new();
        let updates: Vec<(usize, VMoveEvent)> = match &resolution {
            Resolution::Retry { retry, .. } => {
                retry.iter().map(|i| (*i, VMoveEvent::Retry)).collect()
            }
            Resolution::Failed { fail, .. } => fail
                .iter()
                .map(|(i, message)| {
                    (
                        *i,
                        VMoveEvent::Fail {
                            at,
                            started: None,
                            message: message.clone(),
                        },
                    )
                })
                .collect(),
            Resolution::Finished { .. } | Resolution::Ignored { .. } => Vec::new(),
        };
        for (i, event) in updates {
            let mut record = records[i].clone();
            record.apply(event)?;
            let step = (record.status() == VMoveStatus::Pending).then(|| Step {
                name: "queued for retry".to_owned(),
                message: None,
                at: Some(at),
            });
            changed.push(save_vmove(&txn, &rows[i], &record, step.as_ref()).await?);
        }
        let to = status_of(&row)?.on(resolution.event())?;
        let retrying = matches!(resolution, Resolution::Retry { .. });
        let mut active: notification::ActiveModel = row.into();
        active.status = Set(to.as_str().to_owned());
        active.message = Set(Some(resolution.message().to_owned()));
        active.claimed_by = Set(None);
        active.lease_until = Set(None);
        active.next_attempt_at = Set(retrying.then_some(retry_at));
        active.updated_at = Set(at);
        let saved = active.update(&txn).await?;
        txn.commit().await?;
        Ok(Resolved {
            notification: to_notification(saved)?,
            vmoves: changed.into_iter().map(to_vmove).collect::<Result<_>>()?,
        })
    }

    /// Gives a claimed run back because the engine could not be reached:
    /// the notification goes to `error` without using up an attempt, due
    /// again at `retry_at`.
    pub async fn release_unreachable(
        &self,
        id: NotificationId,
        run_id: &str,
        message: &str,
        retry_at: DateTime<Utc>,
    ) -> Result<Notification> {
        let txn = self.begin_write().await?;
        let row = locked_notification(&txn, id).await?;
        check_run(&row, run_id)?;
        let to = status_of(&row)?.on(NotificationEvent::Interrupt)?;
        let attempts = Ord::max(row.attempts - 1, 0);
        let mut active: notification::ActiveModel = row.into();
        active.status = Set(to.as_str().to_owned());
        active.attempts = Set(attempts);
        active.message = Set(Some(message.to_owned()));
        active.claimed_by = Set(None);
        active.lease_until = Set(None);
        active.next_attempt_at = Set(Some(retry_at));
        active.updated_at = Set(now());
        let saved = active.update(&txn).await?;
        txn.commit().await?;
        to_notification(saved)
    }

    /// Fails an unfinished notification that is too old to recover, and
    /// its unresolved vmoves with it.
    pub async fn expire(&self, id: NotificationId, reason: &str) -> Result<Option<Resolved>> {
        let txn = self.begin_write().await?;
        let row = locked_notification(&txn, id).await?;
        let Ok(to) = status_of(&row)?.on(NotificationEvent::Expire) else {
            return Ok(None);
        };
        let at = now();
        let mut changed = Vec::new();
        for v in vmove::Entity::find()
            .filter(vmove::Column::NotificationUuid.eq(id.to_string()))
            .filter(vmove::Column::Status.is_in(VMoveStatus::UNRESOLVED.map(VMoveStatus::as_str)))
            .all(&txn)
            .await?
        {
            let mut record = to_record(&v)?;
            record.apply(VMoveEvent::Fail {
                at,
                started: None,
                message: reason.to_owned(),
            })?;
            changed.push(save_vmove(&txn, &v, &record, None).await?);
        }
        let mut active: notification::ActiveModel = row.into();
        active.status = Set(to.as_str().to_owned());
        active.message = Set(Some(reason.to_owned()));
        active.claimed_by = Set(None);
        active.lease_until = Set(None);
        active.next_attempt_at = Set(None);
        active.updated_at = Set(at);
        let saved = active.update(&txn).await?;
        txn.commit().await?;
        Ok(Some(Resolved {
            notification: to_notification(saved)?,
            vmoves: changed.into_iter().map(to_vmove).collect::<Result<_>>()?,
        }))
    }

    /// Notifications with work for this replica: new ones, errors due for a
    /// retry, and running ones whose run is lost (lease expired, or this
    /// replica's from before a restart). Oldest first.
    pub async fn due(&self, replica: &str, limit: u64) -> Result<Vec<Due>> {
        let at = now();
        let rows = notification::Entity::find()
            .filter(
                notification::Column::Status
                    .eq(NotificationStatus::New.as_str())
                    .or(notification::Column::Status
                        .eq(NotificationStatus::Error.as_str())
                        .and(
                            notification::Column::NextAttemptAt
                                .is_null()
                                .or(notification::Column::NextAttemptAt.lte(at)),
                        ))
                    .or(notification::Column::Status
                        .eq(NotificationStatus::Running.as_str())
                        .and(
                            notification::Column::ClaimedBy
                                .eq(replica)
                                .or(notification::Column::LeaseUntil.lt(at))
                                .or(notification::Column::LeaseUntil.is_null()),
                        )),
            )
            .order_by_asc(notification::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?;
        rows.into_iter()
            .map(|row| {
                Ok(Due {
                    id: super::parse_uuid("notifications", "uuid", &row.uuid)?,
                    status: super::parse_enum(
                        "notifications",
                        "status",
                        &row.status,
                        NotificationStatus::parse,
                    )?,
                    run_id: row.run_id,
                })
            })
            .collect()
    }

    /// Unfinished notifications generated before `before`.
    pub async fn expired(&self, before: DateTime<Utc>, limit: u64) -> Result<Vec<NotificationId>> {
        notification::Entity::find()
            .filter(notification::Column::Status.is_in(unfinished()))
            .filter(notification::Column::GeneratedTime.lt(before))
            .order_by_asc(notification::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .iter()
            .map(|row| super::parse_uuid("notifications", "uuid", &row.uuid))
            .collect()
    }
}
