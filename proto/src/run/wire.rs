//! The run protocol's one conversion between its plain types and the
//! `instanceha.engine.v1` messages, both ways, with exhaustive matches.
//! What the engine sends is checked on the way in: a malformed event is a
//! [`ProtocolError`] naming the event and the field, never a half-read
//! record; over-long messages are cut, not refused.

use chrono::{DateTime, Utc};

use super::{
    InstanceId, InstanceRef, InstanceResult, NotificationType, PlannedInstance, PriorState,
    ProgressState, RecoveryMethod, ReservedHost, RunEvent, RunId, RunKind, RunOutcome,
    SequencedEvent, StartRun, VMoveType,
};
use crate::ConversionError;
use crate::engine::v1 as pb;

/// Longest message kept from the engine; longer ones are cut.
pub const MAX_MESSAGE: usize = 4096;
/// Longest identifier, step or task name.
pub const MAX_NAME: usize = 255;

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

/// `text` cut to [`MAX_MESSAGE`] characters.
fn cut(text: String) -> String {
    if text.chars().count() <= MAX_MESSAGE {
        text
    } else {
        let mut cut: String = text.chars().take(MAX_MESSAGE - 1).collect();
        cut.push('…');
        cut
    }
}

/// Reads the fields of event number `.0`.
struct Checker(u64);

impl Checker {
    fn conversion(&self, e: ConversionError) -> ProtocolError {
        let sequence = self.0;
        match e {
            ConversionError::MissingField(field) => ProtocolError::Missing { sequence, field },
            ConversionError::InvalidData { field, reason } => ProtocolError::UnknownValue {
                sequence,
                field,
                value: reason,
            },
            ConversionError::UnexpectedEnumVariant { field, value } => {
                ProtocolError::UnknownValue {
                    sequence,
                    field,
                    value: value.to_string(),
                }
            }
        }
    }

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

    fn instance(&self, field: &'static str, value: String) -> Result<InstanceId, ProtocolError> {
        self.name(field, value).map(InstanceId::from)
    }

    fn time(
        &self,
        field: &'static str,
        value: Option<prost_types::Timestamp>,
    ) -> Result<DateTime<Utc>, ProtocolError> {
        crate::time::required(field, value).map_err(|e| self.conversion(e))
    }

    /// An instance's result (`field` names its message and result field).
    fn result(
        &self,
        fields: ResultFields,
        result: i32,
        dest_host: String,
        message: String,
        retryable: bool,
    ) -> Result<InstanceResult, ProtocolError> {
        let note = (!message.trim().is_empty()).then(|| cut(message.clone()));
        Ok(match pb::InstanceResult::try_from(result) {
            Ok(pb::InstanceResult::Succeeded) => InstanceResult::Succeeded {
                dest_host: self.optional_name(fields.dest_host, dest_host)?,
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
                    field: fields.result,
                    value: result.to_string(),
                });
            }
        })
    }

    fn planned(&self, p: pb::PlannedInstance) -> Result<PlannedInstance, ProtocolError> {
        Ok(PlannedInstance {
            vmove_type: VMoveType::from_wire("plan.instances.type", p.r#type)
                .map_err(|e| self.conversion(e))?,
            prior_state: prior_state("plan.instances.prior_state", p.prior_state)
                .map_err(|e| self.conversion(e))?,
            instance_id: self.instance("plan.instances.instance_id", p.instance_id)?,
            instance_name: self
                .optional_name("plan.instances.instance_name", p.instance_name)?
                .unwrap_or_default(),
            source_host: self
                .optional_name("plan.instances.source_host", p.source_host)?
                .unwrap_or_default(),
        })
    }
}

/// The names of a result's fields in the message that carries it.
struct ResultFields {
    result: &'static str,
    dest_host: &'static str,
}

const FINISHED: ResultFields = ResultFields {
    result: "instance_finished.result",
    dest_host: "instance_finished.dest_host",
};
const RECONCILED: ResultFields = ResultFields {
    result: "instance_reconciled.result",
    dest_host: "instance_reconciled.dest_host",
};

fn prior_state(field: &'static str, value: i32) -> Result<Option<PriorState>, ConversionError> {
    match pb::PriorState::try_from(value) {
        Ok(pb::PriorState::Unspecified) => Ok(None),
        Ok(pb::PriorState::Active) => Ok(Some(PriorState::Active)),
        Ok(pb::PriorState::Stopped) => Ok(Some(PriorState::Stopped)),
        Ok(pb::PriorState::Error) => Ok(Some(PriorState::Error)),
        Err(_) => Err(ConversionError::UnexpectedEnumVariant { field, value }),
    }
}

fn prior_state_wire(state: Option<PriorState>) -> i32 {
    (match state {
        None => pb::PriorState::Unspecified,
        Some(PriorState::Active) => pb::PriorState::Active,
        Some(PriorState::Stopped) => pb::PriorState::Stopped,
        Some(PriorState::Error) => pb::PriorState::Error,
    }) as i32
}

