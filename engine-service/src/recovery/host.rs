//! The host-failure workflow (COMPUTE_HOST): check fencing, force the
//! failed nova-compute down and disable it, list and select the host's
//! instances, announce the plan, then recover every instance with bounded
//! concurrency, each to its list of targets.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::FutureExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument as _;

use super::devices::DeviceTargets;
use super::evacuate::EvacuationJob;
use super::migrations::MigrationWatch;
use super::reserved::ReservedHosts;
use super::tiers::{TierGate, TierTicket};
use super::{
    Cancelled, InstanceResult, PlannedInstance, ProgressState, Run, RunOutcome, VMoveType,
};
use crate::workflow::evacuation;
use crate::workflow::priority::Tier;
use crate::workflow::selection::{Chosen, select_instances};
use crate::workflow::targets::{Target, targets};

/// A worker's share of the concurrency limits (per run and engine-wide):
/// held while it works on OpenStack, let go while Nova rebuilds its
/// instance. The limits bound the calls in flight, not the evacuations
/// that Nova queues and paces itself.
///
/// Each run's first worker is exempt from the engine-wide limit (at most
/// one extra worker per run): when many hosts fail at once, every host's
/// recovery starts at once instead of queueing behind the instances of the
/// hosts reported before it.
pub(super) struct Slot {
    per_run: Arc<Semaphore>,
    /// `None` for the run's lead worker.
    global: Option<Arc<Semaphore>>,
    held: Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)>,
    /// Holds the later tiers back until the worker first lets go (its
    /// evacuation requested, Nova rebuilding) or ends.
    tier: Option<TierTicket>,
}

impl Slot {
    /// Waits for the permits, unless held already.
    pub(super) async fn hold(&mut self) {
        if self.held.is_some() {
            return;
        }
        let Ok(run) = self.per_run.clone().acquire_owned().await else {
            return;
        };
        let engine = match &self.global {
            Some(global) => match global.clone().acquire_owned().await {
                Ok(permit) => Some(permit),
                Err(_) => return,
            },
            None => None,
        };
        self.held = Some((run, engine));
    }

    pub(super) fn release(&mut self) {
        self.held = None;
        self.tier = None;
    }
}

/// Counts an instance in recovery while it lives.
struct InRecovery(Arc<AtomicUsize>);

impl InRecovery {
    fn count(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter.clone())
    }
}

impl Drop for InRecovery {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Run {
    pub(super) async fn host_failure(&self) -> RunOutcome {
        match self.host_failure_steps().await {
            Ok(outcome) => outcome,
            Err(Cancelled) => RunOutcome::Cancelled {
                message: "the run was cancelled".to_owned(),
            },
        }
    }

