//! Persisting a run's events: in one transaction, in order and exactly once
//! by (run id, sequence number). The run's state and the vmoves the events
//! name are loaded, the run ledger (`status::ledger`) decides what they
//! change, and that is written: vmoves created and updated, progress
//! events, each instance's steps (its timeline), host flags, the run's
//! sequence and lease. A batch the ledger refuses writes nothing.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseTransaction, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use super::entity::{host, instance_step, progress_event, vmove};
use super::run_state::{notification_row, run_state, write_state};
use super::vmoves::{to_record, to_vmove};
use super::{Error, Result, Store, parse_enum};
use crate::domain::{
    InstanceId, InstanceStep, NotificationId, PriorState, ProgressEvent, RunId, RunKind,
    SequencedEvent, VMove, VMoveId, VMoveType,
};
use crate::lifecycle::RunOutcome;
use crate::status::VMoveRecord;
use crate::status::ledger::{self, HostChange, LedgerVMove, RunLedger, Step};

/// Rows per INSERT, below every backend's parameter limit.
const INSERT_CHUNK: usize = 500;

/// What persisting a batch of events changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub vmoves: Vec<VMove>,
    pub progress: Vec<ProgressEvent>,
    pub steps: Vec<InstanceStep>,
    /// The engine's `Done`, if the batch held it.
    pub done: Option<RunOutcome>,
    /// The highest sequence number now persisted.
    pub sequence: u64,
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

impl Store {
    /// Writes a vmove's state as the ledger (or a run's end) decided it.
    pub(super) async fn save_vmove(
        &self,
        txn: &DatabaseTransaction,
        row: &vmove::Model,
        record: &VMoveRecord,
        step: Option<&Step>,
        lock_held: Option<bool>,
        at: DateTime<Utc>,
    ) -> Result<vmove::Model> {
        let mut active: vmove::ActiveModel = row.clone().into();
        set_record(&mut active, record);
        if let Some(step) = step {
            set_step(&mut active, step);
        }
        if let Some(held) = lock_held {
            active.lock_held = Set(held);
        }
        active.updated_at = Set(at);
        Ok(active.update(txn).await?)
    }

    /// Persists a batch of a run's events in one transaction, in order and
    /// exactly once: a replay is skipped; a gap, an instance not in the
    /// plan, or a transition the status rules refuse is
    /// [`Error::Rejected`], and nothing of the batch is written.
    pub async fn apply_run_events(
        &self,
        id: NotificationId,
        run_id: &RunId,
        events: &[SequencedEvent],
        lease: Duration,
    ) -> Result<Applied> {
        let txn = self.begin_write().await?;
        let row = notification_row(&*txn, id, true).await?;
        let state = run_state(&row)?;
        let kind = state.check_run(run_id)?;
        let sequence = state.run.as_ref().map_or(0, |run| run.sequence);
        let rows = self
            .mentioned_vmoves(&txn, id, RunLedger::mentioned(events, sequence))
            .await?;
        let known = rows
            .iter()
            .map(|(instance, row)| Ok((instance.clone(), ledger_vmove(row)?)))
            .collect::<Result<HashMap<_, _>>>()?;
        let mut ledger = RunLedger::new(
            run_id.clone(),
            sequence,
            last_progress(&txn, id).await?,
            known,
        );
        ledger = match kind {
            RunKind::ReleaseLocks => ledger.locks_only(),
            RunKind::Reconcile => ledger.reconciling(),
            RunKind::Recover => ledger,
        };
        let decided = ledger
            .apply_batch(events)
            .map_err(|rejected| Error::Rejected(rejected.0))?;

        let at = self.now();
        let mut changed = self
            .insert_planned(&txn, id, &ledger, &decided.created, at)
            .await?;
        for instance in &decided.updated {
            let (Some(row), Some(v)) = (rows.get(instance), ledger.vmove(instance.as_str())) else {
                continue;
            };
            changed.push(
                self.save_vmove(&txn, row, &v.record, v.step.as_ref(), Some(v.lock_held), at)
                    .await?,
            );
        }
        insert_progress(&txn, id, &decided.progress).await?;
        let steps = insert_steps(&txn, id, state.attempts.max(1), &decided.steps).await?;
        apply_host_changes(&txn, id, &decided.hosts, at).await?;
        let next = state.events_applied(run_id, decided.sequence, at, lease)?;
        write_state(&*txn, &row, &next, at).await?;
        txn.commit().await?;
        Ok(Applied {
            vmoves: changed
                .into_iter()
                .map(to_vmove)
                .collect::<Result<Vec<_>>>()?,
            progress: decided.progress,
            steps,
            done: decided.done,
            sequence: decided.sequence,
        })
    }

    /// The vmoves of the notification the coming events name.
    async fn mentioned_vmoves(
        &self,
        txn: &DatabaseTransaction,
        id: NotificationId,
        mentioned: Vec<InstanceId>,
    ) -> Result<HashMap<InstanceId, vmove::Model>> {
        let mut rows = HashMap::new();
        for chunk in mentioned.chunks(INSERT_CHUNK) {
            for row in vmove::Entity::find()
                .filter(vmove::Column::NotificationUuid.eq(id.to_string()))
                .filter(vmove::Column::InstanceUuid.is_in(chunk.iter().map(InstanceId::to_string)))
                .all(txn)
                .await?
            {
                rows.insert(InstanceId::from(row.instance_uuid.clone()), row);
            }
        }
        Ok(rows)
    }

