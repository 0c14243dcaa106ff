//! The fault matrix: for every OpenStack call site of a recovery and every
//! kind of fault, transient (the next N calls, N within the retry budget)
//! and persistent (every call), a whole recovery runs through
//! `instanceha-api`, `instanceha-engine` and `openstack-sim`, and the
//! promises of the design brief are checked on what the API then reports
//! and on the simulated cloud:
//!
//! * the notification exists and reaches a terminal state within a bound;
//! * a terminal notification has no vmove `pending` or `ongoing`;
//! * `finished` only if every vmove `succeeded` or was `ignored`;
//! * every failed vmove has an end time and a message;
//! * an instance still locked by the engine (lock reason with the engine's
//!   prefix) has its vmove say so (`locked`) and is named in the
//!   notification's message; once the fault is gone, the notification
//!   releases every such lock;
//! * and, to keep the reports truthful: a `succeeded` vmove's instance is
//!   really settled away from the failed host (or running, for a restart).
//!
//! Every scenario has a cloud of its own (simulator, engine, API on an
//! SQLite file) on a runtime of its own, several run at once. The test
//! prints a table and totals and fails if an invariant is violated or a
//! fault never fired (a scenario that proves nothing).
//!
//! ```sh
//! cargo test -p instanceha-engine --test it fault_matrix -- --nocapture
//! ```
//!
//! `INSTANCEHA_FAULT_MATRIX_JOBS` sets how many scenarios run at once
//! (default: 4 per CPU, at most 12); `INSTANCEHA_FAULT_MATRIX_FILTER` keeps
//! the scenarios whose name contains it (e.g. `evacuate/503`). The table is
//! also written to `fault-matrix.txt` in Cargo's target tmp directory.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use instanceha_api::config::Settings as ApiSettings;
use instanceha_engine::config::Settings as EngineSettings;
use instanceha_engine::recovery::Engine;
use instanceha_proto::v1 as pb;
use instanceha_testkit::eventually::until;
use openstack_client::OpenStack;
use openstack_client::retry::RetryPolicy;
use openstack_sim::WorldSnapshot;
use openstack_sim::scenario::{HostSpec, InstanceSpec};
use openstack_sim::{ErrorBody, FaultEffect, FaultRule, FaultService, Scenario, Sim};
use pb::notification_service_client::NotificationServiceClient;
use pb::vmove_service_client::VmoveServiceClient;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// A scenario's notification must be terminal within this.
const BOUND: Duration = Duration::from_secs(90);
/// Once the fault is gone, the locks the notification still holds must be
/// released within this.
const HEAL_BOUND: Duration = Duration::from_secs(30);
/// The engine's per-request timeout: a hung call costs this per attempt.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(750);
/// Attempts per idempotent call (the engine's retry budget).
const MAX_ATTEMPTS: u32 = 3;
/// Simulated seconds per real second.
const SPEED: f64 = 100.0;
/// The engine's lock reason prefix (its default).
const LOCK_PREFIX: &str = "instance-ha";
const FAILED_HOST: &str = "compute-01";

/// Where in a recovery the fault strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// Keystone login, forced by revoking every token once the engine
    /// has logged in, before the notification.
    AuthAtStart,
    /// Keystone login, forced by revoking every token right after the
    /// first evacuation request (mid-recovery).
    AuthMidway,
    /// `GET /servers/detail` (the host's instances).
    List,
    /// `GET /servers/{id}` of one instance.
    Get,
    /// `POST /servers/{id}/action` lock.
    Lock,
    /// `GET /volumes/{id}` of a boot-from-volume instance's root volume.
    VolumeShow,
    /// `GET /attachments?volume_id=...`.
    AttachmentList,
    /// `GET /servers/{id}/os-volume_attachments`.
    BdmList,
    /// `DELETE /attachments/{id}` of the stale attachment on the dead host.
    AttachmentDelete,
    /// `DELETE /attachments/{id}` of Nova's attachment of a volume whose
    /// detach is in progress (as a service).
    StuckDelete,
    /// `POST /servers/{id}/action` evacuate.
    Evacuate,
    /// `GET /os-migrations` and the server reads while waiting.
    Poll,
    /// `POST /servers/{id}/action` os-start: restoring the state of an
    /// instance Nova (2.95) brings back stopped.
    Start,
    /// `POST /servers/{id}/action` os-stop: an instance failure (VM).
    Stop,
    /// `POST /servers/{id}/action` os-start: an instance failure (VM).
    StartVm,
    /// `POST /servers/{id}/action` unlock.
    Unlock,
    /// `PUT /os-services/{id}` (force down, disable).
    ServiceUpdate,
}

