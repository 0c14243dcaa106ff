//! A recovery run as the API sees it: its claim, and what its start tells
//! the engine. The run protocol's own types (the events, the instances,
//! the start) are `instanceha_proto::run`'s, shared with the engine.

use chrono::{DateTime, Utc};

use super::{Host, Notification, NotificationId, Segment};

pub use instanceha_proto::run::{
    InstanceId, InstanceRef, InstanceResult, PlannedInstance, PriorState, RunEvent, RunId, RunKind,
    SequencedEvent, StartRun,
};

/// A run the dispatcher has claimed: everything the engine needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunClaim {
    pub notification_id: NotificationId,
    pub run_id: RunId,
    pub kind: RunKind,
    pub attempt: u32,
    pub trace_context: Option<String>,
    /// When the run is to be cancelled before its timeout, and why (the
    /// retry window closes, or the verdict deadline passes).
    pub cancel_at: Option<(DateTime<Utc>, &'static str)>,
}

/// What a run's `StartRun` carries besides the claim: the segment, its
/// reserved hosts when the recovery method uses them, and the instances
/// it is about (a retry's, a reconcile's, a lock release's; empty for a
/// first recovery, which plans afresh).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunContext {
    pub segment: Segment,
    pub reserved_hosts: Vec<Host>,
    pub instances: Vec<InstanceRef>,
    /// A STARTED report brings its host back to service
    /// (`lifecycle::hosts::returns_to_service`).
    pub return_to_service: bool,
}

impl RunContext {
    /// What the engine is told when run `claim` of `notification` starts.
    pub fn start(self, claim: &RunClaim, notification: &Notification) -> StartRun {
        StartRun {
            run_id: claim.run_id.clone(),
            attempt: claim.attempt,
            run_kind: claim.kind,
            notification_id: notification.id.to_string(),
            notification_type: notification.notification_type,
            hostname: notification.hostname.clone(),
            payload: notification.payload.clone(),
            generated_time: Some(notification.generated_time),
            segment_id: self.segment.id.to_string(),
            segment_name: self.segment.name,
            recovery_method: self.segment.recovery_method,
            service_type: self.segment.service_type,
            reserved_hosts: self
                .reserved_hosts
                .into_iter()
                .map(|h| instanceha_proto::run::ReservedHost {
                    id: h.id.to_string(),
                    name: h.name,
                })
                .collect(),
            instances: self.instances,
            return_to_service: self.return_to_service,
        }
    }
}
