//! A recovery scenario run by Masakari itself: the same simulated cloud
//! (scenario file, timing model, seed) as instance-ha's run, always at speed
//! 1, since Masakari's own waits (180 s after disabling a service, a read
//! per second for at most 90 s) are real seconds that no setting of ours may
//! scale. Masakari runs with its defaults.
//!
//! The run registers the segment and hosts through Masakari's API, powers
//! the failed hosts off, lets Nova see them down (the clock jumps, as in
//! instance-ha's run), sends one fenced COMPUTE_HOST STOPPED report per host
//! at once, as masakari-hostmonitor does, and waits until every notification
//! is final (`finished`, `failed` or `ignored`; `error` is retried by
//! Masakari's periodic task, once). Then it measures as instance-ha's run
//! does, and checks the outcome in the simulator, not in what Masakari
//! says: a notification `finished` with a server left on the dead host
//! counts as not recovered.
//!
//! Times are taken from the moment each report was sent (Masakari's API
//! sleeps 0–5 s before it creates a notification), from Masakari's own
//! stamps (`updated_at` in whole seconds, a vmove's start and end to the
//! microsecond) and from the simulator's evacuation records.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use futures::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;
use serde_json::json;

use super::rest::{MasakariRest, Notification, VMove, parse_time};
use super::runner::{CloudAccess, Masakari, MasakariSettings, MasakariUsage};
use crate::cloud::{RunDir, start_sim};
use crate::procs::{Binaries, Usage};
use crate::recovery::fail_hosts;
use crate::scenario::{Scenario, TimingModel};
use crate::sim::{Clock, Stats, World};
use crate::stats::Summary;

/// What Masakari's recovery run measured (cloud seconds = real seconds).
#[derive(Clone, Debug, Serialize)]
pub struct MasakariRecoveryReport {
    pub scenario: Scenario,
    pub masakari_version: String,
    pub speed: f64,
    pub seed: u64,
    pub timing: TimingModel,
    pub notifications: usize,
    pub instances: usize,
    pub notification_statuses: BTreeMap<String, usize>,
    pub vmove_statuses: BTreeMap<String, usize>,
    /// HA servers ACTIVE on a surviving host, unlocked, without a task.
    pub recovered: usize,
    pub not_recovered: usize,
    /// Servers left locked.
    pub locked: usize,
    /// Every notification final before the run's timeout.
    pub all_final: bool,
    /// The first report sent to the last notification final (Masakari's
    /// `updated_at`, whole seconds, or its last vmove's end if later); when
    /// some never ended, to the last change the run saw.
    pub recovery_wall_secs: f64,
    /// The first report sent to the last succeeded vmove's end.
    pub last_instance_back_secs: Option<f64>,
    pub ideal_makespan_secs: Option<f64>,
    pub ratio_to_ideal: Option<f64>,
    pub nova_makespan_secs: Option<f64>,
    /// Per report: sent to answered (202), Masakari's random delay and the
    /// insert.
    pub create_delay_secs: Option<Summary>,
    /// Per report: sent to the first evacuate request for its host.
    pub dispatch_latency_secs: Option<Summary>,
    /// Per succeeded vmove: start to end.
    pub instance_recovery_secs: Option<Summary>,
    pub instance_recovery_bfv_secs: Option<Summary>,
    pub instance_recovery_image_secs: Option<Summary>,
    /// Per succeeded vmove: its report sent to the vmove's end.
    pub instance_downtime_secs: Option<Summary>,
    pub instance_downtime_bfv_secs: Option<Summary>,
    pub instance_downtime_image_secs: Option<Summary>,
    pub evacuations_done: usize,
    pub evacuations_failed: usize,
    pub evacuations_in_progress: usize,
    pub usage: MasakariUsage,
    pub sim_usage: Option<Usage>,
    /// Everything that is not a full recovery, in Masakari's words where it
    /// has some.
    pub problems: Vec<String>,
    pub run_real_secs: f64,
}

