//! The run state's rules over time, without a database: who may claim,
//! take over and renew a run, when the next run is due after each kind of
//! end, that a run in progress never expires, and the bound on the verdict:
//! whatever the runs run into, a notification's final status comes at most
//! `verdict_grace` after the later of the retry window's end and the end of
//! the last recovery run started within it.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use instanceha_runtime::backoff::Backoff;
use proptest::prelude::*;

use crate::domain::{NotificationId, RunId, RunKind};
use crate::lifecycle::claim::ClaimRequest;
use crate::lifecycle::end::RunEnded;
use crate::lifecycle::expiry::Open;
use crate::lifecycle::{
    Blocker, Claim, DueWork, RunEnd, RunOutcome, RunPolicy, RunState, VMoveView,
};
use crate::status::{NotificationStatus, VMoveStatus};

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn policy() -> RunPolicy {
    RunPolicy {
        lease: Duration::from_secs(60),
        retry_window: Duration::from_secs(1800),
        verdict_grace: Duration::from_secs(300),
        max_attempts: 20,
        retry_backoff: Backoff::new(Duration::from_secs(5), Duration::from_secs(120)).exact(),
    }
}

fn request<'a>(
    now: DateTime<Utc>,
    replica: &'a str,
    policy: &'a RunPolicy,
    run: &str,
) -> ClaimRequest<'a> {
    ClaimRequest {
        now,
        replica,
        run_id: RunId::from(run),
        policy,
        hostname: "compute-01",
        blocker: None,
    }
}

fn started(claim: Claim) -> RunState {
    match claim {
        Claim::Start { state, .. } => state,
        other => panic!("not started: {other:?}"),
    }
}

fn end(
    state: &RunState,
    end: RunEnd,
    vmoves: &[VMoveView<'_, usize>],
    now: DateTime<Utc>,
) -> RunState {
    let run_id = state.run.as_ref().expect("a run").id.clone();
    state
        .end_run(RunEnded {
            run_id: &run_id,
            end: &end,
            vmoves,
            locks_held: &[],
            now,
            policy: &policy(),
        })
        .expect("the run is the notification's")
        .state
}

fn failed_transiently() -> VMoveView<'static, usize> {
    VMoveView {
        id: 0,
        instance: "vm-1",
        status: VMoveStatus::Failed,
        message: Some("evacuate: nova answered 503"),
        retryable: true,
    }
}

#[test]
fn of_two_replicas_claiming_one_notification_only_the_first_starts_a_run() {
    let policy = policy();
    let new = RunState::reported(NotificationStatus::New, None);
    let first = started(new.claim(request(at(0), "api-0", &policy, "r1")));
    assert_eq!(first.status, NotificationStatus::Running);
    assert_eq!(first.attempts, 1);
    assert_eq!(
        first.retry_until,
        Some(at(1800)),
        "the window starts with the first run"
    );
    // The second replica reads what the first wrote.
    assert_eq!(
        first.claim(request(at(0), "api-1", &policy, "r2")),
        Claim::NotDue
    );
}

#[test]
fn a_report_waits_behind_its_hosts_earlier_notification_and_says_so_once() {
    let policy = policy();
    let new = RunState::reported(NotificationStatus::New, None);
    let earlier = NotificationId::new();
    let mut req = request(at(0), "api-0", &policy, "r1");
    req.blocker = Some(Blocker {
        id: earlier,
        status: NotificationStatus::Running,
    });
    let Claim::Queued {
        state: Some(queued),
    } = new.claim(req.clone())
    else {
        panic!("not queued");
    };
    let message = queued.message.clone().unwrap();
    assert!(message.contains(&earlier.to_string()), "{message}");
    assert!(message.contains("running"), "{message}");
    // Said once: the same message is not written again.
    assert_eq!(queued.claim(req), Claim::Queued { state: None });
}

#[test]
fn a_lease_is_taken_over_only_once_it_ran_out_or_by_its_own_replica_after_a_restart() {
    let policy = policy();
    let running = started(
        RunState::reported(NotificationStatus::New, None).claim(request(
            at(0),
            "api-0",
            &policy,
            "r1",
        )),
    );
    let run = RunId::from("r1");
    assert_eq!(running.due("api-1", at(30)), None, "the lease holds");
    assert!(
        running
            .take_over(&run, "api-1", at(30), policy.lease)
            .is_none()
    );
    assert_eq!(
        running.due("api-0", at(30)),
        Some(DueWork::TakeOver {
            run_id: run.clone()
        }),
        "its own replica, restarted, resumes at once"
    );
    assert_eq!(
        running.due("api-1", at(61)),
        Some(DueWork::TakeOver {
            run_id: run.clone()
        })
    );
    let taken = running
        .take_over(&run, "api-1", at(61), policy.lease)
        .unwrap();
    assert_eq!(taken.run.as_ref().unwrap().claimed_by, "api-1");
    // Renewing extends the lease of the run that is the notification's only.
    let renewed = running.renew(&run, at(50), policy.lease).unwrap();
    assert_eq!(renewed.run.as_ref().unwrap().lease_until, at(110));
    assert!(
        running
            .renew(&RunId::from("other"), at(50), policy.lease)
            .is_none()
    );
}

