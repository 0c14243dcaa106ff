//! Unit tests of the stall judgement: every record shape real Nova 34 left
//! (message bus stopped under nova-conductor, destination nova-compute
//! killed and started again, destination powered off) and the healthy
//! ones, which must stay `Proceeding`.

use super::*;
use chrono::TimeDelta;
use openstack_client::nova::ServiceId;

const STALLED_AFTER: Duration = Duration::from_secs(180);

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-08-21T10:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn secs(n: i64) -> DateTime<Utc> {
    t0() + TimeDelta::seconds(n)
}

fn server(task: Option<&str>, host: &str, power: i64) -> Server {
    Server {
        id: "i1".into(),
        vm_state: Some("active".into()),
        task_state: task.map(str::to_owned),
        host: Some(host.into()),
        power_state: Some(power),
        updated: Some(t0()),
        ..Server::default()
    }
}

fn migration(status: &str, dest: Option<&str>, updated: Option<i64>) -> Migration {
    Migration {
        id: 42,
        instance_uuid: "i1".into(),
        migration_type: Some("evacuation".into()),
        status: status.into(),
        source_compute: Some("compute-01".into()),
        dest_compute: dest.map(str::to_owned),
        created_at: Some(t0()),
        updated_at: updated.map(secs),
    }
}

fn event(name: &str, start: i64, finish: Option<(i64, &str)>, host: &str) -> ActionEvent {
    ActionEvent {
        event: name.into(),
        start_time: Some(secs(start)),
        finish_time: finish.map(|(at, _)| secs(at)),
        result: finish.map(|(_, result)| result.to_owned()),
        host: Some(host.into()),
        traceback: finish
            .filter(|(_, r)| *r == "Error")
            .map(|_| "Traceback (most recent call last):\n  MessagingTimeout: Timed out waiting for a reply".into()),
        ..ActionEvent::default()
    }
}

fn action(events: Vec<ActionEvent>) -> InstanceAction {
    InstanceAction {
        action: "evacuate".into(),
        request_id: "req-1".into(),
        start_time: Some(t0()),
        events,
        ..InstanceAction::default()
    }
}

fn service(host: &str, state: &str, forced: bool) -> ComputeService {
    ComputeService {
        id: ServiceId::Uuid(format!("svc-{host}")),
        binary: "nova-compute".into(),
        host: host.into(),
        status: "enabled".into(),
        state: state.into(),
        forced_down: Some(forced),
        disabled_reason: None,
        updated_at: Some(t0()),
    }
}

/// Judges at `at` seconds after the request.
fn judge(
    server: &Server,
    migration: &Migration,
    action: Option<&InstanceAction>,
    destination: Option<&ComputeService>,
    at: i64,
) -> Stall {
    assess(&Records {
        source: "compute-01",
        server,
        migration,
        action,
        destination,
        now: secs(at),
        watched_since: None,
        stalled_after: STALLED_AFTER,
    })
}

fn is_repair(stall: &Stall, says: &str) -> bool {
    matches!(stall, Stall::Repair(text) if text.contains(says))
}

#[test]
fn a_healthy_evacuation_is_proceeding() {
    let s = server(Some("rebuilding"), "compute-01", 1);
    let accepted = migration("accepted", None, None);
    assert_eq!(judge(&s, &accepted, None, None, 2), Stall::Proceeding);
    let mut bdm = server(Some("rebuild_block_device_mapping"), "compute-01", 0);
    bdm.updated = Some(secs(3));
    let claimed = migration("pre-migrating", Some("compute-02"), Some(3));
    let up = service("compute-02", "up", false);
    assert_eq!(judge(&bdm, &claimed, None, Some(&up), 8), Stall::Proceeding);
    // A spawn taking its time (an image download) is no stall either.
    let mut spawning = server(Some("rebuild_spawning"), "compute-01", 0);
    spawning.updated = Some(secs(5));
    let on = action(vec![
        event(CONDUCTOR_EVENT, 0, Some((1, "Success")), "controller"),
        event(COMPUTE_EVENT, 1, None, "compute-02"),
    ]);
    assert_eq!(
        judge(&spawning, &claimed, Some(&on), Some(&up), 120),
        Stall::Proceeding
    );
    // Ended: the verdict's business, not this one's.
    let done = migration("done", Some("compute-02"), Some(8));
    assert_eq!(
        judge(&server(None, "compute-02", 1), &done, None, None, 900),
        Stall::Proceeding
    );
}

