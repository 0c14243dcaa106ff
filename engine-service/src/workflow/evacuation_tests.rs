//! Unit tests of the evacuation verdicts: what Nova's server and
//! migration records say of an evacuation, including the shapes real Nova
//! left under faults.

use super::*;
use openstack_client::nova::Fault;

#[test]
fn the_truth_of_an_instance_as_nova_tells_it() {
    let done = migration("done");
    let running = migration("running");
    assert_eq!(
        truth(
            "compute-01",
            &server("active", None, "compute-02"),
            Some(&done)
        ),
        Truth::Recovered {
            host: "compute-02".into(),
            vm_state: "active".into()
        }
    );
    assert!(matches!(
        truth(
            "compute-01",
            &server("active", None, "compute-01"),
            Some(&running)
        ),
        Truth::InProgress(_)
    ));
    assert!(matches!(
        truth(
            "compute-01",
            &server("active", Some("rebuild_spawning"), "compute-02"),
            None
        ),
        Truth::InProgress(_)
    ));
    let Truth::NotRecovered(text) =
        truth("compute-01", &server("active", None, "compute-01"), None)
    else {
        panic!("an instance on the failed host is not recovered");
    };
    assert!(
        text.contains("still on the failed host compute-01"),
        "{text}"
    );
    let Truth::NotRecovered(text) = truth(
        "compute-01",
        &server("error", None, "compute-02"),
        Some(&migration("error")),
    ) else {
        panic!("an instance in error is not recovered");
    };
    assert!(text.contains("error on compute-02"), "{text}");
}

fn server(vm: &str, task: Option<&str>, host: &str) -> Server {
    Server {
        id: "i1".into(),
        vm_state: Some(vm.into()),
        task_state: task.map(str::to_owned),
        host: Some(host.into()),
        power_state: Some(1),
        ..Server::default()
    }
}

fn migration(status: &str) -> Migration {
    Migration {
        id: 7,
        instance_uuid: "i1".into(),
        status: status.into(),
        ..Migration::default()
    }
}

#[test]
fn an_evacuation_in_flight_says_what_nova_has_not_done_yet() {
    let accepted = migration("accepted");
    let Truth::InProgress(text) = truth(
        "compute-01",
        &server("active", Some("rebuilding"), "compute-01"),
        Some(&accepted),
    ) else {
        panic!("a rebuilding instance is in progress");
    };
    assert!(text.contains("7 accepted and never scheduled"), "{text}");
    let named = Migration {
        dest_compute: Some("compute-02".into()),
        ..migration("accepted")
    };
    assert!(
        describe(&named).contains("not yet claimed by its nova-compute"),
        "{}",
        describe(&named)
    );
    let claimed = Migration {
        dest_compute: Some("compute-02".into()),
        ..migration("pre-migrating")
    };
    assert!(
        describe(&claimed)
            .contains("pre-migrating on compute-02: the rebuild there has not finished")
    );
}

#[test]
fn only_a_settled_instance_on_the_failed_host_is_asked_again() {
    let left =
        |vm_state, task, host| left_after_failure("compute-01", &server(vm_state, task, host));
    assert_eq!(
        left("error", None, "compute-01"),
        LeftAfterFailure::OnSource
    );
    // A claim refused on the destination keeps the vm state.
    assert_eq!(
        left("active", None, "compute-01"),
        LeftAfterFailure::OnSource
    );
    // Nova still recording the failure: read again.
    assert_eq!(
        left("active", Some("rebuilding"), "compute-01"),
        LeftAfterFailure::Settling("rebuilding".into())
    );
    // Moved: never again.
    assert_eq!(
        left("error", None, "compute-02"),
        LeftAfterFailure::Elsewhere("compute-02".into())
    );
}

#[test]
fn an_evacuation_is_in_flight_until_nova_ends_it() {
    for status in ["accepted", "pre-migrating", "migrating", "running"] {
        assert!(in_flight(&migration(status)), "{status}");
    }
    for status in ["done", "completed", "error", "failed", "cancelled"] {
        assert!(!in_flight(&migration(status)), "{status}");
    }
}

#[test]
fn preparation_follows_the_state() {
    assert_eq!(
        prepare(&server("active", None, "c1"), false),
        Preparation {
            reset_to_error: false,
            desired: DesiredState::Active
        }
    );
    assert_eq!(
        prepare(&server("stopped", None, "c1"), false).desired,
        DesiredState::Stopped
    );
    assert!(prepare(&server("active", Some("powering-off"), "c1"), false).reset_to_error);
    let mut paused = server("paused", None, "c1");
    paused.power_state = Some(3);
    assert_eq!(
        prepare(&paused, false),
        Preparation {
            reset_to_error: true,
            desired: DesiredState::Stopped
        }
    );
    assert_eq!(
        prepare(&server("resized", None, "c1"), false).desired,
        DesiredState::Active
    );
}

