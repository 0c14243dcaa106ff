//! The run ledger, event by event: plans, steps, results, locks, replays,
//! refusals, and the timeline it keeps.

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
fn every_step_and_lock_change_is_kept_for_the_timeline() {
    let mut ledger = RunLedger::new("run-1", 0, 0, HashMap::new());
    let step = |name: &str, t| RunEvent::InstanceStep {
        instance_id: "a".into(),
        step: name.into(),
        message: format!("{name} it"),
        at: at(t),
    };
    let applied = ledger
        .apply_batch(&numbered(
            vec![
                plan(&["a"]),
                RunEvent::InstanceStarted {
                    instance_id: "a".into(),
                    at: at(1),
                },
                step("lock", 2),
                RunEvent::LockChanged {
                    instance_id: "a".into(),
                    locked: true,
                    at: at(3),
                },
                step("evacuate", 4),
                // Said again without a change: not a step of its own.
                RunEvent::LockChanged {
                    instance_id: "a".into(),
                    locked: true,
                    at: at(5),
                },
            ],
            1,
        ))
        .unwrap();
    let names: Vec<&str> = applied.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(names, ["lock", "locked", "evacuate"]);
    assert_eq!(applied.steps[2].at, at(4));
}

#[test]
fn a_reconcile_run_takes_steps_of_instances_it_does_not_start() {
    let planned = |ledger: &mut RunLedger| {
        ledger
            .apply_batch(&numbered(vec![plan(&["a"])], 1))
            .unwrap();
    };
    let reading = |first| {
        numbered(
            vec![RunEvent::InstanceStep {
                instance_id: "a".into(),
                step: "verify".into(),
                message: "reading the evacuation".into(),
                at: at(2),
            }],
            first,
        )
    };
    let mut recovery = RunLedger::new("run-1", 0, 0, HashMap::new());
    planned(&mut recovery);
    assert!(
        recovery.apply_batch(&reading(2)).is_err(),
        "a recovery steps only through instances it started"
    );
    let mut reconcile = RunLedger::new("run-2", 0, 0, HashMap::new()).reconciling();
    planned(&mut reconcile);
    let applied = reconcile.apply_batch(&reading(2)).unwrap();
    assert_eq!(applied.steps.len(), 1);
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
