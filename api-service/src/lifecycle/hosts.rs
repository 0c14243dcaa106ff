//! When a host may change while recoveries are unfinished: a change that
//! only puts the host on or off maintenance waits for the host's own
//! notifications (a repaired host is taken off maintenance while other
//! hosts of its segment recover); any other change (its name, its type,
//! whether it is reserved, its segment's composition) waits for every
//! notification of its segment, as Masakari does, since it would pull the
//! ground from under a running recovery.
//!
//! And when a fenced host returns to service: a COMPUTE_HOST STARTED
//! report brings it back (its run lifts the forced-down flag, enables its
//! nova-compute once it reports, and clears maintenance) when an operator
//! restored it, or when its segment returns hosts automatically and the
//! flapping guard does not hold it; otherwise the report only says the host
//! started.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::domain::{HostUpdate, NewNotification, NotificationType, ReturnToService};

/// The payload key an operator's restore (`RestoreHost`) adds to its
/// STARTED report. No client may send it: payloads are checked for known
/// keys before it is added.
pub const RESTORED_BY: &str = "restored_by";

/// The STARTED report an operator's restore of `hostname` makes, before
/// [`RESTORED_BY`] is added.
pub fn restore_report(hostname: &str, at: DateTime<Utc>) -> NewNotification {
    NewNotification {
        notification_type: NotificationType::ComputeHost,
        hostname: hostname.to_owned(),
        generated_time: at,
        payload: [
            ("event", "STARTED"),
            ("host_status", "NORMAL"),
            ("cluster_status", "ONLINE"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        idempotency_key: None,
        trace_context: None,
    }
}

/// Whether a run of a notification of `kind` with `payload` brings its
/// host back to service, given its segment's `return_to_service` and
/// whether the flapping guard holds the host (`None`: no such host).
pub fn returns_to_service(
    kind: NotificationType,
    payload: &BTreeMap<String, String>,
    segment: ReturnToService,
    held: Option<bool>,
) -> bool {
    let started = kind == NotificationType::ComputeHost
        && payload.get("event").map(String::as_str) == Some("STARTED");
    if !started {
        return false;
    }
    if payload.contains_key(RESTORED_BY) {
        return true;
    }
    match segment {
        ReturnToService::Manual => false,
        ReturnToService::Auto => held == Some(false),
    }
}

/// Whose unfinished notifications a host change waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The host's own.
    Host,
    /// Every notification of the host's segment.
    Segment,
}

/// The scope `update` waits for.
pub fn update_scope(update: &HostUpdate) -> Scope {
    let HostUpdate {
        name,
        host_type,
        control_attributes,
        reserved,
        on_maintenance: _,
    } = update;
    if name.is_none() && host_type.is_none() && control_attributes.is_none() && reserved.is_none() {
        Scope::Host
    } else {
        Scope::Segment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_host_returns_by_its_segments_rule_or_an_operators_word() {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let started = restore_report("compute-01", at).payload;
        let mut restored = started.clone();
        restored.insert(RESTORED_BY.to_owned(), "operator".to_owned());
        let host = NotificationType::ComputeHost;
        use ReturnToService::{Auto, Manual};
        // Auto: a monitor's STARTED report, unless the host is held.
        assert!(returns_to_service(host, &started, Auto, Some(false)));
        assert!(!returns_to_service(host, &started, Auto, Some(true)));
        assert!(!returns_to_service(host, &started, Auto, None));
        // Manual: only the operator's restore.
        assert!(!returns_to_service(host, &started, Manual, Some(false)));
        assert!(returns_to_service(host, &restored, Manual, Some(true)));
        // Never a failure, nor another kind of report.
        let mut stopped = started.clone();
        stopped.insert("event".to_owned(), "STOPPED".to_owned());
        assert!(!returns_to_service(host, &stopped, Auto, Some(false)));
        assert!(!returns_to_service(
            NotificationType::Process,
            &started,
            Auto,
            Some(false)
        ));
    }

    #[test]
    fn only_a_maintenance_change_waits_for_the_host_alone() {
        let maintenance = HostUpdate {
            on_maintenance: Some(false),
            ..HostUpdate::default()
        };
        assert_eq!(update_scope(&maintenance), Scope::Host);
        for other in [
            HostUpdate {
                reserved: Some(true),
                ..maintenance.clone()
            },
            HostUpdate {
                name: Some("compute-09".into()),
                ..HostUpdate::default()
            },
            HostUpdate {
                control_attributes: Some("x".into()),
                ..HostUpdate::default()
            },
        ] {
            assert_eq!(update_scope(&other), Scope::Segment, "{other:?}");
        }
    }
}
