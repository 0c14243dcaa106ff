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
    /// On `dest_host`; `note` says what else happened.
    Succeeded {
        dest_host: Option<String>,
        note: Option<String>,
    },
    /// Not recovered; `retryable` when the cause may pass.
    Failed {
        message: String,
        retryable: bool,
    },
    Ignored {
        message: String,
    },
}

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunKind {
    /// Recover the notification's instances (or, on a retry, those named).
    Recover,
    /// Read the named instances' truth from Nova, release this
    /// notification's locks; before the final verdict.
    Reconcile,
    /// Release this (ended) notification's locks on the named instances.
    ReleaseLocks,
}

impl RunKind {
    pub const ALL: [RunKind; 3] = [Self::Recover, Self::Reconcile, Self::ReleaseLocks];

    /// The name stored with the notification.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Recover => "recover",
            Self::Reconcile => "reconcile",
            Self::ReleaseLocks => "release_locks",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
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
    /// The engine took (or found its own) lock on the instance, or
    /// released it.
    LockChanged {
        instance_id: String,
        locked: bool,
        at: DateTime<Utc>,
    },
    /// What Nova says of the instance (a reconcile run).
    InstanceReconciled {
        instance_id: String,
        result: InstanceResult,
        at: DateTime<Utc>,
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
    pub kind: RunKind,
    pub attempt: u32,
    pub trace_context: Option<String>,
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
}

/// Everything the engine is told when a run starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartRun {
    pub claim: RunClaim,
    pub notification: Notification,
    pub context: RunContext,
}
