//! Which of a failed host's instances to recover, and in what order.

use std::collections::BTreeMap;

use openstack_client::nova::Server;

/// How instances are chosen (Masakari's `[host_failure]` options).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectionRules {
    /// The metadata key marking an instance for recovery.
    pub ha_enabled_key: String,
    /// Recover every instance, HA-enabled ones first.
    pub evacuate_all_instances: bool,
    /// Leave instances in `error` alone.
    pub ignore_instances_in_error_state: bool,
}

impl Default for SelectionRules {
    fn default() -> Self {
        Self {
            ha_enabled_key: "HA_Enabled".to_owned(),
            evacuate_all_instances: false,
            ignore_instances_in_error_state: false,
        }
    }
}

/// oslo's `bool_from_string`: true for 1/t/true/on/y/yes, any case.
pub fn truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "t" | "true" | "on" | "y" | "yes"
    )
}

pub fn is_ha_enabled(metadata: &BTreeMap<String, String>, key: &str) -> bool {
    metadata.get(key).is_some_and(|v| truthy(v))
}

/// The outcome of a selection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// To recover, in order.
    pub recover: Vec<Server>,
    /// Left alone, with the reason.
    pub skipped: Vec<(Server, String)>,
}

/// Chooses the instances of `servers` to recover: HA-enabled ones first
/// (then the others when all are evacuated), and within each of the two,
/// instances with volumes attached before the others, as listed otherwise.
/// A volume-backed instance's volumes are checked (and stale attachments
/// cleared) before its evacuation is asked for; starting those first lets
/// their evacuations reach Nova with the image-backed ones instead of
/// behind them, where a saturated destination's queue would make them wait
/// a whole rebuild longer.
pub fn select_instances(servers: Vec<Server>, rules: &SelectionRules) -> Selection {
    let mut ha = Vec::new();
    let mut others = Vec::new();
    let mut skipped = Vec::new();
    for server in servers {
        if rules.ignore_instances_in_error_state && server.vm_state() == "error" {
            skipped.push((
                server,
                "in error state (ignore_instances_in_error_state)".to_owned(),
            ));
        } else if is_ha_enabled(&server.metadata, &rules.ha_enabled_key) {
            ha.push(server);
        } else if rules.evacuate_all_instances {
            others.push(server);
        } else {
            let reason = format!(
                "not HA-enabled (metadata {} is not true)",
                rules.ha_enabled_key
            );
            skipped.push((server, reason));
        }
    }
    volumes_first(&mut ha);
    volumes_first(&mut others);
    ha.extend(others);
    Selection {
        recover: ha,
        skipped,
    }
}

/// Stable: instances with volumes attached first, each part as listed.
fn volumes_first(servers: &mut [Server]) {
    servers.sort_by_key(|s| s.volumes_attached.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;
    use openstack_client::nova::AttachedVolume;

    fn server(id: &str, vm_state: &str, ha: Option<&str>) -> Server {
        Server {
            id: id.into(),
            vm_state: Some(vm_state.into()),
            metadata: ha
                .map(|v| BTreeMap::from([("HA_Enabled".to_owned(), v.to_owned())]))
                .unwrap_or_default(),
            ..Server::default()
        }
    }

    #[test]
    fn truthy_values_follow_oslo() {
        for yes in ["True", "true", "1", "yes", "Y", "on", " t "] {
            assert!(truthy(yes), "{yes}");
        }
        for no in ["False", "0", "no", "", "maybe"] {
            assert!(!truthy(no), "{no}");
        }
    }

    #[test]
    fn ha_only_by_default() {
        let servers = vec![
            server("a", "active", Some("True")),
            server("b", "active", None),
            server("c", "stopped", Some("yes")),
            server("d", "active", Some("False")),
        ];
        let selection = select_instances(servers, &SelectionRules::default());
        let ids: Vec<_> = selection.recover.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(selection.skipped.len(), 2);
    }

    #[test]
    fn all_instances_ha_first_and_error_ones_skipped_if_asked() {
        let servers = vec![
            server("plain", "active", None),
            server("ha", "active", Some("True")),
            server("broken", "error", Some("True")),
        ];
        let rules = SelectionRules {
            evacuate_all_instances: true,
            ignore_instances_in_error_state: true,
            ..SelectionRules::default()
        };
        let selection = select_instances(servers, &rules);
        let ids: Vec<_> = selection.recover.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["ha", "plain"]);
        assert_eq!(selection.skipped[0].0.id, "broken");
    }

    #[test]
    fn volume_backed_instances_start_first_within_their_class() {
        let with_volume = |id: &str, ha: Option<&str>| {
            let mut s = server(id, "active", ha);
            s.volumes_attached = vec![AttachedVolume {
                id: format!("{id}-root"),
            }];
            s
        };
        let servers = vec![
            server("img-1", "active", Some("True")),
            server("plain-img", "active", None),
            with_volume("bfv-1", Some("True")),
            server("img-2", "active", Some("True")),
            with_volume("plain-bfv", None),
            with_volume("bfv-2", Some("True")),
        ];
        let rules = SelectionRules {
            evacuate_all_instances: true,
            ..SelectionRules::default()
        };
        let ids: Vec<_> = select_instances(servers, &rules)
            .recover
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(
            ids,
            ["bfv-1", "bfv-2", "img-1", "img-2", "plain-bfv", "plain-img"]
        );
    }

    #[test]
    fn a_custom_key_is_honoured() {
        let mut s = server("a", "active", None);
        s.metadata.insert("ha".into(), "1".into());
        let rules = SelectionRules {
            ha_enabled_key: "ha".into(),
            ..SelectionRules::default()
        };
        assert_eq!(select_instances(vec![s], &rules).recover.len(), 1);
    }
}
