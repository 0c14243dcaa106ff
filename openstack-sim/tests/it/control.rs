//! The HTTP control API and the request log.

use reqwest::Method;
use serde_json::json;

use crate::helpers::{manual_settings, start, two_hosts};

#[tokio::test]
async fn control_endpoints_drive_the_world() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let a = h
        .send(Method::POST, "/sim/hosts/compute-01/power-off", &[], None)
        .await;
    assert_eq!(a.status, 200);
    assert!(!h.sim.snapshot().host("compute-01").unwrap().host.powered_on);
    assert_eq!(
        h.send(Method::POST, "/sim/hosts/nope/power-off", &[], None)
            .await
            .status,
        404
    );
    let a = h
        .send(
            Method::POST,
            "/sim/clock/advance",
            &[],
            Some(json!({"secs": 61})),
        )
        .await;
    assert!(a.body["sim_time"].as_f64().unwrap() >= 61.0);
    let state = h.send(Method::GET, "/sim/state", &[], None).await;
    let host = state.body["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "compute-01")
        .unwrap()
        .clone();
    assert_eq!(host["service_state"], "down");
    assert_eq!(state.body["instances"].as_array().unwrap().len(), 7);

    let web = h.id_of("web-1");
    let a = h
        .send(
            Method::POST,
            &format!("/sim/instances/{web}/evacuation-failure"),
            &[],
            Some(json!({"mode": "claim"})),
        )
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(
        h.evacuate(&admin, "2.53", &web, json!({})).await.status,
        200
    );
    h.sim.advance(30.0);
    let stats = h.send(Method::GET, "/sim/stats", &[], None).await;
    assert_eq!(stats.body["failed"], 1);
    assert_eq!(stats.body["evacuations"][0]["phase"], "failed");

    let rule = json!({"service": "compute", "method": "GET", "path": "/servers", "effect": {"kind": "error", "status": 503, "body": "html", "retry_after": 2}, "times": 2});
    let added = h.send(Method::POST, "/sim/faults", &[], Some(rule)).await;
    assert_eq!(added.status, 201);
    let id = added.body["id"].as_u64().unwrap();
    let listed = h.send(Method::GET, "/sim/faults", &[], None).await;
    assert_eq!(listed.body["faults"][0]["remaining"], 2);
    assert_eq!(
        h.nova(&admin, "2.1", Method::GET, "/servers", None)
            .await
            .status,
        503
    );
    assert_eq!(
        h.send(Method::DELETE, &format!("/sim/faults/{id}"), &[], None)
            .await
            .status,
        200
    );
    assert_eq!(
        h.send(Method::DELETE, &format!("/sim/faults/{id}"), &[], None)
            .await
            .status,
        404
    );
    assert_eq!(
        h.nova(&admin, "2.1", Method::GET, "/servers", None)
            .await
            .status,
        200
    );
    let bad = h
        .send(
            Method::POST,
            "/sim/faults",
            &[],
            Some(json!({"effect": {"kind": "error", "status": 200}})),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        h.send(Method::DELETE, "/sim/faults", &[], None)
            .await
            .status,
        200
    );

    let revoked = h
        .send(Method::POST, "/sim/tokens/revoke", &[], Some(json!({})))
        .await;
    assert!(revoked.body["revoked"].as_u64().unwrap() >= 1);
    assert_eq!(
        h.nova(&admin, "2.1", Method::GET, "/servers", None)
            .await
            .status,
        401
    );
    let fresh = h.admin().await;
    let expired = h
        .send(
            Method::POST,
            "/sim/tokens/expire",
            &[],
            Some(json!({"token": fresh, "in_secs": 0})),
        )
        .await;
    assert_eq!(expired.body["expired"], 1);
    assert_eq!(
        h.nova(&fresh, "2.1", Method::GET, "/servers", None)
            .await
            .status,
        401
    );

    let creds = h.send(Method::GET, "/sim/credentials", &[], None).await;
    assert_eq!(creds.body["auth_url"], h.sim.auth_url());

    let reset = h.send(Method::POST, "/sim/reset", &[], None).await;
    assert_eq!(reset.status, 200);
    assert!(
        h.sim.snapshot().host("compute-01").unwrap().host.powered_on,
        "reset restores the scenario"
    );
    assert_eq!(h.sim.stats().evacuations.len(), 0);

    let small = serde_json::to_value(openstack_sim::Scenario::small()).unwrap();
    assert_eq!(
        h.send(Method::POST, "/sim/scenario", &[], Some(small))
            .await
            .status,
        200
    );
    assert!(h.sim.snapshot().instance_by_name("scratch-1").is_some());
    let invalid = json!({"hosts": [{"name": "c1"}], "instances": [{"name": "x", "host": "c9"}]});
    let a = h
        .send(Method::POST, "/sim/scenario", &[], Some(invalid))
        .await;
    assert_eq!(a.status, 400);
    assert!(
        a.body["error"]
            .as_str()
            .unwrap()
            .contains("instances[0].host")
    );
}

