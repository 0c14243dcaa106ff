//! Table tests over every (status, event) pair and property tests of the
//! status invariants.

use chrono::{TimeZone, Utc};
use proptest::prelude::*;

use super::*;

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

#[test]
fn notification_transitions_every_pair() {
    use NotificationEvent as E;
    use NotificationStatus as S;
    // The whole table: (from, event) -> Some(to) or None (illegal).
    let expected = |from: S, event: E| -> Option<S> {
        match (from, event) {
            (S::New, E::Start) => Some(S::Running),
            (S::New, E::Ignore) => Some(S::Ignored),
            (S::New, E::Expire) => Some(S::Failed),
            (S::Running, E::Finish) => Some(S::Finished),
            (S::Running, E::Interrupt) => Some(S::Error),
            (S::Running, E::Fail) => Some(S::Failed),
            (S::Running, E::Ignore) => Some(S::Ignored),
            (S::Running, E::Expire) => Some(S::Failed),
            (S::Error, E::Start) => Some(S::Running),
            (S::Error, E::Fail) => Some(S::Failed),
            (S::Error, E::Expire) => Some(S::Failed),
            _ => None,
        }
    };
    let mut legal = 0;
    for from in S::ALL {
        for event in E::ALL {
            let got = from.on(event);
            match expected(from, event) {
                Some(to) => {
                    legal += 1;
                    assert_eq!(got, Ok(to), "{from} --{}--> {to}", event.as_str());
                }
                None => {
                    let err = got.expect_err("illegal transition accepted");
                    assert_eq!(err.from, from.as_str());
                    assert_eq!(err.event, event.as_str());
                }
            }
        }
    }
    assert_eq!(legal, 11);
    // Nothing leaves a terminal status.
    for from in S::ALL.into_iter().filter(|s| s.is_terminal()) {
        for event in E::ALL {
            assert!(from.on(event).is_err(), "{from} left by {}", event.as_str());
        }
    }
}

fn vmove_events() -> Vec<VMoveEvent> {
    vec![
        VMoveEvent::Start { at: at(1) },
        VMoveEvent::Succeed {
            started: None,
            at: at(2),
            dest_host: Some("compute-02".into()),
        },
        VMoveEvent::Fail {
            started: None,
            at: at(3),
            message: "evacuate: nova answered 503".into(),
        },
        VMoveEvent::Ignore {
            started: None,
            at: at(4),
            message: "instance is paused".into(),
        },
        VMoveEvent::Retry,
    ]
}

fn record(status: VMoveStatus) -> VMoveRecord {
    let mut record = VMoveRecord::planned();
    record.status = status;
    if status != VMoveStatus::Pending {
        record.start_time = Some(at(0));
    }
    if status.is_resolved() {
        record.end_time = Some(at(0));
        record.message = Some("earlier".into());
    }
    record
}

#[test]
fn vmove_transitions_every_pair() {
    use VMoveStatus as S;
    let expected = |from: S, event: &VMoveEvent| -> Option<S> {
        match (from, event) {
            (S::Pending, VMoveEvent::Start { .. }) => Some(S::Ongoing),
            (S::Ongoing, VMoveEvent::Succeed { .. }) => Some(S::Succeeded),
            (S::Pending | S::Ongoing, VMoveEvent::Fail { .. }) => Some(S::Failed),
            (S::Pending | S::Ongoing, VMoveEvent::Ignore { .. }) => Some(S::Ignored),
            (S::Pending | S::Ongoing, VMoveEvent::Retry) => Some(S::Pending),
            _ => None,
        }
    };
    let mut legal = 0;
    for from in S::ALL {
        for event in vmove_events() {
            let mut rec = record(from);
            let before = rec.clone();
            let got = rec.apply(event.clone());
            match expected(from, &event) {
                Some(to) => {
                    legal += 1;
                    assert_eq!(got, Ok(()), "{from} --{}-->", event.name());
                    assert_eq!(rec.status, to);
                }
                None => {
                    assert!(got.is_err(), "{from} --{}--> accepted", event.name());
                    assert_eq!(rec, before, "a rejected event changed the record");
                }
            }
        }
    }
    assert_eq!(legal, 8);
}

#[test]
fn vmove_failure_always_has_end_time_and_message() {
    let mut rec = VMoveRecord::planned();
    rec.apply(VMoveEvent::Start { at: at(1) }).unwrap();
    rec.apply(VMoveEvent::Fail {
        started: None,
        at: at(5),
        message: "  ".into(),
    })
    .unwrap();
    assert_eq!(rec.end_time, Some(at(5)));
    assert_eq!(rec.message.as_deref(), Some("failed without a reason"));
}

