//! Return to service: a fenced host that came back healthy (its STARTED
//! report, or an operator's `RestoreHost`) is brought back once Nova's
//! records show its nova-compute reporting again: its record's
//! `updated_at` moves (nova-compute writes it every `report_interval`,
//! forced down or not). Then the forced-down flag is lifted and the service
//! enabled in one update, Nova is waited on until it sees the service up,
//! and the API is told to clear the host's maintenance. A nova-compute
//! that does not report within `host_failure.service_down_timeout` leaves
//! the host as it was, forced down and disabled, and the run fails for a
//! passing reason (the API tries again within its retry window).
//!
//! Only when the API says so (`StartRun::return_to_service`: the segment
//! returns hosts automatically and the flapping guard does not hold the
//! host, or an operator restored it); otherwise a STARTED report changes
//! nothing.

use std::time::Duration;

use super::{Cancelled, ProgressState, Run, RunOutcome, StepFailure};
use openstack_client::nova::{ComputeService, ServiceUpdate};

const STEP: &str = "return_to_service";

impl Run {
    /// A STARTED report: the host brought back to service when the API
    /// says so, else only noted.
    pub(super) async fn host_started(&self, host: &str) -> Result<RunOutcome, Cancelled> {
        if !self.request.return_to_service {
            self.reporter.progress(
                "host_started",
                ProgressState::Info,
                format!(
                    "host {host} reported started; it stays out of service (its segment's \
                     return_to_service is manual, or it is held): `instanceha host restore {host}` \
                     brings it back"
                ),
            );
            return Ok(RunOutcome::Completed {
                message: format!("host {host} started; not returned to service"),
            });
        }
        self.reporter.progress(
            STEP,
            ProgressState::Started,
            format!("host {host} reported started: waiting for its nova-compute to report"),
        );
        match self.bring_back(host).await? {
            Ok(()) => {
                let message = format!(
                    "nova-compute on {host} reports, is up and enabled; the host is back in service"
                );
                self.reporter
                    .progress(STEP, ProgressState::Succeeded, message);
                self.reporter.host_update(host, Some(false), None);
                Ok(RunOutcome::Completed {
                    message: format!("host {host} returned to service"),
                })
            }
            Err(failure) => {
                let message = failure.to_string();
                self.reporter
                    .progress(STEP, ProgressState::Failed, message.clone());
                Ok(RunOutcome::Failed {
                    message,
                    retryable: failure.transient,
                })
            }
        }
    }

    /// Waits for `host`'s nova-compute to report, then lifts its forced
    /// down and enables it, and waits for Nova to see it up.
    async fn bring_back(&self, host: &str) -> Result<Result<(), StepFailure>, Cancelled> {
        let service = match self.reporting(host).await? {
            Ok(service) => service,
            Err(failure) => return Ok(Err(failure)),
        };
        let update = ServiceUpdate {
            forced_down: Some(false),
            enabled: Some(true),
            ..ServiceUpdate::default()
        };
        let mut service = if update.is_applied_to(&service) {
            service
        } else {
            match self
                .or_cancel(self.openstack().update_service(&service, &update))
                .await?
            {
                Ok(updated) => updated,
                Err(e) => return Ok(Err(StepFailure::new(STEP, e).doing("force up and enable"))),
            }
        };
        let timeout = self.settings().service_down_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        while service.state != "up" {
            if tokio::time::Instant::now() >= deadline {
                return Ok(Err(not_up(host, timeout)));
            }
            self.pause(self.settings().poll_interval).await?;
            if let Ok(Some(current)) = self
                .or_cancel(self.openstack().compute_service(host))
                .await?
            {
                service = current;
            }
        }
        Ok(Ok(()))
    }

    /// `host`'s nova-compute, once Nova's records show it reporting: up
    /// already, or its `updated_at` moved since first read.
    async fn reporting(
        &self,
        host: &str,
    ) -> Result<Result<ComputeService, StepFailure>, Cancelled> {
        let first = match self
            .or_cancel(self.openstack().compute_service(host))
            .await?
        {
            Ok(Some(service)) => service,
            Ok(None) => {
                return Ok(Err(StepFailure::new(
                    STEP,
                    format!("nova has no nova-compute service on host {host}"),
                )));
            }
            Err(e) => return Ok(Err(StepFailure::new(STEP, e))),
        };
        if reports(&first, &first) {
            return Ok(Ok(first));
        }
        let timeout = self.settings().service_down_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if tokio::time::Instant::now() >= deadline {
                return Ok(Err(silent(host, &first, timeout)));
            }
            self.pause(self.settings().poll_interval).await?;
            if let Ok(Some(current)) = self
                .or_cancel(self.openstack().compute_service(host))
                .await?
                && reports(&first, &current)
            {
                return Ok(Ok(current));
            }
        }
    }
}

/// Whether Nova's records show the nova-compute reporting: Nova sees it up
/// (not forced down, a recent heartbeat), or its `updated_at` moved since
/// `first` (forced down, Nova shows it down whatever it does).
fn reports(first: &ComputeService, current: &ComputeService) -> bool {
    (current.state == "up" && current.forced_down != Some(true))
        || matches!((first.updated_at, current.updated_at), (Some(a), Some(b)) if b > a)
}

fn silent(host: &str, first: &ComputeService, waited: Duration) -> StepFailure {
    let since = first
        .updated_at
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| "ever".to_owned());
    let mut failure = StepFailure::new(
        STEP,
        format!(
            "nova-compute on {host} has not reported since {since} (waited {}): the host stays \
             forced down, disabled and on maintenance",
            humantime::format_duration(waited)
        ),
    );
    failure.transient = true;
    failure
}

fn not_up(host: &str, waited: Duration) -> StepFailure {
    let mut failure = StepFailure::new(
        STEP,
        format!(
            "nova still reports nova-compute on {host} down {} after it was forced up and enabled",
            humantime::format_duration(waited)
        ),
    );
    failure.transient = true;
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone as _, Utc};

    fn service(state: &str, forced_down: bool, updated: i64) -> ComputeService {
        ComputeService {
            id: openstack_client::nova::ServiceId::Number(1),
            binary: "nova-compute".to_owned(),
            host: "compute-01".to_owned(),
            status: "disabled".to_owned(),
            state: state.to_owned(),
            forced_down: Some(forced_down),
            disabled_reason: None,
            updated_at: Some(Utc.timestamp_opt(updated, 0).unwrap()),
        }
    }

    #[test]
    fn a_forced_down_service_reports_once_its_record_moves() {
        let first = service("down", true, 100);
        assert!(!reports(&first, &first));
        assert!(!reports(&first, &service("down", true, 100)));
        assert!(reports(&first, &service("down", true, 110)));
    }

    #[test]
    fn a_service_nova_sees_up_reports() {
        let up = service("up", false, 100);
        assert!(reports(&up, &up));
        // Forced down, Nova's "up" cannot be (and is not taken as) a heartbeat.
        let forced = service("up", true, 100);
        assert!(!reports(&forced, &forced));
    }

    #[test]
    fn a_silent_service_fails_for_a_passing_reason_naming_its_last_report() {
        let failure = silent(
            "compute-01",
            &service("down", true, 0),
            Duration::from_secs(180),
        );
        assert!(failure.transient);
        let text = failure.to_string();
        assert!(text.contains("compute-01"), "{text}");
        assert!(text.contains("1970-01-01T00:00:00"), "{text}");
        assert!(text.contains("3m"), "{text}");
    }
}
