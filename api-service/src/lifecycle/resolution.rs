//! What a run's end means: given how it ended, its kind, the notification's
//! vmoves as persisted and what the budget still allows, the one decision
//! that picks a final status, a retry or a reconcile, with the message that
//! says why in Nova's terms.

use crate::domain::RunKind;
use crate::status::{NotificationEvent, NotificationStatus, VMoveStatus};

pub use instanceha_proto::run::RunOutcome;

/// How a recovery run ended, as the API saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// The engine reported `Done`.
    Done(RunOutcome),
    /// The stream ended without `Done`; `cause` says whose failure it was.
    Lost { reason: String, cause: LostCause },
}

impl RunEnd {
    /// A run lost with its engine (it crashed, the stream broke, or it
    /// closed the stream without `Done`).
    pub fn engine_lost(reason: impl Into<String>) -> Self {
        Self::Lost {
            reason: reason.into(),
            cause: LostCause::Engine,
        }
    }
}

/// Whose failure lost a run: it decides when the next one may start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostCause {
    /// The engine went away: the next run goes as soon as an engine
    /// answers its health check, not after the backoff meant for Nova.
    Engine,
    /// The API replica running it stopped: the next run goes at once.
    Replica,
    /// The API refused what the engine sent (a protocol error): the next
    /// run waits the backoff, as for any failure that may repeat.
    Refused,
}

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

/// What may still follow a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBudget {
    /// The run that ended (1 for the first).
    pub attempt: u32,
    pub max_attempts: u32,
    /// The notification's retry window has not passed: recoveries may run.
    pub window_open: bool,
    /// The verdict deadline (the retry window plus `dispatch.verdict_grace`)
    /// has not passed, and will not have when the next reconcile run is
    /// due: a reconcile may still read Nova. Reconciles are bounded by this
    /// time alone, never by a count of runs: a count ends a verdict sooner
    /// or later than the deadline operators set, depending on how long each
    /// run takes.
    pub verdict_open: bool,
}

impl RetryBudget {
    fn may_retry(&self) -> bool {
        self.window_open && self.attempt < self.max_attempts
    }

