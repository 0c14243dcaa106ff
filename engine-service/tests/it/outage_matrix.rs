//! The outage matrix: for every OpenStack call site of a host recovery,
//! every kind of outage (connections dropped, 503, hanging) and every
//! length (2 s, 15 s, 60 s, 5 min, and longer than the engine's outage
//! tolerance), a recovery runs in the engine against `openstack-sim` with
//! the outage window opening at the site's first call, and the promises of
//! issue 14 are checked on the run's events and on the simulated cloud:
//!
//! * within the tolerance the run completes, every instance `succeeded`;
//! * beyond it every failure is marked retryable and says what failed;
//!   once Nova answers again a reconcile run (the API's truth check), a
//!   retry of what is still not recovered, and a release of the locks the
//!   notification still holds bring every instance back;
//! * always, at the end: every instance active on the other compute,
//!   evacuated exactly once (never a blind resend), none left locked.
//!
//! Each case runs on a paused Tokio runtime of its own: the simulator's
//! clock follows Tokio's, so a 15-minute outage costs no real time. The
//! engine runs with its production timings (`outage_tolerance` 10 min,
//! `request_timeout` 30 s, the default backoff).
//!
//! ```sh
//! cargo test -p instanceha-engine --test it outage_matrix -- --nocapture
//! ```
//!
//! `INSTANCEHA_OUTAGE_MATRIX_FILTER` keeps the cases whose name contains
//! it (e.g. `evacuate/503`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use instanceha_engine::config::Settings as EngineSettings;
use instanceha_engine::recovery::{
    Engine, InstanceRef, InstanceResult, Reporter, RunEvent, RunKind, RunOutcome, StartRun,
};
use openstack_client::OpenStack;
use openstack_sim::scenario::{HostSpec, InstanceSpec};
use openstack_sim::{ErrorBody, FaultEffect, FaultRule, FaultService, Scenario, Sim};
use tokio_util::sync::CancellationToken;

use crate::start_run::host_failure;

const FAILED_HOST: &str = "compute-01";
const SPARE_HOST: &str = "compute-02";
const INSTANCES: [&str; 3] = ["web-1", "web-2", "db-1"];
/// The engine's outage tolerance (its default).
const TOLERANCE: Duration = Duration::from_secs(600);

/// Where the outage strikes: the calls that fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Site {
    /// Keystone (every token revoked first, so the run must log in).
    Login,
    /// `PUT /os-services/*` (force down, disable).
    ServiceUpdate,
    /// `GET /servers/detail` (the host's instances).
    List,
    /// `GET /servers/{id}` (lookup, following the rebuild, verifying).
    Get,
    /// The `lock` action.
    Lock,
    /// The `evacuate` action.
    Evacuate,
    /// The `unlock` action.
    Unlock,
    /// All of nova-api: the operator's "nova-api stopped" outage.
    Compute,
}

const SITES: [Site; 8] = [
    Site::Login,
    Site::ServiceUpdate,
    Site::List,
    Site::Get,
    Site::Lock,
    Site::Evacuate,
    Site::Unlock,
    Site::Compute,
];

impl Site {
    fn name(self) -> &'static str {
        match self {
            Site::Login => "login",
            Site::ServiceUpdate => "service-update",
            Site::List => "list",
            Site::Get => "get",
            Site::Lock => "lock",
            Site::Evacuate => "evacuate",
            Site::Unlock => "unlock",
            Site::Compute => "nova-api",
        }
    }

    fn rule(self, effect: FaultEffect, secs: f64) -> FaultRule {
        let (service, method, path, action) = match self {
            Site::Login => (FaultService::Identity, None, None, None),
            Site::ServiceUpdate => (
                FaultService::Compute,
                Some("PUT"),
                Some("/os-services*"),
                None,
            ),
            Site::List => (
                FaultService::Compute,
                Some("GET"),
                Some("/servers/detail"),
                None,
            ),
            Site::Get => (FaultService::Compute, Some("GET"), Some("/servers/*"), None),
            Site::Lock => (FaultService::Compute, Some("POST"), None, Some("lock")),
            Site::Evacuate => (FaultService::Compute, Some("POST"), None, Some("evacuate")),
            Site::Unlock => (FaultService::Compute, Some("POST"), None, Some("unlock")),
            Site::Compute => (FaultService::Compute, None, None, None),
        };
        let mut rule = FaultRule::new(service, method, path, effect)
            .for_secs(secs)
            .from_first_call();
        if let Some(action) = action {
            rule = rule.action(action);
        }
        rule
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The connection closed without an answer (a refused or reset one).
    Dropped,
    /// 503 from a load balancer.
    Unavailable,
    /// No answer at all: the client's timeout.
    Hang,
}

