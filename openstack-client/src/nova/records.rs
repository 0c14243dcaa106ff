//! The Nova records the engine reads (servers, migrations, instance
//! actions, compute services, aggregates, block-device mappings) with the
//! fields it uses; parsers tolerate missing keys (down-cell records, older
//! microversions).

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Fault {
    #[serde(default)]
    pub code: Option<u16>,
    #[serde(default)]
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct AttachedVolume {
    pub id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Server {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub status: String,
    #[serde(default, rename = "OS-EXT-STS:vm_state")]
    pub vm_state: Option<String>,
    #[serde(default, rename = "OS-EXT-STS:task_state")]
    pub task_state: Option<String>,
    #[serde(default, rename = "OS-EXT-STS:power_state")]
    pub power_state: Option<i64>,
    #[serde(default, rename = "OS-EXT-SRV-ATTR:host")]
    pub host: Option<String>,
    #[serde(default, rename = "OS-EXT-SRV-ATTR:hypervisor_hostname")]
    pub hypervisor_hostname: Option<String>,
    #[serde(default)]
    pub host_status: Option<String>,
    #[serde(default, deserialize_with = "string_map")]
    pub metadata: BTreeMap<String, String>,
    /// The flavor Nova embeds (with its extra specs from 2.47; only its
    /// id before).
    #[serde(default)]
    pub flavor: Option<ServerFlavor>,
    #[serde(default, rename = "os-extended-volumes:volumes_attached")]
    pub volumes_attached: Vec<AttachedVolume>,
    #[serde(default)]
    pub locked: Option<bool>,
    #[serde(default)]
    pub locked_reason: Option<String>,
    #[serde(default)]
    pub fault: Option<Fault>,
    /// When Nova last saved the server (every `instance.save`, by the API
    /// or a nova-compute working on it).
    #[serde(default, deserialize_with = "nova_time")]
    pub updated: Option<DateTime<Utc>>,
}

impl Server {
    pub fn vm_state(&self) -> &str {
        self.vm_state.as_deref().unwrap_or_default()
    }

    pub fn is_boot_from_volume_or_has_volumes(&self) -> bool {
        !self.volumes_attached.is_empty()
    }

    /// An extra spec of the server's flavor (none before 2.47).
    pub fn flavor_extra_spec(&self, key: &str) -> Option<&str> {
        self.flavor
            .as_ref()
            .and_then(|f| f.extra_specs.get(key))
            .map(String::as_str)
    }
}

/// A server's flavor as embedded in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerFlavor {
    /// 2.47+.
    #[serde(default)]
    pub original_name: Option<String>,
    /// 2.47+ (when the policy shows them).
    #[serde(default, deserialize_with = "string_map")]
    pub extra_specs: BTreeMap<String, String>,
}

/// Metadata values are strings, but be lenient with other JSON scalars.
fn string_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let raw: Option<BTreeMap<String, Value>> = Option::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            (k, v)
        })
        .collect())
}

/// Nova's timestamps come with and without a zone; read both as UTC.
fn nova_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    let raw: Option<String> = Option::deserialize(d)?;
    Ok(raw.and_then(|s| parse_time(&s)))
}

pub fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc())
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Migration {
    pub id: i64,
    #[serde(default)]
    pub instance_uuid: String,
    #[serde(default)]
    pub migration_type: Option<String>,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub source_compute: Option<String>,
    #[serde(default)]
    pub dest_compute: Option<String>,
    #[serde(default, deserialize_with = "nova_time")]
    pub created_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "nova_time")]
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct InstanceAction {
    pub action: String,
    #[serde(default)]
    pub request_id: String,
    #[serde(default, deserialize_with = "nova_time")]
    pub start_time: Option<DateTime<Utc>>,
    #[serde(default)]
    pub message: Option<String>,
    /// 2.58+.
    #[serde(default, deserialize_with = "nova_time")]
    pub updated_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub events: Vec<ActionEvent>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ActionEvent {
    pub event: String,
    #[serde(default, deserialize_with = "nova_time")]
    pub start_time: Option<DateTime<Utc>>,
    /// None while the step runs (or if whoever ran it died).
    #[serde(default, deserialize_with = "nova_time")]
    pub finish_time: Option<DateTime<Utc>>,
    /// `Success` or `Error` once finished.
    #[serde(default)]
    pub result: Option<String>,
    #[serde(default)]
    pub traceback: Option<String>,
    #[serde(default)]
    pub details: Option<String>,
    #[serde(default)]
    pub host: Option<String>,
}

/// A compute service id: a UUID from 2.53, an integer before.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ServiceId {
    Uuid(String),
    Number(i64),
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct ComputeService {
    pub id: ServiceId,
    #[serde(default)]
    pub binary: String,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub forced_down: Option<bool>,
    #[serde(default)]
    pub disabled_reason: Option<String>,
    /// The service's last heartbeat (or update).
    #[serde(default, deserialize_with = "nova_time")]
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Aggregate {
    pub id: i64,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// A volume attachment as Nova's block-device mapping sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct BdmAttachment {
    #[serde(rename = "volumeId")]
    pub volume_id: String,
    #[serde(default)]
    pub attachment_id: Option<String>,
}

/// What to change on a compute service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceUpdate {
    pub forced_down: Option<bool>,
    pub disabled_reason: Option<String>,
    /// `Some(true)` enables, `Some(false)` disables.
    pub enabled: Option<bool>,
}

impl ServiceUpdate {
    /// Whether `service` shows this update applied.
    pub fn is_applied_to(&self, service: &ComputeService) -> bool {
        self.forced_down
            .is_none_or(|down| service.forced_down == Some(down))
            && self.enabled.is_none_or(|enabled| {
                service.status == if enabled { "enabled" } else { "disabled" }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flavor_extra_specs_are_read_from_2_47_and_absent_before() {
        let embedded: Server = serde_json::from_value(json!({
            "id": "a",
            "flavor": {"vcpus": 1, "ram": 512, "original_name": "gpu",
                       "extra_specs": {"instance_ha:priority": "1", "hw:numa_nodes": 2}}
        }))
        .unwrap();
        assert_eq!(
            embedded.flavor_extra_spec("instance_ha:priority"),
            Some("1")
        );
        assert_eq!(embedded.flavor_extra_spec("hw:numa_nodes"), Some("2"));
        let linked: Server = serde_json::from_value(json!({
            "id": "b", "flavor": {"id": "1", "links": []}
        }))
        .unwrap();
        assert_eq!(linked.flavor_extra_spec("instance_ha:priority"), None);
        let none: Server = serde_json::from_value(json!({"id": "c", "flavor": null})).unwrap();
        assert_eq!(none.flavor, None);
    }
}
