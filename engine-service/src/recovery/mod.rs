//! Recovery runs: the host-, instance- and process-failure workflows,
//! performed against OpenStack step by step, each step's outcome reported.
//! No error escapes: every instance a run announces gets exactly one
//! result, even if its worker panics, and every run ends with `Done`.

mod devices;
mod evacuate;
mod failed_evacuation;
mod failed_host;
mod follow;
mod host;
mod lost;
mod migrations;
mod phases;
mod process;
mod reconcile;
mod repair;
pub mod report;
mod request;
mod reserved;
mod restore;
mod return_service;
mod services;
mod tiers;
mod vm;
mod volumes;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use report::{
    InstanceResult, PlannedInstance, ProgressState, Reporter, RunEvent, RunOutcome, VMoveType,
};

use crate::workflow::selection::SelectionRules;
use chrono::{DateTime, Utc};
use instanceha_runtime::clock::Clock;
use openstack_client::nova::Server;
use openstack_client::{self, OpenStack};

pub use instanceha_proto::run::{InstanceRef, NotificationType, RunKind, StartRun};

/// How the workflows behave (from the engine's configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowSettings {
    pub max_concurrent_instances: usize,
    pub poll_interval: Duration,
    pub migration_poll_interval: Duration,
    pub evacuation_timeout: Duration,
    /// An evacuation quiet this long is judged for loss (`workflow::stall`).
    pub stalled_evacuation_after: Duration,
    pub power_timeout: Duration,
    pub lock_reason_prefix: String,
    pub require_fencing: bool,
    pub force_down: bool,
    pub host_disable_reason: String,
    pub wait_after_service_update: Duration,
    pub service_down_timeout: Duration,
    /// How a segment's instances are chosen, unless it has its own rules.
    pub selection: SelectionRules,
    /// `[[host_failure.segment]]`: segments' own rules, by name.
    pub segment_selection: BTreeMap<String, SelectionRules>,
    pub add_reserved_host_to_aggregate: bool,
    pub clear_blocking_volume_attachments: bool,
    pub process_all_instances: bool,
    pub vm_ha_enabled_key: String,
    pub process_disable_reason: String,
    pub enable_on_process_started: bool,
}

impl WorkflowSettings {
    /// The rules choosing the instances of segment `segment`.
    pub fn selection_for(&self, segment: &str) -> &SelectionRules {
        self.segment_selection
            .get(segment)
            .unwrap_or(&self.selection)
    }
}

/// Runs recoveries. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Engine {
    openstack: OpenStack,
    settings: Arc<WorkflowSettings>,
    /// Instance workers calling OpenStack at once, across all runs (a
    /// worker lets go while Nova rebuilds its instance).
    capacity: Arc<Semaphore>,
    /// Instances in recovery across all runs.
    in_recovery: Arc<AtomicUsize>,
    /// The time of day, to compare with Nova's timestamps.
    clock: Clock,
    /// The host-failure phases for `/metrics`.
    phases: phases::PhaseMetrics,
}

/// The run was cancelled (the API asked, or went away).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cancelled;

impl Engine {
    pub fn new(openstack: OpenStack, settings: WorkflowSettings, total_capacity: usize) -> Self {
        Self {
            openstack,
            settings: Arc::new(settings),
            capacity: Arc::new(Semaphore::new(total_capacity.max(1))),
            in_recovery: Arc::default(),
            clock: Clock::system(),
            phases: phases::PhaseMetrics::from_meter(&opentelemetry::global::meter(
                "instanceha-engine",
            )),
        }
    }

    /// The same engine recording its metrics with `meter` instead of the
    /// global meter provider's (tests reading their own registry).
    pub fn with_meter(mut self, meter: &opentelemetry::metrics::Meter) -> Self {
        self.phases = phases::PhaseMetrics::from_meter(meter);
        self
    }

    /// The same engine reading the time of day from `clock` (tests on
    /// paused time give Tokio's, which the simulated cloud follows).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Where the engine's time of day comes from.
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    pub fn openstack(&self) -> &OpenStack {
        &self.openstack
    }

    pub fn settings(&self) -> &WorkflowSettings {
        &self.settings
    }

    /// Instances in recovery right now, across runs.
    pub fn instances_in_flight(&self) -> usize {
        self.in_recovery.load(Ordering::Relaxed)
    }

    /// Runs `request` to its end, reporting as it goes; always reports
    /// `Done` last.
    /// (Run it inside the run's span: the link creates it.)
    pub async fn run(&self, request: StartRun, reporter: Reporter, cancel: CancellationToken) {
        tracing::info!(kind = ?request.notification_type, "recovery run started");
        let run = Run {
            engine: self.clone(),
            request: Arc::new(request),
            reporter: reporter.clone(),
            cancel,
            evacuations: phases::EvacuationTimes::default(),
        };
        let started = self.clock.now();
        let outcome = match (run.request.run_kind, run.request.notification_type) {
            (RunKind::Recover, NotificationType::ComputeHost) => run.host_failure().await,
            (RunKind::Recover, NotificationType::Vm) => run.instance_failure().await,
            (RunKind::Recover, NotificationType::Process) => run.process_failure().await,
            (RunKind::Reconcile, _) => run.reconcile(true).await,
            (RunKind::ReleaseLocks, _) => run.reconcile(false).await,
        };
        tracing::info!(outcome = ?outcome, "recovery run ended");
        if (run.request.run_kind, run.request.notification_type)
            == (RunKind::Recover, NotificationType::ComputeHost)
        {
            self.phases
                .record(run.evacuations.phases(started, self.clock.now()));
        }
        match &outcome {
            RunOutcome::Failed { message, .. } | RunOutcome::Cancelled { message } => {
                instanceha_runtime::telemetry::record_error(&tracing::Span::current(), message);
            }
            RunOutcome::Completed { .. } | RunOutcome::Ignored { .. } => {}
        }
        reporter.done(outcome);
    }
}

