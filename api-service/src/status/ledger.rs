//! The run ledger: what a run's events mean, decided without I/O. The
//! store loads a run's state (its persisted sequence number, the vmoves the
//! events name, the last progress number), the ledger applies the events
//! in order and exactly once by sequence number, under the vmove state
//! machine, and says what changed: vmoves created and updated, progress
//! events with their texts, host flags. The store writes that, all or
//! nothing. A batch the ledger refuses writes nothing.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{Reconciled, VMoveEvent, VMoveRecord, VMoveStatus};
use crate::domain::{
    InstanceId, InstanceResult, PlannedInstance, PriorState, ProgressEvent, ProgressState,
    RunEvent, RunId, SequencedEvent, VMoveType,
};
use crate::lifecycle::RunOutcome;

/// An event the ledger refuses: the whole batch is refused with it and
/// the run is cancelled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Rejected(pub String);

/// One instance's vmove as the ledger sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerVMove {
    pub instance_name: String,
    pub source_host: String,
    pub vmove_type: VMoveType,
    /// The instance's state before the failure, as the plan recorded it.
    pub prior_state: Option<PriorState>,
    pub record: VMoveRecord,
    /// The engine's current step: name, what it said, when.
    pub step: Option<Step>,
    /// The engine holds the instance's lock for this notification.
    pub lock_held: bool,
}

/// A step the engine entered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub name: String,
    pub message: Option<String>,
    pub at: Option<DateTime<Utc>>,
}

impl Step {
    fn named(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            message: None,
            at: None,
        }
    }
}

/// A step an instance entered, as its timeline keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepTaken {
    pub instance_id: InstanceId,
    pub step: String,
    pub message: String,
    pub at: DateTime<Utc>,
}

/// A host flag a run changes (the failed host on maintenance, a reserved
/// host taken into service).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostChange {
    pub hostname: String,
    pub on_maintenance: Option<bool>,
    pub reserved: Option<bool>,
}

/// What applying a batch changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Instances whose vmove the batch created, in plan order.
    pub created: Vec<InstanceId>,
    /// Instances whose existing vmove the batch changed, in first-touch
    /// order (created ones are not repeated here).
    pub updated: Vec<InstanceId>,
    pub progress: Vec<ProgressEvent>,
    /// Each step an instance entered, in order: its timeline.
    pub steps: Vec<StepTaken>,
    pub hosts: Vec<HostChange>,
    /// The engine's `Done`, if the batch held it.
    pub done: Option<RunOutcome>,
    /// The run's sequence number after the batch.
    pub sequence: u64,
}

/// A run's state: loaded by the store, changed by events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLedger {
    run_id: RunId,
    sequence: u64,
    progress_sequence: u64,
    vmoves: HashMap<InstanceId, LedgerVMove>,
    /// A release-locks run of an ended notification: only lock changes,
    /// progress and `Done` are accepted; no status changes.
    locks_only: bool,
    /// A reconcile run: its steps say what it reads of instances it does
    /// not start, whatever their status.
    reconciling: bool,
}

impl RunLedger {
    /// The state of run `run_id`: events up to `sequence` are persisted,
    /// the notification's last progress event is `progress_sequence`, and
    /// `vmoves` are the existing vmoves the coming events may name.
    pub fn new(
        run_id: impl Into<RunId>,
        sequence: u64,
        progress_sequence: u64,
        vmoves: HashMap<InstanceId, LedgerVMove>,
    ) -> Self {
        Self {
            run_id: run_id.into(),
            sequence,
            progress_sequence,
            vmoves,
            locks_only: false,
            reconciling: false,
        }
    }

    /// The state of a release-locks run: it may report lock changes,
    /// progress and `Done`, nothing else.
    pub fn locks_only(mut self) -> Self {
        self.locks_only = true;
        self
    }

    /// The state of a reconcile run: its steps are taken for instances in
    /// any status (it starts none of them).
    pub fn reconciling(mut self) -> Self {
        self.reconciling = true;
        self
    }

