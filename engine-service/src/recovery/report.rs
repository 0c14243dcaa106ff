//! The reporter that queues a run's events for the link, in order. The
//! events are the run protocol's (`instanceha_proto::run`), shared with the
//! API.

use chrono::{DateTime, Utc};
use instanceha_runtime::clock::Clock;
use tokio::sync::mpsc;

pub use instanceha_proto::run::{
    InstanceId, InstanceResult, PlannedInstance, PriorState, ProgressState, RunEvent, RunOutcome,
    VMoveType,
};

/// Queues a run's events for the link. Sending never waits; if the link is
/// gone (the API left), events are dropped and the run is being cancelled.
#[derive(Clone, Debug)]
pub struct Reporter {
    tx: mpsc::UnboundedSender<RunEvent>,
    /// Every event's time: the engine's clock (Tokio's in tests).
    clock: Clock,
}

impl Reporter {
    pub fn new(clock: Clock) -> (Self, mpsc::UnboundedReceiver<RunEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx, clock }, rx)
    }

    fn send(&self, event: RunEvent) {
        let _ = self.tx.send(event);
    }

    pub fn plan(&self, instances: Vec<PlannedInstance>) {
        self.send(RunEvent::Plan(instances));
    }

    pub fn instance_started(&self, instance_id: &str, at: DateTime<Utc>) {
        self.send(RunEvent::InstanceStarted {
            instance_id: instance_id.into(),
            at,
        });
    }

    pub fn step(&self, instance_id: &str, step: &'static str, message: impl Into<String>) {
        self.send(RunEvent::InstanceStep {
            instance_id: instance_id.into(),
            step: step.to_owned(),
            message: message.into(),
            at: self.clock.now(),
        });
    }

    pub fn instance_finished(
        &self,
        instance_id: &str,
        outcome: InstanceResult,
        start: DateTime<Utc>,
    ) {
        self.send(RunEvent::InstanceFinished {
            instance_id: instance_id.into(),
            result: outcome,
            start: Some(start),
            end: self.clock.now(),
        });
    }

    pub fn progress(&self, task: &'static str, state: ProgressState, message: impl Into<String>) {
        self.send(RunEvent::Progress {
            task: task.to_owned(),
            state,
            message: message.into(),
            at: self.clock.now(),
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
            instance_id: instance_id.into(),
            locked,
            at: self.clock.now(),
        });
    }

    pub fn reconciled(&self, instance_id: &str, result: InstanceResult) {
        self.send(RunEvent::InstanceReconciled {
            instance_id: instance_id.into(),
            result,
            at: self.clock.now(),
        });
    }

    pub fn done(&self, outcome: RunOutcome) {
        self.send(RunEvent::Done(outcome));
    }
}
