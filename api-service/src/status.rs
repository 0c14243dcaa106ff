//! The status rules: the notification and vmove state machines, and the one
//! function that decides a notification's final status from its vmoves.
//!
//! Every status change in the API goes through [`NotificationStatus::on`] or
//! [`VMoveRecord::apply`]; illegal transitions are rejected here and nowhere
//! else. [`resolve_final_status`] is the only place that picks a terminal
//! status, and it upholds the invariants of the design brief:
//!
//! * a notification is `finished` only if every vmove is `succeeded` or
//!   `ignored`;
//! * a terminal notification has no vmove `pending` or `ongoing`, and every
//!   failed vmove has an end time and a message;
//! * an instance without a result, or failed for a passing reason, is
//!   retried within the retry window; before any final verdict on such
//!   instances, their truth is read from Nova by a reconcile run, and an
//!   instance Nova has moved and settled is `succeeded` whatever the engine
//!   saw.

pub mod ledger;

use chrono::{DateTime, Utc};

use crate::domain::RunKind;

pub use instanceha_proto::model::{NotificationStatus, VMoveStatus};

/// The notification state machine: the status after an event, or why the
/// transition is illegal. Every status change goes through
/// [`Transition::on`].
pub trait Transition: Sized {
    fn on(self, event: NotificationEvent) -> Result<Self, IllegalTransition>;
}

impl Transition for NotificationStatus {
    fn on(self, event: NotificationEvent) -> Result<Self, IllegalTransition> {
        use NotificationEvent as E;
        use NotificationStatus as S;
        match (self, event) {
            (S::New | S::Error, E::Start) => Ok(S::Running),
            (S::Running, E::Finish) => Ok(S::Finished),
            (S::Running, E::Interrupt) => Ok(S::Error),
            (S::Running | S::Error, E::Fail) => Ok(S::Failed),
            (S::New | S::Running, E::Ignore) => Ok(S::Ignored),
            (S::New | S::Running | S::Error, E::Expire) => Ok(S::Failed),
            (S::Failed, E::Reopen) => Ok(S::Error),
            (from, event) => Err(IllegalTransition {
                from: from.as_str(),
                event: event.as_str(),
            }),
        }
    }
}

/// The status a report is stored with, as the intake rules decided.
pub fn at_intake(verdict: &IntakeVerdict) -> NotificationStatus {
    match verdict {
        IntakeVerdict::Accept | IntakeVerdict::AcceptNoted { .. } => NotificationStatus::New,
        IntakeVerdict::Ignore { .. } => NotificationStatus::Ignored,
    }
}

/// What the intake rules decided about a report they let in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntakeVerdict {
    /// Stored to be recovered.
    Accept,
    /// Stored to be recovered, with a note for its message (for example:
    /// its `generated_time` was too far ahead and is the received time).
    AcceptNoted { note: String },
    /// Stored, but nothing is to be done (for example: its segment is
    /// disabled); the reason becomes its message.
    Ignore { reason: String },
}

impl IntakeVerdict {
    /// The message the notification is stored with.
    pub fn message(&self) -> Option<&str> {
        match self {
            Self::Accept => None,
            Self::AcceptNoted { note } => Some(note),
            Self::Ignore { reason } => Some(reason),
        }
    }
}

/// What can happen to a notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotificationEvent {
    /// A replica claims it and starts a recovery run.
    Start,
    /// The run ended and every vmove succeeded or was ignored.
    Finish,
    /// The run ended without a verdict; another run will follow.
    Interrupt,
    /// The run failed and no other run will follow.
    Fail,
    /// Nothing to do by policy (a disabled segment, an unfenced host).
    Ignore,
    /// Too old to be worth recovering any more.
    Expire,
    /// An operator asks to recover a failed notification again
    /// (`RetryNotification`): the one way out of a terminal status.
    Reopen,
}

impl NotificationEvent {
    pub const ALL: [NotificationEvent; 7] = [
        Self::Start,
        Self::Finish,
        Self::Interrupt,
        Self::Fail,
        Self::Ignore,
        Self::Expire,
        Self::Reopen,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Finish => "finish",
            Self::Interrupt => "interrupt",
            Self::Fail => "fail",
            Self::Ignore => "ignore",
            Self::Expire => "expire",
            Self::Reopen => "reopen",
        }
    }
}

