//! The dispatcher: decides which notifications run, claims each with a
//! compare-and-set (so exactly one replica runs it), opens one `Recover`
//! stream per run to the engine, persists every event before acknowledging
//! it, and when the stream ends resolves the notification with the status
//! rules: retry the unresolved instances while attempts remain, otherwise
//! fail them with the reason. Runs lost with a stopped replica are taken
//! over; too old notifications expire.

mod convert;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::FutureExt as _;
use instanceha_proto::engine::v1 as pb;
use instanceha_runtime::tls::ClientTlsSettings;
use pb::engine_client::EngineClient;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, Semaphore, mpsc};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

pub use convert::ProtocolError;

use crate::changes::Change;
use crate::domain::{Notification, NotificationId, RunClaim};
use crate::service::Api;
use crate::status::{NotificationStatus, RunEnd, RunOutcome};
use crate::store::{self, Due, Resolved};

/// How long the engine is given to close its side of a run cancelled for
/// a protocol error.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// Tells the engine to stop a run whose events the API refused, then reads
/// (and drops, unacknowledged) what it still sends until its `Done` or the
/// end of the stream, for at most [`CANCEL_GRACE`]. Dropping the call at
/// once would reset the HTTP/2 stream, and the `Cancel` still queued behind
/// it might never reach the engine, which would then go on touching
/// instances nobody records.
async fn cancel_for_protocol_error(
    requests: &mpsc::Sender<pb::RecoverRequest>,
    events: &mut tonic::Streaming<pb::RunEvent>,
    reason: &str,
) {
    tracing::error!(%reason, "cancelling the run");
    let _ = requests.send(convert::cancel(reason)).await;
    let closed = tokio::time::timeout(CANCEL_GRACE, async {
        let mut dropped = 0usize;
        while let Some(Ok(event)) = events.next().await {
            dropped += 1;
            if matches!(event.body, Some(pb::run_event::Body::Done(_))) {
                break;
            }
        }
        dropped
    })
    .await;
    match closed {
        Ok(dropped) => tracing::debug!(dropped, "engine closed the cancelled run"),
        Err(_) => tracing::warn!(
            grace = ?CANCEL_GRACE,
            "engine did not close the cancelled run in time; dropping the stream"
        ),
    }
}

/// `[dispatch]`: how recoveries are run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatchSettings {
    /// Dispatch recoveries at all (off only for tests and maintenance).
    pub enabled: bool,
    /// The engine's gRPC address (one engine, or a Service in front of
    /// several).
    pub engine_url: String,
    /// This replica's name in run claims; replicas sharing a database need
    /// distinct names. Default: `$HOSTNAME`, else a random name.
    pub replica_id: Option<String>,
    /// Runs per notification before unresolved instances fail.
    pub max_attempts: u32,
    /// Wait before a retry; doubles with each attempt.
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    /// The longest wait before a retry.
    #[serde(with = "humantime_serde")]
    pub max_retry_delay: Duration,
    /// How long a claim holds without renewal; another replica takes over
    /// a run whose lease expired.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// How often the database is scanned for due work (new notifications
    /// are dispatched at once; the scan catches the rest).
    #[serde(with = "humantime_serde")]
    pub scan_interval: Duration,
    /// Runs at once on this replica.
    pub max_concurrent_runs: usize,
    /// A run still going after this is cancelled.
    #[serde(with = "humantime_serde")]
    pub run_timeout: Duration,
    /// Unfinished notifications generated longer ago than this fail
    /// (Masakari: 24 h).
    #[serde(with = "humantime_serde")]
    pub expire_after: Duration,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Events persisted per transaction at most.
    pub event_batch: usize,
    /// TLS towards the engine (an https engine_url needs at least ca_file;
    /// cert_file and key_file authenticate the API to the engine).
    pub tls: ClientTlsSettings,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            engine_url: "http://127.0.0.1:15870".to_owned(),
            replica_id: None,
            max_attempts: 3,
            retry_delay: Duration::from_secs(5),
            max_retry_delay: Duration::from_secs(120),
            lease: Duration::from_secs(60),
            scan_interval: Duration::from_secs(10),
            max_concurrent_runs: 256,
            run_timeout: Duration::from_secs(6 * 3600),
            expire_after: Duration::from_secs(24 * 3600),
            connect_timeout: Duration::from_secs(5),
            event_batch: 512,
            tls: ClientTlsSettings::default(),
        }
    }
}

