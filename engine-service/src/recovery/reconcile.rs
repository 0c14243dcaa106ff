//! Runs that change nothing but the engine's own locks. A *reconcile* run
//! reads what Nova says of each named instance — where it is, its state,
//! its newest evacuation away from the failed host, its lock — follows an
//! evacuation Nova is still carrying out while it moves, releases this
//! notification's lock, and reports each instance's truth; the API gives
//! its final verdict from that, never from what a lost run last saw. An
//! evacuation Nova lost, or whose records have not changed for
//! `recovery.stalled_evacuation_after` (by Nova's own timestamps: one a
//! recover run already followed to its end), is judged at once
//! (`workflow::stall`): not recovered, retryable, the reason said (the
//! repair is a recover run's job), its lock kept. A *release-locks* run
//! only releases this notification's locks, for a notification that has
//! ended with some left held.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::lost::StallWatch;
use super::services::ServiceWatch;
use super::{Cancelled, InstanceRef, InstanceResult, ProgressState, Run, RunOutcome};
use crate::workflow::evacuation::{self, Truth};
use crate::workflow::stall::Stall;
use openstack_client::nova::{Migration, Server};

impl Run {
    /// A reconcile run (`verdicts`: report each instance's truth) or a
    /// release-locks run.
    pub(super) async fn reconcile(&self, verdicts: bool) -> RunOutcome {
        let task = if verdicts {
            "reconcile"
        } else {
            "release_locks"
        };
        let count = self.request.instances.len();
        self.reporter.progress(
            task,
            ProgressState::Started,
            if verdicts {
                format!("reading what nova says of {count} instance(s)")
            } else {
                format!("releasing this notification's locks on {count} instance(s)")
            },
        );
        let limit = Arc::new(Semaphore::new(
            self.settings().max_concurrent_instances.max(1),
        ));
        let services = Arc::new(ServiceWatch::new(
            self.openstack().clone(),
            self.settings().poll_interval,
        ));
        let mut workers = JoinSet::new();
        for instance in self.request.instances.clone() {
            let run = self.clone();
            let limit = limit.clone();
            let services = services.clone();
            workers.spawn(async move {
                let Ok(_permit) = limit.acquire_owned().await else {
                    return Err(Cancelled);
                };
                let result = if verdicts {
                    run.reconcile_instance(&instance, &services).await?
                } else {
                    run.release_lock(&instance).await?;
                    return Ok(());
                };
                run.reporter
                    .reconciled(instance.instance_id.as_str(), result);
                Ok(())
            });
        }
        let mut cancelled = false;
        while let Some(joined) = workers.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(Cancelled)) => cancelled = true,
                Err(e) => tracing::error!(error = %e, "reconcile worker failed"),
            }
        }
        if cancelled {
            return RunOutcome::Cancelled {
                message: "the run was cancelled".to_owned(),
            };
        }
        self.reporter.progress(
            task,
            ProgressState::Succeeded,
            format!("{count} instance(s) looked at"),
        );
        RunOutcome::Completed {
            message: if verdicts {
                format!("{count} instance(s) reconciled with nova")
            } else {
                format!("locks looked at on {count} instance(s)")
            },
        }
    }

    /// What Nova says of one instance, after any evacuation it is still
    /// carrying out; this notification's lock released on the way.
    async fn reconcile_instance(
        &self,
        instance: &InstanceRef,
        services: &ServiceWatch,
    ) -> Result<InstanceResult, Cancelled> {
        let id = instance.instance_id.as_str();
        let source = source_of(self, instance);
        let deadline = tokio::time::Instant::now() + self.settings().evacuation_timeout;
        let mut stall = StallWatch::judging();
        loop {
            let server = match self.server_unless_gone(id).await? {
                Ok(Some(server)) => server,
                Ok(None) => {
                    return Ok(InstanceResult::Ignored {
                        message: "nova says the instance no longer exists".to_owned(),
                    });
                }
                Err(e) => {
                    return Ok(InstanceResult::Failed {
                        retryable: e.is_transient(),
                        message: format!("nova could not be read to confirm its state: {e}"),
                    });
                }
            };
            let newest = match self.or_cancel(self.openstack().evacuations_of(id)).await? {
                Ok(migrations) => migrations
                    .into_iter()
                    .find(|m| m.source_compute.as_deref() == Some(source)),
                // Without the records the server alone tells.
                Err(e) => {
                    tracing::warn!(instance_id = %id, error = %e, "cannot read the instance's evacuations");
                    None
                }
            };
            let truth = evacuation::truth(source, &server, newest.as_ref());
            if let Truth::InProgress(state) = &truth {
                if let Some(m) = newest.as_ref().filter(|m| evacuation::in_flight(m))
                    && let Some(message) = self
                        .stalled_verdict(id, source, &server, m, services, &mut stall)
                        .await?
                {
                    return Ok(InstanceResult::Failed {
                        message,
                        retryable: true,
                    });
                }
                if tokio::time::Instant::now() < deadline {
                    self.pause(self.settings().poll_interval).await?;
                    continue;
                }
                return Ok(InstanceResult::Failed {
                    message: format!(
                        "nova was still evacuating it after {}: {state}",
                        humantime::format_duration(self.settings().evacuation_timeout)
                    ),
                    retryable: true,
                });
            }
            let unlocked = self.unlock_if_ours(id, &server).await;
            let lock_note = unlocked
                .err()
                .map(|failure| format!("; left locked for now: {failure}"))
                .unwrap_or_default();
            return Ok(match truth {
                Truth::Recovered { host, vm_state } => InstanceResult::Succeeded {
                    note: Some(format!("nova shows it {vm_state} on {host}{lock_note}")),
                    dest_host: Some(host),
                },
                Truth::NotRecovered(text) => InstanceResult::Failed {
                    message: format!("{text}{lock_note}"),
                    retryable: false,
                },
                // Past the deadline (handled above): still not recovered.
                Truth::InProgress(state) => InstanceResult::Failed {
                    message: format!("{state}{lock_note}"),
                    retryable: true,
                },
            });
        }
    }

    /// The verdict on an evacuation in flight that Nova lost, or whose
    /// records have not changed for `stalled_evacuation_after`: not
    /// recovered (for now), with what Nova shows; `None` while it moves.
    async fn stalled_verdict(
        &self,
        id: &str,
        source: &str,
        server: &Server,
        m: &Migration,
        services: &ServiceWatch,
        stall: &mut StallWatch,
    ) -> Result<Option<String>, Cancelled> {
        let (judged, quiet) = self.look(id, source, server, m, services, stall).await?;
        let after = self.settings().stalled_evacuation_after;
        Ok(match judged {
            Stall::Repair(reason) => Some(format!(
                "nova lost its evacuation: {reason}; a recovery run evacuates it again"
            )),
            Stall::AwaitFencing { host, reason } => Some(format!(
                "{reason}; it is evacuated again once {host} is reported failed and fenced (its nova-compute forced down)"
            )),
            Stall::Unproven(text) if quiet >= after => Some(format!(
                "nova shows no change of its evacuation for over {}: {text}",
                humantime::format_duration(after)
            )),
            Stall::Unproven(_) | Stall::Proceeding | Stall::ReadAction => None,
        })
    }

    /// Releases this notification's lock on the instance, if it holds one
    /// (reported as `LockChanged`); a lock of anyone else stays.
    async fn release_lock(&self, instance: &InstanceRef) -> Result<(), Cancelled> {
        let id = instance.instance_id.as_str();
        match self.server_unless_gone(id).await? {
            Ok(Some(server)) => {
                if !self.locked_by_us(&server) {
                    // Released meanwhile (or never ours): nothing is held.
                    self.reporter.lock_changed(id, false);
                } else if self.evacuation_in_flight(id).await {
                    // The lock stays with the notification until the
                    // instance settles: released by a later run.
                    tracing::info!(instance_id = %id, "lock kept: nova is still evacuating the instance");
                } else if let Err(failure) = self.unlock_if_ours(id, &server).await {
                    tracing::warn!(instance_id = %id, reason = %failure, "lock not released yet");
                }
            }
            // A deleted instance holds no lock.
            Ok(None) => self.reporter.lock_changed(id, false),
            Err(e) => {
                tracing::warn!(instance_id = %id, error = %e, "cannot read the instance to release its lock")
            }
        }
        Ok(())
    }
}

/// The host the instance is recovered from: as the API named it, else the
/// notification's.
fn source_of<'a>(run: &'a Run, instance: &'a InstanceRef) -> &'a str {
    if instance.source_host.is_empty() {
        &run.request.hostname
    } else {
        &instance.source_host
    }
}