/// What can happen to a vmove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VMoveEvent {
    /// The engine started working on the instance.
    Start { at: DateTime<Utc> },
    /// The instance is running (or stopped, as before) on `dest_host`.
    /// `started` is when the engine began, should its start have gone
    /// unrecorded; `note` says what else happened.
    Succeed {
        at: DateTime<Utc>,
        started: Option<DateTime<Utc>>,
        dest_host: Option<String>,
        note: Option<String>,
    },
    /// The instance could not be recovered; `retryable` when the cause may
    /// pass.
    Fail {
        at: DateTime<Utc>,
        started: Option<DateTime<Utc>>,
        message: String,
        retryable: bool,
    },
    /// The instance needs no recovery.
    Ignore {
        at: DateTime<Utc>,
        started: Option<DateTime<Utc>>,
        message: String,
    },
    /// A new run will recover the instance again: one without a result, or
    /// failed for a passing reason.
    Retry,
    /// An operator asks to recover a failed instance again, whatever failed
    /// it.
    Reopen,
    /// What Nova says of the instance, read by a reconcile run: it replaces
    /// what the engine last saw (unless the vmove succeeded or was ignored
    /// already).
    Reconcile {
        at: DateTime<Utc>,
        result: Reconciled,
    },
}

/// Joins Nova's truth about a failed instance and the failure the
/// recovery last ran into, in a reconciled vmove's message.
const LAST_FAILURE: &str = "; the recovery last failed at: ";

/// An instance's truth as a reconcile run read it from Nova.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reconciled {
    /// Moved and settled on `dest_host`.
    Recovered {
        dest_host: Option<String>,
        note: String,
    },
    /// Not recovered: what Nova shows; `retryable` when Nova could not be
    /// read.
    NotRecovered { message: String, retryable: bool },
    /// Deleted.
    Gone { message: String },
}

impl VMoveEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Start { .. } => "start",
            Self::Succeed { .. } => "succeed",
            Self::Fail { .. } => "fail",
            Self::Ignore { .. } => "ignore",
            Self::Retry => "retry",
            Self::Reopen => "reopen",
            Self::Reconcile { .. } => "reconcile",
        }
    }
}

/// The status-bearing part of a vmove: its status and the fields that must
/// change together with it. Private fields: [`VMoveRecord::apply`] is the
/// only way to change them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VMoveRecord {
    status: VMoveStatus,
    start_time: Option<DateTime<Utc>>,
    end_time: Option<DateTime<Utc>>,
    message: Option<String>,
    dest_host: Option<String>,
    /// Runs that have recovered (or tried to recover) this instance.
    attempts: u32,
    /// A failure for a passing reason: worth another run.
    retryable: bool,
}

impl VMoveRecord {
    /// A vmove as the plan of a run creates it.
    pub fn planned() -> Self {
        Self {
            status: VMoveStatus::Pending,
            start_time: None,
            end_time: None,
            message: None,
            dest_host: None,
            attempts: 1,
            retryable: false,
        }
    }

    /// A record as it was persisted (the store reads it back).
    pub fn restore(
        status: VMoveStatus,
        start_time: Option<DateTime<Utc>>,
        end_time: Option<DateTime<Utc>>,
        message: Option<String>,
        dest_host: Option<String>,
        attempts: u32,
        retryable: bool,
    ) -> Self {
        Self {
            status,
            start_time,
            end_time,
            message,
            dest_host,
            attempts,
            retryable: retryable && status == VMoveStatus::Failed,
        }
    }

    pub fn status(&self) -> VMoveStatus {
        self.status
    }

    pub fn start_time(&self) -> Option<DateTime<Utc>> {
        self.start_time
    }

    pub fn end_time(&self) -> Option<DateTime<Utc>> {
        self.end_time
    }

    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    pub fn dest_host(&self) -> Option<&str> {
        self.dest_host.as_deref()
    }

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Failed for a passing reason.
    pub fn retryable(&self) -> bool {
        self.retryable
    }