impl DispatchSettings {
    pub fn validate(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("dispatch.max_attempts: must be at least 1".to_owned());
        }
        if self.max_concurrent_runs == 0 || self.event_batch == 0 {
            return Err(
                "dispatch.max_concurrent_runs and dispatch.event_batch: must be at least 1"
                    .to_owned(),
            );
        }
        if self.lease < Duration::from_secs(1) {
            return Err("dispatch.lease: must be at least 1s".to_owned());
        }
        Endpoint::from_shared(self.engine_url.clone()).map_err(|e| {
            format!(
                "dispatch.engine_url: {:?} is not a URL: {e}",
                self.engine_url
            )
        })?;
        Ok(())
    }

    fn replica(&self) -> String {
        self.replica_id
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| format!("api-{}", uuid::Uuid::new_v4().simple()))
    }

    /// The wait before attempt `next` (2, 3, ...).
    fn retry_after(&self, next: u32) -> Duration {
        let factor = 1u32 << next.saturating_sub(2).min(16);
        self.retry_delay
            .saturating_mul(factor)
            .min(self.max_retry_delay)
    }
}

/// Runs the recoveries of this replica. Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    api: Api,
    settings: Arc<DispatchSettings>,
    replica: Arc<str>,
    engine: EngineClient<Channel>,
    /// Runs in progress here, by notification, with their cancel handle.
    active: Arc<Mutex<HashMap<NotificationId, CancellationToken>>>,
    slots: Arc<Semaphore>,
    /// Consecutive runs that found the engine unreachable (for backoff).
    unreachable: Arc<std::sync::atomic::AtomicU32>,
    shutdown: CancellationToken,
}

