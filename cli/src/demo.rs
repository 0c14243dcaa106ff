//! `instanceha demo`: the whole system in one process, over loopback. It
//! starts a simulated cloud (`openstack-sim`), `instanceha-engine` and
//! `instanceha-api` (on an SQLite file in a temporary directory), registers
//! the hosts, powers a compute host off, sends the notification a
//! monitoring agent would send, and shows the recovery live with the same
//! display as `notification watch`. `--inject` shows the honest failure
//! path. No network, database server or configuration is needed.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use chrono::Utc;
use clap::{Args, ValueEnum};
use instanceha_api::auth::{AuthMode, token_sha256};
use instanceha_testkit::process::Process;
use openstack_sim::scenario::{HostSpec, InstanceSpec};
use openstack_sim::{
    ErrorBody, EvacuationFailure, FaultEffect, FaultRule, FaultService, Scenario, Sim,
};

use crate::client::Client;
use crate::commands::Context;
use crate::config::{Settings, Token};
use crate::error::{Error, Exit};
use crate::resources::{NewHost, NewNotification, NewSegment, NotificationType, RecoveryMethod};
use crate::watch::{self, state::Outcome};

/// A failure to inject into the simulated cloud.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// Nova answers 503 to every read of one instance (the seed bug report's
    /// test plan): that instance cannot be confirmed and fails.
    #[value(name = "nova-503")]
    Nova503,
    /// Keystone answers 503 and every token is revoked: nothing can be done.
    #[value(name = "keystone-503")]
    Keystone503,
    /// Nova answers 503 to locking one instance.
    #[value(name = "lock-503")]
    Lock503,
    /// Nova answers 503 to evacuating one instance.
    #[value(name = "evacuate-503")]
    Evacuate503,
    /// Nova answers 503 to unlocking one instance: recovered, but left locked.
    #[value(name = "unlock-503")]
    Unlock503,
    /// Nova's claim on the reserved host fails for one instance: it falls
    /// back to a host the scheduler picks.
    #[value(name = "claim-failure")]
    ClaimFailure,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            self.to_possible_value()
                .expect("every fault has a name")
                .get_name(),
        )
    }
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// HA instances on the failed host (besides one that is not HA-enabled);
    /// a mix of image-backed, boot-from-volume with a stale attachment (the
    /// field bug), boot-from-volume, and stopped instances. The three hosts
    /// grow to hold them all
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub instances: u32,
    /// How much faster than real time the simulated cloud runs
    #[arg(long, default_value_t = 4.0)]
    pub speed: f64,
    /// Inject a failure to see the honest failure path
    #[arg(long, value_enum)]
    pub inject: Option<Fault>,
    /// Leave the three services running afterwards and print how to reach
    /// them (stop with Ctrl-C)
    #[arg(long)]
    pub keep_running: bool,
    /// Seed of the simulated cloud's random choices
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Run one instanceha-agent per host: they notice the failure, fence
    /// the host through its simulated Redfish BMC and report it
    #[arg(long)]
    pub agents: bool,
}

/// The failed host, its healthy neighbour and the spare.
const FAILED: &str = "compute-01";
const NEIGHBOUR: &str = "compute-02";
const SPARE: &str = "compute-03";

/// The vCPUs of each of the demo's three identical hosts: the failed host
/// holds every instance (`m1.small`: 1 vCPU, 2 GiB), and the spare alone
/// can take them all. The simulator's default of 64 for up to 63
/// instances; more, in steps of 16, for more: a fixed 64 left `--instances
/// 200` with "No valid host was found" for all but 128 of them.
pub fn host_vcpus(instances: u32) -> u32 {
    (instances + 1).next_multiple_of(16).max(64)
}

