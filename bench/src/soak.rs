//! `soak`: instance-ha under a steady stream of failures, as a cloud lives
//! (issue 25). One segment of `hosts` compute hosts (half of them with
//! instances at the start) whose segment returns repaired hosts to service
//! (`return_to_service = auto`); nova-api answers a share of its calls 503
//! for the whole run. Every `every` seconds a host in service fails (power
//! off, a fenced COMPUTE_HOST STOPPED report); once its recovery ends it is
//! repaired (power on, a STARTED report) and comes back. At the end (after
//! the last returns), every report must have ended `finished`, none may
//! have been refused as a duplicate or for maintenance, every instance must
//! be ACTIVE on a host in service and unlocked; the API's and the engine's
//! memory is sampled every minute (flat: the last sample within half again
//! of the first, plus 16 MiB).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use instanceha_proto::v1 as pb;
use pb::notification_service_client::NotificationServiceClient;
use pb::segment_service_client::SegmentServiceClient;
use serde::Serialize;
use tonic::transport::Channel;

use crate::cloud::{Cloud, RunDir};
use crate::db::Backend;
use crate::procs::Binaries;
use crate::recovery::{
    RecoverySettings, is_final, list_notifications, now, register_segment, status_name,
};
use crate::runs::Bench;
use crate::scenario::{Scenario, TimingModel};
use crate::{Common, WorkDir};

#[derive(Debug, Args)]
pub struct SoakArgs {
    /// How long failures keep coming, in minutes.
    #[arg(long, default_value_t = 15.0)]
    pub minutes: f64,
    /// A host failure every this many seconds.
    #[arg(long, default_value_t = 20)]
    pub every: u64,
    /// Hosts of the segment.
    #[arg(long, default_value_t = 30)]
    pub hosts: usize,
    /// HA instances on each host of the first half at the start.
    #[arg(long, default_value_t = 4)]
    pub instances_per_host: usize,
    /// Share of nova-api's calls answered 503.
    #[arg(long, default_value_t = 0.05)]
    pub nova_errors: f64,
    /// Simulated seconds per real second.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    #[arg(long, default_value_t = 2026)]
    pub seed: u64,
}

/// `soak`: one long run; true if it kept every promise.
pub async fn command(common: &Common, args: &SoakArgs) -> anyhow::Result<bool> {
    if !(args.minutes > 0.0 && args.speed > 0.0 && (0.0..1.0).contains(&args.nova_errors)) {
        bail!("--minutes and --speed must be positive, --nova-errors in [0, 1)");
    }
    if args.every == 0 || args.hosts < 2 {
        bail!("--every must be positive and --hosts at least 2");
    }
    let binaries = Binaries::locate(
        common.bin_dir.as_deref(),
        common.sim_bin.clone(),
        common.engine_bin.clone(),
        common.api_bin.clone(),
    )?;
    let work = WorkDir::create(common)?;
    let bench = Bench {
        common,
        binaries: &binaries,
        root: &work.root,
    };
    let settings = SoakSettings {
        duration: Duration::from_secs_f64(args.minutes * 60.0),
        every: Duration::from_secs(args.every),
        hosts: args.hosts,
        instances_per_host: args.instances_per_host,
        nova_errors: args.nova_errors,
        speed: args.speed,
        seed: args.seed,
        drain: Duration::from_secs(300),
    };
    let report = run(&binaries, &bench.run_dir("soak", true)?, &settings).await;
    work.finish(common.keep);
    let report = report?;
    println!("{}", table(&report));
    if let Some(path) = &common.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report.ok())
}

/// How a soak runs.
#[derive(Clone, Debug, Serialize)]
pub struct SoakSettings {
    pub duration: Duration,
    /// A host failure this often.
    pub every: Duration,
    pub hosts: usize,
    /// HA instances on each host of the first half at the start.
    pub instances_per_host: usize,
    /// Share of nova-api's calls answered 503.
    pub nova_errors: f64,
    pub speed: f64,
    pub seed: u64,
    /// How long the last recoveries and returns may take after the run.
    pub drain: Duration,
}

