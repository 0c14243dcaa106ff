//! The dispatcher: decides which notifications run, claims each with a
//! compare-and-set (so exactly one replica runs it, one per host at a
//! time), runs it over the engine link (`run`), and schedules what
//! follows: retries with backoff within the retry window, the reconcile
//! run before a final verdict, the release of locks an ended notification
//! still holds, take-over of runs lost with a stopped replica, expiry of
//! too old notifications. It works through the service layer ([`Api`]),
//! which persists and publishes; generated protobuf types stay in `link`.

mod link;
mod readiness;
mod run;
mod settings;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

pub use instanceha_proto::run::wire::ProtocolError;
pub use link::EngineLink;
pub use settings::DispatchSettings;

use crate::changes::Change;
use crate::domain::{NotificationId, RunId};
use crate::lifecycle::{Due, DueWork, LostCause, RunEnd};
use crate::service::{Api, RunError};
use crate::status::NotificationStatus;
use readiness::EngineReadiness;

/// Runs the recoveries of this replica. Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    api: Api,
    settings: Arc<DispatchSettings>,
    replica: Arc<str>,
    link: EngineLink,
    /// Runs in progress here, by notification, with their cancel handle.
    active: Arc<Mutex<HashMap<NotificationId, CancellationToken>>>,
    /// Runs asked for while the same notification was still active here
    /// (a reconcile asked for by the run that is ending): started when it
    /// ends. Changed only under `active`'s lock.
    again: Arc<std::sync::Mutex<std::collections::HashSet<NotificationId>>>,
    slots: Arc<Semaphore>,
    /// Whether an engine is there to take runs.
    engine: EngineReadiness,
    shutdown: CancellationToken,
}

impl Dispatcher {
    /// The dispatcher of the API listening on `listen` (its replica name
    /// is derived from it when none is set).
    pub fn new(api: Api, settings: DispatchSettings, listen: SocketAddr) -> Result<Self, String> {
        settings.validate()?;
        let link = EngineLink::new(&settings)?;
        let replica: Arc<str> = settings.replica(listen).into();
        Ok(Self {
            api,
            slots: Arc::new(Semaphore::new(settings.max_concurrent_runs)),
            settings: Arc::new(settings),
            replica,
            link,
            active: Arc::default(),
            again: Arc::default(),
            engine: EngineReadiness::new(),
            shutdown: CancellationToken::new(),
        })
    }