    /// Inserts the vmoves a plan created; returns them as written.
    async fn insert_planned(
        &self,
        txn: &DatabaseTransaction,
        id: NotificationId,
        ledger: &RunLedger,
        created: &[InstanceId],
        at: DateTime<Utc>,
    ) -> Result<Vec<vmove::Model>> {
        let nid = id.to_string();
        let inserts: Vec<vmove::ActiveModel> = created
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
            vmove::Entity::insert_many(chunk.to_vec()).exec(txn).await?;
        }
        let mut written = Vec::new();
        for chunk in created.chunks(INSERT_CHUNK) {
            written.extend(
                vmove::Entity::find()
                    .filter(vmove::Column::NotificationUuid.eq(nid.as_str()))
                    .filter(
                        vmove::Column::InstanceUuid.is_in(chunk.iter().map(InstanceId::to_string)),
                    )
                    .order_by_asc(vmove::Column::Id)
                    .all(txn)
                    .await?,
            );
        }
        Ok(written)
    }

    /// The timeline of each instance of the notification: every step the
    /// engine reported, in order.
    pub async fn instance_steps(&self, id: NotificationId) -> Result<Vec<InstanceStep>> {
        instance_step::Entity::find()
            .filter(instance_step::Column::NotificationUuid.eq(id.to_string()))
            .order_by_asc(instance_step::Column::Id)
            .all(&self.db())
            .await?
            .into_iter()
            .map(|row| to_step(id, row))
            .collect()
    }
}

fn to_step(id: NotificationId, row: instance_step::Model) -> Result<InstanceStep> {
    Ok(InstanceStep {
        notification_id: id,
        instance_id: row.instance_uuid,
        attempt: u32::try_from(row.attempt).map_err(|_| Error::Corrupt {
            table: "instance_steps",
            column: "attempt",
            value: row.attempt.to_string(),
        })?,
        step: row.step,
        message: row.message,
        time: row.time,
    })
}

/// The notification's last progress event number.
async fn last_progress(txn: &DatabaseTransaction, id: NotificationId) -> Result<u64> {
    let last: i64 = progress_event::Entity::find()
        .select_only()
        .column_as(progress_event::Column::Sequence.max(), "max")
        .filter(progress_event::Column::NotificationUuid.eq(id.to_string()))
        .into_tuple::<Option<i64>>()
        .one(txn)
        .await?
        .flatten()
        .unwrap_or(0);
    u64::try_from(last).map_err(|_| Error::Corrupt {
        table: "progress_events",
        column: "sequence",
        value: last.to_string(),
    })
}

async fn insert_progress(
    txn: &DatabaseTransaction,
    id: NotificationId,
    progress: &[ProgressEvent],
) -> Result<()> {
    let rows: Vec<progress_event::ActiveModel> = progress
        .iter()
        .map(|p| progress_event::ActiveModel {
            notification_uuid: Set(id.to_string()),
            sequence: Set(p.sequence as i64),
            task: Set(p.task.clone()),
            state: Set(p.state.as_str().to_owned()),
            message: Set(p.message.clone()),
            instance_uuid: Set(p.instance_id.clone()),
            time: Set(p.time),
            ..Default::default()
        })
        .collect();
    for chunk in rows.chunks(INSERT_CHUNK) {
        progress_event::Entity::insert_many(chunk.to_vec())
            .exec(txn)
            .await?;
    }
    Ok(())
}

async fn insert_steps(
    txn: &DatabaseTransaction,
    id: NotificationId,
    attempt: u32,
    steps: &[ledger::StepTaken],
) -> Result<Vec<InstanceStep>> {
    let rows: Vec<instance_step::ActiveModel> = steps
        .iter()
        .map(|s| instance_step::ActiveModel {
            notification_uuid: Set(id.to_string()),
            instance_uuid: Set(s.instance_id.to_string()),
            attempt: Set(attempt as i32),
            step: Set(s.step.clone()),
            message: Set(s.message.clone()),
            time: Set(s.at),
            ..Default::default()
        })
        .collect();
    for chunk in rows.chunks(INSERT_CHUNK) {
        instance_step::Entity::insert_many(chunk.to_vec())
            .exec(txn)
            .await?;
    }
    Ok(steps
        .iter()
        .map(|s| InstanceStep {
            notification_id: id,
            instance_id: s.instance_id.to_string(),
            attempt,
            step: s.step.clone(),
            message: s.message.clone(),
            time: s.at,
        })
        .collect())
}

/// Writes the host flags a run changed. Who put a host on maintenance is
/// remembered (a new report may retry after that notification ends); a
/// held host's maintenance is an operator's, and no run changes it.
async fn apply_host_changes(
    txn: &DatabaseTransaction,
    id: NotificationId,
    changes: &[HostChange],
    at: DateTime<Utc>,
) -> Result<()> {
    for change in changes {
        let mut update = host::Entity::update_many()
            .col_expr(host::Column::UpdatedAt, Expr::value(at))
            .filter(host::Column::Name.eq(change.hostname.as_str()));
        if let Some(flag) = change.reserved {
            update = update.col_expr(host::Column::Reserved, Expr::value(flag));
        }
        update.exec(txn).await?;
        if let Some(flag) = change.on_maintenance {
            // A held host stays on maintenance, as an operator's.
            host::Entity::update_many()
                .col_expr(host::Column::OnMaintenance, Expr::value(flag))
                .col_expr(
                    host::Column::MaintenanceBy,
                    Expr::value(flag.then(|| id.to_string())),
                )
                .filter(host::Column::Name.eq(change.hostname.as_str()))
                .filter(host::Column::HeldReason.is_null())
                .exec(txn)
                .await?;
        }
    }
    Ok(())
}
