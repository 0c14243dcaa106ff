//! The dispatcher's persistence: claiming a notification for a run
//! (compare-and-set, so exactly one replica runs it, and one notification
//! per host at a time: a report queues behind an unfinished one for its
//! host), taking over runs whose replica is gone, persisting a run's events
//! in order and exactly once (by run id and sequence number), resolving a
//! finished run with the status rules, scheduling the release of locks an
//! ended notification still holds, expiry, and an operator's retry, each
//! in one transaction.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait as _};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction,
    EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};

use super::entity::{host, notification, progress_event, vmove};
use super::notifications::{to_notification, unfinished};
use super::vmoves::{to_record, to_vmove};
use super::{Error, Result, Store, now, parse_enum, parse_uuid};
use crate::domain::{
    InstanceId, InstanceRef, Notification, NotificationId, PriorState, ProgressEvent, RunClaim,
    RunId, RunKind, SequencedEvent, VMove, VMoveId, VMoveType,
};
use crate::status::ledger::{LedgerVMove, RunLedger, Step};
use crate::status::{
    NotificationEvent, NotificationStatus, Resolution, RetryBudget, RunEnd, RunOutcome, Transition,
    VMoveEvent, VMoveRecord, VMoveStatus, VMoveView, resolve_run, with_locks_held,
};

/// Rows per INSERT, below every backend's parameter limit.
const INSERT_CHUNK: usize = 500;

/// A notification the dispatcher may have work for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    pub id: NotificationId,
    pub work: DueWork,
}

/// What is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DueWork {
    /// A run to claim (a recovery, a reconcile, a release of locks).
    Run,
    /// Run `run_id` lost its replica: take it over and resolve it as lost.
    TakeOver { run_id: RunId },
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
    /// When the next run is due, if one follows.
    pub next_run_at: Option<DateTime<Utc>>,
    /// Locks this notification still holds (released as soon as Nova
    /// answers).
    pub locks_held: usize,
}

/// How runs are paced, from the dispatch settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunPolicy {
    /// A claim holds this long without renewal.
    pub lease: Duration,
    /// Runs are retried within this from the first.
    pub retry_window: Duration,
    /// Runs per notification at most (a reconcile may go a few beyond).
    pub max_attempts: u32,
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

fn status_of(row: &notification::Model) -> Result<NotificationStatus> {
    parse_enum(
        "notifications",
        "status",
        &row.status,
        NotificationStatus::parse,
    )
}

fn kind_of(row: &notification::Model) -> Result<Option<RunKind>> {
    row.run_kind
        .as_deref()
        .map(|kind| parse_enum("notifications", "run_kind", kind, RunKind::parse))
        .transpose()
}

/// The row, if it is running run `run_id` (a release-locks run runs on a
/// notification that has ended).
fn check_run(row: &notification::Model, run_id: &RunId) -> Result<RunKind> {
    let status = status_of(row)?;
    let kind = kind_of(row)?.unwrap_or(RunKind::Recover);
    let running = match kind {
        RunKind::ReleaseLocks => status.is_terminal(),
        RunKind::Recover | RunKind::Reconcile => status == NotificationStatus::Running,
    };
    if !running || row.run_id.as_deref() != Some(run_id.as_str()) {
        return Err(Error::Stale(format!(
            "notification {} is {} with run {}, not running run {run_id}",
            row.uuid,
            row.status,
            row.run_id.as_deref().unwrap_or("none")
        )));
    }
    Ok(kind)
}

fn plus(at: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    at + chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX / 2)
}

/// Writes a vmove's state as the ledger (or the resolution) decided it.
async fn save_vmove(
    txn: &DatabaseTransaction,
    row: &vmove::Model,
    record: &VMoveRecord,
    step: Option<&Step>,
    lock_held: Option<bool>,
) -> Result<vmove::Model> {
    let mut active: vmove::ActiveModel = row.clone().into();
    set_record(&mut active, record);
    if let Some(step) = step {
        set_step(&mut active, step);
    }
    if let Some(held) = lock_held {
        active.lock_held = Set(held);
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
    active.retryable = Set(record.retryable());
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
        prior_state: row
            .prior_state
            .as_deref()
            .map(|s| parse_enum("vmoves", "prior_state", s, PriorState::parse))
            .transpose()?,
        record: to_record(row)?,
        step: row.step.as_ref().map(|name| Step {
            name: name.clone(),
            message: row.step_message.clone(),
            at: row.step_time,
        }),
        lock_held: row.lock_held,
    })
}