    /// Checks the engine link's settings and the files they name (its
    /// token, its CA) without connecting (`instanceha-api --check`).
    pub fn check_link(settings: &DispatchSettings) -> Result<(), String> {
        settings.validate()?;
        EngineLink::new(settings).map(drop)
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Dispatches until `shutdown`: new notifications at once, the rest on
    /// a periodic scan (which also resumes runs lost with a restart).
    pub async fn run(self, shutdown: CancellationToken) {
        tracing::info!(replica = %self.replica, engine = %self.link.url(), "dispatcher started");
        let mut feed = self.api.changes().subscribe();
        let mut scan = tokio::time::interval(self.settings.scan_interval);
        scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                change = feed.recv() => match change {
                    Ok(change) => {
                        if let Change::Notification(n) = change.as_ref() {
                            if matches!(n.status(), NotificationStatus::New | NotificationStatus::Error) {
                                // New, or reopened by an operator (an error
                                // not yet due is not claimed).
                                self.spawn(Due { id: n.id, work: DueWork::Run });
                            } else if n.status().is_terminal() {
                                // A report queued behind it may run now.
                                self.scan().await;
                            }
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => self.scan().await,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                },
                _ = scan.tick() => {
                    self.scan().await;
                    self.expire().await;
                }
                // The engine answers again: what waited for it goes now.
                () = self.engine.back() => self.scan().await,
            }
        }
        // Abandon the runs in flight: the engine cancels them (and unlocks
        // what it locked); the claims resume when this replica restarts or
        // their leases expire.
        self.shutdown.cancel();
        for cancel in self.active.lock().await.values() {
            cancel.cancel();
        }
        tracing::info!("dispatcher stopped");
    }

    async fn scan(&self) {
        match self.api.due_runs(&self.replica, 1000).await {
            Ok(due) => {
                for d in due {
                    self.spawn(d);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot scan for due notifications"),
        }
        match self.api.locks_left().await {
            Ok(held) => crate::metrics::locks_held(held),
            Err(e) => tracing::debug!(error = %e, "cannot count the locks left held"),
        }
        match self.api.hosts_held().await {
            Ok(held) => crate::metrics::hosts_held(held),
            Err(e) => tracing::debug!(error = %e, "cannot count the hosts held"),
        }
    }

    async fn expire(&self) {
        match self.api.expire_old(self.settings.expire_after, 1000).await {
            Ok(expired) => {
                for n in expired {
                    if let Some(cancel) = self.active.lock().await.get(&n.id) {
                        cancel.cancel();
                    }
                    tracing::warn!(notification_id = %n.id, status = %n.status(), "notification expired");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot expire old notifications"),
        }
    }

    /// Starts work on `due` unless it is in progress here already.
    fn spawn(&self, due: Due) {
        if !self.engine.is_ready() && due.work == DueWork::Run {
            // Claimed when the engine answers again.
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let cancel = CancellationToken::new();
            {
                let mut active = this.active.lock().await;
                if active.contains_key(&due.id) {
                    if due.work == DueWork::Run {
                        this.again.lock().unwrap().insert(due.id);
                    }
                    return;
                }
                active.insert(due.id, cancel.clone());
            }
            let Ok(_slot) = this.slots.clone().acquire_owned().await else {
                return;
            };
            let id = due.id;
            // A panic in one dispatch must not take the dispatcher down.
            let work = std::panic::AssertUnwindSafe(this.handle(due, cancel)).catch_unwind();
            if let Err(panic) = work.await {
                tracing::error!(notification_id = %id, panic = %instanceha_runtime::panic::message(panic.as_ref()), "dispatch task panicked");
            }
            let again = {
                let mut active = this.active.lock().await;
                active.remove(&id);
                this.again.lock().unwrap().remove(&id)
            };
            if again {
                this.spawn(Due {
                    id,
                    work: DueWork::Run,
                });
            }
        });
    }

    async fn handle(&self, due: Due, cancel: CancellationToken) {
        if let DueWork::TakeOver { run_id } = due.work {
            // A run lost with its replica: take it over and resolve it as
            // lost; the retry is a new run.
            match self
                .api
                .take_over_run(due.id, &run_id, &self.replica, self.settings.lease)
                .await
            {
                Ok(true) => {
                    tracing::warn!(notification_id = %due.id, run_id = %run_id, "taking over a lost run");
                    let end = RunEnd::Lost {
                        reason: "the API replica running it stopped".to_owned(),
                        cause: LostCause::Replica,
                    };
                    self.resolve(due.id, &run_id, end).await;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(notification_id = %due.id, error = %e, "cannot take over"),
            }
            return;
        }
        let (notification, claim) = match self
            .api
            .claim_run(due.id, &self.replica, &self.settings.run_policy())
            .await
        {
            Ok(Some(claimed)) => claimed,
            Ok(None) => return, // another replica won, or not due yet
            Err(e) => {
                tracing::warn!(notification_id = %due.id, error = %e, "cannot claim");
                return;
            }
        };
        // The run is a span of the notification's trace, child of the call
        // that created it.
        let span = tracing::info_span!(
            "dispatch.run",
            otel.name = "dispatch.run",
            otel.status_code = tracing::field::Empty,
            notification_id = %notification.id,
            run_id = %claim.run_id,
            run_kind = claim.kind.as_str(),
            attempt = claim.attempt,
            host = %notification.hostname,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        if let Some(traceparent) = &claim.trace_context {
            let _ = span.set_parent(instanceha_runtime::propagation::from_traceparent(
                traceparent,
            ));
        }
        instanceha_runtime::telemetry::record_ids(&span);
        self.execute(notification, claim, cancel)
            .instrument(span)
            .await;
    }

    /// Resolves a run as the lifecycle decides; what follows (a retry, a
    /// reconcile, a release of locks) is dispatched when due.
    async fn resolve(&self, id: NotificationId, run_id: &RunId, end: RunEnd) {
        if matches!(
            end,
            RunEnd::Lost {
                cause: LostCause::Engine,
                ..
            }
        ) {
            self.engine.lost(&self.link, &self.shutdown);
        }
        match self
            .api
            .resolve_run(id, run_id, &end, &self.settings.run_policy())
            .await
        {
            Ok((resolved, next)) => {
                let status = resolved.status();
                tracing::info!(notification_id = %id, %status, message = resolved.message.as_deref().unwrap_or(""), "run resolved");
                if let Some(next) = next {
                    let wait = (next - self.api.now()).to_std().unwrap_or_default();
                    self.retry_later(id, wait);
                }
            }
            Err(RunError::Stale(reason)) => {
                tracing::info!(notification_id = %id, %reason, "run already resolved elsewhere")
            }
            Err(e) => tracing::error!(notification_id = %id, error = %e, "cannot resolve the run"),
        }
    }

    /// The engine could not be reached: the run is given back without
    /// using up an attempt, and sent again as soon as an engine answers.
    async fn engine_unreachable(&self, id: NotificationId, run_id: &RunId, reason: &str) {
        let message = format!(
            "the engine at {} is unreachable ({reason}); the recovery is sent again as soon as an engine answers its health check",
            self.link.url(),
        );
        tracing::warn!(notification_id = %id, %message, "engine unreachable");
        self.engine.lost(&self.link, &self.shutdown);
        if let Err(e) = self
            .api
            .release_unreachable_run(id, run_id, message, &self.settings.run_policy())
            .await
        {
            tracing::error!(notification_id = %id, error = %e, "cannot release the run");
        }
    }

    fn retry_later(&self, id: NotificationId, wait: Duration) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = this.shutdown.cancelled() => {}
                () = tokio::time::sleep(wait) => this.spawn(Due { id, work: DueWork::Run }),
            }
        });
    }
}