impl Site {
    pub const ALL: [Site; 17] = [
        Site::AuthAtStart,
        Site::AuthMidway,
        Site::List,
        Site::Get,
        Site::Lock,
        Site::VolumeShow,
        Site::AttachmentList,
        Site::BdmList,
        Site::AttachmentDelete,
        Site::StuckDelete,
        Site::Evacuate,
        Site::Poll,
        Site::Start,
        Site::Stop,
        Site::StartVm,
        Site::Unlock,
        Site::ServiceUpdate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Site::AuthAtStart => "auth@start",
            Site::AuthMidway => "auth@midway",
            Site::List => "list",
            Site::Get => "get",
            Site::Lock => "lock",
            Site::VolumeShow => "volume-show",
            Site::AttachmentList => "attachment-list",
            Site::BdmList => "bdm-list",
            Site::AttachmentDelete => "attachment-delete",
            Site::StuckDelete => "stuck-delete",
            Site::Evacuate => "evacuate",
            Site::Poll => "poll",
            Site::Start => "start",
            Site::Stop => "stop(vm)",
            Site::StartVm => "start(vm)",
            Site::Unlock => "unlock",
            Site::ServiceUpdate => "service-update",
        }
    }

    /// The calls the fault hits.
    fn rules(self, ids: &Ids, effect: &FaultEffect) -> Vec<FaultRule> {
        use FaultService::{Compute, Identity, Volume};
        let rule = |service, method, path: &str| {
            FaultRule::new(service, Some(method), Some(path), effect.clone())
        };
        let action = |name: &str| {
            rule(Compute, "POST", "/servers/*/action")
                .action(name)
                .instance(&ids.victim)
        };
        match self {
            Site::AuthAtStart | Site::AuthMidway => vec![rule(Identity, "POST", "/auth/tokens")],
            Site::List => vec![rule(Compute, "GET", "/servers/detail")],
            Site::Get => vec![rule(Compute, "GET", &format!("/servers/{}", ids.victim))],
            Site::Lock => vec![action("lock")],
            Site::VolumeShow => vec![rule(
                Volume,
                "GET",
                &format!("/volumes/{}", ids.stale_volume),
            )],
            Site::AttachmentList => vec![rule(Volume, "GET", "/attachments")],
            Site::BdmList => vec![rule(
                Compute,
                "GET",
                &format!("/servers/{}/os-volume_attachments", ids.stale),
            )],
            Site::AttachmentDelete => vec![rule(
                Volume,
                "DELETE",
                &format!("/attachments/{}", ids.stale_attachment),
            )],
            Site::StuckDelete => vec![rule(
                Volume,
                "DELETE",
                &format!("/attachments/{}", ids.stuck_attachment),
            )],
            Site::Evacuate => vec![action("evacuate")],
            Site::Poll => vec![
                rule(Compute, "GET", "/os-migrations"),
                rule(Compute, "GET", &format!("/servers/{}", ids.victim)),
            ],
            Site::Start | Site::StartVm => vec![action("os-start")],
            Site::Stop => vec![action("os-stop")],
            Site::Unlock => vec![action("unlock")],
            Site::ServiceUpdate => vec![rule(Compute, "PUT", "/os-services/*")],
        }
    }
}

/// What the faulty calls suffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Unavailable,
    UnavailableRetryAfter,
    Internal,
    Unauthorized,
    /// The call hangs, beyond the engine's request timeout.
    Timeout,
    /// The connection is closed without an answer.
    Dropped,
    /// 404, as if the object vanished mid-recovery.
    NotFound,
}