/// An older notification of the same host that has not ended: a report
/// queues behind it (one recovery per host at a time).
async fn queued_behind<C: ConnectionTrait>(
    conn: &C,
    row: &notification::Model,
) -> Result<Option<notification::Model>> {
    Ok(notification::Entity::find()
        .filter(notification::Column::SourceHostUuid.eq(row.source_host_uuid.as_str()))
        .filter(notification::Column::Id.lt(row.id))
        .filter(notification::Column::Status.is_in(unfinished()))
        .order_by_asc(notification::Column::Id)
        .one(conn)
        .await?)
}

/// The instances a run of `kind` is about.
async fn run_vmoves<C: ConnectionTrait>(
    conn: &C,
    id: NotificationId,
    kind: RunKind,
) -> Result<Vec<vmove::Model>> {
    let query = vmove::Entity::find()
        .filter(vmove::Column::NotificationUuid.eq(id.to_string()))
        .order_by_asc(vmove::Column::Id);
    let query = match kind {
        // A retry recovers what went back to pending (a first run plans).
        RunKind::Recover => query.filter(vmove::Column::Status.eq(VMoveStatus::Pending.as_str())),
        // A reconcile reads what has no result or failed.
        RunKind::Reconcile => query.filter(vmove::Column::Status.is_in([
            VMoveStatus::Pending.as_str(),
            VMoveStatus::Ongoing.as_str(),
            VMoveStatus::Failed.as_str(),
        ])),
        RunKind::ReleaseLocks => query.filter(vmove::Column::LockHeld.eq(true)),
    };
    Ok(query.all(conn).await?)
}

/// The names of the instances whose lock this notification holds.
async fn held_locks<C: ConnectionTrait>(conn: &C, id: NotificationId) -> Result<Vec<String>> {
    Ok(run_vmoves(conn, id, RunKind::ReleaseLocks)
        .await?
        .into_iter()
        .map(|v| v.instance_name)
        .collect())
}

impl Store {
    /// Claims a notification for a run: a `new` one, or an `error` one
    /// whose next run is due, if no older notification of its host is
    /// unfinished (it then waits, its message saying behind which); or an
    /// ended one whose leftover locks are due for release. One
    /// compare-and-set, so of two replicas exactly one wins. `None` if it is
    /// not claimable (any more).
    pub async fn claim(
        &self,
        id: NotificationId,
        replica: &str,
        policy: RunPolicy,
    ) -> Result<Option<(Notification, RunClaim)>> {
        let row = notification::Entity::find()
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("notification", id))?;
        let status = status_of(&row)?;
        let at = now();
        let run_id = RunId::from(uuid::Uuid::new_v4().to_string());
        if status.is_terminal() {
            return self.claim_lock_release(row, replica, policy, run_id).await;
        }
        let Ok(to) = status.on(NotificationEvent::Start) else {
            return Ok(None);
        };
        if row.next_attempt_at.is_some_and(|due| due > at) {
            return Ok(None);
        }
        if let Some(earlier) = queued_behind(&self.db, &row).await? {
            let message = format!(
                "queued behind notification {} for host {}, which is {}; it runs when that one ends",
                earlier.uuid, row.hostname, earlier.status
            );
            if row.message.as_deref() != Some(message.as_str()) {
                notification::Entity::update_many()
                    .col_expr(notification::Column::Message, Expr::value(message))
                    .filter(notification::Column::Uuid.eq(row.uuid.as_str()))
                    .filter(notification::Column::Status.eq(row.status.as_str()))
                    .exec(&self.db)
                    .await?;
            }
            return Ok(None);
        }
        let kind = kind_of(&row)?.unwrap_or(RunKind::Recover);
        // The retry window starts with the first run.
        let retry_until = row
            .retry_until
            .unwrap_or_else(|| plus(at, policy.retry_window));
        let changed = notification::Entity::update_many()
            .col_expr(notification::Column::Status, Expr::value(to.as_str()))
            .col_expr(
                notification::Column::Attempts,
                Expr::col(notification::Column::Attempts).add(1),
            )
            .col_expr(notification::Column::RunId, Expr::value(run_id.to_string()))
            .col_expr(notification::Column::RunKind, Expr::value(kind.as_str()))
            .col_expr(notification::Column::RunSequence, Expr::value(0i64))
            .col_expr(notification::Column::ClaimedBy, Expr::value(replica))
            .col_expr(
                notification::Column::LeaseUntil,
                Expr::value(plus(at, policy.lease)),
            )
            .col_expr(
                notification::Column::NextAttemptAt,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .col_expr(notification::Column::RetryUntil, Expr::value(retry_until))
            .col_expr(notification::Column::UpdatedAt, Expr::value(at))
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .filter(notification::Column::Status.eq(row.status.as_str()))
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
        self.claimed(id, run_id, kind).await.map(Some)
    }