const KINDS: [Kind; 3] = [Kind::Dropped, Kind::Unavailable, Kind::Hang];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Dropped => "dropped",
            Kind::Unavailable => "503",
            Kind::Hang => "hang",
        }
    }

    fn effect(self) -> FaultEffect {
        match self {
            Kind::Dropped => FaultEffect::Drop,
            Kind::Unavailable => FaultEffect::Error {
                status: 503,
                body: ErrorBody::Html,
                message: None,
                retry_after: None,
            },
            Kind::Hang => FaultEffect::Hang,
        }
    }
}

/// The outage lengths: within the tolerance, and beyond it.
const LENGTHS: [Duration; 5] = [
    Duration::from_secs(2),
    Duration::from_secs(15),
    Duration::from_secs(60),
    Duration::from_secs(300),
    Duration::from_secs(900),
];

#[derive(Clone, Copy, Debug)]
struct Case {
    site: Site,
    kind: Kind,
    length: Duration,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "{}/{}/{}s",
            self.site.name(),
            self.kind.name(),
            self.length.as_secs()
        )
    }
}

fn cases() -> Vec<Case> {
    let filter = std::env::var("INSTANCEHA_OUTAGE_MATRIX_FILTER").unwrap_or_default();
    let mut cases = Vec::new();
    for site in SITES {
        for kind in KINDS {
            for length in LENGTHS {
                let case = Case { site, kind, length };
                if case.name().contains(&filter) {
                    cases.push(case);
                }
            }
        }
    }
    cases
}

fn scenario() -> Scenario {
    let mut builder = Scenario::builder()
        .speed(1.0)
        .seed(11)
        .host(HostSpec::new(FAILED_HOST))
        .host(HostSpec::new(SPARE_HOST));
    for name in INSTANCES {
        builder = builder.instance(InstanceSpec::new(name, FAILED_HOST).ha(true));
    }
    builder.build().expect("a valid scenario")
}

fn engine(sim: &Sim) -> Engine {
    let mut settings = instanceha_testkit::settings::engine_for(sim);
    settings.recovery.outage_tolerance = TOLERANCE;
    settings.openstack.token_warmup_interval = Duration::ZERO;
    engine_from(&settings)
}

fn engine_from(settings: &EngineSettings) -> Engine {
    let (credentials, service, client) = settings
        .openstack_client(&Default::default())
        .expect("credentials");
    let openstack = OpenStack::new(credentials, service, client).expect("client");
    Engine::new(
        openstack,
        settings.recovery_settings(),
        settings.recovery.max_concurrent_instances_total,
    )
}

/// Run `attempt` of the failed host's recovery.
fn start(kind: RunKind, attempt: u32, instances: Vec<InstanceRef>) -> StartRun {
    host_failure(FAILED_HOST, kind, attempt, instances)
}

/// What a run reported: each instance's last result, the outcome.
#[derive(Debug, Default)]
struct Ran {
    results: BTreeMap<String, InstanceResult>,
    outcome: Option<RunOutcome>,
}

async fn run(engine: &Engine, request: StartRun) -> Ran {
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
            RunEvent::Done(outcome) => ran.outcome = Some(outcome),
            _ => {}
        }
    }
    ran
}

fn refs(sim: &Sim, ids: impl IntoIterator<Item = String>) -> Vec<InstanceRef> {
    let world = sim.snapshot();
    ids.into_iter()
        .map(|id| {
            let name = world
                .instances
                .iter()
                .find(|s| s.id == id)
                .map(|s| s.name.clone())
                .unwrap_or_default();
            InstanceRef {
                instance_id: id.into(),
                instance_name: name,
                source_host: FAILED_HOST.to_owned(),
                prior_state: None,
            }
        })
        .collect()
}

