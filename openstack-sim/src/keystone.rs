//! Keystone v3 over HTTP: version discovery, token issue (password, application credential and
//! token), validation with `X-Subject-Token`, and revocation.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::envelope::{empty_response, json_response, keystone_error};
use crate::identity::{self, ProjectRef, Token, UserRef};
use crate::server::{Interface, RequestMeta, Shared, query_pairs};

pub(crate) fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/identity", get(versions))
        .route("/identity/", get(versions))
        .route("/identity/v3", get(version))
        .route("/identity/v3/", get(version))
        .route(
            "/identity/v3/auth/tokens",
            get(validate_token)
                .head(check_token)
                .post(issue_token)
                .delete(revoke_token),
        )
        .with_state(shared)
}

fn version_doc(base: &str) -> Value {
    json!({
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{base}/identity/v3/")}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}],
    })
}

fn base(shared: &Shared, meta: &RequestMeta) -> String {
    format!("{}{}", shared.base_url, meta.interface.prefix())
}

async fn versions(
    State(shared): State<Arc<Shared>>,
    Extension(meta): Extension<RequestMeta>,
) -> Response<Body> {
    json_response(
        300,
        &json!({"versions": {"values": [version_doc(&base(&shared, &meta))]}}),
    )
}

async fn version(
    State(shared): State<Arc<Shared>>,
    Extension(meta): Extension<RequestMeta>,
) -> Response<Body> {
    json_response(200, &json!({"version": version_doc(&base(&shared, &meta))}))
}

fn unauthorized(shared: &Shared) -> Response<Body> {
    keystone_error(
        401,
        "The request you have made requires authentication.",
        &shared.identity_url(),
        None,
    )
}

fn bad_request(shared: &Shared, message: &str) -> Response<Body> {
    keystone_error(400, message, &shared.identity_url(), None)
}

