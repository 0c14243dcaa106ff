//! The workflows' settings: `[recovery]` (the pacing of every workflow),
//! `[host_failure]`, `[instance_failure]` and `[process_failure]`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::workflow::priority::PriorityRules;
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
    /// An instance whose metadata (else flavor extra spec) sets this key
    /// false is left alone.
    pub evacuate_key: String,
    /// An instance whose metadata (else flavor extra spec) sets this key to
    /// N is evacuated in tier N: every evacuation of tier N is requested
    /// before any of tier N+1.
    pub priority_key: String,
    /// The tier of instances naming none; unset: after every numbered tier.
    pub default_priority: Option<i64>,
    /// Instances whose flavor asks for a device (`pci_passthrough:alias`,
    /// `resources:VGPU`) go only to the segment's reserved hosts in this
    /// host aggregate (none: the instance fails, saying so); unset: they
    /// are evacuated like any other.
    pub device_aggregate: Option<String>,
    /// `[[host_failure.segment]]`: a segment's own selection settings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub segment: Vec<SegmentSelection>,
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
            evacuate_key: rules.priority.evacuate_key,
            priority_key: rules.priority.priority_key,
            default_priority: None,
            device_aggregate: None,
            segment: Vec::new(),
            add_reserved_host_to_aggregate: false,
            clear_blocking_volume_attachments: true,
        }
    }
}

/// `[[host_failure.segment]]`: the selection settings of the segment
/// `name`; those unset are `[host_failure]`'s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentSelection {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ha_enabled_instance_metadata_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evacuate_all_instances: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_instances_in_error_state: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evacuate_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_priority: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_aggregate: Option<String>,
}

impl HostFailureSettings {
    /// The selection rules of every segment, and of those configured on
    /// their own (by name).
    pub fn selection_rules(&self) -> (SelectionRules, BTreeMap<String, SelectionRules>) {
        let base = SelectionRules {
            ha_enabled_key: self.ha_enabled_instance_metadata_key.clone(),
            evacuate_all_instances: self.evacuate_all_instances,
            ignore_instances_in_error_state: self.ignore_instances_in_error_state,
            priority: PriorityRules {
                evacuate_key: self.evacuate_key.clone(),
                priority_key: self.priority_key.clone(),
                default_tier: tier(self.default_priority),
                device_aggregate: self.device_aggregate.clone(),
            },
        };
        let segments = self
            .segment
            .iter()
            .map(|s| {
                let mut rules = base.clone();
                let or = |own: &Option<String>, base: &mut String| {
                    if let Some(own) = own {
                        own.clone_into(base);
                    }
                };
                or(
                    &s.ha_enabled_instance_metadata_key,
                    &mut rules.ha_enabled_key,
                );
                or(&s.evacuate_key, &mut rules.priority.evacuate_key);
                or(&s.priority_key, &mut rules.priority.priority_key);
                rules.evacuate_all_instances = s
                    .evacuate_all_instances
                    .unwrap_or(base.evacuate_all_instances);
                rules.ignore_instances_in_error_state = s
                    .ignore_instances_in_error_state
                    .unwrap_or(base.ignore_instances_in_error_state);
                if s.default_priority.is_some() {
                    rules.priority.default_tier = tier(s.default_priority);
                }
                if s.device_aggregate.is_some() {
                    rules
                        .priority
                        .device_aggregate
                        .clone_from(&s.device_aggregate);
                }
                (s.name.clone(), rules)
            })
            .collect();
        (base, segments)
    }

