//! Intake by Masakari itself: failure reports through its REST API
//! (`POST /v1/notifications`), the same load as instance-ha's intake run
//! (VM failure reports with a new instance UUID each, spread over the
//! segment's hosts, a share of them sent twice at the same moment as a
//! monitor retrying after a lost answer), with Masakari's defaults:
//! masakari-api with its two workers (one per CPU), SQLite, keystonemiddleware
//! validating the admin token. As for instance-ha's run the engine does not
//! run, so only intake is measured; the simulator stands in for Nova, which
//! Masakari asks whether each host is a compute when it is registered.
//!
//! Masakari has no idempotency key: a report sent twice is refused (409) as
//! a duplicate if the first copy is stored when the second is checked (same
//! type, host and payload within 180 s), else stored twice. The run counts
//! what was stored per report, from the listing: none (lost), one, or more
//! (duplicated).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Mutex;

use super::rest::MasakariRest;
use super::runner::{CloudAccess, Masakari, MasakariSettings};
use crate::cloud::{RunDir, start_sim};
use crate::procs::{Binaries, Usage};
use crate::stats::Summary;

/// How to load Masakari's API.
#[derive(Clone, Debug)]
pub struct MasakariIntakeSettings {
    pub count: usize,
    pub warmup: usize,
    pub concurrency: usize,
    pub hosts: usize,
    pub replay_fraction: f64,
}

/// The figures of one intake run against Masakari.
#[derive(Clone, Debug, Serialize)]
pub struct MasakariIntakeReport {
    pub masakari_version: String,
    pub database: String,
    pub count: usize,
    pub warmup: usize,
    pub concurrency: usize,
    pub hosts: usize,
    pub replay_fraction: f64,
    /// Reports accepted (a 202 for at least one copy) per second, timed
    /// phase.
    pub notifications_per_sec: f64,
    /// Create calls per second, replays included.
    pub requests_per_sec: f64,
    /// Every call answered 202 in the timed phase (ms).
    pub create_latency_ms: Option<Summary>,
    pub requests: usize,
    /// Answers by HTTP status (or the transport error), both phases.
    pub answers: BTreeMap<String, usize>,
    /// Rows listed afterwards, and reports sent (warm-up included).
    pub stored: usize,
    pub expected: usize,
    /// Reports stored more than once (each extra row counted).
    pub duplicated: usize,
    /// Reports not stored at all.
    pub missing: usize,
    pub lost_or_duplicated: bool,
    pub api_usage: Option<Usage>,
    pub rabbitmq_usage: Option<Usage>,
    pub elapsed_secs: f64,
}

/// What the workers saw.
#[derive(Default)]
struct Outcome {
    latencies_ms: Vec<f64>,
    answers: BTreeMap<String, usize>,
    /// Reports with at least one 202.
    accepted: usize,
}

pub async fn run(
    binaries: &Binaries,
    dir: &RunDir,
    settings: &MasakariSettings,
    options: &MasakariIntakeSettings,
) -> anyhow::Result<MasakariIntakeReport> {
    let began = Instant::now();
    let hosts = options.hosts.max(1);
    let (sim, control) = start_sim(binaries, dir, &intake_cloud(hosts)).await?;
    let cloud = CloudAccess::simulator(control.auth_url());
    let masakari = match Masakari::start(settings, &cloud, &dir.path.join("masakari"), false).await
    {
        Ok(m) => m,
        Err(e) => {
            let _ = sim.stop().await;
            return Err(e);
        }
    };
    let result = load(&masakari, &cloud, options).await;
    let usage = masakari.stop().await;
    let _ = sim.stop().await;
    let mut report = result?;
    report.api_usage = usage.api;
    report.rabbitmq_usage = usage.rabbitmq;
    report.elapsed_secs = began.elapsed().as_secs_f64();
    Ok(report)
}

/// The simulated cloud of an intake run: `hosts` computes, no servers.
fn intake_cloud(hosts: usize) -> String {
    format!(
        "# instanceha-bench: Masakari intake\n[settings]\nspeed = 1.0\n\n\
         [[host_groups]]\nname_prefix = \"agent-host-\"\ncount = {hosts}\nwidth = 4\n\
         hypervisor_domain = \"\"\n"
    )
}