#[tokio::test]
async fn the_request_log_records_every_call() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let mark = h.sim.last_request_seq();
    let web = h.id_of("web-1");
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let internal = h
        .send(
            Method::POST,
            &format!("/internal/compute/v2.1/servers/{web}/action"),
            &[
                ("X-Auth-Token", &admin),
                ("OpenStack-API-Version", "compute 2.73"),
                ("traceparent", traceparent),
                (
                    "X-OpenStack-Request-ID",
                    "req-11111111-2222-3333-4444-555555555555",
                ),
            ],
            Some(json!({"lock": {"locked_reason": "ha"}})),
        )
        .await;
    assert_eq!(internal.status, 202);
    assert_eq!(
        h.nova(&admin, "2.1", Method::GET, "/servers?limit=1", None)
            .await
            .status,
        200
    );
    let log = h
        .send(
            Method::GET,
            &format!("/sim/requests?since={mark}"),
            &[],
            None,
        )
        .await;
    let records = log.body["requests"].as_array().unwrap();
    assert_eq!(records.len(), 2);
    let first = &records[0];
    assert_eq!(first["interface"], "internal");
    assert_eq!(first["service"], "compute");
    assert_eq!(first["method"], "POST");
    assert_eq!(first["path"], format!("/compute/v2.1/servers/{web}/action"));
    assert_eq!(first["action"], "lock");
    assert_eq!(first["instance_id"], web.as_str());
    assert_eq!(first["microversion"], "compute 2.73");
    assert_eq!(first["status"], 202);
    assert_eq!(first["traceparent"], traceparent);
    assert_eq!(
        first["global_request_id"],
        "req-11111111-2222-3333-4444-555555555555"
    );
    assert_eq!(
        first["request_id"],
        internal.header("x-compute-request-id").unwrap()
    );
    assert_eq!(records[1]["interface"], "public");
    assert_eq!(records[1]["query"], "limit=1");
    assert!(records[1]["seq"].as_u64().unwrap() > first["seq"].as_u64().unwrap());
    assert_eq!(
        h.sim
            .request_log(Some(records[1]["seq"].as_u64().unwrap()))
            .len(),
        1,
        "the log call itself"
    );
    let rejected = h.nova(&admin, "2.200", Method::GET, "/servers", None).await;
    assert_eq!(rejected.status, 406);
    assert_eq!(
        h.sim
            .request_log(None)
            .last()
            .unwrap()
            .microversion
            .as_deref(),
        Some("compute 2.200")
    );
}

#[tokio::test]
async fn disabling_an_unreachable_compute_still_counted_up_blocks_for_the_rpc_timeout() {
    let mut settings = manual_settings();
    settings.speed = 100.0;
    // 120 s at 100x: a 1.2 s stall, far enough from "at once" that a
    // loaded machine cannot blur the two.
    settings.rpc_response_timeout = 120.0;
    let h = start(two_hosts(settings)).await;
    let admin = h.admin().await;
    let uuid = h
        .sim
        .snapshot()
        .host("compute-01")
        .unwrap()
        .host
        .service_uuid
        .clone();
    h.sim.power_off("compute-01").unwrap();
    let started = std::time::Instant::now();
    let a = h
        .nova(
            &admin,
            "2.53",
            Method::PUT,
            &format!("/os-services/{uuid}"),
            Some(json!({"status": "disabled", "disabled_reason": "fenced"})),
        )
        .await;
    assert_eq!(a.status, 200);
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1200),
        "120 s at 100x"
    );
    let uuid2 = h
        .sim
        .snapshot()
        .host("compute-02")
        .unwrap()
        .host
        .service_uuid
        .clone();
    let started = std::time::Instant::now();
    h.nova(
        &admin,
        "2.53",
        Method::PUT,
        &format!("/os-services/{uuid2}"),
        Some(json!({"status": "disabled", "disabled_reason": "x"})),
    )
    .await;
    assert!(
        started.elapsed() < std::time::Duration::from_millis(600),
        "a live compute answers at once"
    );
}