    fn may_reconcile(&self) -> bool {
        self.verdict_open
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

/// Why instances were left without a result, in a few words.
fn why_without_result(end: &RunEnd) -> String {
    match end {
        RunEnd::Lost { reason, .. } => format!("the engine stopped reporting: {reason}"),
        RunEnd::Done(RunOutcome::Completed { .. }) => {
            "the engine closed the run without their results".to_owned()
        }
        RunEnd::Done(RunOutcome::Failed { message, .. }) => {
            format!("the recovery workflow failed: {message}")
        }
        RunEnd::Done(RunOutcome::Ignored { message }) => {
            format!("the engine ignored the notification: {message}")
        }
        RunEnd::Done(RunOutcome::Cancelled { message }) => {
            format!("the run was cancelled: {message}")
        }
    }
}

/// The instances of a run that have no verdict yet, said as what happened
/// to them: those without a result and why, those that failed for a
/// passing reason and what they ran into.
struct Open<'v, 'a, Id> {
    without_result: Vec<&'v VMoveView<'a, Id>>,
    failed_transiently: Vec<&'v VMoveView<'a, Id>>,
}

impl<'v, 'a, Id> Open<'v, 'a, Id> {
    fn of(vmoves: &'v [VMoveView<'a, Id>]) -> Self {
        Self {
            without_result: vmoves.iter().filter(|v| v.unresolved()).collect(),
            failed_transiently: vmoves.iter().filter(|v| v.failed_transiently()).collect(),
        }
    }

    fn count(&self) -> usize {
        self.without_result.len() + self.failed_transiently.len()
    }

    /// "2 of 10 instances had no result (why); 1 failed for a passing
    /// reason: web-1: ..."
    fn describe(&self, total: usize, end: &RunEnd) -> String {
        let mut parts = Vec::new();
        if !self.without_result.is_empty() {
            parts.push(format!(
                "{} of {total} instance(s) had no result ({})",
                self.without_result.len(),
                why_without_result(end)
            ));
        }
        if !self.failed_transiently.is_empty() {
            let mut text = format!(
                "{} of {total} instance(s) failed for a passing reason",
                self.failed_transiently.len()
            );
            append_failures(&mut text, &self.failed_transiently);
            parts.push(text);
        }
        parts.join("; ")
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
///   (Nova unavailable, the run lost) is reconciled again, after the
///   retry backoff, until the verdict deadline (`verdict_grace` after the
///   last recovery or the window's end: a time, never a count of runs),
///   then failed saying so.
/// * Release-lock runs change no status and are not resolved here.
pub fn resolve<Id: Clone>(
    end: &RunEnd,
    kind: RunKind,
    vmoves: &[VMoveView<'_, Id>],
    budget: RetryBudget,
) -> Resolution<Id> {
    let open = Open::of(vmoves);
    let failed: Vec<&VMoveView<'_, Id>> = vmoves.iter().filter(|v| v.failed()).collect();
    let ended = Ended {
        end,
        vmoves,
        open: &open,
        failed: &failed,
        budget,
    };
    if kind == RunKind::Reconcile {
        return ended.after_reconcile();
    }
    if open.count() > 0 {
        return ended.with_open_instances();
    }
    if !failed.is_empty() {
        return verdict(vmoves, &failed, "");
    }
    // Every vmove (if any) succeeded or was ignored.
    without_open_instances(end, vmoves, budget)
}

/// A run's end with what resolving it looks at.
struct Ended<'e, 'v, 'a, Id> {
    end: &'e RunEnd,
    vmoves: &'v [VMoveView<'a, Id>],
    open: &'e Open<'v, 'a, Id>,
    failed: &'e [&'v VMoveView<'a, Id>],
    budget: RetryBudget,
}

impl<Id: Clone> Ended<'_, '_, '_, Id> {
    fn cancelled(&self) -> bool {
        matches!(self.end, RunEnd::Done(RunOutcome::Cancelled { .. }))
    }

    fn ids(&self, keep: impl Fn(&VMoveView<'_, Id>) -> bool) -> Vec<Id> {
        self.vmoves
            .iter()
            .filter(|v| keep(v))
            .map(|v| v.id.clone())
            .collect()
    }

    /// A reconcile run's end: Nova's word is final, once it could be read.
    fn after_reconcile(&self) -> Resolution<Id> {
        let total = self.vmoves.len();
        if self.open.count() == 0 {
            return verdict(self.vmoves, self.failed, "confirmed with nova");
        }
        if !self.cancelled() && self.budget.may_reconcile() {
            return Resolution::Reconcile {
                message: format!(
                    "nova could not be read for {} of {total} instances ({}); reading them again",
                    self.open.count(),
                    self.open.describe(total, self.end)
                ),
                instances: self.ids(|v| v.unresolved() || v.failed_transiently()),
            };
        }
        // Those without a result say why; those Nova could not be read for
        // are named with what the reconcile ran into (`give_up`).
        let mut why = "nova's state could not be confirmed before the verdict".to_owned();
        if !self.open.without_result.is_empty() {
            why = format!("{why} ({})", why_without_result(self.end));
        }
        self.give_up(why)
    }

    /// A recovery run's end with instances without a verdict: retried
    /// while the budget allows, then Nova is read, then they fail.
    fn with_open_instances(&self) -> Resolution<Id> {
        let total = self.vmoves.len();
        if !self.cancelled() && self.budget.may_retry() {
            return Resolution::Retry {
                message: format!(
                    "{}; retrying (attempt {})",
                    self.open.describe(total, self.end),
                    self.budget.attempt + 1
                ),
                retry: self.ids(|v| v.unresolved() || v.failed_transiently()),
            };
        }
        if self.budget.may_reconcile() {
            return Resolution::Reconcile {
                message: format!(
                    "{}; reading what nova says before the verdict",
                    self.open.describe(total, self.end)
                ),
                instances: self.ids(|v| v.unresolved() || v.failed()),
            };
        }
        self.give_up(if self.cancelled() {
            why_without_result(self.end)
        } else {
            format!(
                "no result after {} attempt(s): {}",
                self.budget.attempt,
                why_without_result(self.end)
            )
        })
    }

    /// The notification fails; the instances without a result fail with
    /// it, saying why.
    fn give_up(&self, per_instance: String) -> Resolution<Id> {
        let mut message = format!(
            "{} of {} instances were not recovered: {per_instance}",
            self.open.without_result.len() + self.failed.len(),
            self.vmoves.len(),
        );
        append_failures(&mut message, self.failed);
        Resolution::Failed {
            message,
            fail: self
                .vmoves
                .iter()
                .filter(|v| v.unresolved())
                .map(|v| (v.id.clone(), per_instance.clone()))
                .collect(),
        }
    }
}

/// The verdict once every instance has its result.
fn verdict<Id>(
    vmoves: &[VMoveView<'_, Id>],
    failed: &[&VMoveView<'_, Id>],
    engine_message: &str,
) -> Resolution<Id> {
    if failed.is_empty() {
        return Resolution::Finished {
            message: finished_message(engine_message, vmoves),
        };
    }
    let mut message = format!(
        "{} of {} instances were not recovered",
        failed.len(),
        vmoves.len()
    );
    append_failures(&mut message, failed);
    Resolution::Failed {
        message,
        fail: Vec::new(),
    }
}

/// The resolution of a recovery run whose vmoves (if any) all succeeded or
/// were ignored: the engine's closing word decides.
fn without_open_instances<Id>(
    end: &RunEnd,
    vmoves: &[VMoveView<'_, Id>],
    budget: RetryBudget,
) -> Resolution<Id> {
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
            message: why_without_result(end),
            fail: Vec::new(),
        },
        RunEnd::Lost { reason, .. } if vmoves.is_empty() => {
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

/// Names the first few failed instances and their reasons.
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
