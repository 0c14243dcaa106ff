//! The instance-failure workflow (VM): for a recoverable libvirt event on an
//! HA-enabled instance, stop it, start it, and confirm it is active.
//! Paused and rescued instances are left alone, as in Masakari.

use super::{
    Cancelled, InstanceResult, PlannedInstance, ProgressState, Run, RunOutcome, StepFailure,
    VMoveType,
};
use crate::workflow::selection::is_ha_enabled;
use crate::workflow::vm_events::calls_for_recovery;

impl Run {
    pub(super) async fn instance_failure(&self) -> RunOutcome {
        match self.instance_failure_steps().await {
            Ok(outcome) => outcome,
            Err(Cancelled) => RunOutcome::Cancelled {
                message: "the run was cancelled".to_owned(),
            },
        }
    }

    async fn instance_failure_steps(&self) -> Result<RunOutcome, Cancelled> {
        let event = self.payload("event").unwrap_or_default().to_owned();
        let domain_event = self
            .payload("vir_domain_event")
            .unwrap_or_default()
            .to_owned();
        let id = self.payload("instance_uuid").unwrap_or_default().to_owned();
        if !calls_for_recovery(&event, &domain_event) {
            return Ok(RunOutcome::Ignored {
                message: format!("event {event}/{domain_event} does not call for a recovery"),
            });
        }
        let server = match self.server_unless_gone(&id).await? {
            Ok(Some(server)) => server,
            Ok(None) => {
                return Ok(RunOutcome::Ignored {
                    message: format!("instance {id} does not exist"),
                });
            }
            Err(e) => {
                return Ok(RunOutcome::Failed {
                    message: format!("lookup: {e}"),
                    retryable: true,
                });
            }
        };
        let key = &self.settings().vm_ha_enabled_key;
        if !self.settings().process_all_instances && !is_ha_enabled(&server.metadata, key) {
            self.reporter.progress(
                "select_instance",
                ProgressState::Skipped,
                format!(
                    "{} ({id}) is not HA-enabled (metadata {key} is not true)",
                    server.name
                ),
            );
            return Ok(RunOutcome::Completed {
                message: format!("instance {id} is not HA-enabled; nothing to do"),
            });
        }
        self.reporter.plan(vec![PlannedInstance {
            instance_id: id.as_str().into(),
            instance_name: server.name.clone(),
            source_host: server.host.clone().unwrap_or_default(),
            vmove_type: VMoveType::Restart,
            prior_state: None,
        }]);
        let start = self.now();
        self.reporter.instance_started(&id, start);
        let outcome = self.restart(&id, server.vm_state()).await;
        match outcome {
            Ok(outcome) => {
                self.reporter.instance_finished(&id, outcome, start);
                Ok(RunOutcome::Completed {
                    message: format!("instance {id} processed"),
                })
            }
            Err(Cancelled) => {
                self.reporter.instance_finished(
                    &id,
                    InstanceResult::Failed {
                        message: "cancelled before the recovery finished".to_owned(),
                        retryable: true,
                    },
                    start,
                );
                Err(Cancelled)
            }
        }
    }

    async fn restart(&self, id: &str, vm_state: &str) -> Result<InstanceResult, Cancelled> {
        if matches!(vm_state, "paused" | "rescued") {
            return Ok(InstanceResult::Ignored {
                message: format!("the instance is {vm_state}; left alone"),
            });
        }
        if vm_state == "resized" {
            self.reporter
                .step(id, "prepare", "resetting a resized instance to active");
            if let Err(e) = self
                .or_cancel(self.openstack().reset_state(id, "active"))
                .await?
            {
                return Ok(StepFailure::new("prepare", e).result());
            }
        }
        if vm_state != "stopped" {
            self.reporter.step(id, "stop", "stopping the instance");
            if let Err(cause) = self.power(id, false).await? {
                return Ok(StepFailure::new("stop", cause).result());
            }
        }
        self.reporter.step(id, "start", "starting the instance");
        if let Err(cause) = self.power(id, true).await? {
            return Ok(StepFailure::new("start", cause).result());
        }
        let host = match self.or_cancel(self.openstack().server(id)).await? {
            Ok(server) => server.host,
            Err(_) => None,
        };
        Ok(InstanceResult::succeeded(host))
    }
}
