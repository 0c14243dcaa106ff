//! The dispatcher's persistence: a notification's run state loaded, handed
//! to the run lifecycle (`crate::lifecycle`), and what it decided written
//! back as a compare-and-set on the status and the run (so exactly one
//! replica claims, takes over or resolves a run), together with the vmove
//! changes it decided, in one transaction. No rule is decided here: only
//! what to load and how to write.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::ExprTrait as _;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::entity::{notification, vmove};
use super::health::Write;
use super::notifications::{to_notification, unfinished};
use super::run_state::{notification_row, run_state, write_state};
use super::vmoves::{to_record, to_vmove};
use super::{Error, Result, Store, parse_enum, parse_uuid};
use crate::domain::{
    InstanceRef, Notification, NotificationId, PriorState, RunClaim, RunId, RunKind, VMove,
};
use crate::lifecycle::claim::ClaimRequest;
use crate::lifecycle::end::{RunEnded, reopened_vmove};
use crate::lifecycle::expiry::{self, Open};
use crate::lifecycle::{Blocker, Claim, Due, Ended, Refusal, RunEnd, RunPolicy, VMoveView};
use crate::status::{NotificationStatus, VMoveStatus};

/// What resolving a run (or expiring, or reopening) changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub notification: Notification,
    pub vmoves: Vec<VMove>,
    /// When the next run (or release of locks) is due, if one is.
    pub next_run_at: Option<DateTime<Utc>>,
    /// Locks the notification still holds.
    pub locks_held: usize,
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Stale(message) => Self::Stale(message),
            Refusal::Illegal(illegal) => Self::Illegal(illegal),
        }
    }
}

/// An older notification of the same host that has not ended: a report
/// queues behind it (one recovery per host at a time).
async fn blocker<C: ConnectionTrait>(
    conn: &C,
    row: &notification::Model,
) -> Result<Option<Blocker>> {
    let Some(earlier) = notification::Entity::find()
        .filter(notification::Column::SourceHostUuid.eq(row.source_host_uuid.as_str()))
        .filter(notification::Column::Id.lt(row.id))
        .filter(notification::Column::Status.is_in(unfinished()))
        .order_by_asc(notification::Column::Id)
        .one(conn)
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(Blocker {
        id: parse_uuid("notifications", "uuid", &earlier.uuid)?,
        status: parse_enum(
            "notifications",
            "status",
            &earlier.status,
            NotificationStatus::parse,
        )?,
    }))
}

