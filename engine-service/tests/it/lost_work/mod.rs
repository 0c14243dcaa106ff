//! Evacuations Nova accepts and then loses, and destinations that die
//! (issue 25): a message-bus outage under nova-conductor, a destination
//! nova-compute killed and started again, a destination host losing power
//! mid-rebuild and recovered by its own report (the cascade), each at
//! several lengths (shorter than the stall the engine waits for, longer,
//! for good), run in the engine against `openstack-sim` on paused time
//! with the engine's production timings. And the safety cases: a rebuild
//! that may have spawned a guest on a destination that is merely down, and
//! requests queued before nova-conductor, are never evacuated again.

mod harness;

use std::time::Duration;

use instanceha_engine::recovery::{InstanceResult, RunKind};
use instanceha_proto::run::PriorState;
use openstack_sim::scenario::{HostSpec, InstanceSpec, Settings};
use openstack_sim::{EvacuationPhase, MessageBusOutage, Scenario, Sim};

use harness::*;

/// The message bus stops right after the evacuations are requested: every
/// one is in flight in nova-conductor and is lost (rebuild_server Error 60
/// s later). Each is repaired, once, whatever the outage's length; the
/// repair of a permanent outage waits for the bus and ends not recovered,
/// retryable, never asked a third time.
#[tokio::test(start_paused = true)]
async fn a_message_bus_outage_loses_evacuations_and_each_is_repaired() {
    for length in [30.0, 300.0, FOREVER] {
        let sim = Sim::start(scenario(10, 0), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let engine = engine(&sim).await;
        sim.power_off(FAILED).unwrap();
        sim.message_bus_outage(MessageBusOutage::from_next_evacuation(length))
            .unwrap();
        let ran = run(&engine, start(FAILED, RunKind::Recover, 1, Vec::new())).await;
        let ids = ids_on(&sim, "vm-");
        // Those requested as the bus stopped were in flight in the conductor
        // (lost); any requested a moment later waited for the bus.
        let lost: Vec<String> = sim
            .stats()
            .evacuations
            .iter()
            .filter(|e| e.phase == EvacuationPhase::Lost)
            .map(|e| e.instance_id.clone())
            .collect();
        assert!(!lost.is_empty(), "{length}: the outage struck");
        for id in &ids {
            let steps = ran.steps_of(id);
            if lost.contains(id) {
                assert!(
                    steps.contains("nova-conductor's rebuild_server ended Error")
                        && steps.contains("MessagingTimeout")
                        && steps.contains("resetting its state to active and evacuating it again"),
                    "{length}: {steps}"
                );
                assert_eq!(
                    writes_about(&sim, id),
                    ["evacuate", "os-resetState", "evacuate"],
                    "{length}: repaired once"
                );
            } else {
                assert_eq!(writes_about(&sim, id), ["evacuate"], "{length}: {steps}");
            }
        }
        if length < FOREVER {
            assert!(ran.failed().is_empty(), "{length}: {:?}", ran.failed());
            assert_all_recovered(&sim, &ids, &[]);
        } else {
            // The repair waits for a bus that never comes back: its request
            // never reached nova-conductor, so it is never asked again.
            for (id, message, retryable) in ran.failed() {
                assert!(retryable, "{message}");
                assert!(
                    message.contains("never scheduled")
                        || message.contains("not yet picked up by nova-conductor"),
                    "{id}: {message}"
                );
            }
            assert_eq!(ran.failed().len(), 10, "none can move");
            none_locked(&sim);
        }
        sim.shutdown().await;
    }
}

/// A large recovery queued before nova-conductor (here: its casts wait for
/// the message bus): the migrations stay `accepted` with no conductor event
/// for longer than `stalled_evacuation_after`. Nothing proves they will not
/// run, so none is asked again: each runs once the bus is back, or, for
/// good, the run ends without them, saying why.
#[tokio::test(start_paused = true)]
async fn requests_queued_before_the_conductor_are_never_asked_again() {
    for length in [300.0, 800.0, FOREVER] {
        let sim = Sim::start(scenario(20, 0), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let engine = engine(&sim).await;
        sim.power_off(FAILED).unwrap();
        let now = sim.sim_time();
        sim.message_bus_outage(MessageBusOutage::from_next_evacuation(length).at(now))
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ran = run(&engine, start(FAILED, RunKind::Recover, 1, Vec::new())).await;
        let ids = ids_on(&sim, "vm-");
        for id in &ids {
            assert_eq!(writes_about(&sim, id), ["evacuate"], "{length}: asked once");
        }
        assert_eq!(sim.stats().lost, 0);
        if length < FOREVER {
            assert!(ran.failed().is_empty(), "{length}: {:?}", ran.failed());
            assert_all_recovered(&sim, &ids, &[]);
        } else {
            assert_eq!(ran.failed().len(), 20);
            for (id, message, retryable) in ran.failed() {
                assert!(retryable, "{message}");
                assert!(
                    message.contains("not yet picked up by nova-conductor"),
                    "{id}: {message}"
                );
                assert!(
                    ran.steps_of(id)
                        .contains("not yet picked up by nova-conductor"),
                    "{}",
                    ran.steps_of(id)
                );
            }
            none_locked(&sim);
        }
        sim.shutdown().await;
    }
}

/// The destination's nova-compute is killed while its rebuilds attach
/// volumes (no guest spawned yet) and started again 20 s later, later, or
/// never: the rebuilds freeze and are repaired once stalled, to a live host.
#[tokio::test(start_paused = true)]
async fn rebuilds_frozen_by_a_killed_destination_compute_are_repaired() {
    for restart in [Some(20.0), Some(600.0), None] {
        let sim = Sim::start(scenario(6, 0), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let engine = engine(&sim).await;
        sim.power_off(FAILED).unwrap();
        let recovery = run(&engine, start(FAILED, RunKind::Recover, 1, Vec::new()));
        let kill = async {
            until(&sim, "every rebuild attaching volumes", |w| {
                all_in(w, EvacuationPhase::BlockDeviceMapping, 6)
            })
            .await;
            sim.kill_compute(FIRST, restart).unwrap();
        };
        let (ran, ()) = tokio::join!(recovery, kill);
        let ids = ids_on(&sim, "vm-");
        assert_eq!(sim.stats().lost, 6, "{restart:?}: all frozen");
        assert!(ran.failed().is_empty(), "{restart:?}: {:?}", ran.failed());
        for id in &ids {
            let steps = ran.steps_of(id);
            assert!(
                steps.contains("started compute_rebuild_instance")
                    && steps.contains("no guest was spawned")
                    && steps.contains("evacuating it again"),
                "{restart:?}: {steps}"
            );
        }
        let dead: &[&str] = if restart == Some(20.0) { &[] } else { &[FIRST] };
        assert_all_recovered(&sim, &ids, dead);
        sim.shutdown().await;
    }
}

/// The destination's nova-compute is killed while a rebuild is still
/// claiming (real Nova: `compute_rebuild_instance` started, the migration
/// still `accepted` with no destination) and started again 20 s later:
/// that rebuild is frozen and repaired once stalled, the others run.
#[tokio::test(start_paused = true)]
async fn a_rebuild_frozen_before_its_claim_is_repaired() {
    let sim = Sim::start(scenario(4, 0), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let engine = engine(&sim).await;
    sim.power_off(FAILED).unwrap();
    let recovery = run(&engine, start(FAILED, RunKind::Recover, 1, Vec::new()));
    let kill = async {
        until(&sim, "a rebuild claiming", |w| {
            w.evacuations
                .iter()
                .any(|e| e.source == FAILED && e.phase == EvacuationPhase::Claiming)
        })
        .await;
        sim.kill_compute(FIRST, Some(20.0)).unwrap();
    };
    let (ran, ()) = tokio::join!(recovery, kill);
    let ids = ids_on(&sim, "vm-");
    assert!(sim.stats().lost >= 1, "one frozen at least");
    assert!(ran.failed().is_empty(), "{:?}", ran.failed());
    assert_all_recovered(&sim, &ids, &[]);
    sim.shutdown().await;
}

/// Safety: a rebuild caught spawning on a destination that is merely down
/// (not forced down) may have a guest running there. It is never evacuated
/// again, however long, until that destination's nova-compute is forced
/// down; then it is.
#[tokio::test(start_paused = true)]
async fn a_rebuild_that_may_have_spawned_waits_for_its_destination_to_be_fenced() {
    let sim = Sim::start(scenario(4, 0), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let engine = engine(&sim).await;
    sim.power_off(FAILED).unwrap();
    let recovery = run(&engine, start(FAILED, RunKind::Recover, 1, Vec::new()));
    let lose_power = async {
        until(&sim, "every rebuild spawning", |w| {
            all_in(w, EvacuationPhase::Spawning, 4)
        })
        .await;
        sim.power_off(FIRST).unwrap();
    };
    let (ran, ()) = tokio::join!(recovery, lose_power);
    let ids = ids_on(&sim, "vm-");
    assert_eq!(ran.failed().len(), 4, "none may be asked again");
    for (id, message, retryable) in ran.failed() {
        assert!(retryable, "{message}");
        assert!(
            message.contains("a guest may run on compute-02")
                && message.contains("waiting for compute-02 to be reported failed and fenced"),
            "{id}: {message}"
        );
        assert_eq!(writes_about(&sim, id), ["evacuate"], "not evacuated again");
    }
    none_locked(&sim);

    // The reconcile judges at once, with Nova's timestamps: not recovered,
    // retryable, without following the evacuation again.
    let refs = refs(&sim, &ids);
    let began = tokio::time::Instant::now();
    let reconciled = run(&engine, start(FAILED, RunKind::Reconcile, 2, refs.clone())).await;
    assert!(began.elapsed() < STALLED_AFTER, "judged, not followed");
    for id in &ids {
        match &reconciled.results[id] {
            InstanceResult::Failed { message, retryable } => {
                assert!(*retryable);
                assert!(message.contains("fenced"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    // Fenced: its nova-compute forced down. The retry repairs them.
    force_down(&engine, FIRST).await;
    let retried = run(&engine, start(FAILED, RunKind::Recover, 3, refs)).await;
    assert!(retried.failed().is_empty(), "{:?}", retried.failed());
    for id in &ids {
        assert!(
            retried.steps_of(id).contains("forced down (fenced)"),
            "{}",
            retried.steps_of(id)
        );
        assert_eq!(
            writes_about(&sim, id),
            ["evacuate", "os-resetState", "evacuate"]
        );
    }
    assert_all_recovered(&sim, &ids, &[FIRST]);
    sim.shutdown().await;
}

/// The cascade: the destination loses power while it spawns the failed
/// host's instances, and is reported failed itself (at once, or 10 minutes
/// later). Its own recovery forces it down and moves its own instances;
/// then the evacuations sent to it are repaired, none waiting out
/// `evacuation_timeout`.
#[tokio::test(start_paused = true)]
async fn a_destination_failing_mid_recovery_is_recovered_and_its_evacuations_repaired() {
    for reported_after in [Duration::ZERO, Duration::from_secs(600)] {
        let sim = Sim::start(scenario(6, 2), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let engine = engine(&sim).await;
        sim.power_off(FAILED).unwrap();
        let began = tokio::time::Instant::now();
        let first = run(&engine, start(FAILED, RunKind::Recover, 1, Vec::new()));
        let cascade = async {
            until(&sim, "every rebuild spawning", |w| {
                all_in(w, EvacuationPhase::Spawning, 6)
            })
            .await;
            sim.power_off(FIRST).unwrap();
            tokio::time::sleep(reported_after).await;
            run(&engine, start(FIRST, RunKind::Recover, 1, Vec::new())).await
        };
        let (ran, own) = tokio::join!(first, cascade);
        let label = format!("reported after {reported_after:?}");
        assert!(ran.failed().is_empty(), "{label}: {:?}", ran.failed());
        assert!(own.failed().is_empty(), "{label}: {:?}", own.failed());
        assert!(
            began.elapsed() < reported_after + EVACUATION_TIMEOUT,
            "{label}: none waited out the evacuation timeout"
        );
        let ids = ids_on(&sim, "vm-");
        for id in &ids {
            let steps = ran.steps_of(id);
            assert!(
                steps.contains("forced down (fenced)") && steps.contains("evacuating it again"),
                "{label}: {steps}"
            );
        }
        let mut all = ids.clone();
        all.extend(ids_on(&sim, "resident-"));
        assert_all_recovered(&sim, &all, &[FIRST]);
        sim.shutdown().await;
    }
}

/// The state an instance had before the failure is recorded with the plan
/// and restored at the end: after a repair (which reset it to error), and
/// on a retry that finds it in an error an earlier attempt caused.
#[tokio::test(start_paused = true)]
async fn the_state_before_the_failure_is_restored_after_a_repair_and_on_a_retry() {
    let settings = Settings {
        speed: 1.0,
        seed: 25,
        ..Settings::default()
    };
    let scenario = Scenario::builder()
        .settings(settings)
        .host(HostSpec::new(FAILED))
        .host(HostSpec::new(FIRST))
        .host(HostSpec::new(SPARE).capacity(64, 131_072))
        .instance(InstanceSpec::new("running", FAILED).ha(true))
        .instance(
            InstanceSpec::new("stopped", FAILED)
                .ha(true)
                .vm_state("stopped"),
        )
        .build()
        .unwrap();
    let sim = Sim::start(scenario, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let engine = engine(&sim).await;
    sim.power_off(FAILED).unwrap();
    sim.message_bus_outage(MessageBusOutage::from_next_evacuation(30.0))
        .unwrap();
    let ran = run(&engine, start(FAILED, RunKind::Recover, 1, Vec::new())).await;
    let id = |name: &str| sim.snapshot().instance_by_name(name).unwrap().id.clone();
    let (running, stopped) = (id("running"), id("stopped"));
    assert_eq!(ran.planned[&running], Some(PriorState::Active));
    assert_eq!(ran.planned[&stopped], Some(PriorState::Stopped));
    assert!(ran.failed().is_empty(), "{:?}", ran.failed());
    let state =
        |id: &str| serde_json::to_value(sim.snapshot().instance(id).unwrap().vm_state).unwrap();
    assert_eq!(state(&running), "active");
    assert_eq!(state(&stopped), "stopped", "{}", ran.steps_of(&stopped));
    if ran.steps_of(&stopped).contains("evacuating it again") {
        assert!(
            ran.steps_of(&stopped)
                .contains("resetting its state to error")
        );
    }

    // Its new host fails too, and a retry meets it in an error an earlier
    // attempt left: the recorded state decides, not the error.
    assert_eq!(
        sim.snapshot().instance(&stopped).unwrap().host.as_deref(),
        Some(FIRST)
    );
    engine
        .openstack()
        .reset_state(&stopped, "error")
        .await
        .unwrap();
    let mut refs = refs(&sim, std::slice::from_ref(&stopped));
    refs[0].source_host = FIRST.to_owned();
    refs[0].prior_state = Some(PriorState::Stopped);
    sim.power_off(FIRST).unwrap();
    let retried = run(&engine, start(FIRST, RunKind::Recover, 2, refs)).await;
    assert!(retried.failed().is_empty(), "{:?}", retried.failed());
    assert_eq!(retried.planned[&stopped], Some(PriorState::Stopped));
    assert_eq!(state(&stopped), "stopped");
    sim.shutdown().await;
}
