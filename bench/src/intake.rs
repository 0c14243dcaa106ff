//! Intake: how fast the API accepts failure reports from many agents at
//! once, and whether it keeps every one exactly once.
//!
//! The API runs alone (dispatch off, so that only intake is measured) on a
//! fresh database. This process plays the monitoring agents: `concurrency`
//! gRPC clients over `connections` HTTP/2 connections send VM failure
//! reports (instancemonitor's kind: a new instance UUID each, spread over
//! the segment's hosts), each with an idempotency key. A share of the
//! reports is sent twice at the same moment, as an agent retrying after a
//! lost answer would: both answers must name the same notification.
//! After a warm-up, `count` reports are timed: notifications created per
//! second (unique reports over the wall time) and the latency of every
//! create call (p50, p99). Then every notification of the segment is
//! listed: as many as unique reports, no id twice, and each report's id
//! among them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context as _, bail};
use chrono::SubsecRound as _;
use instanceha_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use serde::Serialize;
use tokio::sync::Mutex;
use tonic::transport::Channel;

use crate::cloud::{ApiOnly, RunDir, connect, create_segment};
use crate::db::Backend;
use crate::procs::{Binaries, Usage};
use crate::stats::Summary;

/// How to load the API.
#[derive(Clone, Debug)]
pub struct IntakeSettings {
    pub backend: Backend,
    /// Timed reports (unique).
    pub count: usize,
    /// Untimed reports sent first.
    pub warmup: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// HTTP/2 connections they share.
    pub connections: usize,
    /// Hosts of the segment the reports are spread over.
    pub hosts: usize,
    /// Share of reports sent twice concurrently with one idempotency key.
    pub replay_fraction: f64,
    /// Threads of the load generator.
    pub client_threads: usize,
}

/// The figures of one intake run.
#[derive(Clone, Debug, Serialize)]
pub struct IntakeReport {
    pub database: String,
    pub count: usize,
    pub warmup: usize,
    pub concurrency: usize,
    pub connections: usize,
    pub hosts: usize,
    pub replay_fraction: f64,
    pub client_threads: usize,
    /// Unique notifications created per second (timed phase).
    pub notifications_per_sec: f64,
    /// Create calls per second, replays included.
    pub requests_per_sec: f64,
    /// Every create call of the timed phase (ms).
    pub create_latency_ms: Option<Summary>,
    pub requests: usize,
    pub errors: BTreeMap<String, usize>,
    /// Notifications listed afterwards, and how many reports were unique.
    pub stored: usize,
    pub expected: usize,
    pub duplicated_ids: usize,
    pub missing: usize,
    /// Replays answered with another notification than the first.
    pub replay_mismatches: usize,
    pub lost_or_duplicated: bool,
    pub api_usage: Option<Usage>,
    pub elapsed_secs: f64,
}

/// What the workers saw.
struct Outcome {
    latencies_ms: Vec<f64>,
    errors: BTreeMap<String, usize>,
    /// (index, notification id) of every successful answer.
    ids: Vec<(usize, String)>,
}

pub async fn run(
    binaries: &Binaries,
    dir: &RunDir,
    options: &IntakeSettings,
) -> anyhow::Result<IntakeReport> {
    let tag = format!("intake-{}", options.backend.name());
    let mut service = ApiOnly::start(binaries, dir, &options.backend, &tag).await?;
    let result = load(&mut service, options).await;
    let usage = service.api.usage().ok();
    let _ = service.api.stop().await;
    drop(service.database);
    let mut report = result?;
    report.api_usage = usage;
    Ok(report)
}

