//! What becomes of a new report, decided from what the intake transaction
//! read (the host, its segment, earlier reports, the notification that put
//! the host on maintenance, its recent failures):
//!
//! * the host must be registered (in a segment);
//! * a **duplicate** is a report of the same incident: the same type, host
//!   and payload, generated within the duplicate window of an earlier one
//!   that has not failed and had not ended when this one was generated. A
//!   report generated after the end of the host's last notification is a
//!   new incident, never its duplicate: a host that fails again is
//!   recovered again (and forced down again);
//! * a host on maintenance refuses reports (an operator, or the recovery of
//!   its last failure, took it out of service: a host that returns is taken
//!   off maintenance, per host, once its own notifications have ended),
//!   except STARTED events (the host or its nova-compute is back), and
//!   except when a recovery that failed put it there (a new report is how
//!   a monitor retries);
//! * a **flapping** host — `intake.flapping_failures` host failures within
//!   `intake.flapping_window` — is still recovered, but is held: it stays on
//!   maintenance (as an operator's, so that nothing brings it back by
//!   itself) and disabled until an operator clears `on_maintenance`; its
//!   notification says so;
//! * a report for a disabled segment is stored as `ignored`;
//! * a report whose `generated_time` was too far ahead (taken as received)
//!   says so in its message.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::{
    Host, NewNotification, Notification, NotificationPayload, NotificationType, Segment,
};
use crate::status::{IntakeVerdict, NotificationStatus};

/// The payload key keeping the `generated_time` a monitor sent when it was
/// further ahead than `intake.max_clock_skew` (the report is then taken at
/// the time it was received). No client may send it: payloads are checked
/// for known keys before it is added.
pub const MONITOR_GENERATED_TIME: &str = "monitor_generated_time";

/// What the intake transaction read about a report, with the host locked.
#[derive(Clone, Debug, Default)]
pub struct IntakeFacts {
    /// The host named by the report, if registered.
    pub host: Option<Host>,
    /// The host's segment.
    pub segment: Option<Segment>,
    /// Earlier reports of the same type for the same host, with the same
    /// payload, generated within the duplicate window of this one (either
    /// side), whatever their status.
    pub candidates: Vec<Notification>,
    /// The notification that put the host on maintenance, if one did.
    pub maintainer: Option<Notification>,
    /// The host's host-failure notifications (of any event) generated
    /// within `flapping_window` before this report.
    pub recent: Vec<Notification>,
}

/// What the intake rules see about a new report.
#[derive(Clone, Debug)]
pub struct IntakeContext<'a> {
    pub new: &'a NewNotification,
    pub payload: &'a NotificationPayload,
    pub facts: &'a IntakeFacts,
}

/// The intake's settings the rules need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntakeRules {
    pub duplicate_window: Duration,
    /// Host failures (this one counted) within `flapping_window` that hold
    /// the host out of service; 0: never.
    pub flapping_failures: u32,
    pub flapping_window: Duration,
}

/// What the rules decided about a report they let in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub verdict: IntakeVerdict,
    /// The host is flapping: hold it on maintenance, with this reason.
    pub hold_host: Option<String>,
}

impl Admitted {
    /// Stored to be recovered, nothing more to say.
    pub fn accept() -> Self {
        Self {
            verdict: IntakeVerdict::Accept,
            hold_host: None,
        }
    }
}

/// Why a report is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No such host in any segment.
    UnknownHost(String),
    /// A duplicate of `earlier`.
    Duplicate(String),
    /// The host is on maintenance.
    OnMaintenance(String),
}

/// Whether `candidate` reports the same incident as a report generated at
/// `generated`: it has not failed (a new report is how a monitor retries a
/// failed recovery) and had not ended when the new one was generated.
fn same_incident(candidate: &Notification, generated: DateTime<Utc>) -> bool {
    candidate.status() != NotificationStatus::Failed
        && candidate.ended_at.is_none_or(|ended| generated <= ended)
}

/// Whether the host is on maintenance because a recovery of it failed:
/// that maintenance is the failed recovery's, not an operator's, and a new
/// report is how a monitor retries.
fn maintenance_by_a_failed_recovery(context: &IntakeContext<'_>) -> bool {
    context
        .facts
        .maintainer
        .as_ref()
        .is_some_and(|m| m.status() == NotificationStatus::Failed)
}

/// Decides what becomes of the report `context.new`.
pub fn decide(context: &IntakeContext<'_>, rules: &IntakeRules) -> Result<Admitted, Refused> {
    let new = context.new;
    let (Some(host), Some(segment)) = (&context.facts.host, &context.facts.segment) else {
        return Err(Refused::UnknownHost(format!(
            "no host named {:?} is registered in a failover segment",
            new.hostname
        )));
    };
    if let Some(earlier) = context
        .facts
        .candidates
        .iter()
        .find(|c| same_incident(c, new.generated_time))
    {
        return Err(Refused::Duplicate(format!(
            "duplicate of notification {} ({}): same type, host and payload generated within {} s, of the same incident",
            earlier.id,
            earlier.status(),
            rules.duplicate_window.as_secs()
        )));
    }
    if host.on_maintenance
        && !context.payload.is_started_event()
        && !maintenance_by_a_failed_recovery(context)
    {
        return Err(Refused::OnMaintenance(format!(
            "host {} is on maintenance; notifications for it are refused until its on_maintenance flag is cleared",
            host.name
        )));
    }
    let mut notes: Vec<String> = clock_note(new).into_iter().collect();
    let hold_host = flapping(context, rules);
    if let Some(hold) = &hold_host {
        notes.push(hold.clone());
    }
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    let verdict = if !segment.enabled {
        let mut reason = format!(
            "failover segment {} ({}) is disabled; no recovery",
            segment.name, segment.id
        );
        if let Some(note) = note {
            reason = format!("{reason}; {note}");
        }
        IntakeVerdict::Ignore { reason }
    } else {
        match note {
            Some(note) => IntakeVerdict::AcceptNoted { note },
            None => IntakeVerdict::Accept,
        }
    };
    Ok(Admitted { verdict, hold_host })
}

/// The hold of a flapping host, if this report makes it one.
fn flapping(context: &IntakeContext<'_>, rules: &IntakeRules) -> Option<String> {
    let host_failure = context.new.notification_type == NotificationType::ComputeHost
        && !context.payload.is_started_event();
    let earlier = context
        .facts
        .recent
        .iter()
        .filter(|n| {
            NotificationPayload::parse(n.notification_type, &n.payload)
                .is_ok_and(|p| !p.is_started_event())
        })
        .count();
    let failures = u32::try_from(earlier).unwrap_or(u32::MAX).saturating_add(1);
    (host_failure && rules.flapping_failures > 0 && failures >= rules.flapping_failures).then(|| {
        format!(
            "host {} is flapping: {failures} host failures within {} (intake.flapping_failures {} within intake.flapping_window); \
             its instances are recovered, and it stays on maintenance and disabled until an operator clears its on_maintenance flag",
            context.new.hostname,
            humantime::format_duration(rules.flapping_window),
            rules.flapping_failures,
        )
    })
}

/// What the message of a report taken at its received time says.
pub(crate) fn clock_note(new: &NewNotification) -> Option<String> {
    let sent = new.payload.get(MONITOR_GENERATED_TIME)?;
    Some(format!(
        "the monitor's generated_time {sent} was ahead of this server's clock by more than \
         intake.max_clock_skew; taken as generated when received, at {}; is the monitor's clock right?",
        new.generated_time
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    ))
}