impl Fault {
    pub const ALL: [Fault; 7] = [
        Fault::Unavailable,
        Fault::UnavailableRetryAfter,
        Fault::Internal,
        Fault::Unauthorized,
        Fault::Timeout,
        Fault::Dropped,
        Fault::NotFound,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Unavailable => "503",
            Fault::UnavailableRetryAfter => "503+retry-after",
            Fault::Internal => "500",
            Fault::Unauthorized => "401",
            Fault::Timeout => "timeout",
            Fault::Dropped => "dropped",
            Fault::NotFound => "404",
        }
    }

    fn effect(self) -> FaultEffect {
        let error = |status, body, retry_after| FaultEffect::Error {
            status,
            body,
            message: None,
            retry_after,
        };
        match self {
            Fault::Unavailable => error(503, ErrorBody::Json, None),
            // A load balancer's page asking to come back in a second.
            Fault::UnavailableRetryAfter => error(503, ErrorBody::Html, Some(1)),
            Fault::Internal => error(500, ErrorBody::Json, None),
            Fault::Unauthorized => error(401, ErrorBody::Json, None),
            Fault::Timeout => FaultEffect::Hang,
            Fault::Dropped => FaultEffect::Drop,
            Fault::NotFound => error(404, ErrorBody::Json, None),
        }
    }

    /// How many calls a transient fault hits: what the client may absorb
    /// (its retries of transient failures, its one re-authentication), and
    /// one call for faults no client retries.
    fn transient_calls(self) -> u32 {
        match self {
            Fault::Unavailable | Fault::UnavailableRetryAfter | Fault::Timeout | Fault::Dropped => {
                MAX_ATTEMPTS - 1
            }
            Fault::Unauthorized | Fault::Internal | Fault::NotFound => 1,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    Transient,
    Persistent,
}

#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub site: Site,
    pub fault: Fault,
    pub span: Span,
}

impl Spec {
    pub fn name(&self) -> String {
        format!(
            "{}/{}/{}",
            self.site.name(),
            self.fault.name(),
            match self.span {
                Span::Transient => "transient",
                Span::Persistent => "persistent",
            }
        )
    }
}

/// The instances and volumes the faults aim at.
struct Ids {
    victim: String,
    stale: String,
    stale_volume: String,
    /// The stale volume's attachment Nova does not use.
    stale_attachment: String,
    /// Nova's attachment of the volume left detaching.
    stuck_attachment: String,
}

/// What one scenario ended with.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub spec: Spec,
    pub status: String,
    pub vmoves: String,
    pub hits: usize,
    pub seconds: f64,
    pub violations: Vec<String>,
    /// Not violations, but worth knowing: instances reported deleted that
    /// exist, and how long the client waited after a `Retry-After`.
    pub notes: Vec<String>,
    pub message: String,
}

/// The cloud: two computes; on the one that fails an image-backed
/// instance, a boot-from-volume one whose root volume has a stale
/// attachment on the failed host, and one whose volume's detach is in
/// progress (`detaching`, its attachment `attached`: Nova's attachment
/// force-detached with a service token).
fn world(speed: f64) -> Scenario {
    Scenario::builder()
        .speed(speed)
        .seed(7)
        .host(HostSpec::new(FAILED_HOST))
        .host(HostSpec::new("compute-02"))
        .instance(InstanceSpec::new("victim", FAILED_HOST).ha(true))
        .instance(
            InstanceSpec::new("bfv-stale", FAILED_HOST)
                .ha(true)
                .stale_attachment(),
        )
        .instance(
            InstanceSpec::new("bfv-stuck", FAILED_HOST)
                .ha(true)
                .root_attach_status("detaching"),
        )
        .build()
        .expect("a valid scenario")
}

fn engine_settings(sim: &Sim, site: Site) -> EngineSettings {
    let mut settings =
        instanceha_testkit::cloud::engine_settings(sim, "127.0.0.1:0".parse().unwrap());
    settings.openstack.request_timeout = REQUEST_TIMEOUT;
    settings.openstack.service_update_timeout = REQUEST_TIMEOUT * 2;
    settings.openstack.retry = RetryPolicy {
        max_attempts: MAX_ATTEMPTS,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        max_retry_after: Duration::from_millis(200),
        ..RetryPolicy::default()
    };
    settings.recovery.poll_interval = Duration::from_millis(20);
    settings.recovery.evacuation_timeout = Duration::from_secs(15);
    settings.recovery.power_timeout = Duration::from_secs(5);
    if site == Site::Start {
        // From 2.95 Nova brings an evacuated instance back stopped: the
        // engine starts it again.
        settings.openstack.nova_microversion = Some("2.95".to_owned());
    }
    settings
}

/// The engine on the current runtime until `stop`.
async fn serve_engine(settings: EngineSettings, stop: CancellationToken) -> SocketAddr {
    let (credentials, service, client) = settings
        .openstack_client(&Default::default())
        .expect("credentials");
    let openstack = OpenStack::new(credentials, service, client).expect("client");
    let engine = Engine::new(
        openstack,
        settings.recovery_settings(),
        settings.recovery.max_concurrent_instances_total,
    );
    let server = instanceha_engine::server::Server::bind(settings.listen, engine)
        .await
        .expect("the engine binds");
    let addr = server.local_addr();
    tokio::spawn(server.run(stop.cancelled_owned()));
    addr
}

