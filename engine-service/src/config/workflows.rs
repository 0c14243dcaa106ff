//! The workflows' settings: `[recovery]` (the pacing of every workflow),
//! `[host_failure]`, `[instance_failure]` and `[process_failure]`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::workflow::selection::SelectionRules;

/// `[recovery]`: pacing of every workflow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecoverySettings {
    /// Instances worked on at once per notification (Masakari: 3); an
    /// instance waiting while Nova rebuilds it does not count, so every
    /// evacuation can be requested at once and Nova paces them.
    pub max_concurrent_instances: usize,
    /// Instances worked on at once across all notifications (each
    /// notification's first instance is exempt, so that every failed host's
    /// recovery starts at once).
    pub max_concurrent_instances_total: usize,
    /// How often evacuations, power changes and service states are read.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How often the evacuation migrations away from a failed host are
    /// listed (one call per failed host, only the records changed since
    /// the last one): how soon the end of an evacuation is seen.
    #[serde(with = "humantime_serde")]
    pub migration_poll_interval: Duration,
    /// How long one evacuation may take before it counts as failed
    /// (Masakari: 90 s).
    #[serde(with = "humantime_serde")]
    pub evacuation_timeout: Duration,
    /// An evacuation a nova-compute took but whose records (server,
    /// migration, instance action) have not changed for this long, with no
    /// guest spawned, is lost: its state is reset and it is evacuated
    /// again (`workflow::stall`). The default, 3 minutes, is three of
    /// Nova's RPC timeouts (`rpc_response_timeout`, 60 s, which also bounds
    /// each Cinder call a rebuild makes between two of its writes): no live
    /// rebuild goes that long without writing, and it is past nova-conductor's
    /// `MessagingTimeout` (60-100 s measured) and `service_down_time` (60 s).
    #[serde(with = "humantime_serde")]
    pub stalled_evacuation_after: Duration,
    /// How long a stop or start may take (Masakari: 180 s / 60 s).
    #[serde(with = "humantime_serde")]
    pub power_timeout: Duration,
    /// The prefix of the lock reason the engine sets; the reason also
    /// names the notification, and only that notification releases it.
    pub lock_reason_prefix: String,
    /// How long every call that is safe to repeat (reads, lock, unlock,
    /// stop and start, service updates, logins) keeps trying through
    /// refused connections, timeouts and 5xx answers: the outage of Nova,
    /// Cinder or Keystone a recovery rides out. Beyond it the step fails
    /// for a passing reason, and the API retries the instance.
    #[serde(with = "humantime_serde")]
    pub outage_tolerance: Duration,
}

impl Default for RecoverySettings {
    fn default() -> Self {
        Self {
            max_concurrent_instances: 64,
            max_concurrent_instances_total: 512,
            poll_interval: Duration::from_secs(1),
            migration_poll_interval: Duration::from_millis(250),
            evacuation_timeout: Duration::from_secs(900),
            stalled_evacuation_after: Duration::from_secs(180),
            power_timeout: Duration::from_secs(180),
            lock_reason_prefix: "instance-ha".to_owned(),
            outage_tolerance: Duration::from_secs(600),
        }
    }
}

/// `[host_failure]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostFailureSettings {
    /// Recover only hosts reported fenced (`host_status` NORMAL: powered
    /// off). Evacuating an unfenced host can run two copies of an instance
    /// on one volume.
    pub require_fencing: bool,
    /// Mark the failed nova-compute service forced down, so Nova accepts
    /// evacuations at once instead of after its heartbeat timeout.
    pub force_down: bool,
    pub service_disable_reason: String,
    /// An extra wait after the service update (Masakari sleeps 180 s; the
    /// force-down makes that unnecessary).
    #[serde(with = "humantime_serde")]
    pub wait_after_service_update: Duration,
    /// Without force-down: how long to wait for Nova to see the service
    /// down before evacuating.
    #[serde(with = "humantime_serde")]
    pub service_down_timeout: Duration,
    pub ha_enabled_instance_metadata_key: String,
    pub evacuate_all_instances: bool,
    pub ignore_instances_in_error_state: bool,
    pub add_reserved_host_to_aggregate: bool,
    /// Clear volume attachments that would block a boot-from-volume
    /// evacuation (only ever for a fenced host).
    pub clear_blocking_volume_attachments: bool,
}

impl Default for HostFailureSettings {
    fn default() -> Self {
        let rules = SelectionRules::default();
        Self {
            require_fencing: true,
            force_down: true,
            service_disable_reason: "instance-ha detected host failed.".to_owned(),
            wait_after_service_update: Duration::ZERO,
            service_down_timeout: Duration::from_secs(180),
            ha_enabled_instance_metadata_key: rules.ha_enabled_key,
            evacuate_all_instances: rules.evacuate_all_instances,
            ignore_instances_in_error_state: rules.ignore_instances_in_error_state,
            add_reserved_host_to_aggregate: false,
            clear_blocking_volume_attachments: true,
        }
    }
}

/// `[instance_failure]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InstanceFailureSettings {
    /// Recover every instance, not only HA-enabled ones.
    pub process_all_instances: bool,
    pub ha_enabled_instance_metadata_key: String,
}

impl Default for InstanceFailureSettings {
    fn default() -> Self {
        Self {
            process_all_instances: false,
            ha_enabled_instance_metadata_key: "HA_Enabled".to_owned(),
        }
    }
}

/// `[process_failure]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessFailureSettings {
    pub service_disable_reason: String,
    /// On a nova-compute STARTED report, enable the service again and clear
    /// the host's maintenance flag (Masakari never does).
    pub enable_on_started: bool,
}

impl Default for ProcessFailureSettings {
    fn default() -> Self {
        Self {
            service_disable_reason: "instance-ha detected process failed.".to_owned(),
            enable_on_started: false,
        }
    }
}
