//! The host-failure scenario on a real OpenStack (conformance/real-openstack:
//! real Keystone, Placement, Nova with the fake virt driver, Cinder) and, in
//! the same run, Nova's own ideal for the same work.
//!
//! Each round boots the same instances on the first compute (10 by
//! default: two from a volume, one stopped), SIGKILLs that compute, and
//! then either
//!
//! * **ideal**: forces the service down and requests every evacuation at
//!   once, straight through Nova's API, as an operator's script with no
//!   overhead would; measured from the force-down request to the last
//!   evacuation migration's `updated_at` as Nova stamps it (`done`); or
//! * **instance-ha**: sends the fenced COMPUTE_HOST report to
//!   `instanceha-api` (the engine and the API with their defaults, started
//!   the one way tests start them); measured from the notification's
//!   `created_at` to its `updated_at` when it is `finished` (the API's
//!   stamps), with the phases: report to the first evacuation's migration
//!   (`created_at`), the spread of the evacuations (first created to last
//!   done), and the last `done` to `finished`.
//!
//! * **masakari** (with `--masakari also` or `only`): OpenStack Masakari 22
//!   itself (masakari-api and masakari-engine from PyPI with their
//!   defaults, started once for the whole run against the stack's Keystone
//!   by `masakari::runner`; the segment and the computes registered
//!   through its API) is sent the report masakari-hostmonitor sends for a
//!   fenced host; measured from the moment the report was sent to the
//!   notification's end (its `updated_at`, whole seconds, or its last
//!   vmove's end if later), with the same phases. What it did is read in
//!   Nova's, Cinder's and Placement's own records, not in what Masakari
//!   says: a run that leaves an instance unrecovered is counted, not
//!   hidden.
//!
//! The modes alternate within a round (the order turns every round) so
//! that drift on a shared machine falls on all of them. Nova's stamps and the API's
//! come from the same clock (one machine). Between runs the failed compute
//! is started again and put back in service.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use instanceha_conformance::workload::{Instance, assert_moved, boot, moved_problems, restore};
use instanceha_conformance::{records::Records, stack::Stack, system::System};
use instanceha_proto::v1 as pb;
use instanceha_testkit::eventually;
use reqwest::Method;
use serde::Serialize;
use serde_json::{Value, json};

use crate::masakari::rest::{MasakariRest, parse_time};
use crate::masakari::runner::{CloudAccess, Masakari, MasakariSettings};

/// How to run the real-Nova benchmark.
#[derive(Clone, Debug)]
pub struct RealSettings {
    pub runs: usize,
    pub instances: usize,
    pub bfv: usize,
    pub stopped: usize,
    /// Run instance-ha (and not only Masakari).
    pub ours: bool,
    /// Run Masakari too: how, and where its files go.
    pub masakari: Option<(MasakariSettings, PathBuf)>,
}

/// How long Masakari may take over one host: its 180 s wait after the
/// service update, then at most 90 s per evacuation it waits on, with
/// room to spare.
const MASAKARI_PATIENCE: Duration = Duration::from_secs(900);

/// One measured run.
#[derive(Clone, Debug, Serialize)]
pub struct RealRun {
    pub mode: &'static str,
    pub round: usize,
    /// Start (report, or force-down for the ideal) to the end, seconds.
    pub total_s: f64,
    /// Start to the first evacuation's migration record.
    pub first_evacuation_s: f64,
    /// First evacuation created to last one done.
    pub evacuations_s: f64,
    /// Last evacuation done to `finished` (0 for the ideal).
    pub tail_s: f64,
    /// Instances recovered as Nova, Cinder and Placement record it (off
    /// the failed host, in their state, unlocked, one evacuation done).
    pub recovered: usize,
    /// How the run ended in the tool's own words (`finished`, ...).
    pub outcome: String,
    /// What was not right, as the cloud's records show it.
    pub problems: Vec<String>,
}

/// Every run, and the summary.
#[derive(Clone, Debug, Serialize)]
pub struct RealReport {
    pub instances: usize,
    pub bfv: usize,
    pub stopped: usize,
    /// The Masakari release that ran, if it did.
    pub masakari_version: Option<String>,
    pub runs: Vec<RealRun>,
}

