//! The start of a run on the wire: the API's `StartRun` and its other
//! requests (acknowledgements, cancellation), and the engine's reading of
//! `StartRun`, naming the field it cannot read.

use super::{prior_state, prior_state_wire, run_kind, timestamp};
use crate::ConversionError;
use crate::engine::v1 as pb;
use crate::run::{
    InstanceId, InstanceRef, NotificationType, RecoveryMethod, ReservedHost, RunId, RunKind,
    StartRun,
};

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
            return_to_service: start.return_to_service,
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
            return_to_service: start.return_to_service,
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
