//! One request at a time to a service that is down: once Nova (or Cinder)
//! answers 502/503/504 or refuses connections, every caller's next try
//! waits for the one probe in flight instead of sending its own, so an
//! outage meets a trickle of probes, not every waiting call of a
//! 5,000-instance recovery at once (and nova-api, coming back, is not met
//! by that crowd). The first answer that is not "unavailable" opens the
//! gate and everyone goes.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

/// The outage state of one service, shared by every call to it.
#[derive(Debug)]
pub(crate) struct OutageGate {
    down: AtomicBool,
    probe: Semaphore,
}

impl Default for OutageGate {
    fn default() -> Self {
        Self {
            down: AtomicBool::new(false),
            probe: Semaphore::new(1),
        }
    }
}

impl OutageGate {
    /// Waits until a try may be sent: at once while the service answers;
    /// while it is down, until this caller is the one probe (the permit,
    /// to hold through the try and the wait after a failed one), the
    /// service answers again, or `deadline` (the call's budget) passes —
    /// then the call makes its last try anyway.
    pub async fn pass(&self, deadline: Option<Instant>) -> Option<SemaphorePermit<'_>> {
        if !self.is_down() {
            return None;
        }
        let acquire = self.probe.acquire();
        let permit = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, acquire).await.ok()?,
            None => acquire.await,
        }
        .ok()?;
        // Someone else's probe got an answer while this one waited.
        self.is_down().then_some(permit)
    }

    /// The service answered (anything but 502/503/504).
    pub fn answered(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            tracing::info!("openstack service answers again");
        }
    }

    /// The service refused the connection or answered 502/503/504.
    pub fn unavailable(&self) {
        if !self.down.swap(true, Ordering::AcqRel) {
            tracing::warn!("openstack service unavailable: one probe at a time until it answers");
        }
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// 50 callers retrying every 500 ms through a 60 s outage: without the
    /// gate about 6,000 tries reach the service; with it, one probe per
    /// wait.
    #[tokio::test(start_paused = true)]
    async fn during_an_outage_one_probe_at_a_time_reaches_the_service() {
        let gate = Arc::new(OutageGate::default());
        let sent = Arc::new(AtomicUsize::new(0));
        let back_at = Instant::now() + Duration::from_secs(60);
        gate.unavailable();
        let callers: Vec<_> = (0..50)
            .map(|_| {
                let (gate, sent) = (gate.clone(), sent.clone());
                tokio::spawn(async move {
                    loop {
                        let probe = gate.pass(None).await;
                        sent.fetch_add(1, Ordering::Relaxed);
                        if Instant::now() >= back_at {
                            gate.answered();
                            return;
                        }
                        gate.unavailable();
                        // The caller's wait, the probe held through it.
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        drop(probe);
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        let sent = sent.load(Ordering::Relaxed);
        // 120 waits of 500 ms in the outage, then each caller's one try.
        assert!(
            (100..=200).contains(&sent),
            "{sent} tries reached the service"
        );
        assert!(!gate.is_down());
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_gate_holds_nobody_and_a_deadline_ends_the_wait() {
        let gate = OutageGate::default();
        assert!(gate.pass(None).await.is_none(), "open: no probe needed");
        gate.unavailable();
        let probe = gate.pass(None).await;
        assert!(probe.is_some(), "down: the first caller probes");
        let started = Instant::now();
        let waited = gate
            .pass(Some(Instant::now() + Duration::from_secs(5)))
            .await;
        assert!(waited.is_none());
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(5),
            "until the deadline"
        );
        drop(probe);
        gate.answered();
        assert!(gate.pass(None).await.is_none());
    }
}
