//! Notification payloads, validated per notification type as Masakari's
//! schemas do (`masakari/api/openstack/ha/schemas/payload.py`): required
//! keys, allowed values, and no unknown keys.

use std::collections::BTreeMap;
use std::fmt;

use uuid::Uuid;

use super::NotificationType;
use super::validation::{InvalidField, TextRule, quoted, safe_text};

/// Most keys a payload may carry.
pub const MAX_PAYLOAD_KEYS: usize = 16;
/// Longest payload key or value (Masakari's `parameter_types.payload`).
pub const MAX_PAYLOAD_TEXT: usize = 255;

/// A host or process event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostEvent {
    Started,
    Stopped,
}

impl HostEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "STARTED",
            Self::Stopped => "STOPPED",
        }
    }
}

impl fmt::Display for HostEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// COMPUTE_HOST: `{event, host_status?, cluster_status?}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeHostPayload {
    pub event: HostEvent,
    /// `NORMAL` when the monitor confirmed the host powered off (fenced),
    /// `UNKNOWN` otherwise.
    pub host_status: Option<String>,
    /// `ONLINE` or `OFFLINE`.
    pub cluster_status: Option<String>,
}

/// PROCESS: `{process_name, event}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessPayload {
    pub process_name: String,
    pub event: HostEvent,
}

/// VM: `{instance_uuid, vir_domain_event, event}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmPayload {
    pub instance_uuid: Uuid,
    pub vir_domain_event: String,
    pub event: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotificationPayload {
    ComputeHost(ComputeHostPayload),
    Process(ProcessPayload),
    Vm(VmPayload),
}

impl NotificationPayload {
    /// Validates `payload` for a notification of type `kind`.
    pub fn parse(
        kind: NotificationType,
        payload: &BTreeMap<String, String>,
    ) -> Result<Self, InvalidField> {
        if payload.len() > MAX_PAYLOAD_KEYS {
            return Err(InvalidField::new(
                "payload",
                format!(
                    "must have at most {MAX_PAYLOAD_KEYS} keys (got {})",
                    payload.len()
                ),
            ));
        }
        for (key, value) in payload {
            check_key(key)?;
            if value.chars().count() > MAX_PAYLOAD_TEXT {
                return Err(InvalidField::new(
                    format!("payload.{key}"),
                    format!("must be at most {MAX_PAYLOAD_TEXT} characters"),
                ));
            }
            // What a monitor sends is shown to operators: nothing in it may
            // drive their terminal or hide and reorder text.
            safe_text(&format!("payload.{key}"), value, TextRule::Strict)?;
        }
        let fields = Fields(payload);
        match kind {
            NotificationType::ComputeHost => {
                fields.only(&["event", "host_status", "cluster_status"])?;
                Ok(Self::ComputeHost(ComputeHostPayload {
                    event: fields.host_event()?,
                    host_status: fields
                        .optional_enum("host_status", &["NORMAL", "UNKNOWN"])?
                        .map(str::to_owned),
                    cluster_status: fields
                        .optional_enum("cluster_status", &["ONLINE", "OFFLINE"])?
                        .map(str::to_owned),
                }))
            }
            NotificationType::Process => {
                fields.only(&["process_name", "event"])?;
                Ok(Self::Process(ProcessPayload {
                    process_name: fields.required_text("process_name")?.to_owned(),
                    event: fields.host_event()?,
                }))
            }
            NotificationType::Vm => {
                fields.only(&["instance_uuid", "vir_domain_event", "event"])?;
                let raw = fields.required_text("instance_uuid")?;
                let instance_uuid = Uuid::parse_str(raw).map_err(|_| {
                    InvalidField::new(
                        "payload.instance_uuid",
                        format!("{} is not a UUID", quoted(raw)),
                    )
                })?;
                Ok(Self::Vm(VmPayload {
                    instance_uuid,
                    vir_domain_event: fields.required_text("vir_domain_event")?.to_owned(),
                    event: fields.required_text("event")?.to_owned(),
                }))
            }
        }
    }

    /// A STARTED host or process event: the host (or its nova-compute) is
    /// back. Such reports are accepted even for a host on maintenance.
    pub fn is_started_event(&self) -> bool {
        match self {
            Self::ComputeHost(p) => p.event == HostEvent::Started,
            Self::Process(p) => p.event == HostEvent::Started,
            Self::Vm(_) => false,
        }
    }
}

fn check_key(key: &str) -> Result<(), InvalidField> {
    safe_text("payload", key, TextRule::Strict)?;
    let ok_len = (1..=MAX_PAYLOAD_TEXT).contains(&key.chars().count());
    let ok_chars = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.' | ' '));
    if ok_len && ok_chars {
        Ok(())
    } else {
        Err(InvalidField::new(
            "payload",
            format!(
                "key {} must be 1 to {MAX_PAYLOAD_TEXT} characters of letters, digits, '-', '_', ':', '.' and ' '",
                quoted(key)
            ),
        ))
    }
}

struct Fields<'a>(&'a BTreeMap<String, String>);