    /// Errors name the setting: a tier below 1, an empty key, a segment
    /// table without a name or given twice.
    pub fn validate(&self) -> Result<(), String> {
        check_selection(
            "host_failure",
            Some(&self.ha_enabled_instance_metadata_key),
            Some(&self.evacuate_key),
            Some(&self.priority_key),
            self.device_aggregate.as_ref(),
            self.default_priority,
        )?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, s) in self.segment.iter().enumerate() {
            let at = format!("host_failure.segment[{i}]");
            if s.name.trim().is_empty() {
                return Err(format!("{at}.name must name a segment"));
            }
            if !seen.insert(s.name.as_str()) {
                return Err(format!(
                    "{at}.name: segment {:?} is configured twice",
                    s.name
                ));
            }
            check_selection(
                &format!("{at} ({:?})", s.name),
                s.ha_enabled_instance_metadata_key.as_ref(),
                s.evacuate_key.as_ref(),
                s.priority_key.as_ref(),
                s.device_aggregate.as_ref(),
                s.default_priority,
            )?;
        }
        Ok(())
    }
}

/// A configured default priority as a tier (validated: from 1).
fn tier(priority: Option<i64>) -> Option<u32> {
    priority.and_then(|p| u32::try_from(p).ok())
}

fn check_selection(
    at: &str,
    ha_key: Option<&String>,
    evacuate_key: Option<&String>,
    priority_key: Option<&String>,
    device_aggregate: Option<&String>,
    default_priority: Option<i64>,
) -> Result<(), String> {
    for (name, key) in [
        ("ha_enabled_instance_metadata_key", ha_key),
        ("evacuate_key", evacuate_key),
        ("priority_key", priority_key),
        ("device_aggregate", device_aggregate),
    ] {
        if key.is_some_and(|k| k.trim().is_empty()) {
            return Err(format!("{at}.{name} must not be empty"));
        }
    }
    match default_priority {
        Some(p) if p < 1 || u32::try_from(p).is_err() => Err(format!(
            "{at}.default_priority must be a whole number from 1 (tier 1 is evacuated first), not {p}"
        )),
        _ => Ok(()),
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

#[cfg(test)]
mod tests {
    use crate::config::{Overrides, Settings};

    fn load(toml: &str) -> Result<Settings, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engine.toml");
        std::fs::write(&path, toml).unwrap();
        Settings::load(Some(&path), &Overrides::default()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_segment_overrides_only_what_it_sets() {
        let settings = load(
            r#"
[host_failure]
evacuate_all_instances = true
default_priority = 3

[[host_failure.segment]]
name = "gold"
ha_enabled_instance_metadata_key = "ha"
default_priority = 1

[[host_failure.segment]]
name = "bronze"
evacuate_key = "bronze:evacuate"
"#,
        )
        .unwrap();
        let workflows = settings.recovery_settings();
        let base = workflows.selection_for("unlisted");
        assert_eq!(base.priority.default_tier, Some(3));
        assert!(base.evacuate_all_instances);
        let gold = workflows.selection_for("gold");
        assert_eq!(gold.ha_enabled_key, "ha");
        assert_eq!(gold.priority.default_tier, Some(1));
        assert!(gold.evacuate_all_instances);
        let bronze = workflows.selection_for("bronze");
        assert_eq!(bronze.priority.evacuate_key, "bronze:evacuate");
        assert_eq!(bronze.priority.priority_key, "instance_ha:priority");
        assert_eq!(bronze.priority.default_tier, Some(3));
    }

    #[test]
    fn bad_selection_settings_are_named() {
        for (toml, named) in [
            (
                "[host_failure]\ndefault_priority = 0\n",
                "host_failure.default_priority",
            ),
            (
                "[[host_failure.segment]]\nname = \"a\"\ndefault_priority = -2\n",
                "host_failure.segment[0] (\"a\").default_priority",
            ),
            (
                "[[host_failure.segment]]\nname = \"a\"\n[[host_failure.segment]]\nname = \"a\"\n",
                "host_failure.segment[1].name: segment \"a\" is configured twice",
            ),
            ("[[host_failure.segment]]\ndefault_priority = 1\n", "name"),
            (
                "[[host_failure.segment]]\nname = \"a\"\npriority = 1\n",
                "host_failure.segment.0.priority: unknown field",
            ),
            (
                "[host_failure]\npriority_key = \" \"\n",
                "host_failure.priority_key must not be empty",
            ),
        ] {
            let err = load(toml).unwrap_err();
            assert!(err.contains(named), "{toml}: {err}");
        }
    }
}
