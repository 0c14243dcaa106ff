//! A recovery run as the API sees it: the engine's events, validated and
//! in plain Rust, ready to be persisted.

use chrono::{DateTime, Utc};

use super::{Host, Notification, NotificationId, ProgressState, Segment, VMoveType};
use crate::status::RunOutcome;

/// An instance the engine will recover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedInstance {
    pub instance_id: String,
    pub instance_name: String,
    pub source_host: String,
    pub vmove_type: VMoveType,
}

/// One instance's final result, as the engine reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstanceResult {
    Succeeded { dest_host: Option<String> },
    Failed { message: String },
    Ignored { message: String },
}

/// What the engine reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEvent {
    Plan(Vec<PlannedInstance>),
    InstanceStarted {
        instance_id: String,
        at: DateTime<Utc>,
    },
    InstanceStep {
        instance_id: String,
        step: String,
        message: String,
        at: DateTime<Utc>,
    },
    InstanceFinished {
        instance_id: String,
        result: InstanceResult,
        start: Option<DateTime<Utc>>,
        end: DateTime<Utc>,
    },
    Progress {
        task: String,
        state: ProgressState,
        message: String,
        at: DateTime<Utc>,
        instance_id: Option<String>,
    },
    HostUpdate {
        hostname: String,
        on_maintenance: Option<bool>,
        reserved: Option<bool>,
    },
    Done(RunOutcome),
}

/// An event with its place in the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequencedEvent {
    pub sequence: u64,
    pub event: RunEvent,
}

/// An instance still without a result, to recover again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceRef {
    pub instance_id: String,
    pub instance_name: String,
    pub source_host: String,
}

/// A run the dispatcher has claimed: everything the engine needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunClaim {
    pub notification_id: NotificationId,
    pub run_id: String,
    pub attempt: u32,
    pub trace_context: Option<String>,
}

/// What a run's `StartRun` carries besides the claim: the segment, its
/// reserved hosts when the recovery method uses them, and on a retry the
/// instances still without a result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunContext {
    pub segment: Segment,
    pub reserved_hosts: Vec<Host>,
    pub retry: Vec<InstanceRef>,
}

/// Everything the engine is told when a run starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartRun {
    pub claim: RunClaim,
    pub notification: Notification,
    pub context: RunContext,
}
