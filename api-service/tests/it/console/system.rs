//! The system under the console's tests, from `instanceha-testkit`: the
//! simulated cloud, the engine and the API (SQLite in a temporary
//! directory, every port 0) with static tokens for an admin and a reader;
//! gRPC clients with the admin's token; and what the tests do to it:
//! register a segment, fail a host, wait for a notification's end,
//! restart the API on the same ports.

use std::net::SocketAddr;
use std::time::Duration;

use instanceha_api::auth::{AuthMode, token_sha256};
use instanceha_api::config::Settings as ApiSettings;
use instanceha_proto::v1 as pb;
use instanceha_testkit::cloud::{api_settings, engine_settings, now};
use instanceha_testkit::process::{Process, start_api, start_engine};
use instanceha_testkit::settings::loopback;
use openstack_sim::scenario::{HostSpec, InstanceSpec};
use openstack_sim::{ErrorBody, FaultEffect, FaultRule, FaultService, Scenario, Sim};
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use pb::segment_service_client::SegmentServiceClient;
use pb::vmove_service_client::VmoveServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The admin's static token.
pub const ADMIN: &str = "console-admin-token";
/// The reader's static token.
pub const READER: &str = "console-reader-token";

type Auth = fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>;

fn as_admin(mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {ADMIN}").parse().expect("a header value"),
    );
    Ok(request)
}

/// The whole system.
pub struct System {
    pub sim: Sim,
    _engine: Process,
    api: Option<Process>,
    settings: ApiSettings,
    pub rest: SocketAddr,
    segments: SegmentServiceClient<InterceptedService<Channel, Auth>>,
    hosts: HostServiceClient<InterceptedService<Channel, Auth>>,
    pub notifications: NotificationServiceClient<InterceptedService<Channel, Auth>>,
    pub vmoves: VmoveServiceClient<InterceptedService<Channel, Auth>>,
    _dir: tempfile::TempDir,
}

/// `count` HA instances (`web-1`...) on compute-01, compute-02 to take
/// them, `rebuilds` at a time, at `speed` times real time.
pub fn scenario(count: usize, rebuilds: usize, speed: f64) -> Scenario {
    let mut builder = Scenario::builder()
        .speed(speed)
        .seed(11)
        .host(HostSpec::new("compute-01").capacity(4096, 4 * 1024 * 1024))
        .host(HostSpec::new("compute-02").capacity(4096, 4 * 1024 * 1024));
    for i in 1..=count {
        builder = builder.instance(InstanceSpec::new(&format!("web-{i}"), "compute-01").ha(true));
    }
    let mut scenario = builder.build().expect("a valid scenario");
    scenario.settings.rebuild_concurrency = rebuilds;
    scenario
}

fn tokens_file(dir: &std::path::Path) -> std::path::PathBuf {
    let entry = |name: &str, token: &str, role: &str| {
        format!(
            "[[token]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = [\"{role}\"]\n",
            token_sha256(token)
        )
    };
    let path = dir.join("tokens.toml");
    std::fs::write(
        &path,
        [
            entry("ops", ADMIN, "admin"),
            entry("dashboard", READER, "reader"),
        ]
        .concat(),
    )
    .expect("the tokens file");
    path
}

impl System {
    /// The system on `scenario`, the API's settings changed by `tune`.
    pub async fn start(scenario: Scenario, tune: impl FnOnce(&mut ApiSettings)) -> System {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let sim = Sim::start(scenario, loopback())
            .await
            .expect("the simulator starts");
        let engine = start_engine(engine_settings(&sim, loopback()))
            .await
            .expect("the engine starts");
        let dir = tempfile::tempdir().unwrap();
        let database_url = format!("sqlite://{}", dir.path().join("api.db").display());
        let mut settings = api_settings(&database_url, engine.addr, loopback());
        settings.dispatch.replica_id = Some("console-test".to_owned());
        settings.auth.mode = AuthMode::Static;
        settings.auth.static_tokens_file = Some(tokens_file(dir.path()));
        tune(&mut settings);
        let api = start_api(settings.clone()).await.expect("the API starts");
        // A restart binds the same ports.
        settings.listen = api.addr;
        let rest = api.rest_addr.expect("the REST listener is on");
        settings.rest.listen = rest;
        let channel = instanceha_testkit::cloud::connect(api.addr).await;
        System {
            sim,
            _engine: engine,
            api: Some(api),
            settings,
            rest,
            segments: SegmentServiceClient::with_interceptor(channel.clone(), as_admin as Auth),
            hosts: HostServiceClient::with_interceptor(channel.clone(), as_admin as Auth),
            notifications: NotificationServiceClient::with_interceptor(
                channel.clone(),
                as_admin as Auth,
            ),
            vmoves: VmoveServiceClient::with_interceptor(channel, as_admin as Auth),
            _dir: dir,
        }
    }

