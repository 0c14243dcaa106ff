//! A recovery run: start the cloud, register the segment, power the
//! failed hosts off, let Nova see them down, send one fenced COMPUTE_HOST
//! STOPPED report per host (all at once), wait until every notification is
//! final, then measure.
//!
//! What is measured, and from what:
//!
//! * recovery wall time: the API's `created_at` of the first notification
//!   to the `updated_at` of the last final one (the API stamps both), and
//!   its ratio to the simulator's `ideal_makespan` (what simulated Nova
//!   alone needs for the same evacuations requested at one instant),
//!   converted to real time by the speed factor;
//! * dispatch latency, per notification: `created_at` to the first
//!   evacuate request the simulator received for an instance of that host
//!   (its `requested_at`, converted to wall-clock time with `/sim/clock`);
//! * per-instance recovery time: each vmove's `start_time` to `end_time`
//!   (the engine's stamps), and the instance's downtime after the report:
//!   the notification's `created_at` to the vmove's `end_time`; both also
//!   split into boot-from-volume and image-backed instances;
//! * peak resident memory (VmHWM) and CPU time of each process, read while
//!   they still run.
//!
//! Durations of the recovery are given in cloud seconds: real seconds times
//! the speed factor (equal at speed 1). Dispatch latency is in real
//! milliseconds.
//!
//! The run also checks the outcome: every notification FINISHED, every
//! vmove SUCCEEDED, and in the simulator every HA server ACTIVE on a
//! surviving host, unlocked, with no task; anything else is listed in
//! `problems`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use futures::{StreamExt as _, TryStreamExt as _};
use instanceha_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use pb::vmove_service_client::VmoveServiceClient;
use serde::Serialize;

use crate::cloud::{Cloud, ProcessUsage, RunDir, create_segment};
use crate::db::Backend;
use crate::procs::Binaries;
use crate::scenario::{Scenario, TimingModel};
use crate::sim::{Clock, SimControl};
use crate::stats::Summary;

mod figures;

use figures::{dispatch_latency, misplaced_servers, per_instance, recovery_wall, statuses};

/// How to run one scenario.
#[derive(Clone, Debug)]
pub struct RecoverySettings {
    pub scenario: Scenario,
    pub timing: TimingModel,
    pub speed: f64,
    pub seed: u64,
    pub backend: Backend,
    /// Give up after this (real time); default: from the ideal.
    pub timeout: Option<Duration>,
}

/// The figures of one recovery run.
#[derive(Clone, Debug, Serialize)]
pub struct RecoveryReport {
    pub scenario: Scenario,
    pub database: String,
    pub speed: f64,
    pub seed: u64,
    pub timing: TimingModel,
    pub notifications: usize,
    pub instances: usize,
    pub notification_statuses: BTreeMap<String, usize>,
    pub vmove_statuses: BTreeMap<String, usize>,
    /// First notification created to last notification final (cloud s).
    pub recovery_wall_secs: f64,
    /// Simulated Nova's ideal for the same evacuations (cloud s).
    pub ideal_makespan_secs: Option<f64>,
    pub ratio_to_ideal: Option<f64>,
    /// Simulated Nova's first evacuate request to last done (cloud s).
    pub nova_makespan_secs: Option<f64>,
    /// Per notification: created to final (cloud s).
    pub notification_wall_secs: Option<Summary>,
    /// Per notification: created to its first evacuate request (real ms).
    pub dispatch_latency_ms: Option<Summary>,
    /// Per instance: vmove start to end (cloud s).
    pub instance_recovery_secs: Option<Summary>,
    pub instance_recovery_bfv_secs: Option<Summary>,
    pub instance_recovery_image_secs: Option<Summary>,
    /// Per instance: notification created to vmove end (cloud s).
    pub instance_downtime_secs: Option<Summary>,
    pub instance_downtime_bfv_secs: Option<Summary>,
    pub instance_downtime_image_secs: Option<Summary>,
    /// Evacuations the simulator saw: done, failed, still in progress.
    pub evacuations_done: usize,
    pub evacuations_failed: usize,
    pub evacuations_in_progress: usize,
    /// Peak memory and CPU per process.
    pub usage: ProcessUsage,
    /// Calls the nova-api outage answered 503 (scenarios `-outageS`).
    pub outage_calls_struck: Option<u64>,
    /// What went wrong, if anything (empty: all recovered).
    pub problems: Vec<String>,
    /// Real seconds the whole run took, set-up included.
    pub run_real_secs: f64,
}

