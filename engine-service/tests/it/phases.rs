//! The phases of a host-failure recovery on the engine's `/metrics`: one
//! recovery on the simulated cloud observes each phase histogram once,
//! and the three phases fit in the run; the same scrape shows the
//! process's metrics and the build information.

use std::time::Duration;

use instanceha_engine::config::Settings as EngineSettings;
use instanceha_engine::recovery::{Engine, Reporter, RunEvent, RunKind, RunOutcome};
use instanceha_runtime::clock::Clock;
use instanceha_runtime::telemetry::{TelemetrySettings, pipelines};
use openstack_client::OpenStack;
use openstack_sim::scenario::{HostSpec, InstanceSpec, Settings};
use openstack_sim::{Scenario, Sim};
use opentelemetry::metrics::MeterProvider as _;
use tokio_util::sync::CancellationToken;

use crate::start_run::host_failure;

const FAILED: &str = "compute-01";
/// The engine's pause between taking the failed host's service down and
/// the first evacuation: part of the first phase.
const WAIT_AFTER_SERVICE_UPDATE: Duration = Duration::from_secs(2);

fn scenario(n: usize) -> Scenario {
    let settings = Settings {
        speed: 1.0,
        seed: 30,
        ..Settings::default()
    };
    let mut builder = Scenario::builder()
        .settings(settings)
        .host(HostSpec::new(FAILED))
        .host(HostSpec::new("compute-02"))
        .host(HostSpec::new("compute-03"));
    for i in 1..=n {
        builder = builder.instance(InstanceSpec::new(&format!("vm-{i:02}"), FAILED).ha(true));
    }
    builder.build().expect("a valid scenario")
}

async fn engine(sim: &Sim, meter: &opentelemetry::metrics::Meter) -> Engine {
    let mut settings: EngineSettings = instanceha_testkit::settings::engine_for(sim);
    settings.openstack.token_warmup_interval = Duration::ZERO;
    settings.validate().expect("valid settings");
    let (credentials, service, client) = settings
        .openstack_client(&Default::default())
        .expect("credentials");
    let openstack = OpenStack::new(credentials, service, client).expect("client");
    let mut workflow = settings.recovery_settings();
    workflow.wait_after_service_update = WAIT_AFTER_SERVICE_UPDATE;
    let engine = Engine::new(
        openstack,
        workflow,
        settings.recovery.max_concurrent_instances_total,
    )
    .with_clock(Clock::tokio())
    .with_meter(meter);
    engine.openstack().check().await.expect("a first login");
    engine
}

/// The value of the sample `series` (name and labels as written) in the
/// Prometheus text.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} not in\n{text}"))
}

#[tokio::test(start_paused = true)]
async fn a_host_recovery_observes_each_phase_once() {
    let pipelines = pipelines("instanceha-engine", &TelemetrySettings::default()).unwrap();
    let sim = Sim::start(scenario(6), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let engine = engine(&sim, &pipelines.meter.meter("instanceha-engine")).await;
    sim.power_off(FAILED).unwrap();

    let clock = Clock::tokio();
    let (reporter, mut events) = Reporter::new(clock.clone());
    let started = clock.now();
    engine
        .run(
            host_failure(FAILED, RunKind::Recover, 1, Vec::new()),
            reporter,
            CancellationToken::new(),
        )
        .await;
    let took = instanceha_runtime::clock::until(started, clock.now()).as_secs_f64();
    let mut outcome = None;
    while let Ok(event) = events.try_recv() {
        if let RunEvent::Done(done) = event {
            outcome = Some(done);
        }
    }
    assert!(
        matches!(outcome, Some(RunOutcome::Completed { .. })),
        "{outcome:?}"
    );

    // Scraped the way Prometheus does.
    let text = crate::telemetry::scrape(pipelines.registry.clone()).await;
    let mut phases = 0.0;
    for phase in [
        "instanceha_engine_first_evacuation_seconds",
        "instanceha_engine_evacuation_spread_seconds",
        "instanceha_engine_recovery_tail_seconds",
    ] {
        assert_eq!(sample(&text, &format!("{phase}_count")), 1.0, "{phase}");
        phases += sample(&text, &format!("{phase}_sum"));
    }
    // The first evacuation waits for the pause after the service update,
    // the tail for the rebuilds.
    assert!(
        sample(&text, "instanceha_engine_first_evacuation_seconds_sum")
            >= WAIT_AFTER_SERVICE_UPDATE.as_secs_f64()
    );
    assert!(sample(&text, "instanceha_engine_recovery_tail_seconds_sum") > 0.0);
    assert!(
        phases <= took + 1e-6,
        "the phases ({phases} s) fit in the run ({took} s)"
    );

    // The process and the build, on the same page.
    let build = text
        .lines()
        .find(|l| l.starts_with("instanceha_build_info{service=\"instanceha-engine\",version=\""))
        .unwrap_or_else(|| panic!("no build information in\n{text}"));
    assert!(build.ends_with("\"} 1"), "{build}");
    assert!(sample(&text, "process_resident_memory_bytes") > 0.0);
    assert!(sample(&text, "process_open_fds") > 0.0);
    assert!(sample(&text, "process_start_time_seconds") > 0.0);
}
