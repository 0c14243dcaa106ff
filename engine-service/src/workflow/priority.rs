//! What an instance says about its own evacuation: `instance_ha:evacuate =
//! false` leaves it alone, `instance_ha:priority = N` puts it in tier N
//! (tier 1 is evacuated first). Each key is read from the instance's
//! metadata, else from its flavor's extra spec of the same name (Nova
//! embeds the flavor with its extra specs in the server from 2.47).

use std::fmt;

use openstack_client::nova::Server;

/// An evacuation tier: the numbered tiers in their order, then the default
/// tier of instances that name none (when the segment gives no number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    Numbered(u32),
    Default,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tier::Numbered(n) => write!(f, "tier {n}"),
            Tier::Default => f.write_str("the default tier"),
        }
    }
}

/// The keys an instance is marked with, and the tier of unmarked ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityRules {
    /// A false value (oslo's: 0/f/false/off/n/no) leaves the instance alone.
    pub evacuate_key: String,
    /// A whole number from 1: the instance's tier.
    pub priority_key: String,
    /// The tier of instances without a (valid) priority; `None`: after
    /// every numbered tier.
    pub default_tier: Option<u32>,
    /// Instances needing a device (PCI passthrough, vGPU) go only to the
    /// segment's reserved hosts in this aggregate; `None`: anywhere.
    pub device_aggregate: Option<String>,
}

impl Default for PriorityRules {
    fn default() -> Self {
        Self {
            evacuate_key: "instance_ha:evacuate".to_owned(),
            priority_key: "instance_ha:priority".to_owned(),
            default_tier: None,
            device_aggregate: None,
        }
    }
}

/// Where a marking was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Metadata,
    FlavorExtraSpec,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Metadata => "metadata",
            Source::FlavorExtraSpec => "flavor extra spec",
        })
    }
}

/// `key` on the instance: its metadata, else its flavor's extra specs.
pub fn marking<'a>(server: &'a Server, key: &str) -> Option<(&'a str, Source)> {
    match server.metadata.get(key) {
        Some(value) => Some((value.as_str(), Source::Metadata)),
        None => server
            .flavor_extra_spec(key)
            .map(|value| (value, Source::FlavorExtraSpec)),
    }
}

/// oslo's false strings; anything else (a typo included) does not exclude.
fn falsy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "0" | "f" | "false" | "off" | "n" | "no"
    )
}

/// Why the instance is left alone by its own marking, if it is.
pub fn exclusion(server: &Server, rules: &PriorityRules) -> Option<String> {
    let (value, source) = marking(server, &rules.evacuate_key)?;
    falsy(value).then(|| format!("{source} {}={value}", rules.evacuate_key))
}

/// The instance's tier, with a note when its priority cannot be read
/// (the default tier is used then).
pub fn tier_of(server: &Server, rules: &PriorityRules) -> (Tier, Option<String>) {
    let default = rules.default_tier.map_or(Tier::Default, Tier::Numbered);
    let Some((value, source)) = marking(server, &rules.priority_key) else {
        return (default, None);
    };
    match value.trim().parse::<u32>() {
        Ok(n) if n >= 1 => (Tier::Numbered(n), None),
        _ => (
            default,
            Some(format!(
                "{source} {}={value:?} is not a whole number from 1: {default}",
                rules.priority_key
            )),
        ),
    }
}

/// The flavor extra specs that ask for a device on the host.
pub const DEVICE_SPECS: [&str; 2] = ["pci_passthrough:alias", "resources:VGPU"];

/// The device the instance's flavor asks for (`pci_passthrough:alias`,
/// `resources:VGPU`), said as the flavor says it, if any.
pub fn device_need(server: &Server) -> Option<String> {
    DEVICE_SPECS.iter().find_map(|key| {
        server
            .flavor_extra_spec(key)
            .map(|value| format!("flavor {key}={value}"))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use openstack_client::nova::ServerFlavor;

    fn server(metadata: &[(&str, &str)], extra_specs: &[(&str, &str)]) -> Server {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        Server {
            id: "a".into(),
            metadata: map(metadata),
            flavor: Some(ServerFlavor {
                original_name: Some("f".into()),
                extra_specs: map(extra_specs),
            }),
            ..Server::default()
        }
    }

    #[test]
    fn tiers_order_numbers_first_then_the_default() {
        let mut tiers = vec![
            Tier::Default,
            Tier::Numbered(3),
            Tier::Numbered(1),
            Tier::Numbered(20),
        ];
        tiers.sort();
        assert_eq!(
            tiers,
            [
                Tier::Numbered(1),
                Tier::Numbered(3),
                Tier::Numbered(20),
                Tier::Default
            ]
        );
        assert_eq!(Tier::Numbered(2).to_string(), "tier 2");
    }

    #[test]
    fn metadata_wins_over_the_flavor() {
        let rules = PriorityRules::default();
        let both = server(
            &[("instance_ha:priority", "2")],
            &[("instance_ha:priority", "1")],
        );
        assert_eq!(tier_of(&both, &rules), (Tier::Numbered(2), None));
        let flavor_only = server(&[], &[("instance_ha:priority", "1")]);
        assert_eq!(tier_of(&flavor_only, &rules), (Tier::Numbered(1), None));
        assert_eq!(tier_of(&server(&[], &[]), &rules), (Tier::Default, None));
        let excluded_by_flavor = server(&[], &[("instance_ha:evacuate", "False")]);
        assert_eq!(
            exclusion(&excluded_by_flavor, &rules).as_deref(),
            Some("flavor extra spec instance_ha:evacuate=False")
        );
        let kept_by_metadata = server(
            &[("instance_ha:evacuate", "true")],
            &[("instance_ha:evacuate", "false")],
        );
        assert_eq!(exclusion(&kept_by_metadata, &rules), None);
    }

    #[test]
    fn only_false_values_exclude() {
        let rules = PriorityRules::default();
        for no in ["false", "False", "0", "no", "off", " n "] {
            let s = server(&[("instance_ha:evacuate", no)], &[]);
            assert!(exclusion(&s, &rules).is_some(), "{no}");
        }
        for other in ["true", "yes", "maybe", ""] {
            let s = server(&[("instance_ha:evacuate", other)], &[]);
            assert_eq!(exclusion(&s, &rules), None, "{other}");
        }
    }

    #[test]
    fn devices_are_read_from_the_flavor() {
        assert_eq!(device_need(&server(&[], &[])), None);
        let pci = server(&[], &[("pci_passthrough:alias", "a1:2")]);
        assert_eq!(
            device_need(&pci).as_deref(),
            Some("flavor pci_passthrough:alias=a1:2")
        );
        let vgpu = server(&[], &[("resources:VGPU", "1")]);
        assert_eq!(
            device_need(&vgpu).as_deref(),
            Some("flavor resources:VGPU=1")
        );
        // Metadata does not give an instance a device.
        assert_eq!(device_need(&server(&[("resources:VGPU", "1")], &[])), None);
    }

    #[test]
    fn an_unreadable_priority_takes_the_default_tier_with_a_note() {
        let rules = PriorityRules {
            default_tier: Some(5),
            ..PriorityRules::default()
        };
        for bad in ["0", "-1", "high", "1.5"] {
            let s = server(&[("instance_ha:priority", bad)], &[]);
            let (tier, note) = tier_of(&s, &rules);
            assert_eq!(tier, Tier::Numbered(5), "{bad}");
            assert!(note.unwrap().contains("not a whole number"), "{bad}");
        }
        assert_eq!(tier_of(&server(&[], &[]), &rules).0, Tier::Numbered(5));
    }
}
