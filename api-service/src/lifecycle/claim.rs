//! When a run starts: a new notification, or one in `error` whose next run
//! is due, unless an earlier notification of its host is unfinished (one
//! recovery per host at a time: it waits, its message saying behind
//! which); or an ended notification whose leftover locks are due for
//! release. A recovery is never started once the retry window has closed:
//! Nova's truth is read instead.

use chrono::{DateTime, Utc};
use instanceha_runtime::clock::plus;

use super::{ActiveRun, RunPolicy, RunState, messages};
use crate::domain::{NotificationId, RunId, RunKind};
use crate::status::{NotificationEvent, NotificationStatus, Transition};

/// An earlier notification of the same host that has not ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    pub id: NotificationId,
    pub status: NotificationStatus,
}

/// What claiming decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Claimed: write `state` and start a run of `kind` (the
    /// notification's run number `attempt`).
    Start {
        state: RunState,
        kind: RunKind,
        attempt: u32,
    },
    /// It waits behind an earlier notification of its host; `state`, when
    /// set, is the same with the message saying so (write it).
    Queued { state: Option<RunState> },
    /// Nothing to run now.
    NotDue,
}

/// What a claim is made with.
#[derive(Clone, Debug)]
pub struct ClaimRequest<'a> {
    pub now: DateTime<Utc>,
    pub replica: &'a str,
    /// The new run's id.
    pub run_id: RunId,
    pub policy: &'a RunPolicy,
    pub hostname: &'a str,
    /// An earlier unfinished notification of the host, if any.
    pub blocker: Option<Blocker>,
}

impl RunState {
    /// Claims the notification for a run, if one is due.
    pub fn claim(&self, request: ClaimRequest<'_>) -> Claim {
        if self.status.is_terminal() {
            return self.claim_lock_release(request);
        }
        let Ok(running) = self.status.on(NotificationEvent::Start) else {
            return Claim::NotDue;
        };
        let now = request.now;
        if self.next_attempt_at.is_some_and(|at| at > now) {
            return Claim::NotDue;
        }
        if let Some(blocker) = &request.blocker {
            let message = messages::queued_behind(blocker.id, request.hostname, blocker.status);
            let changed = self.message.as_deref() != Some(message.as_str());
            return Claim::Queued {
                state: changed.then(|| Self {
                    message: Some(message),
                    ..self.clone()
                }),
            };
        }
        let window_closed = self.retry_until.is_some_and(|until| until <= now);
        let kind = match self.next_kind.unwrap_or(RunKind::Recover) {
            // Never a recovery after the window: read Nova's truth first.
            RunKind::Recover if window_closed => RunKind::Reconcile,
            kind => kind,
        };
        let attempt = self.attempts.saturating_add(1);
        let state = Self {
            status: running,
            attempts: attempt,
            run: Some(ActiveRun {
                id: request.run_id,
                kind,
                sequence: 0,
                claimed_by: request.replica.to_owned(),
                lease_until: plus(now, request.policy.lease),
            }),
            next_kind: None,
            next_attempt_at: None,
            // The retry window starts with the first run.
            retry_until: Some(
                self.retry_until
                    .unwrap_or_else(|| plus(now, request.policy.retry_window)),
            ),
            ..self.clone()
        };
        Claim::Start {
            state,
            kind,
            attempt,
        }
    }

    /// Claims the release of an ended notification's leftover locks, when
    /// due and no other release is in progress (or its replica is gone).
    fn claim_lock_release(&self, request: ClaimRequest<'_>) -> Claim {
        let now = request.now;
        let lapsed = self.lapsed(now);
        let due =
            self.lock_release_at.is_some_and(|at| at <= now) || (self.run.is_some() && lapsed);
        if !due || !lapsed {
            return Claim::NotDue;
        }
        Claim::Start {
            state: Self {
                run: Some(ActiveRun {
                    id: request.run_id,
                    kind: RunKind::ReleaseLocks,
                    sequence: 0,
                    claimed_by: request.replica.to_owned(),
                    lease_until: plus(now, request.policy.lease),
                }),
                lock_release_at: None,
                ..self.clone()
            },
            kind: RunKind::ReleaseLocks,
            attempt: self.attempts.max(1),
        }
    }
}