/// One run of `scenario` by Masakari.
pub async fn run(
    binaries: &Binaries,
    dir: &RunDir,
    settings: &MasakariSettings,
    scenario: &Scenario,
    timing: &TimingModel,
    seed: u64,
    timeout: Option<Duration>,
) -> anyhow::Result<MasakariRecoveryReport> {
    let began = Instant::now();
    let speed = 1.0;
    let (mut sim, control) = start_sim(
        binaries,
        dir,
        &scenario.sim_toml(timing, speed, seed, dir.request_log_capacity),
    )
    .await?;
    let cloud = CloudAccess::simulator(control.auth_url());
    let masakari = match Masakari::start(settings, &cloud, &dir.path.join("masakari"), true).await {
        Ok(m) => m,
        Err(e) => {
            let _ = sim.stop().await;
            return Err(e);
        }
    };
    let mut masakari = masakari;
    let result = measure(
        &mut masakari,
        &mut sim,
        &control,
        &cloud,
        scenario,
        timing,
        seed,
        timeout,
        dir,
    )
    .await;
    let usage_at_end = masakari.stop().await;
    let sim_usage = sim.stop().await.ok();
    let mut report = result?;
    report.usage.api = report.usage.api.or(usage_at_end.api);
    report.usage.engine = report.usage.engine.or(usage_at_end.engine);
    report.usage.rabbitmq = report.usage.rabbitmq.or(usage_at_end.rabbitmq);
    report.sim_usage = report.sim_usage.or(sim_usage);
    report.run_real_secs = began.elapsed().as_secs_f64();
    Ok(report)
}

/// How long nothing may change (notification statuses, evacuations asked
/// for and ended) before the run stops waiting: longer than any wait of
/// Masakari's own (180 s after a service update, 90 s per evacuation, the
/// retry scan every 120 s).
const STALL: Duration = Duration::from_secs(900);

/// Masakari's worst case for the scenario, with its one retry, plus ten
/// minutes: 180 s, then a third of a host's instances after another, each
/// at most 90 s; the RPC executor runs 64 notifications at a time; the
/// retry waits for the next periodic scan (120 s).
fn default_timeout(scenario: &Scenario) -> Duration {
    let per_host = 180.0 + scenario.instances_per_host.div_ceil(3) as f64 * 95.0;
    let rounds = scenario.failed_hosts.div_ceil(64) as f64;
    Duration::from_secs_f64(rounds * (2.0 * per_host + 120.0) + 600.0)
}

/// A report sent: its host, when it was sent, Masakari's notification,
/// and the seconds Masakari took to answer.
type Sent = (String, DateTime<Utc>, Notification, f64);

/// A final notification, when its report was sent, and its vmoves.
type Recovered = (Notification, DateTime<Utc>, Vec<VMove>);

/// Per instance, in all, booted from volume, and image-backed (s).
type Split = (Vec<f64>, Vec<f64>, Vec<f64>);

/// Where waiting for the notifications ended.
struct Waited {
    /// Our notifications as last listed.
    finals: Vec<Notification>,
    all_final: bool,
    /// When anything last moved.
    moved_at: DateTime<Utc>,
    /// When the waiting ended.
    seen_final: DateTime<Utc>,
}

impl Waited {
    /// When the recovery ended: the last notification's end if all are
    /// final (when the waiting saw it, without a stamp), else when
    /// anything last moved.
    fn ended(&self, vmoves: &[Recovered]) -> DateTime<Utc> {
        if self.all_final {
            last_final(&self.finals, vmoves).unwrap_or(self.seen_final)
        } else {
            self.moved_at
        }
    }
}

