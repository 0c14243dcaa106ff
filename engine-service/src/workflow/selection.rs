//! Which of a failed host's instances to recover, and in what order.

use std::collections::BTreeMap;

use openstack_client::nova::Server;

use super::priority::{self, PriorityRules, Tier};

/// How instances are chosen (Masakari's `[host_failure]` options, refined
/// by the instances' own markings: [`priority`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectionRules {
    /// The metadata key marking an instance for recovery.
    pub ha_enabled_key: String,
    /// Recover every instance, HA-enabled ones first.
    pub evacuate_all_instances: bool,
    /// Leave instances in `error` alone.
    pub ignore_instances_in_error_state: bool,
    /// Exclusion and tiers.
    pub priority: PriorityRules,
}

impl Default for SelectionRules {
    /// Masakari's behaviour: the markings refine it only where set.
    fn default() -> Self {
        Self {
            ha_enabled_key: "HA_Enabled".to_owned(),
            evacuate_all_instances: false,
            ignore_instances_in_error_state: false,
            priority: PriorityRules::default(),
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

/// An instance to recover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub server: Server,
    pub tier: Tier,
    pub ha_enabled: bool,
    /// Something about its markings worth saying (an unreadable priority).
    pub note: Option<String>,
    /// The device it needs, when the rules send such instances only to
    /// an aggregate's reserved hosts.
    pub device: Option<String>,
}

/// The outcome of a selection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// To recover, in order.
    pub recover: Vec<Chosen>,
    /// Left alone, with the reason.
    pub skipped: Vec<(Server, String)>,
}

/// Chooses the instances of `servers` to recover, tier by tier (tier 1
/// first, instances naming no tier last unless the rules give them one);
/// within a tier HA-enabled ones first (then the others when all are
/// evacuated), and within each of the two, instances with volumes attached
/// before the others, as listed otherwise. An instance marked
/// `instance_ha:evacuate=false` is left alone whatever else it says.
/// A volume-backed instance's volumes are checked (and stale attachments
/// cleared) before its evacuation is asked for; starting those first lets
/// their evacuations reach Nova with the image-backed ones instead of
/// behind them, where a saturated destination's queue would make them wait
/// a whole rebuild longer.
pub fn select_instances(servers: Vec<Server>, rules: &SelectionRules) -> Selection {
    let mut recover = Vec::new();
    let mut skipped = Vec::new();
    for server in servers {
        let ha_enabled = is_ha_enabled(&server.metadata, &rules.ha_enabled_key);
        if rules.ignore_instances_in_error_state && server.vm_state() == "error" {
            skipped.push((
                server,
                "in error state (ignore_instances_in_error_state)".to_owned(),
            ));
        } else if let Some(marked) = priority::exclusion(&server, &rules.priority) {
            skipped.push((server, format!("excluded from evacuation ({marked})")));
        } else if ha_enabled || rules.evacuate_all_instances {
            let (tier, note) = priority::tier_of(&server, &rules.priority);
            let device = rules
                .priority
                .device_aggregate
                .as_ref()
                .and_then(|_| priority::device_need(&server));
            recover.push(Chosen {
                server,
                tier,
                ha_enabled,
                note,
                device,
            });
        } else {
            let reason = format!(
                "not HA-enabled (metadata {} is not true)",
                rules.ha_enabled_key
            );
            skipped.push((server, reason));
        }
    }
    in_order(&mut recover);
    Selection { recover, skipped }
}

/// Stable: by tier, HA-enabled first, volumes attached first, each part
/// as listed.
pub fn in_order(chosen: &mut [Chosen]) {
    chosen.sort_by_key(|c| (c.tier, !c.ha_enabled, c.server.volumes_attached.is_empty()));
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
        let ids: Vec<_> = selection
            .recover
            .iter()
            .map(|c| c.server.id.as_str())
            .collect();
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
        let ids: Vec<_> = selection
            .recover
            .iter()
            .map(|c| c.server.id.as_str())
            .collect();
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
            .map(|c| c.server.id)
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

    #[test]
    fn tiers_come_first_and_an_excluded_instance_is_left_alone_even_if_ha() {
        let marked = |id: &str, key: &str, value: &str| {
            let mut s = server(id, "active", Some("True"));
            s.metadata.insert(key.into(), value.into());
            s
        };
        let servers = vec![
            server("unmarked", "active", Some("True")),
            marked("third", "instance_ha:priority", "3"),
            marked("first", "instance_ha:priority", "1"),
            marked("left", "instance_ha:evacuate", "false"),
            marked("also-first", "instance_ha:priority", "1"),
        ];
        let selection = select_instances(servers, &SelectionRules::default());
        let order: Vec<_> = selection
            .recover
            .iter()
            .map(|c| (c.server.id.as_str(), c.tier))
            .collect();
        assert_eq!(
            order,
            [
                ("first", Tier::Numbered(1)),
                ("also-first", Tier::Numbered(1)),
                ("third", Tier::Numbered(3)),
                ("unmarked", Tier::Default),
            ]
        );
        assert_eq!(selection.skipped.len(), 1);
        assert_eq!(selection.skipped[0].0.id, "left");
        assert!(
            selection.skipped[0]
                .1
                .contains("instance_ha:evacuate=false")
        );
    }

    proptest::proptest! {
        /// Every instance is recovered or skipped, once; excluded ones are
        /// skipped; the order is a stable sort by (tier, HA first, volumes
        /// first).
        #[test]
        fn ordering_is_a_stable_sort_by_tier(
            marks in proptest::collection::vec(
                (proptest::option::of(0u32..4), proptest::bool::ANY, proptest::bool::ANY, proptest::bool::ANY),
                0..24,
            ),
            all in proptest::bool::ANY,
        ) {
            let servers: Vec<Server> = marks
                .iter()
                .enumerate()
                .map(|(i, (priority, ha, volume, excluded))| {
                    let mut s = server(&i.to_string(), "active", ha.then_some("True"));
                    if let Some(p) = priority {
                        s.metadata.insert("instance_ha:priority".into(), p.to_string());
                    }
                    if *excluded {
                        s.metadata.insert("instance_ha:evacuate".into(), "no".into());
                    }
                    if *volume {
                        s.volumes_attached = vec![AttachedVolume { id: format!("{i}-root") }];
                    }
                    s
                })
                .collect();
            let rules = SelectionRules { evacuate_all_instances: all, ..SelectionRules::default() };
            let selection = select_instances(servers, &rules);
            proptest::prop_assert_eq!(selection.recover.len() + selection.skipped.len(), marks.len());
            let key = |c: &Chosen| (c.tier, !c.ha_enabled, c.server.volumes_attached.is_empty());
            for pair in selection.recover.windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                proptest::prop_assert!(key(a) <= key(b));
                if key(a) == key(b) {
                    let index = |c: &Chosen| c.server.id.parse::<usize>().unwrap();
                    proptest::prop_assert!(index(a) < index(b));
                }
            }
            for chosen in &selection.recover {
                let (priority, ha, _, excluded) = marks[chosen.server.id.parse::<usize>().unwrap()];
                proptest::prop_assert!(!excluded && (ha || all));
                let tier = match priority {
                    Some(p) if p >= 1 => Tier::Numbered(p),
                    _ => Tier::Default,
                };
                proptest::prop_assert_eq!(chosen.tier, tier);
            }
        }
    }
}
