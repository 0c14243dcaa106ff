//! Keystone v3: token issue, catalog, errors, validation and revocation.

use reqwest::Method;
use serde_json::json;

use crate::helpers::{manual_settings, start, two_hosts};

#[tokio::test]
async fn password_token_has_the_contract_shape_and_catalog() {
    let h = start(two_hosts(manual_settings())).await;
    let body = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {"name": "admin", "domain": {"name": "Default"}, "password": "secret"}}},
        "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}});
    let a = h
        .send(
            Method::POST,
            "/identity/v3/auth/tokens",
            &[],
            Some(body.clone()),
        )
        .await;
    assert_eq!(a.status, 201);
    assert!(a.header("x-subject-token").unwrap().len() > 150);
    assert!(
        a.header("x-openstack-request-id")
            .unwrap()
            .starts_with("req-")
    );
    let t = &a.body["token"];
    for key in [
        "methods",
        "expires_at",
        "issued_at",
        "audit_ids",
        "user",
        "project",
        "roles",
        "catalog",
    ] {
        assert!(!t[key].is_null(), "token.{key} missing");
    }
    assert_eq!(t["methods"], json!(["password"]));
    assert_eq!(t["project"]["name"], "admin");
    assert_eq!(t["user"]["domain"]["id"], "default");
    assert!(
        t["roles"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "admin")
    );
    let issued = chrono::DateTime::parse_from_rfc3339(t["issued_at"].as_str().unwrap()).unwrap();
    let expires = chrono::DateTime::parse_from_rfc3339(t["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!((expires - issued).num_seconds(), 3600);
    let catalog = t["catalog"].as_array().unwrap();
    let project = h.sim.project_id("admin").unwrap();
    for (kind, name, path) in [
        ("compute", "nova", "/compute/v2.1".to_string()),
        ("block-storage", "cinder", format!("/volume/v3/{project}")),
        ("volumev3", "cinderv3", format!("/volume/v3/{project}")),
    ] {
        let entry = catalog
            .iter()
            .find(|e| e["type"] == kind)
            .unwrap_or_else(|| panic!("{kind} in catalog"));
        assert_eq!(entry["name"], name);
        let endpoints = entry["endpoints"].as_array().unwrap();
        let public = endpoints
            .iter()
            .find(|e| e["interface"] == "public")
            .unwrap();
        let internal = endpoints
            .iter()
            .find(|e| e["interface"] == "internal")
            .unwrap();
        assert_eq!(public["region_id"], "RegionOne");
        assert_eq!(public["url"], format!("{}{path}", h.sim.base_url()));
        assert_eq!(
            internal["url"],
            format!("{}/internal{path}", h.sim.base_url())
        );
    }
    let a = h
        .send(
            Method::POST,
            "/identity/v3/auth/tokens?nocatalog",
            &[],
            Some(body),
        )
        .await;
    assert_eq!(a.status, 201);
    assert!(a.body["token"].get("catalog").is_none());
}

#[tokio::test]
async fn bad_credentials_get_401_with_the_keystone_envelope() {
    let h = start(two_hosts(manual_settings())).await;
    let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "admin", "domain": {"name": "Default"}, "password": "nope"}}}}});
    let a = h
        .send(Method::POST, "/identity/v3/auth/tokens", &[], Some(body))
        .await;
    assert_eq!(a.status, 401);
    assert_eq!(a.body["error"]["code"], 401);
    assert_eq!(a.body["error"]["title"], "Unauthorized");
    assert_eq!(
        a.header("www-authenticate").unwrap(),
        format!("Keystone uri=\"{}/identity\"", h.sim.base_url())
    );
    let malformed = h
        .send(
            Method::POST,
            "/identity/v3/auth/tokens",
            &[],
            Some(json!({"nope": 1})),
        )
        .await;
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.body["error"]["code"], 400);
    let wrong_project = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {"name": "reader", "domain": {"name": "Default"}, "password": "secret"}}},
        "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}});
    assert_eq!(
        h.send(
            Method::POST,
            "/identity/v3/auth/tokens",
            &[],
            Some(wrong_project)
        )
        .await
        .status,
        401
    );
}

