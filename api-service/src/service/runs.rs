//! Recovery runs as the dispatcher drives them: what is due, claiming and
//! taking over runs, what a run needs to start, persisting its events,
//! resolving it, giving it back, expiring. Each operation goes to the store
//! (which asks the run lifecycle) and publishes what changed to the change
//! feed (watchers, and the dispatcher itself), with the metrics. The
//! dispatcher sees only this layer's types.

use std::time::Duration;

use chrono::{DateTime, Utc};
use instanceha_runtime::backoff::Backoff;

use super::Api;
use crate::changes::Change;
use crate::domain::{Notification, NotificationId, RunClaim, RunContext, RunId, SequencedEvent};
use crate::lifecycle::{Due, RunEnd, RunOutcome, RunPolicy};
use crate::store::{self, Resolved};

/// Tries of a batch's persistence when the database fails for a passing
/// reason, and the wait between them.
const PERSIST_TRIES: u32 = 5;
const PERSIST_BACKOFF: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));

/// Why a run operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run is no longer the notification's (another replica, or an
    /// earlier call, moved it on).
    #[error("{0}")]
    Stale(String),
    /// The engine sent events the plan or the status rules refuse.
    #[error("{0}")]
    Rejected(String),
    /// The database failed.
    #[error(transparent)]
    Storage(store::Error),
}

impl From<store::Error> for RunError {
    fn from(err: store::Error) -> Self {
        match err {
            store::Error::Stale(message) => Self::Stale(message),
            store::Error::Rejected(message) => Self::Rejected(message),
            store::Error::Illegal(illegal) => Self::Stale(illegal.to_string()),
            other => Self::Storage(other),
        }
    }
}

/// What persisting a batch of a run's events came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persisted {
    /// The highest sequence number now persisted (to acknowledge).
    pub sequence: u64,
    /// The engine's `Done`, if the batch held it.
    pub done: Option<RunOutcome>,
}

