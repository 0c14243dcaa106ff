//! The test cloud: `openstack-sim`, `instanceha-engine` and
//! `instanceha-api` (on an SQLite file), each service in a runtime of its
//! own so that a test can kill it like a process, all on 127.0.0.1.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use instanceha_api::config::Settings as ApiSettings;
use instanceha_engine::config::Settings as EngineSettings;
use instanceha_engine::recovery::Engine;
use instanceha_proto::v1 as pb;
use instanceha_runtime::secret::Secret;
use openstack_client::OpenStack;
use openstack_client::credentials::AuthSettings;
use openstack_client::retry::RetryPolicy;
use openstack_sim::scenario::{HostSpec, InstanceGroupSpec};
use openstack_sim::{Scenario, Sim};
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use pb::segment_service_client::SegmentServiceClient;
use pb::vmove_service_client::VmoveServiceClient;
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// Simulated seconds per real second in these tests.
pub const SPEED: f64 = 100.0;

/// A service on a runtime of its own: killing it drops every task and
/// connection at once, as a crashed process would.
pub struct Process {
    runtime: Option<tokio::runtime::Runtime>,
    pub addr: SocketAddr,
}

impl Process {
    pub fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A runtime for one service. The telemetry pipelines go in first: the
/// services create their metric instruments once per process, from the
/// meter provider installed at that moment, so a service started before
/// the pipelines would count into nothing for the rest of the binary.
fn runtime() -> tokio::runtime::Runtime {
    crate::telemetry::installed();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Engine settings for the simulator: admin credentials, the `nova`
/// service identity, fast polling and short retries.
pub fn engine_settings(sim: &Sim, listen: SocketAddr) -> EngineSettings {
    let mut settings = EngineSettings {
        listen,
        ..EngineSettings::default()
    };
    let user = |name: &str, project: &str| AuthSettings {
        auth_url: Some(sim.auth_url()),
        username: Some(name.to_owned()),
        password: Some(Secret::new("secret")),
        project_name: Some(project.to_owned()),
        user_domain_name: Some("Default".to_owned()),
        project_domain_name: Some("Default".to_owned()),
        ..AuthSettings::default()
    };
    settings.openstack.auth = user("admin", "admin");
    settings.openstack.service_auth = Some(user("nova", "service"));
    settings.openstack.interfaces = vec!["public".to_owned()];
    settings.openstack.request_timeout = Duration::from_secs(2);
    settings.openstack.retry = RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        max_retry_after: Duration::from_millis(100),
    };
    settings.recovery.poll_interval = Duration::from_millis(20);
    settings.recovery.evacuation_timeout = Duration::from_secs(20);
    settings.recovery.power_timeout = Duration::from_secs(10);
    settings.host_failure.service_down_timeout = Duration::from_secs(5);
    settings
}

pub async fn start_engine(settings: EngineSettings) -> Process {
    let runtime = runtime();
    let (tx, rx) = oneshot::channel();
    runtime.spawn(async move {
        let (credentials, service, client) = settings
            .openstack_client(&BTreeMap::new())
            .expect("credentials");
        let openstack = OpenStack::new(credentials, service, client).expect("client");
        let engine = Engine::new(
            openstack,
            settings.recovery_settings(),
            settings.recovery.max_concurrent_instances_total,
        );
        let tls = settings.tls.load("tls").expect("the engine's TLS settings");
        let server = instanceha_engine::server::Server::bind(settings.listen, engine)
            .await
            .expect("the engine binds")
            .with_tls(tls);
        let _ = tx.send(server.local_addr());
        server
            .run(std::future::pending::<()>())
            .await
            .expect("the engine serves");
    });
    let addr = rx.await.expect("the engine started");
    Process {
        runtime: Some(runtime),
        addr,
    }
}

/// API settings: the SQLite file, the engine, fast retries and scans.
pub fn api_settings(database_url: &str, engine: SocketAddr, listen: SocketAddr) -> ApiSettings {
    let mut settings = ApiSettings {
        listen,
        ..ApiSettings::default()
    };
    settings.database.url = database_url.to_owned();
    // Masakari's REST port is fixed by default; tests run side by side.
    settings.rest.listen = "127.0.0.1:0".parse().unwrap();
    settings.auth.mode = instanceha_api::auth::AuthMode::None;
    settings.dispatch.engine_url = format!("http://{engine}");
    settings.dispatch.replica_id = Some("api-test".to_owned());
    settings.dispatch.retry_delay = Duration::from_millis(50);
    settings.dispatch.max_retry_delay = Duration::from_millis(200);
    settings.dispatch.scan_interval = Duration::from_millis(100);
    settings.dispatch.lease = Duration::from_secs(3);
    settings.dispatch.connect_timeout = Duration::from_secs(1);
    settings
}

pub async fn start_api(settings: ApiSettings) -> Process {
    let runtime = runtime();
    let (tx, rx) = oneshot::channel();
    runtime.spawn(async move {
        let server = instanceha_api::server::Server::bind(&settings)
            .await
            .expect("the API starts");
        let _ = tx.send(server.local_addr());
        server
            .run(std::future::pending::<()>())
            .await
            .expect("the API serves");
    });
    let addr = rx.await.expect("the API started");
    Process {
        runtime: Some(runtime),
        addr,
    }
}

/// The whole system.
pub struct Cloud {
    pub sim: Sim,
    pub engine: Process,
    pub api: Process,
    pub database_url: String,
    pub segments: SegmentServiceClient<Channel>,
    pub hosts: HostServiceClient<Channel>,
    pub notifications: NotificationServiceClient<Channel>,
    pub vmoves: VmoveServiceClient<Channel>,
    _dir: tempfile::TempDir,
}

/// Instances on compute-01 in [`interruptible_scenario`].
pub const INTERRUPTIBLE_INSTANCES: usize = 12;

/// Twelve instances on compute-01, two rebuilds at a time on the one
/// destination (compute-02), each rebuild about 0.6 s: a recovery of about
/// four seconds, long enough to interrupt.
pub fn interruptible_scenario() -> Scenario {
    let mut scenario = Scenario::builder()
        .speed(10.0)
        .seed(3)
        .host(HostSpec::new("compute-01"))
        .host(HostSpec::new("compute-02"))
        .build()
        .unwrap();
    scenario.settings.rebuild_concurrency = 2;
    scenario.instance_groups.push(InstanceGroupSpec {
        host: "compute-01".into(),
        count: INTERRUPTIBLE_INSTANCES,
        ha_enabled: true,
        ..InstanceGroupSpec::default()
    });
    scenario
}

/// The scenario builder's settings for tests.
pub fn fast(scenario: openstack_sim::scenario::ScenarioBuilder) -> Scenario {
    scenario
        .speed(SPEED)
        .seed(7)
        .build()
        .expect("a valid scenario")
}

impl Cloud {
    pub async fn start(scenario: Scenario) -> Cloud {
        Self::start_with(scenario, |_| {}, |_| {}).await
    }