#[tokio::test]
async fn application_credentials_by_id_and_by_name_and_no_scope() {
    let h = start(two_hosts(manual_settings())).await;
    let id = openstack_sim::scenario::BUILTIN_APP_CREDENTIAL_ID;
    let secret = openstack_sim::scenario::BUILTIN_APP_CREDENTIAL_SECRET;
    let by_id = json!({"auth": {"identity": {"methods": ["application_credential"], "application_credential": {"id": id, "secret": secret}}}});
    let a = h
        .send(Method::POST, "/identity/v3/auth/tokens", &[], Some(by_id))
        .await;
    assert_eq!(a.status, 201);
    assert_eq!(
        a.body["token"]["methods"],
        json!(["application_credential"])
    );
    assert_eq!(a.body["token"]["application_credential"]["id"], id);
    assert_eq!(a.body["token"]["project"]["name"], "admin");
    let by_name = json!({"auth": {"identity": {"methods": ["application_credential"], "application_credential": {
        "name": "ha-engine", "secret": secret, "user": {"name": "admin", "domain": {"name": "Default"}}}}}});
    assert_eq!(
        h.send(Method::POST, "/identity/v3/auth/tokens", &[], Some(by_name))
            .await
            .status,
        201
    );
    let scoped = json!({"auth": {"identity": {"methods": ["application_credential"], "application_credential": {"id": id, "secret": secret}},
        "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}});
    let a = h
        .send(Method::POST, "/identity/v3/auth/tokens", &[], Some(scoped))
        .await;
    assert_eq!(a.status, 401);
    assert_eq!(
        a.body["error"]["message"],
        "Application credentials cannot request a scope."
    );
    let bad = json!({"auth": {"identity": {"methods": ["application_credential"], "application_credential": {"id": id, "secret": "x"}}}});
    assert_eq!(
        h.send(Method::POST, "/identity/v3/auth/tokens", &[], Some(bad))
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn tokens_validate_and_revoke_through_the_api() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let reader = h.token("reader", "secret", "demo").await;
    let a = h
        .send(
            Method::GET,
            "/identity/v3/auth/tokens",
            &[("X-Auth-Token", &admin), ("X-Subject-Token", &reader)],
            None,
        )
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("x-subject-token"), Some(reader.as_str()));
    assert_eq!(a.body["token"]["user"]["name"], "reader");
    let denied = h
        .send(
            Method::GET,
            "/identity/v3/auth/tokens",
            &[("X-Auth-Token", &reader), ("X-Subject-Token", &admin)],
            None,
        )
        .await;
    assert_eq!(denied.status, 403);
    let own = h
        .send(
            Method::HEAD,
            "/identity/v3/auth/tokens",
            &[("X-Auth-Token", &reader), ("X-Subject-Token", &reader)],
            None,
        )
        .await;
    assert_eq!(own.status, 200);
    let revoked = h
        .send(
            Method::DELETE,
            "/identity/v3/auth/tokens",
            &[("X-Auth-Token", &admin), ("X-Subject-Token", &reader)],
            None,
        )
        .await;
    assert_eq!(revoked.status, 204);
    let gone = h
        .send(
            Method::GET,
            "/identity/v3/auth/tokens",
            &[("X-Auth-Token", &admin), ("X-Subject-Token", &reader)],
            None,
        )
        .await;
    assert_eq!(gone.status, 404);
    let nova = h.nova(&reader, "2.1", Method::GET, "/servers", None).await;
    assert_eq!(nova.status, 401);
    assert_eq!(nova.body["unauthorized"]["code"], 401);
    let no_caller = h
        .send(
            Method::GET,
            "/identity/v3/auth/tokens",
            &[("X-Subject-Token", &admin)],
            None,
        )
        .await;
    assert_eq!(no_caller.status, 401);
}

#[tokio::test]
async fn expiry_and_revocation_from_the_control_side_reject_service_calls() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    assert_eq!(
        h.nova(&admin, "2.1", Method::GET, "/servers", None)
            .await
            .status,
        200
    );
    assert_eq!(h.sim.expire_tokens(Some(&admin), 0.0), 1);
    let a = h.nova(&admin, "2.1", Method::GET, "/servers", None).await;
    assert_eq!(a.status, 401);
    assert!(
        a.header("www-authenticate")
            .unwrap()
            .starts_with("Keystone uri=")
    );
    let again = h.admin().await;
    assert_eq!(
        h.cinder(&again, "3.0", Method::GET, "/volumes", None)
            .await
            .status,
        200
    );
    assert!(h.sim.revoke_all_tokens() >= 1);
    let a = h.cinder(&again, "3.0", Method::GET, "/volumes", None).await;
    assert_eq!(a.status, 401);
    assert_eq!(a.body["unauthorized"]["code"], 401);
}

#[tokio::test]
async fn token_ttl_is_configurable_in_real_seconds() {
    let mut settings = manual_settings();
    settings.token_ttl_secs = 1;
    settings.speed = 1000.0;
    let h = start(two_hosts(settings)).await;
    let token = h.admin().await;
    assert_eq!(
        h.nova(&token, "2.1", Method::GET, "/servers", None)
            .await
            .status,
        200
    );
    // sleep: past the token's lifetime of one real second.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        h.nova(&token, "2.1", Method::GET, "/servers", None)
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn version_documents() {
    let h = start(two_hosts(manual_settings())).await;
    let a = h.send(Method::GET, "/identity/v3", &[], None).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body["version"]["id"], "v3.14");
    let a = h.send(Method::GET, "/compute/v2.1", &[], None).await;
    assert_eq!(a.body["version"]["version"], "2.104");
    assert_eq!(a.body["version"]["min_version"], "2.1");
    let a = h.send(Method::GET, "/volume/", &[], None).await;
    assert_eq!(a.body["versions"][0]["version"], "3.71");
    assert_eq!(a.body["versions"][0]["id"], "v3.0");
    let a = h.send(Method::GET, "/compute/", &[], None).await;
    assert!(
        a.body["versions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["id"] == "v2.1")
    );
}

/// Keystone's default roles imply one another (admin → manager → member
/// → reader, as `keystone-manage bootstrap` sets them up): a token
/// carries every role its assignment implies.
#[tokio::test]
async fn tokens_carry_the_roles_their_assignment_implies() {
    let h = start(two_hosts(manual_settings())).await;
    let roles = |user: &'static str, project: &'static str| {
        let h = &h;
        async move {
            let body = json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": {"name": user, "domain": {"name": "Default"}, "password": "secret"}}},
                "scope": {"project": {"name": project, "domain": {"name": "Default"}}}}});
            let a = h
                .send(Method::POST, "/identity/v3/auth/tokens", &[], Some(body))
                .await;
            assert_eq!(a.status, 201, "{}", a.text);
            let mut names: Vec<String> = a.body["token"]["roles"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["name"].as_str().unwrap().to_owned())
                .collect();
            names.sort();
            names
        }
    };
    assert_eq!(
        roles("admin", "admin").await,
        ["admin", "manager", "member", "reader"]
    );
    assert_eq!(
        roles("nova", "service").await,
        ["admin", "manager", "member", "reader", "service"]
    );
    assert_eq!(roles("demo", "demo").await, ["member", "reader"]);
    assert_eq!(roles("reader", "demo").await, ["reader"]);
}

