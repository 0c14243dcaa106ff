//! Sends the spool's pending reports to the API, oldest first, and retries
//! each with exponential backoff until the API acknowledges or refuses it
//! for good. A report's send is a span of the trace its incident started,
//! so the API's and the engine's spans join the agent's trace.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use instanceha_runtime::backoff::Backoff;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::client::{self, ApiClient, Verdict};
use crate::config::SpoolSettings;
use crate::metrics::Metrics;
use crate::spool::{Entry, Spool, State};

/// The waits between sends of a report: `retry_initial`, doubled after
/// each failure, at most `retry_max`; each drawn between half and the
/// whole, so that the retries of many agents spread out. The attempts are
/// counted in the spool, so a restarted agent keeps its pace.
pub fn backoff(settings: &SpoolSettings) -> Backoff {
    Backoff::new(settings.retry_initial, settings.retry_max)
}

/// The delivery loop.
pub struct Delivery {
    spool: Spool,
    client: ApiClient,
    settings: SpoolSettings,
    watch: bool,
    metrics: Metrics,
}

impl Delivery {
    pub fn new(
        spool: Spool,
        client: ApiClient,
        settings: SpoolSettings,
        watch: bool,
        metrics: Metrics,
    ) -> Self {
        Self {
            spool,
            client,
            settings,
            watch,
            metrics,
        }
    }

    /// Runs until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut next_at: HashMap<u64, Instant> = HashMap::new();
        let wake = self.spool.changed();
        let mut last_purge = Instant::now();
        loop {
            let pending = match self.spool.pending().await {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the spool");
                    Vec::new()
                }
            };
            self.metrics.spool_depth(pending.len() as u64);
            let mut earliest: Option<Instant> = None;
            for entry in pending {
                if shutdown.is_cancelled() {
                    return;
                }
                let now = Instant::now();
                if let Some(at) = next_at.get(&entry.id).copied()
                    && at > now
                {
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                    continue;
                }
                if let Some(retry_at) = self.send(&entry).await {
                    next_at.insert(entry.id, retry_at);
                    earliest = Some(earliest.map_or(retry_at, |e| e.min(retry_at)));
                } else {
                    next_at.remove(&entry.id);
                }
            }
            if last_purge.elapsed() > Duration::from_secs(3600) {
                last_purge = Instant::now();
                let before = Utc::now()
                    - chrono::Duration::from_std(self.settings.keep_done).unwrap_or_default();
                if let Err(e) = self.spool.purge(before).await {
                    tracing::warn!(error = %e, "cannot purge the spool");
                }
            }
            let until = earliest.unwrap_or_else(|| Instant::now() + Duration::from_secs(60));
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = wake.notified() => {}
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Sends one entry; returns when to try again, if it must be.
    async fn send(&self, entry: &Entry) -> Option<Instant> {
        let State::Pending { attempts } = entry.state else {
            return None;
        };
        let report = &entry.report;
        let span = tracing::info_span!(
            "send report",
            report_type = %report.kind,
            hostname = %report.hostname,
            idempotency_key = %report.idempotency_key,
            attempt = attempts + 1,
        );
        if let Some(tp) = &entry.traceparent {
            let _ = span.set_parent(instanceha_runtime::propagation::from_traceparent(tp));
        }
        let result = async {
            let traceparent = instanceha_runtime::propagation::current_traceparent()
                .or_else(|| entry.traceparent.clone());
            self.client.create(report, traceparent.as_deref()).await
        }
        .instrument(span.clone())
        .await;
        let _entered = span.enter();
        match result {
            Ok(stored) => {
                tracing::info!(
                    notification_id = %stored.notification_id,
                    status = %stored.status,
                    payload = %client::describe(&report.payload),
                    "report stored by the api"
                );
                self.metrics.report(&report.kind.to_string(), "stored");
                self.set(
                    entry.id,
                    State::Delivered {
                        notification_id: stored.notification_id.clone(),
                        at: Utc::now(),
                    },
                )
                .await;
                if self.watch && !client::is_terminal(&stored.status) {
                    let client = self.client.clone();
                    let id = stored.notification_id;
                    tokio::spawn(
                        async move {
                            match client.watch(&id).await {
                                Ok(status) => tracing::info!(notification_id = %id, status = %status, "notification followed to its end"),
                                Err(e) => tracing::warn!(notification_id = %id, error = %e, "stopped following the notification"),
                            }
                        }
                        .in_current_span(),
                    );
                }
                None
            }
            Err(client::Error::Status { code, message })
                if client::verdict(code) == Verdict::Refused =>
            {
                tracing::warn!(code = ?code, reason = %message, "report refused by the api for good");
                self.metrics.report(&report.kind.to_string(), "refused");
                self.set(
                    entry.id,
                    State::Refused {
                        reason: format!("{code:?}: {message}"),
                        at: Utc::now(),
                    },
                )
                .await;
                None
            }
            Err(e) => {
                let attempts = attempts + 1;
                let pause = backoff(&self.settings).delay(attempts);
                tracing::warn!(error = %e, attempts, retry_in = ?pause, "report not acknowledged, will retry");
                self.metrics.report(&report.kind.to_string(), "retry");
                self.set(entry.id, State::Pending { attempts }).await;
                Some(Instant::now() + pause)
            }
        }
    }

    async fn set(&self, id: u64, state: State) {
        if let Err(e) = self.spool.set_state(id, state).await {
            tracing::error!(error = %e, id, "cannot update the spool");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn settings(initial: Duration, max: Duration) -> SpoolSettings {
        SpoolSettings {
            retry_initial: initial,
            retry_max: max,
            ..SpoolSettings::default()
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let i = Duration::from_millis(500);
        let m = Duration::from_secs(30);
        let b = backoff(&settings(i, m));
        assert_eq!(b.nominal(1), i);
        assert_eq!(b.nominal(2), Duration::from_secs(1));
        assert_eq!(b.nominal(4), Duration::from_secs(4));
        assert_eq!(b.nominal(10), m);
        assert_eq!(b.nominal(u32::MAX), m);
    }

    proptest! {
        #[test]
        fn backoff_never_shrinks_and_never_passes_the_cap(a in 0u32..100, ms in 1u64..5000, cap in 1u64..600) {
            let i = Duration::from_millis(ms);
            let m = Duration::from_secs(cap).max(i);
            let b = backoff(&settings(i, m));
            prop_assert!(b.nominal(a) <= b.nominal(a + 1));
            prop_assert!(b.nominal(a) <= m);
            let pause = b.delay(a);
            prop_assert!(pause <= b.nominal(a) && pause >= b.nominal(a) / 2);
        }
    }
}