/// The API on the current runtime until `stop`.
async fn serve_api(settings: ApiSettings, stop: CancellationToken) -> SocketAddr {
    let server = instanceha_api::server::Server::bind(&settings)
        .await
        .expect("the API starts");
    let addr = server.local_addr();
    tokio::spawn(server.run(stop.cancelled_owned()));
    addr
}

/// Waits until `sim`'s log shows a call `matching`, or `within` passed.
async fn seen(sim: &Sim, within: Duration, matching: impl Fn(&RequestView<'_>) -> bool) -> bool {
    let found = until(within, Duration::from_millis(2), || {
        let found = sim.request_log(None).iter().any(|r| {
            matching(&RequestView {
                service: &r.service,
                method: &r.method,
                path: &r.path,
                action: r.action.as_deref(),
                status: r.status,
            })
        });
        async move { found }
    });
    found.await.is_ok()
}

struct RequestView<'a> {
    service: &'a str,
    method: &'a str,
    path: &'a str,
    action: Option<&'a str>,
    status: Option<u16>,
}

fn install(sim: &Sim, spec: &Spec, ids: &Ids) -> Vec<u64> {
    spec.site
        .rules(ids, &spec.fault.effect())
        .into_iter()
        .map(|rule| {
            let rule = match spec.span {
                Span::Transient => rule.times(spec.fault.transient_calls()),
                Span::Persistent => rule,
            };
            sim.inject_fault(rule).expect("a valid fault rule")
        })
        .collect()
}