/// The catalog of the admin's password token.
async fn admin_catalog(h: &crate::helpers::Harness) -> Vec<serde_json::Value> {
    let body = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {"name": "admin", "domain": {"name": "Default"}, "password": "secret"}}},
        "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}});
    let a = h
        .send(Method::POST, "/identity/v3/auth/tokens", &[], Some(body))
        .await;
    assert_eq!(a.status, 201, "{}", a.text);
    a.body["token"]["catalog"].as_array().unwrap().clone()
}

/// An operator registers instance-ha's REST API (Masakari's service type,
/// `instance-ha`) in the catalog: clients find it there, as on a cloud
/// running Masakari; a cloud that registers none lists none.
#[tokio::test]
async fn an_instance_ha_endpoint_is_in_the_catalog_when_registered() {
    let plain = start(two_hosts(manual_settings())).await;
    let catalog = admin_catalog(&plain).await;
    assert!(catalog.iter().all(|e| e["type"] != "instance-ha"));

    let mut settings = manual_settings();
    settings.instance_ha_url = Some("http://127.0.0.1:15868/v1".into());
    let h = start(two_hosts(settings)).await;
    let catalog = admin_catalog(&h).await;
    let entry = catalog
        .iter()
        .find(|e| e["type"] == "instance-ha")
        .expect("instance-ha in the catalog");
    assert_eq!(entry["name"], "masakari");
    for endpoint in entry["endpoints"].as_array().unwrap() {
        assert_eq!(endpoint["url"], "http://127.0.0.1:15868/v1");
    }
}