impl Fields<'_> {
    fn only(&self, allowed: &[&str]) -> Result<(), InvalidField> {
        match self.0.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(unknown) => Err(InvalidField::new(
                format!("payload.{unknown}"),
                format!("is not allowed here (allowed: {})", allowed.join(", ")),
            )),
            None => Ok(()),
        }
    }

    fn required_text(&self, key: &str) -> Result<&str, InvalidField> {
        match self.0.get(key) {
            None => Err(InvalidField::new(format!("payload.{key}"), "is required")),
            Some(v) if v.is_empty() => Err(InvalidField::new(
                format!("payload.{key}"),
                "must not be empty",
            )),
            Some(v) => Ok(v),
        }
    }

    fn optional_enum(&self, key: &str, allowed: &[&str]) -> Result<Option<&str>, InvalidField> {
        match self.0.get(key) {
            None => Ok(None),
            Some(v) if allowed.contains(&v.as_str()) => Ok(Some(v)),
            Some(v) => Err(InvalidField::new(
                format!("payload.{key}"),
                format!("must be one of {} (got {})", allowed.join(", "), quoted(v)),
            )),
        }
    }

    fn host_event(&self) -> Result<HostEvent, InvalidField> {
        match self.required_text("event")? {
            "STARTED" => Ok(HostEvent::Started),
            "STOPPED" => Ok(HostEvent::Stopped),
            other => Err(InvalidField::new(
                "payload.event",
                format!("must be one of STARTED, STOPPED (got {})", quoted(other)),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn compute_host_payloads() {
        let ok = map(&[
            ("event", "STOPPED"),
            ("host_status", "NORMAL"),
            ("cluster_status", "OFFLINE"),
        ]);
        let parsed = NotificationPayload::parse(NotificationType::ComputeHost, &ok).unwrap();
        assert!(!parsed.is_started_event());
        let err = NotificationPayload::parse(NotificationType::ComputeHost, &map(&[])).unwrap_err();
        assert_eq!(err.field, "payload.event");
        let err = NotificationPayload::parse(
            NotificationType::ComputeHost,
            &map(&[("event", "STOPPED"), ("host_status", "ERROR")]),
        )
        .unwrap_err();
        assert_eq!(err.field, "payload.host_status");
        let err = NotificationPayload::parse(
            NotificationType::ComputeHost,
            &map(&[("event", "STOPPED"), ("extra", "x")]),
        )
        .unwrap_err();
        assert_eq!(err.field, "payload.extra");
    }

    #[test]
    fn process_and_vm_payloads() {
        assert!(
            NotificationPayload::parse(
                NotificationType::Process,
                &map(&[("process_name", "nova-compute"), ("event", "STARTED")]),
            )
            .unwrap()
            .is_started_event()
        );
        let err =
            NotificationPayload::parse(NotificationType::Process, &map(&[("event", "STOPPED")]))
                .unwrap_err();
        assert_eq!(err.field, "payload.process_name");
        let err = NotificationPayload::parse(
            NotificationType::Vm,
            &map(&[
                ("instance_uuid", "not-a-uuid"),
                ("vir_domain_event", "STOPPED_FAILED"),
                ("event", "LIFECYCLE"),
            ]),
        )
        .unwrap_err();
        assert_eq!(err.field, "payload.instance_uuid");
    }

    #[test]
    fn oversized_payloads_are_refused() {
        let long = "x".repeat(256);
        let err = NotificationPayload::parse(
            NotificationType::Process,
            &map(&[("process_name", &long), ("event", "STOPPED")]),
        )
        .unwrap_err();
        assert_eq!(err.field, "payload.process_name");
        let many: BTreeMap<String, String> =
            (0..17).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        assert_eq!(
            NotificationPayload::parse(NotificationType::Vm, &many)
                .unwrap_err()
                .field,
            "payload"
        );
        let err =
            NotificationPayload::parse(NotificationType::ComputeHost, &map(&[("bad/key", "x")]))
                .unwrap_err();
        assert_eq!(err.field, "payload");
    }

    #[test]
    fn escape_sequences_and_bidi_overrides_are_refused_naming_the_field() {
        for bad in [
            "nova\u{1b}[2J",
            "nova\u{7}",
            "nova\u{9b}",
            "nova\u{202E}etupmoc",
            "nova\u{200B}",
        ] {
            let err = NotificationPayload::parse(
                NotificationType::Process,
                &map(&[("process_name", bad), ("event", "STOPPED")]),
            )
            .unwrap_err();
            assert_eq!(err.field, "payload.process_name", "{bad:?}: {err}");
        }
        let err = NotificationPayload::parse(
            NotificationType::ComputeHost,
            &map(&[("event", "STOPPED"), ("ev\u{1b}nt", "x")]),
        )
        .unwrap_err();
        assert_eq!(err.field, "payload");
    }

    /// Every character a terminal acts on or that hides or reorders text.
    fn unsafe_char() -> impl proptest::strategy::Strategy<Value = char> {
        use proptest::prelude::*;
        prop_oneof![
            (0u32..=0x1f).prop_map(|c| char::from_u32(c).unwrap()),
            (0x7fu32..=0x9f).prop_map(|c| char::from_u32(c).unwrap()),
            proptest::sample::select(vec![
                '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
                '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}', '\u{200B}', '\u{200C}',
                '\u{200D}', '\u{2060}', '\u{FEFF}',
            ]),
        ]
    }

    proptest::proptest! {
        #[test]
        fn a_payload_value_with_an_unsafe_character_is_refused_naming_it(
            head in "\\PC{0,40}",
            bad in unsafe_char(),
            tail in "\\PC{0,40}",
        ) {
            let value = format!("{head}{bad}{tail}");
            let err = NotificationPayload::parse(
                NotificationType::Process,
                &map(&[("process_name", &value), ("event", "STOPPED")]),
            )
            .unwrap_err();
            proptest::prop_assert_eq!(err.field, "payload.process_name");
            proptest::prop_assert!(err.reason.contains(&format!("U+{:04X}", u32::from(bad))), "{}", err.reason);
        }

        #[test]
        fn a_printable_payload_value_is_accepted(value in "\\PC{1,120}") {
            let parsed = NotificationPayload::parse(
                NotificationType::Process,
                &map(&[("process_name", &value), ("event", "STOPPED")]),
            );
            proptest::prop_assert!(parsed.is_ok(), "{:?}: {:?}", value, parsed);
        }
    }
}
