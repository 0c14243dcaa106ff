//! `[dispatch]`: how recoveries are run: the engine to reach, this
//! replica's name in claims, attempts and the waits between them, leases,
//! scans, limits and expiry.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use instanceha_runtime::backoff::Backoff;
use instanceha_runtime::tls::ClientTlsSettings;
use serde::{Deserialize, Serialize};
use tonic::transport::Endpoint;

use crate::lifecycle::RunPolicy;

/// `[dispatch]`: how recoveries are run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatchSettings {
    /// Dispatch recoveries at all (off only for tests and maintenance).
    pub enabled: bool,
    /// The engine's gRPC address (one engine, or a Service in front of
    /// several).
    pub engine_url: String,
    /// A file holding the token shared with the engine (its
    /// `link.token_file`), sent on every `Recover` stream as
    /// `authorization: Bearer <token>`. Unset: `STATE_DIR/link-token`
    /// (`Settings::engine_token_file`), made on first start if missing.
    pub engine_token_file: Option<PathBuf>,
    /// This replica's name in run claims; replicas sharing a database need
    /// distinct names, and a replica that keeps its name resumes its own
    /// runs at once when it restarts. Default: `$HOSTNAME`, else a name
    /// derived from the machine (its `/etc/machine-id`) and the address the
    /// API listens on.
    pub replica_id: Option<String>,
    /// Runs per notification at most (a crash-looping engine stops
    /// somewhere); the retry window is the usual bound.
    pub max_attempts: u32,
    /// Instances without a result, or failed for a passing reason (Nova
    /// unavailable, a timeout, a lost run), are retried with backoff for
    /// this long from the first run; then their truth is read from Nova and
    /// the notification ends.
    #[serde(with = "humantime_serde")]
    pub retry_window: Duration,
    /// After the retry window (and the last recovery run started within
    /// it), Nova's truth is read for at most this long before the verdict:
    /// reconcile runs are cut at that deadline. Set it to at least the
    /// engine's `recovery.stalled_evacuation_after`, which bounds how long a
    /// reconcile follows an evacuation still making progress.
    #[serde(with = "humantime_serde")]
    pub verdict_grace: Duration,
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
    /// A report generated longer ago than this is refused at intake, and
    /// a notification not running that is this old ends (after a last look
    /// at Nova) (Masakari: 24 h). A run in progress is never expired.
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
            engine_token_file: None,
            replica_id: None,
            max_attempts: 20,
            retry_window: Duration::from_secs(30 * 60),
            verdict_grace: Duration::from_secs(5 * 60),
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

    /// This replica's name: `replica_id`, else `$HOSTNAME`, else derived
    /// from the machine and `listen`, so that it survives restarts.
    pub(super) fn replica(&self, listen: SocketAddr) -> String {
        self.replica_id
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
            .or_else(|| machine_replica(listen))
            .unwrap_or_else(|| {
                let random = format!("api-{}", uuid::Uuid::new_v4().simple());
                tracing::warn!(replica = %random, "no replica_id, $HOSTNAME or machine id: a restarted replica will not resume its own runs until their leases expire");
                random
            })
    }

    /// How runs are paced.
    pub fn run_policy(&self) -> RunPolicy {
        RunPolicy {
            lease: self.lease,
            retry_window: self.retry_window,
            verdict_grace: self.verdict_grace,
            max_attempts: self.max_attempts,
            retry_backoff: self.retry_backoff(),
        }
    }

    /// The waits between runs: `retry_delay`, doubling to
    /// `max_retry_delay`, exact (a retry is scheduled in the database and
    /// its time is shown).
    pub fn retry_backoff(&self) -> Backoff {
        Backoff::new(self.retry_delay, self.max_retry_delay).exact()
    }
}

/// `api-` and a digest of the machine's id and the listen address: the
/// same after a restart on the same machine, distinct for two replicas on
/// one machine.
fn machine_replica(listen: SocketAddr) -> Option<String> {
    use sha2::{Digest, Sha256};
    let machine = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())?;
    let digest = Sha256::digest(format!("{machine}/{listen}").as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Some(format!("api-{hex}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_replica_name_is_stable_and_distinct_per_listen_address() {
        let settings = DispatchSettings::default();
        let a: SocketAddr = "127.0.0.1:15869".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:25869".parse().unwrap();
        if let (Some(first), Some(again), Some(other)) =
            (machine_replica(a), machine_replica(a), machine_replica(b))
        {
            assert_eq!(first, again);
            assert_ne!(first, other);
            assert!(first.starts_with("api-"), "{first}");
        }
        let named = DispatchSettings {
            replica_id: Some("api-0".to_owned()),
            ..settings
        };
        assert_eq!(named.replica(a), "api-0");
    }
}
