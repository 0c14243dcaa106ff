//! The harness of the lost-work tests: a failed host, two destinations,
//! the engine with its production timings on paused time, runs and what
//! they reported, and the promises checked at the end.

use std::collections::BTreeMap;
use std::time::Duration;

use instanceha_engine::config::Settings as EngineSettings;
use instanceha_engine::recovery::{
    Engine, InstanceRef, InstanceResult, Reporter, RunEvent, RunOutcome, StartRun,
};
use instanceha_proto::run::PriorState;
use instanceha_runtime::clock::Clock;
use openstack_client::OpenStack;
use openstack_client::nova::ServiceUpdate;
use openstack_sim::scenario::{HostSpec, InstanceSpec, Settings};
use openstack_sim::{EvacuationPhase, Scenario, Sim};
use tokio_util::sync::CancellationToken;

pub(super) const FAILED: &str = "compute-01";
/// Where the scheduler sends the evacuations first (the most free memory).
pub(super) const FIRST: &str = "compute-02";
pub(super) const SPARE: &str = "compute-03";
/// The engine's defaults.
pub(super) const STALLED_AFTER: Duration = Duration::from_secs(180);
pub(super) const EVACUATION_TIMEOUT: Duration = Duration::from_secs(900);
/// For good: longer than any test.
pub(super) const FOREVER: f64 = 1.0e9;

/// `n` HA instances on the failed host, `residents` on the first
/// destination; the first destination with room for all, the spare too.
pub(super) fn scenario(n: usize, residents: usize) -> Scenario {
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

pub(super) async fn engine(sim: &Sim) -> Engine {
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

pub(super) use crate::start_run::host_failure as start;

/// What a run reported: each instance's result and steps, the outcome.
#[derive(Debug, Default)]
pub(super) struct Ran {
    pub(super) planned: BTreeMap<String, Option<PriorState>>,
    pub(super) results: BTreeMap<String, InstanceResult>,
    pub(super) steps: BTreeMap<String, Vec<(String, String)>>,
    pub(super) outcome: Option<RunOutcome>,
}

impl Ran {
    pub(super) fn steps_of(&self, id: &str) -> String {
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

    pub(super) fn failed(&self) -> Vec<(&String, &String, bool)> {
        self.results
            .iter()
            .filter_map(|(id, r)| match r {
                InstanceResult::Failed { message, retryable } => Some((id, message, *retryable)),
                _ => None,
            })
            .collect()
    }
}

pub(super) async fn run(engine: &Engine, request: StartRun) -> Ran {
    let (reporter, mut events) = Reporter::new(engine.clock());
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

pub(super) fn ids_on(sim: &Sim, prefix: &str) -> Vec<String> {
    sim.snapshot()
        .instances
        .iter()
        .filter(|i| i.name.starts_with(prefix))
        .map(|i| i.id.clone())
        .collect()
}

/// Waits (simulated time passing) until `ok` holds of the world.
pub(super) async fn until(
    sim: &Sim,
    what: &str,
    ok: impl Fn(&openstack_sim::WorldSnapshot) -> bool,
) {
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
pub(super) fn all_in(
    world: &openstack_sim::WorldSnapshot,
    phase: EvacuationPhase,
    n: usize,
) -> bool {
    let of_failed: Vec<_> = world
        .evacuations
        .iter()
        .filter(|e| e.source == FAILED)
        .collect();
    of_failed.len() == n && of_failed.iter().all(|e| e.phase == phase)
}

/// The promises at the end of a recovery that brought every instance back:
/// active on a live host, unlocked, exactly one settled evacuation.
pub(super) fn assert_all_recovered(sim: &Sim, ids: &[String], dead: &[&str]) {
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
pub(super) fn writes_about(sim: &Sim, id: &str) -> Vec<String> {
    sim.request_log(None)
        .into_iter()
        .filter(|r| r.instance_id.as_deref() == Some(id))
        .filter_map(|r| r.action)
        .filter(|a| a == "os-resetState" || a == "evacuate")
        .collect()
}

pub(super) fn none_locked(sim: &Sim) {
    for server in sim.snapshot().instances {
        assert!(!server.locked, "{} left locked", server.name);
    }
}

pub(super) fn refs(sim: &Sim, ids: &[String]) -> Vec<InstanceRef> {
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
pub(super) async fn force_down(engine: &Engine, host: &str) {
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
