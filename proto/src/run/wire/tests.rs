//! The run protocol's conversion: every event survives the round trip, and
//! what the engine may send wrong is refused naming the field.

use super::*;
use crate::run::{InstanceRef, NotificationType, RecoveryMethod, ReservedHost, StartRun};

fn event(body: pb::run_event::Body) -> pb::RunEvent {
    pb::RunEvent {
        sequence: 3,
        run_id: "r".into(),
        body: Some(body),
    }
}

fn now() -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp {
        seconds: 1_800_000_000,
        nanos: 0,
    })
}

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn run() -> RunId {
    RunId::from("r")
}

#[test]
fn every_event_survives_the_round_trip() {
    let id = InstanceId::from("i1");
    let events = vec![
        RunEvent::Plan(vec![PlannedInstance {
            instance_id: id.clone(),
            instance_name: "web-1".into(),
            source_host: "compute-01".into(),
            vmove_type: VMoveType::Evacuation,
            prior_state: Some(PriorState::Stopped),
        }]),
        RunEvent::InstanceStarted {
            instance_id: id.clone(),
            at: at(),
        },
        RunEvent::InstanceStep {
            instance_id: id.clone(),
            step: "evacuate".into(),
            message: "evacuating".into(),
            at: at(),
        },
        RunEvent::InstanceFinished {
            instance_id: id.clone(),
            result: InstanceResult::Succeeded {
                dest_host: Some("compute-02".into()),
                note: Some("found moved".into()),
            },
            start: Some(at()),
            end: at(),
        },
        RunEvent::Progress {
            task: "disable".into(),
            state: ProgressState::Info,
            message: "m".into(),
            at: at(),
            instance_id: None,
        },
        RunEvent::HostUpdate {
            hostname: "compute-01".into(),
            on_maintenance: Some(true),
            reserved: None,
        },
        RunEvent::LockChanged {
            instance_id: id.clone(),
            locked: true,
            at: at(),
        },
        RunEvent::InstanceReconciled {
            instance_id: id,
            result: InstanceResult::Failed {
                message: "nova shows it error".into(),
                retryable: true,
            },
            at: at(),
        },
        RunEvent::Done(RunOutcome::Failed {
            message: "disable failed".into(),
            retryable: true,
        }),
    ];
    for (n, event) in events.into_iter().enumerate() {
        let sequenced = SequencedEvent {
            sequence: n as u64 + 1,
            event,
        };
        let back = SequencedEvent::from_wire(&run(), sequenced.clone().to_wire(&run())).unwrap();
        assert_eq!(back, sequenced);
    }
}

#[test]
fn a_start_survives_the_round_trip_and_bad_ones_name_the_field() {
    let start = StartRun {
        run_id: run(),
        attempt: 2,
        run_kind: RunKind::Reconcile,
        notification_id: "n1".into(),
        notification_type: NotificationType::ComputeHost,
        hostname: "compute-01".into(),
        payload: [("event".to_owned(), "STOPPED".to_owned())].into(),
        generated_time: Some(at()),
        segment_id: "s1".into(),
        segment_name: "rack".into(),
        recovery_method: RecoveryMethod::RhPriority,
        service_type: "COMPUTE".into(),
        reserved_hosts: vec![ReservedHost {
            id: "h".into(),
            name: "spare".into(),
        }],
        instances: vec![InstanceRef {
            instance_id: "i1".into(),
            instance_name: "web-1".into(),
            source_host: "compute-01".into(),
            prior_state: Some(PriorState::Error),
        }],
        return_to_service: true,
    };
    let wire = pb::StartRun::from(start.clone());
    assert_eq!(StartRun::try_from(wire.clone()), Ok(start));

    let mut bad = wire.clone();
    bad.segment.as_mut().unwrap().recovery_method = 42;
    assert_eq!(
        StartRun::try_from(bad),
        Err(ConversionError::UnexpectedEnumVariant {
            field: "start_run.segment.recovery_method",
            value: 42
        })
    );
    let mut missing = wire.clone();
    missing.notification = None;
    assert_eq!(
        StartRun::try_from(missing),
        Err(ConversionError::MissingField("start_run.notification"))
    );
    let mut state = wire;
    state.instances[0].prior_state = 9;
    assert_eq!(
        StartRun::try_from(state),
        Err(ConversionError::UnexpectedEnumVariant {
            field: "start_run.instances.prior_state",
            value: 9
        })
    );
}

#[test]
fn malformed_events_are_protocol_errors() {
    let wrong_run = pb::RunEvent {
        run_id: "other".into(),
        ..event(pb::run_event::Body::Done(pb::Done::default()))
    };
    assert!(matches!(
        SequencedEvent::from_wire(&run(), wrong_run),
        Err(ProtocolError::WrongRun { .. })
    ));
    let no_id = event(pb::run_event::Body::InstanceStarted(pb::InstanceStarted {
        instance_id: String::new(),
        time: now(),
    }));
    assert_eq!(
        SequencedEvent::from_wire(&run(), no_id),
        Err(ProtocolError::Missing {
            sequence: 3,
            field: "instance_started.instance_id"
        })
    );
    let bad_outcome = event(pb::run_event::Body::Done(pb::Done {
        outcome: 99,
        ..pb::Done::default()
    }));
    assert!(matches!(
        SequencedEvent::from_wire(&run(), bad_outcome),
        Err(ProtocolError::UnknownValue {
            field: "done.outcome",
            ..
        })
    ));
    let bad_type = event(pb::run_event::Body::Plan(pb::Plan {
        instances: vec![pb::PlannedInstance {
            instance_id: "i1".into(),
            r#type: 0,
            ..pb::PlannedInstance::default()
        }],
    }));
    assert!(matches!(
        SequencedEvent::from_wire(&run(), bad_type),
        Err(ProtocolError::UnknownValue {
            field: "plan.instances.type",
            ..
        })
    ));
    let huge = event(pb::run_event::Body::InstanceStep(pb::InstanceStep {
        instance_id: "i".repeat(300),
        step: "lock".into(),
        message: String::new(),
        time: now(),
    }));
    assert!(matches!(
        SequencedEvent::from_wire(&run(), huge),
        Err(ProtocolError::TooLong { .. })
    ));
    let zero = pb::RunEvent {
        sequence: 0,
        ..event(pb::run_event::Body::Done(pb::Done::default()))
    };
    assert_eq!(
        SequencedEvent::from_wire(&run(), zero),
        Err(ProtocolError::ZeroSequence)
    );
}

#[test]
fn long_messages_are_cut_not_refused() {
    let failed = event(pb::run_event::Body::InstanceFinished(
        pb::InstanceFinished {
            instance_id: "i1".into(),
            result: pb::InstanceResult::Failed as i32,
            dest_host: String::new(),
            start_time: now(),
            end_time: now(),
            message: "x".repeat(10_000),
            retryable: false,
        },
    ));
    let SequencedEvent { event, .. } = SequencedEvent::from_wire(&run(), failed).unwrap();
    let RunEvent::InstanceFinished {
        result: InstanceResult::Failed { message, .. },
        ..
    } = event
    else {
        panic!("not a failure");
    };
    assert_eq!(message.chars().count(), MAX_MESSAGE);
}
