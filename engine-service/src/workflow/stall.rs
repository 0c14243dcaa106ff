//! Whether an evacuation Nova accepted will still go on, from Nova's own
//! records only: the server, the evacuation's migration, its instance
//! action's events and the destination's nova-compute service, against
//! the time now and `recovery.stalled_evacuation_after`.
//!
//! # What Nova's records prove (Nova 34: `nova/compute/api.py` `evacuate`,
//! `nova/conductor/manager.py` `rebuild_instance`, `nova/compute/manager.py`
//! `rebuild_instance`, `_do_rebuild_instance`, `_rebuild_default_impl`,
//! `nova/compute/resource_tracker.py` `_claim_existing_migration`,
//! `finish_evacuation`)
//!
//! An evacuation goes: the API sets task `rebuilding`, records the
//! `evacuate` action and creates the migration `accepted` (destination
//! only if one was named), then casts to nova-conductor. The conductor's
//! `rebuild_server` event wraps its whole work: scheduling (an RPC *call*
//! to nova-scheduler) and, last, the cast to the chosen nova-compute. That
//! compute records `compute_rebuild_instance` on receipt, claims (the
//! migration becomes `pre-migrating` with its destination), saves power
//! state NOSTATE with `expected_task_state=[rebuilding]`, moves the
//! volumes, saves `rebuild_block_device_mapping` (expecting `rebuilding`),
//! attaches, saves `rebuild_spawning` (expecting
//! `rebuild_block_device_mapping`), spawns the guest, saves the guest's
//! power state with no task (expecting `rebuild_spawning`), and only then,
//! in `finish_evacuation`, sets the host to itself and the migration
//! `done`. Each of those task-state saves is a compare-and-set: a rebuild
//! whose expected task state is gone stops (`UnexpectedTaskStateError`).
//! A consumed RPC message is acknowledged before it runs
//! (oslo.messaging), so a nova-compute or nova-conductor that dies drops
//! the requests it was running; one not yet consumed waits in the queue
//! and runs when its service starts again.
//!
//! 1. Migration `accepted`, the conductor's `rebuild_server` ended `Error`,
//!    no compute event: the conductor raised before or at its cast to a
//!    compute (the cast is the last statement of the event; a cast either
//!    publishes or raises), so no nova-compute has the request. Safe to
//!    evacuate again at once. (The lost message-bus case: the scheduling
//!    call's `MessagingTimeout`.)
//! 2. Migration `accepted` and no `rebuild_server` event: the request may
//!    wait in the conductor's queue (a large recovery on one conductor
//!    queues for minutes) and would run beside a new one. Never repaired
//!    on time alone. Nor with `rebuild_server` started and not finished
//!    (the conductor is still scheduling), nor with it `Success` and no
//!    compute event: the cast waits in a compute's queue (one that is dead
//!    runs it when it starts again) and, unless the destination was named,
//!    the records do not say which compute.
//! 3. A compute took it (`compute_rebuild_instance` started, or the
//!    migration `pre-migrating`), the server is still on the source with
//!    task `rebuilding` or `rebuild_block_device_mapping` (or no task with
//!    power state NOSTATE, or the migration still `accepted`): no guest has
//!    been spawned, since the spawn starts only after `rebuild_spawning` is
//!    saved. After a reset the old rebuild's next save expects a task state
//!    the reset removed, and since every step is a compare-and-set on the
//!    task state, at most one of the old and the new rebuild can pass
//!    `rebuild_block_device_mapping` → `rebuild_spawning`: at most one
//!    guest. Repaired once nothing in the records has changed for
//!    `stalled_after`, by Nova's timestamps and, in a recover run, as
//!    watched by the engine itself (a task state's change carries no
//!    timestamp of its own but the server's `updated`, which locks move). What the records cannot rule out is the old rebuild
//!    passing to `rebuild_spawning` in the instant between the engine's
//!    last read and its reset (os-resetState is not conditional): the
//!    engine reads the server again just before the reset, and a rebuild
//!    that has not written anything for `stalled_after` is one whose
//!    nova-compute died (killed, or its host lost power).
//! 4. Task `rebuild_spawning` (or any task after it), no task with a power
//!    state other than NOSTATE while the migration is `pre-migrating` (the
//!    spawn's last save ran, `finish_evacuation` did not: a killed
//!    nova-compute leaves its guests running), or the host already moved:
//!    a guest may run on the destination. Repaired only once that
//!    destination's nova-compute is forced down (reported failed and
//!    fenced).
//! 5. The destination's nova-compute forced down, the request in its hands
//!    (a compute event on it, or the migration `pre-migrating` there, or
//!    the conductor's cast to a destination named in the request): it is
//!    fenced, nothing runs there. Safe at once.

