//! Evacuations Nova accepts and then loses, and destinations that die
//! (issue 25): a message-bus outage under nova-conductor, a destination
//! nova-compute killed and started again, a destination host losing power
//! mid-rebuild and recovered by its own report (the cascade), each at
//! several lengths (shorter than the stall the engine waits for, longer,
//! for good), run in the engine against `openstack-sim` on paused time
//! with the engine's production timings. And the safety cases: a rebuild
//! that may have spawned a guest on a destination that is merely down, and
//! requests queued before nova-conductor, are never evacuated again.

use std::collections::BTreeMap;
use std::time::Duration;

use instanceha_engine::config::Settings as EngineSettings;
use instanceha_engine::recovery::{
    Engine, InstanceRef, InstanceResult, NotificationType, Reporter, RunEvent, RunKind, RunOutcome,
    StartRun,
};
use instanceha_engine::workflow::targets::RecoveryMethod;
use instanceha_proto::run::PriorState;
use instanceha_runtime::clock::Clock;
use openstack_client::OpenStack;
use openstack_client::nova::ServiceUpdate;
use openstack_sim::scenario::{HostSpec, InstanceSpec, Settings};
use openstack_sim::{EvacuationPhase, MessageBusOutage, Scenario, Sim};
use tokio_util::sync::CancellationToken;

const FAILED: &str = "compute-01";
/// Where the scheduler sends the evacuations first (the most free memory).
const FIRST: &str = "compute-02";
const SPARE: &str = "compute-03";
/// The engine's defaults.
const STALLED_AFTER: Duration = Duration::from_secs(180);
const EVACUATION_TIMEOUT: Duration = Duration::from_secs(900);
/// For good: longer than any test.
const FOREVER: f64 = 1.0e9;

/// `n` HA instances on the failed host, `residents` on the first
/// destination; the first destination with room for all, the spare too.
fn scenario(n: usize, residents: usize) -> Scenario {
    let settings = Settings {
        speed: 1.0,
        seed: 25,
        request_log_capacity: 500_000,
        ..Settings::default()
    };
    let mut builder = Scenario::builder()
        .settings(settings)
        .host(HostSpec::new(FAILED))
        .host(HostSpec::new(FIRST))
        .host(HostSpec::new(SPARE).capacity(64, 131_072));
    for i in 1..=n {
        builder = builder.instance(InstanceSpec::new(&format!("vm-{i:02}"), FAILED).ha(true));
    }
    for i in 1..=residents {
        builder = builder.instance(InstanceSpec::new(&format!("resident-{i}"), FIRST).ha(true));
    }
    builder.build().expect("a valid scenario")
}

async fn engine(sim: &Sim) -> Engine {
    let mut settings: EngineSettings = instanceha_testkit::settings::engine_for(sim);
    settings.openstack.token_warmup_interval = Duration::ZERO;
    settings.validate().expect("valid settings");
    let (credentials, service, client) = settings
        .openstack_client(&Default::default())
        .expect("credentials");
    let openstack = OpenStack::new(credentials, service, client).expect("client");
    let engine = Engine::new(
        openstack,
        settings.recovery_settings(),
        settings.recovery.max_concurrent_instances_total,
    )
    .with_clock(Clock::tokio());
    engine.openstack().check().await.expect("a first login");
    engine
}