    /// The instances a batch's new events name (those the store must load).
    pub fn mentioned(events: &[SequencedEvent], after: u64) -> Vec<InstanceId> {
        let mut ids = Vec::new();
        for e in events.iter().filter(|e| e.sequence > after) {
            match &e.event {
                RunEvent::Plan(planned) => {
                    ids.extend(planned.iter().map(|p| p.instance_id.clone()));
                }
                RunEvent::InstanceStarted { instance_id, .. }
                | RunEvent::InstanceStep { instance_id, .. }
                | RunEvent::InstanceFinished { instance_id, .. }
                | RunEvent::LockChanged { instance_id, .. }
                | RunEvent::InstanceReconciled { instance_id, .. } => ids.push(instance_id.clone()),
                RunEvent::Progress {
                    instance_id: Some(instance_id),
                    ..
                } => ids.push(instance_id.clone()),
                RunEvent::Progress {
                    instance_id: None, ..
                }
                | RunEvent::HostUpdate { .. }
                | RunEvent::Done(_) => {}
            }
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    pub fn vmove(&self, instance_id: &str) -> Option<&LedgerVMove> {
        self.vmoves.get(instance_id)
    }

    /// Applies a batch all or nothing: on `Err` the ledger is unchanged.
    pub fn apply_batch(&mut self, events: &[SequencedEvent]) -> Result<Applied, Rejected> {
        let mut next = self.clone();
        let mut applied = Applied::default();
        for event in events {
            next.apply(event, &mut applied)?;
        }
        applied.sequence = next.sequence;
        *self = next;
        Ok(applied)
    }

    /// Applies one event: a replay (at or below the persisted sequence) is
    /// skipped; a gap, an instance outside the plan or a transition the
    /// status rules refuse is rejected.
    fn apply(&mut self, event: &SequencedEvent, applied: &mut Applied) -> Result<(), Rejected> {
        if event.sequence <= self.sequence {
            return Ok(());
        }
        if event.sequence != self.sequence + 1 {
            return Err(Rejected(format!(
                "event {} of run {} arrived after event {}: events must come in order",
                event.sequence, self.run_id, self.sequence
            )));
        }
        self.sequence = event.sequence;
        if self.locks_only
            && !matches!(
                event.event,
                RunEvent::LockChanged { .. } | RunEvent::Progress { .. } | RunEvent::Done(_)
            )
        {
            return Err(Rejected(format!(
                "event {} of run {}: a release-locks run reports lock changes, progress and done only",
                event.sequence, self.run_id
            )));
        }
        match &event.event {
            RunEvent::Plan(planned) => {
                for p in planned {
                    self.plan(p, applied);
                }
            }
            RunEvent::InstanceStarted { instance_id, at } => {
                let vmove = self.planned_mut(instance_id)?;
                vmove
                    .record
                    .apply(VMoveEvent::Start { at: *at })
                    .map_err(|e| Rejected(format!("instance {instance_id}: {e}")))?;
                vmove.step = Some(Step::named("started"));
                let text = format!("recovery of {} started", describe(vmove, instance_id));
                touched(applied, instance_id);
                self.progress(
                    applied,
                    "recover_instance",
                    ProgressState::Started,
                    text,
                    *at,
                    Some(instance_id),
                );
            }
            RunEvent::InstanceStep {
                instance_id,
                step,
                message,
                at,
            } => {
                let reconciling = self.reconciling;
                let vmove = self.planned_mut(instance_id)?;
                if vmove.record.status() != VMoveStatus::Ongoing && !reconciling {
                    return Err(Rejected(format!(
                        "instance {instance_id}: a step was reported while it is {}",
                        vmove.record.status()
                    )));
                }
                vmove.step = Some(Step {
                    name: step.clone(),
                    message: (!message.is_empty()).then(|| message.clone()),
                    at: Some(*at),
                });
                applied.steps.push(StepTaken {
                    instance_id: instance_id.clone(),
                    step: step.clone(),
                    message: message.clone(),
                    at: *at,
                });
                touched(applied, instance_id);
            }
            RunEvent::InstanceFinished {
                instance_id,
                result,
                start,
                end,
            } => {
                let vmove = self.planned_mut(instance_id)?;
                let (event, state, text) = match result {
                    InstanceResult::Succeeded { dest_host, note } => (
                        VMoveEvent::Succeed {
                            at: *end,
                            started: *start,
                            dest_host: dest_host.clone(),
                            note: note.clone(),
                        },
                        ProgressState::Succeeded,
                        format!(
                            "{} recovered on {}{}",
                            vmove.instance_name,
                            dest_host.as_deref().unwrap_or(&vmove.source_host),
                            note.as_deref()
                                .map(|n| format!(" ({n})"))
                                .unwrap_or_default()
                        ),
                    ),
                    InstanceResult::Failed { message, retryable } => (
                        VMoveEvent::Fail {
                            at: *end,
                            started: *start,
                            message: message.clone(),
                            retryable: *retryable,
                        },
                        ProgressState::Failed,
                        format!(
                            "{} not recovered{}: {message}",
                            vmove.instance_name,
                            if *retryable { " yet" } else { "" }
                        ),
                    ),
                    InstanceResult::Ignored { message } => (
                        VMoveEvent::Ignore {
                            at: *end,
                            started: *start,
                            message: message.clone(),
                        },
                        ProgressState::Skipped,
                        format!("{} ignored: {message}", vmove.instance_name),
                    ),
                };
                vmove
                    .record
                    .apply(event)
                    .map_err(|e| Rejected(format!("instance {instance_id}: {e}")))?;
                vmove.step = Some(Step::named("done"));
                touched(applied, instance_id);
                self.progress(
                    applied,
                    "recover_instance",
                    state,
                    text,
                    *end,
                    Some(instance_id),
                );
            }
            RunEvent::Progress {
                task,
                state,
                message,
                at,
                instance_id,
            } => {
                if let Some(instance_id) = instance_id {
                    self.planned_mut(instance_id)?;
                }
                self.progress(
                    applied,
                    task,
                    *state,
                    message.clone(),
                    *at,
                    instance_id.as_ref(),
                );
            }
            RunEvent::LockChanged {
                instance_id,
                locked,
                at,
            } => {
                let vmove = self.planned_mut(instance_id)?;
                if vmove.lock_held != *locked {
                    vmove.lock_held = *locked;
                    applied.steps.push(StepTaken {
                        instance_id: instance_id.clone(),
                        step: if *locked { "locked" } else { "lock released" }.to_owned(),
                        message: String::new(),
                        at: *at,
                    });
                    touched(applied, instance_id);
                }
            }
            RunEvent::InstanceReconciled {
                instance_id,
                result,
                at,
            } => {
                let vmove = self.planned_mut(instance_id)?;
                let (reconciled, state, text) = match result {
                    InstanceResult::Succeeded { dest_host, note } => {
                        let note = note
                            .clone()
                            .unwrap_or_else(|| "nova shows it recovered".to_owned());
                        let text = format!("{}: {note}", vmove.instance_name);
                        (
                            Reconciled::Recovered {
                                dest_host: dest_host.clone(),
                                note,
                            },
                            ProgressState::Succeeded,
                            text,
                        )
                    }
                    InstanceResult::Failed { message, retryable } => (
                        Reconciled::NotRecovered {
                            message: message.clone(),
                            retryable: *retryable,
                        },
                        ProgressState::Failed,
                        format!("{}: {message}", vmove.instance_name),
                    ),
                    InstanceResult::Ignored { message } => (
                        Reconciled::Gone {
                            message: message.clone(),
                        },
                        ProgressState::Skipped,
                        format!("{}: {message}", vmove.instance_name),
                    ),
                };
                match vmove.record.status() {
                    // What Nova says counts where the engine gave no result
                    // or failed; a success or an ignore stands.
                    VMoveStatus::Succeeded | VMoveStatus::Ignored => {}
                    _ => {
                        vmove
                            .record
                            .apply(VMoveEvent::Reconcile {
                                at: *at,
                                result: reconciled,
                            })
                            .map_err(|e| Rejected(format!("instance {instance_id}: {e}")))?;
                        vmove.step = Some(Step::named("reconciled"));
                        touched(applied, instance_id);
                    }
                }
                self.progress(applied, "reconcile", state, text, *at, Some(instance_id));
            }
            RunEvent::HostUpdate {
                hostname,
                on_maintenance,
                reserved,
            } => applied.hosts.push(HostChange {
                hostname: hostname.clone(),
                on_maintenance: *on_maintenance,
                reserved: *reserved,
            }),
            RunEvent::Done(outcome) => applied.done = Some(outcome.clone()),
        }
        Ok(())
    }

    /// A planned instance gets a pending vmove, unless an earlier run (or
    /// an earlier plan of this one) announced it already.
    fn plan(&mut self, p: &PlannedInstance, applied: &mut Applied) {
        if self.vmoves.contains_key(&p.instance_id) {
            return;
        }
        self.vmoves.insert(
            p.instance_id.clone(),
            LedgerVMove {
                instance_name: p.instance_name.clone(),
                source_host: p.source_host.clone(),
                vmove_type: p.vmove_type,
                prior_state: p.prior_state,
                record: VMoveRecord::planned(),
                step: None,
                lock_held: false,
            },
        );
        applied.created.push(p.instance_id.clone());
    }

    fn planned_mut(&mut self, instance_id: &InstanceId) -> Result<&mut LedgerVMove, Rejected> {
        self.vmoves.get_mut(instance_id).ok_or_else(|| {
            Rejected(format!(
                "instance {instance_id} was not announced in the run's plan"
            ))
        })
    }

    fn progress(
        &mut self,
        applied: &mut Applied,
        task: &str,
        state: ProgressState,
        message: String,
        time: DateTime<Utc>,
        instance_id: Option<&InstanceId>,
    ) {
        self.progress_sequence += 1;
        applied.progress.push(ProgressEvent {
            sequence: self.progress_sequence,
            task: task.to_owned(),
            state,
            message,
            time,
            instance_id: instance_id.map(InstanceId::to_string),
        });
    }
}

/// `name (id)`, for progress texts.
fn describe(vmove: &LedgerVMove, instance_id: &InstanceId) -> String {
    format!("{} ({instance_id})", vmove.instance_name)
}

fn touched(applied: &mut Applied, instance_id: &InstanceId) {
    if !applied.created.contains(instance_id) && !applied.updated.contains(instance_id) {
        applied.updated.push(instance_id.clone());
    }
}

#[cfg(test)]
mod tests;