/// The demo's cloud: `instances` HA instances on the failed host.
pub fn scenario(instances: u32, speed: f64, seed: u64) -> Result<Scenario, String> {
    let vcpus = host_vcpus(instances);
    let host = |name: &str| HostSpec::new(name).capacity(vcpus, u64::from(vcpus) * 4096);
    let mut builder = Scenario::builder()
        .speed(speed)
        .seed(seed)
        .host(host(FAILED))
        .host(host(NEIGHBOUR))
        .host(host(SPARE).disabled("reserved for instance HA"));
    for i in 0..instances {
        let n = i / 4 + 1;
        let spec = match i % 4 {
            0 => InstanceSpec::new(&format!("web-{n}"), FAILED),
            1 => InstanceSpec::new(&format!("db-{n}"), FAILED).stale_attachment(),
            2 => InstanceSpec::new(&format!("app-{n}"), FAILED).boot_from_volume(),
            _ => InstanceSpec::new(&format!("batch-{n}"), FAILED).vm_state("stopped"),
        };
        builder = builder.instance(spec.ha(true));
    }
    builder = builder.instance(InstanceSpec::new("scratch-1", FAILED).ha(false));
    builder.build().map_err(|e| e.to_string())
}

/// How long the demo's engine rides out an outage, how long its API
/// retries what failed for a passing reason, and how long after the last
/// recovery it reads Nova before the verdict: an operator's defaults are
/// 10, 30 and 5 minutes; the demo shortens them so that an injected fault,
/// which never heals, shows its honest end within the time it announces.
const DEMO_OUTAGE_TOLERANCE: Duration = Duration::from_secs(2);
const DEMO_RETRY_WINDOW: Duration = Duration::from_secs(6);
const DEMO_VERDICT_GRACE: Duration = Duration::from_secs(6);

/// How long, in real time, the spare takes to rebuild `instances`
/// instances: Nova rebuilds a few at a time on each host
/// (`rebuild_concurrency`, its `max_concurrent_builds`) and queues the
/// rest, and the engine's clock for each evacuation runs from its request.
pub fn rebuild_queue(cloud: &openstack_sim::scenario::Settings, instances: u32) -> Duration {
    let d = &cloud.durations;
    let one = d.schedule + d.claim + d.block_device_mapping + d.spawn + 2.0 * d.finish;
    let rounds = f64::from(instances) / cloud.rebuild_concurrency.max(1) as f64;
    Duration::from_secs_f64(rounds.ceil() * one / cloud.speed.max(f64::MIN_POSITIVE))
}

/// The engine against `sim`, polling at the simulated cloud's pace (as one
/// second would be in real time); retries are short so that the failure
/// path shows quickly. Its evacuation deadlines (the test kit's, 20 s and
/// 5 s) grow by twice the time the spare's queue of rebuilds takes
/// (`queue`), so that the last instances of a large demo are not given up
/// on while Nova still has them queued.
async fn start_engine(sim: &Sim, speed: f64, queue: Duration) -> Result<Process, Error> {
    let mut settings = instanceha_testkit::settings::engine_for(sim);
    settings.recovery.evacuation_timeout += 2 * queue;
    settings.recovery.stalled_evacuation_after += 2 * queue;
    settings.recovery.outage_tolerance = DEMO_OUTAGE_TOLERANCE;
    settings.recovery.poll_interval = Duration::from_secs_f64((1.0 / speed).max(0.02));
    settings.openstack.retry.initial_backoff = Duration::from_millis(100);
    settings.openstack.retry.max_backoff = Duration::from_millis(400);
    settings.openstack.retry.max_retry_after = Duration::from_secs(1);
    instanceha_testkit::process::start_engine(settings)
        .await
        .map_err(|e| Error::Demo(e.to_string()))
}

/// The API on an SQLite file, with static tokens, dispatching to `engine`.
async fn start_api(
    database: &std::path::Path,
    tokens: &std::path::Path,
    engine: std::net::SocketAddr,
) -> Result<Process, Error> {
    let mut settings =
        instanceha_testkit::settings::api_for(&format!("sqlite://{}", database.display()), engine);
    settings.auth.mode = AuthMode::Static;
    settings.auth.static_tokens_file = Some(tokens.to_owned());
    settings.dispatch.replica_id = Some("demo".to_owned());
    settings.dispatch.retry_delay = Duration::from_millis(200);
    settings.dispatch.retry_window = DEMO_RETRY_WINDOW;
    settings.dispatch.verdict_grace = DEMO_VERDICT_GRACE;
    settings.dispatch.scan_interval = Duration::from_millis(500);
    instanceha_testkit::process::start_api(settings)
        .await
        .map_err(|e| Error::Demo(e.to_string()))
}

