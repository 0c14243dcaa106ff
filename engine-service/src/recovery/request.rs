//! Asking Nova to evacuate one instance, never blind: what existed before
//! the request is noted, and an answer refused or lost is settled by
//! reading Nova's records (a request Nova accepted meanwhile is followed,
//! never sent twice); a source Nova still counts as up is waited for.

use super::evacuate::Step;
use super::migrations::MigrationFollower;
use super::{Cancelled, Run, StepFailure};
use crate::workflow::evacuation;
use crate::workflow::targets::Target;
use openstack_client::nova::Migration;

impl Run {
    /// Asks Nova to evacuate; returns the request id of the accepted
    /// request. An unknown outcome (timeout, broken connection, 5xx from a
    /// proxy) is resolved by reading Nova's records, never by blindly
    /// asking again. When Nova accepted it counts for the run's phases.
    pub(super) async fn request_evacuation(
        &self,
        id: &str,
        target: &Target,
        follower: &mut MigrationFollower,
    ) -> Step<Option<String>> {
        let asked = self.ask_to_evacuate(id, target, follower).await;
        if let Ok(Ok(_)) = &asked {
            self.evacuations.requested(self.now());
        }
        asked
    }

    async fn ask_to_evacuate(
        &self,
        id: &str,
        target: &Target,
        follower: &mut MigrationFollower,
    ) -> Step<Option<String>> {
        const STEP: &str = "evacuate";
        let before = self.baseline(id, follower).await?;
        // An unknown outcome is asked again only after Nova's records show
        // no evacuation, within the outage tolerance.
        let policy = self.openstack().settings().retry.clone();
        let mut retries = policy.retries();
        let still_in_use_until = tokio::time::Instant::now() + self.settings().service_down_timeout;
        loop {
            let result = self
                .or_cancel(self.openstack().evacuate(id, target.host()))
                .await?;
            let error = match result {
                Ok(accepted) => return Ok(Ok(accepted.request_id)),
                Err(e) => e,
            };
            let message = error.service_message().unwrap_or_default().to_owned();
            match error.status() {
                Some(400) if message.contains("still in use") => {
                    // The source service still counts as up (force-down
                    // disabled or not yet seen): wait for Nova.
                    if tokio::time::Instant::now() >= still_in_use_until {
                        return Ok(Err(StepFailure::new(
                            STEP,
                            format!(
                                "{error} (is the host fenced and its nova-compute forced down?)"
                            ),
                        )));
                    }
                    self.pause(self.settings().poll_interval).await?;
                    continue;
                }
                Some(400 | 404) => return Ok(Err(StepFailure::on_target(STEP, error))),
                Some(409) => {
                    // Busy: maybe with our own earlier request.
                    if self.accepted_meanwhile(id, before).await? {
                        return Ok(Ok(None));
                    }
                    return Ok(Err(StepFailure::new(STEP, error)));
                }
                // Refused (503) or unknown (timeout, lost, 500/502/504):
                // asked again only after Nova's records show nothing.
                _ if error.is_transient() => {
                    if self.accepted_meanwhile(id, before).await? {
                        tracing::info!(instance_id = %id, error = %error, "evacuate answer lost, but nova accepted it");
                        return Ok(Ok(None));
                    }
                    let Some(delay) = retries.next_delay(policy.retry_after(error.retry_after()))
                    else {
                        return Ok(Err(StepFailure::new(STEP, error)));
                    };
                    tracing::warn!(instance_id = %id, error = %error, "evacuate not confirmed and nova shows no evacuation; asking again");
                    self.pause(delay).await?;
                }
                _ => return Ok(Err(StepFailure::new(STEP, error))),
            }
        }
    }

    /// The newest evacuation away from the source before this request:
    /// what existed before it is not its migration. The first request uses
    /// what the host's watch read before the run; a request to a next
    /// target first reads what the earlier one left. If the migrations
    /// cannot be read, the server alone will tell.
    async fn baseline(
        &self,
        id: &str,
        follower: &mut MigrationFollower,
    ) -> Result<Option<i64>, Cancelled> {
        if let Some(before) = follower.take_unused_baseline() {
            return Ok(before);
        }
        let before = match self.or_cancel(self.openstack().evacuations_of(id)).await? {
            Ok(migrations) => self.newest_from_source(&migrations).map(|m| m.id),
            Err(e) => {
                tracing::warn!(instance_id = %id, error = %e, "cannot read earlier evacuations");
                None
            }
        };
        follower.set_baseline(before);
        Ok(before)
    }

    /// Whether Nova shows an evacuation of `id` newer than `before` or a
    /// rebuild in progress.
    async fn accepted_meanwhile(&self, id: &str, before: Option<i64>) -> Result<bool, Cancelled> {
        if let Ok(migrations) = self.or_cancel(self.openstack().evacuations_of(id)).await?
            && self
                .newest_from_source(&migrations)
                .is_some_and(|m| before.is_none_or(|b| m.id > b))
        {
            return Ok(true);
        }
        if let Ok(server) = self.or_cancel(self.openstack().server(id)).await? {
            return Ok(evacuation::rebuilding(&server));
        }
        Ok(false)
    }

    /// The newest of `migrations` (newest first, as Nova lists them) away
    /// from the failed host: an evacuation that brought the instance to
    /// it is not one of this recovery.
    fn newest_from_source<'m>(&self, migrations: &'m [Migration]) -> Option<&'m Migration> {
        migrations
            .iter()
            .find(|m| m.source_compute.as_deref() == Some(self.request.hostname.as_str()))
    }
}