#[test]
fn a_quiet_evacuation_asks_for_its_action_before_any_judgement() {
    let s = server(Some("rebuilding"), "compute-01", 1);
    let accepted = migration("accepted", None, None);
    assert_eq!(judge(&s, &accepted, None, None, 44), Stall::Proceeding);
    assert_eq!(judge(&s, &accepted, None, None, 45), Stall::ReadAction);
    assert_eq!(judge(&s, &accepted, None, None, 3600), Stall::ReadAction);
}

/// Message bus stopped while nova-conductor scheduled it: measured on Nova
/// 34, `rebuild_server` ends Error (MessagingTimeout) 60-100 s later, the
/// migration stays `accepted` with no destination, the server
/// `rebuilding` on the failed host, forever.
#[test]
fn a_request_the_conductor_dropped_is_repaired_at_once() {
    let s = server(Some("rebuilding"), "compute-01", 1);
    let accepted = migration("accepted", None, None);
    let dropped = action(vec![event(
        CONDUCTOR_EVENT,
        0,
        Some((80, "Error")),
        "controller",
    )]);
    // As soon as it is read: no stall to wait for.
    let stall = judge(&s, &accepted, Some(&dropped), None, 81);
    assert!(
        is_repair(&stall, "nova-conductor's rebuild_server ended Error"),
        "{stall:?}"
    );
    assert!(is_repair(&stall, "MessagingTimeout"), "{stall:?}");
}

/// A 1,000-instance recovery queues requests at nova-conductor for
/// minutes: no event yet, and repairing would let the queued one run
/// beside the new one.
#[test]
fn a_request_not_yet_picked_up_by_the_conductor_is_never_repaired() {
    let s = server(Some("rebuilding"), "compute-01", 1);
    let accepted = migration("accepted", None, None);
    let queued = action(Vec::new());
    for at in [60, 600, 86_400] {
        let stall = judge(&s, &accepted, Some(&queued), None, at);
        assert!(
            matches!(&stall, Stall::Unproven(text)
                if text.contains("not yet picked up by nova-conductor")
                    && text.contains("42 accepted and never scheduled")),
            "{stall:?}"
        );
    }
    // Even towards a named destination that is fenced: the conductor may
    // still take it up (and put the instance in error on NoValidHost).
    let named = migration("accepted", Some("compute-02"), None);
    let fenced = service("compute-02", "down", true);
    assert!(matches!(
        judge(&s, &named, Some(&queued), Some(&fenced), 600),
        Stall::Unproven(_)
    ));
    // Scheduling still under way.
    let scheduling = action(vec![event(CONDUCTOR_EVENT, 0, None, "controller")]);
    assert!(matches!(
        judge(&s, &accepted, Some(&scheduling), None, 600),
        Stall::Unproven(text) if text.contains("still scheduling")
    ));
}

/// The conductor cast it to a compute that has not started it: it may
/// wait in that compute's queue (a dead one runs it when it starts again).
#[test]
fn a_request_cast_to_a_compute_that_never_started_it_waits_for_fencing_of_a_named_one() {
    let s = server(Some("rebuilding"), "compute-01", 1);
    let handed = action(vec![event(
        CONDUCTOR_EVENT,
        0,
        Some((1, "Success")),
        "controller",
    )]);
    let scheduled = migration("accepted", None, None);
    assert!(matches!(
        judge(&s, &scheduled, Some(&handed), None, 3600),
        Stall::Unproven(text) if text.contains("may wait in that nova-compute's queue")
    ));
    let named = migration("accepted", Some("compute-02"), None);
    let down = service("compute-02", "down", false);
    assert!(matches!(
        judge(&s, &named, Some(&handed), Some(&down), 3600),
        Stall::Unproven(_)
    ));
    let fenced = service("compute-02", "down", true);
    assert!(is_repair(
        &judge(&s, &named, Some(&handed), Some(&fenced), 60),
        "forced down"
    ));
}

