//! Recovering one instance of a failed host: look it up, lock it, prepare
//! its state, clear volume attachments that would block it, evacuate it
//! (to each target in turn), follow the evacuation until Nova settles it,
//! restore its state, and unlock it if the engine locked it, also when
//! anything failed. Every failure names its step and cause.

use super::failed_evacuation::AfterFailed;
use super::host::Slot;
use super::lost::Lost;
use super::migrations::MigrationWatch;
use super::repair::Repairing;
use super::reserved::ReservedHosts;
use super::{Cancelled, Cause, InstanceResult, Run, StepFailure};
use crate::workflow::evacuation::{self, Verdict};
use crate::workflow::priority::Tier;
use crate::workflow::targets::Target;
use instanceha_proto::run::PriorState;
use openstack_client::nova::Server;

/// One instance to recover.
#[derive(Clone, Debug)]
pub(super) struct EvacuationJob {
    pub instance_id: String,
    pub instance_name: String,
    /// The server as the host listing showed it, if just listed.
    pub listed: Option<Server>,
    /// Its state before the failure, as recorded with the plan (given back
    /// on a retry), or as planned now from the listing.
    pub prior_state: Option<PriorState>,
    /// Its evacuation is requested after those of the tiers before it.
    pub tier: Tier,
    /// The device it needs, when the segment sends those to an aggregate.
    pub device: Option<String>,
}

/// How following an evacuation ended.
pub(super) enum Followed {
    Settled(Verdict),
    Gone,
    TimedOut(String),
    /// Nova could not be read, so the outcome cannot be confirmed.
    Unreadable(String),
    /// Nova lost it (`workflow::stall`): to be repaired.
    Lost(Lost),
    /// Lost once more than a run repairs.
    GaveUp(String),
    /// A repair could not be made.
    RepairFailed(StepFailure),
}

/// Failed reads of the instance in a row (each with its own retries)
/// before its evacuation counts as unconfirmable.
pub(super) const MAX_FAILED_READS: u32 = 3;

/// Steps end in a result or a failure; cancellation stops everything.
pub(super) type Step<T> = Result<Result<T, StepFailure>, Cancelled>;

impl Run {
    pub(super) async fn evacuate_instance(
        &self,
        job: EvacuationJob,
        targets: &[Target],
        watch: &MigrationWatch,
        reserved: &ReservedHosts,
        fenced: bool,
        slot: &mut Slot,
    ) -> Result<InstanceResult, Cancelled> {
        let id = job.instance_id.clone();
        self.reporter.step(&id, "lookup", "reading the instance");
        let server = match job.listed {
            Some(server) => server,
            None => match self.server_unless_gone(&id).await? {
                Ok(Some(server)) => server,
                Ok(None) => {
                    return Ok(InstanceResult::Ignored {
                        message: "the instance no longer exists".to_owned(),
                    });
                }
                Err(e) => return Ok(StepFailure::new("lookup", e).result()),
            },
        };

        // A retry may find the instance already recovered by an earlier run
        // whose result was lost.
        if let Some(dest) = self.settled_elsewhere(&server) {
            let note = format!(
                "found {} on {dest}: recovered by an earlier run",
                server.vm_state()
            );
            return Ok(self.release_found(&id, &server, note).await);
        }

        self.reporter.step(&id, "lock", "locking the instance");
        let locked_by_us = match self.lock(&id, &server).await? {
            Ok(locked) => locked,
            Err(failure) => return self.confirm_failure(&id, failure).await,
        };
        let outcome = self
            .evacuate_locked(
                &id,
                &server,
                job.prior_state,
                targets,
                watch,
                reserved,
                fenced,
                slot,
            )
            .await;
        let outcome = match outcome {
            Ok(InstanceResult::Failed { message, retryable }) => {
                self.confirm_failure(
                    &id,
                    StepFailure {
                        step: "",
                        message,
                        target_related: false,
                        transient: retryable,
                    },
                )
                .await
            }
            other => other,
        };
        if !locked_by_us {
            return outcome;
        }
        if outcome == Err(Cancelled) && self.evacuation_in_flight(&id).await {
            // The run was cancelled (the API stopped or went away) while
            // Nova evacuates the instance: the lock stays with the
            // notification, recorded as held, until its instance settles;
            // the next run follows the evacuation and lets go then.
            tracing::info!(instance_id = %id, "run cancelled mid-evacuation; the instance stays locked");
            return outcome;
        }
        self.let_go(&id, outcome).await
    }