/// Runs one case; returns how the first run ended (`completed`, or
/// `failed N` then what followed) and what went wrong (nothing: it passed).
async fn one(case: Case) -> (String, Vec<String>) {
    let mut wrong = Vec::new();
    let mut story = Vec::new();
    let sim = Sim::start(scenario(), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("the simulator starts");
    let engine = engine(&sim);
    // The engine logs in before the outage (it would have, idle), so the
    // outage meets a recovery with a token: except at the login site.
    engine.openstack().check().await.expect("a first login");
    if case.site == Site::Login {
        sim.revoke_all_tokens();
    }
    sim.power_off(FAILED_HOST).unwrap();
    sim.inject_fault(
        case.site
            .rule(case.kind.effect(), case.length.as_secs_f64()),
    )
    .expect("a valid outage");
    let within = case.length < TOLERANCE;
    let first = run(&engine, start(RunKind::Recover, 1, Vec::new())).await;

    let mut not_recovered: Vec<String> = Vec::new();
    for (id, result) in &first.results {
        match result {
            InstanceResult::Succeeded { .. } => {}
            InstanceResult::Failed { message, retryable } => {
                if within {
                    wrong.push(format!("{id} failed within the tolerance: {message}"));
                } else if !retryable {
                    wrong.push(format!("{id} failed for good in an outage: {message}"));
                }
                if message.is_empty() {
                    wrong.push(format!("{id} failed without saying why"));
                }
                not_recovered.push(id.clone());
            }
            InstanceResult::Ignored { message } => {
                wrong.push(format!("{id} ignored: {message}"));
            }
        }
    }
    story.push(if first.results.is_empty() {
        "no plan".to_owned()
    } else if not_recovered.is_empty() {
        "recovered".to_owned()
    } else {
        format!("{} failed", not_recovered.len())
    });
    match &first.outcome {
        Some(RunOutcome::Completed { .. }) => {
            if first.results.len() != INSTANCES.len() {
                wrong.push(format!(
                    "completed with {} of {} results",
                    first.results.len(),
                    INSTANCES.len()
                ));
            }
        }
        Some(RunOutcome::Failed { message, retryable }) => {
            if within {
                wrong.push(format!("the run failed within the tolerance: {message}"));
            } else if !retryable {
                wrong.push(format!("the run failed for good in an outage: {message}"));
            }
        }
        other => wrong.push(format!("the run ended {other:?}")),
    }

    if !within {
        // The outage ends; the API's next steps: the truth from Nova for
        // what has no success, a retry of what Nova shows not recovered
        // (or a fresh plan if the run never got as far as a plan), then
        // the release of the locks still held.
        tokio::time::sleep(case.length).await; // sleep: the outage's length.
        let unsettled: Vec<String> = if not_recovered.is_empty() {
            Vec::new()
        } else {
            let reconciled = run(
                &engine,
                start(RunKind::Reconcile, 2, refs(&sim, not_recovered.clone())),
            )
            .await;
            story.push("reconciled".to_owned());
            not_recovered
                .iter()
                .filter(|id| {
                    !matches!(
                        reconciled.results.get(*id),
                        Some(InstanceResult::Succeeded { .. })
                    )
                })
                .cloned()
                .collect()
        };
        if first.results.is_empty() || !unsettled.is_empty() {
            let retry = run(&engine, start(RunKind::Recover, 3, refs(&sim, unsettled))).await;
            story.push("retried".to_owned());
            for (id, result) in &retry.results {
                if !matches!(result, InstanceResult::Succeeded { .. }) {
                    wrong.push(format!("{id} not recovered by the retry: {result:?}"));
                }
            }
        }
        let locked: Vec<String> = sim
            .snapshot()
            .instances
            .iter()
            .filter(|s| s.locked)
            .map(|s| s.id.clone())
            .collect();
        if !locked.is_empty() {
            run(&engine, start(RunKind::ReleaseLocks, 4, refs(&sim, locked))).await;
            story.push("locks released".to_owned());
        }
    }

    let world = sim.snapshot();
    for server in &world.instances {
        let state = serde_json::to_value(server.vm_state).unwrap_or_default();
        if server.host.as_deref() != Some(SPARE_HOST) || state != "active" {
            wrong.push(format!("{} is {state} on {:?}", server.name, server.host));
        }
        if server.locked {
            wrong.push(format!(
                "{} left locked ({:?})",
                server.name, server.locked_reason
            ));
        }
    }
    let stats = sim.stats();
    let mut evacuations: BTreeMap<&str, usize> = BTreeMap::new();
    for evacuation in &stats.evacuations {
        *evacuations
            .entry(evacuation.instance_id.as_str())
            .or_default() += 1;
    }
    for server in &world.instances {
        let n = evacuations.get(server.id.as_str()).copied().unwrap_or(0);
        if n != 1 {
            wrong.push(format!("{} evacuated {n} times", server.name));
        }
    }
    if sim.request_log(None).iter().all(|r| r.fault_id.is_none()) {
        wrong.push("the outage never struck".to_owned());
    }
    sim.shutdown().await;
    (story.join(", then "), wrong)
}

#[test]
fn every_outage_within_the_tolerance_is_ridden_out_and_a_longer_one_ends_recovered() {
    let cases = cases();
    assert!(!cases.is_empty(), "no case matches the filter");
    let jobs = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4);
    let queue = Mutex::new(cases.clone());
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let Some(case) = queue.lock().unwrap().pop() else {
                        break;
                    };
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .start_paused(true)
                        .build()
                        .unwrap();
                    let (story, wrong) = runtime.block_on(one(case));
                    let verdict = if wrong.is_empty() { "ok" } else { "FAILED" };
                    println!("{:<32} {verdict:<6} {story}", case.name());
                    if !wrong.is_empty() {
                        failures.lock().unwrap().push(format!(
                            "{}:\n  {}",
                            case.name(),
                            wrong.join("\n  ")
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} outage cases broke a promise:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
