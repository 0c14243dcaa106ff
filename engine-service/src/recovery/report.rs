//! What a recovery run tells the API, as plain Rust events, and the
//! reporter that queues them for the link in order.

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

/// How an instance is recovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VMoveType {
    Evacuation,
    Restart,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedInstance {
    pub instance_id: String,
    pub instance_name: String,
    pub source_host: String,
    pub kind: VMoveType,
}

/// One instance's final result in a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstanceResult {
    /// Running (or stopped, as before) on `dest_host`; `note` says what
    /// else happened (left locked, found recovered by an earlier run).
    Succeeded {
        dest_host: Option<String>,
        note: Option<String>,
    },
    /// Not recovered: the step and the cause; `retryable` when the cause
    /// may pass (Nova unavailable, a timeout), so another run may succeed.
    Failed {
        message: String,
        retryable: bool,
    },
    Ignored {
        message: String,
    },
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

/// The workflow's own verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    Completed { message: String },
    Failed { message: String, retryable: bool },
    Ignored { message: String },
    Cancelled { message: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressState {
    Started,
    Succeeded,
    Failed,
    Skipped,
    Info,
}

impl ProgressState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Info => "info",
        }
    }
}

/// An event of a run, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEvent {
    Plan(Vec<PlannedInstance>),
    InstanceStarted {
        instance_id: String,
        at: DateTime<Utc>,
    },
    InstanceStep {
        instance_id: String,
        step: &'static str,
        message: String,
        at: DateTime<Utc>,
    },
    InstanceFinished {
        instance_id: String,
        outcome: InstanceResult,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    },
    Progress {
        task: &'static str,
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

/// Queues a run's events for the link. Sending never waits; if the link is
/// gone (the API left), events are dropped and the run is being cancelled.
#[derive(Clone, Debug)]
pub struct Reporter {
    tx: mpsc::UnboundedSender<RunEvent>,
}

impl Reporter {
    pub fn new() -> (Self, mpsc::UnboundedReceiver<RunEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }

    fn send(&self, event: RunEvent) {
        let _ = self.tx.send(event);
    }

    pub fn plan(&self, instances: Vec<PlannedInstance>) {
        self.send(RunEvent::Plan(instances));
    }

    pub fn instance_started(&self, instance_id: &str, at: DateTime<Utc>) {
        self.send(RunEvent::InstanceStarted {
            instance_id: instance_id.to_owned(),
            at,
        });
    }

    pub fn step(&self, instance_id: &str, step: &'static str, message: impl Into<String>) {
        self.send(RunEvent::InstanceStep {
            instance_id: instance_id.to_owned(),
            step,
            message: message.into(),
            at: Utc::now(),
        });
    }

    pub fn instance_finished(
        &self,
        instance_id: &str,
        outcome: InstanceResult,
        start: DateTime<Utc>,
    ) {
        self.send(RunEvent::InstanceFinished {
            instance_id: instance_id.to_owned(),
            outcome,
            start,
            end: Utc::now(),
        });
    }

    pub fn progress(&self, task: &'static str, state: ProgressState, message: impl Into<String>) {
        self.send(RunEvent::Progress {
            task,
            state,
            message: message.into(),
            at: Utc::now(),
            instance_id: None,
        });
    }

    pub fn host_update(
        &self,
        hostname: &str,
        on_maintenance: Option<bool>,
        reserved: Option<bool>,
    ) {
        self.send(RunEvent::HostUpdate {
            hostname: hostname.to_owned(),
            on_maintenance,
            reserved,
        });
    }

    pub fn lock_changed(&self, instance_id: &str, locked: bool) {
        self.send(RunEvent::LockChanged {
            instance_id: instance_id.to_owned(),
            locked,
            at: Utc::now(),
        });
    }

    pub fn reconciled(&self, instance_id: &str, result: InstanceResult) {
        self.send(RunEvent::InstanceReconciled {
            instance_id: instance_id.to_owned(),
            result,
            at: Utc::now(),
        });
    }

    pub fn done(&self, outcome: RunOutcome) {
        self.send(RunEvent::Done(outcome));
    }
}