#[test]
fn a_run_lost_with_its_engine_goes_again_at_once_a_failure_after_the_backoff() {
    let policy = policy();
    let running = started(
        RunState::reported(NotificationStatus::New, None).claim(request(
            at(0),
            "api-0",
            &policy,
            "r1",
        )),
    );
    let open = [failed_transiently()];
    let lost = end(&running, RunEnd::engine_lost("stream reset"), &open, at(10));
    assert_eq!(lost.status, NotificationStatus::Error);
    assert_eq!(
        lost.next_attempt_at,
        Some(at(10)),
        "no backoff for a lost engine"
    );
    let failed = end(
        &running,
        RunEnd::Done(RunOutcome::Completed {
            message: String::new(),
        }),
        &open,
        at(10),
    );
    assert_eq!(
        failed.next_attempt_at,
        Some(at(15)),
        "5 s before the second run"
    );
    let message = failed.message.unwrap();
    assert!(
        message.contains("failed for a passing reason: vm-1: evacuate: nova answered 503"),
        "{message}"
    );
    assert!(!message.contains("without their results"), "{message}");
    assert!(message.contains("next try at"), "{message}");
}

#[test]
fn once_the_window_closed_no_recovery_starts_nova_is_read_instead() {
    let policy = policy();
    let mut waiting = RunState::reported(NotificationStatus::Error, None);
    waiting.attempts = 4;
    waiting.retry_until = Some(at(100));
    waiting.next_kind = Some(RunKind::Recover);
    let Claim::Start { kind, .. } = waiting.claim(request(at(101), "api-0", &policy, "r5")) else {
        panic!("not started");
    };
    assert_eq!(kind, RunKind::Reconcile);
    let Claim::Start { kind, state, .. } = waiting.claim(request(at(99), "api-0", &policy, "r5"))
    else {
        panic!("not started");
    };
    assert_eq!(kind, RunKind::Recover);
    assert_eq!(
        state.cancel_at(&policy),
        None,
        "a recovery is not cut short when the window closes"
    );
    let Claim::Start { state, .. } = waiting.claim(request(at(101), "api-0", &policy, "r5")) else {
        panic!("not started");
    };
    assert_eq!(
        state.cancel_at(&policy).map(|(at, _)| at),
        Some(at(400)),
        "a reconcile is cut at the verdict deadline"
    );
}

#[test]
fn a_run_in_progress_never_expires() {
    let policy = policy();
    let running = started(
        RunState::reported(NotificationStatus::New, None).claim(request(
            at(0),
            "api-0",
            &policy,
            "r1",
        )),
    );
    let open = Open {
        instances: 3,
        locks_held: &[],
    };
    assert!(
        running
            .expire(at(999_999), Duration::from_secs(60), open)
            .is_none()
    );
    let waiting = RunState::reported(NotificationStatus::New, None);
    let expired = waiting
        .expire(at(999_999), Duration::from_secs(60), open)
        .expect("a waiting notification expires");
    assert_eq!(
        expired.state.next_kind,
        Some(RunKind::Reconcile),
        "nova first"
    );
}

// ---- the bound on the verdict ---------------------------------------------