fn unavailable() -> FaultEffect {
    FaultEffect::Error {
        status: 503,
        body: ErrorBody::Json,
        message: None,
        retry_after: None,
    }
}

/// Installs `fault`; returns what to expect, for the operator.
fn inject(sim: &Sim, fault: Fault) -> Result<String, Error> {
    let snapshot = sim.snapshot();
    let victim = snapshot
        .instance_by_name("web-1")
        .ok_or_else(|| Error::Demo("the demo cloud has no web-1".to_owned()))?
        .id
        .clone();
    let action = |name: &str| {
        FaultRule::new(
            FaultService::Compute,
            Some("POST"),
            Some("/servers/*/action"),
            unavailable(),
        )
        .action(name)
        .instance(&victim)
    };
    let fail = |e: openstack_sim::Error| Error::Demo(format!("cannot inject {fault}: {e}"));
    let expect = match fault {
        Fault::Nova503 => {
            sim.inject_fault(
                FaultRule::new(
                    FaultService::Compute,
                    Some("GET"),
                    Some("/servers/*"),
                    unavailable(),
                )
                .instance(&victim),
            )
            .map_err(fail)?;
            "Nova answers 503 to every read of web-1: its recovery cannot be confirmed"
        }
        Fault::Keystone503 => {
            sim.inject_fault(FaultRule::new(
                FaultService::Identity,
                Some("POST"),
                Some("/auth/tokens"),
                unavailable(),
            ))
            .map_err(fail)?;
            sim.revoke_all_tokens();
            "Keystone answers 503 and every token is revoked: nothing can be done"
        }
        Fault::Lock503 => {
            sim.inject_fault(action("lock")).map_err(fail)?;
            "Nova answers 503 to locking web-1"
        }
        Fault::Evacuate503 => {
            sim.inject_fault(action("evacuate")).map_err(fail)?;
            "Nova answers 503 to evacuating web-1"
        }
        Fault::Unlock503 => {
            sim.inject_fault(action("unlock")).map_err(fail)?;
            "Nova answers 503 to unlocking web-1: recovered, but left locked"
        }
        Fault::ClaimFailure => {
            sim.set_evacuation_failure(&victim, Some(EvacuationFailure::Claim))
                .map_err(fail)?;
            "Nova's claim for web-1 on the spare fails: it falls back to the scheduler"
        }
    };
    Ok(expect.to_owned())
}

/// How to reach the services left running: the API, its web console (on
/// the REST listener), the engine and the simulated cloud.
fn keep_running_text(
    api: &Process,
    engine: &Process,
    sim: &Sim,
    notification: &str,
    token: &str,
) -> String {
    let console = api.rest_addr.map_or_else(String::new, |rest| {
        format!(
            "  web console             http://{rest}/console/notifications/{notification}  (sign in with the token below)\n"
        )
    });
    // The binary running now, which need not be on PATH.
    let cli = std::env::current_exe()
        .map(|exe| exe.display().to_string())
        .unwrap_or_else(|_| "instanceha".to_owned());
    format!(
        "\nthe services keep running (Ctrl-C to stop):\n  \
         instanceha-api (gRPC)   {}\n{console}  instanceha-engine       {}\n  openstack-sim           {}  (control API under /sim/, see openstack-sim/README.md)\n\n\
         try:\n  export INSTANCEHA_CLI_ENDPOINT=http://{} INSTANCEHA_CLI_TOKEN={token}\n  \
         {cli} notification list\n  {cli} vmove list {notification}\n  \
         curl -s {}/sim/state | head -c 600\n",
        api.addr,
        engine.addr,
        sim.base_url(),
        api.addr,
        sim.base_url(),
    )
}

