//! `x-openstack-request-id`, as Masakari's pipeline (oslo.middleware's
//! `RequestId`) gives it: a fresh `req-<uuid4>` on every response, faults
//! and refusals too; a caller's own id kept as the global request id when
//! it has oslo's form, never echoed; and both, with the trace id, in the
//! request's access line of the log.

use std::collections::HashSet;
use std::time::Duration;

use instanceha_api::auth::{AuthMode, token_sha256};
use reqwest::Method;
use serde_json::json;

use super::{Reply, Rest};
use crate::backends::Backend;
use crate::helpers::spawn_app_with;
use crate::process::ApiProcess;

const HEADER: &str = "x-openstack-request-id";

/// oslo.middleware's `ID_FORMAT`:
/// `^req-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$`.
fn oslo_format(id: &str) -> bool {
    let Some(uuid) = id.strip_prefix("req-") else {
        return false;
    };
    let groups: Vec<&str> = uuid.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, len)| {
            g.len() == len
                && g.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// The one request id of `reply`, asserted in oslo's form.
#[track_caller]
fn request_id(what: &str, reply: &Reply) -> String {
    let ids: Vec<_> = reply.headers.get_all(HEADER).iter().collect();
    assert_eq!(ids.len(), 1, "{what}: one {HEADER}, got {ids:?}");
    let id = ids[0].to_str().expect("an ASCII request id").to_owned();
    assert!(oslo_format(&id), "{what}: {id:?} is not req-<uuid>");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_a_fresh_request_id() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[token]]\nname = \"ops\"\nsha256 = \"{}\"\nroles = [\"admin\"]\n",
            token_sha256("admin-token")
        ),
    )
    .unwrap();
    let app = spawn_app_with(Backend::Sqlite, |s| {
        s.auth.mode = AuthMode::Static;
        s.auth.static_tokens_file = Some(tokens.clone());
    })
    .await
    .expect("SQLite is always there");
    let anonymous = Rest::new(&app);
    let rest = anonymous.token("admin-token");
    let not_json = rest
        .client()
        .post(rest.url("/v1/segments"))
        .header("x-auth-token", "admin-token")
        .header("content-type", "application/json")
        .body("{not json");
    let health = rest.client().get(rest.url("/healthcheck"));
    let mut seen = HashSet::new();
    // Answers that are not JSON.
    for (what, request, status) in [
        ("a body not JSON", not_json, 400),
        ("the health check", health, 200),
    ] {
        let reply = request.send().await.unwrap();
        assert_eq!(reply.status(), status, "{what}");
        let id = reply
            .headers()
            .get(HEADER)
            .unwrap_or_else(|| panic!("{what}: no {HEADER}"));
        let id = id.to_str().unwrap().to_owned();
        assert!(oslo_format(&id), "{what}: {id}");
        assert!(seen.insert(id), "{what}: a request id seen before");
    }
    let answers = [
        ("version discovery", rest.get("/").await, 200),
        ("a list", rest.get("/v1/segments").await, 200),
        ("a creation", rest.post("/v1/segments", json!({"segment": {"name": "rack-1", "recovery_method": "auto", "service_type": "COMPUTE"}})).await, 201),
        ("a fault", rest.get("/v1/segments/8c9b2d4e-0000-4000-8000-000000000000").await, 404),
        ("a bad body", rest.post("/v1/segments", json!({"segment": {}})).await, 400),
        ("an unknown path", rest.get("/elsewhere").await, 300),
        ("a method the resource lacks", rest.send(Method::PATCH, "/v1/segments", None).await, 405),
        ("an unsupported microversion", rest.version("9.9").get("/v1/segments").await, 406),
        ("no token", anonymous.get("/v1/segments").await, 401),
    ];
    for (what, reply, status) in &answers {
        assert_eq!(reply.status, *status, "{what}: {:#}", reply.body);
        assert!(
            seen.insert(request_id(what, reply)),
            "{what}: a request id seen before"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_request_id_is_never_echoed() {
    let app = spawn_app_with(Backend::Sqlite, |_| {})
        .await
        .expect("SQLite is always there");
    let rest = Rest::new(&app);
    for (what, theirs) in [
        (
            "valid (oslo's form)",
            "req-0f8fad5b-d9cb-469f-a165-70867728950e",
        ),
        ("uppercase", "req-0F8FAD5B-D9CB-469F-A165-70867728950E"),
        ("not a uuid", "req-deadbeef"),
        ("no prefix", "0f8fad5b-d9cb-469f-a165-70867728950e"),
        ("free text", "my-request; drop table"),
    ] {
        let reply = rest
            .client()
            .get(rest.url("/v1/segments"))
            .header(HEADER, theirs)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200, "{what}");
        let ids: Vec<_> = reply.headers().get_all(HEADER).iter().collect();
        assert_eq!(ids.len(), 1, "{what}: {ids:?}");
        let ours = ids[0].to_str().unwrap();
        assert_ne!(ours, theirs, "{what}: the caller's id came back");
        assert!(oslo_format(ours), "{what}: {ours}");
    }
}

/// The binary's JSON log: the access line of a request whose caller sent a
/// valid request id and a W3C trace context names the response's request
/// id, the caller's as the global one, and the caller's trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_line_names_the_request_id_the_global_one_and_the_trace() {
    let api = ApiProcess::start("[rest]\nenabled = true\nlisten = \"127.0.0.1:0\"\n").await;
    let rest = Rest::at_addr(api.rest_addr().await);
    let global = "req-1b4e28ba-2fa1-41d2-883f-0016d3cca427";
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let reply = rest
        .client()
        .get(rest.url("/v1/segments"))
        .header(HEADER, global)
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let ours = reply.headers()[HEADER].to_str().unwrap().to_owned();
    let line = instanceha_testkit::eventually(
        "the request's access line",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            api.lines()
                .into_iter()
                .find(|line| line.contains(&ours) && line.contains("rest request"))
        },
    )
    .await;
    let entry: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(entry["message"], "rest request", "{line}");
    assert_eq!(entry["status"], 200, "{line}");
    let span = &entry["span"];
    assert_eq!(span["request_id"], ours.as_str(), "{line}");
    assert_eq!(span["global_request_id"], global, "{line}");
    assert_eq!(span["trace_id"], trace, "{line}");
    assert_eq!(span["url.path"], "/v1/segments", "{line}");
}