fn user_ref(v: &Value) -> UserRef {
    UserRef {
        id: v.get("id").and_then(Value::as_str).map(str::to_string),
        name: v.get("name").and_then(Value::as_str).map(str::to_string),
        domain_id: v
            .pointer("/domain/id")
            .and_then(Value::as_str)
            .map(str::to_string),
        domain_name: v
            .pointer("/domain/name")
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}

/// The catalog entries: compute, block-storage and volumev3 (plus identity), each with a public
/// and an internal endpoint; without Cinder's two when `block_storage` is off; with
/// `instance-ha` at `instance_ha_url` and `instance-ha-grpc` at `instance_ha_grpc_url` when the
/// scenario registers them.
pub(crate) fn catalog(
    base_url: &str,
    region: &str,
    project_id: &str,
    block_storage: bool,
    instance_ha: (Option<&str>, Option<&str>),
) -> Value {
    let (instance_ha_url, instance_ha_grpc_url) = instance_ha;
    let registered = |kind: &str, name: &str, id: &str, url: &dyn Fn(Interface) -> String| {
        let endpoints: Vec<Value> = [Interface::Public, Interface::Internal]
            .iter()
            .map(|iface| {
                json!({
                    "id": format!("{id}-{}", iface.as_str()),
                    "interface": iface.as_str(),
                    "region_id": region,
                    "region": region,
                    "url": url(*iface),
                })
            })
            .collect();
        json!({"type": kind, "name": name, "id": id, "endpoints": endpoints})
    };
    let entry = |kind: &str, name: &str, id: &str, path: &str| {
        registered(kind, name, id, &|iface: Interface| {
            format!("{base_url}{}{path}", iface.prefix())
        })
    };
    let mut entries = vec![
        entry(
            "identity",
            "keystone",
            "5f1e2a0c3b7d4e8f9a6b1c2d3e4f5a60",
            "/identity",
        ),
        entry(
            "compute",
            "nova",
            "1a2b3c4d5e6f47a8b9c0d1e2f3a4b5c6",
            "/compute/v2.1",
        ),
    ];
    if let Some(url) = instance_ha_url {
        entries.push(registered(
            "instance-ha",
            "masakari",
            "9d0e1f2a3b4c45d6e7f8a9b0c1d2e3f4",
            &|_| url.to_owned(),
        ));
    }
    if let Some(url) = instance_ha_grpc_url {
        entries.push(registered(
            "instance-ha-grpc",
            "instanceha",
            "4a5b6c7d8e9f40a1b2c3d4e5f6a7b8c9",
            &|_| url.to_owned(),
        ));
    }
    if !block_storage {
        return Value::Array(entries);
    }
    entries.extend([
        entry(
            "block-storage",
            "cinder",
            "7e8f9a0b1c2d43e5f6a7b8c9d0e1f2a3",
            &format!("/volume/v3/{project_id}"),
        ),
        entry(
            "volumev3",
            "cinderv3",
            "3c4d5e6f7a8b49c0d1e2f3a4b5c6d7e8",
            &format!("/volume/v3/{project_id}"),
        ),
    ]);
    Value::Array(entries)
}

fn token_body(shared: &Shared, token: &Token, with_catalog: bool) -> Value {
    let world = shared.world.lock();
    let ids = &world.identity;
    let user = ids.user(&token.user_id);
    let project = ids.project(&token.project_id);
    let stamp = |t: &chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let mut body = json!({
        "methods": token.methods,
        "expires_at": stamp(&token.expires_at),
        "issued_at": stamp(&token.issued_at),
        "audit_ids": [token.audit_id],
        "is_domain": false,
        "user": {
            "id": token.user_id,
            "name": user.map(|u| u.name.clone()),
            "domain": {"id": "default", "name": user.map(|u| u.domain_name.clone()).unwrap_or_else(|| "Default".into())},
            "password_expires_at": null,
        },
        "project": {
            "id": token.project_id,
            "name": project.map(|p| p.name.clone()),
            "domain": {"id": "default", "name": "Default"},
        },
        "roles": token.roles.iter().map(|r| json!({"id": r.id, "name": r.name})).collect::<Vec<_>>(),
    });
    if let Some((id, name)) = &token.application_credential {
        body["application_credential"] = json!({"id": id, "name": name, "restricted": true});
    }
    if with_catalog {
        body["catalog"] = catalog(
            &shared.base_url,
            &world.settings.region,
            &token.project_id,
            world.settings.block_storage,
            (
                world.settings.instance_ha_url.as_deref(),
                world.settings.instance_ha_grpc_url.as_deref(),
            ),
        );
    }
    json!({"token": body})
}

fn wants_catalog(query: Option<&str>) -> bool {
    !query_pairs(query).iter().any(|(k, _)| k == "nocatalog")
}

/// The project a password login is scoped to: `Err` for a system or a
/// domain scope, which are not modelled (Nova needs a project scope).
fn project_scope(scope: Option<&Value>) -> Result<Option<ProjectRef>, ()> {
    let Some(scope) = scope else {
        return Ok(None);
    };
    let project = scope.get("project").ok_or(())?;
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    Ok(Some(ProjectRef {
        id: text(project.get("id")),
        name: text(project.get("name")),
        domain_id: text(project.pointer("/domain/id")),
        domain_name: text(project.pointer("/domain/name")),
    }))
}

async fn issue_token(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response<Body> {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return bad_request(&shared, "Malformed request body");
    };
    let Some(identity) = request.pointer("/auth/identity") else {
        return bad_request(
            &shared,
            "Invalid input for field 'identity': 'identity' is a required property",
        );
    };
    let methods: Vec<&str> = identity
        .get("methods")
        .and_then(Value::as_array)
        .map(|m| m.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let scope = request.pointer("/auth/scope");
    let delay = {
        let world = shared.world.lock();
        world
            .clock
            .real_duration(world.settings.durations.token_issue)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let outcome = {
        let mut world = shared.world.lock();
        if methods.contains(&"password") {
            let Some(user) = identity.pointer("/password/user") else {
                return bad_request(
                    &shared,
                    "Invalid input for field 'password': 'user' is a required property",
                );
            };
            let password = user.get("password").and_then(Value::as_str).unwrap_or("");
            let Ok(project_scope) = project_scope(scope) else {
                return unauthorized(&shared);
            };
            world
                .identity
                .password_login(&user_ref(user), password, project_scope.as_ref())
        } else if methods.contains(&"application_credential") {
            let Some(cred) = identity.get("application_credential") else {
                return bad_request(
                    &shared,
                    "Invalid input for field 'application_credential': 'application_credential' is a required property",
                );
            };
            let secret = cred.get("secret").and_then(Value::as_str).unwrap_or("");
            let user = cred.get("user").map(user_ref);
            world.identity.application_credential_login(
                cred.get("id").and_then(Value::as_str),
                cred.get("name").and_then(Value::as_str),
                user.as_ref(),
                secret,
                scope.is_some(),
            )
        } else if methods.contains(&"token") {
            match identity.pointer("/token/id").and_then(Value::as_str) {
                Some(presented) => world.identity.token_login(presented),
                None => {
                    return bad_request(
                        &shared,
                        "Invalid input for field 'token': 'id' is a required property",
                    );
                }
            }
        } else {
            Err(identity::Error::Unauthenticated)
        }
    };
    match outcome {
        Ok((token_id, token)) => {
            tracing::debug!(user = %token.user_id, "token issued");
            let mut response = json_response(
                201,
                &token_body(&shared, &token, wants_catalog(query.as_deref())),
            );
            if let Ok(v) = HeaderValue::from_str(&token_id) {
                response.headers_mut().insert("x-subject-token", v);
            }
            response
                .headers_mut()
                .insert("vary", HeaderValue::from_static("X-Auth-Token"));
            response
        }
        Err(identity::Error::AppCredentialScope) => keystone_error(
            401,
            "Application credentials cannot request a scope.",
            &shared.identity_url(),
            None,
        ),
        Err(identity::Error::Malformed(m)) => bad_request(&shared, &m),
        Err(_) => unauthorized(&shared),
    }
}

enum Subject {
    Valid(String, Token),
    Refused(Response<Body>),
}

fn subject(shared: &Shared, headers: &HeaderMap) -> Subject {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let world = shared.world.lock();
    let Some(caller_token) = header("x-auth-token") else {
        return Subject::Refused(unauthorized(shared));
    };
    let Ok(caller) = world.identity.caller(&caller_token, None) else {
        return Subject::Refused(unauthorized(shared));
    };
    let Some(subject_token) = header("x-subject-token") else {
        return Subject::Refused(keystone_error(
            404,
            "Could not find token: missing X-Subject-Token.",
            &shared.identity_url(),
            None,
        ));
    };
    if !(caller.is_admin || caller.has_role("service") || subject_token == caller_token) {
        return Subject::Refused(keystone_error(
            403,
            "You are not authorized to perform the requested action: identity:validate_token.",
            &shared.identity_url(),
            None,
        ));
    }
    match world.identity.validate(&subject_token) {
        Ok(token) => Subject::Valid(subject_token, token.clone()),
        Err(_) => Subject::Refused(keystone_error(
            404,
            "Could not recognize Fernet token",
            &shared.identity_url(),
            None,
        )),
    }
}

async fn validate_token(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response<Body> {
    match subject(&shared, &headers) {
        Subject::Refused(response) => response,
        Subject::Valid(id, token) => {
            let mut response = json_response(
                200,
                &token_body(&shared, &token, wants_catalog(query.as_deref())),
            );
            if let Ok(v) = HeaderValue::from_str(&id) {
                response.headers_mut().insert("x-subject-token", v);
            }
            response
        }
    }
}

async fn check_token(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response<Body> {
    match subject(&shared, &headers) {
        Subject::Refused(response) => response,
        Subject::Valid(..) => empty_response(200),
    }
}

async fn revoke_token(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response<Body> {
    match subject(&shared, &headers) {
        Subject::Refused(response) => response,
        Subject::Valid(id, _) => {
            shared.world.lock().identity.revoke(&id);
            empty_response(204)
        }
    }
}
