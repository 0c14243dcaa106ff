//! Tier by tier: a worker of tier N asks for its evacuation only once every
//! instance of the tiers before it has had its evacuation requested
//! (accepted by Nova or failed) or its worker ended. Rebuilds are not
//! waited for: only the requests.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::workflow::priority::Tier;

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