    async fn host_failure_steps(&self) -> Result<RunOutcome, Cancelled> {
        let host = self.request.hostname.clone();
        let fenced = match self.admit_host_failure(&host).await? {
            Ok(fenced) => fenced,
            Err(outcome) => return Ok(outcome),
        };
        self.reporter.host_update(&host, Some(true), None);

        // Nova refuses evacuations while it thinks the source is up.
        self.reporter.progress(
            "disable_compute_service",
            ProgressState::Started,
            format!("forcing down and disabling nova-compute on {host}"),
        );
        // Listing the instances and the evacuations already away from the
        // host does not depend on the service's state: both run while the
        // service is taken down, off the path to the first evacuation.
        let listing = async {
            if self.request.instances.is_empty() {
                Some(self.select(&host).await)
            } else {
                None
            }
        };
        let watching = self.or_cancel(MigrationWatch::start(
            self.openstack().clone(),
            host.clone(),
            self.settings().migration_poll_interval,
            self.settings().poll_interval,
        ));
        let (service, listed, watch) =
            tokio::join!(self.take_failed_service_down(&host), listing, watching);
        let (listed, watch) = (listed.transpose()?, Arc::new(watch?));
        let to_disable = match service? {
            Ok(to_disable) => to_disable,
            Err(failure) => {
                self.reporter.progress(
                    "disable_compute_service",
                    ProgressState::Failed,
                    failure.to_string(),
                );
                return Ok(RunOutcome::Failed {
                    message: failure.to_string(),
                    retryable: failure.transient,
                });
            }
        };
        self.reporter.progress(
            "disable_compute_service",
            if to_disable.is_some() {
                ProgressState::Info
            } else {
                ProgressState::Succeeded
            },
            if to_disable.is_some() {
                format!(
                    "nova-compute on {host} is forced down; disabling it alongside the evacuations"
                )
            } else {
                format!("nova-compute on {host} is down and disabled")
            },
        );
        let wait = self.settings().wait_after_service_update;
        if !wait.is_zero() {
            self.pause(wait).await?;
        }

        let jobs = match listed {
            Some(Ok(jobs)) => jobs,
            Some(Err(outcome)) => return Ok(outcome),
            None => self.retried_jobs().await?,
        };

        let jobs = with_prior_states(jobs, &watch);
        self.reporter.plan(
            jobs.iter()
                .map(|job| PlannedInstance {
                    instance_id: job.instance_id.as_str().into(),
                    instance_name: job.instance_name.clone(),
                    source_host: host.clone(),
                    vmove_type: VMoveType::Evacuation,
                    prior_state: job.prior_state,
                })
                .collect(),
        );

        let targets = match targets(
            self.request.recovery_method,
            &self.request.reserved_host_names(),
            &host,
        ) {
            Ok(targets) => targets,
            Err(e) => {
                let message = format!("{e} ({})", self.request.segment_name);
                for job in &jobs {
                    let start = self.now();
                    self.reporter.instance_started(&job.instance_id, start);
                    self.reporter.instance_finished(
                        &job.instance_id,
                        InstanceResult::failed(message.clone()),
                        start,
                    );
                }
                return Ok(RunOutcome::Failed {
                    message,
                    retryable: false,
                });
            }
        };

        self.reporter.progress(
            "evacuate_instances",
            ProgressState::Started,
            format!(
                "recovering {} instance(s) from {host} to {}",
                jobs.len(),
                targets
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", then ")
            ),
        );
        let results = match to_disable {
            // Forced down, Nova already evacuates and schedules nothing
            // there: the disable (which keeps the host out of scheduling
            // once it is back) is off the path to the first evacuation.
            Some(service) => {
                let (disabled, results) = tokio::join!(
                    self.disable_failed_service(&host, service),
                    self.evacuate_all(jobs, targets, watch, fenced)
                );
                disabled?;
                results
            }
            None => self.evacuate_all(jobs, targets, watch, fenced).await,
        };
        self.report_evacuated(&results);
        Ok(RunOutcome::Completed {
            message: format!("host {host} processed"),
        })
    }

    /// Lists and selects the host's instances; `Err` ends the run.
    async fn select(
        &self,
        host: &str,
    ) -> Result<Result<Vec<EvacuationJob>, RunOutcome>, Cancelled> {
        self.reporter.progress(
            "list_instances",
            ProgressState::Started,
            format!("listing the instances of {host}"),
        );
        let servers = match self
            .or_cancel(self.openstack().servers_on_host(host))
            .await?
        {
            Ok(servers) => servers,
            Err(e) => {
                let message = format!("list_instances: {e}");
                self.reporter
                    .progress("list_instances", ProgressState::Failed, message.clone());
                return Ok(Err(RunOutcome::Failed {
                    message,
                    retryable: true,
                }));
            }
        };
        let total = servers.len();
        let rules = self.settings().selection_for(&self.request.segment_name);
        let selection = select_instances(servers, rules);
        for (server, reason) in &selection.skipped {
            self.reporter.progress(
                "select_instances",
                ProgressState::Skipped,
                format!("{} ({}): {reason}", server.name, server.id),
            );
        }
        self.reporter.progress(
            "list_instances",
            ProgressState::Succeeded,
            format!(
                "{total} instance(s) on {host}, {} to recover, {} left alone",
                selection.recover.len(),
                selection.skipped.len()
            ),
        );
        if selection.recover.is_empty() {
            return Ok(Err(RunOutcome::Completed {
                message: format!("no instance of {host} needs recovery"),
            }));
        }
        self.report_tiers(&selection.recover);
        Ok(Ok(selection
            .recover
            .into_iter()
            .map(|chosen: Chosen| EvacuationJob {
                instance_id: chosen.server.id.clone(),
                instance_name: chosen.server.name.clone(),
                listed: Some(chosen.server),
                prior_state: None,
                tier: chosen.tier,
                device: chosen.device,
            })
            .collect()))
    }