    /// Unlocks the instance this notification locked, whatever the outcome
    /// (never leave an instance locked); an unlock that fails is said, and
    /// the lock stays recorded as held, released as soon as Nova answers.
    async fn let_go(
        &self,
        id: &str,
        outcome: Result<InstanceResult, Cancelled>,
    ) -> Result<InstanceResult, Cancelled> {
        self.reporter.step(id, "unlock", "unlocking the instance");
        if let Err(e) = self.openstack().unlock(id).await {
            let unlock = StepFailure::new("unlock", e);
            return Ok(match outcome {
                Ok(InstanceResult::Succeeded { dest_host, note }) => InstanceResult::Succeeded {
                    note: Some(join_notes(note, format!("left locked for now: {unlock}"))),
                    dest_host,
                },
                Ok(InstanceResult::Failed { message, retryable }) => InstanceResult::Failed {
                    message: format!("{message}; and it stays locked for now: {unlock}"),
                    retryable,
                },
                Ok(InstanceResult::Ignored { message }) => InstanceResult::Ignored {
                    message: format!("{message}; and it stays locked for now: {unlock}"),
                },
                Err(Cancelled) => return Err(Cancelled),
            });
        }
        self.reporter.lock_changed(id, false);
        outcome
    }

    /// Whether Nova may still be evacuating the instance away from the
    /// failed host: its task is a rebuild, or its newest evacuation from
    /// the host has not ended. Records that cannot be read count as yes
    /// (the lock is kept, and released later).
    pub(super) async fn evacuation_in_flight(&self, id: &str) -> bool {
        let openstack = self.openstack();
        let server = match openstack.server(id).await {
            Ok(server) => server,
            Err(e) => return !e.is_not_found(),
        };
        if evacuation::rebuilding(&server) {
            return true;
        }
        match openstack.evacuations_of(id).await {
            Ok(migrations) => migrations
                .iter()
                .find(|m| m.source_compute.as_deref() == Some(self.request.hostname.as_str()))
                .is_some_and(evacuation::in_flight),
            Err(_) => true,
        }
    }

    /// The host an instance settled on away from the failed host (active or
    /// stopped, no task), if it has.
    fn settled_elsewhere(&self, server: &Server) -> Option<String> {
        let host = server.host.as_deref()?;
        (host != self.request.hostname
            && server.task_state.is_none()
            && matches!(server.vm_state(), "active" | "stopped"))
        .then(|| host.to_owned())
    }

    /// An instance found recovered: released if this notification holds
    /// its lock, succeeded with `note`.
    async fn release_found(&self, id: &str, server: &Server, note: String) -> InstanceResult {
        let dest_host = server.host.clone();
        match self.unlock_if_ours(id, server).await {
            Ok(()) => InstanceResult::Succeeded {
                dest_host,
                note: Some(note),
            },
            Err(failure) => InstanceResult::Succeeded {
                dest_host,
                note: Some(format!("{note}; left locked for now: {failure}")),
            },
        }
    }

    /// Before an instance is declared failed, its truth is read from Nova:
    /// one Nova has moved and settled away from the failed host is
    /// succeeded, with a note of what failed; a failure Nova's state does
    /// not settle keeps its cause.
    async fn confirm_failure(
        &self,
        id: &str,
        failure: StepFailure,
    ) -> Result<InstanceResult, Cancelled> {
        let text = if failure.step.is_empty() {
            failure.message.clone()
        } else {
            failure.to_string()
        };
        if let Ok(Ok(server)) = self.or_cancel(self.openstack().server(id)).await
            && let Some(dest) = self.settled_elsewhere(&server)
        {
            return Ok(InstanceResult::Succeeded {
                dest_host: Some(dest.clone()),
                note: Some(format!(
                    "nova shows it {} on {dest} although {text}",
                    server.vm_state()
                )),
            });
        }
        Ok(InstanceResult::Failed {
            message: text,
            retryable: failure.transient,
        })
    }

    /// Locks the server unless it is locked already; true if this
    /// notification holds the lock (taken now, or by an earlier run of
    /// it). A lock of someone else's (or of another notification) is left
    /// alone: the instance is recovered anyway and that lock is not ours to
    /// release.
    async fn lock(&self, id: &str, server: &Server) -> Step<bool> {
        if server.locked == Some(true) {
            let ours = self.locked_by_us(server);
            if ours {
                self.reporter.lock_changed(id, true);
            }
            return Ok(Ok(ours));
        }
        let reason = self.lock_reason();
        let locked = self
            .or_cancel(self.openstack().lock(id, &reason))
            .await?
            .map_err(|e| StepFailure::new("lock", e));
        if locked.is_ok() {
            self.reporter.lock_changed(id, true);
        }
        Ok(locked.map(|()| true))
    }

