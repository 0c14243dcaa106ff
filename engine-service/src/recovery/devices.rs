//! Instances needing a device (PCI passthrough, vGPU): with
//! `device_aggregate` set for the segment, they go only to its reserved
//! hosts in that host aggregate; with none, the instance fails saying so
//! before anything is asked of Nova (not with the scheduler's error).

use super::evacuate::EvacuationJob;
use super::{InstanceResult, Run};
use crate::workflow::targets::{Target, device_targets};

/// Where the run's device instances may go.
#[derive(Debug)]
pub(super) struct DeviceTargets {
    aggregate: String,
    /// Set when the segment's recovery method gives the engine no reserved
    /// host (`auto`): its name.
    method_without_reserve: Option<&'static str>,
    /// `Err`: the aggregates could not be read.
    found: Result<Vec<Target>, String>,
}

impl Run {
    /// The device targets, read once per run and only if an instance needs
    /// a device.
    pub(super) async fn device_targets(&self, jobs: &[EvacuationJob]) -> Option<DeviceTargets> {
        if jobs.iter().all(|job| job.device.is_none()) {
            return None;
        }
        let rules = self.settings().selection_for(&self.request.segment_name);
        let aggregate = rules.priority.device_aggregate.clone()?;
        let found = match self.or_cancel(self.openstack().aggregates()).await {
            Ok(Ok(aggregates)) => Ok(aggregates
                .iter()
                .find(|a| a.name == aggregate)
                .map(|a| {
                    device_targets(
                        &self.request.reserved_host_names(),
                        &a.hosts,
                        &self.request.hostname,
                    )
                })
                .unwrap_or_default()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the run was cancelled".to_owned()),
        };
        let method_without_reserve = (self.request.reserved_hosts.is_empty()
            && !self.request.recovery_method.uses_reserved_hosts())
        .then(|| self.request.recovery_method.as_str());
        Some(DeviceTargets {
            aggregate,
            method_without_reserve,
            found,
        })
    }
}

impl DeviceTargets {
    /// Where an instance needing `need` may go, or its failure.
    pub(super) fn for_instance(
        &self,
        need: &str,
        segment: &str,
    ) -> Result<&[Target], InstanceResult> {
        let targets = match &self.found {
            Ok(targets) => targets,
            Err(e) => {
                return Err(InstanceResult::Failed {
                    message: format!(
                        "needs a device ({need}): the host aggregates could not be read: {e}"
                    ),
                    retryable: true,
                });
            }
        };
        if !targets.is_empty() {
            return Ok(targets);
        }
        let aggregate = &self.aggregate;
        let message = match self.method_without_reserve {
            Some(method) => format!(
                "needs a device ({need}): it goes only to reserved hosts in host aggregate {aggregate}, and segment {segment}'s recovery method {method} uses none"
            ),
            None => format!(
                "needs a device ({need}): segment {segment} has no reserved host, not on maintenance, in host aggregate {aggregate}"
            ),
        };
        Err(InstanceResult::Failed {
            message,
            retryable: false,
        })
    }
}
