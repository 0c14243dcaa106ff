//! Recovery runs as the dispatcher drives them: what is due, claiming and
//! taking over runs, what a run needs to start, persisting its events,
//! resolving it, giving it back, expiring. Each operation goes to the
//! store and publishes what changed to the change feed (watchers, and the
//! dispatcher itself), with the metrics.

use std::time::Duration;

use chrono::{DateTime, Utc};
use instanceha_runtime::backoff::Backoff;

use super::Api;
use crate::changes::Change;
use crate::domain::{Notification, NotificationId, RunClaim, RunContext, RunId, SequencedEvent};
use crate::store::{self, Applied, Due, Resolved, RunPolicy};

/// Tries of a batch's persistence when the database fails for a passing
/// reason, and the wait between them.
const PERSIST_TRIES: u32 = 5;
const PERSIST_BACKOFF: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));

impl Api {
    /// Notifications with work for `replica` (see [`store::Store::due`]).
    pub async fn due_runs(&self, replica: &str, limit: u64) -> Result<Vec<Due>, store::Error> {
        self.store.due(replica, limit).await
    }

    /// Unfinished notifications generated before `before`.
    pub async fn expired_notifications(
        &self,
        before: DateTime<Utc>,
        limit: u64,
    ) -> Result<Vec<NotificationId>, store::Error> {
        self.store.expired(before, limit).await
    }

    /// Claims a notification for a run; publishes it as running.
    pub async fn claim_run(
        &self,
        id: NotificationId,
        replica: &str,
        policy: RunPolicy,
    ) -> Result<Option<(Notification, RunClaim)>, store::Error> {
        let claimed = self.store.claim(id, replica, policy).await?;
        if let Some((notification, _)) = &claimed {
            self.changes
                .publish(Change::Notification(notification.clone()));
        }
        Ok(claimed)
    }

    /// Takes over a run whose replica is gone (see
    /// [`store::Store::take_over`]).
    pub async fn take_over_run(
        &self,
        id: NotificationId,
        run_id: &RunId,
        replica: &str,
        lease: Duration,
    ) -> Result<bool, store::Error> {
        self.store.take_over(id, run_id, replica, lease).await
    }

    pub async fn renew_run_lease(
        &self,
        id: NotificationId,
        run_id: &RunId,
        lease: Duration,
    ) -> Result<bool, store::Error> {
        self.store.renew_lease(id, run_id, lease).await
    }

    /// What run `claim` of `notification` needs to start.
    pub async fn run_context(
        &self,
        notification: &Notification,
        claim: &RunClaim,
    ) -> Result<RunContext, store::Error> {
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
        Ok(RunContext {
            segment,
            reserved_hosts,
            instances,
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
    ) -> Result<Applied, store::Error> {
        let mut retries = PERSIST_BACKOFF.retries(Some(PERSIST_TRIES), None);
        let applied = loop {
            match self.store.apply_run_events(id, run_id, events, lease).await {
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, tries = retries.tries(), "cannot persist events yet");
                    if !retries.wait(None).await {
                        return Err(e);
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
        Ok(applied)
    }

    /// Resolves a run with the status rules and publishes the outcome;
    /// says when the next run (a retry, a reconcile, a release of locks)
    /// is due, if one is.
    pub async fn resolve_run(
        &self,
        id: NotificationId,
        run_id: &RunId,
        end: &crate::status::RunEnd,
        policy: RunPolicy,
        retry_at: DateTime<Utc>,
    ) -> Result<(Notification, Option<DateTime<Utc>>), store::Error> {
        let resolved = self
            .store
            .resolve_run(id, run_id, end, policy, retry_at)
            .await?;
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
        message: &str,
        retry_at: DateTime<Utc>,
    ) -> Result<Notification, store::Error> {
        let notification = self
            .store
            .release_unreachable(id, run_id, message, retry_at)
            .await?;
        self.changes
            .publish(Change::Notification(notification.clone()));
        Ok(notification)
    }

    /// Ends a notification too old to recover (after a last look at Nova
    /// if instances lack a result); `None` if nothing changed.
    pub async fn expire_notification(
        &self,
        id: NotificationId,
        reason: &str,
    ) -> Result<Option<Notification>, store::Error> {
        Ok(self
            .store
            .expire(id, reason)
            .await?
            .map(|resolved| self.publish_resolved(resolved)))
    }

    /// Locks held by ended notifications, for the metrics.
    pub async fn locks_left(&self) -> Result<u64, store::Error> {
        self.store.locks_left().await
    }

    /// The notification as stored now.
    pub async fn notification(&self, id: NotificationId) -> Result<Notification, store::Error> {
        self.store.notification(id).await
    }

    fn publish_resolved(&self, resolved: Resolved) -> Notification {
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
