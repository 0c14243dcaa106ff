//! The failed host itself: its report admitted (a STOPPED event of a host
//! known to be fenced, or whose nova-compute Nova sees down), and its
//! nova-compute forced down and disabled so that Nova evacuates from it
//! and schedules nothing there.

use super::{Cancelled, ProgressState, Run, RunOutcome, StepFailure};
use openstack_client::nova::{ComputeService, ServiceUpdate};

impl Run {
    /// Whether the report is a host failure to recover: `Ok(fenced)` (the
    /// report says the host was fenced), or the run's outcome when it is
    /// not one (a STARTED host, another event, an unfenced host).
    pub(super) async fn admit_host_failure(
        &self,
        host: &str,
    ) -> Result<Result<bool, RunOutcome>, Cancelled> {
        let event = self.payload("event").unwrap_or_default().to_owned();
        if event == "STARTED" {
            return Ok(Err(self.host_started(host).await?));
        }
        if event != "STOPPED" {
            return Ok(Err(RunOutcome::Ignored {
                message: format!("event {event:?} is not a host failure"),
            }));
        }
        let host_status = self.payload("host_status");
        if self.settings().require_fencing && host_status != Some("NORMAL") {
            let message = format!(
                "host {host} is not known to be fenced (host_status {}): evacuating could run two copies of its instances; \
                 set host_failure.require_fencing = false to recover unfenced hosts",
                host_status.unwrap_or("missing")
            );
            self.reporter
                .progress("check_fencing", ProgressState::Skipped, message.clone());
            return Ok(Err(RunOutcome::Ignored { message }));
        }
        let fenced = host_status == Some("NORMAL");
        if !fenced && let Some(message) = self.unfenced_and_up(host).await? {
            self.reporter.progress(
                "check_compute_service",
                ProgressState::Skipped,
                message.clone(),
            );
            return Ok(Err(RunOutcome::Ignored { message }));
        }
        Ok(Ok(fenced))
    }

    /// Why a host not reported fenced must be left alone: Nova sees its
    /// nova-compute up (state up, not forced down), so the host may well be
    /// running its instances, and forcing it down would let Nova start
    /// second copies. `None` when Nova sees it down or forced down, or
    /// cannot say (the service step that follows reports that).
    pub(super) async fn unfenced_and_up(&self, host: &str) -> Result<Option<String>, Cancelled> {
        let service = self
            .or_cancel(self.openstack().compute_service(host))
            .await?;
        Ok(match service {
            Ok(Some(service)) if service.state == "up" && service.forced_down != Some(true) => {
                Some(format!(
                    "nova reports nova-compute on {host} up and the report does not say the host was fenced \
                     (host_status NORMAL): forcing it down could run two copies of its instances"
                ))
            }
            _ => None,
        })
    }

    /// Takes the failed host's nova-compute down: forced down (then the
    /// service, still to disable, is returned) or, without force-down,
    /// disabled and waited for until Nova sees it down.
    pub(super) async fn take_failed_service_down(
        &self,
        host: &str,
    ) -> Result<Result<Option<ComputeService>, StepFailure>, Cancelled> {
        const STEP: &str = "disable_compute_service";
        let service = match self
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
        let mut service: ComputeService = service;
        if self.settings().force_down && service.forced_down != Some(true) {
            // First, alone: disabling a compute Nova thinks is up makes Nova
            // call the dead host and wait for its RPC timeout.
            match self
                .or_cancel(self.openstack().update_service(
                    &service,
                    &ServiceUpdate {
                        forced_down: Some(true),
                        ..ServiceUpdate::default()
                    },
                ))
                .await?
            {
                Ok(updated) => service = updated,
                Err(e) => return Ok(Err(StepFailure::new(STEP, e).doing("force down"))),
            }
        }
        if self.settings().force_down {
            return Ok(Ok((service.status != "disabled").then_some(service)));
        }
        if service.status != "disabled" {
            let update = ServiceUpdate {
                enabled: Some(false),
                disabled_reason: Some(self.settings().host_disable_reason.clone()),
                ..ServiceUpdate::default()
            };
            match self
                .or_cancel(self.openstack().update_service(&service, &update))
                .await?
            {
                Ok(updated) => service = updated,
                Err(e) => return Ok(Err(StepFailure::new(STEP, e).doing("disable"))),
            }
        }
        let deadline = tokio::time::Instant::now() + self.settings().service_down_timeout;
        while service.state != "down" {
            if tokio::time::Instant::now() >= deadline {
                return Ok(Err(StepFailure::new(
                    STEP,
                    format!(
                        "nova still reports nova-compute on {host} up after {}",
                        humantime::format_duration(self.settings().service_down_timeout)
                    ),
                )));
            }
            self.pause(self.settings().poll_interval).await?;
            if let Ok(Some(current)) = self
                .or_cancel(self.openstack().compute_service(host))
                .await?
            {
                service = current;
            }
        }
        Ok(Ok(None))
    }

    /// Disables the failed host's nova-compute, already forced down, with
    /// the reason, alongside the evacuations; a failure is reported and does
    /// not stop them (forced down, the host is neither a source of new
    /// trouble nor a scheduling target).
    pub(super) async fn disable_failed_service(
        &self,
        host: &str,
        service: ComputeService,
    ) -> Result<(), Cancelled> {
        let update = ServiceUpdate {
            enabled: Some(false),
            disabled_reason: Some(self.settings().host_disable_reason.clone()),
            ..ServiceUpdate::default()
        };
        match self
            .or_cancel(self.openstack().update_service(&service, &update))
            .await?
        {
            Ok(_) => self.reporter.progress(
                "disable_compute_service",
                ProgressState::Succeeded,
                format!("nova-compute on {host} is down and disabled"),
            ),
            Err(e) => self.reporter.progress(
                "disable_compute_service",
                ProgressState::Failed,
                format!("disable nova-compute on {host} (it stays forced down): {e}"),
            ),
        }
        Ok(())
    }
}