    pub async fn start_with(
        scenario: Scenario,
        tune_engine: impl FnOnce(&mut EngineSettings),
        tune_api: impl FnOnce(&mut ApiSettings),
    ) -> Cloud {
        let sim = Sim::start(scenario, "127.0.0.1:0".parse().unwrap())
            .await
            .expect("the simulator starts");
        let mut engine_settings = engine_settings(&sim, "127.0.0.1:0".parse().unwrap());
        tune_engine(&mut engine_settings);
        let engine = start_engine(engine_settings).await;
        let dir = tempfile::tempdir().unwrap();
        let database_url = format!("sqlite://{}", dir.path().join("api.db").display());
        let mut api_settings =
            api_settings(&database_url, engine.addr, "127.0.0.1:0".parse().unwrap());
        tune_api(&mut api_settings);
        let api = start_api(api_settings).await;
        let channel = connect(api.addr).await;
        Cloud {
            sim,
            engine,
            api,
            database_url,
            segments: SegmentServiceClient::new(channel.clone()),
            hosts: HostServiceClient::new(channel.clone()),
            notifications: NotificationServiceClient::new(channel.clone()),
            vmoves: VmoveServiceClient::new(channel),
            _dir: dir,
        }
    }

    /// Points the clients at a (new) API process.
    pub async fn reconnect(&mut self) {
        let channel = connect(self.api.addr).await;
        self.segments = SegmentServiceClient::new(channel.clone());
        self.hosts = HostServiceClient::new(channel.clone());
        self.notifications = NotificationServiceClient::new(channel.clone());
        self.vmoves = VmoveServiceClient::new(channel);
    }

