//! What the overview says of a host, decided without I/O from its record
//! and the newest failure reports about it: up, failed (its recovery
//! running, or ended), fenced, on maintenance, reserved, and when a
//! report about it was last received.
//!
//! The API keeps no heartbeat of the monitoring agents: what it hears of
//! a host is the reports about it, so "last report" is the newest of
//! them, of any type.

use chrono::{DateTime, Utc};

use crate::domain::{Host, HostEvent, Notification, NotificationPayload, NotificationType};
use crate::status::NotificationStatus;

/// A compute-host report, as the overview reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostReport {
    pub notification_id: String,
    pub status: NotificationStatus,
    /// `STOPPED` (the host failed) or `STARTED` (it is back).
    pub event: HostEvent,
    /// The monitor confirmed the host powered off (`host_status: NORMAL`).
    pub fenced: bool,
    pub generated_time: DateTime<Utc>,
}

impl HostReport {
    /// The report `n` is, if it is a readable compute-host report.
    pub fn of(n: &Notification) -> Option<Self> {
        if n.notification_type != NotificationType::ComputeHost {
            return None;
        }
        let NotificationPayload::ComputeHost(payload) =
            NotificationPayload::parse(n.notification_type, &n.payload).ok()?
        else {
            return None;
        };
        Some(Self {
            notification_id: n.id.to_string(),
            status: n.status(),
            event: payload.event,
            fenced: payload
                .host_status
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("NORMAL")),
            generated_time: n.generated_time,
        })
    }
}

/// Whether the host runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// No failure is known, or it reported back.
    Up,
    /// It failed and its recovery is under way (new, running or error).
    Recovering,
    /// It failed; the recovery has ended (it is still down until it
    /// reports back).
    Failed,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Up => "up",
            Self::Recovering => "failed, recovering",
            Self::Failed => "failed",
        }
    }
}

/// What the overview shows of one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostState {
    pub health: Health,
    pub fenced: bool,
    pub on_maintenance: bool,
    /// Put on maintenance by a recovery (this notification), not by an
    /// operator.
    pub maintenance_by: Option<String>,
    pub reserved: bool,
    /// The failure report behind `health`, when it is not up.
    pub failure: Option<String>,
    /// When the newest report about the host was generated.
    pub last_report: Option<DateTime<Utc>>,
}

/// A host's own flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFlags {
    pub on_maintenance: bool,
    pub maintenance_by: Option<String>,
    pub reserved: bool,
}

impl HostFlags {
    pub fn of(host: &Host) -> Self {
        Self {
            on_maintenance: host.on_maintenance,
            maintenance_by: host.maintenance_by.map(|id| id.to_string()),
            reserved: host.reserved,
        }
    }
}

/// The state of a host (its `flags`) from its newest compute-host report
/// (`newest_host_report`) and the time of the newest report of any type.
/// A `STOPPED` report whose recovery was ignored (the host was up, say)
/// does not make the host failed.
pub fn host_state(
    flags: HostFlags,
    newest_host_report: Option<&HostReport>,
    last_report: Option<DateTime<Utc>>,
) -> HostState {
    let failed = newest_host_report
        .filter(|r| r.event == HostEvent::Stopped && r.status != NotificationStatus::Ignored);
    let health = match failed {
        None => Health::Up,
        Some(r) if r.status.is_unfinished() => Health::Recovering,
        Some(_) => Health::Failed,
    };
    HostState {
        health,
        fenced: failed.is_some_and(|r| r.fenced),
        on_maintenance: flags.on_maintenance,
        maintenance_by: flags.maintenance_by,
        reserved: flags.reserved,
        failure: failed.map(|r| r.notification_id.clone()),
        last_report,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::NotificationId;

    fn host(on_maintenance: bool, reserved: bool) -> HostFlags {
        HostFlags {
            on_maintenance,
            maintenance_by: None,
            reserved,
        }
    }

    /// A report whose notification has the status named `status` (tests
    /// read statuses; only the status rules choose them).
    fn report(event: HostEvent, status: &str, fenced: bool) -> HostReport {
        HostReport {
            notification_id: NotificationId::new().to_string(),
            status: NotificationStatus::parse(status).unwrap(),
            event,
            fenced,
            generated_time: DateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_host_without_a_failure_is_up() {
        let state = host_state(host(false, true), None, None);
        assert_eq!(state.health, Health::Up);
        assert!(state.reserved && !state.fenced && !state.on_maintenance);
        let back = report(HostEvent::Started, "finished", false);
        assert_eq!(
            host_state(host(true, false), Some(&back), None).health,
            Health::Up
        );
    }

    #[test]
    fn a_stopped_host_is_recovering_then_failed_and_fenced_when_the_monitor_said_so() {
        let running = report(HostEvent::Stopped, "running", true);
        let state = host_state(host(true, false), Some(&running), None);
        assert_eq!(state.health, Health::Recovering);
        assert!(state.fenced && state.on_maintenance);
        assert_eq!(
            state.failure.as_deref(),
            Some(running.notification_id.as_str())
        );
        for status in ["finished", "failed"] {
            let ended = report(HostEvent::Stopped, status, false);
            let state = host_state(host(false, false), Some(&ended), None);
            assert_eq!(state.health, Health::Failed, "{status}");
            assert!(!state.fenced);
        }
    }

    #[test]
    fn an_ignored_failure_report_leaves_the_host_up() {
        let ignored = report(HostEvent::Stopped, "ignored", false);
        let state = host_state(host(false, false), Some(&ignored), None);
        assert_eq!(state.health, Health::Up);
        assert_eq!(state.failure, None);
    }
}
