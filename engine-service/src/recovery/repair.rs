//! Repairing an evacuation Nova lost: following it, and when the stall
//! judgement proves it lost (`workflow::stall`, confirmed on fresh
//! records), resetting the instance's state as Nova's admin guide says
//! for an instance stuck in a task ("Reset the state of an instance":
//! `os-resetState`, to `active` for an instance that was active, else to
//! `error`, the command's default) and evacuating it again, never to the
//! destination that lost it, then following that one. At most
//! [`MAX_REPAIRS`] times per instance and run.

use super::evacuate::{Followed, Step};
use super::host::Slot;
use super::lost::Lost;
use super::migrations::MigrationFollower;
use super::reserved::ReservedHosts;
use super::{Cancelled, Run, StepFailure};
use crate::workflow::evacuation::DesiredState;
use crate::workflow::targets::Target;

/// Repairs per instance and run. One repairs the loss the run met; a second
/// one covers a second, independent loss (the destination of the repair
/// failing too, as in a cascade of host failures). A third loss in one run
/// is something systemic (the message bus flapping, every destination
/// dying): the run reports it, retryable, and the API's next attempt (one
/// of `dispatch.max_attempts` within `dispatch.retry_window`) starts afresh.
pub(super) const MAX_REPAIRS: u32 = 2;

/// Where and how a lost evacuation is asked again.
pub(super) struct Repairing<'a> {
    pub targets: &'a [Target],
    /// The target the evacuation followed was sent to (the first for one
    /// an earlier run requested).
    pub target: usize,
    /// The state the instance had before the failure: what the reset sets
    /// (active, or error) and what is restored at the end.
    pub desired: DesiredState,
    pub reserved: &'a ReservedHosts,
}

impl Run {
    /// Follows an evacuation to its end (settled, gone, timed out,
    /// unreadable), repairing it each time Nova lost it, up to
    /// [`MAX_REPAIRS`] times. `was_error` becomes true when a repair reset
    /// the instance to error.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn follow_repairing(
        &self,
        slot: &mut Slot,
        id: &str,
        source: &str,
        follower: &mut MigrationFollower,
        was_error: &mut bool,
        request_id: Option<String>,
        repairing: &Repairing<'_>,
    ) -> Result<Followed, Cancelled> {
        let mut request_id = request_id;
        let mut repairs = 0;
        loop {
            let followed = self
                .follow_unpaced(
                    slot,
                    id,
                    source,
                    follower,
                    *was_error,
                    request_id.as_deref(),
                )
                .await?;
            let Followed::Lost(lost) = followed else {
                return Ok(followed);
            };
            if repairs == MAX_REPAIRS {
                return Ok(Followed::GaveUp(format!(
                    "{}; nova lost its evacuation {} times in this run: not asked again in it",
                    lost.reason,
                    repairs + 1
                )));
            }
            repairs += 1;
            match self.repair(id, follower, &lost, repairing, repairs).await? {
                Ok((new_request, to_error)) => {
                    request_id = new_request;
                    *was_error |= to_error;
                }
                Err(failure) => return Ok(Followed::RepairFailed(failure)),
            }
        }
    }

    /// Resets the instance and evacuates it again, to the first target
    /// (from the one that lost it on) that is not the lost destination.
    /// Returns the new request's id and whether the reset set error.
    async fn repair(
        &self,
        id: &str,
        follower: &mut MigrationFollower,
        lost: &Lost,
        repairing: &Repairing<'_>,
        n: u32,
    ) -> Step<(Option<String>, bool)> {
        const STEP: &str = "repair";
        let dead = lost.destination.as_deref();
        let count = repairing.targets.len();
        let Some(target) = (0..count)
            .map(|i| &repairing.targets[(repairing.target + i) % count])
            .find(|t| t.host().is_none() || t.host() != dead)
        else {
            return Ok(Err(StepFailure::new(
                STEP,
                format!(
                    "{}; no target left but {}",
                    lost.reason,
                    dead.unwrap_or("the one that lost it")
                ),
            )));
        };
        if let Target::ReservedHost(host) = target
            && let Err(e) = self.ready_reserved_host(repairing.reserved, host).await
        {
            return Ok(Err(StepFailure::new(STEP, format!("{}; {e}", lost.reason))));
        }
        let state = match repairing.desired {
            DesiredState::Active => "active",
            DesiredState::Stopped | DesiredState::Error => "error",
        };
        self.reporter.step(
            id,
            STEP,
            format!(
                "{}; resetting its state to {state} and evacuating it again to {target} (repair {n} of {MAX_REPAIRS})",
                lost.reason
            ),
        );
        if let Err(e) = self
            .or_cancel(self.openstack().reset_state(id, state))
            .await?
        {
            return Ok(Err(StepFailure::new(STEP, e).doing("reset state")));
        }
        // Only migrations after the lost one are the repair's.
        follower.take_unused_baseline();
        follower.set_baseline(Some(lost.migration_id));
        let request_id = match self.request_evacuation(id, target, follower).await? {
            Ok(request_id) => request_id,
            Err(failure) => return Ok(Err(failure)),
        };
        self.reporter.step(
            id,
            "verify",
            format!("waiting for Nova to rebuild it on {target}"),
        );
        Ok(Ok((request_id, state == "error")))
    }
}
