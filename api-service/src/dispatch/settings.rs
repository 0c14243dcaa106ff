//! `[dispatch]`: how recoveries are run: the engine to reach, this
//! replica's name in claims, attempts and the waits between them, leases,
//! scans, limits and expiry.

use std::time::Duration;

use instanceha_runtime::backoff::Backoff;
use instanceha_runtime::tls::ClientTlsSettings;
use serde::{Deserialize, Serialize};
use tonic::transport::Endpoint;

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

    pub(super) fn replica(&self) -> String {
        self.replica_id
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| format!("api-{}", uuid::Uuid::new_v4().simple()))
    }

    /// The waits between runs: `retry_delay`, doubling to
    /// `max_retry_delay`, exact (a retry is scheduled in the database and
    /// its time is shown).
    pub fn retry_backoff(&self) -> Backoff {
        Backoff::new(self.retry_delay, self.max_retry_delay).exact()
    }

    /// The wait before attempt `next` (2, 3, ...).
    pub(super) fn retry_after(&self, next: u32) -> Duration {
        self.retry_backoff().nominal(next.saturating_sub(1))
    }
}