    /// A segment with `hosts` (name, reserved).
    pub async fn segment(
        &mut self,
        method: pb::RecoveryMethod,
        hosts: &[(&str, bool)],
    ) -> pb::Segment {
        create_segment(self.segments.clone(), self.hosts.clone(), method, hosts).await
    }

    /// Sends what a monitoring agent sends for `host` (fenced when
    /// `host_status` is NORMAL).
    pub async fn report(
        &mut self,
        kind: pb::NotificationType,
        host: &str,
        payload: &[(&str, &str)],
    ) -> pb::Notification {
        self.notifications
            .create_notification(pb::CreateNotificationRequest {
                r#type: kind as i32,
                hostname: host.into(),
                generated_time: Some(now()),
                payload: payload
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                idempotency_key: String::new(),
            })
            .await
            .expect("the notification is accepted")
            .into_inner()
    }

    /// Powers `host` off in the simulator and reports it fenced.
    pub async fn host_fails(&mut self, host: &str) -> pb::Notification {
        self.sim.power_off(host).unwrap();
        self.report(
            pb::NotificationType::ComputeHost,
            host,
            &[
                ("event", "STOPPED"),
                ("host_status", "NORMAL"),
                ("cluster_status", "OFFLINE"),
            ],
        )
        .await
    }

    /// How many evacuations of `instance_id` Nova has accepted.
    pub fn accepted_evacuations(&self, instance_id: &str) -> usize {
        self.sim
            .request_log(None)
            .iter()
            .filter(|r| {
                r.action.as_deref() == Some("evacuate")
                    && r.instance_id.as_deref() == Some(instance_id)
                    && r.status.is_some_and(|s| (200..300).contains(&s))
            })
            .count()
    }

    pub async fn notification(&mut self, id: &str) -> pb::Notification {
        self.notifications
            .get_notification(pb::GetNotificationRequest { id: id.into() })
            .await
            .unwrap()
            .into_inner()
    }

