//! The resolution rules case by case, and a property of the status
//! invariants: whatever the engine reports and however runs end, a
//! notification ends within its budget, a terminal one has no instance
//! without a result, and no final verdict contradicts what Nova says when
//! Nova could be read.

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;

use crate::domain::RunKind;
use crate::lifecycle::messages::with_locks_held;
use crate::lifecycle::resolution::*;
use crate::status::{
    NotificationEvent, NotificationStatus, Reconciled, Transition, VMoveEvent, VMoveRecord,
    VMoveStatus,
};

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

#[test]
fn the_message_says_which_locks_are_still_held_until_none_is() {
    let held = |n: usize| (1..=n).map(|i| format!("vm-{i}")).collect::<Vec<_>>();
    let base = "host compute-01 processed (2 instance(s) recovered)";
    let one = with_locks_held(base, &held(1));
    assert_eq!(
        one,
        format!(
            "{base}; 1 instance(s) still locked by this notification, released as soon as nova answers and their evacuations have settled: vm-1"
        )
    );
    // Replaced, not appended, as the set changes; long lists are cut.
    let many = with_locks_held(&one, &held(12));
    assert!(
        many.starts_with(&format!("{base}; 12 instance(s)")),
        "{many}"
    );
    assert!(many.ends_with("vm-10 and 2 more"), "{many}");
    assert_eq!(many.matches("still locked").count(), 1);
    // All released: said once, and nothing is said when none was held.
    assert_eq!(
        with_locks_held(&many, &[]),
        format!("{base}; every lock it took is released")
    );
    assert_eq!(with_locks_held(base, &[]), base);
}

fn view(id: usize, status: VMoveStatus) -> VMoveView<'static, usize> {
    VMoveView {
        id,
        instance: "vm",
        status,
        message: (status == VMoveStatus::Failed).then_some("boom"),
        retryable: false,
    }
}

fn transient(id: usize) -> VMoveView<'static, usize> {
    VMoveView {
        retryable: true,
        message: Some("lock: 503"),
        ..view(id, VMoveStatus::Failed)
    }
}

fn completed() -> RunEnd {
    RunEnd::Done(RunOutcome::Completed {
        message: String::new(),
    })
}

/// Attempt `attempt` of at most `max`, the retry window open or not.
fn budget(attempt: u32, max: u32, window_open: bool) -> RetryBudget {
    RetryBudget {
        attempt,
        max_attempts: max,
        window_open,
        verdict_open: true,
    }
}

/// The budget once the verdict deadline has passed, however few runs
/// there were: reconciles are bounded by time, not by a count.
fn verdict_passed(attempt: u32, max: u32) -> RetryBudget {
    RetryBudget {
        attempt,
        max_attempts: max,
        window_open: false,
        verdict_open: false,
    }
}

#[test]
fn the_seed_bug_cannot_happen_a_pending_vmove_never_finishes() {
    // Masakari: a worker's 503 escaped, the vmove stayed pending and the
    // notification went finished. Here the run is complete, one vmove is
    // still pending and no retry is left: Nova is asked first, and if it
    // cannot tell either the notification fails with the vmove.
    let vmoves = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Pending),
    ];
    let recover = resolve(&completed(), RunKind::Recover, &vmoves, budget(3, 3, true));
    match recover {
        Resolution::Reconcile { instances, .. } => assert_eq!(instances, vec![2]),
        other => panic!("expected a reconcile, got {other:?}"),
    }
    let lost = RunEnd::Lost {
        reason: "engine crashed".into(),
        cause: LostCause::Engine,
    };
    let reconcile = resolve(&lost, RunKind::Reconcile, &vmoves, verdict_passed(6, 3));
    match reconcile {
        Resolution::Failed { fail, message } => {
            assert_eq!(fail.len(), 1);
            assert_eq!(fail[0].0, 2);
            assert!(message.contains("1 of 2"), "{message}");
            assert!(
                fail[0].1.contains("could not be confirmed"),
                "{}",
                fail[0].1
            );
        }
        other => panic!("expected failed, got {other:?}"),
    }
}

#[test]
fn a_finished_message_counts_recovered_and_ignored_apart() {
    let finished = |vmoves: &[VMoveView<'static, usize>]| match resolve(
        &completed(),
        RunKind::Recover,
        vmoves,
        budget(1, 3, true),
    ) {
        Resolution::Finished { message } => message,
        other => panic!("expected finished, got {other:?}"),
    };
    let vmoves = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Ignored),
        view(3, VMoveStatus::Succeeded),
    ];
    assert_eq!(finished(&vmoves), "2 instance(s) recovered, 1 ignored");
    assert_eq!(finished(&vmoves[..1]), "1 instance(s) recovered");
    assert_eq!(finished(&vmoves[1..2]), "1 instance(s) ignored");
    assert_eq!(finished(&[]), "nothing to recover");
}

