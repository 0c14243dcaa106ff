//! The server's own surface: gRPC health and reflection.

use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use crate::backends::Backend;
use crate::helpers::{segment_request, spawn_app, spawn_app_with};
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
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while status_of(&mut health, "").await != ServingStatus::NotServing as i32 {
        assert!(std::time::Instant::now() < deadline, "still ready");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
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

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !app.stopped() {
        assert!(std::time::Instant::now() < deadline, "never stopped");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    app.stop().await;
}