/// The vmoves a run of `kind` is about.
pub(super) async fn run_vmoves<C: ConnectionTrait>(
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
    /// Claims a notification for a run, if the lifecycle says one is due
    /// (one compare-and-set: of two replicas exactly one wins). `None` if
    /// none is (any more).
    pub async fn claim(
        &self,
        id: NotificationId,
        replica: &str,
        policy: &RunPolicy,
    ) -> Result<Option<(Notification, RunClaim)>> {
        let row = notification_row(&self.db(), id, false).await?;
        let state = run_state(&row)?;
        let blocker = if state.status.is_terminal() {
            None
        } else {
            blocker(&self.db(), &row).await?
        };
        let at = self.now();
        let claim = state.claim(ClaimRequest {
            now: at,
            replica,
            run_id: RunId::from(uuid::Uuid::new_v4().to_string()),
            policy,
            hostname: &row.hostname,
            blocker,
        });
        match claim {
            Claim::NotDue | Claim::Queued { state: None } => Ok(None),
            Claim::Queued {
                state: Some(queued),
            } => {
                write_state(&self.db(), &row, &queued, at).await?;
                Ok(None)
            }
            Claim::Start {
                state: claimed,
                kind,
                attempt,
            } => {
                if !write_state(&self.db(), &row, &claimed, at).await? {
                    return Ok(None);
                }
                let notification = to_notification(notification_row(&self.db(), id, false).await?)?;
                let claim = RunClaim {
                    notification_id: id,
                    cancel_at: claimed.cancel_at(policy),
                    run_id: claimed.run.map(|r| r.id).unwrap_or_default(),
                    kind,
                    attempt,
                    trace_context: row.trace_context.clone(),
                };
                Ok(Some((notification, claim)))
            }
        }
    }

    /// Takes over run `run_id` of a running notification whose replica is
    /// gone; the caller then resolves it as lost.
    pub async fn take_over(
        &self,
        id: NotificationId,
        run_id: &RunId,
        replica: &str,
        lease: std::time::Duration,
    ) -> Result<bool> {
        let row = notification_row(&self.db(), id, false).await?;
        let at = self.now();
        match run_state(&row)?.take_over(run_id, replica, at, lease) {
            Some(taken) => write_state(&self.db(), &row, &taken, at).await,
            None => Ok(false),
        }
    }

    /// Extends the lease of run `run_id`; false if the run is no longer
    /// the notification's.
    pub async fn renew_lease(
        &self,
        id: NotificationId,
        run_id: &RunId,
        lease: std::time::Duration,
    ) -> Result<bool> {
        let row = notification_row(&self.db(), id, false).await?;
        let at = self.now();
        match run_state(&row)?.renew(run_id, at, lease) {
            Some(renewed) => write_state(&self.db(), &row, &renewed, at).await,
            None => Ok(false),
        }
    }

    /// The instances a run of `kind` of the notification is about (a first
    /// recovery's is empty: it plans afresh), with their prior state.
    pub async fn run_instances(
        &self,
        id: NotificationId,
        kind: RunKind,
    ) -> Result<Vec<InstanceRef>> {
        run_vmoves(&self.db(), id, kind)
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

    /// Ends run `run_id` as the lifecycle decides, in one transaction: its
    /// vmoves retried or failed, the notification's status, message and
    /// next run written.
    pub async fn resolve_run(
        &self,
        id: NotificationId,
        run_id: &RunId,
        end: &RunEnd,
        policy: &RunPolicy,
    ) -> Result<Resolved> {
        let txn = self.begin_write().await?;
        let row = notification_row(&*txn, id, true).await?;
        let state = run_state(&row)?;
        let rows = vmove::Entity::find()
            .filter(vmove::Column::NotificationUuid.eq(id.to_string()))
            .order_by_asc(vmove::Column::Id)
            .all(&*txn)
            .await?;
        let records = rows.iter().map(to_record).collect::<Result<Vec<_>>>()?;
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
        let held: Vec<String> = rows
            .iter()
            .filter(|v| v.lock_held)
            .map(|v| v.instance_name.clone())
            .collect();
        let at = self.now();
        let ended = state.end_run(RunEnded {
            run_id,
            end,
            vmoves: &views,
            locks_held: &held,
            now: at,
            policy,
        })?;
        let mut changed = Vec::new();
        for change in &ended.vmoves {
            let mut record = records[change.id].clone();
            record.apply(change.event.clone())?;
            changed.push(
                self.save_vmove(
                    &txn,
                    &rows[change.id],
                    &record,
                    change.step.as_ref(),
                    None,
                    at,
                )
                .await?,
            );
        }
        self.finish(txn, &row, ended, changed, at).await
    }

    /// Writes what ended a run (or expired, or reopened a notification).
    async fn finish<Id>(
        &self,
        txn: Write<'_>,
        row: &notification::Model,
        ended: Ended<Id>,
        vmoves: Vec<vmove::Model>,
        at: DateTime<Utc>,
    ) -> Result<Resolved> {
        if !write_state(&*txn, row, &ended.state, at).await? {
            return Err(Error::Stale(format!(
                "notification {} changed while it was being resolved",
                row.uuid
            )));
        }
        let saved = notification_row(
            &*txn,
            parse_uuid("notifications", "uuid", &row.uuid)?,
            false,
        )
        .await?;
        txn.commit().await?;
        Ok(Resolved {
            notification: to_notification(saved)?,
            vmoves: vmoves.into_iter().map(to_vmove).collect::<Result<_>>()?,
            next_run_at: ended.next_at,
            locks_held: ended.locks_held,
        })
    }

    /// Gives a claimed run back because the engine could not be reached
    /// (see [`crate::lifecycle::RunState::engine_unreachable`]); past the verdict deadline
    /// the run is ended as lost instead, which gives the verdict.
    pub async fn release_unreachable(
        &self,
        id: NotificationId,
        run_id: &RunId,
        message: String,
        policy: &RunPolicy,
    ) -> Result<Notification> {
        let txn = self.begin_write().await?;
        let row = notification_row(&*txn, id, true).await?;
        let at = self.now();
        let Some(released) =
            run_state(&row)?.engine_unreachable(run_id, message.clone(), at, policy)?
        else {
            txn.rollback().await?;
            let end = RunEnd::Lost {
                reason: message,
                cause: crate::lifecycle::LostCause::Engine,
            };
            return Ok(self
                .resolve_run(id, run_id, &end, policy)
                .await?
                .notification);
        };
        write_state(&*txn, &row, &released, at).await?;
        let saved = notification_row(&*txn, id, false).await?;
        txn.commit().await?;
        to_notification(saved)
    }

    /// Expires a notification generated longer ago than `expire_after`,
    /// as the lifecycle decides; `None` if nothing changed.
    pub async fn expire(
        &self,
        id: NotificationId,
        expire_after: std::time::Duration,
    ) -> Result<Option<Resolved>> {
        let txn = self.begin_write().await?;
        let row = notification_row(&*txn, id, true).await?;
        let open = run_vmoves(&*txn, id, RunKind::Reconcile).await?.len();
        let held = held_locks(&*txn, id).await?;
        let at = self.now();
        let Some(ended) = run_state(&row)?.expire(
            at,
            expire_after,
            Open {
                instances: open,
                locks_held: &held,
            },
        ) else {
            return Ok(None);
        };
        self.finish(txn, &row, ended, Vec::new(), at)
            .await
            .map(Some)
    }

    /// An operator's retry of a `failed` notification: it goes back to
    /// `error`, due at once with a new retry window, and its failed vmoves
    /// back to pending.
    pub async fn reopen(&self, id: NotificationId) -> Result<Resolved> {
        let txn = self.begin_write().await?;
        let row = notification_row(&*txn, id, true).await?;
        let at = self.now();
        let reopened = run_state(&row)?.reopen(at)?;
        let mut changed = Vec::new();
        for v in vmove::Entity::find()
            .filter(vmove::Column::NotificationUuid.eq(id.to_string()))
            .filter(vmove::Column::Status.eq(VMoveStatus::Failed.as_str()))
            .all(&*txn)
            .await?
        {
            let change = reopened_vmove((), at);
            let mut record = to_record(&v)?;
            record.apply(change.event)?;
            changed.push(
                self.save_vmove(&txn, &v, &record, change.step.as_ref(), None, at)
                    .await?,
            );
        }
        let ended = Ended {
            state: reopened,
            vmoves: Vec::<crate::lifecycle::VMoveChange<()>>::new(),
            next_at: Some(at),
            locks_held: 0,
        };
        self.finish(txn, &row, ended, changed, at).await
    }

    /// Notifications with work for `replica`, oldest first: the rows that
    /// may have work, as the lifecycle's [`crate::lifecycle::RunState::due`] then decides.
    pub async fn due(&self, replica: &str, limit: u64) -> Result<Vec<Due>> {
        let at = self.now();
        // The rows the lifecycle's rule can find due, as an index of it;
        // the rule itself then decides.
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
                        .and(
                            notification::Column::LeaseUntil
                                .lt(at)
                                .or(notification::Column::LeaseUntil.is_null()),
                        )),
            )
            .order_by_asc(notification::Column::Id)
            .limit(limit)
            .all(&self.db())
            .await?;
        let mut due = Vec::new();
        for row in rows {
            if let Some(work) = run_state(&row)?.due(replica, at) {
                due.push(Due {
                    id: parse_uuid("notifications", "uuid", &row.uuid)?,
                    work,
                });
            }
        }
        Ok(due)
    }

    /// Unfinished notifications, not running, generated longer ago than
    /// `expire_after`.
    pub async fn expired(
        &self,
        expire_after: std::time::Duration,
        limit: u64,
    ) -> Result<Vec<NotificationId>> {
        let before = expiry::cutoff(self.now(), expire_after);
        notification::Entity::find()
            .filter(notification::Column::Status.is_in(unfinished()))
            .filter(notification::Column::Status.ne(NotificationStatus::Running.as_str()))
            .filter(notification::Column::GeneratedTime.lt(before))
            .order_by_asc(notification::Column::Id)
            .limit(limit)
            .all(&self.db())
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
            .count(&self.db())
            .await?)
    }
}
