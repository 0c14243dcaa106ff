//! The server's own surface: gRPC health and reflection, graceful
//! shutdown, and the warnings of its start.

use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use instanceha_api::auth::token_sha256;
use instanceha_testkit::pki::Pki;

use crate::backends::Backend;
use crate::helpers::{segment_request, spawn_app, spawn_app_with};
use crate::process::ApiProcess;
use crate::rest::Rest;

/// The `grpc.health.v1` status of `service`.
async fn status_of(health: &mut HealthClient<tonic::transport::Channel>, service: &str) -> i32 {
    health
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

#[tokio::test]
async fn health_reports_every_service_serving() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let mut health = HealthClient::new(app.channel.clone());
    for service in [
        "",
        "instanceha.v1.SegmentService",
        "instanceha.v1.HostService",
        "instanceha.v1.NotificationService",
        "instanceha.v1.VmoveService",
    ] {
        let status = status_of(&mut health, service).await;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "nope".into(),
        })
        .await;
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
    app.stop().await;
}

#[tokio::test]
async fn reflection_lists_the_public_services() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let mut reflection = ServerReflectionClient::new(app.channel.clone());
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::once(request))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer: {response:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "instanceha.v1.SegmentService",
        "instanceha.v1.HostService",
        "instanceha.v1.NotificationService",
        "instanceha.v1.VmoveService",
        "grpc.health.v1.Health",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
    app.stop().await;
}

/// Shutdown with a drain delay, as under Kubernetes: the overall health
/// ("" , what readiness probes ask) and every service turn NOT_SERVING and
/// REST `/healthcheck` answers 503 at once, while new connections are still
/// accepted and served until the delay ends; then the server stops.
#[tokio::test]
async fn shutdown_reports_not_ready_and_keeps_serving_through_the_drain_delay() {
    let mut app = spawn_app_with(Backend::Sqlite, |s| {
        s.shutdown.drain_delay = std::time::Duration::from_secs(5);
    })
    .await
    .unwrap();
    let rest = Rest::new(&app);
    app.begin_stop();
    let mut health = HealthClient::new(app.channel.clone());
    instanceha_testkit::eventually(
        "not ready once stopping",
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(20),
        || {
            let mut health = health.clone();
            async move { status_of(&mut health, "").await == ServingStatus::NotServing as i32 }
        },
    )
    .await;
    for service in [
        "instanceha.v1.SegmentService",
        "instanceha.v1.NotificationService",
    ] {
        let status = status_of(&mut health, service).await;
        assert_eq!(status, ServingStatus::NotServing as i32, "{service}");
    }
    let healthcheck = rest
        .client()
        .get(rest.url("/healthcheck"))
        .send()
        .await
        .unwrap();
    assert_eq!(healthcheck.status(), 503);
    assert_eq!(healthcheck.text().await.unwrap(), "shutting down");

    // A caller that has not noticed yet, on a new connection, is served.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .connect()
        .await
        .expect("still accepting while draining");
    let created = instanceha_proto::v1::segment_service_client::SegmentServiceClient::new(channel)
        .create_segment(segment_request("late"))
        .await;
    assert!(created.is_ok(), "{created:?}");
    rest.get("/v1/segments").await.expect(200);
    assert!(!app.stopped(), "the drain delay is not over yet");

    instanceha_testkit::eventually(
        "the server to stop after its drain delay",
        std::time::Duration::from_secs(60),
        std::time::Duration::from_millis(50),
        || async { app.stopped() },
    )
    .await;
    app.stop().await;
}

/// The JSON log lines of `api` at `level` whose message contains `text`.
fn logged(api: &ApiProcess, level: &str, text: &str) -> Vec<serde_json::Value> {
    api.lines()
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|entry| {
            entry["level"] == level
                && entry["message"]
                    .as_str()
                    .is_some_and(|message| message.contains(text))
        })
        .collect()
}

/// The `instanceha-api` binary warns, naming the listener and its address,
/// when a listener beyond loopback takes callers' tokens in plaintext; not
/// on loopback, not with TLS. (Which listeners: `server::tests`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_in_plaintext_beyond_loopback_are_warned_about_at_start() {
    const WARNING: &str = "tokens cross the network in plaintext";
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[token]]\nname = \"ops\"\nsha256 = \"{}\"\nroles = [\"admin\"]\n",
            token_sha256("ops-token")
        ),
    )
    .unwrap();
    let auth = format!(
        "[auth]\nmode = \"static\"\nstatic_tokens_file = \"{}\"\n",
        tokens.display()
    );
    // Both listeners on every address, in plaintext.
    let everywhere =
        format!("listen = \"0.0.0.0:0\"\n{auth}[rest]\nenabled = true\nlisten = \"0.0.0.0:0\"\n");
    let open = ApiProcess::start(&everywhere).await;
    let warnings = logged(&open, "WARN", WARNING);
    let named: Vec<(&str, &str)> = warnings
        .iter()
        .map(|w| {
            (
                w["listener"].as_str().unwrap_or_default(),
                w["addr"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [("grpc", "0.0.0.0:0"), ("rest", "0.0.0.0:0")],
        "{:#?}",
        open.lines()
    );
    drop(open);

    // On loopback: the log is read (the start's warnings are in it), no
    // warning about tokens.
    let loopback = ApiProcess::start(&format!(
        "{auth}[rest]\nenabled = true\nlisten = \"127.0.0.1:0\"\n"
    ))
    .await;
    assert!(
        !logged(&loopback, "WARN", "dispatch is disabled").is_empty(),
        "{:#?}",
        loopback.lines()
    );
    assert!(
        logged(&loopback, "WARN", WARNING).is_empty(),
        "{:#?}",
        loopback.lines()
    );
    drop(loopback);

    // With TLS, beyond loopback: no warning.
    let pki = Pki::new("ops");
    let with_tls = ApiProcess::start(&format!(
        "{everywhere}[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        pki.path("server.pem").display(),
        pki.path("server.key").display()
    ))
    .await;
    assert!(
        !logged(&with_tls, "WARN", "dispatch is disabled").is_empty(),
        "{:#?}",
        with_tls.lines()
    );
    assert!(
        logged(&with_tls, "WARN", WARNING).is_empty(),
        "{:#?}",
        with_tls.lines()
    );
}
