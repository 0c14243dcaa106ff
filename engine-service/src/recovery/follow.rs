//! Following one evacuation until Nova settles it: the shared migration
//! watch every tick, the server when the migration tells something (or now
//! and then), and, once the evacuation has gone quiet, the stall judgement
//! (`workflow::stall`) with the evacuation's instance action and its
//! destination's nova-compute record: a lost evacuation ends the following
//! so that it can be repaired.

use super::evacuate::{Followed, MAX_FAILED_READS};
use super::host::Slot;
use super::lost::{Judged, StallWatch};
use super::migrations::MigrationFollower;
use super::{Cancelled, Run};
use crate::workflow::evacuation::{self, Verdict};
use openstack_client::nova::Server;

impl Run {
    /// [`Run::follow`] without holding the worker's slot: waiting for Nova
    /// does not count against the concurrency limits.
    pub(super) async fn follow_unpaced(
        &self,
        slot: &mut Slot,
        id: &str,
        source: &str,
        follower: &mut MigrationFollower,
        was_error: bool,
        request_id: Option<&str>,
    ) -> Result<Followed, Cancelled> {
        slot.release();
        let followed = self
            .follow(id, source, follower, was_error, request_id)
            .await?;
        self.or_cancel(slot.hold()).await?;
        Ok(followed)
    }

    /// Follows an evacuation until Nova settles it, the instance is gone, or
    /// the timeout. Reads the shared migration watch every tick and the
    /// server only when the migration says something happened (or now and
    /// then, in case the migration records are not readable).
    async fn follow(
        &self,
        id: &str,
        source: &str,
        follower: &mut MigrationFollower,
        was_error: bool,
        request_id: Option<&str>,
    ) -> Result<Followed, Cancelled> {
        let deadline = tokio::time::Instant::now() + self.settings().evacuation_timeout;
        let interval = self.settings().poll_interval;
        let mut last_state = "no news from Nova yet".to_owned();
        let mut ticks: u64 = 0;
        // Each read already retried transient failures; a few failed reads
        // in a row mean the evacuation cannot be confirmed.
        let mut failed_reads = 0;
        let mut last_server: Option<Server> = None;
        let mut stall = StallWatch::following(request_id, self.now());
        loop {
            ticks += 1;
            let migration = follower.latest();
            let telling = migration.as_ref().is_some_and(|m| {
                matches!(m.status.as_str(), "done" | "completed" | "error" | "failed")
            });
            if telling || failed_reads > 0 || ticks.is_multiple_of(10) {
                match self.server_unless_gone(id).await? {
                    Ok(Some(server)) => {
                        failed_reads = 0;
                        let verdict =
                            evacuation::judge(source, &server, migration.as_ref(), was_error);
                        last_server = Some(server);
                        match verdict {
                            Verdict::InProgress(state) => last_state = state,
                            Verdict::Failed(reason) => {
                                let details = self.failure_details(id, request_id).await?;
                                return Ok(Followed::Settled(Verdict::Failed(format!(
                                    "{reason}{details}"
                                ))));
                            }
                            verdict => return Ok(Followed::Settled(verdict)),
                        }
                    }
                    Ok(None) => return Ok(Followed::Gone),
                    Err(e) => {
                        failed_reads += 1;
                        tracing::warn!(instance_id = %id, error = %e, failed_reads, "cannot read the instance while following its evacuation");
                        if failed_reads >= MAX_FAILED_READS {
                            return Ok(Followed::Unreadable(e.to_string()));
                        }
                        last_state = format!("last read failed: {e}");
                    }
                }
            } else if let Some(m) = &migration {
                last_state = format!("migration {} {}", m.id, m.status);
            }
            // A quiet evacuation is judged: lost ones end the following.
            if let (Some(m), Some(server)) = (&migration, &last_server)
                && evacuation::in_flight(m)
            {
                match self
                    .judge_quiet(id, source, server, m, follower.services(), &mut stall)
                    .await?
                {
                    Judged::Moving => {}
                    Judged::Waiting(state) => last_state = state,
                    Judged::Lost(lost) => return Ok(Followed::Lost(lost)),
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                if migration.is_none() {
                    last_state = self.migration_state(id, source, &last_state).await?;
                }
                return Ok(Followed::TimedOut(last_state));
            }
            let wait = interval.min(deadline - now);
            self.or_cancel(follower.changed(wait)).await?;
        }
    }

    /// What Nova's instance action says about a failed evacuation.
    async fn failure_details(
        &self,
        id: &str,
        request_id: Option<&str>,
    ) -> Result<String, Cancelled> {
        let Some(request_id) = request_id else {
            return Ok(String::new());
        };
        let Ok(Ok(action)) = self
            .or_cancel(self.openstack().instance_action(id, request_id))
            .await
        else {
            return Ok(String::new());
        };
        let errors: Vec<String> = action
            .events
            .iter()
            .filter(|e| e.result.as_deref() == Some("Error"))
            .map(|e| {
                let why = e
                    .details
                    .as_deref()
                    .or(e.traceback.as_deref().and_then(|t| t.lines().last()))
                    .unwrap_or("no details");
                format!("{} failed: {why}", e.event)
            })
            .collect();
        Ok(if errors.is_empty() {
            String::new()
        } else {
            format!(" ({})", errors.join("; "))
        })
    }
}
