//! Protection of the public APIs: per-client rate limiting (one budget
//! for gRPC and REST), request size.

use instanceha_proto::v1 as pb;
use tonic::Code;

use crate::backends::Backend;
use crate::helpers::{host_down, segment_with_hosts, spawn_app_with};
use crate::rest::Rest;

#[tokio::test]
async fn a_client_over_its_rate_is_told_to_retry_later_and_probes_are_never_limited() {
    let mut app = spawn_app_with(Backend::Sqlite, |s| {
        s.limits.requests_per_second = 2.0;
        s.limits.burst = 5;
    })
    .await
    .unwrap();
    let mut codes = Vec::new();
    for _ in 0..12 {
        let result = app
            .segments
            .list_segments(pb::ListSegmentsRequest::default())
            .await;
        codes.push(result.err().map_or(Code::Ok, |s| s.code()));
    }
    let ok = codes.iter().filter(|c| **c == Code::Ok).count();
    let limited = codes
        .iter()
        .filter(|c| **c == Code::ResourceExhausted)
        .count();
    assert!((5..=7).contains(&ok), "{codes:?}");
    assert_eq!(ok + limited, 12, "{codes:?}");
    let mut health = tonic_health::pb::health_client::HealthClient::new(app.channel.clone());
    for _ in 0..10 {
        health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .expect("probes are not limited");
    }
    app.stop().await;
}

#[tokio::test]
async fn an_oversized_request_is_refused() {
    let mut app = spawn_app_with(Backend::Sqlite, |s| {
        s.limits.max_message_bytes = 4096;
    })
    .await
    .unwrap();
    segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    let mut huge = host_down("compute-01");
    huge.idempotency_key = "k".repeat(10_000);
    let refused = app
        .notifications
        .create_notification(huge)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("limits.max_message_bytes"),
        "{refused:?}"
    );
    app.stop().await;
}

/// 200 KB of metadata (a runaway token, a proxy's headers) is answered
/// with a status, and the connection keeps serving.
#[tokio::test]
async fn oversized_metadata_gets_resource_exhausted_not_a_dropped_connection() {
    let mut app = spawn_app_with(Backend::Sqlite, |_| {}).await.unwrap();
    let mut request = tonic::Request::new(pb::ListSegmentsRequest::default());
    for i in 0..50 {
        request.metadata_mut().insert(
            tonic::metadata::MetadataKey::from_bytes(format!("x-padding-{i}").as_bytes()).unwrap(),
            "p".repeat(4000).parse().unwrap(),
        );
    }
    let refused = app.segments.list_segments(request).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("metadata too large"),
        "{refused:?}"
    );
    app.segments
        .list_segments(pb::ListSegmentsRequest::default())
        .await
        .expect("the same connection still serves");
    app.stop().await;
}

#[tokio::test]
async fn the_rest_api_shares_the_budget_answers_429_with_retry_after_and_spares_healthcheck() {
    let mut app = spawn_app_with(Backend::Sqlite, |s| {
        s.limits.requests_per_second = 0.5;
        s.limits.burst = 4;
    })
    .await
    .unwrap();
    let rest = Rest::new(&app);
    // Two of the four tokens spent over gRPC, two over REST: the fifth
    // request, on either edge, is over the budget.
    for _ in 0..2 {
        app.segments
            .list_segments(pb::ListSegmentsRequest::default())
            .await
            .unwrap();
        rest.get("/v1/segments").await.expect(200);
    }
    let limited = rest.get("/v1/segments").await;
    assert!(
        limited
            .fault("overLimit")
            .contains("limits.requests_per_second"),
        "{:#}",
        limited.body
    );
    assert_eq!(limited.status, 429);
    let retry_after: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=2).contains(&retry_after),
        "retry after {retry_after} s"
    );
    assert_eq!(
        app.segments
            .list_segments(pb::ListSegmentsRequest::default())
            .await
            .unwrap_err()
            .code(),
        Code::ResourceExhausted
    );
    for _ in 0..10 {
        let health = rest
            .client()
            .get(rest.url("/healthcheck"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200, "load balancers are never limited");
    }
    app.stop().await;
}