/// When the first report was sent.
fn first_sent(sent: &[Sent]) -> DateTime<Utc> {
    sent.iter()
        .map(|(_, at, _, _)| *at)
        .min()
        .unwrap_or_else(Utc::now)
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    masakari: &mut Masakari,
    sim: &mut crate::procs::Service,
    control: &crate::sim::SimControl,
    cloud: &CloudAccess,
    scenario: &Scenario,
    timing: &TimingModel,
    seed: u64,
    timeout: Option<Duration>,
    dir: &RunDir,
) -> anyhow::Result<MasakariRecoveryReport> {
    let api = MasakariRest::connect(&masakari.url, cloud, 16).await?;
    let hosts = register_segment(&api, scenario).await?;

    let (failed, clock) = fail_hosts(control, scenario, timing).await?; // as in instance-ha's run
    let sent = report_failures(&api, &failed).await?;
    let first_sent = first_sent(&sent);
    let timeout = timeout.unwrap_or_else(|| default_timeout(scenario));
    let mut problems = Vec::new();
    let waited =
        wait_until_final(masakari, sim, control, &api, &sent, timeout, &mut problems).await?;
    let usage = masakari.usage();
    let sim_usage = sim.usage().ok();

    control
        .save_requests(&dir.path.join("sim-requests.json"))
        .await;
    let stats = control.stats().await?;
    let world = control.state().await?;
    let vmoves = vmoves_of(&api, &waited.finals, &sent, first_sent, dir).await?;
    let (notification_statuses, vmove_statuses) = statuses(&vmoves, &hosts, &mut problems);
    let (not_recovered, locked) = outcome_in_the_cloud(&world, &mut problems);
    let recovered = world.instances.len() - not_recovered;
    let recovery_wall_secs = secs(first_sent, waited.ended(&vmoves));
    let (dispatch, create_delay) = dispatch_latency(&sent, &stats, &clock, &mut problems);
    let (recovery, downtime, last_back) = per_instance(&vmoves, &world);

    Ok(MasakariRecoveryReport {
        scenario: scenario.clone(),
        masakari_version: masakari.version.clone(),
        speed: 1.0,
        seed,
        timing: timing.clone(),
        notifications: waited.finals.len(),
        instances: scenario.instances(),
        notification_statuses,
        vmove_statuses,
        recovered,
        not_recovered,
        locked,
        all_final: waited.all_final,
        recovery_wall_secs,
        last_instance_back_secs: last_back.map(|b| secs(first_sent, b)),
        ideal_makespan_secs: stats.ideal_makespan,
        ratio_to_ideal: stats.ratio_to_ideal(recovery_wall_secs),
        nova_makespan_secs: stats.makespan,
        create_delay_secs: Summary::of(&create_delay),
        dispatch_latency_secs: Summary::of(&dispatch),
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
        sim_usage,
        problems,
        run_real_secs: 0.0,
    })
}

/// The segment and its hosts, through Masakari's API: each host's name by
/// its uuid.
async fn register_segment(
    api: &MasakariRest,
    scenario: &Scenario,
) -> anyhow::Result<HashMap<String, String>> {
    let segment = api
        .create_segment(&format!("bench-{}", scenario.name))
        .await?;
    futures::stream::iter(scenario.hosts())
        .map(|name| {
            let api = api.clone();
            let segment = segment.clone();
            async move {
                let uuid = api
                    .create_host(&segment, &name)
                    .await
                    .with_context(|| format!("registering host {name}"))?;
                Ok::<_, anyhow::Error>((uuid, name))
            }
        })
        .buffer_unordered(8)
        .try_collect()
        .await
}

/// The reports, all at once; each answered after Masakari's delay.
async fn report_failures(api: &MasakariRest, failed: &[String]) -> anyhow::Result<Vec<Sent>> {
    futures::future::try_join_all(failed.iter().map(|host| {
        let api = api.clone();
        let host = host.clone();
        async move {
            let at = Utc::now();
            let clock = Instant::now();
            let answer = api
                .create_notification(
                    "COMPUTE_HOST",
                    &host,
                    at,
                    json!({"event": "STOPPED", "host_status": "NORMAL", "cluster_status": "OFFLINE"}),
                )
                .await?;
            let answered = clock.elapsed().as_secs_f64();
            if !answer.status.is_success() {
                bail!("reporting {host}: {}: {}", answer.status, answer.body);
            }
            let n: Notification = serde_json::from_value(answer.body["notification"].clone())
                .with_context(|| format!("reading the notification for {host}"))?;
            Ok((host, at, n, answered))
        }
    }))
    .await
}

