//! The state machines of notifications and vmoves: which status changes
//! are legal. Every status change in the API goes through
//! [`Transition::on`] (a notification) or [`VMoveRecord::apply`] (a vmove);
//! illegal transitions are rejected here and nowhere else. Which change
//! applies when — a run's end, a retry, expiry, an operator's reopening —
//! is the run lifecycle's to decide (`crate::lifecycle`), and only its
//! resolution picks a final status, upholding the invariants of the design
//! brief:
//!
//! * a notification is `finished` only if every vmove is `succeeded` or
//!   `ignored`;
//! * a terminal notification has no vmove `pending` or `ongoing`, and every
//!   failed vmove has an end time and a message;
//! * before any final verdict on instances without a result or failed for
//!   a passing reason, their truth is read from Nova by a reconcile run,
//!   and an instance Nova has moved and settled is `succeeded` whatever the
//!   engine saw.

pub mod ledger;

use chrono::{DateTime, Utc};

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

#[cfg(test)]
mod tests;
