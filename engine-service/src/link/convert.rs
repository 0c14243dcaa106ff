//! Conversions between `instanceha.engine.v1` messages and the engine's
//! run types, with exhaustive matches.

use chrono::{DateTime, Utc};
use instanceha_proto::ConversionError;
use instanceha_proto::engine::v1 as pb;
use instanceha_proto::v1 as public;
use prost_types::Timestamp;

use crate::recovery::{
    InstanceRef, InstanceResult, NotificationType, ProgressState, RunEvent, RunKind, RunOutcome,
    StartRun, VMoveType,
};
use crate::workflow::targets::RecoveryMethod;

fn timestamp(at: DateTime<Utc>) -> Option<Timestamp> {
    Some(instanceha_proto::time::timestamp(at))
}

impl TryFrom<pb::StartRun> for StartRun {
    type Error = ConversionError;

    fn try_from(start: pb::StartRun) -> Result<Self, Self::Error> {
        if start.run_id.is_empty() {
            return Err(ConversionError::MissingField("start_run.run_id"));
        }
        let notification = start
            .notification
            .ok_or(ConversionError::MissingField("start_run.notification"))?;
        let segment = start
            .segment
            .ok_or(ConversionError::MissingField("start_run.segment"))?;
        if notification.hostname.is_empty() {
            return Err(ConversionError::MissingField(
                "start_run.notification.hostname",
            ));
        }
        let kind = match public::NotificationType::try_from(notification.r#type) {
            Ok(public::NotificationType::ComputeHost) => NotificationType::ComputeHost,
            Ok(public::NotificationType::Process) => NotificationType::Process,
            Ok(public::NotificationType::Vm) => NotificationType::Vm,
            Ok(public::NotificationType::Unspecified) | Err(_) => {
                return Err(ConversionError::UnexpectedEnumVariant {
                    field: "start_run.notification.type",
                    value: notification.r#type,
                });
            }
        };
        let recovery_method = match public::RecoveryMethod::try_from(segment.recovery_method) {
            Ok(public::RecoveryMethod::Auto) => RecoveryMethod::Auto,
            Ok(public::RecoveryMethod::ReservedHost) => RecoveryMethod::ReservedHost,
            Ok(public::RecoveryMethod::AutoPriority) => RecoveryMethod::AutoPriority,
            Ok(public::RecoveryMethod::RhPriority) => RecoveryMethod::RhPriority,
            Ok(public::RecoveryMethod::Unspecified) | Err(_) => {
                return Err(ConversionError::UnexpectedEnumVariant {
                    field: "start_run.segment.recovery_method",
                    value: segment.recovery_method,
                });
            }
        };
        let run_kind = match pb::RunKind::try_from(start.kind) {
            Ok(pb::RunKind::Unspecified | pb::RunKind::Recover) => RunKind::Recover,
            Ok(pb::RunKind::Reconcile) => RunKind::Reconcile,
            Ok(pb::RunKind::ReleaseLocks) => RunKind::ReleaseLocks,
            Err(_) => {
                return Err(ConversionError::UnexpectedEnumVariant {
                    field: "start_run.kind",
                    value: start.kind,
                });
            }
        };
        Ok(StartRun {
            run_id: start.run_id,
            attempt: start.attempt.max(1),
            run_kind,
            notification_id: notification.id,
            kind,
            hostname: notification.hostname,
            payload: notification.payload.into_iter().collect(),
            generated_time: instanceha_proto::time::optional(
                "start_run.notification.generated_time",
                notification.generated_time,
            )?,
            segment_name: segment.name,
            recovery_method,
            reserved_hosts: start.reserved_hosts.into_iter().map(|h| h.name).collect(),
            instances: start
                .instances
                .into_iter()
                .map(|i| InstanceRef {
                    instance_id: i.instance_id,
                    instance_name: i.instance_name,
                    source_host: i.source_host,
                })
                .collect(),
        })
    }
}

fn progress_state(state: ProgressState) -> public::ProgressState {
    match state {
        ProgressState::Started => public::ProgressState::Started,
        ProgressState::Succeeded => public::ProgressState::Succeeded,
        ProgressState::Failed => public::ProgressState::Failed,
        ProgressState::Skipped => public::ProgressState::Skipped,
        ProgressState::Info => public::ProgressState::Info,
    }
}

/// An instance result's wire fields.
struct WireResult {
    result: pb::InstanceResult,
    dest_host: String,
    message: String,
    retryable: bool,
}

fn instance_result(result: InstanceResult) -> WireResult {
    match result {
        InstanceResult::Succeeded { dest_host, note } => WireResult {
            result: pb::InstanceResult::Succeeded,
            dest_host: dest_host.unwrap_or_default(),
            message: note.unwrap_or_default(),
            retryable: false,
        },
        InstanceResult::Failed { message, retryable } => WireResult {
            result: pb::InstanceResult::Failed,
            dest_host: String::new(),
            message,
            retryable,
        },
        InstanceResult::Ignored { message } => WireResult {
            result: pb::InstanceResult::Ignored,
            dest_host: String::new(),
            message,
            retryable: false,
        },
    }
}

