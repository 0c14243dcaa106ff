//! Whether an engine is there to take a run. After a run is lost with its
//! engine, or an engine cannot be reached, no run is claimed until an
//! engine answers its health check again; it is probed every
//! [`PROBE_EVERY`] meanwhile (the first time after one such pause), and
//! the moment it answers the due runs go (not after the backoff meant for
//! Nova's failures).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::EngineLink;

/// How often an engine that went away is asked whether it is back, and
/// how long each ask waits.
const PROBE_EVERY: Duration = Duration::from_millis(500);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The dispatcher's view of the engine. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct EngineReadiness {
    /// No run lost with the engine since it last answered.
    ready: Arc<AtomicBool>,
    /// A probe is running.
    probing: Arc<AtomicBool>,
    /// Woken when the engine answers again.
    back: Arc<Notify>,
}

impl EngineReadiness {
    pub fn new() -> Self {
        Self {
            ready: Arc::new(AtomicBool::new(true)),
            ..Self::default()
        }
    }

    /// Whether runs may be claimed.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Waits until the engine answers again after [`Self::lost`].
    pub async fn back(&self) {
        self.back.notified().await;
    }

    /// The engine went away (a run was lost with it, or it could not be
    /// reached): stop claiming and probe it until it answers.
    pub fn lost(&self, link: &EngineLink, shutdown: &CancellationToken) {
        self.ready.store(false, Ordering::Release);
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        let link = link.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            loop {
                // The first ask waits too: an engine that answers its
                // health check but refuses the run (a wrong link token) is
                // asked twice a second, not in a tight loop.
                tokio::select! {
                    () = shutdown.cancelled() => {
                        this.probing.store(false, Ordering::Release);
                        return;
                    }
                    () = tokio::time::sleep(PROBE_EVERY) => {}
                }
                if link.answers(PROBE_TIMEOUT).await {
                    tracing::info!(engine = %link.url(), "the engine answers again");
                    this.ready.store(true, Ordering::Release);
                    this.probing.store(false, Ordering::Release);
                    this.back.notify_one();
                    return;
                }
            }
        });
    }
}