    /// Applies `event`, or rejects it and leaves the record unchanged.
    pub fn apply(&mut self, event: VMoveEvent) -> Result<(), IllegalTransition> {
        use VMoveStatus as S;
        let illegal = IllegalTransition {
            from: self.status.as_str(),
            event: event.name(),
        };
        match (self.status, event) {
            (S::Pending, VMoveEvent::Start { at }) => {
                self.status = S::Ongoing;
                self.start_time = Some(at);
                self.end_time = None;
                self.message = None;
            }
            (
                S::Ongoing,
                VMoveEvent::Succeed {
                    at,
                    started,
                    dest_host,
                    note,
                },
            ) => self.succeed(at, started, dest_host, note),
            (
                S::Pending | S::Ongoing,
                VMoveEvent::Fail {
                    at,
                    started,
                    message,
                    retryable,
                },
            ) => self.fail(at, started, message, retryable),
            (
                S::Pending | S::Ongoing,
                VMoveEvent::Ignore {
                    at,
                    started,
                    message,
                },
            ) => self.ignore(at, started, message),
            (S::Pending | S::Ongoing, VMoveEvent::Retry) | (S::Failed, VMoveEvent::Reopen) => {
                self.reset()
            }
            (S::Failed, VMoveEvent::Retry) if self.retryable => self.reset(),
            (S::Pending | S::Ongoing | S::Failed, VMoveEvent::Reconcile { at, result }) => {
                match result {
                    Reconciled::Recovered { dest_host, note } => {
                        self.succeed(at, None, dest_host, Some(note))
                    }
                    Reconciled::NotRecovered { message, retryable } => {
                        // Nova's truth first; what the recovery last ran
                        // into stays said (once, however often reconciled).
                        let message = match (self.status, self.message.as_deref()) {
                            (S::Failed, Some(previous)) => {
                                let cause = previous
                                    .split_once(LAST_FAILURE)
                                    .map_or(previous, |(_, cause)| cause);
                                format!("{message}{LAST_FAILURE}{cause}")
                            }
                            _ => message,
                        };
                        self.fail(at, None, message, retryable)
                    }
                    Reconciled::Gone { message } => self.ignore(at, None, message),
                }
            }
            _ => return Err(illegal),
        }
        Ok(())
    }

    fn succeed(
        &mut self,
        at: DateTime<Utc>,
        started: Option<DateTime<Utc>>,
        dest_host: Option<String>,
        note: Option<String>,
    ) {
        self.status = VMoveStatus::Succeeded;
        self.start_time = self.start_time.or(started);
        self.end_time = Some(at);
        self.message = note.filter(|n| !n.trim().is_empty());
        self.retryable = false;
        if dest_host.is_some() {
            self.dest_host = dest_host;
        }
    }

    fn fail(
        &mut self,
        at: DateTime<Utc>,
        started: Option<DateTime<Utc>>,
        message: String,
        retryable: bool,
    ) {
        self.status = VMoveStatus::Failed;
        self.start_time = self.start_time.or(started);
        self.end_time = Some(at);
        self.message = Some(non_empty(message, "failed without a reason"));
        self.retryable = retryable;
    }

    fn ignore(&mut self, at: DateTime<Utc>, started: Option<DateTime<Utc>>, message: String) {
        self.status = VMoveStatus::Ignored;
        self.start_time = self.start_time.or(started);
        self.end_time = Some(at);
        self.message = Some(non_empty(message, "ignored"));
        self.retryable = false;
    }

    fn reset(&mut self) {
        self.status = VMoveStatus::Pending;
        self.start_time = None;
        self.end_time = None;
        self.message = None;
        self.retryable = false;
        self.attempts += 1;
    }
}

fn non_empty(message: String, fallback: &str) -> String {
    if message.trim().is_empty() {
        fallback.to_owned()
    } else {
        message
    }
}

/// A transition the state machines do not allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot {event} a {from} record")]
pub struct IllegalTransition {
    pub from: &'static str,
    pub event: &'static str,
}

/// How a recovery run ended, as the API saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// The engine reported `Done`.
    Done(RunOutcome),
    /// The stream ended without `Done`: the engine crashed, the network was
    /// cut, the run timed out, or the engine was unreachable.
    Lost { reason: String },
}

pub use instanceha_proto::run::RunOutcome;

