//! Keystone-validated tokens against openstack-sim's Keystone: cached,
//! failing closed, remembered when refused, merged when concurrent, and
//! bounded before Keystone is asked; a member reads nothing by default.

use openstack_sim::{ErrorBody, FaultEffect, FaultRule, FaultService, Scenario};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystone_tokens_are_validated_cached_and_fail_closed() {
    let sim = Sim::start(Scenario::small(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let auth_url = sim.auth_url();
    let mut app = spawn_app_with(Backend::Sqlite, |s| {
        s.auth.mode = AuthMode::Keystone;
        s.auth.keystone = Credentials {
            auth_url: Some(auth_url),
            username: Some("nova".into()),
            password: Some(Secret::new("secret")),
            project_name: Some("service".into()),
            user_domain_name: Some("Default".into()),
            project_domain_name: Some("Default".into()),
            ..Credentials::default()
        };
        // No caching: every call asks Keystone, so revocation shows at once.
        s.auth.cache_ttl = std::time::Duration::ZERO;
        s.auth.negative_cache_ttl = std::time::Duration::ZERO;
        // The operator names the role that reads.
        s.auth.roles.reader = vec!["reader".into()];
    })
    .await
    .unwrap();
    let admin = token_of(&sim, "admin", "admin").await;
    let reader = token_of(&sim, "reader", "demo").await;
    let ids = fixtures(&mut app, &admin).await;
    check(
        "keystone reader",
        &codes(&mut app, Some(&reader), &ids).await,
        &{
            let mut r = READS.to_vec();
            r.push("GetVmove");
            r
        },
    );
    // A revoked token stops working.
    assert!(sim.revoke_token(&reader));
    let refused = app
        .segments
        .list_segments(with_token(
            pb::ListSegmentsRequest::default(),
            Some(&reader),
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    // Keystone unreachable: refused, not let through.
    sim.inject_fault(FaultRule::new(
        FaultService::Identity,
        Some("GET"),
        Some("/auth/tokens"),
        FaultEffect::Error {
            status: 503,
            body: ErrorBody::Json,
            message: None,
            retry_after: None,
        },
    ))
    .unwrap();
    let refused = app
        .segments
        .list_segments(with_token(pb::ListSegmentsRequest::default(), Some(&admin)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    app.stop().await;
}

/// The API of the Keystone tests: validating tokens as the simulator's
/// `nova`, with `tune` on top.
async fn keystone_app(
    sim: &Sim,
    tune: impl FnOnce(&mut instanceha_api::config::Settings),
) -> TestApp {
    let auth_url = sim.auth_url();
    spawn_app_with(Backend::Sqlite, |s| {
        s.auth.mode = AuthMode::Keystone;
        s.auth.keystone = Credentials {
            auth_url: Some(auth_url),
            username: Some("nova".into()),
            password: Some(Secret::new("secret")),
            project_name: Some("service".into()),
            user_domain_name: Some("Default".into()),
            project_domain_name: Some("Default".into()),
            ..Credentials::default()
        };
        tune(s);
    })
    .await
    .unwrap()
}

/// Keystone's default roles imply admin ⊃ member ⊃ reader: a member of
/// any project holds `reader` too. By default no Keystone role reads, so
/// a member (and a bare reader) reads nothing, on gRPC and REST alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_token_reads_nothing_by_default() {
    let sim = Sim::start(Scenario::small(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut app = keystone_app(&sim, |_| {}).await;
    let admin = token_of(&sim, "admin", "admin").await;
    let ids = fixtures(&mut app, &admin).await;
    for (user, project) in [("demo", "demo"), ("reader", "demo")] {
        let token = token_of(&sim, user, project).await;
        check(user, &codes(&mut app, Some(&token), &ids).await, &[]);
        let rest = crate::rest::Rest::new(&app).token(&token);
        for path in ["/v1/segments", "/v1/notifications"] {
            rest.get(path).await.expect(403);
        }
    }
    app.stop().await;
}

/// A flood of made-up tokens spends the caller's anonymous budget before
/// any of them goes to Keystone: 1,000 calls, Keystone asked at most the
/// budget's burst (the rate is one an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_tokens_reach_keystone_a_bounded_number_of_times() {
    const BURST: u32 = 10;
    let sim = Sim::start(Scenario::small(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut app = keystone_app(&sim, |s| {
        s.limits.anonymous_requests_per_second = 0.0;
        s.limits.anonymous_burst = BURST;
    })
    .await;
    let since = sim.last_request_seq();
    let mut codes = std::collections::BTreeMap::new();
    for i in 0..1000 {
        let token = format!("made-up-{i}-{}", uuid::Uuid::new_v4());
        let code = app
            .segments
            .list_segments(with_token(pb::ListSegmentsRequest::default(), Some(&token)))
            .await
            .err()
            .map_or(Code::Ok, |s| s.code());
        *codes.entry(format!("{code:?}")).or_insert(0) += 1;
    }
    let validations = sim
        .request_log(Some(since))
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/auth/tokens"))
        .count();
    assert!(
        validations <= BURST as usize,
        "{validations} validations for 1,000 made-up tokens ({codes:?})"
    );
    assert_eq!(codes.get("Ok"), None, "{codes:?}");
    app.stop().await;
}

/// A refused token is refused again without asking Keystone (for
/// `auth.negative_cache_ttl`), and concurrent calls with one new token
/// make one validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_tokens_are_remembered_and_concurrent_validations_merged() {
    let sim = Sim::start(Scenario::small(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let app = keystone_app(&sim, |_| {}).await;
    let validations = |since| {
        sim.request_log(Some(since))
            .iter()
            .filter(|r| r.method == "GET" && r.path.ends_with("/auth/tokens"))
            .count()
    };
    let since = sim.last_request_seq();
    for _ in 0..5 {
        let refused = app
            .segments
            .clone()
            .list_segments(with_token(
                pb::ListSegmentsRequest::default(),
                Some("not-a-token"),
            ))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated);
    }
    assert_eq!(validations(since), 1, "one validation for five calls");
    let admin = token_of(&sim, "admin", "admin").await;
    let since = sim.last_request_seq();
    let calls = (0..20).map(|_| {
        let mut segments = app.segments.clone();
        let admin = admin.clone();
        async move {
            segments
                .list_segments(with_token(pb::ListSegmentsRequest::default(), Some(&admin)))
                .await
                .map(drop)
        }
    });
    for result in futures::future::join_all(calls).await {
        result.expect("the admin's calls are answered");
    }
    assert_eq!(
        validations(since),
        1,
        "twenty concurrent calls, one validation"
    );
    app.stop().await;
}