fn run_kind(kind: RunKind) -> pb::RunKind {
    match kind {
        RunKind::Recover => pb::RunKind::Recover,
        RunKind::Reconcile => pb::RunKind::Reconcile,
        RunKind::ReleaseLocks => pb::RunKind::ReleaseLocks,
    }
}

impl SequencedEvent {
    /// Reads an event of run `run_id` as the engine sent it.
    pub fn from_wire(run_id: &RunId, message: pb::RunEvent) -> Result<Self, ProtocolError> {
        let sequence = message.sequence;
        if sequence == 0 {
            return Err(ProtocolError::ZeroSequence);
        }
        if message.run_id != run_id.as_str() {
            return Err(ProtocolError::WrongRun {
                sequence,
                got: message.run_id,
                expected: run_id.to_string(),
            });
        }
        let body = message.body.ok_or(ProtocolError::Missing {
            sequence,
            field: "body",
        })?;
        let event = Checker(sequence).event(body)?;
        Ok(Self { sequence, event })
    }

    /// The wire form of the event, of run `run_id`.
    pub fn to_wire(self, run_id: &RunId) -> pb::RunEvent {
        pb::RunEvent {
            sequence: self.sequence,
            run_id: run_id.to_string(),
            body: Some(body(self.event)),
        }
    }
}

impl Checker {
    fn event(&self, body: pb::run_event::Body) -> Result<RunEvent, ProtocolError> {
        use pb::run_event::Body;
        Ok(match body {
            Body::Plan(plan) => RunEvent::Plan(
                plan.instances
                    .into_iter()
                    .map(|p| self.planned(p))
                    .collect::<Result<_, _>>()?,
            ),
            Body::InstanceStarted(e) => RunEvent::InstanceStarted {
                instance_id: self.instance("instance_started.instance_id", e.instance_id)?,
                at: self.time("instance_started.time", e.time)?,
            },
            Body::InstanceStep(e) => RunEvent::InstanceStep {
                instance_id: self.instance("instance_step.instance_id", e.instance_id)?,
                step: self.name("instance_step.step", e.step)?,
                message: cut(e.message),
                at: self.time("instance_step.time", e.time)?,
            },
            Body::InstanceFinished(e) => RunEvent::InstanceFinished {
                result: self.result(FINISHED, e.result, e.dest_host, e.message, e.retryable)?,
                instance_id: self.instance("instance_finished.instance_id", e.instance_id)?,
                // An unreadable start time is dropped: the vmove keeps the
                // one its start event gave.
                start: e
                    .start_time
                    .and_then(|t| self.time("instance_finished.start_time", Some(t)).ok()),
                end: self.time("instance_finished.end_time", e.end_time)?,
            },
            Body::Progress(e) => RunEvent::Progress {
                state: ProgressState::from_wire("progress.state", e.state)
                    .map_err(|e| self.conversion(e))?,
                task: self.name("progress.task", e.task)?,
                message: cut(e.message),
                at: self.time("progress.time", e.time)?,
                instance_id: self
                    .optional_name("progress.instance_id", e.instance_id)?
                    .map(InstanceId::from),
            },
            Body::LockChanged(e) => RunEvent::LockChanged {
                instance_id: self.instance("lock_changed.instance_id", e.instance_id)?,
                locked: e.locked,
                at: self.time("lock_changed.time", e.time)?,
            },
            Body::InstanceReconciled(e) => RunEvent::InstanceReconciled {
                instance_id: self.instance("instance_reconciled.instance_id", e.instance_id)?,
                result: self.result(RECONCILED, e.result, e.dest_host, e.message, e.retryable)?,
                at: self.time("instance_reconciled.time", e.time)?,
            },
            Body::HostUpdate(e) => RunEvent::HostUpdate {
                hostname: self.name("host_update.hostname", e.hostname)?,
                on_maintenance: e.on_maintenance,
                reserved: e.reserved,
            },
            Body::Done(e) => RunEvent::Done(self.outcome(e)?),
        })
    }

    fn outcome(&self, e: pb::Done) -> Result<RunOutcome, ProtocolError> {
        let message = cut(e.message);
        Ok(match pb::RunOutcome::try_from(e.outcome) {
            Ok(pb::RunOutcome::Completed) => RunOutcome::Completed { message },
            Ok(pb::RunOutcome::Failed) => RunOutcome::Failed {
                message,
                retryable: e.retryable,
            },
            Ok(pb::RunOutcome::Ignored) => RunOutcome::Ignored { message },
            Ok(pb::RunOutcome::Cancelled) => RunOutcome::Cancelled { message },
            Ok(pb::RunOutcome::Unspecified) | Err(_) => {
                return Err(ProtocolError::UnknownValue {
                    sequence: self.0,
                    field: "done.outcome",
                    value: e.outcome.to_string(),
                });
            }
        })
    }
}

fn timestamp(at: DateTime<Utc>) -> Option<prost_types::Timestamp> {
    Some(crate::time::timestamp(at))
}

/// An instance result's wire fields.
struct WireResult {
    result: pb::InstanceResult,
    dest_host: String,
    message: String,
    retryable: bool,
}

