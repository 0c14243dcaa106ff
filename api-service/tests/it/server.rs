//! The server's own surface: gRPC health and reflection.

use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use crate::backends::Backend;
use crate::helpers::spawn_app;

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
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
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