/// Until every notification is final, the time is up, or nothing has
/// moved for `STALL` (a notification Masakari leaves `running` after an
/// error stays so until its 24-hour expiry); giving up is a problem.
async fn wait_until_final(
    masakari: &mut Masakari,
    sim: &mut crate::procs::Service,
    control: &crate::sim::SimControl,
    api: &MasakariRest,
    sent: &[Sent],
    timeout: Duration,
    problems: &mut Vec<String>,
) -> anyhow::Result<Waited> {
    let deadline = Instant::now() + timeout;
    let ours: Vec<&str> = sent
        .iter()
        .map(|(_, _, n, _)| n.notification_uuid.as_str())
        .collect();
    let mut progress = (Vec::new(), 0usize, 0usize);
    let mut moved = Instant::now();
    let mut moved_at = Utc::now();
    let mut nova_read = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        masakari.check_alive()?;
        sim.check_alive()?;
        let listed: Vec<Notification> = api
            .notifications()
            .await?
            .into_iter()
            .filter(|n| ours.contains(&n.notification_uuid.as_str()))
            .collect();
        let done = listed.iter().filter(|n| n.is_final()).count();
        if done >= ours.len() {
            return Ok(Waited {
                finals: listed,
                all_final: true,
                moved_at,
                seen_final: Utc::now(),
            });
        }
        let mut statuses: Vec<String> = listed.iter().map(|n| n.status.clone()).collect();
        statuses.sort_unstable();
        let (mut requested, mut ended) = (progress.1, progress.2);
        if nova_read.elapsed() >= Duration::from_secs(30) {
            let stats = control.stats().await?;
            (requested, ended) = (stats.evacuations.len(), stats.done + stats.failed);
            nova_read = Instant::now();
        }
        let now = (statuses, requested, ended);
        if now != progress {
            progress = now;
            moved = Instant::now();
            moved_at = Utc::now();
        }
        let stalled = moved.elapsed() >= STALL;
        if stalled || Instant::now() > deadline {
            problems.push(gave_up(&listed, ours.len(), stalled, timeout));
            return Ok(Waited {
                finals: listed,
                all_final: false,
                moved_at,
                seen_final: Utc::now(),
            });
        }
    }
}

/// Why the run stopped waiting for `listed`, `total` notifications in all.
fn gave_up(listed: &[Notification], total: usize, stalled: bool, timeout: Duration) -> String {
    let done = listed.iter().filter(|n| n.is_final()).count();
    let waiting: BTreeMap<&str, usize> =
        listed
            .iter()
            .filter(|n| !n.is_final())
            .fold(BTreeMap::new(), |mut m, n| {
                *m.entry(n.status.as_str()).or_default() += 1;
                m
            });
    if stalled {
        format!(
            "{done} of {total} notifications final; the others ({waiting:?}) and Nova's evacuations \
             had not moved for {:.0} s",
            STALL.as_secs_f64()
        )
    } else {
        format!(
            "{done} of {total} notifications final after {:.0} s ({waiting:?} left)",
            timeout.as_secs_f64()
        )
    }
}