impl RecoveryReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

fn timestamp(t: &Option<prost_types::Timestamp>) -> Option<DateTime<Utc>> {
    instanceha_proto::time::optional("time", *t).ok().flatten()
}

fn secs_between(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

pub(crate) fn now() -> prost_types::Timestamp {
    instanceha_proto::time::timestamp(Utc::now())
}

pub(crate) fn status_name(status: i32) -> String {
    pb::NotificationStatus::try_from(status)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("NOTIFICATION_STATUS_")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| format!("unknown-{status}"))
}

fn vmove_status_name(status: i32) -> String {
    pb::VmoveStatus::try_from(status)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("VMOVE_STATUS_")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| format!("unknown-{status}"))
}

pub(crate) fn is_final(status: i32) -> bool {
    matches!(
        pb::NotificationStatus::try_from(status),
        Ok(pb::NotificationStatus::Finished
            | pb::NotificationStatus::Failed
            | pb::NotificationStatus::Ignored)
    )
}

/// Runs one scenario end to end.
pub async fn run(
    binaries: &Binaries,
    dir: &RunDir,
    options: &RecoverySettings,
) -> anyhow::Result<RecoveryReport> {
    let began = Instant::now();
    let mut cloud = Cloud::start(binaries, dir, options).await?;
    let result = measure(&mut cloud, options, began, &dir.path).await;
    let final_usage = cloud.stop().await;
    let mut report = result?;
    // The usage read while running is the one reported; fill gaps.
    if report.usage.api.is_none() {
        report.usage.api = final_usage.api;
    }
    if report.usage.engine.is_none() {
        report.usage.engine = final_usage.engine;
    }
    if report.usage.sim.is_none() {
        report.usage.sim = final_usage.sim;
    }
    report.run_real_secs = began.elapsed().as_secs_f64();
    Ok(report)
}

/// A notification with the vmoves of its recovery.
pub(super) type Recovered = (pb::Notification, Vec<pb::Vmove>);

async fn measure(
    cloud: &mut Cloud,
    options: &RecoverySettings,
    began: Instant,
    run_dir: &std::path::Path,
) -> anyhow::Result<RecoveryReport> {
    let scenario = &options.scenario;
    let speed = options.speed;
    let channel = cloud.channel.clone();
    let mut notifications = NotificationServiceClient::new(channel.clone());
    let segment = register_segment(channel.clone(), scenario).await?;
    let (failed, clock) = fail_hosts(&cloud.control, scenario, &options.timing).await?;
    let created = report_failures(&notifications, &failed).await?;
    nova_outage(cloud, scenario, speed).await?;

    let timeout = options.timeout.unwrap_or_else(|| default_timeout(options));
    let finals = wait_until_final(
        cloud,
        &mut notifications,
        &segment.id,
        created.len(),
        timeout,
    )
    .await?;
    // Peak memory while the services still run.
    let usage = cloud.usage();

    cloud
        .control
        .save_requests(&run_dir.join("sim-requests.json"))
        .await;
    let stats = cloud.control.stats().await?;
    let world = cloud.control.state().await?;
    let vmoves = vmoves_of(channel, &finals).await?;
    let mut problems = Vec::new();
    let outage_calls_struck = outage_struck(cloud, scenario, &mut problems).await?;
    let (notification_statuses, vmove_statuses) =
        statuses(&vmoves, scenario.instances(), &mut problems);
    misplaced_servers(&world, &mut problems);
    let (recovery_wall_secs, notification_wall) = recovery_wall(&finals, speed)?;
    let dispatch = dispatch_latency(&finals, &stats, &clock, &mut problems)?;
    let (recovery, downtime) = per_instance(&vmoves, &world, speed)?;

    Ok(RecoveryReport {
        scenario: scenario.clone(),
        database: options.backend.name().to_owned(),
        speed,
        seed: options.seed,
        timing: options.timing.clone(),
        notifications: finals.len(),
        instances: scenario.instances(),
        notification_statuses,
        vmove_statuses,
        recovery_wall_secs,
        ideal_makespan_secs: stats.ideal_makespan,
        ratio_to_ideal: stats.ratio_to_ideal(recovery_wall_secs),
        nova_makespan_secs: stats.makespan,
        notification_wall_secs: Summary::of(&notification_wall),
        dispatch_latency_ms: Summary::of(&dispatch),
        instance_recovery_secs: Summary::of(&recovery.0),
        instance_recovery_bfv_secs: Summary::of(&recovery.1),
        instance_recovery_image_secs: Summary::of(&recovery.2),
        instance_downtime_secs: Summary::of(&downtime.0),
        instance_downtime_bfv_secs: Summary::of(&downtime.1),
        instance_downtime_image_secs: Summary::of(&downtime.2),
        evacuations_done: stats.done,
        evacuations_failed: stats.failed,
        evacuations_in_progress: stats.in_progress,
        usage,
        outage_calls_struck,
        problems,
        run_real_secs: began.elapsed().as_secs_f64(),
    })
}