/// How many 404s in a row prove that an instance was deleted.
const GONE_CONFIRMATIONS: u32 = 3;

/// One run in progress: what it needs, shared by its tasks.
#[derive(Clone)]
struct Run {
    engine: Engine,
    request: Arc<StartRun>,
    reporter: Reporter,
    cancel: CancellationToken,
    /// When Nova accepted the run's evacuations (its phases).
    evacuations: phases::EvacuationTimes,
}

impl Run {
    fn openstack(&self) -> &OpenStack {
        &self.engine.openstack
    }

    fn settings(&self) -> &WorkflowSettings {
        &self.engine.settings
    }

    /// The time of day now.
    fn now(&self) -> DateTime<Utc> {
        self.engine.clock.now()
    }

    /// `future`, or `Cancelled` if the run is cancelled first.
    async fn or_cancel<T>(&self, future: impl Future<Output = T>) -> Result<T, Cancelled> {
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(Cancelled),
            value = future => Ok(value),
        }
    }

    /// Sleeps, unless cancelled.
    async fn pause(&self, duration: Duration) -> Result<(), Cancelled> {
        self.or_cancel(tokio::time::sleep(duration)).await
    }

    /// Reads instance `id`: `Ok(None)` only if Nova says it does not exist
    /// [`GONE_CONFIRMATIONS`] times in a row, one poll interval apart. A
    /// single 404 (a load balancer's error page, a cell briefly
    /// unreachable) must not turn an instance that is down into one
    /// "deleted", whose recovery is then skipped as needless.
    async fn server_unless_gone(
        &self,
        id: &str,
    ) -> Result<Result<Option<Server>, openstack_client::Error>, Cancelled> {
        let mut not_found = 0;
        loop {
            match self.or_cancel(self.openstack().server(id)).await? {
                Ok(server) => return Ok(Ok(Some(server))),
                Err(e) if e.is_not_found() => {
                    not_found += 1;
                    if not_found >= GONE_CONFIRMATIONS {
                        return Ok(Ok(None));
                    }
                    tracing::info!(instance_id = %id, not_found, "nova says the instance does not exist; reading it again to be sure");
                    self.pause(self.settings().poll_interval).await?;
                }
                Err(e) => return Ok(Err(e)),
            }
        }
    }

    fn payload(&self, key: &str) -> Option<&str> {
        self.request.payload.get(key).map(String::as_str)
    }

    /// The lock reason this notification sets: it names the notification,
    /// so that only this notification releases the lock.
    fn lock_reason(&self) -> String {
        let reason = format!(
            "{}: recovering from the failure of host {} (notification {})",
            self.settings().lock_reason_prefix,
            self.request.hostname,
            self.request.notification_id
        );
        reason.chars().take(255).collect()
    }

    /// Whether `server` is locked by this notification.
    fn locked_by_us(&self, server: &Server) -> bool {
        server.locked == Some(true)
            && server.locked_reason.as_deref().is_some_and(|reason| {
                reason.starts_with(self.settings().lock_reason_prefix.as_str())
                    && reason.contains(&format!("(notification {})", self.request.notification_id))
            })
    }
}

/// Why a step failed, and whether that may pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub message: String,
    /// The cause may pass (Nova, Cinder or Keystone unavailable, a
    /// timeout): another run may succeed.
    pub transient: bool,
}

impl Cause {
    /// A cause that may pass.
    fn transient(message: impl std::fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            transient: true,
        }
    }
}

/// An OpenStack error may pass or not, as the error says.
impl From<openstack_client::Error> for Cause {
    fn from(e: openstack_client::Error) -> Self {
        Self {
            transient: e.is_transient(),
            message: e.to_string(),
        }
    }
}

/// What Nova's state explains (a verdict, a refusal): it does not pass.
impl From<String> for Cause {
    fn from(message: String) -> Self {
        Self {
            message,
            transient: false,
        }
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Self {
        message.to_owned().into()
    }
}

/// A failed step of a workflow: which step, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepFailure {
    pub step: &'static str,
    pub message: String,
    /// Another target (reserved host, or the scheduler) might succeed.
    pub target_related: bool,
    /// The cause may pass: another run may succeed.
    pub transient: bool,
}

impl StepFailure {
    fn new(step: &'static str, cause: impl Into<Cause>) -> Self {
        let cause = cause.into();
        Self {
            step,
            message: cause.message,
            target_related: false,
            transient: cause.transient,
        }
    }

    fn on_target(step: &'static str, cause: impl Into<Cause>) -> Self {
        Self {
            target_related: true,
            ..Self::new(step, cause)
        }
    }

    /// The same failure, its message prefixed with what was being done.
    fn doing(self, what: &str) -> Self {
        Self {
            message: format!("{what}: {}", self.message),
            ..self
        }
    }

    /// The instance's result for this failure.
    fn result(&self) -> InstanceResult {
        InstanceResult::Failed {
            message: self.to_string(),
            retryable: self.transient,
        }
    }
}

impl std::fmt::Display for StepFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.message)
    }
}