/// One vmove as the resolution sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VMoveView<'a, Id> {
    pub id: Id,
    pub instance: &'a str,
    pub status: VMoveStatus,
    pub message: Option<&'a str>,
    /// Failed for a passing reason.
    pub retryable: bool,
}

impl<Id> VMoveView<'_, Id> {
    fn unresolved(&self) -> bool {
        !self.status.is_resolved()
    }

    fn failed(&self) -> bool {
        self.status == VMoveStatus::Failed
    }

    /// Failed for a passing reason: another run may recover it.
    fn failed_transiently(&self) -> bool {
        self.failed() && self.retryable
    }
}

/// Reconcile runs allowed beyond `max_attempts`: the final verdict always
/// gets its look at Nova, and a lost reconcile run another chance.
pub const RECONCILE_ATTEMPTS: u32 = 3;

/// What may still follow a run: retries while the retry window is open and
/// attempts remain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBudget {
    /// The run that ended (1 for the first).
    pub attempt: u32,
    pub max_attempts: u32,
    /// The notification's retry window has not passed.
    pub window_open: bool,
}

impl RetryBudget {
    fn may_retry(&self) -> bool {
        self.window_open && self.attempt < self.max_attempts
    }

    fn may_reconcile(&self) -> bool {
        self.attempt < self.max_attempts.saturating_add(RECONCILE_ATTEMPTS)
    }
}

/// What to do with a notification whose run has ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution<Id> {
    /// Every vmove succeeded or was ignored.
    Finished { message: String },
    /// Nothing needed doing.
    Ignored { message: String },
    /// Another recovery run follows: the notification goes to `error`, and
    /// these vmoves (without a result, or failed for a passing reason) go
    /// back to `pending` for it (empty: plan again).
    Retry { message: String, retry: Vec<Id> },
    /// Before the verdict, a reconcile run reads these instances' truth from
    /// Nova: the notification goes to `error`, the vmoves stay as they are.
    Reconcile { message: String, instances: Vec<Id> },
    /// The notification fails; these unresolved vmoves fail with it.
    Failed {
        message: String,
        fail: Vec<(Id, String)>,
    },
}

impl<Id> Resolution<Id> {
    /// The notification status this resolution leads to.
    pub fn status(&self) -> NotificationStatus {
        match self {
            Self::Finished { .. } => NotificationStatus::Finished,
            Self::Ignored { .. } => NotificationStatus::Ignored,
            Self::Retry { .. } | Self::Reconcile { .. } => NotificationStatus::Error,
            Self::Failed { .. } => NotificationStatus::Failed,
        }
    }

    /// The event that takes a running notification there.
    pub fn event(&self) -> NotificationEvent {
        match self {
            Self::Finished { .. } => NotificationEvent::Finish,
            Self::Ignored { .. } => NotificationEvent::Ignore,
            Self::Retry { .. } | Self::Reconcile { .. } => NotificationEvent::Interrupt,
            Self::Failed { .. } => NotificationEvent::Fail,
        }
    }

    /// The kind of the run that follows, if one does.
    pub fn next_run(&self) -> Option<RunKind> {
        match self {
            Self::Retry { .. } => Some(RunKind::Recover),
            Self::Reconcile { .. } => Some(RunKind::Reconcile),
            Self::Finished { .. } | Self::Ignored { .. } | Self::Failed { .. } => None,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Self::Finished { message }
            | Self::Ignored { message }
            | Self::Retry { message, .. }
            | Self::Reconcile { message, .. }
            | Self::Failed { message, .. } => message,
        }
    }
}

