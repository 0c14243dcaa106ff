//! What every Masakari client relies on before any resource: version
//! discovery, microversion negotiation and its headers, fault bodies,
//! request bodies that are not JSON, methods a resource lacks, the
//! project-scoped routes, and authentication through the shared guard.

use instanceha_api::auth::{AuthMode, token_sha256};
use reqwest::Method;
use serde_json::json;

use super::{Rest, host_down, now};
use crate::backends::Backend;
use crate::helpers::{spawn_app, spawn_app_with};

async fn versions_are_discovered(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let root = rest.get("/").await;
    let versions = root.expect(200)["versions"].as_array().unwrap().clone();
    assert_eq!(versions.len(), 1);
    let v1 = &versions[0];
    assert_eq!(v1["id"], "v1.0");
    assert_eq!(v1["status"], "CURRENT");
    assert_eq!(v1["version"], "1.3");
    assert_eq!(v1["min_version"], "1.0");
    assert_eq!(v1["links"][0]["rel"], "self");
    assert_eq!(v1["links"][0]["href"], rest.url("/v1/"));
    assert!(
        root.version_header().is_none(),
        "the version document has no microversion"
    );

    for path in ["/v1", "/v1/"] {
        let reply = rest.get(path).await;
        let version = &reply.expect(200)["version"];
        assert_eq!(version["version"], "1.3");
        assert_eq!(version["links"][0]["href"], rest.url("/v1/"));
        assert_eq!(version["links"][1]["rel"], "describedby");
        assert_eq!(
            version["media-types"][0]["type"],
            "application/vnd.openstack.masakari+json;version=1"
        );
        assert_eq!(reply.version_header(), Some("instance-ha 1.0"));
    }

    let elsewhere = rest.get("/something").await;
    let choices = elsewhere.expect(300)["choices"].as_array().unwrap();
    assert_eq!(choices[0]["links"][0]["href"], rest.url("/v1/something"));
    let unknown = rest.get("/v1/nothing-here").await;
    assert!(unknown.fault("itemNotFound").contains("could not be found"));

    // Links come from the API's own address, never from a Host header.
    for path in ["/", "/v1/", "/elsewhere"] {
        let reply = rest
            .client()
            .get(rest.url(path))
            .header("host", "attacker.example")
            .send()
            .await
            .unwrap();
        let text = reply.text().await.unwrap();
        assert!(!text.contains("attacker.example"), "{path}: {text}");
    }

    // Load balancers probe Masakari at /healthcheck.
    let health = rest
        .client()
        .get(rest.url("/healthcheck"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "OK");
}

async fn microversions_are_negotiated(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let reply = rest.get("/v1/segments").await;
    reply.expect(200);
    assert_eq!(reply.version_header(), Some("instance-ha 1.0"));
    assert_eq!(reply.headers.get("vary").unwrap(), "OpenStack-API-Version");
    for (asked, got) in [
        ("1.0", "instance-ha 1.0"),
        ("1.1", "instance-ha 1.1"),
        ("1.2", "instance-ha 1.2"),
        ("1.3", "instance-ha 1.3"),
        ("latest", "instance-ha 1.3"),
    ] {
        let reply = rest.version(asked).get("/v1/segments").await;
        reply.expect(200);
        assert_eq!(reply.version_header(), Some(got), "asked {asked}");
    }

    let too_new = rest.version("1.4").get("/v1/segments").await;
    assert_eq!(
        too_new.fault("masakariFault"),
        "Version 1.4 is not supported by the API. Minimum is 1.0 and maximum is 1.3."
    );
    assert_eq!(too_new.status, 406);
    // Masakari 22's Fault.__call__ (masakari/api/openstack/wsgi.py) sets
    // no OpenStack-API-Version on a 406, only the Vary.
    assert_eq!(too_new.version_header(), None);
    assert_eq!(
        too_new.headers.get("vary").unwrap(),
        "OpenStack-API-Version"
    );
    // Masakari (wsgi.py, api_version_request.py) sends only
    // `OpenStack-API-Version`; no legacy `X-OpenStack-Masakari-API-Version`.
    for reply in [&reply, &too_new] {
        assert!(
            !reply
                .headers
                .contains_key("x-openstack-masakari-api-version"),
            "{:?}",
            reply.headers
        );
    }
    let too_old = rest.version("0.9").get("/v1/segments").await;
    assert_eq!(too_old.status, 400, "0.9 is not of Masakari's format");
    let malformed = rest.version("1.x").get("/v1/segments").await;
    assert_eq!(
        malformed.fault("badRequest"),
        "API Version String 1.x is of invalid format. Must be of format MajorNum.MinorNum."
    );
    assert_eq!(malformed.version_header(), None);
    assert_eq!(rest.version("2.0").get("/v1/segments").await.status, 406);

    // A fault carries the version under Masakari's service type, as a
    // success does (Resource.__call__ and Fault.__call__ in wsgi.py).
    let missing = rest
        .version("1.2")
        .get("/v1/segments/8a8a8a8a-0000-4000-8000-000000000000")
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.version_header(), Some("instance-ha 1.2"));

    // Other services' versions in the same header are not ours.
    let reply = rest
        .client()
        .get(rest.url("/v1/segments"))
        .header("OpenStack-API-Version", "compute 2.90, instance-ha 1.1")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.headers()["openstack-api-version"], "instance-ha 1.1");
}