/// Runs one scenario; `dir` holds its database (removed by the caller once
/// the scenario's runtime is gone).
async fn run_scenario(spec: Spec, dir: &Path) -> Outcome {
    let started = Instant::now();
    let speed = if spec.site == Site::AuthMidway {
        // Slow enough that the evacuations are still under way when the
        // tokens are revoked.
        20.0
    } else {
        SPEED
    };
    let sim = Sim::start(world(speed), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("the simulator starts");
    let stop = CancellationToken::new();
    let engine = serve_engine(engine_settings(&sim, spec.site), stop.clone()).await;
    let database_url = format!("sqlite://{}", dir.join("api.db").display());
    let api = serve_api(
        instanceha_testkit::cloud::api_settings(
            &database_url,
            engine,
            "127.0.0.1:0".parse().unwrap(),
        ),
        stop.clone(),
    )
    .await;
    let channel = instanceha_testkit::cloud::connect(api).await;
    let mut notifications = NotificationServiceClient::new(channel.clone());
    let mut vmoves_client = VmoveServiceClient::new(channel.clone());
    segment(channel).await;

    let snapshot = sim.snapshot();
    let id_of = |name: &str| snapshot.instance_by_name(name).unwrap().id.clone();
    let stale_volume = snapshot.volume_by_name("bfv-stale-root").unwrap();
    let stale_bdm = snapshot.instance_by_name("bfv-stale").unwrap().bdms[0]
        .attachment_id
        .clone();
    let ids = Ids {
        victim: id_of("victim"),
        stale: id_of("bfv-stale"),
        stale_volume: stale_volume.id.clone(),
        stale_attachment: stale_volume
            .attachments
            .iter()
            .find(|a| Some(&a.id) != stale_bdm.as_ref())
            .expect("a stale attachment")
            .id
            .clone(),
        stuck_attachment: snapshot
            .volume_by_name("bfv-stuck-root")
            .unwrap()
            .attachments[0]
            .id
            .clone(),
    };

    // The engine logs in and discovers the endpoints when it starts; the
    // faults come after that.
    seen(&sim, Duration::from_secs(10), |r| {
        r.service == "volume" && r.method == "GET" && !r.path.contains("/volumes/")
    })
    .await;

    let mut fault_ids = Vec::new();
    if spec.site == Site::AuthAtStart {
        sim.revoke_all_tokens();
    }
    if spec.site != Site::AuthMidway {
        fault_ids = install(&sim, &spec, &ids);
    }

    let report = if matches!(spec.site, Site::Stop | Site::StartVm) {
        pb::CreateNotificationRequest {
            r#type: pb::NotificationType::Vm as i32,
            hostname: FAILED_HOST.into(),
            generated_time: Some(instanceha_testkit::cloud::now()),
            payload: [
                ("instance_uuid", ids.victim.as_str()),
                ("event", "LIFECYCLE"),
                ("vir_domain_event", "STOPPED_FAILED"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            idempotency_key: String::new(),
        }
    } else {
        sim.power_off(FAILED_HOST).unwrap();
        pb::CreateNotificationRequest {
            r#type: pb::NotificationType::ComputeHost as i32,
            hostname: FAILED_HOST.into(),
            generated_time: Some(instanceha_testkit::cloud::now()),
            payload: instanceha_testkit::cloud::fenced_host_payload(),
            idempotency_key: String::new(),
        }
    };
    let created = notifications
        .create_notification(report)
        .await
        .expect("the notification is accepted")
        .into_inner();

    let mut violations = Vec::new();
    if spec.site == Site::AuthMidway {
        if seen(&sim, Duration::from_secs(20), |r| {
            r.action == Some("evacuate") && r.status.is_some_and(|s| (200..300).contains(&s))
        })
        .await
        {
            sim.revoke_all_tokens();
            fault_ids = install(&sim, &spec, &ids);
        } else {
            violations.push("no evacuation to revoke the tokens after".to_owned());
        }
    }

    // Never lost: it exists and ends within the bound.
    let deadline = Instant::now() + BOUND;
    let notification = loop {
        let read = notifications
            .get_notification(pb::GetNotificationRequest {
                id: created.id.clone(),
            })
            .await;
        match read {
            Ok(n) => {
                let n = n.into_inner();
                if is_terminal(&n) || Instant::now() >= deadline {
                    break Some(n);
                }
            }
            Err(status) => {
                violations.push(format!("notification lost: {status}"));
                break None;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let vmoves = vmoves_client
        .list_vmoves(pb::ListVmovesRequest {
            notification_id: created.id.clone(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().vmoves)
        .unwrap_or_default();
    let world = sim.snapshot();
    if let Some(n) = &notification {
        violations.extend(invariant_violations(n, &vmoves, &Server::all(&world)));
    }
    let log = sim.request_log(None);
    let hits = log
        .iter()
        .filter(|r| r.fault_id.is_some_and(|id| fault_ids.contains(&id)))
        .count();
    let mut notes = Vec::new();
    for v in &vmoves {
        if instanceha_testkit::check::vmove_status(v) == pb::VmoveStatus::Ignored
            && let Some(i) = world.instance(&v.instance_id)
        {
            notes.push(format!(
                "{} ignored ({}) but Nova has it {} on {}",
                short(&v.instance_name),
                v.message,
                i.vm_state.as_str(),
                i.host.as_deref().unwrap_or("-")
            ));
        }
    }
    if spec.fault == Fault::UnavailableRetryAfter
        && spec.span == Span::Transient
        && let Some(gap) = retry_gap(&log, &fault_ids)
    {
        notes.push(format!("next try {gap}ms after the Retry-After answer"));
    }

    // Once Nova answers again, no lock of ours is left: the notification
    // that took it releases it.
    if notification.is_some() {
        for id in &fault_ids {
            sim.delete_fault(*id);
        }
        if spec.site == Site::AuthMidway {
            // Keystone answers again: only the revoked tokens stay revoked.
            sim.clear_faults();
        }
        if let Some(left) = locks_left_after(&sim, HEAL_BOUND).await {
            violations.push(format!(
                "still locked {HEAL_BOUND:?} after the fault ended: {left}"
            ));
        }
    }

    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), sim.shutdown()).await;
    let mut names: Vec<String> = vmoves
        .iter()
        .map(|v| format!("{}={}", short(&v.instance_name), letter(v)))
        .collect();
    names.sort();
    Outcome {
        spec,
        status: notification
            .as_ref()
            .map(|n| {
                instanceha_testkit::check::status(n)
                    .as_str_name()
                    .trim_start_matches("NOTIFICATION_STATUS_")
                    .to_lowercase()
            })
            .unwrap_or_else(|| "lost".to_owned()),
        vmoves: if names.is_empty() {
            "-".to_owned()
        } else {
            names.join(" ")
        },
        hits,
        seconds: started.elapsed().as_secs_f64(),
        violations,
        notes,
        message: notification.map(|n| n.message).unwrap_or_default(),
    }
}

/// Waits until no instance holds a lock of the engine's, at most `within`;
/// the names of those still locked then.
async fn locks_left_after(sim: &Sim, within: Duration) -> Option<String> {
    let none_left = until(within, Duration::from_millis(50), || async {
        let world = sim.snapshot();
        let left: Vec<String> = Server::all(&world)
            .into_iter()
            .filter(|i| {
                i.locked
                    && i.locked_reason
                        .as_deref()
                        .is_some_and(|r| r.starts_with(LOCK_PREFIX))
            })
            .map(|i| i.name)
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(left.join(", "))
        }
    });
    none_left.await.err()
}

/// The shortest wait between an answer with `Retry-After` and the next
/// try of the same call.
fn retry_gap(log: &[openstack_sim::RequestRecord], fault_ids: &[u64]) -> Option<i64> {
    log.iter()
        .filter(|r| r.fault_id.is_some_and(|id| fault_ids.contains(&id)))
        .filter_map(|faulted| {
            let answered = faulted.time
                + chrono::Duration::microseconds((faulted.duration_ms * 1000.0) as i64);
            log.iter()
                .find(|r| {
                    r.seq > faulted.seq
                        && r.method == faulted.method
                        && r.path == faulted.path
                        && r.query == faulted.query
                        && r.action == faulted.action
                })
                .map(|next| (next.time - answered).num_milliseconds())
        })
        .min()
}

async fn segment(channel: Channel) {
    instanceha_testkit::cloud::auto_segment(channel, &[FAILED_HOST, "compute-02"]).await;
}

fn is_terminal(n: &pb::Notification) -> bool {
    matches!(
        instanceha_testkit::check::status(n),
        pb::NotificationStatus::Finished
            | pb::NotificationStatus::Failed
            | pb::NotificationStatus::Ignored
    )
}

fn short(name: &str) -> &str {
    match name {
        "victim" => "vic",
        "bfv-stale" => "stale",
        "bfv-stuck" => "stuck",
        other => other,
    }
}

fn letter(v: &pb::Vmove) -> &'static str {
    match instanceha_testkit::check::vmove_status(v) {
        pb::VmoveStatus::Pending => "PENDING",
        pb::VmoveStatus::Ongoing => "ONGOING",
        pb::VmoveStatus::Succeeded => "ok",
        pb::VmoveStatus::Failed => "failed",
        pb::VmoveStatus::Ignored => "ignored",
        _ => "?",
    }
}

/// What the invariants need to know of a server in the simulated cloud.
#[derive(Clone, Debug)]
pub struct Server {
    pub id: String,
    pub name: String,
    pub host: Option<String>,
    pub vm_state: String,
    pub task_state: Option<String>,
    pub locked: bool,
    pub locked_reason: Option<String>,
}

impl Server {
    pub fn all(world: &WorldSnapshot) -> Vec<Server> {
        world
            .instances
            .iter()
            .map(|i| Server {
                id: i.id.clone(),
                name: i.name.clone(),
                host: i.host.clone(),
                vm_state: i.vm_state.as_str().to_owned(),
                task_state: i.task_state.map(|t| format!("{t:?}")),
                locked: i.locked,
                locked_reason: i.locked_reason.clone(),
            })
            .collect()
    }

    /// From the simulator's `GET /sim/state` as JSON.
    pub fn from_state(state: &serde_json::Value) -> Vec<Server> {
        let text = |v: &serde_json::Value, key: &str| {
            v.get(key).and_then(|x| x.as_str()).map(str::to_owned)
        };
        state["instances"]
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|i| Server {
                        id: text(i, "id").unwrap_or_default(),
                        name: text(i, "name").unwrap_or_default(),
                        host: text(i, "host"),
                        vm_state: text(i, "vm_state").unwrap_or_default(),
                        task_state: i
                            .get("task_state")
                            .filter(|t| !t.is_null())
                            .map(|t| t.to_string()),
                        locked: i.get("locked").and_then(|l| l.as_bool()).unwrap_or(false),
                        locked_reason: text(i, "locked_reason"),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The invariants, as a list of what is wrong (empty: all hold).
pub fn invariant_violations(
    n: &pb::Notification,
    vmoves: &[pb::Vmove],
    servers: &[Server],
) -> Vec<String> {
    let find = |id: &str| servers.iter().find(|s| s.id == id);
    let mut wrong = Vec::new();
    let status = instanceha_testkit::check::status(n);
    if !is_terminal(n) {
        wrong.push(format!(
            "not terminal within {}s: still {status:?} ({})",
            BOUND.as_secs(),
            n.message
        ));
    }
    for v in vmoves {
        let vs = instanceha_testkit::check::vmove_status(v);
        let who = &v.instance_name;
        if is_terminal(n) && matches!(vs, pb::VmoveStatus::Pending | pb::VmoveStatus::Ongoing) {
            wrong.push(format!("{status:?} notification with {who} {vs:?}"));
        }
        if vs == pb::VmoveStatus::Failed {
            if v.end_time.is_none() {
                wrong.push(format!("{who} failed without an end time"));
            }
            if v.message.trim().is_empty() {
                wrong.push(format!("{who} failed without a message"));
            }
        }
        if vs == pb::VmoveStatus::Succeeded {
            match find(&v.instance_id) {
                None => wrong.push(format!("{who} succeeded but is gone")),
                Some(i) if v.r#type == pb::VmoveType::Restart as i32 => {
                    if i.vm_state != "active" || i.task_state.is_some() {
                        wrong.push(format!(
                            "{who} restart succeeded but it is {} (task {:?})",
                            i.vm_state, i.task_state
                        ));
                    }
                }
                Some(i) => {
                    let settled = i.task_state.is_none()
                        && matches!(i.vm_state.as_str(), "active" | "stopped");
                    if i.host.as_deref() == Some(v.source_host.as_str()) || !settled {
                        wrong.push(format!(
                            "{who} succeeded but it is {} on {:?} (task {:?})",
                            i.vm_state, i.host, i.task_state
                        ));
                    }
                }
            }
        }
    }
    if status == pb::NotificationStatus::Finished
        && let Some(v) = vmoves.iter().find(|v| {
            !matches!(
                instanceha_testkit::check::vmove_status(v),
                pb::VmoveStatus::Succeeded | pb::VmoveStatus::Ignored
            )
        })
    {
        wrong.push(format!(
            "finished with {} {:?}",
            v.instance_name,
            instanceha_testkit::check::vmove_status(v)
        ));
    }
    if status == pb::NotificationStatus::Failed && n.message.trim().is_empty() {
        wrong.push("failed without a message".to_owned());
    }
    for i in servers {
        let ours = i.locked
            && i.locked_reason
                .as_deref()
                .is_some_and(|r| r.starts_with(LOCK_PREFIX));
        if !ours {
            continue;
        }
        // A lock still held is recorded on the vmove and listed in the
        // notification's message (released later, see `heal`).
        let said = vmoves.iter().any(|v| v.instance_id == i.id && v.locked)
            && n.message.contains(i.name.as_str());
        if !said {
            wrong.push(format!(
                "{} left locked by the engine without its vmove saying so",
                i.name
            ));
        }
    }
    wrong
}

/// Every scenario of the matrix.
pub fn all_specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    for site in Site::ALL {
        for fault in Fault::ALL {
            for span in [Span::Transient, Span::Persistent] {
                specs.push(Spec { site, fault, span });
            }
        }
    }
    specs
}

/// Runs `specs`, `jobs` at a time, each on a runtime of its own.
pub fn run_all(specs: Vec<Spec>, jobs: usize) -> Vec<Outcome> {
    // The services bind their metric instruments to the meter provider of
    // the moment: the test binary's telemetry pipelines go in first.
    instanceha_testkit::telemetry::captured();
    let specs = Arc::new(specs);
    let next = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..jobs.max(1))
        .map(|_| {
            let specs = specs.clone();
            let next = next.clone();
            let outcomes = outcomes.clone();
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(spec) = specs.get(i).copied() else {
                        return;
                    };
                    let runtime = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .enable_all()
                        .build()
                        .expect("a runtime");
                    let started = Instant::now();
                    let dir = tempfile::tempdir().expect("a temporary directory");
                    let result = runtime
                        .block_on(AssertUnwindSafe(run_scenario(spec, dir.path())).catch_unwind());
                    runtime.shutdown_timeout(Duration::from_secs(1));
                    drop(dir);
                    let outcome = result.unwrap_or_else(|panic| Outcome {
                        spec,
                        status: "panicked".to_owned(),
                        vmoves: "-".to_owned(),
                        hits: 0,
                        seconds: started.elapsed().as_secs_f64(),
                        violations: vec![format!(
                            "the scenario panicked: {}",
                            instanceha_runtime::panic::message(panic.as_ref())
                        )],
                        notes: Vec::new(),
                        message: String::new(),
                    });
                    outcomes.lock().unwrap().push((i, outcome));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a matrix worker");
    }
    let mut outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    outcomes.sort_by_key(|(i, _)| *i);
    outcomes.into_iter().map(|(_, o)| o).collect()
}

/// The table and the totals.
pub fn summary(outcomes: &[Outcome], wall: Duration) -> (String, usize, usize) {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<46} {:<9} {:<34} {:>4} {:>6}  violations | notes",
        "scenario (site/fault/span)", "status", "vmoves", "hits", "secs"
    );
    for o in outcomes {
        let _ = writeln!(
            out,
            "{:<46} {:<9} {:<34} {:>4} {:>6.1}  {}{}",
            o.spec.name(),
            o.status,
            o.vmoves,
            o.hits,
            o.seconds,
            if o.violations.is_empty() {
                "-".to_owned()
            } else {
                o.violations.join("; ")
            },
            if o.notes.is_empty() {
                String::new()
            } else {
                format!(" | {}", o.notes.join("; "))
            }
        );
    }
    // The matrix at a glance: per site and fault, the transient and the
    // persistent outcome (F finished, x failed, i ignored, ! violation).
    let _ = write!(out, "\n{:<18}", "site \\ fault");
    for fault in Fault::ALL {
        let _ = write!(out, " {:>15}", fault.name());
    }
    let _ = writeln!(out, "   (transient/persistent)");
    for site in Site::ALL {
        let cells: Vec<String> = Fault::ALL
            .iter()
            .map(|&fault| {
                [Span::Transient, Span::Persistent]
                    .iter()
                    .map(|&span| {
                        outcomes
                            .iter()
                            .find(|o| {
                                o.spec.site == site && o.spec.fault == fault && o.spec.span == span
                            })
                            .map_or(".", |o| {
                                if !o.violations.is_empty() {
                                    "!"
                                } else {
                                    match o.status.as_str() {
                                        "finished" => "F",
                                        "failed" => "x",
                                        "ignored" => "i",
                                        _ => "?",
                                    }
                                }
                            })
                    })
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        if cells.iter().all(|c| c == "./.") {
            continue;
        }
        let _ = write!(out, "{:<18}", site.name());
        for cell in cells {
            let _ = write!(out, " {cell:>15}");
        }
        let _ = writeln!(out);
    }
    let count = |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let transient = count(&|o| o.spec.span == Span::Transient);
    let transient_finished = count(&|o| o.spec.span == Span::Transient && o.status == "finished");
    let persistent = count(&|o| o.spec.span == Span::Persistent);
    let persistent_finished = count(&|o| o.spec.span == Span::Persistent && o.status == "finished");
    let violations: usize = outcomes.iter().map(|o| o.violations.len()).sum();
    let violating = count(&|o| !o.violations.is_empty());
    let vacuous = count(&|o| o.hits == 0);
    let _ = writeln!(
        out,
        "\nscenarios run: {}; finished {}, failed {}, ignored {}, other {}",
        outcomes.len(),
        count(&|o| o.status == "finished"),
        count(&|o| o.status == "failed"),
        count(&|o| o.status == "ignored"),
        count(&|o| !matches!(o.status.as_str(), "finished" | "failed" | "ignored")),
    );
    let _ = writeln!(
        out,
        "transient faults: {transient} run, {transient_finished} recovered (finished); persistent faults: {persistent} run, {persistent_finished} finished anyway, {} failed",
        count(&|o| o.spec.span == Span::Persistent && o.status == "failed"),
    );
    let _ = writeln!(
        out,
        "invariant violations: {violations} (in {violating} scenarios); faults that never fired: {vacuous}; wall time {:.1}s",
        wall.as_secs_f64()
    );
    (out, violations, vacuous)
}

#[test]
fn fault_matrix() {
    let filter = std::env::var("INSTANCEHA_FAULT_MATRIX_FILTER").unwrap_or_default();
    let specs: Vec<Spec> = all_specs()
        .into_iter()
        .filter(|s| s.name().contains(&filter))
        .collect();
    let jobs = std::env::var("INSTANCEHA_FAULT_MATRIX_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get() * 4)
                .unwrap_or(8)
                .min(12)
        });
    let started = Instant::now();
    let outcomes = run_all(specs, jobs);
    let (table, violations, vacuous) = summary(&outcomes, started.elapsed());
    println!("\nFAULT MATRIX ({jobs} at a time)\n{table}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fault-matrix.txt");
    let _ = std::fs::write(&path, &table);
    println!("(also written to {})", path.display());
    if std::env::var_os("INSTANCEHA_FAULT_MATRIX_VERBOSE").is_some() {
        for o in &outcomes {
            println!("{}: {}", o.spec.name(), o.message);
        }
    }
    assert!(!outcomes.is_empty(), "no scenario matches the filter");
    assert_eq!(violations, 0, "invariant violations:\n{table}");
    assert_eq!(vacuous, 0, "faults that never fired:\n{table}");
}
