//! Conversions between the `instanceha.engine.v1` messages and the API's
//! run types. Everything the engine sends is checked here: a malformed
//! event is a protocol error, never a half-written record.

use chrono::{DateTime, Utc};
use instanceha_proto::ConversionError;
use instanceha_proto::engine::v1 as pb;
use instanceha_proto::v1 as public;

use crate::domain::{
    InstanceResult, NotificationType, PlannedInstance, ProgressState, RecoveryMethod, RunEvent,
    RunKind, SequencedEvent, StartRun, VMoveType,
};
use crate::status::RunOutcome;

/// Longest message kept from the engine; longer ones are cut.
const MAX_MESSAGE: usize = 4096;
/// Longest identifier, step or task name.
const MAX_NAME: usize = 255;

/// An engine event the API refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("event {sequence}: {field} is required")]
    Missing { sequence: u64, field: &'static str },
    #[error("event {sequence}: {field} is longer than {max} characters")]
    TooLong {
        sequence: u64,
        field: &'static str,
        max: usize,
    },
    #[error("event {sequence}: {field} has the unknown value {value}")]
    UnknownValue {
        sequence: u64,
        field: &'static str,
        value: String,
    },
    #[error("event {sequence} belongs to run {got}, not {expected}")]
    WrongRun {
        sequence: u64,
        got: String,
        expected: String,
    },
    #[error("event sequence numbers start at 1")]
    ZeroSequence,
}

fn cut(text: String) -> String {
    if text.chars().count() <= MAX_MESSAGE {
        text
    } else {
        let mut cut: String = text.chars().take(MAX_MESSAGE - 1).collect();
        cut.push('…');
        cut
    }
}

struct Checker(u64);

impl Checker {
    fn name(&self, field: &'static str, value: String) -> Result<String, ProtocolError> {
        if value.is_empty() {
            return Err(ProtocolError::Missing {
                sequence: self.0,
                field,
            });
        }
        if value.chars().count() > MAX_NAME {
            return Err(ProtocolError::TooLong {
                sequence: self.0,
                field,
                max: MAX_NAME,
            });
        }
        Ok(value)
    }

    fn optional_name(
        &self,
        field: &'static str,
        value: String,
    ) -> Result<Option<String>, ProtocolError> {
        if value.is_empty() {
            Ok(None)
        } else {
            self.name(field, value).map(Some)
        }
    }

    fn time(
        &self,
        field: &'static str,
        value: Option<prost_types::Timestamp>,
    ) -> Result<DateTime<Utc>, ProtocolError> {
        instanceha_proto::time::required(field, value).map_err(|e| match e {
            ConversionError::MissingField(field) => ProtocolError::Missing {
                sequence: self.0,
                field,
            },
            ConversionError::InvalidData { field, reason } => ProtocolError::UnknownValue {
                sequence: self.0,
                field,
                value: reason,
            },
            ConversionError::UnexpectedEnumVariant { field, value } => {
                ProtocolError::UnknownValue {
                    sequence: self.0,
                    field,
                    value: value.to_string(),
                }
            }
        })
    }
}

impl Checker {
    /// An instance's result (`field` is the message's name).
    fn result(
        &self,
        field: &'static str,
        result: i32,
        dest_host: String,
        message: String,
        retryable: bool,
    ) -> Result<InstanceResult, ProtocolError> {
        let dest_host_field = match field {
            "instance_reconciled" => "instance_reconciled.dest_host",
            _ => "instance_finished.dest_host",
        };
        let note = (!message.trim().is_empty()).then(|| cut(message.clone()));
        Ok(match pb::InstanceResult::try_from(result) {
            Ok(pb::InstanceResult::Succeeded) => InstanceResult::Succeeded {
                dest_host: self.optional_name(dest_host_field, dest_host)?,
                note,
            },
            Ok(pb::InstanceResult::Failed) => InstanceResult::Failed {
                message: cut(message),
                retryable,
            },
            Ok(pb::InstanceResult::Ignored) => InstanceResult::Ignored {
                message: cut(message),
            },
            Ok(pb::InstanceResult::Unspecified) | Err(_) => {
                return Err(ProtocolError::UnknownValue {
                    sequence: self.0,
                    field: match field {
                        "instance_reconciled" => "instance_reconciled.result",
                        _ => "instance_finished.result",
                    },
                    value: result.to_string(),
                });
            }
        })
    }
}