async fn bodies_that_are_not_json_are_refused(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let raw = |body: &'static str, content_type: &'static str| {
        rest.client()
            .post(rest.url("/v1/segments"))
            .header("content-type", content_type)
            .body(body)
    };
    let reply = raw("{not json", "application/json").send().await.unwrap();
    assert_eq!(reply.status(), 400);
    let body: serde_json::Value = reply.json().await.unwrap();
    assert_eq!(body["badRequest"]["message"], "Malformed request body");

    let reply = raw("<segment/>", "application/xml").send().await.unwrap();
    assert_eq!(reply.status(), 415);
    let body: serde_json::Value = reply.json().await.unwrap();
    assert_eq!(body["badMediaType"]["code"], 415);
    // JSON sent as text or as a form (what a browser sends across origins
    // without asking), or with no type at all, is not read.
    let segment =
        r#"{"segment": {"name": "a", "recovery_method": "auto", "service_type": "COMPUTE"}}"#;
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let reply = raw(segment, content_type).send().await.unwrap();
        assert_eq!(reply.status(), 415, "{content_type}");
    }
    let untyped = rest
        .client()
        .post(rest.url("/v1/segments"))
        .body(segment)
        .send()
        .await
        .unwrap();
    assert_eq!(untyped.status(), 415, "no Content-Type");
    rest.get("/v1/segments").await.expect(200)["segments"]
        .as_array()
        .filter(|segments| segments.is_empty())
        .expect("nothing was created");

    let huge = "x".repeat(200_000);
    let reply = rest
        .client()
        .post(rest.url("/v1/segments"))
        .header("content-type", "application/json")
        .body(format!("{{\"segment\": {{\"name\": \"{huge}\"}}}}"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 413);

    // An empty body is no segment.
    let reply = rest.send(Method::POST, "/v1/segments", None).await;
    assert!(reply.fault("badRequest").contains("not of type 'object'"));
    // Neither is a list, nor a body with something else beside it.
    rest.post("/v1/segments", json!([])).await.expect(400);
    let extra = rest
        .post(
            "/v1/segments",
            json!({"segment": {"name": "a", "recovery_method": "auto", "service_type": "C"}, "x": 1}),
        )
        .await;
    assert!(extra.fault("badRequest").contains("'x' was unexpected"));

    // A method the resource does not have.
    let reply = rest.send(Method::PATCH, "/v1/segments", None).await;
    assert_eq!(reply.status, 405);
    reply.fault("badMethod");
    // A fault after the version was settled, as Masakari's `Fault` sends it.
    assert_eq!(reply.version_header(), Some("instance-ha 1.0"));
    assert_eq!(reply.headers.get("vary").unwrap(), "OpenStack-API-Version");
}

