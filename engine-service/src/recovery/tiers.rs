//! Tier by tier: a worker of tier N asks for its evacuation only once every
//! instance of the tiers before it has had its evacuation requested
//! (accepted by Nova or failed) or its worker ended. Rebuilds are not
//! waited for: only the requests.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::evacuate::EvacuationJob;
use super::{Cancelled, ProgressState, Run};
use crate::workflow::priority::{self, Tier};
use openstack_client::nova::Server;

/// How long a retry waits for the host's listing that gives its
/// instances' markings, before going on without them (in one tier).
const RETRY_LISTING_WAIT: Duration = Duration::from_secs(10);

/// The count of each tier's workers whose turn has not passed yet.
#[derive(Debug)]
pub(super) struct TierGate {
    pending: watch::Sender<BTreeMap<Tier, usize>>,
}

impl TierGate {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            pending: watch::Sender::new(BTreeMap::new()),
        })
    }

    /// A worker's place in `tier`: counted until the ticket is dropped.
    /// Every ticket is taken before any worker waits.
    pub(super) fn ticket(self: &Arc<Self>, tier: Tier) -> TierTicket {
        self.pending.send_modify(|pending| {
            *pending.entry(tier).or_default() += 1;
        });
        TierTicket {
            gate: self.clone(),
            tier,
        }
    }
}

/// Holds back the later tiers while it lives.
#[derive(Debug)]
pub(super) struct TierTicket {
    gate: Arc<TierGate>,
    tier: Tier,
}

impl TierTicket {
    /// Waits until every worker of an earlier tier has let its ticket go.
    pub(super) async fn wait_turn(&self) {
        let mut pending = self.gate.pending.subscribe();
        let tier = self.tier;
        // The sender lives in the gate this ticket holds: never closed.
        let _ = pending
            .wait_for(|pending| pending.range(..tier).all(|(_, n)| *n == 0))
            .await;
    }
}

impl Drop for TierTicket {
    fn drop(&mut self) {
        let tier = self.tier;
        self.gate.pending.send_modify(|pending| {
            if let Some(n) = pending.get_mut(&tier) {
                *n = n.saturating_sub(1);
            }
        });
    }
}

impl Run {
    /// A retry's instances: those still without a result, as the API named
    /// them, in the tiers (and with the devices) their markings give, read
    /// from a fresh listing of the failed host. Without one (Nova slow or
    /// failing, or the instance no longer there) an instance is in the
    /// default tier; the worker reads each instance afresh in any case.
    pub(super) async fn retried_jobs(&self) -> Result<Vec<EvacuationJob>, Cancelled> {
        let host = &self.request.hostname;
        self.reporter.progress(
            "retry_instances",
            ProgressState::Info,
            format!(
                "attempt {}: recovering the {} instance(s) still without a result",
                self.request.attempt,
                self.request.instances.len()
            ),
        );
        let listing = tokio::time::timeout(
            RETRY_LISTING_WAIT,
            self.or_cancel(self.openstack().servers_on_host(host)),
        );
        let listed: HashMap<String, Server> = match listing.await {
            Ok(Err(Cancelled)) => return Err(Cancelled),
            Ok(Ok(Ok(servers))) => servers.into_iter().map(|s| (s.id.clone(), s)).collect(),
            Ok(Ok(Err(e))) => self.without_markings(e.to_string()),
            Err(_) => self.without_markings(format!("no answer within {RETRY_LISTING_WAIT:?}")),
        };
        let rules = &self
            .settings()
            .selection_for(&self.request.segment_name)
            .priority;
        let mut jobs: Vec<EvacuationJob> = self
            .request
            .instances
            .iter()
            .map(|r| {
                let server = listed.get(r.instance_id.as_str());
                EvacuationJob {
                    instance_id: r.instance_id.to_string(),
                    instance_name: r.instance_name.clone(),
                    listed: None,
                    prior_state: r.prior_state,
                    tier: server.map_or(Tier::Default, |s| priority::tier_of(s, rules).0),
                    device: server
                        .filter(|_| rules.device_aggregate.is_some())
                        .and_then(priority::device_need),
                }
            })
            .collect();
        jobs.sort_by_key(|job| job.tier);
        Ok(jobs)
    }

    /// Says that a retry goes on without its instances' markings.
    fn without_markings(&self, why: String) -> HashMap<String, Server> {
        self.reporter.progress(
            "retry_instances",
            ProgressState::Info,
            format!("the instances' markings could not be read ({why}): one tier"),
        );
        HashMap::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn passes(ticket: &TierTicket) -> bool {
        // Paused time: the timeout fires only if nothing else can run.
        tokio::time::timeout(Duration::from_secs(1), ticket.wait_turn())
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_tier_waits_for_every_earlier_ticket() {
        let gate = TierGate::new();
        let first_a = gate.ticket(Tier::Numbered(1));
        let first_b = gate.ticket(Tier::Numbered(1));
        let second = gate.ticket(Tier::Numbered(2));
        let last = gate.ticket(Tier::Default);
        assert!(passes(&first_a).await && passes(&first_b).await);
        assert!(!passes(&second).await);
        drop(first_a);
        assert!(!passes(&second).await);
        drop(first_b);
        assert!(passes(&second).await);
        assert!(!passes(&last).await);
        drop(second);
        assert!(passes(&last).await);
    }
}