    /// The plan's tiers, named with their instances (when any instance
    /// names one), and what could not be read of an instance's priority.
    fn report_tiers(&self, chosen: &[Chosen]) {
        for c in chosen {
            if let Some(note) = &c.note {
                let (name, id) = (&c.server.name, &c.server.id);
                self.reporter.progress(
                    "select_instances",
                    ProgressState::Info,
                    format!("{name} ({id}): {note}"),
                );
            }
        }
        if chosen.iter().all(|c| c.tier == Tier::Default) {
            return;
        }
        let mut tiers: Vec<(Tier, Vec<String>)> = Vec::new();
        for c in chosen {
            let named = format!("{} ({})", c.server.name, c.server.id);
            match tiers.last_mut() {
                Some((tier, names)) if *tier == c.tier => names.push(named),
                _ => tiers.push((c.tier, vec![named])),
            }
        }
        let plan = tiers
            .iter()
            .map(|(tier, names)| format!("{tier}: {}", names.join(", ")))
            .collect::<Vec<_>>()
            .join("; ");
        self.reporter.progress(
            "select_instances",
            ProgressState::Info,
            format!("evacuated tier by tier: {plan}"),
        );
    }

    /// Recovers every job, working on at most `max_concurrent_instances` at
    /// once (and within the engine-wide limit); evacuations Nova is
    /// rebuilding do not count. Tier by tier: a job's evacuation is
    /// requested once those of the tiers before it have been. Each job
    /// reports exactly one result, even if its worker panics.
    async fn evacuate_all(
        &self,
        jobs: Vec<EvacuationJob>,
        targets: Vec<Target>,
        watch: Arc<MigrationWatch>,
        fenced: bool,
    ) -> Vec<InstanceResult> {
        let per_run = Arc::new(Semaphore::new(
            self.settings().max_concurrent_instances.max(1),
        ));
        let shared = Arc::new(Shared {
            devices: self.device_targets(&jobs).await,
            targets,
            watch,
            reserved: ReservedHosts::default(),
            fenced,
        });
        // Every ticket is taken before any worker waits for its turn.
        let gate = TierGate::new();
        let tickets: Vec<TierTicket> = jobs.iter().map(|job| gate.ticket(job.tier)).collect();
        let mut workers = JoinSet::new();
        for (i, (job, ticket)) in jobs.into_iter().zip(tickets).enumerate() {
            let slot = Slot {
                per_run: per_run.clone(),
                global: (i > 0).then(|| self.engine.capacity.clone()),
                held: None,
                tier: Some(ticket),
            };
            let span = tracing::info_span!(
                "recovery.instance",
                otel.name = "recovery.instance",
                otel.status_code = tracing::field::Empty,
                instance_id = %job.instance_id,
                instance_name = %job.instance_name,
                host = %self.request.hostname,
                outcome = tracing::field::Empty,
            );
            workers.spawn(
                self.clone()
                    .instance_worker(job, slot, shared.clone())
                    .instrument(span),
            );
        }
        let mut outcomes = Vec::new();
        while let Some(joined) = workers.join_next().await {
            if let Ok(Some(outcome)) = joined {
                outcomes.push(outcome);
            }
        }
        outcomes
    }