    /// Releases this notification's lock on the server, if it holds one.
    pub(super) async fn unlock_if_ours(
        &self,
        id: &str,
        server: &Server,
    ) -> Result<(), StepFailure> {
        if self.locked_by_us(server) {
            self.reporter.step(id, "unlock", "unlocking the instance");
            self.openstack()
                .unlock(id)
                .await
                .map_err(|e| StepFailure::new("unlock", e))?;
            self.reporter.lock_changed(id, false);
        } else {
            // Nova shows no lock of ours: say so, in case an earlier run
            // unlocked it and that run's report was lost (the API died
            // between the unlock and its acknowledgement), so the record
            // does not go on saying we hold it.
            self.reporter.lock_changed(id, false);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn evacuate_locked(
        &self,
        id: &str,
        server: &Server,
        prior_state: Option<PriorState>,
        targets: &[Target],
        watch: &MigrationWatch,
        reserved: &ReservedHosts,
        fenced: bool,
        slot: &mut Slot,
    ) -> Result<InstanceResult, Cancelled> {
        let source = self.request.hostname.clone();
        let mut follower = watch.follow(id);
        // The state before the failure: as recorded with the plan, else
        // inferred (a plan made before the API recorded it).
        let preparation = match prior_state {
            Some(prior) => evacuation::prepare_known(server, prior),
            None => evacuation::prepare(server, follower.earlier_failed()),
        };
        let mut was_error = server.vm_state() == "error";
        // Asked once more after Nova gave up on an evacuation and left the
        // instance on the failed host.
        let mut asked_again = false;

        if evacuation::rebuilding(server) || follower.earlier_in_flight() {
            // An evacuation requested by an earlier run is in flight: follow
            // it instead of asking again. Its migration record says so even
            // when the server no longer does (rebuilt, host not yet moved).
            self.reporter
                .step(id, "verify", "following the evacuation already in progress");
            follower.set_baseline(None);
            let repairing = Repairing {
                targets,
                target: 0,
                desired: preparation.desired,
                reserved,
            };
            let followed = self
                .follow_repairing(
                    slot,
                    id,
                    &source,
                    &mut follower,
                    &mut was_error,
                    None,
                    &repairing,
                )
                .await?;
            return Ok(match followed {
                Followed::Settled(Verdict::Succeeded { dest_host }) => {
                    return self.finish(id, dest_host, preparation).await;
                }
                Followed::Gone => gone(),
                other => failed(self.unsettled(other, "the evacuation in progress")),
            });
        }

        if let Err(failure) = self.make_ready(id, server, preparation, fenced).await? {
            return Ok(failed(failure));
        }

        let mut failures: Vec<String> = Vec::new();
        'targets: for (i, target) in targets.iter().enumerate() {
            let last = i + 1 == targets.len();
            if let Target::ReservedHost(host) = target
                && let Err(e) = self.ready_reserved_host(reserved, host).await
            {
                failures.push(format!("prepare_reserved_host: {e}"));
                continue;
            }
            // Once more on the same target when Nova gave up on the
            // evacuation and left the instance on the failed host.
            loop {
                self.reporter
                    .step(id, "evacuate", format!("evacuating to {target}"));
                let request_id = match self.request_evacuation(id, target, &mut follower).await? {
                    Ok(request_id) => request_id,
                    Err(failure) if failure.target_related && !last => {
                        failures.push(format!("{target}: {failure}"));
                        continue 'targets;
                    }
                    Err(failure) => return Ok(failed(with_earlier(failure, &failures))),
                };
                self.reporter.step(
                    id,
                    "verify",
                    format!("waiting for Nova to rebuild it on {target}"),
                );
                let repairing = Repairing {
                    targets,
                    target: i,
                    desired: preparation.desired,
                    reserved,
                };
                match self
                    .follow_repairing(
                        slot,
                        id,
                        &source,
                        &mut follower,
                        &mut was_error,
                        request_id,
                        &repairing,
                    )
                    .await?
                {
                    Followed::Settled(Verdict::Succeeded { dest_host }) => {
                        return self.finish(id, dest_host, preparation).await;
                    }
                    Followed::Settled(Verdict::Failed(reason)) => {
                        match self
                            .after_failed(id, &source, reason, last, asked_again)
                            .await?
                        {
                            AfterFailed::AskAgain => {
                                asked_again = true;
                                was_error = true;
                                continue;
                            }
                            AfterFailed::Fail(failure) if last => {
                                return Ok(failed(with_earlier(failure, &failures)));
                            }
                            AfterFailed::Fail(failure) => {
                                failures.push(format!("{target}: {failure}"));
                                // A failed evacuation may leave the instance
                                // in error; Nova evacuates error instances too.
                                was_error = true;
                                continue 'targets;
                            }
                        }
                    }
                    Followed::Gone => return Ok(gone()),
                    other => {
                        return Ok(failed(with_earlier(
                            self.unsettled(other, "the evacuation"),
                            &failures,
                        )));
                    }
                }
            }
        }
        Ok(InstanceResult::failed(format!(
            "no target left: {}",
            failures.join("; ")
        )))
    }

    /// Before the first request: the instance's state reset where Nova
    /// would refuse to evacuate it, and, for a fenced host, the volume
    /// attachments that would block it cleared.
    async fn make_ready(
        &self,
        id: &str,
        server: &Server,
        preparation: evacuation::Preparation,
        fenced: bool,
    ) -> Result<Result<(), StepFailure>, Cancelled> {
        if preparation.reset_to_error {
            self.reporter.step(
                id,
                "prepare",
                format!(
                    "resetting from {} (task {}) to error so that Nova accepts the evacuation",
                    server.vm_state(),
                    server.task_state.as_deref().unwrap_or("none")
                ),
            );
            if let Err(e) = self
                .or_cancel(self.openstack().reset_state(id, "error"))
                .await?
            {
                return Ok(Err(StepFailure::new("prepare", e)));
            }
        }
        if fenced
            && self.settings().clear_blocking_volume_attachments
            && !server.volumes_attached.is_empty()
            && self.block_storage().await?
        {
            self.reporter
                .step(id, "volumes", "checking the volumes' attachments");
            return self.clear_blocking_volumes(id, server).await;
        }
        Ok(Ok(()))
    }

    /// Whether Cinder is in the catalog (without it, boot-from-volume
    /// checks are off; a failure to tell counts as no).
    async fn block_storage(&self) -> Result<bool, Cancelled> {
        match self.or_cancel(self.openstack().has_block_storage()).await? {
            Ok(has) => Ok(has),
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell whether cinder is in the catalog; volume checks skipped");
                Ok(false)
            }
        }
    }

