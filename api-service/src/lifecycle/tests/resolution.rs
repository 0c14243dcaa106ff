//! The resolution rules case by case (their invariants over any sequence
//! of runs: [`super::invariants`]).

use crate::domain::RunKind;
use crate::lifecycle::messages::with_locks_held;
use crate::lifecycle::resolution::*;
use crate::status::{NotificationStatus, VMoveStatus};

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

pub(super) fn completed() -> RunEnd {
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
