//! How a run ends: resolved with the status rules ([`super::resolution`]),
//! its instances retried, reconciled or failed, the next run scheduled —
//! at once after a run lost with its engine or its replica (the dispatcher
//! waits for an engine to answer its health check), after the backoff
//! otherwise; the locks an ended notification still holds scheduled for
//! release. Also: a run the engine could not take, and an operator's
//! reopening of failed instances.

use chrono::{DateTime, Utc};
use instanceha_runtime::clock::plus;

use super::resolution::{self, LostCause, Resolution, RunEnd, VMoveView};
use super::{Refusal, RunPolicy, RunState, messages};
use crate::domain::{RunId, RunKind};
use crate::status::ledger::Step;
use crate::status::{NotificationEvent, Transition, VMoveEvent};

/// A change the end of a run makes to one vmove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VMoveChange<Id> {
    pub id: Id,
    pub event: VMoveEvent,
    /// The step it is then in, when that changes.
    pub step: Option<Step>,
}

/// What the end of a run changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended<Id> {
    pub state: RunState,
    pub vmoves: Vec<VMoveChange<Id>>,
    /// When the next run (or release of locks) is due, if one is.
    pub next_at: Option<DateTime<Utc>>,
    /// Locks the notification still holds.
    pub locks_held: usize,
}

/// A run's end, with what the lifecycle needs to resolve it.
#[derive(Clone, Debug)]
pub struct RunEnded<'a, Id> {
    pub run_id: &'a RunId,
    pub end: &'a RunEnd,
    /// Every vmove of the notification, as persisted.
    pub vmoves: &'a [VMoveView<'a, Id>],
    /// The instances whose lock the notification holds.
    pub locks_held: &'a [String],
    pub now: DateTime<Utc>,
    pub policy: &'a RunPolicy,
}

impl RunState {
    /// Ends run `run_id`: a recovery or reconcile run is resolved with the
    /// status rules; a release of locks changes no status, only when the
    /// locks it could not release are tried again.
    pub fn end_run<Id: Clone>(&self, ended: RunEnded<'_, Id>) -> Result<Ended<Id>, Refusal> {
        let kind = self.check_run(ended.run_id)?;
        let now = ended.now;
        if kind == RunKind::ReleaseLocks {
            let held = ended.locks_held;
            let next_at = (!held.is_empty()).then(|| plus(now, ended.policy.retry_delay(2)));
            let state = Self {
                message: Some(messages::with_locks_held(
                    self.message.as_deref().unwrap_or_default(),
                    held,
                )),
                run: None,
                lock_release_at: next_at,
                ..self.clone()
            };
            return Ok(Ended {
                state,
                vmoves: Vec::new(),
                next_at,
                locks_held: held.len(),
            });
        }
        let reconcile_at = self.reconcile_at(kind, now, ended.policy);
        let mut budget = self.budget(now, reconcile_at, ended.policy);
        if kind == RunKind::Recover {
            // The verdict's look at Nova after the last recovery is always
            // taken: its grace counts from that recovery's end (below).
            budget.verdict_open = true;
        }
        let resolution = resolution::resolve(ended.end, kind, ended.vmoves, budget);
        let vmoves = vmove_changes(&resolution, now);
        let status = self.status.on(resolution.event())?;
        let next_kind = resolution.next_run();
        let next_at = next_kind.map(|kind| match kind {
            RunKind::Recover => self.retry_at(ended.end, now, ended.policy),
            RunKind::Reconcile => reconcile_at,
            RunKind::ReleaseLocks => now,
        });
        // The verdict's look at Nova starts when recoveries stop: the
        // window ends now, so that the verdict comes within `verdict_grace`
        // of the last recovery — not of a window no run will use (the
        // attempts are spent), nor of one a long recovery outlasted.
        let retry_until = match (kind, next_kind) {
            (RunKind::Recover, Some(RunKind::Reconcile)) => Some(now),
            _ => self.retry_until,
        };
        let mut message = resolution.message().to_owned();
        if let (Some(RunKind::Recover), Some(at)) = (next_kind, next_at) {
            message = messages::with_next_try(&message, at);
        }
        let held: &[String] = if status.is_terminal() {
            ended.locks_held
        } else {
            &[]
        };
        let release_at = (!held.is_empty()).then_some(now);
        let state = Self {
            status,
            message: Some(messages::with_note(
                &messages::with_locks_held(&message, held),
                self.note.as_deref(),
            )),
            run: None,
            next_kind,
            next_attempt_at: next_at,
            lock_release_at: release_at,
            ended_at: status.is_terminal().then_some(now),
            retry_until,
            ..self.clone()
        };
        Ok(Ended {
            state,
            vmoves,
            next_at: next_at.or(release_at),
            locks_held: held.len(),
        })
    }