/// Destination nova-compute killed under the rebuild and started again
/// (measured): `compute_rebuild_instance` started, no finish; migration
/// `accepted` (killed before its claim) or `pre-migrating`; task
/// `rebuilding` or `rebuild_block_device_mapping`; never resumed.
#[test]
fn a_rebuild_whose_compute_died_before_the_spawn_is_repaired_once_stalled() {
    let up = service("compute-02", "up", false);
    let started = action(vec![
        event(CONDUCTOR_EVENT, 0, Some((1, "Success")), "controller"),
        event(COMPUTE_EVENT, 1, None, "compute-02"),
    ]);
    let shapes = [
        (
            server(Some("rebuilding"), "compute-01", 1),
            migration("accepted", None, None),
        ),
        (
            server(Some("rebuilding"), "compute-01", 0),
            migration("pre-migrating", Some("compute-02"), Some(2)),
        ),
        (
            server(Some("rebuild_block_device_mapping"), "compute-01", 0),
            migration("pre-migrating", Some("compute-02"), Some(2)),
        ),
        // No task, power state NOSTATE: the spawn's last save never ran.
        (
            server(None, "compute-01", 0),
            migration("pre-migrating", Some("compute-02"), Some(2)),
        ),
    ];
    for (s, m) in &shapes {
        let early = judge(s, m, Some(&started), Some(&up), 100);
        assert_eq!(early, Stall::Proceeding, "{s:?} {m:?}");
        let stall = judge(s, m, Some(&started), Some(&up), 200);
        assert!(is_repair(&stall, "no guest was spawned"), "{stall:?}");
        assert!(
            is_repair(&stall, "started compute_rebuild_instance"),
            "{stall:?}"
        );
    }
}

/// A guest may run on the destination: spawning, or past the spawn (no
/// task, the guest's power state saved) before `finish_evacuation`, or the
/// host already moved. A killed nova-compute leaves its guests running.
#[test]
fn a_rebuild_that_may_have_spawned_waits_for_the_destination_to_be_fenced() {
    let started = action(vec![
        event(CONDUCTOR_EVENT, 0, Some((1, "Success")), "controller"),
        event(COMPUTE_EVENT, 1, None, "compute-02"),
    ]);
    let claimed = migration("pre-migrating", Some("compute-02"), Some(2));
    let shapes = [
        server(Some("rebuild_spawning"), "compute-01", 0),
        server(Some("powering-off"), "compute-01", 1),
        server(None, "compute-01", 1),
        server(None, "compute-02", 1),
    ];
    for s in &shapes {
        for state in ["up", "down"] {
            let merely_down = service("compute-02", state, false);
            match judge(s, &claimed, Some(&started), Some(&merely_down), 3600) {
                Stall::AwaitFencing { host, reason } => {
                    assert_eq!(host, "compute-02");
                    assert!(reason.contains("a guest may run on compute-02"), "{reason}");
                }
                other => panic!("{s:?} on a {state} destination: {other:?}"),
            }
        }
        let fenced = service("compute-02", "down", true);
        let stall = judge(s, &claimed, Some(&started), Some(&fenced), 3);
        assert!(is_repair(&stall, "forced down (fenced)"), "{stall:?}");
    }
}

