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
//! The two alternate within a round (the order flips every round) so that
//! drift on a shared machine falls on both. Nova's stamps and the API's
//! come from the same clock (one machine). Between runs the failed compute
//! is started again and put back in service.

use std::time::Duration;

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use instanceha_conformance::records::Records;
use instanceha_conformance::stack::{Stack, eventually};
use instanceha_conformance::system::System;
use instanceha_conformance::workload::{Instance, assert_moved, boot, restore};
use instanceha_proto::v1 as pb;
use reqwest::Method;
use serde::Serialize;
use serde_json::{Value, json};

/// How to run the real-Nova benchmark.
#[derive(Clone, Debug)]
pub struct RealSettings {
    pub runs: usize,
    pub instances: usize,
    pub bfv: usize,
    pub stopped: usize,
}

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
}

/// Every run, and the summary.
#[derive(Clone, Debug, Serialize)]
pub struct RealReport {
    pub instances: usize,
    pub bfv: usize,
    pub stopped: usize,
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
    let mut runs = Vec::new();
    for round in 1..=settings.runs {
        let order: [&'static str; 2] = if round % 2 == 1 {
            ["ideal", "instance-ha"]
        } else {
            ["instance-ha", "ideal"]
        };
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
            let run = match mode {
                "ideal" => ideal(&stack, &records, &failed, &instances, round).await?,
                _ => ours(&stack, &records, &failed, &instances, round).await?,
            };
            eprintln!(
                "round {round} {mode}: {:.2} s (first evacuation {:.2} s, evacuations {:.2} s, tail {:.2} s)",
                run.total_s, run.first_evacuation_s, run.evacuations_s, run.tail_s
            );
            runs.push(run);
            restore(&records, &stack, &failed, &instances).await;
        }
    }
    Ok(RealReport {
        instances: settings.instances,
        bfv: settings.bfv,
        stopped: settings.stopped,
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
    Ok(RealRun {
        mode: "ideal",
        round,
        total_s: seconds(started, last),
        first_evacuation_s: seconds(started, first),
        evacuations_s: seconds(first, last),
        tail_s: 0.0,
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
    })
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
    let t = t.context("a notification stamp")?;
    DateTime::from_timestamp(t.seconds, t.nanos as u32).context("a notification stamp")
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
    out.push_str("| | total min / median / max s | first evacuation (median) s | evacuations (median) s | tail (median) s |\n|---|---|---|---|---|\n");
    for mode in ["ideal", "instance-ha"] {
        let Some((lo, med, hi)) = summary(report, mode, |r| r.total_s) else {
            continue;
        };
        let m = |f: fn(&RealRun) -> f64| summary(report, mode, f).map_or(0.0, |s| s.1);
        out.push_str(&format!(
            "| {mode} | {lo:.2} / {med:.2} / {hi:.2} | {:.2} | {:.2} | {:.2} |\n",
            m(|r| r.first_evacuation_s),
            m(|r| r.evacuations_s),
            m(|r| r.tail_s)
        ));
    }
    if let (Some(i), Some(o)) = (
        summary(report, "ideal", |r| r.total_s),
        summary(report, "instance-ha", |r| r.total_s),
    ) {
        out.push_str(&format!(
            "\nratio of medians (instance-ha / ideal): **{:.2}x** (target: 1.25x or less)\n",
            o.1 / i.1
        ));
    }
    out
}
