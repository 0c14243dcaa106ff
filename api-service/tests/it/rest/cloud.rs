//! A whole cloud for the REST API: openstack-sim, instanceha-engine and
//! instanceha-api (SQLite, gRPC and REST on port 0, dispatch on, and
//! optionally validating tokens with the simulator's Keystone); and a host
//! failure reported over REST, recovered, and followed over gRPC.

use std::net::SocketAddr;
use std::time::Duration;

use instanceha_api::auth::AuthMode;
use instanceha_api::config::Settings as ApiSettings;
use instanceha_proto::v1 as pb;
use instanceha_testkit::cloud::{api_settings, engine_settings};
use instanceha_testkit::process::{Process, start_api, start_engine};
use instanceha_testkit::settings::{loopback, sim_user};
use openstack_sim::Scenario;
use openstack_sim::Sim;
use openstack_sim::scenario::{HostSpec, InstanceSpec};
use pb::notification_service_client::NotificationServiceClient;
use serde_json::json;
use tokio_stream::StreamExt as _;

use super::{Rest, host_down, now};

/// Simulated seconds per real second.
const SPEED: f64 = 100.0;

/// How long a recovery may take here.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How the API authenticates callers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    Off,
    /// Keystone tokens, validated with the simulator's `nova` user.
    Keystone,
}

pub struct Cloud {
    pub sim: Sim,
    pub grpc: SocketAddr,
    pub rest: SocketAddr,
    api: Process,
    _engine: Process,
    _dir: tempfile::TempDir,
}

/// Two computes and a disabled spare; `web-1` and the stopped `batch-1`
/// (both HA-enabled) on compute-01.
pub fn two_hosts_and_a_spare() -> Scenario {
    Scenario::builder()
        .host(HostSpec::new("compute-01"))
        .host(HostSpec::new("compute-02"))
        .host(HostSpec::new("compute-03").disabled("reserved for instance HA"))
        .instance(InstanceSpec::new("web-1", "compute-01").ha(true))
        .instance(
            InstanceSpec::new("batch-1", "compute-01")
                .ha(true)
                .vm_state("stopped"),
        )
        .speed(SPEED)
        .seed(7)
        .build()
        .expect("a valid scenario")
}

impl Cloud {
    pub async fn start(scenario: Scenario, auth: Auth) -> Cloud {
        Self::start_with(scenario, auth, |_| {}).await
    }

    /// The same, with the API's settings changed by `tune` (TLS, say).
    pub async fn start_with(
        scenario: Scenario,
        auth: Auth,
        tune: impl FnOnce(&mut ApiSettings),
    ) -> Cloud {
        let sim = Sim::start(scenario, loopback())
            .await
            .expect("the simulator starts");
        let engine = start_engine(engine_settings(&sim, loopback()))
            .await
            .expect("the engine starts");
        let dir = tempfile::tempdir().unwrap();
        let database_url = format!("sqlite://{}", dir.path().join("api.db").display());
        let mut settings = api_settings(&database_url, engine.addr, loopback());
        settings.dispatch.replica_id = Some("rest-test".to_owned());
        match auth {
            Auth::Off => settings.auth.mode = AuthMode::None,
            Auth::Keystone => {
                settings.auth.mode = AuthMode::Keystone;
                settings.auth.keystone = sim_user(&sim, "nova", "service");
            }
        }
        tune(&mut settings);
        let api = start_api(settings).await.expect("the API starts");
        Cloud {
            sim,
            grpc: api.addr,
            rest: api.rest_addr.expect("the REST API is on"),
            api,
            _engine: engine,
            _dir: dir,
        }
    }

    /// Stops the API gracefully (REST and gRPC) and waits for it.
    pub async fn stop(mut self) {
        assert!(
            self.api.stop(Duration::from_secs(10)).await,
            "the API stops within 10 s"
        );
    }
}

/// Polls the REST API until the notification is finished, failed or
/// ignored.
pub async fn terminal(rest: &Rest, uuid: &str) -> serde_json::Value {
    let every = Duration::from_millis(50);
    instanceha_testkit::eventually("a final status", PATIENCE, every, || async {
        let reply = rest
            .version("1.1")
            .get(&format!("/v1/notifications/{uuid}"))
            .await;
        let n = reply.expect(200)["notification"].clone();
        match n["status"].as_str() {
            Some("finished" | "failed" | "ignored") => Ok(n),
            _ => Err(format!("notification still {}", n["status"])),
        }
    })
    .await
}