/// The API's form of an engine event of run `run_id`.
pub fn run_event(run_id: &str, message: pb::RunEvent) -> Result<SequencedEvent, ProtocolError> {
    use pb::run_event::Body;
    let sequence = message.sequence;
    if sequence == 0 {
        return Err(ProtocolError::ZeroSequence);
    }
    if message.run_id != run_id {
        return Err(ProtocolError::WrongRun {
            sequence,
            got: message.run_id,
            expected: run_id.to_owned(),
        });
    }
    let c = Checker(sequence);
    let body = message.body.ok_or(ProtocolError::Missing {
        sequence,
        field: "body",
    })?;
    let event = match body {
        Body::Plan(plan) => RunEvent::Plan(
            plan.instances
                .into_iter()
                .map(|p| {
                    let vmove_type = match public::VmoveType::try_from(p.r#type) {
                        Ok(public::VmoveType::Evacuation) => VMoveType::Evacuation,
                        Ok(public::VmoveType::Migration) => VMoveType::Migration,
                        Ok(public::VmoveType::LiveMigration) => VMoveType::LiveMigration,
                        Ok(public::VmoveType::Restart) => VMoveType::Restart,
                        Ok(public::VmoveType::Unspecified) | Err(_) => {
                            return Err(ProtocolError::UnknownValue {
                                sequence,
                                field: "plan.instances.type",
                                value: p.r#type.to_string(),
                            });
                        }
                    };
                    Ok(PlannedInstance {
                        instance_id: c.name("plan.instances.instance_id", p.instance_id)?,
                        instance_name: c
                            .optional_name("plan.instances.instance_name", p.instance_name)?
                            .unwrap_or_default(),
                        source_host: c
                            .optional_name("plan.instances.source_host", p.source_host)?
                            .unwrap_or_default(),
                        vmove_type,
                    })
                })
                .collect::<Result<_, _>>()?,
        ),
        Body::InstanceStarted(e) => RunEvent::InstanceStarted {
            instance_id: c.name("instance_started.instance_id", e.instance_id)?,
            at: c.time("instance_started.time", e.time)?,
        },
        Body::InstanceStep(e) => RunEvent::InstanceStep {
            instance_id: c.name("instance_step.instance_id", e.instance_id)?,
            step: c.name("instance_step.step", e.step)?,
            message: cut(e.message),
            at: c.time("instance_step.time", e.time)?,
        },
        Body::InstanceFinished(e) => {
            let result = c.result(
                "instance_finished",
                e.result,
                e.dest_host,
                e.message,
                e.retryable,
            )?;
            RunEvent::InstanceFinished {
                instance_id: c.name("instance_finished.instance_id", e.instance_id)?,
                result,
                start: e
                    .start_time
                    .and_then(|t| c.time("instance_finished.start_time", Some(t)).ok()),
                end: c.time("instance_finished.end_time", e.end_time)?,
            }
        }
        Body::Progress(e) => RunEvent::Progress {
            state: match public::ProgressState::try_from(e.state) {
                Ok(public::ProgressState::Started) => ProgressState::Started,
                Ok(public::ProgressState::Succeeded) => ProgressState::Succeeded,
                Ok(public::ProgressState::Failed) => ProgressState::Failed,
                Ok(public::ProgressState::Skipped) => ProgressState::Skipped,
                Ok(public::ProgressState::Info) => ProgressState::Info,
                Ok(public::ProgressState::Unspecified) | Err(_) => {
                    return Err(ProtocolError::UnknownValue {
                        sequence,
                        field: "progress.state",
                        value: e.state.to_string(),
                    });
                }
            },
            task: c.name("progress.task", e.task)?,
            message: cut(e.message),
            at: c.time("progress.time", e.time)?,
            instance_id: c.optional_name("progress.instance_id", e.instance_id)?,
        },
        Body::LockChanged(e) => RunEvent::LockChanged {
            instance_id: c.name("lock_changed.instance_id", e.instance_id)?,
            locked: e.locked,
            at: c.time("lock_changed.time", e.time)?,
        },
        Body::InstanceReconciled(e) => RunEvent::InstanceReconciled {
            instance_id: c.name("instance_reconciled.instance_id", e.instance_id)?,
            result: c.result(
                "instance_reconciled",
                e.result,
                e.dest_host,
                e.message,
                e.retryable,
            )?,
            at: c.time("instance_reconciled.time", e.time)?,
        },
        Body::HostUpdate(e) => RunEvent::HostUpdate {
            hostname: c.name("host_update.hostname", e.hostname)?,
            on_maintenance: e.on_maintenance,
            reserved: e.reserved,
        },
        Body::Done(e) => {
            let message = cut(e.message);
            RunEvent::Done(match pb::RunOutcome::try_from(e.outcome) {
                Ok(pb::RunOutcome::Completed) => RunOutcome::Completed { message },
                Ok(pb::RunOutcome::Failed) => RunOutcome::Failed {
                    message,
                    retryable: e.retryable,
                },
                Ok(pb::RunOutcome::Ignored) => RunOutcome::Ignored { message },
                Ok(pb::RunOutcome::Cancelled) => RunOutcome::Cancelled { message },
                Ok(pb::RunOutcome::Unspecified) | Err(_) => {
                    return Err(ProtocolError::UnknownValue {
                        sequence,
                        field: "done.outcome",
                        value: e.outcome.to_string(),
                    });
                }
            })
        }
    };
    Ok(SequencedEvent { sequence, event })
}

