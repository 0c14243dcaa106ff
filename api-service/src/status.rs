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
//! * when a run ends with unresolved vmoves, they are retried while attempts
//!   remain, otherwise failed with a message saying why.

pub mod ledger;

use std::fmt;

use chrono::{DateTime, Utc};

/// new → running → finished | failed | ignored; running → error → running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotificationStatus {
    New,
    Running,
    Error,
    Failed,
    Ignored,
    Finished,
}

impl NotificationStatus {
    pub const ALL: [NotificationStatus; 6] = [
        Self::New,
        Self::Running,
        Self::Error,
        Self::Failed,
        Self::Ignored,
        Self::Finished,
    ];

    /// `finished`, `failed` and `ignored` are final: nothing leaves them.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Failed | Self::Ignored | Self::Finished)
    }

    /// Unfinished notifications block changes to their segment and hosts.
    pub fn is_unfinished(self) -> bool {
        !self.is_terminal()
    }

    /// Masakari's lowercase name, also stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Running => "running",
            Self::Error => "error",
            Self::Failed => "failed",
            Self::Ignored => "ignored",
            Self::Finished => "finished",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }

    /// The statuses that count as unfinished.
    pub const UNFINISHED: [NotificationStatus; 3] = [Self::New, Self::Running, Self::Error];

    /// The status a report is stored with, as the intake rules decided.
    pub fn at_intake(verdict: &IntakeVerdict) -> Self {
        match verdict {
            IntakeVerdict::Accept => Self::New,
            IntakeVerdict::Ignore { .. } => Self::Ignored,
        }
    }

    /// The status after `event`, or why the transition is illegal.
    pub fn on(self, event: NotificationEvent) -> Result<Self, IllegalTransition> {
        use NotificationEvent as E;
        use NotificationStatus as S;
        match (self, event) {
            (S::New | S::Error, E::Start) => Ok(S::Running),
            (S::Running, E::Finish) => Ok(S::Finished),
            (S::Running, E::Interrupt) => Ok(S::Error),
            (S::Running | S::Error, E::Fail) => Ok(S::Failed),
            (S::New | S::Running, E::Ignore) => Ok(S::Ignored),
            (S::New | S::Running | S::Error, E::Expire) => Ok(S::Failed),
            (from, event) => Err(IllegalTransition {
                from: from.as_str(),
                event: event.as_str(),
            }),
        }
    }
}

impl fmt::Display for NotificationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the intake rules decided about a report they let in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntakeVerdict {
    /// Stored to be recovered.
    Accept,
    /// Stored, but nothing is to be done (for example: its segment is
    /// disabled); the reason becomes its message.
    Ignore { reason: String },
}

impl IntakeVerdict {
    /// The message the notification is stored with.
    pub fn message(&self) -> Option<&str> {
        match self {
            Self::Accept => None,
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
}

impl NotificationEvent {
    pub const ALL: [NotificationEvent; 6] = [
        Self::Start,
        Self::Finish,
        Self::Interrupt,
        Self::Fail,
        Self::Ignore,
        Self::Expire,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Finish => "finish",
            Self::Interrupt => "interrupt",
            Self::Fail => "fail",
            Self::Ignore => "ignore",
            Self::Expire => "expire",
        }
    }
}

/// pending → ongoing → succeeded | failed | ignored; a retry puts an
/// unresolved vmove back to pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VMoveStatus {
    Pending,
    Ongoing,
    Succeeded,
    Failed,
    Ignored,
}

impl VMoveStatus {
    pub const ALL: [VMoveStatus; 5] = [
        Self::Pending,
        Self::Ongoing,
        Self::Succeeded,
        Self::Failed,
        Self::Ignored,
    ];

    /// `succeeded`, `failed` and `ignored`: the instance has its result.
    pub fn is_resolved(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Ignored)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Ongoing => "ongoing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Ignored => "ignored",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }

    /// The statuses of an instance still without a result.
    pub const UNRESOLVED: [VMoveStatus; 2] = [Self::Pending, Self::Ongoing];
}

impl fmt::Display for VMoveStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What can happen to a vmove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VMoveEvent {
    /// The engine started working on the instance.
    Start { at: DateTime<Utc> },
    /// The instance is running (or stopped, as before) on `dest_host`.
    /// `started` is when the engine began, should its start have gone
    /// unrecorded.
    Succeed {
        at: DateTime<Utc>,
        started: Option<DateTime<Utc>>,
        dest_host: Option<String>,
    },
    /// The instance could not be recovered.
    Fail {
        at: DateTime<Utc>,
        started: Option<DateTime<Utc>>,
        message: String,
    },
    /// The instance needs no recovery.
    Ignore {
        at: DateTime<Utc>,
        started: Option<DateTime<Utc>>,
        message: String,
    },
    /// A new run will recover the instance again.
    Retry,
}