#[test]
fn an_error_made_by_an_earlier_failed_evacuation_is_not_restored() {
    let errored = server("error", None, "c1");
    // In error before the host failed: put back in error.
    assert_eq!(prepare(&errored, false).desired, DesiredState::Error);
    // In error because this recovery's first evacuation failed: what
    // the failed host last reported decides.
    assert_eq!(prepare(&errored, true).desired, DesiredState::Active);
    let mut shut_down = errored.clone();
    shut_down.power_state = Some(4);
    assert_eq!(prepare(&shut_down, true).desired, DesiredState::Stopped);
    assert!(!prepare(&errored, true).reset_to_error);
}

#[test]
fn a_recorded_prior_state_wins_over_what_nova_shows_now() {
    // In error after this recovery's own failed attempt, stopped before.
    let errored = server("error", None, "c1");
    assert_eq!(
        prepare_known(&errored, PriorState::Stopped),
        Preparation {
            reset_to_error: false,
            desired: DesiredState::Stopped
        }
    );
    // Reset to error by a repair: active before.
    assert_eq!(
        prepare_known(&errored, PriorState::Active).desired,
        DesiredState::Active
    );
    let busy = server("active", Some("rebuilding"), "c1");
    assert!(prepare_known(&busy, PriorState::Active).reset_to_error);
    for prior in PriorState::ALL {
        assert_eq!(PriorState::from(DesiredState::from(prior)), prior);
    }
}

#[test]
fn restoration_reaches_the_desired_state() {
    assert_eq!(
        restoration(DesiredState::Active, "stopped"),
        Restoration::Start
    );
    assert_eq!(
        restoration(DesiredState::Stopped, "active"),
        Restoration::Stop
    );
    assert_eq!(
        restoration(DesiredState::Stopped, "stopped"),
        Restoration::Nothing
    );
    assert_eq!(
        restoration(DesiredState::Error, "active"),
        Restoration::ResetToError
    );
    assert_eq!(
        restoration(DesiredState::Active, "active"),
        Restoration::Nothing
    );
}

#[test]
fn success_needs_the_migration_done_the_host_changed_and_no_task() {
    // The window the contract warns about: active, no task, old host.
    let window = server("active", None, "c1");
    assert!(matches!(
        judge("c1", &window, Some(&migration("pre-migrating")), false),
        Verdict::InProgress(_)
    ));
    let done = server("active", None, "c2");
    assert_eq!(
        judge("c1", &done, Some(&migration("done")), false),
        Verdict::Succeeded {
            dest_host: "c2".into()
        }
    );
    let rebuilding = server("active", Some("rebuild_spawning"), "c1");
    assert!(matches!(
        judge("c1", &rebuilding, Some(&migration("pre-migrating")), false),
        Verdict::InProgress(_)
    ));
}

#[test]
fn failures_are_seen_at_once() {
    // A failed claim leaves the instance as it was: only the migration tells.
    let claim_failed = server("active", None, "c1");
    assert!(matches!(
        judge("c1", &claim_failed, Some(&migration("failed")), false),
        Verdict::Failed(_)
    ));
    // A scheduling failure: error with a fault.
    let mut no_host = server("error", None, "c1");
    no_host.fault = Some(Fault {
        code: Some(500),
        message: "No valid host was found.".into(),
    });
    match judge("c1", &no_host, Some(&migration("error")), false) {
        Verdict::Failed(reason) => assert!(reason.contains("No valid host"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // An instance in error before is not failed by being in error.
    assert!(matches!(
        judge("c1", &server("error", None, "c1"), None, true),
        Verdict::InProgress(_)
    ));
}

#[test]
fn rebuild_states_are_recognised() {
    assert!(rebuilding(&server("active", Some("rebuilding"), "c1")));
    assert!(!rebuilding(&server("active", Some("powering-off"), "c1")));
}

/// Measured on real Nova: a lost evacuation (migration 32 `accepted`, its
/// nova-compute killed) repaired by a new request (migration 35); the
/// conductor took the first accepted record, 32, which ended `done`, and 35
/// stays `accepted` for good. The instance is settled on its destination:
/// recovered, not in progress.
#[test]
fn an_accepted_migration_left_behind_by_a_settled_rebuild_is_a_success() {
    let left_behind = migration("accepted");
    let settled = server("active", None, "compute-03");
    assert_eq!(
        judge("compute-01", &settled, Some(&left_behind), false),
        Verdict::Succeeded {
            dest_host: "compute-03".into()
        }
    );
    assert_eq!(
        truth("compute-01", &settled, Some(&left_behind)),
        Truth::Recovered {
            host: "compute-03".into(),
            vm_state: "active".into()
        }
    );
    // Still on the failed host, or with a task: in progress.
    for server in [
        server("active", Some("rebuilding"), "compute-01"),
        server("active", None, "compute-01"),
        server("active", Some("rebuild_spawning"), "compute-03"),
    ] {
        assert!(matches!(
            judge("compute-01", &server, Some(&left_behind), false),
            Verdict::InProgress(_)
        ));
    }
}