pub async fn run(args: DemoArgs, ctx: &mut Context) -> Result<Exit, Error> {
    if !(args.speed > 0.0 && args.speed <= 1000.0) {
        return Err(Error::Demo(format!(
            "--speed must be above 0 and at most 1000 (got {})",
            args.speed
        )));
    }
    let scenario = scenario(args.instances, args.speed, args.seed).map_err(Error::Demo)?;
    let queue = rebuild_queue(&scenario.settings, args.instances);
    let dir =
        tempfile::tempdir().map_err(|e| Error::Demo(format!("no temporary directory: {e}")))?;
    let token = uuid::Uuid::new_v4().simple().to_string();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[token]]\nname = \"demo-operator\"\nsha256 = \"{}\"\nroles = [\"admin\"]\n\
             [[token]]\nname = \"demo-agents\"\nsha256 = \"{}\"\nroles = [\"monitoring_agent\"]\n",
            token_sha256(&token),
            token_sha256(&format!("{token}-agents"))
        ),
    )
    .map_err(|e| Error::Demo(format!("cannot write the demo's token file: {e}")))?;

    let sim = Sim::start(scenario, "127.0.0.1:0".parse().expect("an address"))
        .await
        .map_err(|e| Error::Demo(format!("the simulated cloud did not start: {e}")))?;
    let engine = start_engine(&sim, args.speed, queue).await?;
    let api = start_api(&dir.path().join("instanceha.db"), &tokens, engine.addr).await?;

    let settings = Settings {
        endpoint: format!("http://{}", api.addr),
        token: Some(Token::new(token.clone())),
        ..ctx.settings.clone()
    };
    let client = Client::new(&settings)?;
    let segment = client
        .create_segment(NewSegment {
            name: "demo".to_owned(),
            description: Some("two compute hosts and a spare".to_owned()),
            service_type: "COMPUTE".to_owned(),
            recovery_method: RecoveryMethod::RhPriority,
            enabled: true,
            return_to_service: None,
        })
        .await?;
    for (name, reserved) in [(FAILED, false), (NEIGHBOUR, false), (SPARE, true)] {
        client
            .create_host(NewHost {
                segment_id: segment.id.clone(),
                name: name.to_owned(),
                host_type: "COMPUTE".to_owned(),
                control_attributes: "SSH".to_owned(),
                reserved,
                on_maintenance: false,
            })
            .await?;
    }

    let mut intro = format!(
        "instance-ha demo: a simulated cloud at {}x real time, instanceha-engine on {}, instanceha-api on {}\n\
         segment \"demo\" (rh_priority): {FAILED} and {NEIGHBOUR}, spare {SPARE} ({} vCPUs each); {} HA instance(s) and 1 unprotected on {FAILED}\n",
        args.speed,
        engine.addr,
        api.addr,
        host_vcpus(args.instances),
        args.instances
    );
    if let Some(fault) = args.inject {
        intro.push_str(&format!(
            "injected: {fault}: {}\n(the demo rides out an outage for {} per call, retries for {} and reads nova for at most {} after the last recovery before its verdict; an operator's defaults are 10min, 30min and 5min)\n",
            inject(&sim, fault)?,
            humantime::format_duration(DEMO_OUTAGE_TOLERANCE),
            humantime::format_duration(DEMO_RETRY_WINDOW),
            humantime::format_duration(DEMO_VERDICT_GRACE),
        ));
    }
    let mut agents = None;
    if args.agents {
        let hosts = [FAILED, NEIGHBOUR, SPARE];
        let agent_token = format!("{token}-agents");
        agents = Some(
            crate::demo_agents::start(&sim, api.addr, &agent_token, dir.path(), &hosts).await?,
        );
        intro.push_str(&crate::demo_agents::intro(FAILED));
    } else {
        intro.push_str(&format!(
            "powering {FAILED} off and reporting it as a fenced host monitor would...\n\n"
        ));
    }
    if ctx.format().encoding().is_none() {
        ctx.print(&intro)?;
    } else {
        eprint!("{intro}");
    }
    let power_loss = std::time::Instant::now();
    if let Some(agents) = agents.as_mut() {
        agents.kill(FAILED);
    }
    sim.power_off(FAILED)
        .map_err(|e| Error::Demo(format!("cannot power {FAILED} off: {e}")))?;
    let notification = if agents.is_some() {
        let (found, text) = crate::demo_agents::reported(&client, FAILED, power_loss).await?;
        if ctx.format().encoding().is_none() {
            ctx.print(&text)?;
        } else {
            eprint!("{text}");
        }
        found
    } else {
        client
            .create_notification(NewNotification {
                notification_type: NotificationType::ComputeHost,
                hostname: FAILED.to_owned(),
                generated_time: Utc::now(),
                payload: BTreeMap::from([
                    ("event".to_owned(), "STOPPED".to_owned()),
                    ("host_status".to_owned(), "NORMAL".to_owned()),
                    ("cluster_status".to_owned(), "OFFLINE".to_owned()),
                ]),
                idempotency_key: None,
            })
            .await?
    };
    let format = ctx.format();
    let terminal = ctx.stdout_is_terminal;
    let outcome = watch::watch(
        &client,
        &notification.id,
        format,
        terminal,
        ctx.out.as_mut(),
    )
    .await?;
    if agents.is_some() {
        let end = match outcome {
            Outcome::Finished => "finished",
            Outcome::Ignored => "ignored",
            Outcome::Failed => "failed",
        };
        eprintln!(
            "\npower loss to {end}: {:.1} s",
            power_loss.elapsed().as_secs_f64()
        );
    }

    if args.keep_running {
        let text = keep_running_text(&api, &engine, &sim, &notification.id, &token);
        ctx.print(&text)?;
        tokio::signal::ctrl_c()
            .await
            .map_err(|e| Error::Demo(format!("cannot wait for Ctrl-C: {e}")))?;
    }
    drop(agents);
    drop(api);
    drop(engine);
    sim.shutdown().await;
    Ok(match outcome {
        Outcome::Finished | Outcome::Ignored => Exit::Ok,
        Outcome::Failed => Exit::RecoveryFailed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_mixes_instance_kinds() {
        let scenario = scenario(8, 4.0, 1).unwrap();
        let names: Vec<&str> = scenario.instances.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "web-1",
                "db-1",
                "app-1",
                "batch-1",
                "web-2",
                "db-2",
                "app-2",
                "batch-2",
                "scratch-1"
            ]
        );
        assert!(scenario.instances[1].stale_attachment);
        assert_eq!(scenario.instances[3].vm_state, "stopped");
        assert_eq!(scenario.instances[8].ha_enabled, Some(false));
    }

    #[test]
    fn the_hosts_grow_with_the_instances() {
        assert_eq!(host_vcpus(6), 64);
        assert_eq!(host_vcpus(63), 64);
        assert_eq!(host_vcpus(64), 80);
        assert_eq!(host_vcpus(2000), 2016);
        let cloud = scenario(200, 4.0, 1).unwrap();
        for host in &cloud.hosts {
            assert!(host.vcpus > 200, "{} has {} vCPUs", host.name, host.vcpus);
            assert!(
                host.ram_mb >= 201 * 2048,
                "{} has {} MiB",
                host.name,
                host.ram_mb
            );
        }
        // The queue of rebuilds grows with the instances, shrinks with speed.
        let queue = |n, speed| rebuild_queue(&scenario(n, speed, 1).unwrap().settings, n);
        assert!(queue(2000, 4.0) > 9 * queue(200, 4.0));
        assert!(queue(200, 100.0) < queue(200, 4.0) / 20);
    }

    #[test]
    fn fault_names_are_the_flags() {
        assert_eq!(Fault::Nova503.to_string(), "nova-503");
        assert_eq!(Fault::ClaimFailure.to_string(), "claim-failure");
    }
}