use std::time::Duration;

use chrono::{DateTime, Utc};

use openstack_client::nova::{ActionEvent, ComputeService, InstanceAction, Migration, Server};

use super::evacuation::{describe, in_flight};

/// The conductor's event of an evacuation (`EventReporter` in
/// `nova/conductor/manager.py`).
pub const CONDUCTOR_EVENT: &str = "rebuild_server";
/// The destination compute's event (`wrap_instance_event(prefix='compute')`).
pub const COMPUTE_EVENT: &str = "compute_rebuild_instance";

/// Nova's power state "no state": what the destination saves before its
/// rebuild, the guest not being there yet.
const NOSTATE: i64 = 0;

/// What Nova shows of one evacuation in flight, as read.
#[derive(Clone, Copy, Debug)]
pub struct Records<'a> {
    /// The failed host the evacuation moves the instance away from.
    pub source: &'a str,
    pub server: &'a Server,
    /// The evacuation's migration (in flight).
    pub migration: &'a Migration,
    /// The evacuation's `evacuate` action with its events, once read.
    pub action: Option<&'a InstanceAction>,
    /// The destination's nova-compute service, when the destination is
    /// known ([`destination`]) and its record was read.
    pub destination: Option<&'a ComputeService>,
    pub now: DateTime<Utc>,
    /// Since when the caller has watched these records without seeing them
    /// change (a recover run following the evacuation); `None`: Nova's
    /// timestamps alone (a reconcile).
    pub watched_since: Option<DateTime<Utc>>,
    /// `recovery.stalled_evacuation_after`.
    pub stalled_after: Duration,
}

/// The judgement on an evacuation in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stall {
    /// Changing, or changed too recently to judge.
    Proceeding,
    /// Quiet long enough to look closer: read the evacuation's instance
    /// action (and the destination's service) and judge again.
    ReadAction,
    /// Quiet, but the records cannot prove the request will not still run:
    /// keep following it. The text says what Nova shows, and why.
    Unproven(String),
    /// Lost, and no earlier request can still spawn a guest: reset the
    /// state and evacuate again. The text says what proves it.
    Repair(String),
    /// Lost, but a guest may run on `host`, or the request may still run
    /// there: repairable once its nova-compute is forced down.
    AwaitFencing { host: String, reason: String },
}

/// An evacuation quiet for this share of `stalled_after` is looked at
/// closer (its instance action read).
pub const LOOK_DIVISOR: u32 = 4;

/// Judges an evacuation in flight; see the module's doc for what each
/// record proves.
pub fn assess(r: &Records<'_>) -> Stall {
    let m = r.migration;
    if !in_flight(m) {
        return Stall::Proceeding;
    }
    let fenced = r.destination.is_some_and(forced_down);
    let claimed = m.status == "pre-migrating";
    // The claim proves a compute took it: on a fenced destination it is
    // gone, whatever the action says.
    if claimed && fenced {
        return Stall::Repair(fenced_text(r, "it was claimed there"));
    }
    // Whether to look closer goes by the server and the migration alone:
    // the action is read only then.
    let unread = Records { action: None, ..*r };
    if quiet_for(&unread) < r.stalled_after / LOOK_DIVISOR {
        return Stall::Proceeding;
    }
    let quiet = quiet_for(r);
    let Some(action) = r.action else {
        return Stall::ReadAction;
    };
    let compute = newest(&action.events, COMPUTE_EVENT);
    if compute.is_some() || claimed {
        return on_a_compute(r, compute, quiet, fenced);
    }
    before_a_compute(r, newest(&action.events, CONDUCTOR_EVENT), fenced)
}