async fn load(service: &mut ApiOnly, options: &IntakeSettings) -> anyhow::Result<IntakeReport> {
    let began = Instant::now();
    let channel = connect(&service.api.addr).await?;
    let segment = create_segment(channel.clone(), "bench-intake".into(), None).await?;
    let hosts: Vec<String> = (1..=options.hosts.max(1))
        .map(|i| format!("agent-host-{i:04}"))
        .collect();
    let mut host_client = HostServiceClient::new(channel.clone());
    for name in &hosts {
        host_client
            .create_host(pb::CreateHostRequest {
                segment_id: segment.id.clone(),
                name: name.clone(),
                r#type: "COMPUTE".into(),
                control_attributes: "SSH".into(),
                reserved: false,
                on_maintenance: false,
            })
            .await
            .with_context(|| format!("registering host {name}"))?;
    }
    let hosts = Arc::new(hosts);
    let run_tag = uuid::Uuid::new_v4().simple().to_string();

    // Warm-up, then the timed phase (indices continue).
    let addr = service.api.addr.clone();
    if options.warmup > 0 {
        load_generator(&addr, &hosts, &run_tag, 0, options.warmup, options).await?;
    }
    let (outcome, elapsed) = load_generator(
        &addr,
        &hosts,
        &run_tag,
        options.warmup,
        options.count,
        options,
    )
    .await?;

    // Exactly once?
    let mut listed = Vec::new();
    let mut client = NotificationServiceClient::new(channel);
    let mut token = String::new();
    loop {
        let page = client
            .list_notifications(pb::ListNotificationsRequest {
                page_size: 1000,
                page_token: token.clone(),
                segment_id: Some(segment.id.clone()),
                ..Default::default()
            })
            .await
            .context("listing notifications")?
            .into_inner();
        listed.extend(page.notifications.into_iter().map(|n| n.id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let unique: HashSet<&str> = listed.iter().map(String::as_str).collect();
    let duplicated_ids = listed.len() - unique.len();
    let mut by_index: BTreeMap<usize, &str> = BTreeMap::new();
    let mut replay_mismatches = 0;
    for (index, id) in &outcome.ids {
        match by_index.get(index) {
            Some(first) if first != id => replay_mismatches += 1,
            Some(_) => {}
            None => {
                by_index.insert(*index, id);
            }
        }
    }
    // Warm-up reports were stored too.
    let expected = options.warmup + options.count;
    let answered: HashSet<&str> = by_index.values().copied().collect();
    let missing = answered.iter().filter(|id| !unique.contains(*id)).count();
    let errors_total: usize = outcome.errors.values().sum();
    if errors_total > 0 {
        eprintln!(
            "instanceha-bench: intake on {}: {errors_total} failed create calls: {:?}",
            options.backend.name(),
            outcome.errors
        );
    }
    let requests = outcome.latencies_ms.len() + errors_total;
    let stored = listed.len();
    let lost_or_duplicated = stored != expected
        || duplicated_ids > 0
        || missing > 0
        || replay_mismatches > 0
        || errors_total > 0;
    Ok(IntakeReport {
        database: options.backend.name().to_owned(),
        count: options.count,
        warmup: options.warmup,
        concurrency: options.concurrency,
        connections: options.connections,
        hosts: options.hosts,
        replay_fraction: options.replay_fraction,
        client_threads: options.client_threads,
        notifications_per_sec: by_index.len() as f64 / elapsed,
        requests_per_sec: requests as f64 / elapsed,
        create_latency_ms: Summary::of(&outcome.latencies_ms),
        requests,
        errors: outcome.errors,
        stored,
        expected,
        duplicated_ids,
        missing,
        replay_mismatches,
        lost_or_duplicated,
        api_usage: None,
        elapsed_secs: began.elapsed().as_secs_f64(),
    })
}

/// Sends reports `first .. first + count` from a load generator of its
/// own: `client_threads` threads (one: a single-threaded runtime, the
/// cheapest per call), with `connections` fresh connections. Returns what
/// the clients saw and the seconds from the first call to the last answer.
async fn load_generator(
    addr: &str,
    hosts: &Arc<Vec<String>>,
    run_tag: &str,
    first: usize,
    count: usize,
    options: &IntakeSettings,
) -> anyhow::Result<(Outcome, f64)> {
    let (addr, hosts, run_tag, options) = (
        addr.to_owned(),
        hosts.clone(),
        run_tag.to_owned(),
        options.clone(),
    );
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = if options.client_threads <= 1 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(options.client_threads)
                .enable_all()
                .build()
        };
        let outcome = match runtime {
            Ok(runtime) => runtime.block_on(async {
                let mut channels = Vec::new();
                for _ in 0..options.connections.max(1) {
                    channels.push(connect(&addr).await?);
                }
                let started = Instant::now();
                let outcome = blast(&channels, &hosts, &run_tag, first, count, &options).await;
                Ok((outcome, started.elapsed().as_secs_f64()))
            }),
            Err(e) => Err(anyhow::Error::from(e).context("starting the load generator")),
        };
        let _ = done.send(outcome);
    });
    result.await.context("the load generator stopped")?
}