/// What a soak measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SoakReport {
    pub settings: Option<SoakSettings>,
    pub real_secs: f64,
    pub failures: usize,
    pub returns: usize,
    /// Every notification of the segment by final status (or `unfinished`).
    pub statuses: BTreeMap<String, usize>,
    /// Reports refused, by gRPC code.
    pub refused: BTreeMap<String, usize>,
    pub instances: usize,
    /// Instances not ACTIVE on a host in service, or locked.
    pub misplaced: Vec<String>,
    pub nova_calls_answered_503: u64,
    /// (minutes since the start, API RSS MiB, engine RSS MiB).
    pub memory: Vec<(f64, f64, f64)>,
    pub problems: Vec<String>,
}

impl SoakReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Where a host is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostState {
    InService,
    /// Failed; its recovery's notification.
    Failed(String),
    /// Repaired; the notification of its return.
    Returning(String),
}

pub async fn run(
    binaries: &Binaries,
    dir: &RunDir,
    settings: &SoakSettings,
) -> anyhow::Result<SoakReport> {
    let first_half = settings.hosts / 2;
    let options = RecoverySettings {
        scenario: Scenario {
            name: format!("soak-{}", settings.hosts),
            failed_hosts: first_half.max(1),
            instances_per_host: settings.instances_per_host,
            surviving_hosts: settings.hosts.saturating_sub(first_half).max(1),
            bfv_fraction: 0.0,
            nova_outage_secs: None,
            nova_outage_at: 1.0,
        },
        timing: TimingModel::default(),
        speed: settings.speed,
        seed: settings.seed,
        backend: Backend::Sqlite,
        timeout: None,
    };
    let began = Instant::now();
    let mut cloud = Cloud::start(binaries, dir, &options).await?;
    let mut report = SoakReport {
        settings: Some(settings.clone()),
        ..SoakReport::default()
    };
    let result = soak(&mut cloud, &options.scenario, settings, &mut report).await;
    cloud
        .control
        .save_requests(&dir.path.join("sim-requests.json"))
        .await;
    cloud.stop().await;
    result?;
    report.real_secs = began.elapsed().as_secs_f64();
    Ok(report)
}