/// The request reached a nova-compute (its event started, or the claim
/// made the migration `pre-migrating`).
fn on_a_compute(
    r: &Records<'_>,
    compute: Option<&ActionEvent>,
    quiet: Duration,
    fenced: bool,
) -> Stall {
    let m = r.migration;
    let host = destination(r.migration, r.action).unwrap_or_else(|| "?".to_owned());
    if let Some(event) = compute
        && event.finish_time.is_some()
    {
        return Stall::Unproven(format!(
            "migration {} {}: nova-compute on {host} ended {COMPUTE_EVENT} {} yet the migration is not updated",
            m.id,
            m.status,
            event.result.as_deref().unwrap_or("without a result")
        ));
    }
    if fenced {
        return Stall::Repair(fenced_text(r, "it took the rebuild"));
    }
    if quiet < r.stalled_after {
        return Stall::Proceeding;
    }
    let started = compute
        .and_then(|e| e.start_time)
        .map(|t| format!(" at {}", t.format("%H:%M:%S")))
        .unwrap_or_default();
    let shows = format!(
        "migration {} {}: nova-compute on {host} started {COMPUTE_EVENT}{started} and never finished it; \
         nova shows the instance {} on {} (task {}, power state {}), unchanged for {}",
        m.id,
        m.status,
        r.server.vm_state(),
        r.server.host.as_deref().unwrap_or("no host"),
        r.server.task_state.as_deref().unwrap_or("none"),
        r.server
            .power_state
            .map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
        humantime::format_duration(whole_seconds(quiet)),
    );
    if guest_may_exist(r) {
        Stall::AwaitFencing {
            reason: format!("{shows}: a guest may run on {host}"),
            host,
        }
    } else {
        Stall::Repair(format!("{shows}: no guest was spawned"))
    }
}

/// No nova-compute has started the request: the conductor's event tells
/// whether one may still get it.
fn before_a_compute(r: &Records<'_>, conductor: Option<&ActionEvent>, fenced: bool) -> Stall {
    let m = r.migration;
    let Some(event) = conductor else {
        return Stall::Unproven(format!(
            "migration {}: not yet picked up by nova-conductor (no {CONDUCTOR_EVENT} event): \
             it may be queued there, and would run beside a new request",
            describe(m)
        ));
    };
    match (event.finish_time, event.result.as_deref()) {
        (None, _) => Stall::Unproven(format!(
            "migration {}: nova-conductor is still scheduling it ({CONDUCTOR_EVENT} started{}, not finished)",
            describe(m),
            at(event.start_time)
        )),
        (Some(finished), Some("Error")) => Stall::Repair(format!(
            "migration {} accepted, never picked up by a nova-compute: nova-conductor's {CONDUCTOR_EVENT} ended Error{}{}",
            m.id,
            at(Some(finished)),
            why(event)
        )),
        (Some(finished), _) => {
            // Handed to a compute that has not started it. Only a named
            // destination tells which; fenced, it will not run it.
            if fenced && let Some(host) = &m.dest_compute {
                return Stall::Repair(format!(
                    "migration {} accepted: nova-conductor handed it to {host}{}, whose nova-compute is forced down (fenced) and never started it",
                    m.id,
                    at(Some(finished))
                ));
            }
            Stall::Unproven(format!(
                "migration {}: nova-conductor handed it to {}{} ({CONDUCTOR_EVENT} {}), which has not started it: \
                 it may wait in that nova-compute's queue",
                describe(m),
                m.dest_compute.as_deref().map_or_else(
                    || "a nova-compute".to_owned(),
                    |h| format!("nova-compute on {h}")
                ),
                at(Some(finished)),
                event.result.as_deref().unwrap_or("finished")
            ))
        }
    }
}

