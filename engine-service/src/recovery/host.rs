//! The host-failure workflow (COMPUTE_HOST): check fencing, force the
//! failed nova-compute down and disable it, list and select the host's
//! instances, announce the plan, then recover every instance with bounded
//! concurrency, each to its list of targets.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::Utc;
use futures::FutureExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument as _;

use super::evacuate::EvacuationJob;
use super::migrations::MigrationWatch;
use super::reserved::ReservedHosts;
use super::{
    Cancelled, InstanceResult, PlannedInstance, ProgressState, Run, RunOutcome, VMoveType,
};
use crate::workflow::evacuation;
use crate::workflow::selection::select_instances;
use crate::workflow::targets::{Target, targets};
use openstack_client::nova::Server;

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
            None => self.retried_jobs(),
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
                    let start = Utc::now();
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
        let selection = select_instances(servers, &self.settings().selection);
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
        Ok(Ok(selection
            .recover
            .into_iter()
            .map(|server: Server| EvacuationJob {
                instance_id: server.id.clone(),
                instance_name: server.name.clone(),
                listed: Some(server),
                prior_state: None,
            })
            .collect()))
    }

    /// Recovers every job, working on at most `max_concurrent_instances` at
    /// once (and within the engine-wide limit); evacuations Nova is
    /// rebuilding do not count. Each job reports exactly one result, even if
    /// its worker panics.
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
        let reserved = Arc::new(ReservedHosts::default());
        let targets = Arc::new(targets);
        let mut workers = JoinSet::new();
        for (i, job) in jobs.into_iter().enumerate() {
            let run = self.clone();
            let per_run = per_run.clone();
            let global = (i > 0).then(|| self.engine.capacity.clone());
            let targets = targets.clone();
            let watch = watch.clone();
            let reserved = reserved.clone();
            let span = tracing::info_span!(
                "recovery.instance",
                otel.name = "recovery.instance",
                otel.status_code = tracing::field::Empty,
                instance_id = %job.instance_id,
                instance_name = %job.instance_name,
                host = %self.request.hostname,
                outcome = tracing::field::Empty,
            );
            workers.spawn(async move {
                let mut slot = Slot {
                    per_run,
                    global,
                    held: None,
                };
                slot.hold().await;
                let _in_recovery = InRecovery::count(&run.engine.in_recovery);
                let start = Utc::now();
                let instance_id = job.instance_id.clone();
                run.reporter.instance_started(&instance_id, start);
                let work =
                    run.evacuate_instance(job, &targets, &watch, &reserved, fenced, &mut slot);
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
                let span = tracing::Span::current();
                match &outcome {
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
                match outcome {
                    Some(outcome) => {
                        run.reporter
                            .instance_finished(&instance_id, outcome.clone(), start);
                        Some(outcome)
                    }
                    None => {
                        // Cancelled: report it if anyone still listens.
                        run.reporter.instance_finished(
                            &instance_id,
                            InstanceResult::Failed {
                                message: "cancelled before the recovery finished".to_owned(),
                                retryable: true,
                            },
                            start,
                        );
                        None
                    }
                }
            }
            .instrument(span));
        }
        let mut outcomes = Vec::new();
        while let Some(joined) = workers.join_next().await {
            if let Ok(Some(outcome)) = joined {
                outcomes.push(outcome);
            }
        }
        outcomes
    }

    /// A retry's instances: those still without a result, as the API
    /// named them.
    fn retried_jobs(&self) -> Vec<EvacuationJob> {
        self.reporter.progress(
            "retry_instances",
            ProgressState::Info,
            format!(
                "attempt {}: recovering the {} instance(s) still without a result",
                self.request.attempt,
                self.request.instances.len()
            ),
        );
        self.request
            .instances
            .iter()
            .map(|r| EvacuationJob {
                instance_id: r.instance_id.to_string(),
                instance_name: r.instance_name.clone(),
                listed: None,
                prior_state: r.prior_state,
            })
            .collect()
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