impl Dispatcher {
    pub fn new(api: Api, settings: DispatchSettings) -> Result<Self, String> {
        settings.validate()?;
        let mut endpoint = Endpoint::from_shared(settings.engine_url.clone())
            .map_err(|e| format!("dispatch.engine_url: {e}"))?;
        if let Some(tls) = settings
            .tls
            .load("dispatch.tls")
            .map_err(|e| e.to_string())?
        {
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| format!("dispatch.tls: {e}"))?;
        } else if settings.engine_url.starts_with("https:") {
            return Err("dispatch.engine_url is https: set dispatch.tls.ca_file".to_owned());
        }
        let endpoint = endpoint
            .connect_timeout(settings.connect_timeout)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        let engine =
            EngineClient::new(endpoint.connect_lazy()).max_decoding_message_size(16 * 1024 * 1024);
        let replica: Arc<str> = settings.replica().into();
        Ok(Self {
            api,
            slots: Arc::new(Semaphore::new(settings.max_concurrent_runs)),
            settings: Arc::new(settings),
            replica,
            engine,
            active: Arc::default(),
            unreachable: Arc::default(),
            shutdown: CancellationToken::new(),
        })
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Dispatches until `shutdown`: new notifications at once, the rest on
    /// a periodic scan (which also resumes runs lost with a restart).
    pub async fn run(self, shutdown: CancellationToken) {
        tracing::info!(replica = %self.replica, engine = %self.settings.engine_url, "dispatcher started");
        let mut feed = self.api.changes().subscribe();
        let mut scan = tokio::time::interval(self.settings.scan_interval);
        scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                change = feed.recv() => match change {
                    Ok(change) => {
                        if let Change::Notification(n) = change.as_ref()
                            && n.status() == NotificationStatus::New
                        {
                            self.spawn(Due { id: n.id, status: n.status(), run_id: None });
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => self.scan().await,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                },
                _ = scan.tick() => {
                    self.scan().await;
                    self.expire().await;
                }
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
        match self.api.store().due(&self.replica, 1000).await {
            Ok(due) => {
                for d in due {
                    self.spawn(d);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot scan for due notifications"),
        }
    }

    async fn expire(&self) {
        let age = chrono::Duration::from_std(self.settings.expire_after)
            .unwrap_or(chrono::Duration::days(1));
        let expired = match self.api.store().expired(Utc::now() - age, 1000).await {
            Ok(expired) => expired,
            Err(e) => {
                tracing::warn!(error = %e, "cannot scan for expired notifications");
                return;
            }
        };
        for id in expired {
            if let Some(cancel) = self.active.lock().await.get(&id) {
                cancel.cancel();
            }
            let reason = format!(
                "expired: not recovered within {} of its generation",
                humantime::format_duration(self.settings.expire_after)
            );
            match self.api.store().expire(id, &reason).await {
                Ok(Some(resolved)) => {
                    tracing::warn!(notification_id = %id, "notification expired");
                    self.publish_resolved(resolved);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(notification_id = %id, error = %e, "cannot expire"),
            }
        }
    }

    /// Starts work on `due` unless it is in progress here already.
    fn spawn(&self, due: Due) {
        let this = self.clone();
        tokio::spawn(async move {
            let cancel = CancellationToken::new();
            {
                let mut active = this.active.lock().await;
                if active.contains_key(&due.id) {
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
                tracing::error!(notification_id = %id, panic = ?panic.downcast_ref::<&str>(), "dispatch task panicked");
            }
            this.active.lock().await.remove(&id);
        });
    }

    async fn handle(&self, due: Due, cancel: CancellationToken) {
        let store = self.api.store();
        if due.status == NotificationStatus::Running {
            // A run lost with its replica: take it over and resolve it as
            // lost; the retry is a new run.
            let Some(run_id) = due.run_id else { return };
            match store
                .take_over(due.id, &run_id, &self.replica, self.settings.lease)
                .await
            {
                Ok(true) => {
                    tracing::warn!(notification_id = %due.id, run_id = %run_id, "taking over a lost run");
                    let end = RunEnd::Lost {
                        reason: "the API replica running it stopped".to_owned(),
                    };
                    self.resolve(due.id, &run_id, end).await;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(notification_id = %due.id, error = %e, "cannot take over"),
            }
            return;
        }
        let claimed = match store
            .claim(due.id, &self.replica, self.settings.lease)
            .await
        {
            Ok(Some(claimed)) => claimed,
            Ok(None) => return, // another replica won, or not due yet
            Err(e) => {
                tracing::warn!(notification_id = %due.id, error = %e, "cannot claim");
                return;
            }
        };
        let (notification, run) = claimed;
        self.api
            .changes()
            .publish(Change::Notification(notification.clone()));
        // The run is a span of the notification's trace, child of the call
        // that created it.
        let span = tracing::info_span!(
            "dispatch.run",
            otel.name = "dispatch.run",
            otel.status_code = tracing::field::Empty,
            notification_id = %notification.id,
            run_id = %run.run_id,
            attempt = run.attempt,
            host = %notification.hostname,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        if let Some(traceparent) = &run.trace_context {
            let _ = span.set_parent(instanceha_runtime::propagation::from_traceparent(
                traceparent,
            ));
        }
        instanceha_runtime::telemetry::record_ids(&span);
        self.execute(notification, run, cancel)
            .instrument(span)
            .await;
    }

    /// One run: open the stream, persist and acknowledge every event, then
    /// resolve.
    async fn execute(&self, notification: Notification, run: RunClaim, cancel: CancellationToken) {
        let store = self.api.store();
        let id = notification.id;
        let context = async {
            let segment = store.segment(notification.segment_id).await?;
            let reserved = if segment.recovery_method.uses_reserved_hosts() {
                store.reserved_hosts(segment.id).await?
            } else {
                Vec::new()
            };
            let retry = if run.attempt > 1 {
                store.unresolved_vmoves(id).await?
            } else {
                Vec::new()
            };
            Ok::<_, store::Error>((segment, reserved, retry))
        };
        let (segment, reserved, retry) = match context.await {
            Ok(context) => context,
            Err(e) => {
                // The database failed: leave the claim; the lease expires
                // and the run is resolved as lost.
                tracing::warn!(error = %e, "cannot prepare the run");
                return;
            }
        };
        let start = convert::start_run(
            &run.run_id,
            run.attempt,
            &notification,
            &segment,
            &reserved,
            &retry,
        );
        let (requests, outbound) = mpsc::channel::<pb::RecoverRequest>(64);
        let _ = requests.send(start).await;
        let mut headers = http::HeaderMap::new();
        instanceha_runtime::propagation::inject_current(&mut headers);
        let request = tonic::Request::from_parts(
            tonic::metadata::MetadataMap::from_headers(headers),
            tonic::Extensions::default(),
            ReceiverStream::new(outbound),
        );
        let mut engine = self.engine.clone();
        let opened = tokio::select! {
            () = cancel.cancelled() => return,
            opened = engine.recover(request) => opened,
        };
        let mut events = match opened {
            Ok(response) => response.into_inner(),
            Err(status) => {
                crate::metrics::run_ended("engine_unreachable");
                self.engine_unreachable(id, &run.run_id, &status).await;
                return;
            }
        };
        self.unreachable
            .store(0, std::sync::atomic::Ordering::Relaxed);
        crate::metrics::stream(true);
        let _open = StreamGauge;
        tracing::info!(engine = %self.settings.engine_url, "run dispatched");

        let renew = {
            let store = store.clone();
            let run_id = run.run_id.clone();
            let lease = self.settings.lease;
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(lease / 3).await;
                    if let Err(e) = store.renew_lease(id, &run_id, lease).await {
                        tracing::warn!(error = %e, "cannot renew the run's lease");
                    }
                }
            })
        };
        let deadline = tokio::time::sleep(self.settings.run_timeout);
        tokio::pin!(deadline);
        let mut cancelled_for: Option<String> = None;
        let end = loop {
            let next = tokio::select! {
                () = cancel.cancelled(), if cancelled_for.is_none() => {
                    if self.shutdown.is_cancelled() {
                        // Shutting down: abandon; the claim resumes later.
                        renew.abort();
                        return;
                    }
                    let reason = "the notification expired".to_owned();
                    let _ = requests.send(convert::cancel(&reason)).await;
                    cancelled_for = Some(reason);
                    continue;
                }
                () = &mut deadline, if cancelled_for.is_none() => {
                    let reason = format!("the run exceeded dispatch.run_timeout ({})", humantime::format_duration(self.settings.run_timeout));
                    let _ = requests.send(convert::cancel(&reason)).await;
                    cancelled_for = Some(reason);
                    continue;
                }
                next = events.next() => next,
            };
            let first = match next {
                Some(Ok(message)) => message,
                Some(Err(status)) => {
                    break RunEnd::Lost {
                        reason: format!("the engine stream failed: {}", describe(&status)),
                    };
                }
                None => {
                    break RunEnd::Lost {
                        reason: cancelled_for.clone().unwrap_or_else(|| {
                            "the engine closed the stream without reporting done".to_owned()
                        }),
                    };
                }
            };
            // Take what else has arrived, to persist it in one transaction.
            let mut batch = vec![first];
            while batch.len() < self.settings.event_batch {
                match events.next().now_or_never() {
                    Some(Some(Ok(message))) => batch.push(message),
                    _ => break,
                }
            }
            let converted: Result<Vec<_>, _> = batch
                .into_iter()
                .map(|m| convert::run_event(&run.run_id, m))
                .collect();
            let converted = match converted {
                Ok(events) => events,
                Err(e) => {
                    let reason = format!("engine protocol error: {e}");
                    cancel_for_protocol_error(&requests, &mut events, &reason).await;
                    break RunEnd::Lost { reason };
                }
            };
            let applied = match self.persist(id, &run.run_id, &converted).await {
                Ok(applied) => applied,
                Err(store::Error::Rejected(reason)) => {
                    let reason = format!("engine protocol error: {reason}");
                    cancel_for_protocol_error(&requests, &mut events, &reason).await;
                    break RunEnd::Lost { reason };
                }
                Err(e) => {
                    // Nothing can be persisted: abandon the run without
                    // acknowledging; the lease expires and it resumes.
                    tracing::error!(error = %e, "cannot persist the run's events; abandoning it");
                    renew.abort();
                    return;
                }
            };
            for vmove in applied.vmoves {
                crate::metrics::vmove_resolved(&vmove);
                self.api.changes().publish(Change::VMove(vmove));
            }
            for event in applied.progress {
                self.api.changes().publish(Change::Progress {
                    notification_id: id,
                    event,
                });
            }
            let _ = requests.send(convert::ack(applied.sequence)).await;
            if let Some(outcome) = applied.done {
                break RunEnd::Done(outcome);
            }
        };
        renew.abort();
        drop(requests);
        crate::metrics::run_ended(if matches!(end, RunEnd::Done(_)) {
            "done"
        } else {
            "lost"
        });
        if let RunEnd::Lost { reason } = &end {
            instanceha_runtime::telemetry::record_error(&tracing::Span::current(), reason);
        }
        if matches!(&end, RunEnd::Done(RunOutcome::Cancelled { .. })) && cancelled_for.is_some() {
            tracing::info!("run cancelled");
        }
        self.resolve(id, &run.run_id, end).await;
    }

    /// Persists a batch, retrying a database that hiccups.
    async fn persist(
        &self,
        id: NotificationId,
        run_id: &str,
        events: &[crate::domain::SequencedEvent],
    ) -> Result<store::Applied, store::Error> {
        let mut delay = Duration::from_millis(200);
        let mut tries = 0;
        loop {
            tries += 1;
            match self
                .api
                .store()
                .apply_run_events(id, run_id, events, self.settings.lease)
                .await
            {
                Err(e) if e.is_transient() && tries < 5 => {
                    tracing::warn!(error = %e, tries, "cannot persist events yet; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                other => return other,
            }
        }
    }

    /// Resolves a run with the status rules and publishes the outcome; a
    /// retry is dispatched when due.
    async fn resolve(&self, id: NotificationId, run_id: &str, end: RunEnd) {
        let notification = match self.api.store().notification(id).await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(notification_id = %id, error = %e, "cannot read the notification to resolve it");
                return;
            }
        };
        let retry_in = self.settings.retry_after(notification.attempts + 1);
        let retry_at = store::now() + chrono::Duration::from_std(retry_in).unwrap_or_default();
        match self
            .api
            .store()
            .resolve_run(id, run_id, &end, self.settings.max_attempts, retry_at)
            .await
        {
            Ok(resolved) => {
                let status = resolved.notification.status();
                tracing::info!(notification_id = %id, %status, message = resolved.notification.message.as_deref().unwrap_or(""), "run resolved");
                self.publish_resolved(resolved);
                if status == NotificationStatus::Error {
                    self.retry_later(id, retry_in);
                }
            }
            Err(store::Error::Stale(reason)) => {
                tracing::info!(notification_id = %id, %reason, "run already resolved elsewhere")
            }
            Err(e) => tracing::error!(notification_id = %id, error = %e, "cannot resolve the run"),
        }
    }

    async fn engine_unreachable(&self, id: NotificationId, run_id: &str, status: &tonic::Status) {
        let failures = self
            .unreachable
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let wait = self.settings.retry_after(failures + 1);
        let message = format!(
            "the engine at {} is unreachable ({}); retrying in {}",
            self.settings.engine_url,
            describe(status),
            humantime::format_duration(wait)
        );
        tracing::warn!(notification_id = %id, %message, "engine unreachable");
        let retry_at = store::now() + chrono::Duration::from_std(wait).unwrap_or_default();
        match self
            .api
            .store()
            .release_unreachable(id, run_id, &message, retry_at)
            .await
        {
            Ok(notification) => {
                self.api
                    .changes()
                    .publish(Change::Notification(notification));
                self.retry_later(id, wait);
            }
            Err(e) => tracing::error!(notification_id = %id, error = %e, "cannot release the run"),
        }
    }

    fn retry_later(&self, id: NotificationId, wait: Duration) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = this.shutdown.cancelled() => {}
                () = tokio::time::sleep(wait) => this.spawn(Due { id, status: NotificationStatus::Error, run_id: None }),
            }
        });
    }

    fn publish_resolved(&self, resolved: Resolved) {
        crate::metrics::notification_resolved(&resolved.notification);
        for vmove in resolved.vmoves {
            crate::metrics::vmove_resolved(&vmove);
            self.api.changes().publish(Change::VMove(vmove));
        }
        self.api
            .changes()
            .publish(Change::Notification(resolved.notification));
    }
}

/// Counts a stream closed when dropped, whichever way `execute` returns.
struct StreamGauge;

impl Drop for StreamGauge {
    fn drop(&mut self) {
        crate::metrics::stream(false);
    }
}

fn describe(status: &tonic::Status) -> String {
    let message = status.message();
    if message.is_empty() {
        format!("{:?}", status.code())
    } else {
        format!("{:?}: {message}", status.code())
    }
}