/// With Keystone, a 401 names it as keystonemiddleware does
/// (`WWW-Authenticate: Keystone uri="..."`), so clients know where to get
/// a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_401_names_keystone_in_www_authenticate() {
    let cloud = Cloud::start(two_hosts_and_a_spare(), Auth::Keystone).await;
    let rest = Rest::at_addr(cloud.rest);
    for client in [&rest, &rest.token("not-a-keystone-token")] {
        let reply = client.get("/v1/segments").await;
        assert_eq!(reply.status, 401, "{:#}", reply.body);
        let challenge = reply
            .headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            challenge.starts_with("Keystone uri=\"http://"),
            "{challenge:?}"
        );
    }
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_notification_is_recovered_and_watched_over_grpc() {
    let cloud = Cloud::start(two_hosts_and_a_spare(), Auth::Off).await;
    let rest = Rest::at_addr(cloud.rest);
    let segment = rest.segment("rack-a").await;
    let seg = segment["uuid"].as_str().unwrap().to_owned();
    rest.host(&seg, "compute-01").await;
    rest.host(&seg, "compute-02").await;

    cloud.sim.power_off("compute-01").unwrap();
    let accepted = rest
        .post("/v1/notifications", host_down("compute-01", &now()))
        .await;
    let uuid = accepted.expect(202)["notification"]["notification_uuid"]
        .as_str()
        .unwrap()
        .to_owned();

    // A gRPC watcher follows it to its end.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", cloud.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut notifications = NotificationServiceClient::new(channel);
    let mut updates = notifications
        .watch_notification(pb::WatchNotificationRequest { id: uuid.clone() })
        .await
        .expect("the gRPC side knows the REST notification")
        .into_inner();
    let mut last_status = None;
    let mut vmoves_seen = 0;
    let watch = async {
        while let Some(update) = updates.next().await {
            match update.expect("an update").update.expect("a body") {
                pb::notification_update::Update::Snapshot(s) => {
                    last_status = s.notification.map(|n| n.status);
                    vmoves_seen += s.vmoves.len();
                }
                pb::notification_update::Update::Notification(n) => last_status = Some(n.status),
                pb::notification_update::Update::Vmove(_) => vmoves_seen += 1,
                pb::notification_update::Update::ProgressEvent(_) => {}
            }
        }
    };
    tokio::time::timeout(PATIENCE, watch)
        .await
        .expect("the watch ends when the notification does");
    assert_eq!(
        last_status,
        Some(pb::NotificationStatus::Finished as i32),
        "the watcher saw it finish"
    );
    assert!(vmoves_seen >= 2, "the watcher saw the vmoves");

    let n = terminal(&rest, &uuid).await;
    assert_eq!(n["status"], "finished", "{n:#}");
    let details = n["recovery_workflow_details"].as_array().unwrap();
    let names: Vec<&str> = details
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"disable_compute_service") && names.contains(&"evacuate_instances"),
        "{names:?}"
    );
    for task in details {
        assert!(task["progress"].is_f64());
        assert!(!task["progress_details"].as_array().unwrap().is_empty());
    }
    let evacuate = details
        .iter()
        .find(|t| t["name"] == "evacuate_instances")
        .unwrap();
    assert_eq!(evacuate["state"], "SUCCESS");
    assert_eq!(evacuate["progress"], 1.0);

    let vmoves = rest.get(&format!("/v1/notifications/{uuid}/vmoves")).await;
    let vmoves = vmoves.expect(200)["vmoves"].as_array().unwrap().clone();
    assert_eq!(vmoves.len(), 2);
    for v in &vmoves {
        assert_eq!(v["status"], "succeeded");
        assert_eq!(v["type"], "evacuation");
        assert_eq!(v["source_host"], "compute-01");
        assert_eq!(v["dest_host"], "compute-02");
        assert_eq!(v["notification_uuid"], uuid.as_str());
        assert!(v["start_time"].is_string() && v["end_time"].is_string());
    }
    let one = vmoves[0]["uuid"].as_str().unwrap();
    let shown = rest
        .get(&format!("/v1/notifications/{uuid}/vmoves/{one}"))
        .await;
    assert_eq!(shown.expect(200)["vmove"], vmoves[0]);
    let succeeded = rest
        .get(&format!(
            "/v1/notifications/{uuid}/vmoves?status=succeeded&sort_key=instance_name&sort_dir=asc"
        ))
        .await;
    let names: Vec<&str> = succeeded.expect(200)["vmoves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["instance_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["batch-1", "web-1"]);

    // The engine put the failed host on maintenance; reports for it are
    // refused now (a different one, so that it is no duplicate).
    let hosts = rest
        .get(&format!("/v1/segments/{seg}/hosts?on_maintenance=true"))
        .await;
    let hosts = hosts.expect(200)["hosts"].as_array().unwrap().clone();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0]["name"], "compute-01");
    let mut unknown = host_down("compute-01", &now());
    unknown["notification"]["payload"]["host_status"] = json!("UNKNOWN");
    let again = rest.post("/v1/notifications", unknown).await;
    assert!(again.fault("conflictingRequest").contains("maintenance"));
    // The host comes back into service through REST, as operators do.
    let host = hosts[0]["uuid"].as_str().unwrap();
    rest.put(
        &format!("/v1/segments/{seg}/hosts/{host}"),
        json!({"host": {"on_maintenance": false}}),
    )
    .await
    .expect(200);
    cloud.stop().await;
}

/// A process `STARTED` report is no recovery in Masakari 22
/// (`_handle_notification_type_process`, `masakari/engine/manager.py`): it
/// finishes with no workflow step, so at 1.1 its details are `[]`, which
/// Masakari's functional suite checks (`test_process_notifications.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_started_report_shows_no_workflow_step() {
    let cloud = Cloud::start(two_hosts_and_a_spare(), Auth::Off).await;
    let rest = Rest::at_addr(cloud.rest);
    let segment = rest.segment("rack-a").await;
    let seg = segment["uuid"].as_str().unwrap().to_owned();
    rest.host(&seg, "compute-01").await;

    let started = json!({"notification": {
        "type": "PROCESS",
        "hostname": "compute-01",
        "generated_time": now(),
        "payload": {"event": "STARTED", "process_name": "/usr/local/bin/nova-compute"},
    }});
    let accepted = rest.version("1.1").post("/v1/notifications", started).await;
    assert_eq!(accepted.version_header(), Some("instance-ha 1.1"));
    let uuid = accepted.expect(202)["notification"]["notification_uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let n = terminal(&rest, &uuid).await;
    assert_eq!(n["status"], "finished", "{n:#}");
    assert_eq!(n["recovery_workflow_details"], json!([]), "{n:#}");
    cloud.stop().await;
}