    /// One job's worker: waits for its tier's turn and its share of the
    /// limits, recovers the instance and reports its result (`None`:
    /// cancelled).
    async fn instance_worker(
        self,
        job: EvacuationJob,
        mut slot: Slot,
        shared: Arc<Shared>,
    ) -> Option<InstanceResult> {
        if let Some(ticket) = &slot.tier {
            ticket.wait_turn().await;
        }
        let start = self.now();
        let instance_id = job.instance_id.clone();
        let targets = match (&job.device, &shared.devices) {
            (Some(need), Some(devices)) => {
                match devices.for_instance(need, &self.request.segment_name) {
                    Ok(targets) => targets,
                    Err(failed) => {
                        self.reporter.instance_started(&instance_id, start);
                        record_outcome(&instance_id, Some(&failed));
                        self.reporter
                            .instance_finished(&instance_id, failed.clone(), start);
                        return Some(failed);
                    }
                }
            }
            _ => &shared.targets,
        };
        slot.hold().await;
        let _in_recovery = InRecovery::count(&self.engine.in_recovery);
        self.reporter.instance_started(&instance_id, start);
        let work = self.evacuate_instance(
            job,
            targets,
            &shared.watch,
            &shared.reserved,
            shared.fenced,
            &mut slot,
        );
        let outcome = match AssertUnwindSafe(work).catch_unwind().await {
            Ok(Ok(outcome)) => Some(outcome),
            Ok(Err(Cancelled)) => None,
            Err(panic) => {
                let what = instanceha_runtime::panic::message(panic.as_ref());
                tracing::error!(instance_id = %instance_id, panic = %what, "instance worker panicked");
                // A bug may be tied to what Nova showed then: another
                // run reads it afresh.
                Some(InstanceResult::Failed {
                    message: format!("internal error in the engine: {what}"),
                    retryable: true,
                })
            }
        };
        record_outcome(&instance_id, outcome.as_ref());
        // Cancelled: report it if anyone still listens.
        let reported = outcome.clone().unwrap_or(InstanceResult::Failed {
            message: "cancelled before the recovery finished".to_owned(),
            retryable: true,
        });
        self.reporter
            .instance_finished(&instance_id, reported, start);
        outcome
    }

    /// The evacuations' end, reported: how many of them recovered.
    fn report_evacuated(&self, results: &[InstanceResult]) {
        let failed = results
            .iter()
            .filter(|o| matches!(o, InstanceResult::Failed { .. }))
            .count();
        self.reporter.progress(
            "evacuate_instances",
            if failed == 0 {
                ProgressState::Succeeded
            } else {
                ProgressState::Failed
            },
            format!(
                "{} of {} instance(s) recovered",
                results.len() - failed,
                results.len()
            ),
        );
    }
}

/// What every worker of a run shares.
struct Shared {
    targets: Vec<Target>,
    /// Where device instances may go, if any is among the jobs.
    devices: Option<DeviceTargets>,
    watch: Arc<MigrationWatch>,
    reserved: ReservedHosts,
    fenced: bool,
}

/// An instance's outcome on its span, and in the log when it failed.
fn record_outcome(instance_id: &str, outcome: Option<&InstanceResult>) {
    let span = tracing::Span::current();
    match outcome {
        Some(InstanceResult::Succeeded { .. }) => {
            span.record("outcome", "succeeded");
        }
        Some(InstanceResult::Ignored { .. }) => {
            span.record("outcome", "ignored");
        }
        Some(InstanceResult::Failed { message, .. }) => {
            span.record("outcome", "failed");
            instanceha_runtime::telemetry::record_error(&span, message);
            tracing::warn!(instance_id = %instance_id, reason = %message, "instance not recovered");
        }
        None => {}
    }
}

/// Each job with the state its instance had before the failure: given
/// back by the API on a retry, else read from the listing before anything
/// changed it (the plan records it, and a retry gets it back).
fn with_prior_states(jobs: Vec<EvacuationJob>, watch: &MigrationWatch) -> Vec<EvacuationJob> {
    jobs.into_iter()
        .map(|mut job| {
            if job.prior_state.is_none()
                && let Some(server) = &job.listed
            {
                let earlier_failed = watch.follow(&job.instance_id).earlier_failed();
                job.prior_state = Some(evacuation::prepare(server, earlier_failed).desired.into());
            }
            job
        })
        .collect()
}