fn start(host: &str, kind: RunKind, attempt: u32, instances: Vec<InstanceRef>) -> StartRun {
    StartRun {
        run_id: format!("{host}-{attempt}").into(),
        attempt,
        run_kind: kind,
        notification_id: format!("lost-work-{host}"),
        notification_type: NotificationType::ComputeHost,
        hostname: host.to_owned(),
        payload: [
            ("event", "STOPPED"),
            ("host_status", "NORMAL"),
            ("cluster_status", "OFFLINE"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        generated_time: Some(chrono::Utc::now()),
        segment_id: "segment-id".to_owned(),
        segment_name: "segment".to_owned(),
        recovery_method: RecoveryMethod::Auto,
        service_type: "COMPUTE".to_owned(),
        reserved_hosts: Vec::new(),
        instances,
    }
}

/// What a run reported: each instance's result and steps, the outcome.
#[derive(Debug, Default)]
struct Ran {
    planned: BTreeMap<String, Option<PriorState>>,
    results: BTreeMap<String, InstanceResult>,
    steps: BTreeMap<String, Vec<(String, String)>>,
    outcome: Option<RunOutcome>,
}

impl Ran {
    fn steps_of(&self, id: &str) -> String {
        self.steps
            .get(id)
            .map(|s| {
                s.iter()
                    .map(|(step, message)| format!("{step}: {message}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    fn failed(&self) -> Vec<(&String, &String, bool)> {
        self.results
            .iter()
            .filter_map(|(id, r)| match r {
                InstanceResult::Failed { message, retryable } => Some((id, message, *retryable)),
                _ => None,
            })
            .collect()
    }
}

async fn run(engine: &Engine, request: StartRun) -> Ran {
    let (reporter, mut events) = Reporter::new();
    engine
        .run(request, reporter, CancellationToken::new())
        .await;
    let mut ran = Ran::default();
    while let Ok(event) = events.try_recv() {
        match event {
            RunEvent::InstanceFinished {
                instance_id,
                result: outcome,
                ..
            }
            | RunEvent::InstanceReconciled {
                instance_id,
                result: outcome,
                ..
            } => {
                ran.results.insert(instance_id.into_string(), outcome);
            }
            RunEvent::InstanceStep {
                instance_id,
                step,
                message,
                ..
            } => ran
                .steps
                .entry(instance_id.into_string())
                .or_default()
                .push((step.to_owned(), message)),
            RunEvent::Plan(planned) => {
                for p in planned {
                    ran.planned
                        .insert(p.instance_id.into_string(), p.prior_state);
                }
            }
            RunEvent::Done(outcome) => ran.outcome = Some(outcome),
            _ => {}
        }
    }
    ran
}

fn ids_on(sim: &Sim, prefix: &str) -> Vec<String> {
    sim.snapshot()
        .instances
        .iter()
        .filter(|i| i.name.starts_with(prefix))
        .map(|i| i.id.clone())
        .collect()
}

/// Waits (simulated time passing) until `ok` holds of the world.
async fn until(sim: &Sim, what: &str, ok: impl Fn(&openstack_sim::WorldSnapshot) -> bool) {
    for _ in 0..20_000 {
        if ok(&sim.snapshot()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never came: {what}");
}

/// Every evacuation of the failed host's instances in `phase` (and at
/// least one evacuation each).
fn all_in(world: &openstack_sim::WorldSnapshot, phase: EvacuationPhase, n: usize) -> bool {
    let of_failed: Vec<_> = world
        .evacuations
        .iter()
        .filter(|e| e.source == FAILED)
        .collect();
    of_failed.len() == n && of_failed.iter().all(|e| e.phase == phase)
}

/// The promises at the end of a recovery that brought every instance back:
/// active on a live host, unlocked, exactly one settled evacuation.
fn assert_all_recovered(sim: &Sim, ids: &[String], dead: &[&str]) {
    let world = sim.snapshot();
    for id in ids {
        let server = world.instance(id).expect("the server");
        let host = server.host.as_deref().unwrap_or("none");
        assert!(
            host != FAILED && !dead.contains(&host),
            "{} is on {host}",
            server.name
        );
        assert_eq!(
            serde_json::to_value(server.vm_state).unwrap(),
            "active",
            "{}",
            server.name
        );
        assert!(server.task_state.is_none(), "{}", server.name);
        assert!(!server.locked, "{} left locked", server.name);
        let settled = world
            .migrations
            .iter()
            .filter(|m| {
                m.instance_uuid == *id
                    && matches!(
                        serde_json::to_value(m.status).unwrap().as_str(),
                        Some("done" | "completed")
                    )
            })
            .count();
        assert_eq!(settled, 1, "{}: one settled evacuation", server.name);
    }
}

/// The `os-resetState` and `evacuate` calls about `id`, in order.
fn writes_about(sim: &Sim, id: &str) -> Vec<String> {
    sim.request_log(None)
        .into_iter()
        .filter(|r| r.instance_id.as_deref() == Some(id))
        .filter_map(|r| r.action)
        .filter(|a| a == "os-resetState" || a == "evacuate")
        .collect()
}

fn none_locked(sim: &Sim) {
    for server in sim.snapshot().instances {
        assert!(!server.locked, "{} left locked", server.name);
    }
}

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

fn refs(sim: &Sim, ids: &[String]) -> Vec<InstanceRef> {
    let world = sim.snapshot();
    ids.iter()
        .map(|id| InstanceRef {
            instance_id: id.clone().into(),
            instance_name: world
                .instance(id)
                .map(|s| s.name.clone())
                .unwrap_or_default(),
            source_host: FAILED.to_owned(),
            prior_state: None,
        })
        .collect()
}

/// Forces `host`'s nova-compute down, as its own recovery does once it is
/// fenced.
async fn force_down(engine: &Engine, host: &str) {
    let openstack = engine.openstack();
    let service = openstack
        .compute_service(host)
        .await
        .unwrap()
        .expect("a service");
    openstack
        .update_service(
            &service,
            &ServiceUpdate {
                forced_down: Some(true),
                ..ServiceUpdate::default()
            },
        )
        .await
        .unwrap();
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
