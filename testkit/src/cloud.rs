//! The whole system for a test: the simulator, the engine and the API (on
//! an SQLite file in a temporary directory), clients of the public API, and
//! what tests ask of them: register a segment, report a failure, wait for
//! the notification's end, read what Nova did.

use std::net::SocketAddr;
use std::time::Duration;

use instanceha_api::config::Settings as ApiSettings;
use instanceha_engine::config::Settings as EngineSettings;
use instanceha_proto::v1 as pb;
use instanceha_runtime::clock::Clock;
use openstack_sim::scenario::{HostSpec, InstanceGroupSpec};
use openstack_sim::{Scenario, Sim};
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use pb::segment_service_client::SegmentServiceClient;
use pb::vmove_service_client::VmoveServiceClient;
use tonic::transport::Channel;

use crate::check::assert_honest;
use crate::eventually;
use crate::process::{Process, start_api, start_engine};
use crate::settings::{api_for, engine_for, loopback, quick_api, quick_engine};

/// Simulated seconds per real second in the system tests.
pub const SPEED: f64 = 100.0;

/// Engine settings for the tests against `sim`: its credentials, fast
/// polling and short retries ([`quick_engine`]), listening on `listen`.
pub fn engine_settings(sim: &Sim, listen: SocketAddr) -> EngineSettings {
    let mut settings = engine_for(sim);
    settings.listen = listen;
    quick_engine(&mut settings);
    settings
}

/// API settings for the tests: the database, the engine, fast retries and
/// scans ([`quick_api`]), listening on `listen`.
pub fn api_settings(database_url: &str, engine: SocketAddr, listen: SocketAddr) -> ApiSettings {
    let mut settings = api_for(database_url, engine);
    settings.listen = listen;
    quick_api(&mut settings);
    settings
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
        Self::around(sim, tune_engine, tune_api).await
    }

    /// The engine and the API around a simulator already running (a test
    /// that puts something between them, such as a recording proxy, starts
    /// it first).
    pub async fn around(
        sim: Sim,
        tune_engine: impl FnOnce(&mut EngineSettings),
        tune_api: impl FnOnce(&mut ApiSettings),
    ) -> Cloud {
        let mut engine_settings = engine_settings(&sim, loopback());
        tune_engine(&mut engine_settings);
        let engine = start_engine(engine_settings)
            .await
            .expect("the engine starts");
        let dir = tempfile::tempdir().unwrap();
        let database_url = format!("sqlite://{}", dir.path().join("api.db").display());
        let mut api_settings = api_settings(&database_url, engine.addr, loopback());
        tune_api(&mut api_settings);
        let api = start_api(api_settings).await.expect("the API starts");
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
        self.report(pb::NotificationType::ComputeHost, host, &FENCED_HOST)
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

    /// (Through a clone of the client, so that a check of `eventually` may
    /// call it.)
    pub async fn notification(&self, id: &str) -> pb::Notification {
        self.notifications
            .clone()
            .get_notification(pb::GetNotificationRequest { id: id.into() })
            .await
            .unwrap()
            .into_inner()
    }

    /// Waits until the notification is finished, failed or ignored.
    pub async fn terminal(&mut self, id: &str, within: Duration) -> pb::Notification {
        until_terminal(&self.notifications, id, within, Duration::from_millis(25)).await
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

    /// Brings a repaired `host` back into service as an operator does:
    /// powered on, its nova-compute forced up and enabled once Nova takes
    /// it (a host that was evacuated must first start and complete its
    /// evacuations), and taken off maintenance in instance-ha.
    pub async fn return_host(&mut self, host: &str, within: Duration) {
        use openstack_client::OpenStack;
        use openstack_client::nova::ServiceUpdate;
        self.sim.power_on(host).unwrap();
        let settings = engine_settings(&self.sim, "127.0.0.1:0".parse().unwrap());
        let (credentials, service, client) = settings
            .openstack_client(&Default::default())
            .expect("the simulator's credentials");
        let openstack = OpenStack::new(credentials, service, client).expect("a client");
        let every = Duration::from_millis(50);
        eventually(&format!("{host} back in nova"), within, every, || async {
            let Ok(Some(service)) = openstack.compute_service(host).await else {
                return Err("no service yet".to_owned());
            };
            let update = ServiceUpdate {
                forced_down: Some(false),
                enabled: Some(true),
                ..ServiceUpdate::default()
            };
            match openstack.update_service(&service, &update).await {
                Ok(s) if s.state == "up" && s.status == "enabled" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let id = self
            .hosts
            .list_hosts(pb::ListHostsRequest {
                name: Some(host.into()),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .hosts
            .pop()
            .expect("a registered host")
            .id;
        self.hosts
            .update_host(pb::UpdateHostRequest {
                id,
                on_maintenance: Some(false),
                ..Default::default()
            })
            .await
            .expect("a host whose notifications ended is taken off maintenance");
    }

    /// (Through a clone of the client, as [`Cloud::notification`].)
    pub async fn vmoves(&self, notification: &str) -> Vec<pb::Vmove> {
        self.vmoves
            .clone()
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
    pub async fn vmove_of(&self, notification: &str, name: &str) -> pb::Vmove {
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
            return_to_service: None,
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

/// The system's time of day, on the wire.
pub fn now() -> prost_types::Timestamp {
    instanceha_proto::time::timestamp(Clock::system().now())
}

/// Waits until notification `id` is finished, failed or ignored, asking
/// the API every `every`; panics after `within` with its last status and
/// message.
pub async fn until_terminal(
    notifications: &NotificationServiceClient<Channel>,
    id: &str,
    within: Duration,
    every: Duration,
) -> pb::Notification {
    let what = format!("notification {id} to end");
    eventually(&what, within, every, || {
        let mut notifications = notifications.clone();
        let id = id.to_owned();
        async move {
            let n = notifications
                .get_notification(pb::GetNotificationRequest { id })
                .await
                .expect("the api answers")
                .into_inner();
            let status = pb::NotificationStatus::try_from(n.status).unwrap();
            if matches!(
                status,
                pb::NotificationStatus::Finished
                    | pb::NotificationStatus::Failed
                    | pb::NotificationStatus::Ignored
            ) {
                Ok(n)
            } else {
                Err(format!("{status:?}: {}", n.message))
            }
        }
    })
    .await
}

/// The payload of a fenced host's report (what hostmonitor sends once the
/// host is fenced: STOPPED, NORMAL, OFFLINE).
pub const FENCED_HOST: [(&str, &str); 3] = [
    ("event", "STOPPED"),
    ("host_status", "NORMAL"),
    ("cluster_status", "OFFLINE"),
];

/// [`FENCED_HOST`] as a request's or a run's payload map.
pub fn fenced_host_payload<C: FromIterator<(String, String)>>() -> C {
    FENCED_HOST
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