async fn project_scoped_routes_work(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let project = "0123456789abcdef0123456789abcdef";
    let created = rest
        .post(
            &format!("/v1/{project}/segments"),
            json!({"segment": {"name": "scoped", "recovery_method": "auto", "service_type": "COMPUTE"}}),
        )
        .await;
    let uuid = created.expect(201)["segment"]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = rest.get(&format!("/v1/{project}/segments/{uuid}")).await;
    assert_eq!(shown.expect(200)["segment"]["name"], "scoped");
    let host = rest
        .post(
            &format!("/v1/{project}/segments/{uuid}/hosts"),
            json!({"host": {"name": "h1", "type": "COMPUTE", "control_attributes": "SSH"}}),
        )
        .await;
    host.expect(201);
    let listed = rest.get(&format!("/v1/{project}/notifications")).await;
    listed.expect(200);
    // Not a project id: Masakari does not route it.
    assert_eq!(rest.get("/v1/Not-A-Project/segments").await.status, 404);
}

async fn tokens_go_through_the_guard(backend: Backend) {
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
            entry("monitor", "agent-token", "monitoring_agent"),
            entry("dashboard", "reader-token", "reader"),
        ]
        .concat(),
    )
    .unwrap();
    let Some(app) = spawn_app_with(backend, |s| {
        s.auth.mode = AuthMode::Static;
        s.auth.static_tokens_file = Some(file.clone());
    })
    .await
    else {
        return;
    };
    let rest = Rest::new(&app);
    let admin = rest.token("admin-token");
    let agent = rest.token("agent-token");
    let reader = rest.token("reader-token");

    // No token, a wrong token: keystonemiddleware's 401, no microversion.
    for client in [&rest, &rest.token("wrong")] {
        let reply = client.get("/v1/segments").await;
        assert_eq!(reply.status, 401);
        assert_eq!(reply.body["error"]["code"], 401);
        assert_eq!(reply.body["error"]["title"], "Unauthorized");
        assert_eq!(reply.version_header(), None);
        // Every 401 carries a challenge; without Keystone, a bearer token.
        assert_eq!(
            reply
                .headers
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap()),
            Some("Bearer realm=\"instance-ha\""),
        );
    }
    let v1 = rest.get("/v1").await;
    assert!(
        v1.headers.contains_key("www-authenticate"),
        "{:?}",
        v1.headers
    );
    // Discovery needs no token; the v1 document does, as in Masakari.
    rest.get("/").await.expect(200);
    assert_eq!(rest.get("/v1").await.status, 401);
    reader.get("/v1").await.expect(200);

    let segment = admin.segment("rack").await;
    let segment_id = segment["uuid"].as_str().unwrap();
    admin.host(segment_id, "compute-1").await;

    let refused = reader
        .post(
            "/v1/segments",
            json!({"segment": {"name": "x", "recovery_method": "auto", "service_type": "C"}}),
        )
        .await;
    assert_eq!(refused.status, 403);
    assert!(
        refused
            .fault("forbidden")
            .starts_with("Policy doesn't allow os_masakari_api:segments:create to be performed."),
        "{:#}",
        refused.body
    );
    reader.get("/v1/segments").await.expect(200);
    reader
        .get(&format!("/v1/segments/{segment_id}/hosts"))
        .await
        .expect(200);
    assert_eq!(
        reader
            .post("/v1/notifications", host_down("compute-1", &now()))
            .await
            .status,
        403
    );
    // A monitoring agent reports failures but does not administer.
    agent
        .post("/v1/notifications", host_down("compute-1", &now()))
        .await
        .expect(202);
    assert_eq!(
        agent
            .delete(&format!("/v1/segments/{segment_id}"))
            .await
            .status,
        403
    );
    // Bearer works as well as X-Auth-Token.
    let reply = rest
        .client()
        .get(rest.url("/v1/notifications"))
        .bearer_auth("reader-token")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
}

crate::on_every_backend!(
    versions_are_discovered,
    microversions_are_negotiated,
    bodies_that_are_not_json_are_refused,
    project_scoped_routes_work,
    tokens_go_through_the_guard,
);