/// The segment and its hosts.
pub(crate) async fn register_segment(
    channel: tonic::transport::Channel,
    scenario: &Scenario,
) -> anyhow::Result<pb::Segment> {
    let hosts_client = HostServiceClient::new(channel.clone());
    let segment = create_segment(
        channel,
        format!("bench-{}", scenario.name),
        Some("instanceha-bench".into()),
    )
    .await?;
    futures::stream::iter(scenario.hosts())
        .map(|name| {
            let mut client = hosts_client.clone();
            let segment_id = segment.id.clone();
            async move {
                client
                    .create_host(pb::CreateHostRequest {
                        segment_id,
                        name: name.clone(),
                        r#type: "COMPUTE".into(),
                        control_attributes: "SSH".into(),
                        reserved: false,
                        on_maintenance: false,
                    })
                    .await
                    .with_context(|| format!("registering host {name}"))
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(segment)
}

/// The failure: power off, and let Nova see the hosts down before the
/// monitors report (Masakari's hostmonitor takes a minute or more to
/// decide anyway); the clock jumps instead of waiting. The failed hosts,
/// and the simulator's clock after the jump. (Masakari's run fails them
/// alike.)
pub(crate) async fn fail_hosts(
    control: &SimControl,
    scenario: &Scenario,
    timing: &TimingModel,
) -> anyhow::Result<(Vec<String>, Clock)> {
    let failed: Vec<String> = (0..scenario.failed_hosts)
        .map(|i| scenario.failed_host(i))
        .collect();
    for host in &failed {
        control.power_off(host).await?;
    }
    control
        .advance(timing.service_down_time + timing.report_interval + 1.0)
        .await?;
    Ok((failed, control.clock().await?))
}

/// A nova-api outage during the recovery (scenario `-outageS[@T]`): from
/// T cloud seconds after the reports, for S cloud seconds.
async fn nova_outage(cloud: &Cloud, scenario: &Scenario, speed: f64) -> anyhow::Result<()> {
    if let Some(secs) = scenario.nova_outage_secs {
        tokio::time::sleep(Duration::from_secs_f64(scenario.nova_outage_at / speed)).await;
        cloud.control.nova_outage(secs).await?;
    }
    Ok(())
}

/// How many calls the scenario's nova-api outage struck; none is a
/// problem.
async fn outage_struck(
    cloud: &Cloud,
    scenario: &Scenario,
    problems: &mut Vec<String>,
) -> anyhow::Result<Option<u64>> {
    let struck = match scenario.nova_outage_secs {
        Some(_) => Some(cloud.control.fault_hits().await?),
        None => None,
    };
    if struck == Some(0) {
        problems.push("the nova-api outage struck no call".to_owned());
    }
    Ok(struck)
}

/// Each final notification with its vmoves.
async fn vmoves_of(
    channel: tonic::transport::Channel,
    finals: &[pb::Notification],
) -> anyhow::Result<Vec<Recovered>> {
    let client = VmoveServiceClient::new(channel);
    let mut vmoves = Vec::new();
    for n in finals {
        let list = list_vmoves(&mut client.clone(), &n.id).await?;
        vmoves.push((n.clone(), list));
    }
    Ok(vmoves)
}

/// The reports, all at once.
async fn report_failures(
    notifications: &NotificationServiceClient<tonic::transport::Channel>,
    failed: &[String],
) -> anyhow::Result<Vec<pb::Notification>> {
    futures::future::try_join_all(failed.iter().map(|host| {
        let mut client = notifications.clone();
        let host = host.clone();
        async move {
            client
                .create_notification(pb::CreateNotificationRequest {
                    r#type: pb::NotificationType::ComputeHost as i32,
                    hostname: host.clone(),
                    generated_time: Some(now()),
                    payload: [
                        ("event", "STOPPED"),
                        ("host_status", "NORMAL"),
                        ("cluster_status", "OFFLINE"),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                    idempotency_key: format!("bench-{host}"),
                })
                .await
                .map(tonic::Response::into_inner)
                .with_context(|| format!("reporting {host}"))
        }
    }))
    .await
}

/// Waits until `expected` notifications of the segment are final, the
/// services alive; fails after `timeout`.
async fn wait_until_final(
    cloud: &mut Cloud,
    notifications: &mut NotificationServiceClient<tonic::transport::Channel>,
    segment_id: &str,
    expected: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<pb::Notification>> {
    let deadline = Instant::now() + timeout;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cloud.check_alive()?;
        let listed = list_notifications(notifications, segment_id).await?;
        let done = listed.iter().filter(|n| is_final(n.status)).count();
        if done >= expected {
            return Ok(listed);
        }
        if Instant::now() > deadline {
            bail!(
                "{} of {} notifications final after {:?}; logs in the run directory",
                done,
                expected,
                timeout
            );
        }
    }
}

/// Ten times what Nova needs (waves of rebuilds on each survivor), at
/// least a minute, in real time.
fn default_timeout(options: &RecoverySettings) -> Duration {
    let s = &options.scenario;
    let t = &options.timing;
    let per_survivor = s.instances().div_ceil(s.surviving_hosts.max(1));
    let waves = per_survivor.div_ceil(t.rebuild_concurrency.max(1)) as f64;
    let nova = t.schedule + waves * (t.rebuild_secs() - t.schedule);
    let outage = s
        .nova_outage_secs
        .map_or(0.0, |secs| secs + s.nova_outage_at);
    Duration::from_secs_f64(
        (10.0 * nova * (1.0 + t.jitter) / options.speed).max(60.0) + 60.0 + outage / options.speed,
    )
}

pub(crate) async fn list_notifications(
    client: &mut NotificationServiceClient<tonic::transport::Channel>,
    segment_id: &str,
) -> anyhow::Result<Vec<pb::Notification>> {
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_notifications(pb::ListNotificationsRequest {
                page_size: 1000,
                page_token: token.clone(),
                segment_id: Some(segment_id.to_owned()),
                ..Default::default()
            })
            .await
            .context("listing notifications")?
            .into_inner();
        all.extend(page.notifications);
        if page.next_page_token.is_empty() {
            return Ok(all);
        }
        token = page.next_page_token;
    }
}

async fn list_vmoves(
    client: &mut VmoveServiceClient<tonic::transport::Channel>,
    notification_id: &str,
) -> anyhow::Result<Vec<pb::Vmove>> {
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_vmoves(pb::ListVmovesRequest {
                notification_id: notification_id.to_owned(),
                page_size: 1000,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .context("listing vmoves")?
            .into_inner();
        all.extend(page.vmoves);
        if page.next_page_token.is_empty() {
            return Ok(all);
        }
        token = page.next_page_token;
    }
}
