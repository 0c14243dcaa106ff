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
use crate::status::RunOutcome;

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
        }
    }

    /// The state of a release-locks run: it may report lock changes,
    /// progress and `Done`, nothing else.
    pub fn locks_only(mut self) -> Self {
        self.locks_only = true;
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
                let vmove = self.planned_mut(instance_id)?;
                if vmove.record.status() != VMoveStatus::Ongoing {
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
                ..
            } => {
                let vmove = self.planned_mut(instance_id)?;
                if vmove.lock_held != *locked {
                    vmove.lock_held = *locked;
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
mod tests {
    use super::*;
    use crate::domain::InstanceResult;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn numbered(events: Vec<RunEvent>, first: u64) -> Vec<SequencedEvent> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| SequencedEvent {
                sequence: first + i as u64,
                event,
            })
            .collect()
    }

    fn plan(ids: &[&str]) -> RunEvent {
        RunEvent::Plan(
            ids.iter()
                .map(|id| PlannedInstance {
                    instance_id: (*id).into(),
                    instance_name: format!("vm-{id}"),
                    source_host: "compute-01".to_owned(),
                    vmove_type: VMoveType::Evacuation,
                    prior_state: Some(PriorState::Active),
                })
                .collect(),
        )
    }

    #[test]
    fn a_whole_recovery_in_one_batch_creates_and_resolves_the_vmove() {
        let mut ledger = RunLedger::new("run-1", 0, 4, HashMap::new());
        let events = numbered(
            vec![
                plan(&["a"]),
                RunEvent::InstanceStarted {
                    instance_id: "a".into(),
                    at: at(1),
                },
                RunEvent::InstanceStep {
                    instance_id: "a".into(),
                    step: "evacuate".into(),
                    message: "evacuating to compute-02".into(),
                    at: at(2),
                },
                RunEvent::InstanceFinished {
                    instance_id: "a".into(),
                    result: InstanceResult::Succeeded {
                        dest_host: Some("compute-02".into()),
                        note: None,
                    },
                    start: Some(at(1)),
                    end: at(3),
                },
                RunEvent::Done(RunOutcome::Completed {
                    message: "host compute-01 processed".into(),
                }),
            ],
            1,
        );
        let applied = ledger.apply_batch(&events).unwrap();
        assert_eq!(applied.created, ["a"]);
        assert!(applied.updated.is_empty());
        assert_eq!(applied.sequence, 5);
        assert!(applied.done.is_some());
        let texts: Vec<&str> = applied
            .progress
            .iter()
            .map(|p| p.message.as_str())
            .collect();
        assert_eq!(
            texts,
            [
                "recovery of vm-a (a) started",
                "vm-a recovered on compute-02"
            ]
        );
        assert_eq!(applied.progress[0].sequence, 5);
        let vmove = ledger.vmove("a").unwrap();
        assert_eq!(vmove.record.status(), VMoveStatus::Succeeded);
        assert_eq!(vmove.record.dest_host(), Some("compute-02"));
        // A replay of the same batch changes nothing.
        let again = ledger.apply_batch(&events).unwrap();
        assert_eq!(
            again,
            Applied {
                sequence: 5,
                ..Applied::default()
            }
        );
    }

    #[test]
    fn steps_keep_their_message_and_time() {
        let mut ledger = RunLedger::new("run-1", 0, 0, HashMap::new());
        ledger
            .apply_batch(&numbered(
                vec![
                    plan(&["a"]),
                    RunEvent::InstanceStarted {
                        instance_id: "a".into(),
                        at: at(1),
                    },
                    RunEvent::InstanceStep {
                        instance_id: "a".into(),
                        step: "lock".into(),
                        message: "locking the instance".into(),
                        at: at(2),
                    },
                ],
                1,
            ))
            .unwrap();
        let step = ledger.vmove("a").unwrap().step.clone().unwrap();
        assert_eq!(step.name, "lock");
        assert_eq!(step.message.as_deref(), Some("locking the instance"));
        assert_eq!(step.at, Some(at(2)));
    }

    #[test]
    fn a_refused_event_refuses_the_batch_and_leaves_the_ledger_unchanged() {
        let mut ledger = RunLedger::new("run-1", 0, 0, HashMap::new());
        let before = ledger.clone();
        let gap = numbered(vec![plan(&["a"])], 2);
        assert!(ledger.apply_batch(&gap).is_err());
        let unplanned = numbered(
            vec![
                plan(&["a"]),
                RunEvent::InstanceStarted {
                    instance_id: "ghost".into(),
                    at: at(1),
                },
            ],
            1,
        );
        let err = ledger.apply_batch(&unplanned).unwrap_err();
        assert!(err.0.contains("not announced"), "{err}");
        let finished_twice = numbered(
            vec![
                plan(&["a"]),
                RunEvent::InstanceFinished {
                    instance_id: "a".into(),
                    result: InstanceResult::Failed {
                        message: "no".into(),
                        retryable: false,
                    },
                    start: None,
                    end: at(1),
                },
                RunEvent::InstanceFinished {
                    instance_id: "a".into(),
                    result: InstanceResult::Failed {
                        message: "no".into(),
                        retryable: false,
                    },
                    start: None,
                    end: at(2),
                },
            ],
            1,
        );
        assert!(ledger.apply_batch(&finished_twice).is_err());
        assert_eq!(ledger, before);
    }

    #[test]
    fn a_result_records_when_the_instance_started_if_its_start_was_missed() {
        let mut ledger = RunLedger::new("run-1", 0, 0, HashMap::new());
        ledger
            .apply_batch(&numbered(
                vec![
                    plan(&["a"]),
                    RunEvent::InstanceFinished {
                        instance_id: "a".into(),
                        result: InstanceResult::Ignored {
                            message: "deleted".into(),
                        },
                        start: Some(at(1)),
                        end: at(2),
                    },
                ],
                1,
            ))
            .unwrap();
        assert_eq!(ledger.vmove("a").unwrap().record.start_time(), Some(at(1)));
    }
}