impl Api {
    /// The time of day, from the store's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.store.now()
    }

    /// Notifications with work for `replica`.
    pub async fn due_runs(&self, replica: &str, limit: u64) -> Result<Vec<Due>, RunError> {
        Ok(self.store.due(replica, limit).await?)
    }

    /// Ends the unfinished notifications not running that were generated
    /// longer ago than `expire_after` (after a last look at Nova when
    /// instances lack a result); returns those that changed.
    pub async fn expire_old(
        &self,
        expire_after: Duration,
        limit: u64,
    ) -> Result<Vec<Notification>, RunError> {
        let mut expired = Vec::new();
        for id in self.store.expired(expire_after, limit).await? {
            match self.store.expire(id, expire_after).await {
                Ok(Some(resolved)) => expired.push(self.publish_resolved(resolved)),
                Ok(None) => {}
                Err(e) => tracing::warn!(notification_id = %id, error = %e, "cannot expire"),
            }
        }
        Ok(expired)
    }

    /// Claims a notification for a run; publishes it as running.
    pub async fn claim_run(
        &self,
        id: NotificationId,
        replica: &str,
        policy: &RunPolicy,
    ) -> Result<Option<(Notification, RunClaim)>, RunError> {
        let claimed = self.store.claim(id, replica, policy).await?;
        if let Some((notification, _)) = &claimed {
            self.changes
                .publish(Change::Notification(notification.clone()));
        }
        Ok(claimed)
    }

    /// Takes over a run whose replica is gone.
    pub async fn take_over_run(
        &self,
        id: NotificationId,
        run_id: &RunId,
        replica: &str,
        lease: Duration,
    ) -> Result<bool, RunError> {
        Ok(self.store.take_over(id, run_id, replica, lease).await?)
    }

    pub async fn renew_run_lease(
        &self,
        id: NotificationId,
        run_id: &RunId,
        lease: Duration,
    ) -> Result<bool, RunError> {
        Ok(self.store.renew_lease(id, run_id, lease).await?)
    }

    /// What run `claim` of `notification` needs to start.
    pub async fn run_context(
        &self,
        notification: &Notification,
        claim: &RunClaim,
    ) -> Result<RunContext, RunError> {
        let segment = self.store.segment(notification.segment_id).await?;
        let reserved_hosts = if segment.recovery_method.uses_reserved_hosts() {
            self.store.reserved_hosts(segment.id).await?
        } else {
            Vec::new()
        };
        let instances = self
            .store
            .run_instances(notification.id, claim.kind)
            .await?;
        let host = self.store.host_by_name(&notification.hostname).await?;
        let return_to_service = crate::lifecycle::hosts::returns_to_service(
            notification.notification_type,
            &notification.payload,
            segment.return_to_service,
            host.map(|h| h.held_reason.is_some()),
        );
        Ok(RunContext {
            segment,
            reserved_hosts,
            instances,
            return_to_service,
        })
    }

    /// Persists a batch of a run's events (retrying a database that fails
    /// for a passing reason) and publishes what changed.
    pub async fn persist_run_events(
        &self,
        id: NotificationId,
        run_id: &RunId,
        events: &[SequencedEvent],
        lease: Duration,
    ) -> Result<Persisted, RunError> {
        let mut retries = PERSIST_BACKOFF.retries(Some(PERSIST_TRIES), None);
        let applied = loop {
            match self.store.apply_run_events(id, run_id, events, lease).await {
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, tries = retries.tries(), "cannot persist events yet");
                    if !retries.wait(None).await {
                        return Err(e.into());
                    }
                }
                other => break other?,
            }
        };
        for vmove in &applied.vmoves {
            crate::metrics::vmove_resolved(vmove);
            self.changes.publish(Change::VMove(vmove.clone()));
        }
        for event in &applied.progress {
            self.changes.publish(Change::Progress {
                notification_id: id,
                event: event.clone(),
            });
        }
        for step in &applied.steps {
            self.changes.publish(Change::Step(step.clone()));
        }
        Ok(Persisted {
            sequence: applied.sequence,
            done: applied.done,
        })
    }

    /// Resolves a run as the lifecycle decides and publishes the outcome;
    /// says when the next run (a retry, a reconcile, a release of locks)
    /// is due, if one is.
    pub async fn resolve_run(
        &self,
        id: NotificationId,
        run_id: &RunId,
        end: &RunEnd,
        policy: &RunPolicy,
    ) -> Result<(Notification, Option<DateTime<Utc>>), RunError> {
        let resolved = self.store.resolve_run(id, run_id, end, policy).await?;
        let next = resolved.next_run_at;
        crate::metrics::locks_left(resolved.locks_held);
        Ok((self.publish_resolved(resolved), next))
    }

    /// Gives back a run the engine could not take, without using up an
    /// attempt; publishes the notification.
    pub async fn release_unreachable_run(
        &self,
        id: NotificationId,
        run_id: &RunId,
        message: String,
        policy: &RunPolicy,
    ) -> Result<Notification, RunError> {
        let notification = self
            .store
            .release_unreachable(id, run_id, message, policy)
            .await?;
        self.changes
            .publish(Change::Notification(notification.clone()));
        Ok(notification)
    }

    /// Locks held by ended notifications, for the metrics.
    pub async fn locks_left(&self) -> Result<u64, RunError> {
        Ok(self.store.locks_left().await?)
    }

    /// Hosts held out of service for flapping, for the metrics.
    pub async fn hosts_held(&self) -> Result<u64, RunError> {
        Ok(self.store.hosts_held().await?)
    }

    /// The notification as stored now.
    pub async fn notification(&self, id: NotificationId) -> Result<Notification, RunError> {
        Ok(self.store.notification(id).await?)
    }

    pub(super) fn publish_resolved(&self, resolved: Resolved) -> Notification {
        crate::metrics::notification_resolved(&resolved.notification);
        for vmove in resolved.vmoves {
            crate::metrics::vmove_resolved(&vmove);
            self.changes.publish(Change::VMove(vmove));
        }
        self.changes
            .publish(Change::Notification(resolved.notification.clone()));
        resolved.notification
    }
}