#[test]
fn retry_counts_attempts_and_clears_the_previous_try() {
    let mut rec = VMoveRecord::planned();
    rec.apply(VMoveEvent::Start { at: at(1) }).unwrap();
    rec.apply(VMoveEvent::Retry).unwrap();
    assert_eq!(rec.status, VMoveStatus::Pending);
    assert_eq!(rec.attempts, 2);
    assert_eq!(rec.start_time, None);
    rec.apply(VMoveEvent::Start { at: at(7) }).unwrap();
    rec.apply(VMoveEvent::Succeed {
        started: None,
        at: at(9),
        dest_host: Some("c2".into()),
    })
    .unwrap();
    assert_eq!(rec.status, VMoveStatus::Succeeded);
    assert_eq!(rec.start_time, Some(at(7)));
}

fn view(id: usize, status: VMoveStatus) -> VMoveView<'static, usize> {
    VMoveView {
        id,
        instance: "vm",
        status,
        message: (status == VMoveStatus::Failed).then_some("boom"),
    }
}

fn completed() -> RunEnd {
    RunEnd::Done(RunOutcome::Completed {
        message: String::new(),
    })
}

#[test]
fn the_seed_bug_cannot_happen_a_pending_vmove_never_finishes() {
    // Masakari: a worker's 503 escaped, the vmove stayed pending and the
    // notification went finished. Here the run is complete, one vmove is
    // still pending and no attempts remain: the notification fails and the
    // vmove fails with it.
    let vmoves = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Pending),
    ];
    let resolution = resolve_final_status(&completed(), &vmoves, 3, 3);
    match resolution {
        Resolution::Failed { fail, message } => {
            assert_eq!(fail.len(), 1);
            assert_eq!(fail[0].0, 2);
            assert!(message.contains("1 of 2"), "{message}");
        }
        other => panic!("expected failed, got {other:?}"),
    }
}

#[test]
fn a_finished_message_counts_recovered_and_ignored_apart() {
    let finished = |vmoves: &[VMoveView<'static, usize>]| match resolve_final_status(
        &completed(),
        vmoves,
        1,
        3,
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
fn unresolved_vmoves_are_retried_while_attempts_remain() {
    let vmoves = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Ongoing),
        view(3, VMoveStatus::Pending),
    ];
    let end = RunEnd::Lost {
        reason: "stream reset".into(),
    };
    match resolve_final_status(&end, &vmoves, 1, 3) {
        Resolution::Retry { retry, message } => {
            assert_eq!(retry, vec![2, 3]);
            assert!(message.contains("stream reset"), "{message}");
        }
        other => panic!("expected retry, got {other:?}"),
    }
}

#[test]
fn a_failed_instance_fails_the_notification() {
    let vmoves = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Failed),
    ];
    let resolution = resolve_final_status(&completed(), &vmoves, 1, 3);
    assert_eq!(resolution.status(), NotificationStatus::Failed);
    assert!(resolution.message().contains("vm: boom"));
}

#[test]
fn succeeded_and_ignored_finish() {
    let vmoves = [
        view(1, VMoveStatus::Succeeded),
        view(2, VMoveStatus::Ignored),
    ];
    let resolution = resolve_final_status(&completed(), &vmoves, 1, 3);
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
        resolve_final_status(&end, &none, 1, 2).status(),
        NotificationStatus::Error
    );
    assert_eq!(
        resolve_final_status(&end, &none, 2, 2).status(),
        NotificationStatus::Failed
    );
    let not_retryable = RunEnd::Done(RunOutcome::Failed {
        message: "no reserved host".into(),
        retryable: false,
    });
    assert_eq!(
        resolve_final_status(&not_retryable, &none, 1, 5).status(),
        NotificationStatus::Failed
    );
}