    /// Waits until the notification is finished, failed or ignored.
    pub async fn terminal(&mut self, id: &str, within: Duration) -> pb::Notification {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let n = self.notification(id).await;
            let status = pb::NotificationStatus::try_from(n.status).unwrap();
            if matches!(
                status,
                pb::NotificationStatus::Finished
                    | pb::NotificationStatus::Failed
                    | pb::NotificationStatus::Ignored
            ) {
                return n;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "notification still {status:?} after {within:?}: {}",
                n.message
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Reports `host` failed (fenced), waits for the notification's end and
    /// checks the invariants on it and its vmoves ([`assert_honest`]).
    pub async fn recover_host(
        &mut self,
        host: &str,
        within: Duration,
    ) -> (pb::Notification, Vec<pb::Vmove>) {
        let n = self.host_fails(host).await;
        let n = self.terminal(&n.id, within).await;
        let vmoves = self.vmoves(&n.id).await;
        assert_honest(&n, &vmoves);
        (n, vmoves)
    }

    pub async fn vmoves(&mut self, notification: &str) -> Vec<pb::Vmove> {
        self.vmoves
            .list_vmoves(pb::ListVmovesRequest {
                notification_id: notification.into(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .vmoves
    }

    /// The vmove of the server named `name`.
    pub async fn vmove_of(&mut self, notification: &str, name: &str) -> pb::Vmove {
        self.vmoves(notification)
            .await
            .into_iter()
            .find(|v| v.instance_name == name)
            .unwrap_or_else(|| panic!("no vmove for {name}"))
    }

    pub fn server(&self, name: &str) -> openstack_sim::world::model::Instance {
        self.sim
            .snapshot()
            .instance_by_name(name)
            .unwrap_or_else(|| panic!("no server {name}"))
            .clone()
    }
}

/// The segment hosts of most tests: compute-01 fails, compute-02 takes
/// its instances.
pub const TWO_HOSTS: [(&str, bool); 2] = [("compute-01", false), ("compute-02", false)];

/// [`TWO_HOSTS`] and compute-03 as the reserved host.
pub const TWO_HOSTS_AND_A_SPARE: [(&str, bool); 3] = [
    ("compute-01", false),
    ("compute-02", false),
    ("compute-03", true),
];

/// Registers the segment `rack-a` with `hosts` (name, reserved) through
/// the public API.
pub async fn create_segment(
    mut segments: SegmentServiceClient<Channel>,
    mut host_client: HostServiceClient<Channel>,
    method: pb::RecoveryMethod,
    hosts: &[(&str, bool)],
) -> pb::Segment {
    let segment = segments
        .create_segment(pb::CreateSegmentRequest {
            name: "rack-a".into(),
            description: None,
            service_type: "COMPUTE".into(),
            recovery_method: method as i32,
            enabled: None,
        })
        .await
        .unwrap()
        .into_inner();
    for (name, reserved) in hosts {
        host_client
            .create_host(pb::CreateHostRequest {
                segment_id: segment.id.clone(),
                name: (*name).into(),
                r#type: "COMPUTE".into(),
                control_attributes: "SSH".into(),
                reserved: *reserved,
                on_maintenance: false,
            })
            .await
            .unwrap();
    }
    segment
}

/// [`create_segment`] over `channel`, recovery method `auto`, `hosts`
/// not reserved.
pub async fn auto_segment(channel: Channel, hosts: &[&str]) -> pb::Segment {
    let hosts: Vec<(&str, bool)> = hosts.iter().map(|h| (*h, false)).collect();
    create_segment(
        SegmentServiceClient::new(channel.clone()),
        HostServiceClient::new(channel),
        pb::RecoveryMethod::Auto,
        &hosts,
    )
    .await
}

pub async fn connect(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the API")
}

pub fn now() -> prost_types::Timestamp {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    prost_types::Timestamp {
        seconds: now.as_secs() as i64,
        nanos: now.subsec_nanos() as i32,
    }
}

pub fn status(n: &pb::Notification) -> pb::NotificationStatus {
    pb::NotificationStatus::try_from(n.status).unwrap()
}

pub fn vmove_status(v: &pb::Vmove) -> pb::VmoveStatus {
    pb::VmoveStatus::try_from(v.status).unwrap()
}

/// Asserts that the notification ended `expected`, showing its message.
pub fn assert_status(n: &pb::Notification, expected: pb::NotificationStatus) {
    assert_eq!(status(n), expected, "{}", n.message);
}

/// Invariants every terminal notification must hold.
pub fn assert_honest(n: &pb::Notification, vmoves: &[pb::Vmove]) {
    let status = status(n);
    for v in vmoves {
        let vs = vmove_status(v);
        assert!(
            !matches!(vs, pb::VmoveStatus::Pending | pb::VmoveStatus::Ongoing),
            "{status:?} notification with a {vs:?} vmove for {}",
            v.instance_name
        );
        if vs == pb::VmoveStatus::Failed {
            assert!(v.end_time.is_some(), "failed vmove without end time");
            assert!(!v.message.is_empty(), "failed vmove without message");
        }
    }
    if status == pb::NotificationStatus::Finished {
        assert!(
            vmoves.iter().all(|v| matches!(
                vmove_status(v),
                pb::VmoveStatus::Succeeded | pb::VmoveStatus::Ignored
            )),
            "finished with unsuccessful vmoves"
        );
    }
}
