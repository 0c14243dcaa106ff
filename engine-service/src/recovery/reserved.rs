//! Reserved hosts (the `reserved_host` recovery methods): each made ready
//! once per run, shared by the instance workers: its nova-compute enabled,
//! added to the failed host's aggregates if configured, and taken out of
//! the reserve.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Mutex, OnceCell};

use super::{ProgressState, Run};
use openstack_client::nova::ServiceUpdate;

/// Whether a reserved host was made ready, decided once.
type Readiness = Arc<OnceCell<Result<(), String>>>;

/// Reserved hosts made ready once per run, shared by the instance workers.
#[derive(Default)]
pub(super) struct ReservedHosts {
    ready: Mutex<HashMap<String, Readiness>>,
}

impl Run {
    /// Enables a reserved host's nova-compute (and adds it to the failed
    /// host's aggregates if configured), once per run.
    pub(super) async fn ready_reserved_host(
        &self,
        reserved: &ReservedHosts,
        target: &str,
    ) -> Result<(), String> {
        let cell = {
            let mut ready = reserved.ready.lock().await;
            ready.entry(target.to_owned()).or_default().clone()
        };
        cell.get_or_init(|| async {
            let result = self.enable_reserved_host(target).await;
            match &result {
                Ok(()) => self.reporter.progress(
                    "prepare_reserved_host",
                    ProgressState::Succeeded,
                    format!("reserved host {target} enabled"),
                ),
                Err(e) => self.reporter.progress(
                    "prepare_reserved_host",
                    ProgressState::Failed,
                    e.clone(),
                ),
            }
            result
        })
        .await
        .clone()
    }

    async fn enable_reserved_host(&self, target: &str) -> Result<(), String> {
        let openstack = self.openstack();
        let failed_host = &self.request.hostname;
        if self.settings().add_reserved_host_to_aggregate {
            let aggregates = openstack
                .aggregates()
                .await
                .map_err(|e| format!("list aggregates: {e}"))?;
            for aggregate in aggregates
                .iter()
                .filter(|a| a.hosts.iter().any(|h| h == failed_host))
            {
                if !aggregate.hosts.iter().any(|h| h == target) {
                    openstack
                        .add_host_to_aggregate(aggregate.id, target)
                        .await
                        .map_err(|e| {
                            format!("add {target} to aggregate {}: {e}", aggregate.name)
                        })?;
                }
            }
        }
        let service = openstack
            .compute_service(target)
            .await
            .map_err(|e| format!("read nova-compute on {target}: {e}"))?
            .ok_or_else(|| format!("nova has no nova-compute service on reserved host {target}"))?;
        if service.status != "enabled" {
            openstack
                .update_service(
                    &service,
                    &ServiceUpdate {
                        enabled: Some(true),
                        ..ServiceUpdate::default()
                    },
                )
                .await
                .map_err(|e| format!("enable nova-compute on {target}: {e}"))?;
        }
        // Masakari takes the host out of the reserve once used.
        self.reporter.host_update(target, None, Some(false));
        Ok(())
    }
}