pub async fn run(settings: &RealSettings) -> anyhow::Result<RealReport> {
    let Some(stack) = Stack::from_env("instanceha-bench real") else {
        bail!(
            "no real OpenStack: start one (python3 conformance/real-openstack/stack.py up) and set {}",
            instanceha_conformance::stack::CTL_VARIABLE
        );
    };
    let _hold = stack.hold().await;
    let records = Records::login(&stack).await;
    let computes = stack.computes();
    let failed = computes[0].clone();
    let mut modes: Vec<&'static str> = vec!["ideal"];
    if settings.ours {
        modes.push("instance-ha");
    }
    let mut masakari = match &settings.masakari {
        Some((how, dir)) => {
            modes.push("masakari");
            Some(MasakariOnStack::start(&stack, how, dir).await?)
        }
        None => None,
    };
    let mut runs = Vec::new();
    let mut outcome = Ok(());
    'rounds: for round in 1..=settings.runs {
        let mut order = modes.clone();
        order.rotate_left((round - 1) % modes.len());
        for mode in order {
            clean(&stack, &records).await;
            let instances = boot(
                &records,
                &stack,
                &failed,
                settings.instances,
                settings.bfv,
                settings.stopped,
            )
            .await;
            let run = match (mode, masakari.as_mut()) {
                ("ideal", _) => ideal(&stack, &records, &failed, &instances, round).await,
                ("masakari", Some(m)) => {
                    m.recover(&stack, &records, &failed, &instances, round)
                        .await
                }
                _ => ours(&stack, &records, &failed, &instances, round).await,
            };
            let run = match run {
                Ok(run) => run,
                Err(e) => {
                    outcome = Err(e);
                    break 'rounds;
                }
            };
            eprintln!(
                "round {round} {mode}: {:.2} s (first evacuation {:.2} s, evacuations {:.2} s, tail {:.2} s), \
                 {} of {} recovered, {}",
                run.total_s,
                run.first_evacuation_s,
                run.evacuations_s,
                run.tail_s,
                run.recovered,
                instances.len(),
                run.outcome
            );
            for p in &run.problems {
                eprintln!("  {p}");
            }
            runs.push(run);
            restore(&records, &stack, &failed, &instances).await;
        }
    }
    let masakari_version = masakari.as_ref().map(|m| m.masakari.version.clone());
    if let Some(m) = masakari {
        m.masakari.stop().await;
    }
    outcome?;
    Ok(RealReport {
        instances: settings.instances,
        bfv: settings.bfv,
        stopped: settings.stopped,
        masakari_version,
        runs,
    })
}

/// No servers, no volumes, every process running, every compute in
/// service.
async fn clean(stack: &Stack, records: &Records) {
    for process in stack.stopped().await {
        stack.start(&process).await;
    }
    records.delete_everything().await;
    for host in stack.computes() {
        let s = records.compute_service(&host).await;
        if !(s.up && s.enabled && !s.forced_down) {
            records.restore_compute(&host).await;
        }
    }
}

/// Nova alone: force-down, then every evacuation at once.
async fn ideal(
    stack: &Stack,
    records: &Records,
    failed: &str,
    instances: &[Instance],
    round: usize,
) -> anyhow::Result<RealRun> {
    stack.kill(&format!("nova-{failed}")).await;
    let service = records.compute_service(failed).await;
    let started = Utc::now();
    records
        .nova(
            Method::PUT,
            &format!("/os-services/{}", service.id),
            Some(json!({"forced_down": true})),
        )
        .await
        .map_err(anyhow::Error::msg)?;
    let mut set = tokio::task::JoinSet::new();
    for i in instances {
        let (records, id) = (records.clone(), i.id.clone());
        set.spawn(async move {
            records
                .nova(
                    Method::POST,
                    &format!("/servers/{id}/action"),
                    Some(json!({"evacuate": {}})),
                )
                .await
        });
    }
    for r in set.join_all().await {
        r.map_err(anyhow::Error::msg).context("evacuate")?;
    }
    let migrations = settled(records, instances).await?;
    // An operator would disable it too; it is not on the critical path.
    records
        .nova(
            Method::PUT,
            &format!("/os-services/{}", service.id),
            Some(json!({"status": "disabled"})),
        )
        .await
        .map_err(anyhow::Error::msg)?;
    let (first, last) = span(&migrations)?;
    let (recovered, problems) = recovered(records, failed, instances).await;
    Ok(RealRun {
        mode: "ideal",
        round,
        total_s: seconds(started, last),
        first_evacuation_s: seconds(started, first),
        evacuations_s: seconds(first, last),
        tail_s: 0.0,
        recovered,
        outcome: "every evacuation done".into(),
        problems,
    })
}

