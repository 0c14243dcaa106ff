//! The nova-compute services of a run's destinations, read by one shared
//! poller per run (one `GET /os-services?binary=nova-compute` per poll
//! interval), like the migration watch: every worker judging a quiet
//! evacuation reads its destination's record from it instead of asking
//! Nova itself. The poller starts only when a first worker asks, so a
//! recovery whose evacuations all move along never reads the services.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OnceCell, watch};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use openstack_client::OpenStack;
use openstack_client::nova::ComputeService;

/// Each nova-compute service by host, as last read.
type Services = Arc<HashMap<String, ComputeService>>;

pub struct ServiceWatch {
    openstack: OpenStack,
    interval: Duration,
    started: OnceCell<(watch::Receiver<Services>, JoinHandle<()>)>,
}

impl Drop for ServiceWatch {
    fn drop(&mut self) {
        if let Some((_, poller)) = self.started.get() {
            poller.abort();
        }
    }
}

impl ServiceWatch {
    /// A watch that reads every `interval` once asked.
    pub fn new(openstack: OpenStack, interval: Duration) -> Self {
        Self {
            openstack,
            interval,
            started: OnceCell::new(),
        }
    }

    /// The nova-compute service of `host` as last read (the first call
    /// reads them all and starts the poller); `None` if Nova has none or
    /// could not be read yet.
    pub async fn service(&self, host: &str) -> Option<ComputeService> {
        let (receiver, _) = self
            .started
            .get_or_init(|| async {
                let first = read(&self.openstack).await.unwrap_or_default();
                let (sender, receiver) = watch::channel(first);
                let poller = tokio::spawn(
                    poll(self.openstack.clone(), self.interval, sender).in_current_span(),
                );
                (receiver, poller)
            })
            .await;
        receiver.borrow().get(host).cloned()
    }
}

async fn read(openstack: &OpenStack) -> Option<Services> {
    match openstack.compute_services().await {
        Ok(services) => Some(Arc::new(
            services.into_iter().map(|s| (s.host.clone(), s)).collect(),
        )),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the nova-compute services");
            None
        }
    }
}

async fn poll(openstack: OpenStack, interval: Duration, sender: watch::Sender<Services>) {
    loop {
        tokio::time::sleep(interval).await;
        if let Some(services) = read(&openstack).await
            && sender.send(services).is_err()
        {
            return;
        }
    }
}