/// How a run of the simulation ends, if its deadline does not come first.
#[derive(Clone, Debug)]
enum Outcome {
    /// The engine went away.
    EngineLost,
    /// The run completed with the instance failed for a passing reason.
    StillFailing,
    /// The run completed with the instance recovered.
    Recovered,
    /// The engine could not be reached at all.
    Unreachable,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::EngineLost),
        Just(Outcome::StillFailing),
        Just(Outcome::Recovered),
        Just(Outcome::Unreachable),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Whatever each run runs into and however long it takes, the
    /// notification reaches a terminal status, and at most `verdict_grace`
    /// after the later of the retry window's end and the end of the last
    /// recovery run (which is not cut short) — or after the last recovery
    /// alone when it spent the attempts before the window closed. However
    /// many reconcile runs fit in the grace: they are bounded by time.
    #[test]
    fn the_verdict_comes_within_the_window_and_the_grace(
        runs in proptest::collection::vec((outcome(), 0u32..4000), 1..60),
        max_attempts in 1u32..25,
    ) {
        let policy = RunPolicy { max_attempts, ..policy() };
        let grace = policy.verdict_grace.as_secs() as i64;
        let mut last_recovery_end = at(0);
        let mut spent = false;
        let mut state = RunState::reported(NotificationStatus::New, None);
        let mut now = at(0);
        let mut first: Option<DateTime<Utc>> = None;
        let mut status = VMoveStatus::Pending;
        for (n, (outcome, took)) in runs.iter().cycle().take(4000).enumerate() {
            if state.status.is_terminal() {
                break;
            }
            now = now.max(state.next_attempt_at.unwrap_or(now));
            let Claim::Start { state: claimed, kind, .. } =
                state.claim(request(now, "api-0", &policy, &format!("r{n}")))
            else {
                prop_assert!(false, "a due notification was not claimed: {:?}", state);
                unreachable!();
            };
            first.get_or_insert(now);
            let run_id = claimed.run.as_ref().unwrap().id.clone();
            if matches!(outcome, Outcome::Unreachable) {
                now += chrono::Duration::seconds(i64::from(*took) + 1);
                // Past the deadline (`None`) it is ended as lost below.
                if let Some(given_back) = claimed
                    .engine_unreachable(&run_id, "refused".into(), now, &policy)
                    .unwrap()
                {
                    state = given_back;
                    continue;
                }
            }
            let (ends, end) = how_it_ends(&claimed, outcome, *took, now, &policy);
            if !matches!(end, RunEnd::Done(RunOutcome::Cancelled { .. })) {
                status = instance_after(status, outcome);
            }
            let view = [VMoveView {
                id: 0,
                instance: "vm-1",
                status,
                message: (status == VMoveStatus::Failed).then_some("evacuate: 503"),
                retryable: status == VMoveStatus::Failed && kind == RunKind::Recover,
            }];
            now = ends;
            if kind == RunKind::Recover {
                last_recovery_end = now;
                spent = claimed.attempts >= policy.max_attempts;
            }
            state = claimed
                .end_run(RunEnded {
                    run_id: &run_id,
                    end: &end,
                    vmoves: &view,
                    locks_held: &[],
                    now,
                    policy: &policy,
                })
                .unwrap()
                .state;
            if state.status.is_terminal() {
                let window_end = first.unwrap() + chrono::Duration::from_std(policy.retry_window).unwrap();
                let from = if spent { last_recovery_end } else { window_end.max(last_recovery_end) };
                let after = (now - from).num_seconds();
                prop_assert!(after <= grace, "verdict {after} s after the window and the last recovery (grace {grace} s)");
            }
        }
        prop_assert!(state.status.is_terminal(), "no verdict: {:?}", state);
    }
}

/// When and how a run claimed at `now` ends: after `took` seconds with
/// `outcome`, or cancelled at its deadline if that comes first.
fn how_it_ends(
    claimed: &RunState,
    outcome: &Outcome,
    took: u32,
    now: DateTime<Utc>,
    policy: &RunPolicy,
) -> (DateTime<Utc>, RunEnd) {
    let (ends, end) = match outcome {
        Outcome::Unreachable => (now, RunEnd::engine_lost("refused")),
        Outcome::EngineLost => (
            now + chrono::Duration::seconds(i64::from(took)),
            RunEnd::engine_lost("stream reset"),
        ),
        Outcome::StillFailing | Outcome::Recovered => (
            now + chrono::Duration::seconds(i64::from(took)),
            RunEnd::Done(RunOutcome::Completed {
                message: String::new(),
            }),
        ),
    };
    match claimed.cancel_at(policy) {
        Some((deadline, reason)) if ends > deadline => (
            deadline,
            RunEnd::Done(RunOutcome::Cancelled {
                message: reason.to_owned(),
            }),
        ),
        _ => (ends, end),
    }
}

/// The instance's status after a run that was not cancelled: a success
/// stands.
fn instance_after(status: VMoveStatus, outcome: &Outcome) -> VMoveStatus {
    match (status, outcome) {
        (VMoveStatus::Succeeded, _) => status,
        (_, Outcome::Recovered) => VMoveStatus::Succeeded,
        (_, Outcome::StillFailing) => VMoveStatus::Failed,
        (_, Outcome::EngineLost | Outcome::Unreachable) => status,
    }
}
