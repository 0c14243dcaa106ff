//! Protection of the public APIs: per-client rate limiting (one budget
//! for gRPC and REST), request size.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use pb::segment_service_client::SegmentServiceClient;
use tonic::Code;

use crate::backends::Backend;
use crate::helpers::{
    host_down, host_request, segment_request, segment_with_hosts, spawn_app_with,
};
use crate::process::ApiProcess;
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

/// Issue 16: "during an unauthenticated flood from one address, a caller
/// with a valid token from the same address had 14 of 20 calls refused".
/// Budgets are counted after authentication: the flood spends the small
/// budget of its address for unauthenticated calls; the monitoring agent
/// behind the same address reports as usual, and its reports do not wait
/// behind a reader's traffic either.
#[tokio::test]
async fn an_anonymous_flood_from_one_address_does_not_refuse_an_agents_reports() {
    use instanceha_api::auth::{AuthMode, token_sha256};
    use tonic::Request;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.toml");
    let entry = |name: &str, token: &str, role: &str| {
        format!(
            "[[token]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = [\"{role}\"]\n",
            token_sha256(token)
        )
    };
    std::fs::write(
        &file,
        [
            entry("ops", "admin-token", "admin"),
            entry("hostmonitor", "agent-token", "monitoring_agent"),
        ]
        .concat(),
    )
    .unwrap();
    let mut app = spawn_app_with(Backend::Sqlite, |s| {
        s.auth.mode = AuthMode::Static;
        s.auth.static_tokens_file = Some(file.clone());
        s.intake.duplicate_window = std::time::Duration::ZERO;
        s.intake.flapping_failures = 0;
        s.limits.requests_per_second = 2.0;
        s.limits.burst = 25;
        s.limits.anonymous_requests_per_second = 1.0;
        s.limits.anonymous_burst = 5;
    })
    .await
    .unwrap();
    fn as_<T>(token: &str, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        request
    }
    let mut segments = app.segments.clone();
    let segment = segments
        .create_segment(as_(
            "admin-token",
            crate::helpers::segment_request("rack-a"),
        ))
        .await
        .unwrap()
        .into_inner();
    for i in 0..20 {
        app.hosts
            .create_host(as_(
                "admin-token",
                crate::helpers::host_request(&segment.id, &format!("compute-{i:02}")),
            ))
            .await
            .unwrap();
    }

    // The flood: no token, or a wrong one, from the same address.
    let mut flood = Vec::new();
    for i in 0..100 {
        let mut request = Request::new(pb::ListSegmentsRequest::default());
        if i % 2 == 0 {
            request
                .metadata_mut()
                .insert("authorization", "Bearer forged".parse().unwrap());
        }
        flood.push(segments.list_segments(request).await.unwrap_err().code());
    }
    let throttled = flood
        .iter()
        .filter(|c| **c == Code::ResourceExhausted)
        .count();
    assert!(
        throttled >= 90,
        "the flood is held to its address's small budget: {flood:?}"
    );
    // The agent, same address: its 20 reports all go through.
    let mut refused = Vec::new();
    for i in 0..20 {
        let report = host_down(&format!("compute-{i:02}"));
        if let Err(status) = app
            .notifications
            .create_notification(as_("agent-token", report))
            .await
        {
            refused.push(status);
        }
    }
    assert!(refused.is_empty(), "reports refused: {refused:?}");
    app.stop().await;
}

/// Issue 16: "one reader token opened 15,000 concurrent WatchNotification
/// streams". Watches are bounded per caller and in all, and a stream's
/// slot comes back when its client goes away.
#[tokio::test]
async fn watch_streams_are_bounded_and_their_slots_come_back() {
    let mut app = spawn_app_with(Backend::Sqlite, |s| {
        s.limits.max_watches_per_caller = 2;
        s.limits.max_watches = 3;
    })
    .await
    .unwrap();
    segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    // Dispatch is off in these tests: the notification stays `new`, and
    // its watches open.
    let n = app
        .notifications
        .create_notification(host_down("compute-01"))
        .await
        .unwrap()
        .into_inner();
    let watch = |mut client: pb::notification_service_client::NotificationServiceClient<
        tonic::transport::Channel,
    >,
                 id: String| async move {
        client
            .watch_notification(pb::WatchNotificationRequest { id })
            .await
            .map(tonic::Response::into_inner)
    };
    let first = watch(app.notifications.clone(), n.id.clone())
        .await
        .unwrap();
    let second = watch(app.notifications.clone(), n.id.clone())
        .await
        .unwrap();
    let refused = watch(app.notifications.clone(), n.id.clone())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("limits.max_watches_per_caller"),
        "{refused:?}"
    );
    // The client drops one stream: its slot comes back.
    drop(first);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let third = loop {
        match watch(app.notifications.clone(), n.id.clone()).await {
            Ok(stream) => break stream,
            Err(status) if status.code() == Code::ResourceExhausted => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the slot of a dropped stream never came back"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(other) => panic!("{other:?}"),
        }
    };
    // Streams still open would hold the graceful shutdown.
    drop((second, third));
    app.stop().await;
}

