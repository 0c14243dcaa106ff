//! Table tests over every (status, event) pair of both state machines, and
//! a property: a terminal notification is left only by an operator's
//! reopening. The rules that choose the events are the lifecycle's, tested
//! with it.

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
            (S::Failed, E::Reopen) => Some(S::Error),
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
    assert_eq!(legal, 12);
    // Nothing but an operator's reopening of a failed notification leaves a
    // terminal status.
    for from in S::ALL.into_iter().filter(|s| s.is_terminal()) {
        for event in E::ALL.into_iter().filter(|e| *e != E::Reopen) {
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
            note: None,
        },
        VMoveEvent::Fail {
            started: None,
            at: at(3),
            message: "evacuate: nova answered 409".into(),
            retryable: false,
        },
        VMoveEvent::Fail {
            started: None,
            at: at(3),
            message: "lock: nova answered 503".into(),
            retryable: true,
        },
        VMoveEvent::Ignore {
            started: None,
            at: at(4),
            message: "instance is paused".into(),
        },
        VMoveEvent::Retry,
        VMoveEvent::Reopen,
        VMoveEvent::Reconcile {
            at: at(5),
            result: Reconciled::Recovered {
                dest_host: Some("compute-02".into()),
                note: "nova shows it active on compute-02".into(),
            },
        },
    ]
}

/// A record in `status`; a failed one failed for a passing reason when
/// `transient`.
fn record(status: VMoveStatus, transient: bool) -> VMoveRecord {
    let mut record = VMoveRecord::planned();
    record.status = status;
    if status != VMoveStatus::Pending {
        record.start_time = Some(at(0));
    }
    if status.is_resolved() {
        record.end_time = Some(at(0));
        record.message = Some("earlier".into());
    }
    record.retryable = transient && status == VMoveStatus::Failed;
    record
}

#[test]
fn vmove_transitions_every_pair() {
    use VMoveStatus as S;
    let expected = |from: S, transient: bool, event: &VMoveEvent| -> Option<S> {
        match (from, event) {
            (S::Pending, VMoveEvent::Start { .. }) => Some(S::Ongoing),
            (S::Ongoing, VMoveEvent::Succeed { .. }) => Some(S::Succeeded),
            (S::Pending | S::Ongoing, VMoveEvent::Fail { .. }) => Some(S::Failed),
            (S::Pending | S::Ongoing, VMoveEvent::Ignore { .. }) => Some(S::Ignored),
            (S::Pending | S::Ongoing, VMoveEvent::Retry) => Some(S::Pending),
            (S::Failed, VMoveEvent::Retry) if transient => Some(S::Pending),
            (S::Failed, VMoveEvent::Reopen) => Some(S::Pending),
            (S::Pending | S::Ongoing | S::Failed, VMoveEvent::Reconcile { .. }) => {
                Some(S::Succeeded)
            }
            _ => None,
        }
    };
    let mut legal = 0;
    for from in S::ALL {
        for transient in [false, true] {
            for event in vmove_events() {
                let mut rec = record(from, transient);
                let before = rec.clone();
                let got = rec.apply(event.clone());
                match expected(from, transient, &event) {
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
    }
    assert_eq!(legal, 29);
}

#[test]
fn a_failure_keeps_its_message_its_cause_and_a_fallback_reason() {
    let mut rec = VMoveRecord::planned();
    rec.apply(VMoveEvent::Fail {
        started: Some(at(4)),
        at: at(5),
        message: "   ".into(),
        retryable: true,
    })
    .unwrap();
    assert_eq!(rec.end_time, Some(at(5)));
    assert_eq!(rec.start_time, Some(at(4)));
    assert_eq!(rec.message.as_deref(), Some("failed without a reason"));
    assert!(rec.retryable());
    // A retry starts it afresh, one attempt more.
    rec.apply(VMoveEvent::Retry).unwrap();
    assert_eq!(rec.status, VMoveStatus::Pending);
    assert_eq!(rec.attempts, 2);
    assert_eq!(rec.start_time, None);
    assert!(!rec.retryable());
    rec.apply(VMoveEvent::Start { at: at(7) }).unwrap();
    rec.apply(VMoveEvent::Succeed {
        started: None,
        at: at(9),
        dest_host: Some("c2".into()),
        note: Some("left locked for now".into()),
    })
    .unwrap();
    assert_eq!(rec.status, VMoveStatus::Succeeded);
    assert_eq!(rec.start_time, Some(at(7)));
    assert_eq!(rec.message.as_deref(), Some("left locked for now"));
}

#[test]
fn nova_s_truth_replaces_what_the_engine_last_saw() {
    let mut failed = record(VMoveStatus::Failed, false);
    failed
        .apply(VMoveEvent::Reconcile {
            at: at(9),
            result: Reconciled::Recovered {
                dest_host: Some("compute-02".into()),
                note: "nova shows it active on compute-02".into(),
            },
        })
        .unwrap();
    assert_eq!(failed.status, VMoveStatus::Succeeded);
    assert_eq!(failed.dest_host.as_deref(), Some("compute-02"));
    assert_eq!(
        failed.message.as_deref(),
        Some("nova shows it active on compute-02")
    );
    let mut pending = record(VMoveStatus::Pending, false);
    pending
        .apply(VMoveEvent::Reconcile {
            at: at(9),
            result: Reconciled::NotRecovered {
                message: "nova shows it active still on the failed host".into(),
                retryable: false,
            },
        })
        .unwrap();
    assert_eq!(pending.status, VMoveStatus::Failed);
    assert!(pending.end_time.is_some());
}

#[test]
fn a_reconciled_failure_keeps_what_the_recovery_last_ran_into_once() {
    let mut failed = record(VMoveStatus::Failed, true);
    failed.message = Some("lock: nova: 503".into());
    let truth = |message: &str| VMoveEvent::Reconcile {
        at: at(9),
        result: Reconciled::NotRecovered {
            message: message.into(),
            retryable: false,
        },
    };
    failed
        .apply(truth("nova shows it active on compute-01"))
        .unwrap();
    assert_eq!(
        failed.message.as_deref(),
        Some("nova shows it active on compute-01; the recovery last failed at: lock: nova: 503")
    );
    // Reconciled again: the newest truth, the same cause, said once.
    failed
        .apply(truth("nova shows it shutoff on compute-01"))
        .unwrap();
    assert_eq!(
        failed.message.as_deref(),
        Some("nova shows it shutoff on compute-01; the recovery last failed at: lock: nova: 503")
    );
    assert!(!failed.retryable);
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

proptest! {
    /// Random notification events: a terminal status is left only by an
    /// operator's reopening of a failed notification.
    #[test]
    fn terminal_notifications_stay_terminal(events in proptest::collection::vec(0usize..7, 0..40)) {
        let mut status = NotificationStatus::New;
        let mut terminal_at: Option<NotificationStatus> = None;
        for e in events {
            let event = NotificationEvent::ALL[e];
            if let Ok(next) = status.on(event) {
                if event == NotificationEvent::Reopen {
                    prop_assert_eq!(status, NotificationStatus::Failed);
                    terminal_at = None;
                } else {
                    prop_assert!(terminal_at.is_none(), "left terminal {:?}", terminal_at);
                }
                status = next;
                if status.is_terminal() {
                    terminal_at = Some(status);
                }
            }
        }
    }
}