    /// When a reconcile run would follow a run of `kind` ending at `now`:
    /// at once after a recovery (the verdict's first look at Nova), after
    /// the retry backoff after a reconcile that could not read Nova (it
    /// may be answering again by then; reading it in a tight loop only
    /// adds to its load).
    fn reconcile_at(&self, kind: RunKind, now: DateTime<Utc>, policy: &RunPolicy) -> DateTime<Utc> {
        match kind {
            RunKind::Reconcile => plus(now, policy.retry_delay(self.attempts.saturating_add(1))),
            RunKind::Recover | RunKind::ReleaseLocks => now,
        }
    }

    /// When the next recovery run is due after `end`: at once when the
    /// run was lost with its engine or its replica (not Nova's fault: the
    /// dispatcher waits for an engine to answer), after the backoff
    /// otherwise.
    fn retry_at(&self, end: &RunEnd, now: DateTime<Utc>, policy: &RunPolicy) -> DateTime<Utc> {
        match end {
            RunEnd::Lost {
                cause: LostCause::Engine | LostCause::Replica,
                ..
            } => now,
            RunEnd::Lost {
                cause: LostCause::Refused,
                ..
            }
            | RunEnd::Done(_) => plus(now, policy.retry_delay(self.attempts.saturating_add(1))),
        }
    }

    /// Run `run_id` given back because the engine could not be reached:
    /// a recovery's notification goes to `error` without using up an
    /// attempt, its next run of the same kind due as soon as an engine
    /// answers; a release of locks is due again then too. Past the verdict
    /// deadline nothing waits for an engine any more: `None`, and the run
    /// is to be ended as lost ([`Self::end_run`]), which gives the verdict.
    pub fn engine_unreachable(
        &self,
        run_id: &RunId,
        message: String,
        now: DateTime<Utc>,
        policy: &RunPolicy,
    ) -> Result<Option<Self>, Refusal> {
        let kind = self.check_run(run_id)?;
        if kind == RunKind::ReleaseLocks {
            return Ok(Some(Self {
                run: None,
                lock_release_at: Some(now),
                ..self.clone()
            }));
        }
        if !self.budget(now, now, policy).verdict_open {
            return Ok(None);
        }
        Ok(Some(Self {
            status: self.status.on(NotificationEvent::Interrupt)?,
            attempts: self.attempts.saturating_sub(1),
            run: None,
            next_kind: Some(kind),
            next_attempt_at: Some(now),
            message: Some(message),
            ..self.clone()
        }))
    }
}

/// The vmove changes a resolution makes.
fn vmove_changes<Id: Clone>(
    resolution: &Resolution<Id>,
    now: DateTime<Utc>,
) -> Vec<VMoveChange<Id>> {
    match resolution {
        Resolution::Retry { retry, .. } => retry
            .iter()
            .map(|id| VMoveChange {
                id: id.clone(),
                event: VMoveEvent::Retry,
                step: Some(queued_for_retry(now, None)),
            })
            .collect(),
        Resolution::Failed { fail, .. } => fail
            .iter()
            .map(|(id, message)| VMoveChange {
                id: id.clone(),
                event: VMoveEvent::Fail {
                    at: now,
                    started: None,
                    message: message.clone(),
                    retryable: false,
                },
                step: None,
            })
            .collect(),
        Resolution::Reconcile { .. } | Resolution::Finished { .. } | Resolution::Ignored { .. } => {
            Vec::new()
        }
    }
}

fn queued_for_retry(now: DateTime<Utc>, why: Option<&str>) -> Step {
    Step {
        name: "queued for retry".to_owned(),
        message: why.map(str::to_owned),
        at: Some(now),
    }
}

/// The change an operator's reopening makes to a failed vmove.
pub fn reopened_vmove<Id>(id: Id, now: DateTime<Utc>) -> VMoveChange<Id> {
    VMoveChange {
        id,
        event: VMoveEvent::Reopen,
        step: Some(queued_for_retry(
            now,
            Some("retry requested by an operator"),
        )),
    }
}