/// Where the evacuation went: the migration's destination (set when named
/// or claimed), else the host of the compute event.
pub fn destination(migration: &Migration, action: Option<&InstanceAction>) -> Option<String> {
    migration.dest_compute.clone().or_else(|| {
        action
            .and_then(|a| newest(&a.events, COMPUTE_EVENT))
            .and_then(|e| e.host.clone())
    })
}

/// Whether a guest may have been spawned for this evacuation (see case 4
/// of the module's doc); when unsure, yes.
pub fn guest_may_exist(r: &Records<'_>) -> bool {
    let server = r.server;
    if server.host.as_deref() != Some(r.source) {
        return true;
    }
    match server.task_state.as_deref() {
        Some("rebuilding" | "rebuild_block_device_mapping") => false,
        Some(_) => true,
        // No claim, no rebuild: the claim precedes everything.
        None if r.migration.status == "accepted" => false,
        // The destination saved NOSTATE before its rebuild; the spawn's
        // last save writes the guest's state with no task.
        None => server.power_state != Some(NOSTATE),
    }
}

/// Whether `service` is forced down.
pub fn forced_down(service: &ComputeService) -> bool {
    service.forced_down == Some(true)
}

/// How long nothing in the records has changed: by Nova's timestamps (the
/// migration's, the action's and its events'), and no longer than the
/// caller has watched them unchanged. The server's own `updated` is not
/// used: every lock and unlock (the engine's own) moves it.
pub fn quiet_for(r: &Records<'_>) -> Duration {
    let m = r.migration;
    let mut last = [m.created_at, m.updated_at, r.watched_since]
        .into_iter()
        .flatten()
        .max();
    if let Some(action) = r.action {
        let times = action
            .events
            .iter()
            .flat_map(|e| [e.start_time, e.finish_time])
            .chain([action.start_time, action.updated_at])
            .flatten();
        last = last.into_iter().chain(times).max();
    }
    last.map_or(Duration::ZERO, |last| {
        (r.now - last).to_std().unwrap_or_default()
    })
}

/// The evacuation action that created `migration`: of the `evacuate`
/// actions, the one started closest before the migration was created (the
/// API records the action, then creates the migration, in one request).
pub fn action_of<'a>(
    actions: &'a [InstanceAction],
    migration: &Migration,
) -> Option<&'a InstanceAction> {
    let created = migration.created_at?;
    let slack = chrono::TimeDelta::seconds(5);
    actions
        .iter()
        .filter(|a| a.action == "evacuate")
        .filter_map(|a| a.start_time.map(|t| (a, t)))
        .filter(|(_, t)| *t <= created + slack)
        .max_by_key(|(_, t)| *t)
        .map(|(a, _)| a)
}

/// The newest event named `name` (Nova lists newest first; by start time
/// whatever the order).
fn newest<'a>(events: &'a [ActionEvent], name: &str) -> Option<&'a ActionEvent> {
    events
        .iter()
        .filter(|e| e.event == name)
        .max_by_key(|e| e.start_time)
}

fn fenced_text(r: &Records<'_>, what: &str) -> String {
    let host = destination(r.migration, r.action).unwrap_or_else(|| "?".to_owned());
    format!(
        "migration {} {}: nova-compute on {host} is forced down (fenced) and {what}: nothing runs there",
        r.migration.id, r.migration.status
    )
}

fn at(time: Option<DateTime<Utc>>) -> String {
    time.map(|t| format!(" at {}", t.format("%H:%M:%S")))
        .unwrap_or_default()
}

/// What an event says of its failure.
fn why(event: &ActionEvent) -> String {
    event
        .details
        .as_deref()
        .or(event
            .traceback
            .as_deref()
            .and_then(|t| t.lines().rev().find(|l| !l.trim().is_empty())))
        .map(|text| format!(" ({})", text.trim()))
        .unwrap_or_default()
}

fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

#[cfg(test)]
#[path = "stall_tests.rs"]
mod tests;