/// The `StartRun` of a run.
pub fn start_run(start: &StartRun) -> pb::RecoverRequest {
    let StartRun {
        claim,
        notification,
        context,
    } = start;
    pb::RecoverRequest {
        body: Some(pb::recover_request::Body::StartRun(pb::StartRun {
            run_id: claim.run_id.clone(),
            attempt: claim.attempt,
            notification: Some(pb::Notification {
                id: notification.id.to_string(),
                r#type: notification_type(notification.notification_type) as i32,
                hostname: notification.hostname.clone(),
                payload: notification.payload.clone().into_iter().collect(),
                generated_time: Some(instanceha_proto::time::timestamp(
                    notification.generated_time,
                )),
            }),
            segment: Some(pb::Segment {
                id: context.segment.id.to_string(),
                name: context.segment.name.clone(),
                recovery_method: recovery_method(context.segment.recovery_method) as i32,
                service_type: context.segment.service_type.clone(),
            }),
            reserved_hosts: context
                .reserved_hosts
                .iter()
                .map(|h| pb::ReservedHost {
                    id: h.id.to_string(),
                    name: h.name.clone(),
                })
                .collect(),
            kind: run_kind(claim.kind) as i32,
            instances: context
                .instances
                .iter()
                .map(|r| pb::InstanceRef {
                    instance_id: r.instance_id.clone(),
                    instance_name: r.instance_name.clone(),
                    source_host: r.source_host.clone(),
                })
                .collect(),
        })),
    }
}

fn run_kind(kind: RunKind) -> pb::RunKind {
    match kind {
        RunKind::Recover => pb::RunKind::Recover,
        RunKind::Reconcile => pb::RunKind::Reconcile,
        RunKind::ReleaseLocks => pb::RunKind::ReleaseLocks,
    }
}

fn notification_type(t: NotificationType) -> public::NotificationType {
    match t {
        NotificationType::ComputeHost => public::NotificationType::ComputeHost,
        NotificationType::Process => public::NotificationType::Process,
        NotificationType::Vm => public::NotificationType::Vm,
    }
}

fn recovery_method(m: RecoveryMethod) -> public::RecoveryMethod {
    match m {
        RecoveryMethod::Auto => public::RecoveryMethod::Auto,
        RecoveryMethod::ReservedHost => public::RecoveryMethod::ReservedHost,
        RecoveryMethod::AutoPriority => public::RecoveryMethod::AutoPriority,
        RecoveryMethod::RhPriority => public::RecoveryMethod::RhPriority,
    }
}

pub fn ack(sequence: u64) -> pb::RecoverRequest {
    pb::RecoverRequest {
        body: Some(pb::recover_request::Body::Ack(pb::Ack { sequence })),
    }
}

pub fn cancel(reason: &str) -> pb::RecoverRequest {
    pb::RecoverRequest {
        body: Some(pb::recover_request::Body::Cancel(pb::Cancel {
            reason: reason.to_owned(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn malformed_events_are_protocol_errors() {
        let wrong_run = pb::RunEvent {
            run_id: "other".into(),
            ..event(pb::run_event::Body::Done(pb::Done::default()))
        };
        assert!(matches!(
            run_event("r", wrong_run),
            Err(ProtocolError::WrongRun { .. })
        ));
        let no_id = event(pb::run_event::Body::InstanceStarted(pb::InstanceStarted {
            instance_id: String::new(),
            time: now(),
        }));
        assert_eq!(
            run_event("r", no_id),
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
            run_event("r", bad_outcome),
            Err(ProtocolError::UnknownValue {
                field: "done.outcome",
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
            run_event("r", huge),
            Err(ProtocolError::TooLong { .. })
        ));
        let zero = pb::RunEvent {
            sequence: 0,
            ..event(pb::run_event::Body::Done(pb::Done::default()))
        };
        assert_eq!(run_event("r", zero), Err(ProtocolError::ZeroSequence));
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
        let SequencedEvent { event, .. } = run_event("r", failed).unwrap();
        let RunEvent::InstanceFinished {
            result: InstanceResult::Failed { message, .. },
            ..
        } = event
        else {
            panic!("not a failure");
        };
        assert_eq!(message.chars().count(), MAX_MESSAGE);
    }
}