/// Watch streams of one notification opened and closed, twice, against
/// the `instanceha-api` binary as it ships (its allocator, in a process of
/// its own): its resident memory comes back when the streams end, and so
/// does every slot. Issue 16: the API grew from 22 to 357 MB with 15,000
/// streams and kept the memory. 1,500 streams in the suite; the issue's
/// 15,000 with `INSTANCEHA_WATCH_STREAMS=15000 cargo test -p
/// instanceha-api --test it watch_stream_memory -- --nocapture`
/// (BENCHMARKS.md has the figures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_stream_memory_comes_back() {
    let streams_wanted: usize = std::env::var("INSTANCEHA_WATCH_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_500);
    const PER_CONNECTION: usize = 100;
    let streams = streams_wanted.div_ceil(PER_CONNECTION) * PER_CONNECTION;
    // The whole budget is `streams`: each round can only open them all if
    // every slot of the round before came back.
    let api = ApiProcess::start(&format!(
        "[limits]\nmax_watches_per_caller = {streams}\nmax_watches = {streams}\nrequests_per_second = 0.0\n"
    ))
    .await;
    let channel = api.channel().await;
    let segment = SegmentServiceClient::new(channel.clone())
        .create_segment(segment_request("rack-a"))
        .await
        .unwrap()
        .into_inner();
    HostServiceClient::new(channel.clone())
        .create_host(host_request(&segment.id, "compute-01"))
        .await
        .unwrap();
    // Dispatch is off: the notification stays `new` and its watches open.
    let n = NotificationServiceClient::new(channel)
        .create_notification(host_down("compute-01"))
        .await
        .unwrap()
        .into_inner();
    let files = api.open_files();
    let before = api.rss_kib();
    let mut rounds = Vec::new();
    for _ in 0..2 {
        let opened = open_watches(&api, &n.id, streams, PER_CONNECTION).await;
        let open = api.rss_kib();
        drop(opened);
        let took = open.saturating_sub(before);
        let after = settled_rss(&api, files, before + took / RETAINED_AT_MOST).await;
        rounds.push((open / 1024, after / 1024));
        assert!(
            after.saturating_sub(before) * RETAINED_AT_MOST <= took,
            "{streams} watch streams ended, yet the API keeps more than 1/{RETAINED_AT_MOST} of the memory they took: RSS before {before} KiB, open {open} KiB, after {after} KiB"
        );
    }
    println!(
        "watch streams: {streams} opened and closed, twice; instanceha-api RSS before {} MiB; (open, after closing) per round, MiB: {rounds:?}",
        before / 1024
    );
    // The second round's slots came back too.
    drop(open_watches(&api, &n.id, streams, PER_CONNECTION).await);
}

/// What of the memory `watch_stream_memory_comes_back`'s streams took may
/// stay resident once they ended, as a fraction: 1/2. Measured
/// (BENCHMARKS.md): with jemalloc 3-4 % of it stays after 15,000 streams
/// and 20-26 % after 1,500 (a fixed 7-12 MiB, the allocator's and the
/// runtime's own); with glibc's malloc, which kept what the streams freed
/// in its per-thread arenas, 99 %; streams or tasks outliving their
/// clients would keep all of theirs.
const RETAINED_AT_MOST: u64 = 2;

/// `count` watch streams of notification `id`, `per_connection` to a
/// connection.
async fn open_watches(
    api: &ApiProcess,
    id: &str,
    count: usize,
    per_connection: usize,
) -> Vec<tonic::Streaming<pb::NotificationUpdate>> {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count / per_connection {
        let client = NotificationServiceClient::new(api.channel().await);
        let opened = futures::future::join_all((0..per_connection).map(|_| {
            let mut client = client.clone();
            let id = id.to_owned();
            async move {
                client
                    .watch_notification(pb::WatchNotificationRequest { id })
                    .await
                    .map(tonic::Response::into_inner)
            }
        }))
        .await;
        for stream in opened {
            streams.push(stream.expect("a watch opens: its slot is free"));
        }
    }
    streams
}

/// The API's resident memory once its clients' connections are gone (as
/// many files open as `files`) and it is down to `enough` and has stopped
/// falling; or whatever it is a minute after (jemalloc gives memory back
/// over its `dirty_decay_ms`, 10 s).
async fn settled_rss(api: &ApiProcess, files: usize, enough: u64) -> u64 {
    const EVERY: Duration = Duration::from_millis(500);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while api.open_files() > files && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(EVERY).await;
    }
    let mut last = api.rss_kib();
    let mut unchanged = 0;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(EVERY).await;
        let now = api.rss_kib();
        unchanged = if now < last { 0 } else { unchanged + 1 };
        last = now;
        // Two seconds without falling further, below the bound.
        if last <= enough && unchanged >= 4 {
            break;
        }
    }
    last
}