/// instance-ha with its defaults.
async fn ours(
    stack: &Stack,
    records: &Records,
    failed: &str,
    instances: &[Instance],
    round: usize,
) -> anyhow::Result<RealRun> {
    let mut system = System::start(stack, |_| {}).await;
    system.segment(&stack.computes()).await;
    // The engine's token warm-up has run, as in a service up for a while.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stack.kill(&format!("nova-{failed}")).await;
    let n = system.host_fenced(failed).await;
    let (n, vmoves) = system.terminal(&n.id, Duration::from_secs(600)).await;
    if n.status != pb::NotificationStatus::Finished as i32 {
        bail!(
            "round {round}: the notification ended {}: {}",
            n.status,
            n.message
        );
    }
    assert_moved(records, failed, instances, &vmoves).await;
    let migrations = settled(records, instances).await?;
    let (first, last) = span(&migrations)?;
    let created = timestamp(n.created_at.as_ref())?;
    let finished = timestamp(n.updated_at.as_ref())?;
    Ok(RealRun {
        mode: "instance-ha",
        round,
        total_s: seconds(created, finished),
        first_evacuation_s: seconds(created, first),
        evacuations_s: seconds(first, last),
        tail_s: seconds(last, finished),
        recovered: instances.len(),
        outcome: "finished".into(),
        problems: Vec::new(),
    })
}

/// Masakari running against the stack for the whole benchmark, with a
/// segment holding every compute.
struct MasakariOnStack {
    masakari: Masakari,
    api: MasakariRest,
    segment: String,
    /// Compute name to Masakari's host uuid.
    hosts: std::collections::HashMap<String, String>,
}

impl MasakariOnStack {
    async fn start(
        stack: &Stack,
        settings: &MasakariSettings,
        dir: &std::path::Path,
    ) -> anyhow::Result<Self> {
        let cloud = CloudAccess {
            auth_url: stack.var("OS_AUTH_URL").to_owned(),
            username: stack.var("OS_USERNAME").to_owned(),
            password: stack.var("OS_PASSWORD").to_owned(),
            project_name: stack.var("OS_PROJECT_NAME").to_owned(),
            user_domain_name: stack.var("OS_USER_DOMAIN_NAME").to_owned(),
            project_domain_name: stack.var("OS_PROJECT_DOMAIN_NAME").to_owned(),
            region: stack.var("OS_REGION_NAME").to_owned(),
            interface: "public".into(),
        };
        let masakari = Masakari::start(settings, &cloud, dir, true).await?;
        eprintln!(
            "masakari {} listening on {} (files and logs in {})",
            masakari.version,
            masakari.url,
            dir.display()
        );
        let api = MasakariRest::connect(&masakari.url, &cloud, 4).await?;
        let segment = api.create_segment("bench-real").await?;
        let mut hosts = std::collections::HashMap::new();
        for name in stack.computes() {
            let uuid = api
                .create_host(&segment, &name)
                .await
                .with_context(|| format!("registering {name} with Masakari"))?;
            hosts.insert(name, uuid);
        }
        Ok(Self {
            masakari,
            api,
            segment,
            hosts,
        })
    }

