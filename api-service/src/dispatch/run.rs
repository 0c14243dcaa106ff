//! One run, from its claim to its resolution: open the stream, persist and
//! acknowledge each batch of events (the lease renewed meanwhile by a
//! guard that stops with the run, however it ends), cancel on expiry or
//! timeout, then resolve with the status rules.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::Dispatcher;
use super::link::{Received, RunStream};
use crate::domain::{Notification, NotificationId, RunClaim, RunId};
use crate::lifecycle::{LostCause, RunEnd, RunOutcome};
use crate::service::{Api, RunError};

/// Renews a run's lease every third of it while alive; dropping it (the
/// run ended, returned early or panicked) stops the renewal.
struct LeaseGuard {
    _renewal: AbortOnDropHandle<()>,
}

impl LeaseGuard {
    fn hold(api: Api, id: NotificationId, run_id: RunId, lease: Duration) -> Self {
        let renewal = tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                match api.renew_run_lease(id, &run_id, lease).await {
                    Ok(true) => {}
                    Ok(false) => {
                        // The run is no longer this one's: nothing to hold.
                        tracing::warn!(notification_id = %id, run_id = %run_id, "the run's claim is gone; no longer renewing its lease");
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot renew the run's lease"),
                }
            }
        });
        Self {
            _renewal: AbortOnDropHandle::new(renewal),
        }
    }
}

/// How following a run's stream ended.
enum Followed {
    /// Resolve the run so.
    End(RunEnd),
    /// Leave the claim as it is (shutting down, or the database cannot
    /// persist): the lease expires and the run resumes.
    Abandon,
}

impl Dispatcher {
    /// One run: open the stream, follow it, resolve it.
    pub(super) async fn execute(
        &self,
        notification: Notification,
        claim: RunClaim,
        cancel: CancellationToken,
    ) {
        let id = notification.id;
        let run_id = claim.run_id.clone();
        let deadline = self.deadline(&claim);
        let context = match self.api.run_context(&notification, &claim).await {
            Ok(context) => context,
            Err(e) => {
                // The database failed: leave the claim; the lease expires
                // and the run is resolved as lost.
                tracing::warn!(error = %e, "cannot prepare the run");
                return;
            }
        };
        let start = context.start(&claim, &notification);
        let opened = tokio::select! {
            () = cancel.cancelled() => return,
            opened = self.link.open(start) => opened,
        };
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(reason) => {
                crate::metrics::run_ended("engine_unreachable");
                self.engine_unreachable(id, &run_id, &reason).await;
                return;
            }
        };
        let _open = crate::metrics::OpenStream::open();
        let _lease = LeaseGuard::hold(self.api.clone(), id, run_id.clone(), self.settings.lease);
        tracing::info!(engine = %self.link.url(), "run dispatched");

        // The stream stays open until the run is resolved: dropping it
        // would reset it before the last acknowledgement is sent.
        let end = match self
            .follow(id, &run_id, &mut stream, &cancel, deadline)
            .await
        {
            Followed::End(end) => end,
            Followed::Abandon => return,
        };
        crate::metrics::run_ended(if matches!(end, RunEnd::Done(_)) {
            "done"
        } else {
            "lost"
        });
        if let RunEnd::Lost { reason, .. } = &end {
            instanceha_runtime::telemetry::record_error(&tracing::Span::current(), reason);
        }
        if matches!(&end, RunEnd::Done(RunOutcome::Cancelled { .. })) {
            tracing::info!("run cancelled");
        }
        self.resolve(id, &run_id, end).await;
        stream.close().await;
    }

    /// When the run is to be cancelled, and why: at `dispatch.run_timeout`,
    /// or earlier when the retry window closes (a recovery) or the verdict
    /// deadline passes (a reconcile), as the lifecycle said at the claim.
    fn deadline(&self, claim: &RunClaim) -> (tokio::time::Instant, String) {
        let timeout = (
            self.settings.run_timeout,
            format!(
                "the run exceeded dispatch.run_timeout ({})",
                humantime::format_duration(self.settings.run_timeout)
            ),
        );
        let (wait, reason) = match claim.cancel_at {
            Some((at, reason)) => {
                let wait = (at - self.api.now()).to_std().unwrap_or_default();
                if wait < timeout.0 {
                    (wait, reason.to_owned())
                } else {
                    timeout
                }
            }
            None => timeout,
        };
        (tokio::time::Instant::now() + wait, reason)
    }

    /// Persists and acknowledges every batch until `Done` or the end of the
    /// stream; cancels the run when the notification expires or the run
    /// reaches its deadline.
    async fn follow(
        &self,
        id: NotificationId,
        run_id: &RunId,
        stream: &mut RunStream,
        cancel: &CancellationToken,
        (deadline, deadline_reason): (tokio::time::Instant, String),
    ) -> Followed {
        let deadline = tokio::time::sleep_until(deadline);
        tokio::pin!(deadline);
        let mut cancelled_for: Option<String> = None;
        loop {
            let received = tokio::select! {
                () = cancel.cancelled(), if cancelled_for.is_none() => {
                    if self.shutdown.is_cancelled() {
                        // Shutting down: abandon; the claim resumes later.
                        return Followed::Abandon;
                    }
                    let reason = "the notification expired".to_owned();
                    stream.cancel(&reason).await;
                    cancelled_for = Some(reason);
                    continue;
                }
                () = &mut deadline, if cancelled_for.is_none() => {
                    stream.cancel(&deadline_reason).await;
                    cancelled_for = Some(deadline_reason.clone());
                    continue;
                }
                received = stream.next(self.settings.event_batch) => received,
            };
            let events = match received {
                Received::Events(events) => events,
                Received::Failed(reason) => return Followed::End(RunEnd::engine_lost(reason)),
                Received::Closed => {
                    return Followed::End(RunEnd::engine_lost(cancelled_for.unwrap_or_else(
                        || "the engine closed the stream without reporting done".to_owned(),
                    )));
                }
                Received::Malformed(reason) => return self.refuse(stream, reason).await,
            };
            let persisted = match self
                .api
                .persist_run_events(id, run_id, &events, self.settings.lease)
                .await
            {
                Ok(persisted) => persisted,
                Err(RunError::Rejected(reason)) => {
                    return self
                        .refuse(stream, format!("engine protocol error: {reason}"))
                        .await;
                }
                Err(e) => {
                    // Nothing can be persisted: abandon the run without
                    // acknowledging; the lease expires and it resumes.
                    tracing::error!(error = %e, "cannot persist the run's events; abandoning it");
                    return Followed::Abandon;
                }
            };
            stream.ack(persisted.sequence).await;
            if let Some(outcome) = persisted.done {
                return Followed::End(RunEnd::Done(outcome));
            }
        }
    }

    /// Cancels a run whose events the API refuses; it is resolved as lost.
    async fn refuse(&self, stream: &mut RunStream, reason: String) -> Followed {
        stream.abandon(&reason).await;
        Followed::End(RunEnd::Lost {
            reason,
            cause: LostCause::Refused,
        })
    }
}