impl VMoveEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Start { .. } => "start",
            Self::Succeed { .. } => "succeed",
            Self::Fail { .. } => "fail",
            Self::Ignore { .. } => "ignore",
            Self::Retry => "retry",
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
    ) -> Self {
        Self {
            status,
            start_time,
            end_time,
            message,
            dest_host,
            attempts,
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
                },
            ) => {
                self.status = S::Succeeded;
                self.start_time = self.start_time.or(started);
                self.end_time = Some(at);
                self.message = None;
                if dest_host.is_some() {
                    self.dest_host = dest_host;
                }
            }
            (
                S::Pending | S::Ongoing,
                VMoveEvent::Fail {
                    at,
                    started,
                    message,
                },
            ) => {
                self.status = S::Failed;
                self.start_time = self.start_time.or(started);
                self.end_time = Some(at);
                self.message = Some(non_empty(message, "failed without a reason"));
            }
            (
                S::Pending | S::Ongoing,
                VMoveEvent::Ignore {
                    at,
                    started,
                    message,
                },
            ) => {
                self.status = S::Ignored;
                self.start_time = self.start_time.or(started);
                self.end_time = Some(at);
                self.message = Some(non_empty(message, "ignored"));
            }
            (S::Pending | S::Ongoing, VMoveEvent::Retry) => {
                self.status = S::Pending;
                self.start_time = None;
                self.end_time = None;
                self.message = None;
                self.attempts += 1;
            }
            _ => return Err(illegal),
        }
        Ok(())
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

/// The engine's own verdict on its workflow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// The workflow ran; the vmoves decide.
    Completed { message: String },
    /// The workflow failed around the instances.
    Failed { message: String, retryable: bool },
    /// Nothing to do by policy.
    Ignored { message: String },
    /// The run was cancelled.
    Cancelled { message: String },
}

/// One vmove as the resolution sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VMoveView<'a, Id> {
    pub id: Id,
    pub instance: &'a str,
    pub status: VMoveStatus,
    pub message: Option<&'a str>,
}

/// What to do with a notification whose run has ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution<Id> {
    /// Every vmove succeeded or was ignored.
    Finished { message: String },
    /// Nothing needed doing.
    Ignored { message: String },
    /// Another run follows: the notification goes to `error`, and these
    /// unresolved vmoves go back to `pending` for it (empty: plan again).
    Retry { message: String, retry: Vec<Id> },
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
            Self::Retry { .. } => NotificationStatus::Error,
            Self::Failed { .. } => NotificationStatus::Failed,
        }
    }

    /// The event that takes a running notification there.
    pub fn event(&self) -> NotificationEvent {
        match self {
            Self::Finished { .. } => NotificationEvent::Finish,
            Self::Ignored { .. } => NotificationEvent::Ignore,
            Self::Retry { .. } => NotificationEvent::Interrupt,
            Self::Failed { .. } => NotificationEvent::Fail,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Self::Finished { message }
            | Self::Ignored { message }
            | Self::Retry { message, .. }
            | Self::Failed { message, .. } => message,
        }
    }
}

/// Decides what becomes of a running notification whose run (number
/// `attempt` of at most `max_attempts`) ended with `end`, given its vmoves as
/// persisted. The only function that picks a final status.
pub fn resolve_final_status<Id: Clone>(
    end: &RunEnd,
    vmoves: &[VMoveView<'_, Id>],
    attempt: u32,
    max_attempts: u32,
) -> Resolution<Id> {
    let attempts_left = attempt < max_attempts;
    let unresolved: Vec<&VMoveView<'_, Id>> =
        vmoves.iter().filter(|v| !v.status.is_resolved()).collect();
    let failed: Vec<&VMoveView<'_, Id>> = vmoves
        .iter()
        .filter(|v| v.status == VMoveStatus::Failed)
        .collect();

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

    if !unresolved.is_empty() {
        if attempts_left && !cancelled {
            return Resolution::Retry {
                message: format!(
                    "{} of {} instances have no result ({why}); retrying (attempt {} of {max_attempts})",
                    unresolved.len(),
                    vmoves.len(),
                    attempt + 1
                ),
                retry: unresolved.iter().map(|v| v.id.clone()).collect(),
            };
        }
        let per_instance = if cancelled {
            why.clone()
        } else {
            format!("no result after {attempt} attempt(s): {why}")
        };
        let mut message = format!(
            "{} of {} instances were not recovered: {per_instance}",
            unresolved.len() + failed.len(),
            vmoves.len()
        );
        append_failures(&mut message, &failed);
        return Resolution::Failed {
            message,
            fail: unresolved
                .iter()
                .map(|v| (v.id.clone(), per_instance.clone()))
                .collect(),
        };
    }

    if !failed.is_empty() {
        let mut message = format!(
            "{} of {} instances were not recovered",
            failed.len(),
            vmoves.len()
        );
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
            if *retryable && attempts_left {
                Resolution::Retry {
                    message: format!(
                        "the recovery workflow failed: {message}; retrying (attempt {} of {max_attempts})",
                        attempt + 1
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
            if attempts_left {
                Resolution::Retry {
                    message: format!(
                        "the engine stopped reporting before a plan: {reason}; retrying (attempt {} of {max_attempts})",
                        attempt + 1
                    ),
                    retry: Vec::new(),
                }
            } else {
                Resolution::Failed {
                    message: format!(
                        "no recovery after {attempt} attempt(s): the engine stopped reporting: {reason}"
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