    /// Claims the release of an ended notification's leftover locks, when
    /// due and no other release is in progress (or its lease expired).
    async fn claim_lock_release(
        &self,
        row: notification::Model,
        replica: &str,
        policy: RunPolicy,
        run_id: RunId,
    ) -> Result<Option<(Notification, RunClaim)>> {
        let at = now();
        let lapsed = row.lease_until.is_none_or(|until| until < at);
        // Due, or an earlier release whose replica is gone.
        let due =
            row.lock_release_at.is_some_and(|due| due <= at) || (row.run_id.is_some() && lapsed);
        let free = row.run_id.is_none() || lapsed;
        if !due || !free {
            return Ok(None);
        }
        let same_run = match &row.run_id {
            Some(old) => notification::Column::RunId.eq(old.as_str()),
            None => notification::Column::RunId.is_null(),
        };
        let changed = notification::Entity::update_many()
            .col_expr(notification::Column::RunId, Expr::value(run_id.to_string()))
            .col_expr(
                notification::Column::RunKind,
                Expr::value(RunKind::ReleaseLocks.as_str()),
            )
            .col_expr(notification::Column::RunSequence, Expr::value(0i64))
            .col_expr(notification::Column::ClaimedBy, Expr::value(replica))
            .col_expr(
                notification::Column::LeaseUntil,
                Expr::value(plus(at, policy.lease)),
            )
            .col_expr(
                notification::Column::LockReleaseAt,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .filter(notification::Column::Uuid.eq(row.uuid.as_str()))
            .filter(notification::Column::Status.eq(row.status.as_str()))
            .filter(same_run)
            .exec(&self.db)
            .await?
            .rows_affected;
        if changed == 0 {
            return Ok(None);
        }
        let id = parse_uuid("notifications", "uuid", &row.uuid)?;
        self.claimed(id, run_id, RunKind::ReleaseLocks)
            .await
            .map(Some)
    }

    async fn claimed(
        &self,
        id: NotificationId,
        run_id: RunId,
        kind: RunKind,
    ) -> Result<(Notification, RunClaim)> {
        let row = notification::Entity::find()
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("notification", id))?;
        let claim = RunClaim {
            notification_id: id,
            run_id,
            kind,
            attempt: Ord::max(u32::try_from(row.attempts).unwrap_or(1), 1),
            trace_context: row.trace_context.clone(),
        };
        Ok((to_notification(row)?, claim))
    }

