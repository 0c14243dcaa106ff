//! `spawn_app`: `instanceha-api` in-process on port 0 with a fresh
//! database, and gRPC clients for it.

use std::collections::HashMap;

use instanceha_api::config::Settings;
use instanceha_api::server::Server;
use instanceha_api::service::Api;
use instanceha_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use pb::segment_service_client::SegmentServiceClient;
use pb::vmove_service_client::VmoveServiceClient;
use tokio::sync::oneshot;
use tonic::transport::Channel;

use crate::backends::{Backend, TestDatabase};

pub struct TestApp {
    pub api: Api,
    /// Where the gRPC API listens.
    pub addr: std::net::SocketAddr,
    /// The Masakari-compatible REST API, unless a test turned it off.
    pub rest: Option<std::net::SocketAddr>,
    pub channel: Channel,
    pub segments: SegmentServiceClient<Channel>,
    pub hosts: HostServiceClient<Channel>,
    pub notifications: NotificationServiceClient<Channel>,
    pub vmoves: VmoveServiceClient<Channel>,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    // Dropped last: the server must be gone before its database.
    _database: TestDatabase,
}

impl TestApp {
    /// The URL of the test's database.
    pub fn database_url(&self) -> &str {
        &self._database.url
    }

    /// Tells the server to shut down (as SIGTERM would), without waiting.
    pub fn begin_stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Whether the server has stopped.
    pub fn stopped(&self) -> bool {
        self.server.as_ref().is_none_or(|s| s.is_finished())
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        self.begin_stop();
        if let Some(server) = self.server.take() {
            server.await.expect("the server task");
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// The API on a fresh database of `backend`, or `None` when that backend is
/// not configured.
pub async fn spawn_app(backend: Backend) -> Option<TestApp> {
    spawn_app_with(backend, |_| {}).await
}

/// The same, with settings changed by `tune` (authentication on, say).
pub async fn spawn_app_with(backend: Backend, tune: impl FnOnce(&mut Settings)) -> Option<TestApp> {
    let database = TestDatabase::create(backend).await?;
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.database.url = database.url.clone();
    settings.database.max_connections = 4;
    settings.rest.listen = "127.0.0.1:0".parse().unwrap();
    // No engine here: these tests check what the API stores.
    settings.dispatch.enabled = false;
    settings.auth.mode = instanceha_api::auth::AuthMode::None;
    tune(&mut settings);
    let server = Server::bind(&settings).await.expect("the API starts");
    let addr = server.local_addr();
    let rest = server.rest_addr();
    let api = server.api().clone();
    let (shutdown, stop) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        server
            .run(async {
                let _ = stop.await;
            })
            .await
            .expect("the API serves");
    });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the API");
    Some(TestApp {
        api,
        addr,
        rest,
        segments: SegmentServiceClient::new(channel.clone()),
        hosts: HostServiceClient::new(channel.clone()),
        notifications: NotificationServiceClient::new(channel.clone()),
        vmoves: VmoveServiceClient::new(channel.clone()),
        channel,
        shutdown: Some(shutdown),
        server: Some(server),
        _database: database,
    })
}

/// Every report a test sends counts on its own: no duplicate window, no
/// flapping guard.
pub fn every_report_counts(settings: &mut Settings) {
    settings.intake.duplicate_window = std::time::Duration::ZERO;
    settings.intake.flapping_failures = 0;
}

pub fn segment_request(name: &str) -> pb::CreateSegmentRequest {
    pb::CreateSegmentRequest {
        name: name.to_owned(),
        description: Some(format!("{name} hosts")),
        service_type: "COMPUTE".to_owned(),
        recovery_method: pb::RecoveryMethod::Auto as i32,
        enabled: None,
        return_to_service: None,
    }
}

pub fn host_request(segment_id: &str, name: &str) -> pb::CreateHostRequest {
    pb::CreateHostRequest {
        segment_id: segment_id.to_owned(),
        name: name.to_owned(),
        r#type: "COMPUTE".to_owned(),
        control_attributes: "SSH".to_owned(),
        reserved: false,
        on_maintenance: false,
    }
}

/// A segment with the named hosts.
pub async fn segment_with_hosts(app: &mut TestApp, name: &str, hosts: &[&str]) -> pb::Segment {
    let segment = app
        .segments
        .create_segment(segment_request(name))
        .await
        .expect("create segment")
        .into_inner();
    for host in hosts {
        app.hosts
            .create_host(host_request(&segment.id, host))
            .await
            .expect("create host");
    }
    segment
}

pub fn payload(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
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

/// What a hostmonitor sends for a fenced, powered-off host.
pub fn host_down(hostname: &str) -> pb::CreateNotificationRequest {
    pb::CreateNotificationRequest {
        r#type: pb::NotificationType::ComputeHost as i32,
        hostname: hostname.to_owned(),
        generated_time: Some(now()),
        payload: payload(&[
            ("event", "STOPPED"),
            ("host_status", "NORMAL"),
            ("cluster_status", "OFFLINE"),
        ]),
        idempotency_key: String::new(),
    }
}

/// Everything a client can list, to prove a bad request changed nothing.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    pub segments: Vec<pb::Segment>,
    pub hosts: Vec<pb::Host>,
    pub notifications: Vec<pb::Notification>,
}

pub async fn snapshot(app: &mut TestApp) -> Snapshot {
    let segments = app
        .segments
        .list_segments(pb::ListSegmentsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .segments;
    let hosts = app
        .hosts
        .list_hosts(pb::ListHostsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .hosts;
    let notifications = app
        .notifications
        .list_notifications(pb::ListNotificationsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .notifications;
    Snapshot {
        segments,
        hosts,
        notifications,
    }
}

/// Asserts a gRPC error's code and that its message mentions `needle`.
#[track_caller]
pub fn assert_status<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    code: tonic::Code,
    needle: &str,
) -> tonic::Status {
    let status = result.expect_err("the request should fail");
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        status.message().contains(needle),
        "{:?} does not mention {needle:?}",
        status.message()
    );
    status
}
