//! After a successful evacuation: the instance put back in the state it
//! was in before the failure (started, stopped, or reset to error), each
//! power change waited for.

use std::time::Duration;

use super::{Cancelled, Cause, InstanceResult, Run, StepFailure};
use crate::workflow::evacuation::{self, Preparation, Restoration};

impl Run {
    /// After a successful evacuation: put the instance back in the state it
    /// was in.
    pub(super) async fn finish(
        &self,
        id: &str,
        dest_host: String,
        preparation: Preparation,
    ) -> Result<InstanceResult, Cancelled> {
        let server = match self.or_cancel(self.openstack().server(id)).await? {
            Ok(server) => server,
            Err(e) => {
                return Ok(StepFailure::new(
                    "restore_state",
                    format!("evacuated to {dest_host}, but {e}"),
                )
                .result());
            }
        };
        let restoration = evacuation::restoration(preparation.desired, server.vm_state());
        let result = match restoration {
            Restoration::Nothing => Ok(()),
            Restoration::Start => {
                self.reporter
                    .step(id, "restore_state", "starting it again, as it was before");
                self.power(id, true).await?
            }
            Restoration::Stop => {
                self.reporter
                    .step(id, "restore_state", "stopping it again, as it was before");
                self.power(id, false).await?
            }
            Restoration::ResetToError => {
                self.reporter.step(
                    id,
                    "restore_state",
                    "resetting it to error, as it was before",
                );
                self.or_cancel(self.openstack().reset_state(id, "error"))
                    .await?
                    .map_err(Cause::from)
            }
        };
        Ok(match result {
            Ok(()) => InstanceResult::succeeded(Some(dest_host)),
            Err(cause) => InstanceResult::Failed {
                message: format!(
                    "restore_state: evacuated to {dest_host}, but {}",
                    cause.message
                ),
                retryable: cause.transient,
            },
        })
    }

    /// Starts or stops the server and waits until it is active or stopped.
    pub(super) async fn power(&self, id: &str, on: bool) -> Result<Result<(), Cause>, Cancelled> {
        let (call, want) = if on {
            (self.or_cancel(self.openstack().start(id)).await?, "active")
        } else {
            (self.or_cancel(self.openstack().stop(id)).await?, "stopped")
        };
        if let Err(e) = call
            && !e.is_conflict()
        {
            return Ok(Err(e.into()));
        }
        self.wait_for_state(id, want, self.settings().power_timeout)
            .await
    }

    pub(super) async fn wait_for_state(
        &self,
        id: &str,
        want: &str,
        timeout: Duration,
    ) -> Result<Result<(), Cause>, Cancelled> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.or_cancel(self.openstack().server(id)).await? {
                Ok(server) if server.vm_state() == want && server.task_state.is_none() => {
                    return Ok(Ok(()));
                }
                Ok(server) if server.vm_state() == "error" => {
                    return Ok(Err(format!(
                        "the instance went to error instead of {want}{}",
                        server
                            .fault
                            .map(|f| format!(": {}", f.message))
                            .unwrap_or_default()
                    )
                    .into()));
                }
                Ok(_) => {}
                Err(e) if e.is_not_found() => {
                    return Ok(Err("the instance was deleted".into()));
                }
                Err(e) => tracing::warn!(instance_id = %id, error = %e, "cannot read the instance"),
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Err(Cause::transient(format!(
                    "the instance did not become {want} within {}",
                    humantime::format_duration(timeout)
                ))));
            }
            self.pause(self.settings().poll_interval).await?;
        }
    }
}
