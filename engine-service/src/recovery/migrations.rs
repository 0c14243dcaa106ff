//! Following many evacuations at once: one poller per failed host reads the
//! evacuation migrations away from it (only what changed since the last
//! read) and publishes the newest migration of each instance. Instance
//! workers wait on it instead of each polling Nova: a thousand evacuations
//! cost one request per poll interval, not a thousand.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use super::services::ServiceWatch;
use crate::workflow::evacuation;
use openstack_client::OpenStack;
use openstack_client::nova::Migration;

/// The newest known evacuation migration per instance.
pub type Migrations = Arc<HashMap<String, Migration>>;

/// Nova's clock and ours may differ; ask for a little overlap.
const OVERLAP: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

/// Every this many polls the read is whole, not only what changed: Nova's
/// `changes-since` compares `updated_at`, which stays NULL until a
/// nova-compute claims the migration, so an evacuation accepted after the
/// previous read and lost before any claim (its destination's nova-compute
/// killed as it received it, measured on real Nova) would never be seen,
/// and never judged lost.
const WHOLE_READ_EVERY: u64 = 20;

pub struct MigrationWatch {
    receiver: watch::Receiver<Migrations>,
    /// Each instance's newest evacuation that existed before this run: an
    /// earlier failure's, not ours, or an earlier run's that Nova may
    /// still be carrying out (its result lost): follow that, never ask
    /// again.
    baseline: HashMap<String, Migration>,
    /// Whether `baseline` was read; if not, workers read their own.
    baseline_read: bool,
    poller: JoinHandle<()>,
    /// The destinations' nova-compute services, for the workers judging
    /// a quiet evacuation.
    services: Arc<ServiceWatch>,
}

impl Drop for MigrationWatch {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

impl MigrationWatch {
    /// Reads the current evacuations away from `source` (the baseline) and
    /// starts polling every `interval`; the destinations' services are
    /// read every `service_interval` once a worker asks.
    pub async fn start(
        openstack: OpenStack,
        source: String,
        interval: Duration,
        service_interval: Duration,
    ) -> Self {
        let services = Arc::new(ServiceWatch::new(openstack.clone(), service_interval));
        // Without the baseline the workers fall back to reading servers;
        // an outage of the migrations API must not stop a recovery.
        let (existing, baseline_read) = match openstack.evacuations_from(&source, None).await {
            Ok(existing) => (existing, true),
            Err(e) => {
                tracing::warn!(host = %source, error = %e, "cannot read earlier evacuations; following servers instead");
                (Vec::new(), false)
            }
        };
        let cursor = existing
            .iter()
            .filter_map(|m| m.updated_at.or(m.created_at))
            .max();
        let mut baseline: HashMap<String, Migration> = HashMap::new();
        for m in existing {
            if baseline
                .get(&m.instance_uuid)
                .is_none_or(|newest| newest.id < m.id)
            {
                baseline.insert(m.instance_uuid.clone(), m);
            }
        }
        // Published from the start: an evacuation of an earlier run that
        // Nova lost changes no more, yet its worker must see it to judge it.
        let (sender, receiver) = watch::channel(Arc::new(baseline.clone()));
        // The poller's requests belong to the run: its task carries the
        // current span, so they carry the report's trace like every other
        // Nova call of the recovery.
        let poller = tokio::spawn(
            poll(
                openstack,
                source,
                interval,
                cursor,
                baseline.clone(),
                sender,
            )
            .in_current_span(),
        );
        Self {
            receiver,
            baseline,
            baseline_read,
            poller,
            services,
        }
    }

    /// A handle for one instance's worker.
    pub fn follow(&self, instance_id: &str) -> MigrationFollower {
        let newest = self.baseline.get(instance_id);
        let baseline = newest.map(|m| m.id);
        MigrationFollower {
            receiver: self.receiver.clone(),
            instance_id: instance_id.to_owned(),
            baseline,
            unused_baseline: self.baseline_read.then_some(baseline),
            earlier_in_flight: newest.is_some_and(evacuation::in_flight),
            earlier_failed: newest.is_some_and(|m| matches!(m.status.as_str(), "error" | "failed")),
            services: self.services.clone(),
        }
    }
}

/// One instance's view of the watch.
pub struct MigrationFollower {
    receiver: watch::Receiver<Migrations>,
    instance_id: String,
    baseline: Option<i64>,
    /// The baseline the watch read before any request of this run, until
    /// a first evacuation request uses it.
    unused_baseline: Option<Option<i64>>,
    earlier_in_flight: bool,
    earlier_failed: bool,
    services: Arc<ServiceWatch>,
}

impl MigrationFollower {
    /// The instance's newest evacuation migration newer than the baseline.
    pub fn latest(&self) -> Option<Migration> {
        self.receiver
            .borrow()
            .get(&self.instance_id)
            .filter(|m| self.baseline.is_none_or(|b| m.id > b))
            .cloned()
    }

    /// The newest evacuation away from the source that existed before this
    /// run, as the watch read it (`Some(None)`: there was none), once: for
    /// the first evacuation request, which then needs no read of its own.
    /// `None` if the watch could not read it or it was used already.
    pub fn take_unused_baseline(&mut self) -> Option<Option<i64>> {
        self.unused_baseline.take()
    }

    /// Whether Nova was still carrying out an evacuation away from the
    /// source when the run started. Between its rebuild and its
    /// `finish_evacuation` the server shows active, no task, on the old
    /// host: only the migration record tells it is on its way.
    pub fn earlier_in_flight(&self) -> bool {
        self.earlier_in_flight
    }

    /// Whether the newest evacuation away from the source before this run
    /// failed (Nova's migration `error` or `failed`): an earlier attempt of
    /// this recovery, whose failure put the instance in error.
    pub fn earlier_failed(&self) -> bool {
        self.earlier_failed
    }

    /// The run's shared watch of the destinations' nova-compute services.
    pub fn services(&self) -> &ServiceWatch {
        &self.services
    }

    /// Migrations older than `id` are not this run's (a retry re-baselines
    /// after seeing its own evacuation request refused or lost).
    pub fn set_baseline(&mut self, id: Option<i64>) {
        self.baseline = id;
    }

    /// Waits until the watch publishes something new, or `timeout`.
    pub async fn changed(&mut self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.receiver.changed()).await;
    }
}

async fn poll(
    openstack: OpenStack,
    source: String,
    interval: Duration,
    mut cursor: Option<DateTime<Utc>>,
    mut known: HashMap<String, Migration>,
    sender: watch::Sender<Migrations>,
) {
    let mut polls: u64 = 0;
    loop {
        tokio::time::sleep(interval).await;
        polls += 1;
        let since = cursor
            .filter(|_| !polls.is_multiple_of(WHOLE_READ_EVERY))
            .map(|c| c - OVERLAP);
        let migrations = match openstack.evacuations_from(&source, since).await {
            Ok(migrations) => migrations,
            Err(e) => {
                // The workers read servers directly meanwhile.
                tracing::warn!(host = %source, error = %e, "cannot read evacuation migrations");
                continue;
            }
        };
        let mut changed = false;
        for m in migrations {
            if let Some(at) = m.updated_at.or(m.created_at) {
                cursor = Some(cursor.map_or(at, |c| c.max(at)));
            }
            let newer = known
                .get(&m.instance_uuid)
                .is_none_or(|k| m.id > k.id || (m.id == k.id && *k != m));
            if newer {
                known.insert(m.instance_uuid.clone(), m);
                changed = true;
            }
        }
        if changed && sender.send(Arc::new(known.clone())).is_err() {
            return; // nobody follows any more
        }
    }
}