async fn load(
    masakari: &Masakari,
    cloud: &CloudAccess,
    options: &MasakariIntakeSettings,
) -> anyhow::Result<MasakariIntakeReport> {
    let concurrency = options.concurrency.max(1);
    let api = MasakariRest::connect(&masakari.url, cloud, concurrency * 2).await?;
    let segment = api.create_segment("bench-intake").await?;
    let hosts: Vec<String> = (1..=options.hosts.max(1))
        .map(|i| format!("agent-host-{i:04}"))
        .collect();
    futures::stream::iter(hosts.clone())
        .map(|name| {
            let api = api.clone();
            let segment = segment.clone();
            async move {
                api.create_host(&segment, &name)
                    .await
                    .with_context(|| format!("registering host {name}"))
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    let total = options.warmup + options.count;
    let uuids: Arc<Vec<String>> = Arc::new(
        (0..total)
            .map(|_| uuid::Uuid::new_v4().to_string())
            .collect(),
    );
    let hosts = Arc::new(hosts);
    let mut answers = BTreeMap::new();
    if options.warmup > 0 {
        let warm = blast(&api, &hosts, &uuids, 0, options.warmup, options).await;
        merge(&mut answers, warm.answers);
    }
    let started = Instant::now();
    let timed = blast(&api, &hosts, &uuids, options.warmup, options.count, options).await;
    let elapsed = started.elapsed().as_secs_f64();
    let requests: usize = timed.answers.values().sum();
    merge(&mut answers, timed.answers.clone());

    // Stored once each?
    let listed = api.notifications().await?;
    let mut rows: HashMap<&str, usize> = HashMap::new();
    for n in &listed {
        if let Some(instance) = n.payload["instance_uuid"].as_str() {
            *rows.entry(instance).or_default() += 1;
        }
    }
    let mut duplicated = 0;
    let mut missing = 0;
    for uuid in uuids.iter() {
        match rows.get(uuid.as_str()).copied().unwrap_or(0) {
            0 => missing += 1,
            n => duplicated += n - 1,
        }
    }
    Ok(MasakariIntakeReport {
        masakari_version: masakari.version.clone(),
        database: "sqlite".into(),
        count: options.count,
        warmup: options.warmup,
        concurrency,
        hosts: options.hosts,
        replay_fraction: options.replay_fraction,
        notifications_per_sec: timed.accepted as f64 / elapsed,
        requests_per_sec: requests as f64 / elapsed,
        create_latency_ms: Summary::of(&timed.latencies_ms),
        requests,
        answers,
        stored: listed.len(),
        expected: total,
        duplicated,
        missing,
        lost_or_duplicated: duplicated > 0 || missing > 0 || listed.len() != total,
        api_usage: None,
        rabbitmq_usage: None,
        elapsed_secs: 0.0,
    })
}

fn merge(into: &mut BTreeMap<String, usize>, from: BTreeMap<String, usize>) {
    for (k, v) in from {
        *into.entry(k).or_default() += v;
    }
}

/// Sends reports `first .. first + count` with `concurrency` workers.
async fn blast(
    api: &MasakariRest,
    hosts: &Arc<Vec<String>>,
    uuids: &Arc<Vec<String>>,
    first: usize,
    count: usize,
    options: &MasakariIntakeSettings,
) -> Outcome {
    let next = Arc::new(AtomicUsize::new(first));
    let end = first + count;
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let replay_every = if options.replay_fraction > 0.0 {
        (1.0 / options.replay_fraction).round().max(1.0) as usize
    } else {
        usize::MAX
    };
    let mut workers = Vec::new();
    for _ in 0..options.concurrency.max(1) {
        let (api, next, outcome) = (api.clone(), next.clone(), outcome.clone());
        let (hosts, uuids) = (hosts.clone(), uuids.clone());
        workers.push(tokio::spawn(async move {
            let mut mine = Outcome::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    break;
                }
                let copies = if i % replay_every == replay_every - 1 {
                    2
                } else {
                    1
                };
                let host = &hosts[i % hosts.len()];
                let payload = json!({
                    "instance_uuid": uuids[i],
                    "vir_domain_event": "STOPPED_FAILED",
                    "event": "LIFECYCLE",
                });
                let generated = chrono::Utc::now();
                let calls = (0..copies).map(|_| {
                    let (api, payload) = (api.clone(), payload.clone());
                    async move {
                        let t = Instant::now();
                        let answer = api
                            .create_notification("VM", host, generated, payload)
                            .await;
                        (t.elapsed(), answer)
                    }
                });
                let mut accepted = false;
                for (took, answer) in futures::future::join_all(calls).await {
                    let key = match answer {
                        Ok(a) if a.status.as_u16() == 202 => {
                            accepted = true;
                            mine.latencies_ms.push(took.as_secs_f64() * 1000.0);
                            "202".to_owned()
                        }
                        Ok(a) => a.status.as_u16().to_string(),
                        Err(e) => format!("error: {}", e.root_cause()),
                    };
                    *mine.answers.entry(key).or_default() += 1;
                }
                mine.accepted += usize::from(accepted);
            }
            let mut outcome = outcome.lock().await;
            outcome.latencies_ms.extend(mine.latencies_ms);
            outcome.accepted += mine.accepted;
            merge(&mut outcome.answers, mine.answers);
        }));
    }
    for worker in workers {
        let _ = worker.await;
    }
    match Arc::try_unwrap(outcome) {
        Ok(outcome) => outcome.into_inner(),
        Err(_) => unreachable!("every worker has finished"),
    }
}