    /// `http://REST/console<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/console{path}", self.rest)
    }

    /// The segment `rack-a` (auto) with compute-01 and compute-02.
    pub async fn segment(&mut self) -> pb::Segment {
        let segment = self
            .segments
            .create_segment(pb::CreateSegmentRequest {
                name: "rack-a".into(),
                description: None,
                service_type: "COMPUTE".into(),
                recovery_method: pb::RecoveryMethod::Auto as i32,
                enabled: None,
                return_to_service: None,
            })
            .await
            .expect("the segment is created")
            .into_inner();
        for name in ["compute-01", "compute-02"] {
            self.hosts
                .create_host(pb::CreateHostRequest {
                    segment_id: segment.id.clone(),
                    name: name.into(),
                    r#type: "COMPUTE".into(),
                    control_attributes: "SSH".into(),
                    reserved: false,
                    on_maintenance: false,
                })
                .await
                .expect("the host is created");
        }
        segment
    }

    /// Powers `host` off and reports it fenced; the notification's id.
    pub async fn host_fails(&mut self, host: &str) -> String {
        self.sim.power_off(host).expect("the host powers off");
        self.notifications
            .create_notification(pb::CreateNotificationRequest {
                r#type: pb::NotificationType::ComputeHost as i32,
                hostname: host.into(),
                generated_time: Some(now()),
                payload: [
                    ("event", "STOPPED"),
                    ("host_status", "NORMAL"),
                    ("cluster_status", "OFFLINE"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
                idempotency_key: String::new(),
            })
            .await
            .expect("the report is accepted")
            .into_inner()
            .id
    }

    /// Nova answers 503 to every evacuation of the server `name`.
    pub fn refuse_evacuations_of(&self, name: &str) {
        let id = self
            .sim
            .snapshot()
            .instance_by_name(name)
            .unwrap_or_else(|| panic!("no server {name}"))
            .id
            .clone();
        let unavailable = FaultEffect::Error {
            status: 503,
            body: ErrorBody::Json,
            message: None,
            retry_after: None,
        };
        self.sim
            .inject_fault(
                FaultRule::new(
                    FaultService::Compute,
                    Some("POST"),
                    Some("/servers/*/action"),
                    unavailable,
                )
                .action("evacuate")
                .instance(&id),
            )
            .expect("the fault is installed");
    }

    /// Waits for notification `id` to end; its status.
    pub async fn terminal(&mut self, id: &str, within: Duration) -> pb::NotificationStatus {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let n = self
                .notifications
                .get_notification(pb::GetNotificationRequest { id: id.into() })
                .await
                .expect("the notification")
                .into_inner();
            let status = pb::NotificationStatus::try_from(n.status).unwrap();
            if matches!(
                status,
                pb::NotificationStatus::Finished
                    | pb::NotificationStatus::Failed
                    | pb::NotificationStatus::Ignored
            ) {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "notification {id} still {status:?} after {within:?}: {}",
                n.message
            );
            // sleep: the notification is read again every 50 ms.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the API (as SIGTERM would) and waits for it.
    pub async fn stop_api(&mut self) {
        if let Some(mut api) = self.api.take() {
            assert!(
                api.stop(Duration::from_secs(15)).await,
                "the API stops within 15 s"
            );
        }
    }

    /// Starts the API again on the same ports and database.
    pub async fn start_api(&mut self) {
        let api = start_api(self.settings.clone())
            .await
            .expect("the API starts again");
        let channel = instanceha_testkit::cloud::connect(api.addr).await;
        self.segments = SegmentServiceClient::with_interceptor(channel.clone(), as_admin as Auth);
        self.hosts = HostServiceClient::with_interceptor(channel.clone(), as_admin as Auth);
        self.notifications =
            NotificationServiceClient::with_interceptor(channel.clone(), as_admin as Auth);
        self.vmoves = VmoveServiceClient::with_interceptor(channel, as_admin as Auth);
        self.api = Some(api);
    }
}
