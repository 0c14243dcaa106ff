//! `instanceha-engine` and `instanceha-api` against the real cloud, started
//! the one way tests start them (`instanceha_testkit::process`), with the
//! products' defaults except where the stack differs from a production
//! cloud (its region and its service user), and clients of the public API.

use std::time::Duration;

use instanceha_api::config::Settings as ApiSettings;
use instanceha_engine::config::Settings as EngineSettings;
use instanceha_proto::v1 as pb;
use instanceha_runtime::secret::Secret;
use instanceha_testkit::check::assert_honest;
use instanceha_testkit::cloud::{connect, create_segment, now, until_terminal};
use instanceha_testkit::process::{Process, start_api, start_engine};
use instanceha_testkit::settings::{api_for, loopback};
use openstack_client::credentials::AuthSettings;
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use pb::segment_service_client::SegmentServiceClient;
use pb::vmove_service_client::VmoveServiceClient;
use tonic::transport::Channel;

use crate::stack::Stack;

/// The engine's settings for the stack: its admin, `nova` as the service
/// identity (the `service` role: Cinder's force-detach needs it), the
/// public interface of RegionOne, the link token the API presents; every
/// other setting the product's default.
pub fn engine_settings(stack: &Stack) -> EngineSettings {
    let mut settings = EngineSettings {
        listen: loopback(),
        ..EngineSettings::default()
    };
    settings.openstack.auth = AuthSettings::from_env(&stack.env);
    settings.openstack.service_auth = Some(AuthSettings {
        auth_url: Some(stack.var("OS_AUTH_URL").to_owned()),
        username: Some(stack.var("OS_SERVICE_USERNAME").to_owned()),
        password: Some(Secret::new(stack.var("OS_PASSWORD"))),
        project_name: Some(stack.var("OS_SERVICE_PROJECT_NAME").to_owned()),
        user_domain_name: Some("Default".to_owned()),
        project_domain_name: Some("Default".to_owned()),
        ..AuthSettings::default()
    });
    settings.openstack.region_name = Some(stack.var("OS_REGION_NAME").to_owned());
    settings.openstack.interfaces = vec!["public".to_owned()];
    // The link token the API presents (the engine refuses a Recover
    // without it, loopback included).
    settings.link.token_file = Some(instanceha_testkit::settings::link_token_file());
    settings
}

/// The API's settings: the products' defaults on `database_url`,
/// dispatching to `engine`, no authentication (loopback).
pub fn api_settings(database_url: &str, engine: std::net::SocketAddr) -> ApiSettings {
    api_for(database_url, engine)
}

/// The engine and the API, and clients of the public API.
pub struct System {
    pub engine: Process,
    pub api: Process,
    pub segments: SegmentServiceClient<Channel>,
    pub hosts: HostServiceClient<Channel>,
    pub notifications: NotificationServiceClient<Channel>,
    pub vmoves: VmoveServiceClient<Channel>,
    _dir: tempfile::TempDir,
}

impl System {
    /// Starts both on a fresh SQLite database; `tune` adjusts the engine's
    /// settings first.
    pub async fn start(stack: &Stack, tune: impl FnOnce(&mut EngineSettings)) -> System {
        Self::start_tuned(stack, tune, |_| {}).await
    }

    /// [`Self::start`], and `tune_api` adjusts the API's settings.
    pub async fn start_tuned(
        stack: &Stack,
        tune: impl FnOnce(&mut EngineSettings),
        tune_api: impl FnOnce(&mut ApiSettings),
    ) -> System {
        let mut engine_settings = engine_settings(stack);
        tune(&mut engine_settings);
        let engine = start_engine(engine_settings)
            .await
            .expect("the engine starts");
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("api.db").display());
        let mut api_settings = api_settings(&url, engine.addr);
        tune_api(&mut api_settings);
        let api = start_api(api_settings).await.expect("the api starts");
        let channel = connect(api.addr).await;
        System {
            engine,
            api,
            segments: SegmentServiceClient::new(channel.clone()),
            hosts: HostServiceClient::new(channel.clone()),
            notifications: NotificationServiceClient::new(channel.clone()),
            vmoves: VmoveServiceClient::new(channel),
            _dir: dir,
        }
    }

    /// Registers every compute of the stack in one `auto` segment.
    pub async fn segment(&mut self, computes: &[String]) -> pb::Segment {
        let hosts: Vec<(&str, bool)> = computes.iter().map(|h| (h.as_str(), false)).collect();
        create_segment(
            self.segments.clone(),
            self.hosts.clone(),
            pb::RecoveryMethod::Auto,
            &hosts,
        )
        .await
    }

    /// What a monitoring agent sends.
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

    /// What an agent sends once it has fenced `host`.
    pub async fn host_fenced(&mut self, host: &str) -> pb::Notification {
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

    /// Waits for the notification's end and checks the invariants of the
    /// API's own records (`assert_honest`).
    pub async fn terminal(
        &mut self,
        id: &str,
        within: Duration,
    ) -> (pb::Notification, Vec<pb::Vmove>) {
        let n = until_terminal(&self.notifications, id, within, Duration::from_millis(200)).await;
        let vmoves = self
            .vmoves
            .list_vmoves(pb::ListVmovesRequest {
                notification_id: id.into(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .vmoves;
        assert_honest(&n, &vmoves);
        (n, vmoves)
    }
}
