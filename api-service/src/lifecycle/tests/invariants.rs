//! A property of the status invariants: whatever the engine reports and
//! however runs end, a notification ends by its verdict deadline, a
//! terminal one has no instance without a result, and no final verdict
//! contradicts what Nova says when Nova could be read.

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;

use super::resolution::completed;
use crate::domain::RunKind;
use crate::lifecycle::resolution::*;
use crate::status::{
    NotificationEvent, NotificationStatus, Reconciled, Transition, VMoveEvent, VMoveRecord,
    VMoveStatus,
};

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

/// What the engine reports about an instance in a recovery run.
#[derive(Clone, Debug)]
enum EngineEvent {
    Start(usize),
    Succeed(usize),
    Fail(usize, bool),
    Ignore(usize),
}

fn engine_event(instances: usize) -> impl Strategy<Value = EngineEvent> {
    let i = 0..instances.max(1);
    prop_oneof![
        i.clone().prop_map(EngineEvent::Start),
        i.clone().prop_map(EngineEvent::Succeed),
        (i.clone(), any::<bool>()).prop_map(|(i, t)| EngineEvent::Fail(i, t)),
        i.prop_map(EngineEvent::Ignore),
    ]
}

fn run_end() -> impl Strategy<Value = RunEnd> {
    prop_oneof![
        Just(RunEnd::engine_lost("engine crashed")),
        Just(completed()),
        any::<bool>().prop_map(|retryable| RunEnd::Done(RunOutcome::Failed {
            message: "service update failed".into(),
            retryable
        })),
        Just(RunEnd::Done(RunOutcome::Ignored {
            message: "nothing to do".into()
        })),
        Just(RunEnd::Done(RunOutcome::Cancelled {
            message: "operator".into()
        })),
    ]
}

/// One recovery run: the engine's events (illegal ones rejected), then the
/// end; and whether a reconcile run that follows it can read Nova.
#[derive(Clone, Debug)]
struct Run {
    events: Vec<EngineEvent>,
    end: RunEnd,
    nova_readable: bool,
}

/// Instances (each recovered or not in Nova's eyes), the attempts,
/// whether the window closes early, how many runs start before the verdict
/// deadline passes (it is a time: how many fit depends on how long each
/// takes), and the runs.
type Scenario = (Vec<bool>, u32, bool, u32, Vec<Run>);

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        proptest::collection::vec(any::<bool>(), 0..6),
        1u32..5,
        any::<bool>(),
        0u32..5,
    )
        .prop_flat_map(|(truth, max_attempts, closes, grace_runs)| {
            let instances = truth.len();
            let run = (
                proptest::collection::vec(engine_event(instances), 0..20),
                run_end(),
                any::<bool>(),
            )
                .prop_map(|(events, end, nova_readable)| Run {
                    events,
                    end,
                    nova_readable,
                });
            let deadline_at = max_attempts + grace_runs;
            // A recovery's end always gets the verdict's look at Nova.
            let runs = deadline_at as usize + 1;
            (
                Just(truth),
                Just(max_attempts),
                Just(closes),
                Just(deadline_at),
                proptest::collection::vec(run, runs..=runs),
            )
        })
}

fn apply_engine_event(records: &mut [VMoveRecord], event: &EngineEvent, t: i64) {
    let (i, ev) = match event {
        EngineEvent::Start(i) => (*i, VMoveEvent::Start { at: at(t) }),
        EngineEvent::Succeed(i) => (
            *i,
            VMoveEvent::Succeed {
                started: None,
                at: at(t),
                dest_host: Some("c2".into()),
                note: None,
            },
        ),
        EngineEvent::Fail(i, retryable) => (
            *i,
            VMoveEvent::Fail {
                started: None,
                at: at(t),
                message: "lock: 503".into(),
                retryable: *retryable,
            },
        ),
        EngineEvent::Ignore(i) => (
            *i,
            VMoveEvent::Ignore {
                started: None,
                at: at(t),
                message: "paused".into(),
            },
        ),
    };
    if let Some(record) = records.get_mut(i) {
        // Rejected events leave the record as it was; that is the point.
        let _ = record.apply(ev);
    }
}