#[test]
fn no_result_or_a_passing_failure_is_retried_while_the_window_is_open() {
    let vmoves = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Ongoing),
        view(3, VMoveStatus::Pending),
        transient(4),
        view(5, VMoveStatus::Failed),
    ];
    let end = RunEnd::Lost {
        reason: "stream reset".into(),
        cause: LostCause::Engine,
    };
    match resolve(&end, RunKind::Recover, &vmoves, budget(1, 20, true)) {
        Resolution::Retry { retry, message } => {
            // The failure Nova's state confirmed is not retried.
            assert_eq!(retry, vec![2, 3, 4]);
            assert!(message.contains("stream reset"), "{message}");
        }
        other => panic!("expected retry, got {other:?}"),
    }
    // The window closed (or the attempts spent): Nova is read for every
    // instance not recovered before the verdict.
    for spent in [budget(2, 20, false), budget(20, 20, true)] {
        match resolve(&end, RunKind::Recover, &vmoves, spent) {
            Resolution::Reconcile { instances, .. } => assert_eq!(instances, vec![2, 3, 4, 5]),
            other => panic!("expected reconcile, got {other:?}"),
        }
    }
}

#[test]
fn a_failure_the_engine_confirmed_with_nova_fails_the_notification() {
    let vmoves = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Failed),
    ];
    let resolution = resolve(&completed(), RunKind::Recover, &vmoves, budget(1, 3, true));
    assert_eq!(resolution.status(), NotificationStatus::Failed);
    assert!(resolution.message().contains("vm: boom"));
}

#[test]
fn a_reconcile_gives_the_final_verdict_and_reads_nova_again_when_it_could_not() {
    let reconciled = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Succeeded),
    ];
    assert_eq!(
        resolve(
            &completed(),
            RunKind::Reconcile,
            &reconciled,
            budget(5, 3, false)
        )
        .status(),
        NotificationStatus::Finished
    );
    let not_recovered = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Failed),
    ];
    assert_eq!(
        resolve(
            &completed(),
            RunKind::Reconcile,
            &not_recovered,
            budget(4, 3, false)
        )
        .status(),
        NotificationStatus::Failed
    );
    // Nova could not be read for instance 2: once more, then fail.
    let unreadable = [view(1, VMoveStatus::Succeeded), transient(2)];
    match resolve(
        &completed(),
        RunKind::Reconcile,
        &unreadable,
        budget(4, 3, false),
    ) {
        Resolution::Reconcile { instances, .. } => assert_eq!(instances, vec![2]),
        other => panic!("expected reconcile, got {other:?}"),
    }
    assert_eq!(
        resolve(
            &completed(),
            RunKind::Reconcile,
            &unreadable,
            verdict_passed(4, 3)
        )
        .status(),
        NotificationStatus::Failed
    );
}

#[test]
fn succeeded_and_ignored_finish() {
    let vmoves = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Ignored),
    ];
    let resolution = resolve(&completed(), RunKind::Recover, &vmoves, budget(1, 3, true));
    assert_eq!(resolution.status(), NotificationStatus::Finished);
}

#[test]
fn workflow_failure_without_instances_retries_then_fails() {
    let end = RunEnd::Done(RunOutcome::Failed {
        message: "could not disable nova-compute".into(),
        retryable: true,
    });
    let none: [VMoveView<'_, usize>; 0] = [];
    assert_eq!(
        resolve(&end, RunKind::Recover, &none, budget(1, 2, true)).status(),
        NotificationStatus::Error
    );
    assert_eq!(
        resolve(&end, RunKind::Recover, &none, budget(2, 2, true)).status(),
        NotificationStatus::Failed
    );
    assert_eq!(
        resolve(&end, RunKind::Recover, &none, budget(1, 2, false)).status(),
        NotificationStatus::Failed
    );
    let not_retryable = RunEnd::Done(RunOutcome::Failed {
        message: "no reserved host".into(),
        retryable: false,
    });
    assert_eq!(
        resolve(&not_retryable, RunKind::Recover, &none, budget(1, 5, true)).status(),
        NotificationStatus::Failed
    );
}

#[test]
fn ignored_run_without_instances_is_ignored() {
    let end = RunEnd::Done(RunOutcome::Ignored {
        message: "host_status is UNKNOWN".into(),
    });
    let none: [VMoveView<'_, usize>; 0] = [];
    let resolution = resolve(&end, RunKind::Recover, &none, budget(1, 3, true));
    assert_eq!(resolution.status(), NotificationStatus::Ignored);
}

#[test]
fn a_cancelled_run_is_not_retried_but_nova_is_read_before_the_verdict() {
    let end = RunEnd::Done(RunOutcome::Cancelled {
        message: "expired".into(),
    });
    let vmoves = [view(1, VMoveStatus::Ongoing)];
    let resolution = resolve(&end, RunKind::Recover, &vmoves, budget(1, 3, true));
    assert!(
        matches!(resolution, Resolution::Reconcile { .. }),
        "{resolution:?}"
    );
    let none: [VMoveView<'_, usize>; 0] = [];
    assert_eq!(
        resolve(&end, RunKind::Recover, &none, budget(1, 3, true)).status(),
        NotificationStatus::Failed
    );
}

// ---- properties ------------------------------------------------------------

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