/// Each final notification's vmoves, with when its report was sent; all
/// of it also written to `masakari-notifications.json`.
async fn vmoves_of(
    api: &MasakariRest,
    finals: &[Notification],
    sent: &[Sent],
    first_sent: DateTime<Utc>,
    dir: &RunDir,
) -> anyhow::Result<Vec<Recovered>> {
    let mut vmoves: Vec<Recovered> = Vec::new();
    for n in finals {
        let list = api.vmoves(&n.notification_uuid).await?;
        let at = sent
            .iter()
            .find(|(_, _, s, _)| s.notification_uuid == n.notification_uuid)
            .map_or(first_sent, |(_, at, _, _)| *at);
        vmoves.push((n.clone(), at, list));
    }
    let _ = std::fs::write(
        dir.path.join("masakari-notifications.json"),
        serde_json::to_string_pretty(
            &vmoves
                .iter()
                .map(|(n, _, v)| json!({"notification": n, "vmoves": v}))
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default(),
    );
    Ok(vmoves)
}

/// How many notifications and vmoves ended in each status; a notification
/// not finished, and each kind of vmove not succeeded, is a problem.
fn statuses(
    vmoves: &[Recovered],
    hosts: &HashMap<String, String>,
    problems: &mut Vec<String>,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut notification_statuses = BTreeMap::new();
    let mut vmove_statuses = BTreeMap::new();
    for (n, _, list) in vmoves {
        *notification_statuses
            .entry(n.status.clone())
            .or_insert(0usize) += 1;
        let host = hosts.get(&n.source_host_uuid).map_or("?", String::as_str);
        if n.status != "finished" {
            problems.push(format!(
                "notification for {host} is {}: {}",
                n.status,
                n.message.as_deref().unwrap_or("")
            ));
        }
        for v in list {
            *vmove_statuses.entry(v.status.clone()).or_insert(0usize) += 1;
        }
        let mut failed_vmoves: BTreeMap<&str, usize> = BTreeMap::new();
        for v in list.iter().filter(|v| v.status != "succeeded") {
            *failed_vmoves
                .entry(v.message.as_deref().unwrap_or(""))
                .or_insert(0) += 1;
        }
        for (message, count) in failed_vmoves {
            problems.push(format!(
                "{count} vmove(s) of {host} not succeeded: {message:?}"
            ));
        }
    }
    (notification_statuses, vmove_statuses)
}

/// The outcome in the cloud, not in what Masakari says: the servers not
/// active on a survivor, unlocked, with no task (a problem each, the first
/// ten named), and the servers left locked.
fn outcome_in_the_cloud(world: &World, problems: &mut Vec<String>) -> (usize, usize) {
    let mut not_recovered = 0;
    let mut locked = 0;
    for s in &world.instances {
        locked += usize::from(s.locked);
        let on_survivor = s.host.as_deref().is_some_and(|h| h.starts_with("rack-b-"));
        if !(on_survivor && s.vm_state == "active" && s.task_state.is_none() && !s.locked) {
            not_recovered += 1;
            if not_recovered <= 10 {
                problems.push(format!(
                    "server {} is {} (task {:?}) on {:?}, locked {}",
                    s.name, s.vm_state, s.task_state, s.host, s.locked
                ));
            }
        }
    }
    if not_recovered > 10 {
        problems.push(format!("{not_recovered} servers not recovered in all"));
    }
    (not_recovered, locked)
}

fn secs(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

/// When the last notification ended. Masakari stamps a notification's end
/// in whole seconds; it ends after its last vmove, which is stamped to the
/// microsecond.
fn last_final(finals: &[Notification], vmoves: &[Recovered]) -> Option<DateTime<Utc>> {
    let last_vmove_end = vmoves
        .iter()
        .flat_map(|(_, _, list)| list.iter())
        .filter_map(|v| v.end_time.as_deref().and_then(parse_time))
        .max();
    finals
        .iter()
        .filter(|n| n.is_final())
        .filter_map(|n| n.updated_at.as_deref().and_then(parse_time))
        .chain(last_vmove_end)
        .max()
}

/// Per report: sent to the first evacuate request of its host (a host
/// without one is a problem), and how long Masakari took to answer it.
fn dispatch_latency(
    sent: &[Sent],
    stats: &Stats,
    clock: &Clock,
    problems: &mut Vec<String>,
) -> (Vec<f64>, Vec<f64>) {
    let mut first_request: HashMap<&str, f64> = HashMap::new();
    for e in &stats.evacuations {
        let at = first_request
            .entry(e.source.as_str())
            .or_insert(e.requested_at);
        *at = at.min(e.requested_at);
    }
    let mut dispatch = Vec::new();
    let mut create_delay = Vec::new();
    for (host, at, _, answered) in sent {
        create_delay.push(*answered);
        match first_request.get(host.as_str()) {
            Some(requested) => dispatch.push(secs(*at, clock.wall(*requested))),
            None => problems.push(format!("no evacuation requested for {host}")),
        }
    }
    (dispatch, create_delay)
}

/// Per succeeded instance: its recovery (vmove start to end) and its
/// downtime (report sent to vmove end); and when the last one was back.
fn per_instance(vmoves: &[Recovered], world: &World) -> (Split, Split, Option<DateTime<Utc>>) {
    let servers: HashMap<&str, &crate::sim::Server> =
        world.instances.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut recovery: Split = (Vec::new(), Vec::new(), Vec::new());
    let mut downtime: Split = (Vec::new(), Vec::new(), Vec::new());
    let mut last_back: Option<DateTime<Utc>> = None;
    for (_, at, list) in vmoves {
        for v in list.iter().filter(|v| v.status == "succeeded") {
            let (Some(start), Some(end)) = (
                v.start_time.as_deref().and_then(parse_time),
                v.end_time.as_deref().and_then(parse_time),
            ) else {
                continue;
            };
            last_back = Some(last_back.map_or(end, |l| l.max(end)));
            let bfv = servers
                .get(v.instance_uuid.as_str())
                .is_some_and(|s| s.image_id.is_none());
            let (r, d) = (secs(start, end), secs(*at, end));
            recovery.0.push(r);
            downtime.0.push(d);
            if bfv {
                recovery.1.push(r);
                downtime.1.push(d);
            } else {
                recovery.2.push(r);
                downtime.2.push(d);
            }
        }
    }
    (recovery, downtime, last_back)
}
