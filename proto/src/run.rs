//! The run protocol between `instanceha-api` and `instanceha-engine`, as
//! plain Rust: what a run is asked to do ([`StartRun`]), the events the
//! engine reports ([`RunEvent`]) and their one conversion to and from the
//! wire ([`wire`]). The API and the engine both use these types; neither
//! declares its own.

pub mod wire;

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};

pub use crate::model::{NotificationType, ProgressState, RecoveryMethod, VMoveType};

/// Declares a string newtype for an identifier.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(String);

        impl $name {
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

id_type! {
    /// One run of a notification (a UUID the API makes at the claim).
    RunId
}

id_type! {
    /// A Nova server's id.
    InstanceId
}

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunKind {
    /// Recover the notification's instances (or, on a retry, those named).
    Recover,
    /// Read the named instances' truth from Nova and release this
    /// notification's locks, before the final verdict.
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

/// The state an instance was in before its host failed: what its recovery
/// puts it back to. Recorded with the plan at the first attempt and given
/// back on every retry, never inferred again from a state the recovery
/// itself may have caused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PriorState {
    Active,
    Stopped,
    /// In error before the failure: put back to error after it moved.
    Error,
}

impl PriorState {
    pub const ALL: [PriorState; 3] = [Self::Active, Self::Stopped, Self::Error];

    /// Nova's vm_state name (also stored with the vmove).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Stopped => "stopped",
            Self::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for PriorState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An instance a plan announces; the API makes a vmove of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedInstance {
    pub instance_id: InstanceId,
    pub instance_name: String,
    pub source_host: String,
    pub vmove_type: VMoveType,
    /// Its state before the failure, when the engine could read it.
    pub prior_state: Option<PriorState>,
}

/// An instance named to a run (as on a retry), with the host it is
/// recovered from and its state before the failure as first recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceRef {
    pub instance_id: InstanceId,
    pub instance_name: String,
    pub source_host: String,
    pub prior_state: Option<PriorState>,
}

/// One instance's final result in a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstanceResult {
    /// Running (or stopped, as before) on `dest_host`; `note` says what
    /// else happened (left locked, found recovered by an earlier run, what
    /// Nova's truth decided).
    Succeeded {
        dest_host: Option<String>,
        note: Option<String>,
    },
    /// Not recovered: the step and the cause; `retryable` when the cause
    /// may pass (Nova unavailable, a timeout, a lost run).
    Failed { message: String, retryable: bool },
    /// Needs no recovery (deleted, by policy).
    Ignored { message: String },
}

impl InstanceResult {
    /// A success without anything else to say.
    pub fn succeeded(dest_host: Option<String>) -> Self {
        Self::Succeeded {
            dest_host,
            note: None,
        }
    }

    /// A failure whose cause Nova's state confirms: not worth another run.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed {
            message: message.into(),
            retryable: false,
        }
    }
}

/// The engine's closing word on a run: its workflow's own verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// The workflow ran; the per-instance results decide.
    Completed { message: String },
    /// The workflow failed around the instances.
    Failed { message: String, retryable: bool },
    /// Nothing to do by policy.
    Ignored { message: String },
    /// The run stopped after a cancel.
    Cancelled { message: String },
}

/// What the engine reports, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEvent {
    Plan(Vec<PlannedInstance>),
    InstanceStarted {
        instance_id: InstanceId,
        at: DateTime<Utc>,
    },
    /// The instance entered a recovery step (`lookup`, `lock`, `volumes`,
    /// `evacuate`, `verify`, `restore_state`, `unlock`...).
    InstanceStep {
        instance_id: InstanceId,
        step: String,
        message: String,
        at: DateTime<Utc>,
    },
    /// Exactly one per announced instance and run.
    InstanceFinished {
        instance_id: InstanceId,
        result: InstanceResult,
        start: Option<DateTime<Utc>>,
        end: DateTime<Utc>,
    },
    Progress {
        task: String,
        state: ProgressState,
        message: String,
        at: DateTime<Utc>,
        instance_id: Option<InstanceId>,
    },
    /// A change to one of the API's hosts (the failed host on maintenance,
    /// a reserved host taken into service).
    HostUpdate {
        hostname: String,
        on_maintenance: Option<bool>,
        reserved: Option<bool>,
    },
    /// The engine took (or found its own) lock on the instance, or
    /// released it.
    LockChanged {
        instance_id: InstanceId,
        locked: bool,
        at: DateTime<Utc>,
    },
    /// What Nova says of the instance (a reconcile run).
    InstanceReconciled {
        instance_id: InstanceId,
        result: InstanceResult,
        at: DateTime<Utc>,
    },
    Done(RunOutcome),
}

/// An event with its place in the run (1, 2, 3...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequencedEvent {
    pub sequence: u64,
    pub event: RunEvent,
}

impl StartRun {
    /// The names of the reserved hosts, in the order to try.
    pub fn reserved_host_names(&self) -> Vec<String> {
        self.reserved_hosts.iter().map(|h| h.name.clone()).collect()
    }
}

/// A reserved host a run may evacuate to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedHost {
    pub id: String,
    pub name: String,
}

/// What a run is asked to do: everything the engine is told when it
/// starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartRun {
    pub run_id: RunId,
    /// 1 for the notification's first run, then 2, 3...
    pub attempt: u32,
    pub run_kind: RunKind,
    pub notification_id: String,
    pub notification_type: NotificationType,
    /// The host the notification is about.
    pub hostname: String,
    pub payload: BTreeMap<String, String>,
    pub generated_time: Option<DateTime<Utc>>,
    pub segment_id: String,
    pub segment_name: String,
    pub recovery_method: RecoveryMethod,
    pub service_type: String,
    /// Reserved hosts of the segment, not on maintenance, in the order to
    /// try.
    pub reserved_hosts: Vec<ReservedHost>,
    /// For a recovery: on a retry, the instances to recover again (empty:
    /// plan afresh). For the other kinds: the instances to look at.
    pub instances: Vec<InstanceRef>,
    /// For a COMPUTE_HOST STARTED notification: bring the host back to
    /// service once its nova-compute reports (the segment returns hosts
    /// automatically and the host is not held, or an operator restored it).
    pub return_to_service: bool,
}