/// Sends reports `first .. first + count` with `concurrency` workers.
async fn blast(
    channels: &[Channel],
    hosts: &Arc<Vec<String>>,
    run_tag: &str,
    first: usize,
    count: usize,
    options: &IntakeSettings,
) -> Outcome {
    let next = Arc::new(AtomicUsize::new(first));
    let end = first + count;
    let outcome = Arc::new(Mutex::new(Outcome {
        latencies_ms: Vec::with_capacity(count * 2),
        errors: BTreeMap::new(),
        ids: Vec::with_capacity(count * 2),
    }));
    // Every 1/fraction-th report is a replayed one.
    let replay_every = if options.replay_fraction > 0.0 {
        (1.0 / options.replay_fraction).round().max(1.0) as usize
    } else {
        usize::MAX
    };
    let mut workers = Vec::new();
    for w in 0..options.concurrency.max(1) {
        let client = NotificationServiceClient::new(channels[w % channels.len()].clone());
        let next = next.clone();
        let outcome = outcome.clone();
        let hosts = hosts.clone();
        let run_tag = run_tag.to_owned();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors: BTreeMap<String, usize> = BTreeMap::new();
            let mut ids = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    break;
                }
                let request = report(i, &hosts, &run_tag);
                let copies = if i % replay_every == replay_every - 1 {
                    2
                } else {
                    1
                };
                let calls = (0..copies).map(|_| {
                    let mut client = client.clone();
                    let request = request.clone();
                    async move {
                        let t = Instant::now();
                        let answer = client.create_notification(request).await;
                        (t.elapsed(), answer)
                    }
                });
                for (took, answer) in futures::future::join_all(calls).await {
                    match answer {
                        Ok(n) => {
                            latencies.push(took.as_secs_f64() * 1000.0);
                            ids.push((i, n.into_inner().id));
                        }
                        Err(status) => {
                            *errors.entry(format!("{:?}", status.code())).or_default() += 1;
                        }
                    }
                }
            }
            let mut outcome = outcome.lock().await;
            outcome.latencies_ms.extend(latencies);
            outcome.ids.extend(ids);
            for (k, v) in errors {
                *outcome.errors.entry(k).or_default() += v;
            }
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

/// Report `i`: a VM failure on host `i mod hosts`.
fn report(i: usize, hosts: &[String], run_tag: &str) -> pb::CreateNotificationRequest {
    let now = chrono::Utc::now();
    pb::CreateNotificationRequest {
        r#type: pb::NotificationType::Vm as i32,
        hostname: hosts[i % hosts.len()].clone(),
        generated_time: Some(instanceha_proto::time::timestamp(now.trunc_subsecs(6))),
        payload: [
            ("instance_uuid", uuid::Uuid::new_v4().to_string()),
            ("vir_domain_event", "STOPPED_FAILED".to_owned()),
            ("event", "LIFECYCLE".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
        idempotency_key: format!("bench-{run_tag}-{i}"),
    }
}

/// Fails unless the run kept every report exactly once.
pub fn check(report: &IntakeReport) -> anyhow::Result<()> {
    if report.lost_or_duplicated {
        bail!(
            "intake on {}: {} stored for {} reports, {} duplicated ids, {} missing, {} replay mismatches, errors {:?}",
            report.database,
            report.stored,
            report.expected,
            report.duplicated_ids,
            report.missing,
            report.replay_mismatches,
            report.errors
        );
    }
    Ok(())
}
