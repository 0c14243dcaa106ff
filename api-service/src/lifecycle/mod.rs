//! The run lifecycle: every rule of when a notification's run starts, is
//! queued, retries, is taken over, expires or ends, and every message that
//! explains it, as pure functions of the notification's [`RunState`], an
//! input and the time. No I/O: the store loads the state (and what an
//! input needs: the vmoves, the locks held, an earlier notification of the
//! host), calls one function here, and writes what it returns as a
//! compare-and-set; the dispatcher carries out the effects (start a run,
//! cancel one, release locks when due).
//!
//! * [`claim`]: a run starts (or waits behind its host's earlier
//!   notification, or is not due);
//! * [`RunState::take_over`], [`RunState::renew`],
//!   [`RunState::events_applied`]: leases;
//! * [`end`]: a run ended, was refused by an unreachable engine, or must be
//!   cancelled because the retry window closed; [`resolution`] decides what
//!   its end means;
//! * [`expiry`]: a notification too old ends, after a last look at Nova;
//! * [`RunState::reopen`]: an operator's retry;
//! * [`intake`]: what becomes of a new report (a new incident, a
//!   duplicate, a flapping host, a host on maintenance);
//! * [`hosts`]: when a host's flags may change.
//!
//! The status transitions themselves are the state machines of
//! [`crate::status`]; the lifecycle decides which one applies.

pub mod claim;
pub mod end;
pub mod expiry;
pub mod hosts;
pub mod intake;
pub mod messages;
pub mod resolution;

#[cfg(test)]
mod tests;

use std::time::Duration;

use chrono::{DateTime, Utc};
use instanceha_runtime::backoff::Backoff;
use instanceha_runtime::clock::plus;

pub use claim::{Blocker, Claim};
pub use end::{Ended, VMoveChange};
pub use resolution::{LostCause, RunEnd, RunOutcome, VMoveView};

use crate::domain::{RunId, RunKind};
use crate::status::{IllegalTransition, NotificationEvent, NotificationStatus, Transition};

/// How runs are paced, from the dispatch settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunPolicy {
    /// A claim holds this long without renewal.
    pub lease: Duration,
    /// Recoveries are retried within this from the first run.
    pub retry_window: Duration,
    /// After the retry window, the verdict (a last look at Nova) comes
    /// within this: a recovery run still going when the window closes is
    /// cancelled, and reconcile runs are tried only until then.
    pub verdict_grace: Duration,
    /// Recovery runs per notification at most (the reconciles before the
    /// verdict are bounded by `verdict_grace`, not counted).
    pub max_attempts: u32,
    /// The wait before a retry (no jitter: the message says when).
    pub retry_backoff: Backoff,
}

impl RunPolicy {
    /// The wait before run number `attempt` (2 for the first retry).
    pub fn retry_delay(&self, attempt: u32) -> Duration {
        self.retry_backoff.nominal(attempt.saturating_sub(1))
    }
}

/// The run in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveRun {
    pub id: RunId,
    pub kind: RunKind,
    /// The last event persisted.
    pub sequence: u64,
    /// The replica running it.
    pub claimed_by: String,
    /// It is lost unless renewed before then.
    pub lease_until: DateTime<Utc>,
}

/// A notification's run state: its status and what its runs need. Loaded
/// by the store, changed only by this module, written back as a
/// compare-and-set on the status and the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunState {
    pub status: NotificationStatus,
    /// Runs claimed so far.
    pub attempts: u32,
    /// The run in progress (a release of locks runs on an ended
    /// notification).
    pub run: Option<ActiveRun>,
    /// The kind of the next run, when none is in progress.
    pub next_kind: Option<RunKind>,
    /// The next run is not due before then.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Recoveries are retried until then (set at the first run).
    pub retry_until: Option<DateTime<Utc>>,
    /// The locks an ended notification still holds are released again
    /// then.
    pub lock_release_at: Option<DateTime<Utc>>,
    pub message: Option<String>,
    /// What the intake noted (a flapping host, a monitor's clock ahead):
    /// every message the lifecycle writes keeps saying it.
    pub note: Option<String>,
    /// When it reached a terminal status.
    pub ended_at: Option<DateTime<Utc>>,
}

/// A change the lifecycle refuses because the state moved on: another
/// replica or an earlier call got there first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    Stale(String),
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
}

/// A notification the dispatcher has work for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    pub id: crate::domain::NotificationId,
    pub work: DueWork,
}

/// What the dispatcher has to do for a notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DueWork {
    /// A run to claim (a recovery, a reconcile, a release of locks).
    Run,
    /// Run `run_id` lost its replica: take it over and resolve it as lost.
    TakeOver { run_id: RunId },
}

impl RunState {
    /// A new report's state: `status` as the intake decided.
    pub fn reported(status: NotificationStatus, message: Option<String>) -> Self {
        Self {
            status,
            attempts: 0,
            run: None,
            next_kind: None,
            next_attempt_at: None,
            retry_until: None,
            lock_release_at: None,
            message,
            note: None,
            ended_at: None,
        }
    }

    /// Whether the run's lease has run out (or there is no run).
    fn lapsed(&self, now: DateTime<Utc>) -> bool {
        self.run.as_ref().is_none_or(|run| run.lease_until < now)
    }