/// The cascade: the destination lost power under the rebuild, and its own
/// recovery forced it down: repaired at once, without its action read.
#[test]
fn a_fenced_destination_repairs_at_once() {
    let spawning = server(Some("rebuild_spawning"), "compute-01", 0);
    let claimed = migration("pre-migrating", Some("compute-02"), Some(2));
    let fenced = service("compute-02", "down", true);
    assert!(is_repair(
        &judge(&spawning, &claimed, None, Some(&fenced), 3),
        "forced down"
    ));
    // Before its claim, the action tells it was on that compute.
    let accepted = migration("accepted", None, None);
    let rebuilding = server(Some("rebuilding"), "compute-01", 1);
    assert_eq!(
        judge(&rebuilding, &accepted, None, Some(&fenced), 50),
        Stall::ReadAction
    );
    let started = action(vec![event(COMPUTE_EVENT, 1, None, "compute-02")]);
    assert!(is_repair(
        &judge(&rebuilding, &accepted, Some(&started), Some(&fenced), 50),
        "forced down"
    ));
}

#[test]
fn a_finished_compute_event_is_left_to_the_verdict() {
    let claimed = migration("pre-migrating", Some("compute-02"), Some(2));
    let ended = action(vec![event(
        COMPUTE_EVENT,
        1,
        Some((5, "Error")),
        "compute-02",
    )]);
    assert!(matches!(
        judge(
            &server(None, "compute-01", 0),
            &claimed,
            Some(&ended),
            None,
            3600
        ),
        Stall::Unproven(_)
    ));
}

#[test]
fn any_record_that_moves_resets_the_quiet_time() {
    let claimed = migration("pre-migrating", Some("compute-02"), Some(2));
    let s = server(Some("rebuild_block_device_mapping"), "compute-01", 0);
    let started = action(vec![event(COMPUTE_EVENT, 1, None, "compute-02")]);
    // A task state seen changing at 150 s (its only timestamp, the
    // server's updated, is not used: locks move it too).
    let watched = |since: i64| Records {
        source: "compute-01",
        server: &s,
        migration: &claimed,
        action: Some(&started),
        destination: None,
        now: secs(200),
        watched_since: Some(secs(since)),
        stalled_after: STALLED_AFTER,
    };
    assert_eq!(assess(&watched(150)), Stall::Proceeding);
    assert!(matches!(assess(&watched(10)), Stall::Repair(_)));
    let mut locked = s.clone();
    locked.updated = Some(secs(199));
    assert!(matches!(
        judge(&locked, &claimed, Some(&started), None, 200),
        Stall::Repair(_)
    ));
    let late_event = action(vec![event(COMPUTE_EVENT, 190, None, "compute-02")]);
    assert_eq!(
        judge(
            &server(Some("rebuilding"), "compute-01", 0),
            &claimed,
            Some(&late_event),
            None,
            300
        ),
        Stall::Proceeding
    );
}

#[test]
fn the_action_of_a_migration_is_the_evacuation_started_just_before_it() {
    let at = |n: i64, action: &str, id: &str| InstanceAction {
        action: action.into(),
        request_id: id.into(),
        start_time: Some(secs(n)),
        ..InstanceAction::default()
    };
    let actions = vec![
        at(300, "lock", "req-lock"),
        at(200, "evacuate", "req-second"),
        at(-10, "evacuate", "req-first"),
        at(-20, "lock", "req-old-lock"),
    ];
    let first = migration("accepted", None, None);
    assert_eq!(
        action_of(&actions, &first).map(|a| a.request_id.as_str()),
        Some("req-first")
    );
    let second = Migration {
        created_at: Some(secs(200)),
        ..migration("accepted", None, None)
    };
    assert_eq!(
        action_of(&actions, &second).map(|a| a.request_id.as_str()),
        Some("req-second")
    );
    assert!(action_of(&actions[..1], &first).is_none());
}

#[test]
fn the_destination_comes_from_the_migration_else_the_compute_event() {
    let started = action(vec![event(COMPUTE_EVENT, 1, None, "compute-03")]);
    assert_eq!(
        destination(&migration("accepted", None, None), Some(&started)).as_deref(),
        Some("compute-03")
    );
    assert_eq!(
        destination(
            &migration("pre-migrating", Some("compute-02"), Some(1)),
            Some(&started)
        )
        .as_deref(),
        Some("compute-02")
    );
    assert_eq!(destination(&migration("accepted", None, None), None), None);
}