/// A reconcile run: Nova's truth for each named instance, or (Nova not
/// readable) a passing failure to read it.
fn reconcile(records: &mut [VMoveRecord], ids: &[usize], truth: &[bool], readable: bool, t: i64) {
    for id in ids {
        let result = match (readable, truth[*id]) {
            (false, _) => Reconciled::NotRecovered {
                message: "nova could not be read".into(),
                retryable: true,
            },
            (true, true) => Reconciled::Recovered {
                dest_host: Some("c2".into()),
                note: "nova shows it active on c2".into(),
            },
            (true, false) => Reconciled::NotRecovered {
                message: "nova shows it still on the failed host".into(),
                retryable: false,
            },
        };
        records[*id]
            .apply(VMoveEvent::Reconcile { at: at(t), result })
            .expect("only instances without a good result are reconciled");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever the engine sends and however runs end, the notification
    /// reaches a terminal status by the verdict deadline, the invariants hold, and when a reconcile
    /// could read Nova, no instance Nova shows recovered ends failed.
    #[test]
    fn no_sequence_of_events_breaks_an_invariant(
        (truth, max_attempts, closes, deadline_at, runs) in scenario()
    ) {
        let mut records: Vec<VMoveRecord> = truth.iter().map(|_| VMoveRecord::planned()).collect();
        let mut read_by_nova: Vec<bool> = truth.iter().map(|_| false).collect();
        let mut status = NotificationStatus::New;
        let mut kind = RunKind::Recover;
        let mut t = 0;
        for (n, run) in runs.iter().enumerate() {
            let attempt = n as u32 + 1;
            status = status.on(NotificationEvent::Start).expect("new or error can start");
            match kind {
                RunKind::Recover => {
                    for event in &run.events {
                        t += 1;
                        apply_engine_event(&mut records, event, t);
                    }
                }
                RunKind::Reconcile | RunKind::ReleaseLocks => {}
            }
            let views: Vec<VMoveView<'_, usize>> = records
                .iter()
                .enumerate()
                .map(|(id, r)| VMoveView {
                    id,
                    instance: "vm",
                    status: r.status(),
                    message: r.message(),
                    retryable: r.retryable(),
                })
                .collect();
            let budget = RetryBudget {
                attempt,
                max_attempts,
                window_open: !(closes && attempt > 1),
                // The lifecycle counts the grace from a recovery's end.
                verdict_open: kind == RunKind::Recover || attempt < deadline_at,
            };
            let resolution = resolve(&run.end, kind, &views, budget);
            t += 1;
            if let Resolution::Retry { .. } = &resolution {
                prop_assert!(budget.window_open && budget.attempt < budget.max_attempts, "retry past the budget");
            }
            let reconciled = runs
                .get(n + 1)
                .filter(|next| matches!(next.end, RunEnd::Done(RunOutcome::Completed { .. })))
                .map(|next| next.nova_readable);
            apply_resolution(&resolution, &mut records, &truth, reconciled, &mut read_by_nova, t);
            let next = status.on(resolution.event()).expect("a running notification takes any resolution");
            prop_assert_eq!(next, resolution.status());
            status = next;
            kind = resolution.next_run().unwrap_or(RunKind::Recover);
            if status.is_terminal() {
                break;
            }
        }

        prop_assert!(status.is_terminal(), "not terminal after {} runs: {}", runs.len(), status);
        check_terminal(status, &records, &truth, &read_by_nova)?;
    }
}

/// The invariants of a terminal notification with `records`, given what
/// Nova shows (`truth`) and which instances a reconcile read (`read`).
fn check_terminal(
    status: NotificationStatus,
    records: &[VMoveRecord],
    truth: &[bool],
    read: &[bool],
) -> Result<(), TestCaseError> {
    for (record, (truth, read)) in records.iter().zip(truth.iter().zip(read)) {
        prop_assert!(
            record.status().is_resolved(),
            "terminal notification with a {} vmove",
            record.status()
        );
        if record.status() == VMoveStatus::Failed {
            prop_assert!(record.end_time().is_some(), "failed vmove without end time");
            prop_assert!(
                record.message().is_some_and(|m| !m.is_empty()),
                "failed vmove without message"
            );
            // No message contradicts Nova.
            prop_assert!(
                !(*truth && *read),
                "an instance Nova shows recovered ended failed"
            );
        }
    }
    if status == NotificationStatus::Finished {
        prop_assert!(
            records
                .iter()
                .all(|r| matches!(r.status(), VMoveStatus::Succeeded | VMoveStatus::Ignored))
        );
    }
    if records.iter().any(|r| r.status() == VMoveStatus::Failed) {
        prop_assert_eq!(status, NotificationStatus::Failed);
    }
    Ok(())
}

/// What a resolution does to the records: retried instances back to
/// pending, failed ones failed; a reconcile's follow-up run reads Nova
/// (`reconciled`: whether it could, when that run completes).
fn apply_resolution(
    resolution: &Resolution<usize>,
    records: &mut [VMoveRecord],
    truth: &[bool],
    reconciled: Option<bool>,
    read_by_nova: &mut [bool],
    t: i64,
) {
    match resolution {
        Resolution::Retry { retry, .. } => {
            for id in retry {
                records[*id]
                    .apply(VMoveEvent::Retry)
                    .expect("only unresolved or passing failures are retried");
            }
        }
        Resolution::Reconcile { instances, .. } => {
            if let Some(readable) = reconciled {
                reconcile(records, instances, truth, readable, t);
                if readable {
                    for id in instances {
                        read_by_nova[*id] = true;
                    }
                }
            }
        }
        Resolution::Failed { fail, .. } => {
            for (id, message) in fail {
                records[*id]
                    .apply(VMoveEvent::Fail {
                        started: None,
                        at: at(t),
                        message: message.clone(),
                        retryable: false,
                    })
                    .expect("only unresolved vmoves are failed");
            }
        }
        Resolution::Finished { .. } | Resolution::Ignored { .. } => {}
    }
}