    /// The kind of run `run_id`, if it is the one in progress: a recovery
    /// or reconcile of a running notification, or a release of locks of an
    /// ended one.
    pub fn check_run(&self, run_id: &RunId) -> Result<RunKind, Refusal> {
        let current = self.run.as_ref().filter(|run| &run.id == run_id);
        let running = current.is_some_and(|run| match run.kind {
            RunKind::ReleaseLocks => self.status.is_terminal(),
            RunKind::Recover | RunKind::Reconcile => self.status == NotificationStatus::Running,
        });
        match current {
            Some(run) if running => Ok(run.kind),
            _ => Err(Refusal::Stale(format!(
                "the notification is {} with run {}, not running run {run_id}",
                self.status,
                self.run
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), |run| run.id.to_string())
            ))),
        }
    }

    /// What the dispatcher of `replica` has to do now, if anything: a new
    /// or due notification to claim, a run lost with its replica (its
    /// lease ran out, or it was this replica's before a restart) to take
    /// over, leftover locks due for release.
    pub fn due(&self, replica: &str, now: DateTime<Utc>) -> Option<DueWork> {
        match self.status {
            NotificationStatus::New => Some(DueWork::Run),
            NotificationStatus::Error => self
                .next_attempt_at
                .is_none_or(|at| at <= now)
                .then_some(DueWork::Run),
            NotificationStatus::Running => {
                let run = self.run.as_ref()?;
                (run.claimed_by == replica || run.lease_until < now).then(|| DueWork::TakeOver {
                    run_id: run.id.clone(),
                })
            }
            NotificationStatus::Failed
            | NotificationStatus::Ignored
            | NotificationStatus::Finished => {
                let release_due = self.lock_release_at.is_some_and(|at| at <= now);
                let lost_release = self.run.is_some() && self.lapsed(now);
                (release_due || lost_release).then_some(DueWork::Run)
            }
        }
    }

    /// Run `run_id` taken over by `replica` because its own replica is gone
    /// (its lease ran out, or it is `replica`'s own from before a restart);
    /// the caller then ends it as lost.
    pub fn take_over(
        &self,
        run_id: &RunId,
        replica: &str,
        now: DateTime<Utc>,
        lease: Duration,
    ) -> Option<Self> {
        let run = self.run.as_ref()?;
        let gone = run.claimed_by == replica || run.lease_until < now;
        if self.status != NotificationStatus::Running || &run.id != run_id || !gone {
            return None;
        }
        let mut next = self.clone();
        if let Some(run) = next.run.as_mut() {
            run.claimed_by = replica.to_owned();
            run.lease_until = plus(now, lease);
        }
        Some(next)
    }

    /// Run `run_id`'s lease extended, if it is still the notification's.
    pub fn renew(&self, run_id: &RunId, now: DateTime<Utc>, lease: Duration) -> Option<Self> {
        let mut next = self.clone();
        let run = next.run.as_mut().filter(|run| &run.id == run_id)?;
        run.lease_until = plus(now, lease);
        Some(next)
    }

    /// Run `run_id` after a batch of its events up to `sequence` was
    /// persisted: its lease renewed.
    pub fn events_applied(
        &self,
        run_id: &RunId,
        sequence: u64,
        now: DateTime<Utc>,
        lease: Duration,
    ) -> Result<Self, Refusal> {
        self.check_run(run_id)?;
        let mut next = self.clone();
        if let Some(run) = next.run.as_mut() {
            run.sequence = sequence;
            run.lease_until = plus(now, lease);
        }
        Ok(next)
    }

    /// An operator's retry of a failed notification: back to `error`, due
    /// at once with a new retry window (its failed vmoves go back to
    /// pending: [`end::reopened_vmove`]).
    pub fn reopen(&self, now: DateTime<Utc>) -> Result<Self, Refusal> {
        let status = self.status.on(NotificationEvent::Reopen)?;
        Ok(Self {
            status,
            message: Some("retry requested by an operator; the recovery runs again".to_owned()),
            next_kind: Some(RunKind::Recover),
            retry_until: None,
            next_attempt_at: Some(now),
            ended_at: None,
            ..self.clone()
        })
    }

    /// When a run in progress must be cancelled: a reconcile run when the
    /// verdict deadline passes (the retry window plus `verdict_grace`), so
    /// that Nova's truth is not read for ever. A recovery run is not cut
    /// short when the window closes: Nova may still be working through a
    /// large recovery, and the engine ends each evacuation that stops
    /// progressing within `recovery.stalled_evacuation_after`.
    pub fn cancel_at(&self, policy: &RunPolicy) -> Option<(DateTime<Utc>, &'static str)> {
        let run = self.run.as_ref()?;
        let until = self.retry_until?;
        match run.kind {
            RunKind::Reconcile => Some((
                plus(until, policy.verdict_grace),
                "the verdict deadline passed (dispatch.retry_window plus dispatch.verdict_grace)",
            )),
            RunKind::Recover | RunKind::ReleaseLocks => None,
        }
    }

    /// The budget left after a run of this notification ended at `now`,
    /// a reconcile following it being due at `reconcile_at`.
    fn budget(
        &self,
        now: DateTime<Utc>,
        reconcile_at: DateTime<Utc>,
        policy: &RunPolicy,
    ) -> resolution::RetryBudget {
        resolution::RetryBudget {
            attempt: self.attempts.max(1),
            max_attempts: policy.max_attempts,
            window_open: self.retry_until.is_none_or(|until| now < until),
            verdict_open: self
                .retry_until
                .is_none_or(|until| reconcile_at < plus(until, policy.verdict_grace)),
        }
    }
}
