//! The process-failure workflow (PROCESS, nova-compute): on STOPPED,
//! disable the compute service and confirm it; on STARTED, enable it again
//! and clear the host's maintenance flag if configured (Masakari never
//! does: recovery back to service is manual there).

use super::{Cancelled, ProgressState, Run, RunOutcome};
use openstack_client::nova::ServiceUpdate;

impl Run {
    pub(super) async fn process_failure(&self) -> RunOutcome {
        match self.process_failure_steps().await {
            Ok(outcome) => outcome,
            Err(Cancelled) => RunOutcome::Cancelled {
                message: "the run was cancelled".to_owned(),
            },
        }
    }

    async fn process_failure_steps(&self) -> Result<RunOutcome, Cancelled> {
        let host = self.request.hostname.clone();
        let process = self.payload("process_name").unwrap_or_default().to_owned();
        let event = self.payload("event").unwrap_or_default().to_owned();
        if process != "nova-compute" {
            return Ok(RunOutcome::Completed {
                message: format!("process {process} on {host} is not one instance-ha recovers"),
            });
        }
        let service = match self
            .or_cancel(self.openstack().compute_service(&host))
            .await?
        {
            Ok(Some(service)) => service,
            Ok(None) => {
                return Ok(RunOutcome::Failed {
                    message: format!("nova has no nova-compute service on host {host}"),
                    retryable: false,
                });
            }
            Err(e) => {
                return Ok(RunOutcome::Failed {
                    message: format!("read nova-compute on {host}: {e}"),
                    retryable: true,
                });
            }
        };
        match event.as_str() {
            "STOPPED" => {
                self.reporter.host_update(&host, Some(true), None);
                if service.status == "disabled" {
                    self.reporter.progress(
                        "disable_compute_node",
                        ProgressState::Skipped,
                        format!("nova-compute on {host} is already disabled"),
                    );
                } else {
                    let update = ServiceUpdate {
                        enabled: Some(false),
                        disabled_reason: Some(self.settings().process_disable_reason.clone()),
                        ..ServiceUpdate::default()
                    };
                    if let Err(e) = self
                        .or_cancel(self.openstack().update_service(&service, &update))
                        .await?
                    {
                        return Ok(RunOutcome::Failed {
                            message: format!("disable nova-compute on {host}: {e}"),
                            retryable: true,
                        });
                    }
                }
                // Confirm by reading it back.
                match self
                    .or_cancel(self.openstack().compute_service(&host))
                    .await?
                {
                    Ok(Some(current)) if current.status == "disabled" => {
                        self.reporter.progress(
                            "confirm_compute_node_disabled",
                            ProgressState::Succeeded,
                            format!("nova-compute on {host} is disabled"),
                        );
                        Ok(RunOutcome::Completed {
                            message: format!("nova-compute on {host} disabled"),
                        })
                    }
                    Ok(_) => Ok(RunOutcome::Failed {
                        message: format!(
                            "nova-compute on {host} is still enabled after disabling it"
                        ),
                        retryable: true,
                    }),
                    Err(e) => Ok(RunOutcome::Failed {
                        message: format!("confirm nova-compute on {host} disabled: {e}"),
                        retryable: true,
                    }),
                }
            }
            "STARTED" => {
                if !self.settings().enable_on_process_started {
                    self.reporter.progress(
                        "enable_compute_node",
                        ProgressState::Skipped,
                        format!(
                            "nova-compute on {host} started; it stays as it is (process_failure.enable_on_started is off)"
                        ),
                    );
                    return Ok(RunOutcome::Completed {
                        message: format!("nova-compute on {host} started"),
                    });
                }
                if service.status != "enabled" {
                    let update = ServiceUpdate {
                        enabled: Some(true),
                        ..ServiceUpdate::default()
                    };
                    if let Err(e) = self
                        .or_cancel(self.openstack().update_service(&service, &update))
                        .await?
                    {
                        return Ok(RunOutcome::Failed {
                            message: format!("enable nova-compute on {host}: {e}"),
                            retryable: true,
                        });
                    }
                }
                self.reporter.host_update(&host, Some(false), None);
                self.reporter.progress(
                    "enable_compute_node",
                    ProgressState::Succeeded,
                    format!("nova-compute on {host} enabled and the host taken off maintenance"),
                );
                Ok(RunOutcome::Completed {
                    message: format!("nova-compute on {host} enabled again"),
                })
            }
            other => Ok(RunOutcome::Ignored {
                message: format!("event {other:?} is not a process failure"),
            }),
        }
    }
}