/// Decides what becomes of a running notification whose run of `kind`
/// ended with `end`, given its vmoves as persisted and what `budget` still
/// allows. The only function that picks a final status.
///
/// * A recovery run's instances without a result, or failed for a passing
///   reason, are retried while the budget allows; then a reconcile run
///   reads their truth from Nova (and that of the other failed ones)
///   before any verdict. A failure the engine confirmed against Nova's
///   state is final.
/// * A reconcile run's verdicts are final; an instance it could not read
///   (Nova unavailable, the run lost) is reconciled again a few times,
///   then failed saying so.
/// * Release-lock runs change no status and are not resolved here.
pub fn resolve_run<Id: Clone>(
    end: &RunEnd,
    kind: RunKind,
    vmoves: &[VMoveView<'_, Id>],
    budget: RetryBudget,
) -> Resolution<Id> {
    let why = match end {
        RunEnd::Lost { reason } => format!("the engine stopped reporting: {reason}"),
        RunEnd::Done(RunOutcome::Completed { .. }) => {
            "the engine reported the run complete without their results".to_owned()
        }
        RunEnd::Done(RunOutcome::Failed { message, .. }) => {
            format!("the recovery workflow failed: {message}")
        }
        RunEnd::Done(RunOutcome::Ignored { message }) => {
            format!("the engine ignored the notification: {message}")
        }
        RunEnd::Done(RunOutcome::Cancelled { message }) => {
            format!("the recovery was cancelled: {message}")
        }
    };
    let cancelled = matches!(end, RunEnd::Done(RunOutcome::Cancelled { .. }));
    let ids = |keep: &dyn Fn(&VMoveView<'_, Id>) -> bool| -> Vec<Id> {
        vmoves
            .iter()
            .filter(|v| keep(v))
            .map(|v| v.id.clone())
            .collect()
    };
    let unresolved = vmoves.iter().filter(|v| v.unresolved()).count();
    let transient = vmoves.iter().filter(|v| v.failed_transiently()).count();
    let failed: Vec<&VMoveView<'_, Id>> = vmoves.iter().filter(|v| v.failed()).collect();
    let total = vmoves.len();
    let give_up = |per_instance: String| {
        let mut message = format!(
            "{} of {total} instances were not recovered: {per_instance}",
            unresolved + failed.len(),
        );
        append_failures(&mut message, &failed);
        Resolution::Failed {
            message,
            fail: vmoves
                .iter()
                .filter(|v| v.unresolved())
                .map(|v| (v.id.clone(), per_instance.clone()))
                .collect(),
        }
    };

    if kind == RunKind::Reconcile {
        // Nova's word is final, once it could be read.
        if unresolved + transient > 0 {
            if !cancelled && budget.may_reconcile() {
                return Resolution::Reconcile {
                    message: format!(
                        "{} of {total} instances could not be confirmed with nova ({why}); reading them again",
                        unresolved + transient
                    ),
                    instances: ids(&|v| v.unresolved() || v.failed_transiently()),
                };
            }
            return give_up(format!("nova's state could not be confirmed: {why}"));
        }
        if !failed.is_empty() {
            let mut message = format!("{} of {total} instances were not recovered", failed.len());
            append_failures(&mut message, &failed);
            return Resolution::Failed {
                message,
                fail: Vec::new(),
            };
        }
        return Resolution::Finished {
            message: finished_message("confirmed with nova", vmoves),
        };
    }

    if unresolved + transient > 0 {
        if !cancelled && budget.may_retry() {
            return Resolution::Retry {
                message: format!(
                    "{} of {total} instances are not recovered yet ({why}); retrying (attempt {})",
                    unresolved + transient,
                    budget.attempt + 1
                ),
                retry: ids(&|v| v.unresolved() || v.failed_transiently()),
            };
        }
        if budget.may_reconcile() {
            return Resolution::Reconcile {
                message: format!(
                    "{} of {total} instances are not recovered ({why}); reading what nova says before the verdict",
                    unresolved + failed.len()
                ),
                instances: ids(&|v| v.unresolved() || v.failed()),
            };
        }
        return give_up(if cancelled {
            why.clone()
        } else {
            format!("no result after {} attempt(s): {why}", budget.attempt)
        });
    }

    if !failed.is_empty() {
        let mut message = format!("{} of {total} instances were not recovered", failed.len());
        append_failures(&mut message, &failed);
        return Resolution::Failed {
            message,
            fail: Vec::new(),
        };
    }

    // Every vmove (if any) succeeded or was ignored.
    match end {
        RunEnd::Done(RunOutcome::Completed { message }) => Resolution::Finished {
            message: finished_message(message, vmoves),
        },
        RunEnd::Done(RunOutcome::Ignored { message }) if vmoves.is_empty() => Resolution::Ignored {
            message: message.clone(),
        },
        RunEnd::Done(RunOutcome::Ignored { message }) => Resolution::Finished {
            message: finished_message(message, vmoves),
        },
        RunEnd::Done(RunOutcome::Failed { message, retryable }) => {
            if *retryable && budget.may_retry() {
                Resolution::Retry {
                    message: format!(
                        "the recovery workflow failed: {message}; retrying (attempt {})",
                        budget.attempt + 1
                    ),
                    retry: Vec::new(),
                }
            } else {
                Resolution::Failed {
                    message: format!("the recovery workflow failed: {message}"),
                    fail: Vec::new(),
                }
            }
        }
        RunEnd::Done(RunOutcome::Cancelled { .. }) => Resolution::Failed {
            message: why,
            fail: Vec::new(),
        },
        RunEnd::Lost { reason } if vmoves.is_empty() => {
            if budget.may_retry() {
                Resolution::Retry {
                    message: format!(
                        "the engine stopped reporting before a plan: {reason}; retrying (attempt {})",
                        budget.attempt + 1
                    ),
                    retry: Vec::new(),
                }
            } else {
                Resolution::Failed {
                    message: format!(
                        "no recovery after {} attempt(s): the engine stopped reporting: {reason}",
                        budget.attempt
                    ),
                    fail: Vec::new(),
                }
            }
        }
        // Every announced instance has its result; only the engine's closing
        // word is missing.
        RunEnd::Lost { .. } => Resolution::Finished {
            message: finished_message("", vmoves),
        },
    }
}

/// The message of a finished notification: the engine's word and what
/// happened to the instances, recovered and ignored counted apart (an
/// instance deleted meanwhile was not "recovered").
fn finished_message<Id>(engine_message: &str, vmoves: &[VMoveView<'_, Id>]) -> String {
    let recovered = vmoves
        .iter()
        .filter(|v| v.status == VMoveStatus::Succeeded)
        .count();
    let ignored = vmoves.len() - recovered;
    let instances = match (recovered, ignored) {
        (0, 0) => String::new(),
        (n, 0) => format!("{n} instance(s) recovered"),
        (0, i) => format!("{i} instance(s) ignored"),
        (n, i) => format!("{n} instance(s) recovered, {i} ignored"),
    };
    match (engine_message.trim(), instances.as_str()) {
        ("", "") => "nothing to recover".to_owned(),
        ("", counts) => counts.to_owned(),
        (m, "") => m.to_owned(),
        (m, counts) => format!("{m} ({counts})"),
    }
}

fn append_failures<Id>(message: &mut String, failed: &[&VMoveView<'_, Id>]) {
    const SHOWN: usize = 3;
    for (i, vmove) in failed.iter().take(SHOWN).enumerate() {
        message.push_str(if i == 0 { ": " } else { "; " });
        message.push_str(vmove.instance);
        if let Some(reason) = vmove.message {
            message.push_str(": ");
            message.push_str(reason);
        }
    }
    if failed.len() > SHOWN {
        message.push_str(&format!("; and {} more", failed.len() - SHOWN));
    }
}

#[cfg(test)]
mod tests;

/// The clause a notification's message ends with while it holds locks.
const LOCKS_HELD: &str =
    " instance(s) still locked by this notification, released as soon as nova answers: ";
/// How many of the instances still locked a message names.
const LOCKS_NAMED: usize = 10;

/// `message` saying which instances the notification still holds locked:
/// an earlier such clause is replaced; with none held, it says the locks
/// were released (when it had said otherwise).
pub fn with_locks_held(message: &str, held: &[String]) -> String {
    let (base, had) = match message.find(LOCKS_HELD) {
        Some(at) => {
            // Back to the "; N" before the clause.
            let start = message[..at].rfind("; ").unwrap_or(at);
            (&message[..start], true)
        }
        None => (message, false),
    };
    if held.is_empty() {
        return if had {
            format!("{base}; every lock it took is released")
        } else {
            base.to_owned()
        };
    }
    let mut names = held
        .iter()
        .take(LOCKS_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if held.len() > LOCKS_NAMED {
        names.push_str(&format!(" and {} more", held.len() - LOCKS_NAMED));
    }
    format!("{base}; {}{LOCKS_HELD}{names}", held.len())
}
