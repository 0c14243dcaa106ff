//! TLS on the public API and mutual TLS between the API and the engine,
//! with certificates generated for the test; the engine link's shared
//! token, made on first start when none is configured, and the engine's
//! refusal of a `Recover` without it wherever it listens.

use std::path::{Path, PathBuf};
use std::time::Duration;

use instanceha_proto::engine::v1 as engine_pb;
use instanceha_proto::v1 as pb;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceSpec};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

use instanceha_testkit::check::assert_status;
use instanceha_testkit::check::status;
use instanceha_testkit::cloud::Cloud;
use instanceha_testkit::cloud::api_settings;
use instanceha_testkit::cloud::engine_settings;
use instanceha_testkit::cloud::fast;
use instanceha_testkit::eventually;
use instanceha_testkit::pki::Pki;
use instanceha_testkit::process::start_api;
use instanceha_testkit::process::start_engine;

fn scenario() -> Scenario {
    fast(
        Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02"))
            .instance(InstanceSpec::new("web-1", "compute-01").ha(true)),
    )
}

fn ca(path: &Path) -> Certificate {
    Certificate::from_pem(std::fs::read(path).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_api_serves_tls_and_refuses_plaintext() {
    let pki = Pki::new("instanceha-api");
    let server_tls = pki.server(false);
    let cloud = Cloud::start_with(scenario(), |_| {}, |api| api.tls = server_tls).await;
    // A client trusting the CA talks to it.
    let channel = Channel::from_shared(format!("https://localhost:{}", cloud.api.addr.port()))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(ca(&pki.path("ca.pem")))
                .domain_name("localhost"),
        )
        .unwrap()
        .connect()
        .await
        .expect("a TLS connection");
    let mut segments = pb::segment_service_client::SegmentServiceClient::new(channel);
    segments
        .list_segments(pb::ListSegmentsRequest::default())
        .await
        .expect("a call over TLS");
    // Plaintext gets nowhere.
    let plain = Channel::from_shared(format!("http://{}", cloud.api.addr))
        .unwrap()
        .connect()
        .await;
    let refused = match plain {
        Err(_) => true,
        Ok(channel) => pb::segment_service_client::SegmentServiceClient::new(channel)
            .list_segments(pb::ListSegmentsRequest::default())
            .await
            .is_err(),
    };
    assert!(refused, "a plaintext call was answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_link_needs_the_api_client_certificate() {
    let pki = Pki::new("instanceha-api");
    // An engine that requires client certificates signed by the CA.
    let server_tls = pki.server(true);
    let mut cloud = Cloud::start_with(
        scenario(),
        |engine| engine.tls = server_tls.clone(),
        |api| {
            api.dispatch.engine_url = api
                .dispatch
                .engine_url
                .replace("http://127.0.0.1", "https://localhost");
            api.dispatch.tls = pki.client(true);
        },
    )
    .await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let n = cloud.host_fails("compute-01").await;
    let n = cloud.terminal(&n.id, Duration::from_secs(30)).await;
    assert_status(&n, pb::NotificationStatus::Finished);

    // The same engine refuses an API without a client certificate: the
    // notification waits in `error`, retried, and says why.
    let engine = start_engine({
        let mut settings = engine_settings(&cloud.sim, "127.0.0.1:0".parse().unwrap());
        settings.tls = pki.server(true);
        settings
    })
    .await
    .expect("the engine starts");
    let dir = tempfile::tempdir().unwrap();
    let mut settings = api_settings(
        &format!("sqlite://{}", dir.path().join("other.db").display()),
        engine.addr,
        "127.0.0.1:0".parse().unwrap(),
    );
    settings.dispatch.engine_url = format!("https://localhost:{}", engine.addr.port());
    settings.dispatch.tls = pki.client(false);
    let api = start_api(settings).await.expect("the API starts");
    cloud.api = api;
    cloud.reconnect().await;
    cloud
        .segment(pb::RecoveryMethod::Auto, &[("compute-02", false)])
        .await;
    cloud.sim.power_off("compute-02").unwrap();
    let n = cloud
        .report(
            pb::NotificationType::ComputeHost,
            "compute-02",
            &[("event", "STOPPED"), ("host_status", "NORMAL")],
        )
        .await;
    let (within, every) = (Duration::from_secs(20), Duration::from_millis(50));
    eventually("the notification in error", within, every, || async {
        let current = cloud.notification(&n.id).await;
        if status(&current) == pb::NotificationStatus::Error {
            assert!(
                current.message.contains("unreachable"),
                "{}",
                current.message
            );
            return Ok(());
        }
        assert_ne!(
            status(&current),
            pb::NotificationStatus::Finished,
            "recovered without a client certificate"
        );
        Err(format!("still {:?}", status(&current)))
    })
    .await;
    drop(engine);
}

/// A token file shared by the engine and the API.
fn token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("link-token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_never_starts_unguarded_beyond_loopback() {
    let sim = openstack_sim::Sim::start(scenario(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut open = engine_settings(&sim, "0.0.0.0:0".parse().unwrap());
    open.link.token_file = None;
    open.link.insecure_unauthenticated = true;
    let err = match start_engine(open.clone()).await {
        Ok(_) => panic!("an unauthenticated engine started on 0.0.0.0"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("link.insecure_unauthenticated"), "{err}");
    // Without a token file it makes one in its state directory.
    open.link.insecure_unauthenticated = false;
    open.state_dir = Some(dir.path().join("state"));
    start_engine(open.clone())
        .await
        .expect("an engine with the state directory's token starts");
    assert!(dir.path().join("state/link-token").exists());
    // With a token of its own, or mutual TLS, it starts too.
    let pki = Pki::new("instanceha-api");
    let mut with_token = open.clone();
    with_token.link.token_file = Some(token_file(dir.path(), "s3cret"));
    start_engine(with_token)
        .await
        .expect("an engine with a link token starts");
    let mut with_mtls = open;
    with_mtls.tls = pki.server(true);
    start_engine(with_mtls)
        .await
        .expect("an engine with mutual TLS starts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_link_with_the_shared_token_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "the-shared-link-token");
    let mut cloud = Cloud::start_with(
        scenario(),
        |engine| engine.link.token_file = Some(token.clone()),
        |api| api.dispatch.engine_token_file = Some(token.clone()),
    )
    .await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let n = cloud.host_fails("compute-01").await;
    let n = cloud.terminal(&n.id, Duration::from_secs(30)).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(cloud.server("web-1").host.as_deref(), Some("compute-02"));
}

/// A `Start` for compute-01's failure, as only the API may send it.
fn start_run() -> engine_pb::RecoverRequest {
    engine_pb::RecoverRequest {
        body: Some(engine_pb::recover_request::Body::StartRun(
            engine_pb::StartRun {
                run_id: "00000000-0000-4000-8000-000000000001".to_owned(),
                attempt: 1,
                notification: Some(engine_pb::Notification {
                    id: "00000000-0000-4000-8000-000000000002".to_owned(),
                    r#type: pb::NotificationType::ComputeHost as i32,
                    hostname: "compute-01".to_owned(),
                    payload: [
                        ("event".to_owned(), "STOPPED".to_owned()),
                        ("host_status".to_owned(), "NORMAL".to_owned()),
                    ]
                    .into(),
                    generated_time: Some(instanceha_testkit::cloud::now()),
                }),
                segment: Some(engine_pb::Segment {
                    id: "00000000-0000-4000-8000-000000000003".to_owned(),
                    name: "rack-a".to_owned(),
                    recovery_method: pb::RecoveryMethod::Auto as i32,
                    service_type: "COMPUTE".to_owned(),
                }),
                reserved_hosts: Vec::new(),
                instances: Vec::new(),
                kind: engine_pb::RunKind::Recover as i32,
                return_to_service: false,
            },
        )),
    }
}

/// An engine and an API with their defaults on loopback: no token file
/// configured on either side, one state directory. The engine makes the
/// token on first start, the API reads it; a stranger has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_recover_on_a_default_loopback_engine_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut cloud = Cloud::start_with(
        scenario(),
        |engine| {
            engine.link.token_file = None;
            engine.state_dir = Some(state.clone());
        },
        |api| {
            api.dispatch.engine_token_file = None;
            api.state_dir = Some(state.clone());
        },
    )
    .await;
    let token = std::fs::read_to_string(state.join("link-token")).unwrap();
    cloud.sim.power_off("compute-01").unwrap();
    let since = cloud.sim.last_request_seq();
    let channel = instanceha_testkit::cloud::connect(cloud.engine.addr).await;
    for authorization in [
        None,
        Some("Bearer not-the-token".to_owned()),
        Some(token.trim().to_owned()),
    ] {
        let mut client = engine_pb::engine_client::EngineClient::new(channel.clone());
        let mut request = tonic::Request::new(tokio_stream::iter(vec![start_run()]));
        if let Some(value) = &authorization {
            request
                .metadata_mut()
                .insert("authorization", value.parse().unwrap());
        }
        let status = match client.recover(request).await {
            Ok(_) => panic!("a recover call with {authorization:?} was accepted"),
            Err(status) => status,
        };
        assert_eq!(
            status.code(),
            tonic::Code::Unauthenticated,
            "{authorization:?}: {status}"
        );
    }
    // The engine did nothing in the cloud: no write, the server in place.
    // sleep: time for a write to arrive; none may.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writes: Vec<_> = cloud
        .sim
        .request_log(Some(since))
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert_eq!(cloud.server("web-1").host.as_deref(), Some("compute-01"));
    let snapshot = cloud.sim.snapshot();
    assert!(
        snapshot
            .hosts
            .iter()
            .all(|h| !h.host.forced_down && h.host.enabled),
        "a compute service was forced down or disabled"
    );
    // The API, which read the same token without being told, recovers.
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let n = cloud
        .report(
            pb::NotificationType::ComputeHost,
            "compute-01",
            &[("event", "STOPPED"), ("host_status", "NORMAL")],
        )
        .await;
    let n = cloud.terminal(&n.id, Duration::from_secs(30)).await;
    assert_status(&n, pb::NotificationStatus::Finished);
}