#[test]
fn ignored_run_without_instances_is_ignored() {
    let end = RunEnd::Done(RunOutcome::Ignored {
        message: "host_status is UNKNOWN".into(),
    });
    let none: [VMoveView<'_, usize>; 0] = [];
    let resolution = resolve_final_status(&end, &none, 1, 3);
    assert_eq!(resolution.status(), NotificationStatus::Ignored);
}

#[test]
fn cancelled_run_fails_unresolved_at_once() {
    let end = RunEnd::Done(RunOutcome::Cancelled {
        message: "expired".into(),
    });
    let vmoves = [view(1, VMoveStatus::Ongoing)];
    let resolution = resolve_final_status(&end, &vmoves, 1, 3);
    assert_eq!(resolution.status(), NotificationStatus::Failed);
}

#[test]
fn status_names_round_trip() {
    for status in NotificationStatus::ALL {
        assert_eq!(NotificationStatus::parse(status.as_str()), Some(status));
    }
    for status in VMoveStatus::ALL {
        assert_eq!(VMoveStatus::parse(status.as_str()), Some(status));
    }
    assert_eq!(NotificationStatus::parse("FINISHED"), None);
}

// ---- properties ------------------------------------------------------------

#[derive(Clone, Debug)]
enum EngineEvent {
    Start(usize),
    Succeed(usize),
    Fail(usize),
    Ignore(usize),
}

fn engine_event(instances: usize) -> impl Strategy<Value = EngineEvent> {
    let i = 0..instances.max(1);
    prop_oneof![
        i.clone().prop_map(EngineEvent::Start),
        i.clone().prop_map(EngineEvent::Succeed),
        i.clone().prop_map(EngineEvent::Fail),
        i.prop_map(EngineEvent::Ignore),
    ]
}

fn run_end() -> impl Strategy<Value = RunEnd> {
    prop_oneof![
        Just(RunEnd::Lost {
            reason: "engine crashed".into()
        }),
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

/// One run: the engine's events (illegal ones rejected), then the end.
#[derive(Clone, Debug)]
struct Run {
    events: Vec<EngineEvent>,
    end: RunEnd,
}

fn scenario() -> impl Strategy<Value = (usize, u32, Vec<Run>)> {
    (0usize..6, 1u32..4).prop_flat_map(|(instances, max_attempts)| {
        let run = (
            proptest::collection::vec(engine_event(instances), 0..20),
            run_end(),
        )
            .prop_map(|(events, end)| Run { events, end });
        (
            Just(instances),
            Just(max_attempts),
            proptest::collection::vec(run, max_attempts as usize..=max_attempts as usize),
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
            },
        ),
        EngineEvent::Fail(i) => (
            *i,
            VMoveEvent::Fail {
                started: None,
                at: at(t),
                message: "lock: 503".into(),
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever the engine sends and however runs end, the notification
    /// reaches a terminal status within its attempts and the invariants hold.
    #[test]
    fn no_sequence_of_events_breaks_an_invariant((instances, max_attempts, runs) in scenario()) {
        let mut records: Vec<VMoveRecord> = (0..instances).map(|_| VMoveRecord::planned()).collect();
        let mut status = NotificationStatus::New;
        let mut t = 0;
        for (n, run) in runs.iter().enumerate() {
            let attempt = n as u32 + 1;
            status = status.on(NotificationEvent::Start).expect("new or error can start");
            for event in &run.events {
                t += 1;
                apply_engine_event(&mut records, event, t);
            }
            let views: Vec<VMoveView<'_, usize>> = records
                .iter()
                .enumerate()
                .map(|(id, r)| VMoveView { id, instance: "vm", status: r.status, message: r.message.as_deref() })
                .collect();
            let resolution = resolve_final_status(&run.end, &views, attempt, max_attempts);
            t += 1;
            match &resolution {
                Resolution::Retry { retry, .. } => {
                    prop_assert!(attempt < max_attempts, "retry past the last attempt");
                    for id in retry {
                        records[*id].apply(VMoveEvent::Retry).expect("only unresolved vmoves are retried");
                    }
                }
                Resolution::Failed { fail, .. } => {
                    for (id, message) in fail {
                        records[*id]
                            .apply(VMoveEvent::Fail { started: None, at: at(t), message: message.clone() })
                            .expect("only unresolved vmoves are failed");
                    }
                }
                Resolution::Finished { .. } | Resolution::Ignored { .. } => {}
            }
            let next = status.on(resolution.event()).expect("a running notification takes any resolution");
            prop_assert_eq!(next, resolution.status());
            status = next;

            if status.is_terminal() {
                break;
            }
        }

        prop_assert!(status.is_terminal(), "not terminal after {} attempts: {}", max_attempts, status);
        for record in &records {
            prop_assert!(record.status.is_resolved(), "terminal notification with a {} vmove", record.status);
            if record.status == VMoveStatus::Failed {
                prop_assert!(record.end_time.is_some(), "failed vmove without end time");
                prop_assert!(record.message.as_deref().is_some_and(|m| !m.is_empty()), "failed vmove without message");
            }
        }
        if status == NotificationStatus::Finished {
            prop_assert!(records.iter().all(|r| matches!(r.status, VMoveStatus::Succeeded | VMoveStatus::Ignored)));
        }
        if records.iter().any(|r| r.status == VMoveStatus::Failed) {
            prop_assert_eq!(status, NotificationStatus::Failed);
        }
    }

    /// Random notification events: a terminal status is never left.
    #[test]
    fn terminal_notifications_stay_terminal(events in proptest::collection::vec(0usize..6, 0..40)) {
        let mut status = NotificationStatus::New;
        let mut terminal_at: Option<NotificationStatus> = None;
        for e in events {
            let event = NotificationEvent::ALL[e];
            if let Ok(next) = status.on(event) {
                prop_assert!(terminal_at.is_none(), "left terminal {:?}", terminal_at);
                status = next;
                if status.is_terminal() {
                    terminal_at = Some(status);
                }
            }
        }
    }
}