    /// Takes over a `running` notification whose run is lost: its lease
    /// expired, or it was this replica's before a restart. The caller then
    /// resolves the lost run.
    pub async fn take_over(
        &self,
        id: NotificationId,
        run_id: &RunId,
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
            .filter(notification::Column::RunId.eq(run_id.as_str()))
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

    /// Extends the lease of a run this replica is running; false if the
    /// run is no longer the notification's.
    pub async fn renew_lease(
        &self,
        id: NotificationId,
        run_id: &RunId,
        lease: Duration,
    ) -> Result<bool> {
        let changed = notification::Entity::update_many()
            .col_expr(
                notification::Column::LeaseUntil,
                Expr::value(plus(now(), lease)),
            )
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .filter(notification::Column::RunId.eq(run_id.as_str()))
            .exec(&self.db)
            .await?
            .rows_affected;
        Ok(changed == 1)
    }

    /// The instances a run of `kind` of the notification is about (a first
    /// recovery's is empty: it plans afresh).
    pub async fn run_instances(
        &self,
        id: NotificationId,
        kind: RunKind,
    ) -> Result<Vec<InstanceRef>> {
        run_vmoves(&self.db, id, kind)
            .await?
            .into_iter()
            .map(|row| {
                Ok(InstanceRef {
                    prior_state: row
                        .prior_state
                        .as_deref()
                        .map(|s| parse_enum("vmoves", "prior_state", s, PriorState::parse))
                        .transpose()?,
                    instance_id: row.instance_uuid.into(),
                    instance_name: row.instance_name,
                    source_host: row.source_host,
                })
            })
            .collect()
    }

    /// Persists a batch of a run's events in one transaction, in order and
    /// exactly once: the run's state is loaded, the [`RunLedger`] applies
    /// the events (replays skipped; a gap, an instance not in the plan, or
    /// a transition the status rules refuse is [`Error::Rejected`]) and
    /// what it decided is written; a refused batch writes nothing.
    pub async fn apply_run_events(
        &self,
        id: NotificationId,
        run_id: &RunId,
        events: &[SequencedEvent],
        lease: Duration,
    ) -> Result<Applied> {
        let txn = self.begin_write().await?;
        let row = locked_notification(&txn, id).await?;
        let kind = check_run(&row, run_id)?;
        let sequence = u64::try_from(row.run_sequence).unwrap_or_default();
        let nid = id.to_string();

        let mut rows: HashMap<InstanceId, vmove::Model> = HashMap::new();
        for chunk in RunLedger::mentioned(events, sequence).chunks(INSERT_CHUNK) {
            for row in vmove::Entity::find()
                .filter(vmove::Column::NotificationUuid.eq(nid.as_str()))
                .filter(vmove::Column::InstanceUuid.is_in(chunk.iter().map(InstanceId::to_string)))
                .all(&txn)
                .await?
            {
                rows.insert(InstanceId::from(row.instance_uuid.clone()), row);
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
            run_id.clone(),
            sequence,
            u64::try_from(progress_sequence).unwrap_or_default(),
            known,
        );
        if kind == RunKind::ReleaseLocks {
            ledger = ledger.locks_only();
        }
        let decided = ledger
            .apply_batch(events)
            .map_err(|rejected| Error::Rejected(rejected.0))?;

        let at = now();
        let mut changed: Vec<vmove::Model> = Vec::new();
        let inserts: Vec<vmove::ActiveModel> = decided
            .created
            .iter()
            .filter_map(|instance| ledger.vmove(instance.as_str()).map(|v| (instance, v)))
            .map(|(instance, v)| {
                let mut active = vmove::ActiveModel {
                    uuid: Set(VMoveId::new().to_string()),
                    notification_uuid: Set(nid.clone()),
                    instance_uuid: Set(instance.to_string()),
                    prior_state: Set(v.prior_state.map(|s| s.as_str().to_owned())),
                    instance_name: Set(v.instance_name.clone()),
                    source_host: Set(v.source_host.clone()),
                    r#type: Set(v.vmove_type.as_str().to_owned()),
                    step: Set(None),
                    step_message: Set(None),
                    step_time: Set(None),
                    lock_held: Set(v.lock_held),
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
                    .filter(
                        vmove::Column::InstanceUuid.is_in(chunk.iter().map(InstanceId::to_string)),
                    )
                    .order_by_asc(vmove::Column::Id)
                    .all(&txn)
                    .await?,
            );
        }
        for instance in &decided.updated {
            let (Some(row), Some(v)) = (rows.get(instance), ledger.vmove(instance.as_str())) else {
                continue;
            };
            changed
                .push(save_vmove(&txn, row, &v.record, v.step.as_ref(), Some(v.lock_held)).await?);
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
                // Who put the host on maintenance: a new report may retry
                // after this notification fails.
                update = update.col_expr(
                    host::Column::MaintenanceBy,
                    Expr::value(flag.then(|| nid.clone())),
                );
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

    /// Ends run `run_id`. A recovery or reconcile run is resolved with the
    /// status rules: its vmoves retried, reconciled or failed, the
    /// notification's status and message set, the next run (if any) due at
    /// `retry_at` (a reconcile at once); an ended notification that still
    /// holds locks gets their release scheduled at once. A release-locks
    /// run changes no status: what it could not release is scheduled again
    /// at `retry_at`. All in one transaction.
    pub async fn resolve_run(
        &self,
        id: NotificationId,
        run_id: &RunId,
        end: &RunEnd,
        policy: RunPolicy,
        retry_at: DateTime<Utc>,
    ) -> Result<Resolved> {
        let txn = self.begin_write().await?;
        let row = locked_notification(&txn, id).await?;
        let kind = check_run(&row, run_id)?;
        let at = now();
        if kind == RunKind::ReleaseLocks {
            let held = held_locks(&txn, id).await?;
            let message = with_locks_held(row.message.as_deref().unwrap_or_default(), &held);
            let mut active: notification::ActiveModel = row.into();
            active.message = Set(Some(message));
            active.updated_at = Set(at);
            active.run_id = Set(None);
            active.run_kind = Set(None);
            active.claimed_by = Set(None);
            active.lease_until = Set(None);
            active.lock_release_at = Set((!held.is_empty()).then_some(retry_at));
            let saved = active.update(&txn).await?;
            txn.commit().await?;
            return Ok(Resolved {
                notification: to_notification(saved)?,
                vmoves: Vec::new(),
                next_run_at: (!held.is_empty()).then_some(retry_at),
                locks_held: held.len(),
            });
        }
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
                retryable: record.retryable(),
            })
            .collect();
        let budget = RetryBudget {
            attempt,
            max_attempts: policy.max_attempts,
            window_open: row.retry_until.is_none_or(|until| at < until),
        };
        let resolution = resolve_run(end, kind, &views, budget);
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
                            retryable: false,
                        },
                    )
                })
                .collect(),
            Resolution::Reconcile { .. }
            | Resolution::Finished { .. }
            | Resolution::Ignored { .. } => Vec::new(),
        };
        for (i, event) in updates {
            let mut record = records[i].clone();
            record.apply(event)?;
            let step = (record.status() == VMoveStatus::Pending).then(|| Step {
                name: "queued for retry".to_owned(),
                message: None,
                at: Some(at),
            });
            changed.push(save_vmove(&txn, &rows[i], &record, step.as_ref(), None).await?);
        }
        let to = status_of(&row)?.on(resolution.event())?;
        let next_run = resolution.next_run();
        let next_run_at = match next_run {
            Some(RunKind::Reconcile) => Some(at),
            Some(_) => Some(retry_at),
            None => None,
        };
        let mut message = resolution.message().to_owned();
        if let (Some(RunKind::Recover), Some(when)) = (next_run, next_run_at) {
            message.push_str(&format!(
                "; next try at {}",
                when.format("%Y-%m-%dT%H:%M:%SZ")
            ));
        }
        let held = if to.is_terminal() {
            held_locks(&txn, id).await?
        } else {
            Vec::new()
        };
        let message = with_locks_held(&message, &held);
        let mut active: notification::ActiveModel = row.into();
        active.status = Set(to.as_str().to_owned());
        active.message = Set(Some(message));
        active.run_id = Set(None);
        active.run_kind = Set(next_run.map(|k| k.as_str().to_owned()));
        active.claimed_by = Set(None);
        active.lease_until = Set(None);
        active.next_attempt_at = Set(next_run_at);
        active.lock_release_at = Set((!held.is_empty()).then_some(at));
        active.updated_at = Set(at);
        let saved = active.update(&txn).await?;
        txn.commit().await?;
        Ok(Resolved {
            notification: to_notification(saved)?,
            vmoves: changed.into_iter().map(to_vmove).collect::<Result<_>>()?,
            next_run_at: next_run_at.or((!held.is_empty()).then_some(at)),
            locks_held: held.len(),
        })
    }

    /// Gives a claimed run back because the engine could not be reached:
    /// a recovery's notification goes to `error` without using up an
    /// attempt (its next run of the same kind due at `retry_at`); a
    /// release of locks is due again at `retry_at`.
    pub async fn release_unreachable(
        &self,
        id: NotificationId,
        run_id: &RunId,
        message: &str,
        retry_at: DateTime<Utc>,
    ) -> Result<Notification> {
        let txn = self.begin_write().await?;
        let row = locked_notification(&txn, id).await?;
        let kind = check_run(&row, run_id)?;
        let mut active: notification::ActiveModel = row.clone().into();
        active.run_id = Set(None);
        active.claimed_by = Set(None);
        active.lease_until = Set(None);
        if kind == RunKind::ReleaseLocks {
            active.run_kind = Set(None);
            active.lock_release_at = Set(Some(retry_at));
        } else {
            let to = status_of(&row)?.on(NotificationEvent::Interrupt)?;
            active.status = Set(to.as_str().to_owned());
            active.attempts = Set(Ord::max(row.attempts - 1, 0));
            active.message = Set(Some(message.to_owned()));
            active.next_attempt_at = Set(Some(retry_at));
            active.updated_at = Set(now());
        }
        let saved = active.update(&txn).await?;
        txn.commit().await?;
        to_notification(saved)
    }

    /// Ends an unfinished notification too old to recover, unless a run of
    /// it is in progress (a run in progress is never expired). Its retry
    /// window closes: if instances are without a result or failed, a
    /// reconcile run reads their truth from Nova before the verdict;
    /// otherwise it fails at once. `None` if nothing changed.
    pub async fn expire(&self, id: NotificationId, reason: &str) -> Result<Option<Resolved>> {
        let txn = self.begin_write().await?;
        let row = locked_notification(&txn, id).await?;
        let status = status_of(&row)?;
        if status == NotificationStatus::Running || status.on(NotificationEvent::Expire).is_err() {
            return Ok(None);
        }
        let at = now();
        if row.retry_until.is_some_and(|until| until <= at)
            && kind_of(&row)? == Some(RunKind::Reconcile)
        {
            // Already waiting for its last look at Nova.
            return Ok(None);
        }
        let open = run_vmoves(&txn, id, RunKind::Reconcile).await?;
        if !open.is_empty() {
            let mut active: notification::ActiveModel = row.into();
            active.run_kind = Set(Some(RunKind::Reconcile.as_str().to_owned()));
            active.retry_until = Set(Some(at));
            active.next_attempt_at = Set(Some(at));
            active.message = Set(Some(format!(
                "{reason}; reading what nova says of {} instance(s) before the verdict",
                open.len()
            )));
            active.updated_at = Set(at);
            let saved = active.update(&txn).await?;
            txn.commit().await?;
            return Ok(Some(Resolved {
                notification: to_notification(saved)?,
                vmoves: Vec::new(),
                next_run_at: Some(at),
                locks_held: 0,
            }));
        }
        let to = status.on(NotificationEvent::Expire)?;
        let held = held_locks(&txn, id).await?;
        let mut active: notification::ActiveModel = row.into();
        active.status = Set(to.as_str().to_owned());
        active.message = Set(Some(reason.to_owned()));
        active.run_kind = Set(None);
        active.claimed_by = Set(None);
        active.lease_until = Set(None);
        active.next_attempt_at = Set(None);
        active.lock_release_at = Set((!held.is_empty()).then_some(at));
        active.updated_at = Set(at);
        let saved = active.update(&txn).await?;
        txn.commit().await?;
        Ok(Some(Resolved {
            notification: to_notification(saved)?,
            vmoves: Vec::new(),
            next_run_at: (!held.is_empty()).then_some(at),
            locks_held: held.len(),
        }))
    }

    /// An operator's retry of a `failed` notification: it goes back to
    /// `error`, due at once with a new retry window, and its failed vmoves
    /// back to pending.
    pub async fn reopen(&self, id: NotificationId) -> Result<Resolved> {
        let txn = self.begin_write().await?;
        let row = locked_notification(&txn, id).await?;
        let to = status_of(&row)?.on(NotificationEvent::Reopen)?;
        let at = now();
        let mut changed = Vec::new();
        for v in vmove::Entity::find()
            .filter(vmove::Column::NotificationUuid.eq(id.to_string()))
            .filter(vmove::Column::Status.eq(VMoveStatus::Failed.as_str()))
            .all(&txn)
            .await?
        {
            let mut record = to_record(&v)?;
            record.apply(VMoveEvent::Reopen)?;
            let step = Step {
                name: "queued for retry".to_owned(),
                message: Some("retry requested by an operator".to_owned()),
                at: Some(at),
            };
            changed.push(save_vmove(&txn, &v, &record, Some(&step), None).await?);
        }
        let mut active: notification::ActiveModel = row.into();
        active.status = Set(to.as_str().to_owned());
        active.message = Set(Some(
            "retry requested by an operator; the recovery runs again".to_owned(),
        ));
        active.run_kind = Set(Some(RunKind::Recover.as_str().to_owned()));
        active.retry_until = Set(None);
        active.next_attempt_at = Set(Some(at));
        active.updated_at = Set(at);
        let saved = active.update(&txn).await?;
        txn.commit().await?;
        Ok(Resolved {
            notification: to_notification(saved)?,
            vmoves: changed.into_iter().map(to_vmove).collect::<Result<_>>()?,
            next_run_at: Some(at),
            locks_held: 0,
        })
    }

    /// Notifications with work for this replica: new ones, errors due for
    /// their next run, running ones whose run is lost (lease expired, or
    /// this replica's from before a restart), and ended ones whose
    /// leftover locks are due for release. Oldest first.
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
                        ))
                    .or(notification::Column::LockReleaseAt.lte(at))
                    .or(notification::Column::Status
                        .is_not_in(unfinished())
                        .and(notification::Column::RunId.is_not_null())
                        .and(notification::Column::LeaseUntil.lt(at))),
            )
            .order_by_asc(notification::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?;
        rows.into_iter()
            .map(|row| {
                let id = parse_uuid("notifications", "uuid", &row.uuid)?;
                let work = match (status_of(&row)?, row.run_id) {
                    (NotificationStatus::Running, Some(run_id)) => DueWork::TakeOver {
                        run_id: run_id.into(),
                    },
                    _ => DueWork::Run,
                };
                Ok(Due { id, work })
            })
            .collect()
    }

    /// Unfinished notifications generated before `before`, not running.
    pub async fn expired(&self, before: DateTime<Utc>, limit: u64) -> Result<Vec<NotificationId>> {
        notification::Entity::find()
            .filter(notification::Column::Status.is_in(unfinished()))
            .filter(notification::Column::Status.ne(NotificationStatus::Running.as_str()))
            .filter(notification::Column::GeneratedTime.lt(before))
            .order_by_asc(notification::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .iter()
            .map(|row| parse_uuid("notifications", "uuid", &row.uuid))
            .collect()
    }

    /// Locks held by ended notifications, for the metrics.
    pub async fn locks_left(&self) -> Result<u64> {
        use sea_orm::PaginatorTrait as _;
        Ok(vmove::Entity::find()
            .filter(vmove::Column::LockHeld.eq(true))
            .filter(
                vmove::Column::NotificationUuid.in_subquery(
                    sea_orm::sea_query::Query::select()
                        .column(notification::Column::Uuid)
                        .from(notification::Entity)
                        .and_where(notification::Column::Status.is_not_in(unfinished()))
                        .to_owned(),
                ),
            )
            .count(&self.db)
            .await?)
    }
}