    fn timeout_message(&self, what: &str) -> String {
        format!(
            "{what} did not settle within {}",
            humantime::format_duration(self.settings().evacuation_timeout)
        )
    }

    /// The failure of an evacuation that did not settle (`what` names it);
    /// passing unless Nova refused it. A deleted instance is not a failure
    /// ([`gone`]): callers handle it first.
    fn unsettled(&self, followed: Followed, what: &str) -> StepFailure {
        match followed {
            Followed::Settled(Verdict::InProgress(state)) | Followed::TimedOut(state) => {
                StepFailure::new(
                    "verify",
                    Cause::transient(format!("{} ({state})", self.timeout_message(what))),
                )
            }
            Followed::Settled(Verdict::Failed(reason)) => StepFailure::new("verify", reason),
            Followed::Settled(Verdict::Succeeded { dest_host }) => StepFailure::new(
                "verify",
                format!("{what} settled on {dest_host} but was not finished"),
            ),
            Followed::Unreadable(reason) => unconfirmed(reason),
            Followed::Lost(lost) => StepFailure::new("repair", Cause::transient(lost.reason)),
            Followed::GaveUp(reason) => StepFailure::new("repair", Cause::transient(reason)),
            Followed::RepairFailed(failure) => failure,
            Followed::Gone => StepFailure::new("verify", "the instance was deleted"),
        }
    }
}

fn failed(failure: StepFailure) -> InstanceResult {
    failure.result()
}

/// Nova could not be read while following an evacuation: that may pass.
fn unconfirmed(reason: String) -> StepFailure {
    StepFailure::new(
        "verify",
        Cause::transient(format!("the evacuation could not be confirmed: {reason}")),
    )
}

/// Two notes, in order.
fn join_notes(first: Option<String>, second: String) -> String {
    match first {
        Some(first) => format!("{first}; {second}"),
        None => second,
    }
}

fn gone() -> InstanceResult {
    InstanceResult::Ignored {
        message: "the instance was deleted during its recovery".to_owned(),
    }
}

fn with_earlier(failure: StepFailure, earlier: &[String]) -> StepFailure {
    if earlier.is_empty() {
        failure
    } else {
        StepFailure {
            message: format!(
                "{} (earlier targets: {})",
                failure.message,
                earlier.join("; ")
            ),
            ..failure
        }
    }
}