/// The wire form of an event, numbered.
pub fn event_message(run_id: &str, sequence: u64, event: RunEvent) -> pb::RunEvent {
    use pb::run_event::Body;
    let body = match event {
        RunEvent::Plan(instances) => Body::Plan(pb::Plan {
            instances: instances
                .into_iter()
                .map(|i| pb::PlannedInstance {
                    instance_id: i.instance_id,
                    instance_name: i.instance_name,
                    source_host: i.source_host,
                    r#type: match i.kind {
                        VMoveType::Evacuation => public::VmoveType::Evacuation,
                        VMoveType::Restart => public::VmoveType::Restart,
                    } as i32,
                })
                .collect(),
        }),
        RunEvent::InstanceStarted { instance_id, at } => {
            Body::InstanceStarted(pb::InstanceStarted {
                instance_id,
                time: timestamp(at),
            })
        }
        RunEvent::InstanceStep {
            instance_id,
            step,
            message,
            at,
        } => Body::InstanceStep(pb::InstanceStep {
            instance_id,
            step: step.to_owned(),
            message,
            time: timestamp(at),
        }),
        RunEvent::InstanceFinished {
            instance_id,
            outcome,
            start,
            end,
        } => {
            let wire = instance_result(outcome);
            Body::InstanceFinished(pb::InstanceFinished {
                instance_id,
                result: wire.result as i32,
                dest_host: wire.dest_host,
                start_time: timestamp(start),
                end_time: timestamp(end),
                message: wire.message,
                retryable: wire.retryable,
            })
        }
        RunEvent::LockChanged {
            instance_id,
            locked,
            at,
        } => Body::LockChanged(pb::LockChanged {
            instance_id,
            locked,
            time: timestamp(at),
        }),
        RunEvent::InstanceReconciled {
            instance_id,
            result,
            at,
        } => {
            let wire = instance_result(result);
            Body::InstanceReconciled(pb::InstanceReconciled {
                instance_id,
                result: wire.result as i32,
                dest_host: wire.dest_host,
                message: wire.message,
                retryable: wire.retryable,
                time: timestamp(at),
            })
        }
        RunEvent::Progress {
            task,
            state,
            message,
            at,
            instance_id,
        } => Body::Progress(pb::Progress {
            task: task.to_owned(),
            state: progress_state(state) as i32,
            message,
            time: timestamp(at),
            instance_id: instance_id.unwrap_or_default(),
        }),
        RunEvent::HostUpdate {
            hostname,
            on_maintenance,
            reserved,
        } => Body::HostUpdate(pb::HostUpdate {
            hostname,
            on_maintenance,
            reserved,
        }),
        RunEvent::Done(outcome) => {
            let (outcome, message, retryable) = match outcome {
                RunOutcome::Completed { message } => (pb::RunOutcome::Completed, message, false),
                RunOutcome::Failed { message, retryable } => {
                    (pb::RunOutcome::Failed, message, retryable)
                }
                RunOutcome::Ignored { message } => (pb::RunOutcome::Ignored, message, false),
                RunOutcome::Cancelled { message } => (pb::RunOutcome::Cancelled, message, false),
            };
            Body::Done(pb::Done {
                outcome: outcome as i32,
                message,
                retryable,
            })
        }
    };
    pb::RunEvent {
        sequence,
        run_id: run_id.to_owned(),
        body: Some(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> pb::StartRun {
        pb::StartRun {
            run_id: "r1".into(),
            attempt: 1,
            notification: Some(pb::Notification {
                id: "n1".into(),
                r#type: public::NotificationType::ComputeHost as i32,
                hostname: "compute-01".into(),
                payload: [("event".to_owned(), "STOPPED".to_owned())].into(),
                generated_time: None,
            }),
            segment: Some(pb::Segment {
                id: "s1".into(),
                name: "rack".into(),
                recovery_method: public::RecoveryMethod::RhPriority as i32,
                service_type: "COMPUTE".into(),
            }),
            reserved_hosts: vec![pb::ReservedHost {
                id: "h".into(),
                name: "spare".into(),
            }],
            instances: vec![],
            kind: pb::RunKind::Recover as i32,
        }
    }

    #[test]
    fn a_start_converts_and_bad_ones_name_the_field() {
        let run = StartRun::try_from(start()).unwrap();
        assert_eq!(run.kind, NotificationType::ComputeHost);
        assert_eq!(run.recovery_method, RecoveryMethod::RhPriority);
        assert_eq!(run.reserved_hosts, vec!["spare".to_owned()]);

        let mut bad = start();
        bad.segment.as_mut().unwrap().recovery_method = 42;
        assert_eq!(
            StartRun::try_from(bad),
            Err(ConversionError::UnexpectedEnumVariant {
                field: "start_run.segment.recovery_method",
                value: 42
            })
        );
        let mut missing = start();
        missing.notification = None;
        assert_eq!(
            StartRun::try_from(missing),
            Err(ConversionError::MissingField("start_run.notification"))
        );
    }
}