    /// One host failure recovered by Masakari with its defaults.
    async fn recover(
        &mut self,
        stack: &Stack,
        records: &Records,
        failed: &str,
        instances: &[Instance],
        round: usize,
    ) -> anyhow::Result<RealRun> {
        let host = self
            .hosts
            .get(failed)
            .with_context(|| format!("{failed} is not registered with Masakari"))?;
        // The previous round's recovery left it in maintenance.
        self.api.end_maintenance(&self.segment, host).await?;
        stack.kill(&format!("nova-{failed}")).await;
        let sent = Utc::now();
        // What masakari-hostmonitor sends for a host its cluster fenced.
        let answer = self
            .api
            .create_notification(
                "COMPUTE_HOST",
                failed,
                sent,
                json!({"event": "STOPPED", "host_status": "NORMAL", "cluster_status": "OFFLINE"}),
            )
            .await?;
        if !answer.status.is_success() {
            bail!(
                "round {round}: masakari refused the report: {}: {}",
                answer.status,
                answer.body
            );
        }
        let uuid = answer.body["notification"]["notification_uuid"]
            .as_str()
            .context("a notification without uuid")?
            .to_owned();
        let waited = Instant::now();
        let n = loop {
            self.masakari.check_alive()?;
            let n = self.api.notification(&uuid).await?;
            if n.is_final() {
                break n;
            }
            if waited.elapsed() > MASAKARI_PATIENCE {
                bail!(
                    "round {round}: masakari's notification is still {} after {} s",
                    n.status,
                    MASAKARI_PATIENCE.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let vmoves = self.api.vmoves(&uuid).await?;
        let ended = vmoves
            .iter()
            .filter_map(|v| v.end_time.as_deref().and_then(parse_time))
            .chain(n.updated_at.as_deref().and_then(parse_time))
            .max()
            .context("a final notification without a stamp")?;
        let (recovered, mut problems) = recovered(records, failed, instances).await;
        for v in vmoves.iter().filter(|v| v.status != "succeeded") {
            problems.push(format!(
                "masakari's vmove for {} is {}: {}",
                v.instance_name.as_deref().unwrap_or(&v.instance_uuid),
                v.status,
                v.message.as_deref().unwrap_or("")
            ));
        }
        let (first, last) = match span(&done_evacuations(records, instances, sent).await) {
            Ok(span) => span,
            Err(_) => (ended, ended),
        };
        Ok(RealRun {
            mode: "masakari",
            round,
            total_s: seconds(sent, ended),
            first_evacuation_s: seconds(sent, first),
            evacuations_s: seconds(first, last),
            tail_s: seconds(last, ended),
            recovered,
            outcome: match n.message.as_deref() {
                Some(m) if !m.is_empty() && n.status != "finished" => format!("{}: {m}", n.status),
                _ => n.status.clone(),
            },
            problems,
        })
    }
}

/// The evacuations of `instances` created since `since` and done.
async fn done_evacuations(
    records: &Records,
    instances: &[Instance],
    since: DateTime<Utc>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for i in instances {
        for m in records.evacuations(&i.id).await {
            let created = m["created_at"].as_str().and_then(parse_time);
            let done = m["status"] == "done" || m["status"] == "completed";
            // Nova's stamps are whole seconds at the least: a second's
            // slack keeps an evacuation made just after `since`.
            if done && created.is_some_and(|c| c >= since - chrono::Duration::seconds(1)) {
                out.push(m);
            }
        }
    }
    out
}

/// How many of `instances` are recovered off `failed` as Nova, Cinder and
/// Placement record it, and what is wrong with the others: the
/// conformance tests' own judgement (`moved_problems`), counted instead of
/// asserted, the same for every contender.
async fn recovered(
    records: &Records,
    failed: &str,
    instances: &[Instance],
) -> (usize, Vec<String>) {
    let mut problems = Vec::new();
    let mut count = 0;
    for i in instances {
        let found = moved_problems(records, failed, i).await;
        count += usize::from(found.is_empty());
        problems.extend(found);
    }
    (count, problems)
}

/// Each instance's settled evacuation (waits for every one).
async fn settled(records: &Records, instances: &[Instance]) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for i in instances {
        let m = eventually(
            &format!("{}: evacuation done", i.name),
            Duration::from_secs(300),
            Duration::from_millis(200),
            || async {
                let all = records.evacuations(&i.id).await;
                match all.last() {
                    Some(m) if m["status"] == "done" || m["status"] == "completed" => Ok(m.clone()),
                    Some(m) if m["status"] == "error" || m["status"] == "failed" => {
                        panic!("{}: evacuation {}", i.name, m["status"])
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        out.push(m);
    }
    Ok(out)
}

/// The first migration's creation and the last one's end.
fn span(migrations: &[Value]) -> anyhow::Result<(DateTime<Utc>, DateTime<Utc>)> {
    let at = |m: &Value, key: &str| -> anyhow::Result<DateTime<Utc>> {
        let text = m[key].as_str().context("a migration stamp")?;
        let naive = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
            .with_context(|| format!("migration {key} {text}"))?;
        Ok(naive.and_utc())
    };
    let mut first = None::<DateTime<Utc>>;
    let mut last = None::<DateTime<Utc>>;
    for m in migrations {
        let c = at(m, "created_at")?;
        let u = at(m, "updated_at")?;
        first = Some(first.map_or(c, |f| f.min(c)));
        last = Some(last.map_or(u, |l| l.max(u)));
    }
    Ok((
        first.context("no migration")?,
        last.context("no migration")?,
    ))
}

fn timestamp(t: Option<&prost_types::Timestamp>) -> anyhow::Result<DateTime<Utc>> {
    instanceha_proto::time::required("a notification stamp", t.copied())
        .context("a notification stamp")
}

fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(0) as f64 / 1e6
}

/// min / median / max of `mode`'s totals.
pub fn summary(
    report: &RealReport,
    mode: &str,
    pick: fn(&RealRun) -> f64,
) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = report
        .runs
        .iter()
        .filter(|r| r.mode == mode)
        .map(pick)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    Some((v[0], median, v[v.len() - 1]))
}

/// The Markdown table of a report.
pub fn table(report: &RealReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Host failure on real Nova, {} instances ({} boot from a volume, {} stopped), {} runs each\n\n",
        report.instances,
        report.bfv,
        report.stopped,
        report.runs.iter().filter(|r| r.mode == "ideal").count()
    ));
    out.push_str("| | total min / median / max s | first evacuation (median) s | evacuations (median) s | tail (median) s | recovered (all runs) |\n|---|---|---|---|---|---|\n");
    for mode in ["ideal", "instance-ha", "masakari"] {
        let Some((lo, med, hi)) = summary(report, mode, |r| r.total_s) else {
            continue;
        };
        let m = |f: fn(&RealRun) -> f64| summary(report, mode, f).map_or(0.0, |s| s.1);
        let runs = report.runs.iter().filter(|r| r.mode == mode);
        let recovered: usize = runs.clone().map(|r| r.recovered).sum();
        let name = match (mode, &report.masakari_version) {
            ("masakari", Some(v)) => format!("Masakari {v}"),
            _ => mode.to_owned(),
        };
        out.push_str(&format!(
            "| {name} | {lo:.2} / {med:.2} / {hi:.2} | {:.2} | {:.2} | {:.2} | {recovered} of {} |\n",
            m(|r| r.first_evacuation_s),
            m(|r| r.evacuations_s),
            m(|r| r.tail_s),
            runs.count() * report.instances
        ));
    }
    let Some(ideal) = summary(report, "ideal", |r| r.total_s) else {
        return out;
    };
    out.push('\n');
    for (mode, target) in [
        ("instance-ha", " (target: 1.25x or less)"),
        ("masakari", ""),
    ] {
        if let Some(o) = summary(report, mode, |r| r.total_s) {
            out.push_str(&format!(
                "ratio of medians ({mode} / ideal): **{:.2}x**{target}\n",
                o.1 / ideal.1
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mode: &'static str, total_s: f64, recovered: usize) -> RealRun {
        RealRun {
            mode,
            round: 1,
            total_s,
            first_evacuation_s: 1.0,
            evacuations_s: 2.0,
            tail_s: 0.5,
            recovered,
            outcome: "finished".into(),
            problems: Vec::new(),
        }
    }

    #[test]
    fn the_table_gives_each_mode_its_medians_recoveries_and_ratio() {
        let report = RealReport {
            instances: 10,
            bfv: 2,
            stopped: 1,
            masakari_version: Some("22.0.0".into()),
            runs: vec![
                run("ideal", 5.0, 10),
                run("ideal", 7.0, 10),
                run("ideal", 6.0, 10),
                run("instance-ha", 6.0, 10),
                run("instance-ha", 7.5, 10),
                run("instance-ha", 9.0, 10),
                run("masakari", 190.0, 10),
                run("masakari", 200.0, 8),
                run("masakari", 195.0, 10),
            ],
        };
        let text = table(&report);
        assert!(text.contains("| ideal | 5.00 / 6.00 / 7.00 |"), "{text}");
        assert!(
            text.contains("| Masakari 22.0.0 | 190.00 / 195.00 / 200.00 |"),
            "{text}"
        );
        assert!(text.contains("| 28 of 30 |"), "{text}");
        assert!(text.contains("(instance-ha / ideal): **1.25x**"), "{text}");
        assert!(text.contains("(masakari / ideal): **32.50x**"), "{text}");
    }

    #[test]
    fn without_a_mode_its_row_and_ratio_are_left_out() {
        let report = RealReport {
            instances: 10,
            bfv: 2,
            stopped: 1,
            masakari_version: None,
            runs: vec![run("ideal", 5.0, 10), run("instance-ha", 6.0, 10)],
        };
        let text = table(&report);
        assert!(!text.contains("masakari"), "{text}");
        assert!(text.contains("**1.20x**"), "{text}");
    }
}
