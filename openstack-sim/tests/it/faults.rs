//! Fault injection: each effect, matching by action and server, counting and removal.

use std::time::{Duration, Instant};

use openstack_sim::{ErrorBody, FaultEffect, FaultRule, FaultService};
use reqwest::Method;
use serde_json::json;

use crate::helpers::{client, manual_settings, start, two_hosts};

fn error(status: u16, body: ErrorBody, retry_after: Option<u32>) -> FaultEffect {
    FaultEffect::Error {
        status,
        body,
        message: None,
        retry_after,
    }
}

#[tokio::test]
async fn json_503_for_the_next_call_only() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.sim
        .inject_fault(
            FaultRule::new(
                FaultService::Compute,
                Some("GET"),
                Some("/servers/detail"),
                error(503, ErrorBody::Json, Some(5)),
            )
            .times(1),
        )
        .unwrap();
    let other = h.nova(&admin, "2.53", Method::GET, "/servers", None).await;
    assert_eq!(other.status, 200, "another path is untouched");
    let a = h
        .nova(&admin, "2.53", Method::GET, "/servers/detail", None)
        .await;
    assert_eq!(a.status, 503);
    assert_eq!(a.body["serviceUnavailable"]["code"], 503);
    assert_eq!(a.header("retry-after"), Some("5"));
    assert!(a.header("x-compute-request-id").is_some());
    assert_eq!(
        h.nova(&admin, "2.53", Method::GET, "/servers/detail", None)
            .await
            .status,
        200
    );
    assert!(h.sim.faults().is_empty(), "the rule expired");
    let log = h.sim.request_log(None);
    let hit = log.iter().find(|r| r.status == Some(503)).unwrap();
    assert!(hit.fault_id.is_some());
}

#[tokio::test]
async fn html_503_and_429_with_retry_after_and_keystone_errors() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.sim
        .inject_fault(
            FaultRule::new(
                FaultService::Volume,
                None,
                Some("/volumes*"),
                error(503, ErrorBody::Html, None),
            )
            .times(1),
        )
        .unwrap();
    let a = h
        .cinder(&admin, "3.44", Method::GET, "/volumes", None)
        .await;
    assert_eq!(a.status, 503);
    assert_eq!(a.header("content-type"), Some("text/html"));
    assert!(a.text.contains("<h1>503 Service Unavailable</h1>"));
    h.sim
        .inject_fault(
            FaultRule::new(
                FaultService::Compute,
                None,
                None,
                error(429, ErrorBody::Json, Some(3)),
            )
            .times(1),
        )
        .unwrap();
    let a = h.nova(&admin, "2.1", Method::GET, "/servers", None).await;
    assert_eq!(a.status, 429);
    assert_eq!(a.body["overLimit"]["retryAfter"], "3");
    h.sim
        .inject_fault(
            FaultRule::new(
                FaultService::Identity,
                Some("POST"),
                Some("/auth/tokens"),
                error(503, ErrorBody::Json, None),
            )
            .times(1),
        )
        .unwrap();
    let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "admin", "domain": {"name": "Default"}, "password": "secret"}}}}});
    let a = h
        .send(Method::POST, "/identity/v3/auth/tokens", &[], Some(body))
        .await;
    assert_eq!(a.status, 503);
    assert_eq!(a.body["error"]["code"], 503);
    assert_eq!(a.body["error"]["title"], "Service Unavailable");
}

#[tokio::test]
async fn latency_delays_and_then_serves() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.sim
        .inject_fault(
            FaultRule::new(
                FaultService::Any,
                None,
                Some("/servers"),
                FaultEffect::Latency { ms: 300 },
            )
            .times(1),
        )
        .unwrap();
    let started = Instant::now();
    let a = h.nova(&admin, "2.1", Method::GET, "/servers", None).await;
    assert_eq!(a.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn drop_closes_the_connection_without_an_answer() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let web = h.id_of("web-1");
    h.sim
        .inject_fault(
            FaultRule::new(FaultService::Compute, Some("POST"), None, FaultEffect::Drop)
                .action("lock")
                .instance(&web)
                .times(1),
        )
        .unwrap();
    let unlock = h
        .nova(
            &admin,
            "2.73",
            Method::POST,
            &format!("/servers/{web}/action"),
            Some(json!({"unlock": null})),
        )
        .await;
    assert_eq!(unlock.status, 202, "another action is not matched");
    let err = client()
        .post(h.url(&format!("/compute/v2.1/servers/{web}/action")))
        .header("X-Auth-Token", &admin)
        .json(&json!({"lock": null}))
        .send()
        .await
        .expect_err("the connection is dropped");
    assert!(!err.is_timeout(), "{err}");
    assert!(
        !h.sim.snapshot().instance(&web).unwrap().locked,
        "the call was not served"
    );
    let log = h.sim.request_log(None);
    let dropped = log.iter().find(|r| r.outcome == "dropped").unwrap();
    assert_eq!(dropped.action.as_deref(), Some("lock"));
    assert_eq!(dropped.instance_id.as_deref(), Some(web.as_str()));
    assert_eq!(dropped.status, None);
}

#[tokio::test]
async fn hang_never_answers() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let id = h
        .sim
        .inject_fault(FaultRule::new(
            FaultService::Compute,
            None,
            Some("/os-services"),
            FaultEffect::Hang,
        ))
        .unwrap();
    let err = client()
        .get(h.url("/compute/v2.1/os-services"))
        .header("X-Auth-Token", &admin)
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .expect_err("hangs");
    assert!(err.is_timeout());
    assert_eq!(h.sim.faults()[0].hits, 1);
    assert!(h.sim.delete_fault(id));
    assert!(!h.sim.delete_fault(id));
    assert_eq!(
        h.nova(&admin, "2.1", Method::GET, "/os-services", None)
            .await
            .status,
        200
    );
    assert!(h.sim.request_log(None).iter().any(|r| r.outcome == "hung"));
}

#[tokio::test]
async fn probability_faults_apply_to_some_calls_and_clear_removes_all() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.sim
        .inject_fault(
            FaultRule::new(
                FaultService::Compute,
                None,
                Some("/servers"),
                error(500, ErrorBody::Json, None),
            )
            .probability(0.5),
        )
        .unwrap();
    h.sim
        .inject_fault(FaultRule::new(
            FaultService::Volume,
            None,
            None,
            FaultEffect::Hang,
        ))
        .unwrap();
    let mut failures = 0;
    for _ in 0..40 {
        let a = h.nova(&admin, "2.1", Method::GET, "/servers", None).await;
        if a.status == 500 {
            assert_eq!(a.body["computeFault"]["code"], 500);
            failures += 1;
        }
    }
    assert!((5..=35).contains(&failures), "{failures} of 40");
    h.sim.clear_faults();
    assert!(h.sim.faults().is_empty());
    assert_eq!(
        h.cinder(&admin, "3.0", Method::GET, "/volumes", None)
            .await
            .status,
        200
    );
}