async fn soak(
    cloud: &mut Cloud,
    scenario: &Scenario,
    settings: &SoakSettings,
    report: &mut SoakReport,
) -> anyhow::Result<()> {
    let channel = cloud.channel.clone();
    let segment = register_segment(channel.clone(), scenario).await?;
    SegmentServiceClient::new(channel.clone())
        .update_segment(pb::UpdateSegmentRequest {
            id: segment.id.clone(),
            return_to_service: Some(pb::ReturnToService::Auto as i32),
            ..Default::default()
        })
        .await
        .context("setting return_to_service = auto")?;
    cloud.control.nova_errors(settings.nova_errors).await?;
    let mut notifications = NotificationServiceClient::new(channel);
    let mut hosts: BTreeMap<String, HostState> = scenario
        .hosts()
        .into_iter()
        .map(|h| (h, HostState::InService))
        .collect();
    let began = Instant::now();
    let (mut next_failure, mut next_sample, mut turn) = (began, began, 0usize);
    let end = began + settings.duration;
    let drained = end + settings.drain;
    loop {
        cloud.check_alive()?;
        let now_at = Instant::now();
        if now_at >= next_sample {
            sample_memory(cloud, began, report);
            next_sample += Duration::from_secs(60);
        }
        advance(cloud, &mut notifications, &mut hosts, report).await?;
        if now_at < end && now_at >= next_failure {
            fail_next(cloud, &mut notifications, &mut hosts, &mut turn, report).await?;
            next_failure += settings.every;
        }
        let settled = hosts.values().all(|s| *s == HostState::InService);
        if (now_at >= end && settled) || now_at >= drained {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    sample_memory(cloud, began, report);
    judge(cloud, &mut notifications, &segment.id, &hosts, report).await
}

/// Moves each host on once its notification has ended: a recovered host is
/// repaired and reports STARTED; a returned one is in service again.
async fn advance(
    cloud: &Cloud,
    notifications: &mut NotificationServiceClient<Channel>,
    hosts: &mut BTreeMap<String, HostState>,
    report: &mut SoakReport,
) -> anyhow::Result<()> {
    for (host, state) in hosts.iter_mut() {
        let id = match state {
            HostState::InService => continue,
            HostState::Failed(id) | HostState::Returning(id) => id.clone(),
        };
        let n = notifications
            .get_notification(pb::GetNotificationRequest { id: id.clone() })
            .await
            .context("reading a notification")?
            .into_inner();
        if !is_final(n.status) {
            continue;
        }
        let finished = n.status == pb::NotificationStatus::Finished as i32;
        match state {
            HostState::Failed(_) => {
                if !finished {
                    report.problems.push(format!(
                        "the recovery of {host} ended {}: {}",
                        status_name(n.status),
                        n.message
                    ));
                }
                cloud.control.power_on(host).await?;
                *state = match send(notifications, host, "STARTED", report).await? {
                    Some(id) => HostState::Returning(id),
                    None => HostState::InService,
                };
            }
            HostState::Returning(_) if finished => {
                report.returns += 1;
                *state = HostState::InService;
            }
            HostState::Returning(_) => {
                // Its nova-compute did not report in time: the agent reports
                // again, as it would.
                *state = match send(notifications, host, "STARTED", report).await? {
                    Some(id) => HostState::Returning(id),
                    None => HostState::InService,
                };
            }
            HostState::InService => {}
        }
    }
    Ok(())
}

/// Fails the next host in service, in turn.
async fn fail_next(
    cloud: &Cloud,
    notifications: &mut NotificationServiceClient<Channel>,
    hosts: &mut BTreeMap<String, HostState>,
    turn: &mut usize,
    report: &mut SoakReport,
) -> anyhow::Result<()> {
    let names: Vec<String> = hosts.keys().cloned().collect();
    for offset in 0..names.len() {
        let host = &names[(*turn + offset) % names.len()];
        if hosts[host] != HostState::InService {
            continue;
        }
        *turn = (*turn + offset + 1) % names.len();
        cloud.control.power_off(host).await?;
        report.failures += 1;
        if let Some(id) = send(notifications, host, "STOPPED", report).await? {
            hosts.insert(host.clone(), HostState::Failed(id));
        }
        return Ok(());
    }
    report
        .problems
        .push("no host in service to fail: recoveries are not keeping up".to_owned());
    Ok(())
}

/// A fenced report of `event` for `host`, as its agent sends it; `None`
/// when refused (counted by code).
async fn send(
    notifications: &mut NotificationServiceClient<Channel>,
    host: &str,
    event: &str,
    report: &mut SoakReport,
) -> anyhow::Result<Option<String>> {
    let payload = [
        ("event", event),
        ("host_status", "NORMAL"),
        ("cluster_status", "OFFLINE"),
    ];
    let answer = notifications
        .create_notification(pb::CreateNotificationRequest {
            r#type: pb::NotificationType::ComputeHost as i32,
            hostname: host.to_owned(),
            generated_time: Some(now()),
            payload: payload
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            idempotency_key: String::new(),
        })
        .await;
    match answer {
        Ok(n) => Ok(Some(n.into_inner().id)),
        Err(status) => {
            *report
                .refused
                .entry(format!("{:?}", status.code()))
                .or_default() += 1;
            report.problems.push(format!(
                "the {event} report of {host} was refused: {}",
                status.message()
            ));
            Ok(None)
        }
    }
}

fn sample_memory(cloud: &Cloud, began: Instant, report: &mut SoakReport) {
    let usage = cloud.usage();
    let mib = |u: Option<crate::procs::Usage>| u.map_or(0.0, |u| u.rss_kib as f64 / 1024.0);
    report.memory.push((
        began.elapsed().as_secs_f64() / 60.0,
        mib(usage.api),
        mib(usage.engine),
    ));
}

/// The end: every report finished, every instance in place, memory flat.
async fn judge(
    cloud: &Cloud,
    notifications: &mut NotificationServiceClient<Channel>,
    segment_id: &str,
    hosts: &BTreeMap<String, HostState>,
    report: &mut SoakReport,
) -> anyhow::Result<()> {
    for n in list_notifications(notifications, segment_id).await? {
        let status = if is_final(n.status) {
            status_name(n.status)
        } else {
            "unfinished".to_owned()
        };
        *report.statuses.entry(status).or_default() += 1;
    }
    for (status, count) in &report.statuses {
        if status != "finished" {
            report
                .problems
                .push(format!("{count} notification(s) ended {status}"));
        }
    }
    let world = cloud.control.state().await?;
    report.instances = world.instances.len();
    for server in &world.instances {
        let in_service = server
            .host
            .as_ref()
            .is_some_and(|h| hosts.get(h) == Some(&HostState::InService));
        if server.vm_state != "active" || server.locked || !in_service {
            report.misplaced.push(format!(
                "{} ({}): {} on {:?}, locked {}",
                server.name, server.id, server.vm_state, server.host, server.locked
            ));
        }
    }
    if !report.misplaced.is_empty() {
        report.problems.push(format!(
            "{} instance(s) not ACTIVE and unlocked on a host in service",
            report.misplaced.len()
        ));
    }
    report.nova_calls_answered_503 = cloud.control.fault_hits().await?;
    if let (Some(first), Some(last)) = (report.memory.first(), report.memory.last()) {
        for (name, a, b) in [("api", first.1, last.1), ("engine", first.2, last.2)] {
            if b > a * 1.5 + 16.0 {
                report.problems.push(format!(
                    "instanceha-{name} grew from {a:.1} MiB to {b:.1} MiB"
                ));
            }
        }
    }
    Ok(())
}

/// The soak's report as Markdown.
pub fn table(report: &SoakReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "| soak | |\n|---|---|");
    if let Some(s) = &report.settings {
        let _ = writeln!(
            out,
            "| run | {:.0} s of failures every {} s on {} hosts, {:.0} % of Nova calls 503, speed {} |",
            s.duration.as_secs_f64(),
            s.every.as_secs(),
            s.hosts,
            s.nova_errors * 100.0,
            s.speed
        );
    }
    let _ = writeln!(out, "| wall time | {:.0} s |", report.real_secs);
    let _ = writeln!(out, "| host failures reported | {} |", report.failures);
    let _ = writeln!(out, "| hosts returned to service | {} |", report.returns);
    let _ = writeln!(out, "| notifications | {:?} |", report.statuses);
    let _ = writeln!(out, "| reports refused | {:?} |", report.refused);
    let _ = writeln!(
        out,
        "| instances ACTIVE, unlocked, on a host in service | {} of {} |",
        report.instances - report.misplaced.len(),
        report.instances
    );
    let _ = writeln!(
        out,
        "| Nova calls answered 503 | {} |",
        report.nova_calls_answered_503
    );
    let memory: Vec<String> = report
        .memory
        .iter()
        .map(|(m, a, e)| format!("{m:.0} min: api {a:.1} MiB, engine {e:.1} MiB"))
        .collect();
    let _ = writeln!(out, "| memory (RSS) | {} |", memory.join("; "));
    let verdict = if report.ok() {
        "ok".to_owned()
    } else {
        report.problems.join("; ")
    };
    let _ = writeln!(out, "| verdict | {verdict} |");
    out
}