fn wire_result(result: InstanceResult) -> WireResult {
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

fn body(event: RunEvent) -> pb::run_event::Body {
    use pb::run_event::Body;
    match event {
        RunEvent::Plan(instances) => Body::Plan(pb::Plan {
            instances: instances
                .into_iter()
                .map(|i| pb::PlannedInstance {
                    instance_id: i.instance_id.into_string(),
                    instance_name: i.instance_name,
                    source_host: i.source_host,
                    r#type: i32::from(i.vmove_type),
                    prior_state: prior_state_wire(i.prior_state),
                })
                .collect(),
        }),
        RunEvent::InstanceStarted { instance_id, at } => {
            Body::InstanceStarted(pb::InstanceStarted {
                instance_id: instance_id.into_string(),
                time: timestamp(at),
            })
        }
        RunEvent::InstanceStep {
            instance_id,
            step,
            message,
            at,
        } => Body::InstanceStep(pb::InstanceStep {
            instance_id: instance_id.into_string(),
            step,
            message,
            time: timestamp(at),
        }),
        RunEvent::InstanceFinished {
            instance_id,
            result,
            start,
            end,
        } => {
            let wire = wire_result(result);
            Body::InstanceFinished(pb::InstanceFinished {
                instance_id: instance_id.into_string(),
                result: wire.result as i32,
                dest_host: wire.dest_host,
                start_time: start.and_then(timestamp),
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
            instance_id: instance_id.into_string(),
            locked,
            time: timestamp(at),
        }),
        RunEvent::InstanceReconciled {
            instance_id,
            result,
            at,
        } => {
            let wire = wire_result(result);
            Body::InstanceReconciled(pb::InstanceReconciled {
                instance_id: instance_id.into_string(),
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
            task,
            state: i32::from(state),
            message,
            time: timestamp(at),
            instance_id: instance_id.map(InstanceId::into_string).unwrap_or_default(),
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
    }
}

impl From<StartRun> for pb::StartRun {
    fn from(start: StartRun) -> Self {
        pb::StartRun {
            run_id: start.run_id.into_string(),
            attempt: start.attempt,
            notification: Some(pb::Notification {
                id: start.notification_id,
                r#type: i32::from(start.notification_type),
                hostname: start.hostname,
                payload: start.payload.into_iter().collect(),
                generated_time: start.generated_time.and_then(timestamp),
            }),
            segment: Some(pb::Segment {
                id: start.segment_id,
                name: start.segment_name,
                recovery_method: i32::from(start.recovery_method),
                service_type: start.service_type,
            }),
            reserved_hosts: start
                .reserved_hosts
                .into_iter()
                .map(|h| pb::ReservedHost {
                    id: h.id,
                    name: h.name,
                })
                .collect(),
            instances: start
                .instances
                .into_iter()
                .map(|r| pb::InstanceRef {
                    instance_id: r.instance_id.into_string(),
                    instance_name: r.instance_name,
                    source_host: r.source_host,
                    prior_state: prior_state_wire(r.prior_state),
                })
                .collect(),
            kind: run_kind(start.run_kind) as i32,
        }
    }
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
        let instances = start
            .instances
            .into_iter()
            .map(|i| {
                if i.instance_id.is_empty() {
                    return Err(ConversionError::MissingField(
                        "start_run.instances.instance_id",
                    ));
                }
                Ok(InstanceRef {
                    prior_state: prior_state("start_run.instances.prior_state", i.prior_state)?,
                    instance_id: InstanceId::from(i.instance_id),
                    instance_name: i.instance_name,
                    source_host: i.source_host,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(StartRun {
            run_id: RunId::from(start.run_id),
            attempt: start.attempt.max(1),
            run_kind,
            notification_id: notification.id,
            notification_type: NotificationType::from_wire(
                "start_run.notification.type",
                notification.r#type,
            )?,
            hostname: notification.hostname,
            payload: notification.payload.into_iter().collect(),
            generated_time: crate::time::optional(
                "start_run.notification.generated_time",
                notification.generated_time,
            )?,
            segment_id: segment.id,
            segment_name: segment.name,
            recovery_method: RecoveryMethod::from_wire(
                "start_run.segment.recovery_method",
                segment.recovery_method,
            )?,
            service_type: segment.service_type,
            reserved_hosts: start
                .reserved_hosts
                .into_iter()
                .map(|h| ReservedHost {
                    id: h.id,
                    name: h.name,
                })
                .collect(),
            instances,
        })
    }
}

/// The API's request to start `start`.
pub fn start_request(start: StartRun) -> pb::RecoverRequest {
    pb::RecoverRequest {
        body: Some(pb::recover_request::Body::StartRun(start.into())),
    }
}

/// The API's acknowledgement of every event up to `sequence`.
pub fn ack(sequence: u64) -> pb::RecoverRequest {
    pb::RecoverRequest {
        body: Some(pb::recover_request::Body::Ack(pb::Ack { sequence })),
    }
}

/// The API's request to stop the run, saying why.
pub fn cancel(reason: &str) -> pb::RecoverRequest {
    pb::RecoverRequest {
        body: Some(pb::recover_request::Body::Cancel(pb::Cancel {
            reason: reason.to_owned(),
        })),
    }
}

#[cfg(test)]
mod tests;
