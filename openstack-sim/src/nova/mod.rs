//! Nova (compute v2.1) over HTTP: authentication, microversion negotiation and the shared
//! response headers, and the routes of the compute API subset.

mod boot;
mod flavors;
mod hosts;
mod migrations;
mod server_actions;
mod servers;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderValue, Response};
use axum::middleware::{self, Next};
use axum::routing::{get, post, put};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::envelope::{Api, json_response, service_error};
use crate::identity::Caller;
use crate::microversion::{self, Version};
use crate::server::{LoggedVersion, RequestMeta, Shared};
use crate::world;

/// The lowest and highest compute microversions served.
pub const MIN_VERSION: Version = Version::new(2, 1);
pub const MAX_VERSION: Version = Version::new(2, 104);

const ROOT: &str = "/compute/v2.1";

/// What every Nova handler knows about its call.
#[derive(Clone, Debug)]
pub(crate) struct NovaCtx {
    pub version: Version,
    pub caller: Caller,
    pub request_id: String,
    /// `<base>[/internal]/compute/v2.1`, for links.
    pub endpoint: String,
    /// `<base>[/internal]/compute`, for bookmark links.
    pub bookmark: String,
}

impl NovaCtx {
    pub fn at_least(&self, minor: u32) -> bool {
        self.version.at_least(minor)
    }
}

pub(crate) fn routes(shared: Arc<Shared>) -> Router {
    let r = |path: &str| format!("{ROOT}{path}");
    let api = Router::new()
        .route(
            &r("/servers"),
            get(servers::list_summary).post(boot::create),
        )
        .route(&r("/servers/detail"), get(servers::list_detail))
        .route(
            &r("/servers/{server_id}"),
            get(servers::show).delete(boot::delete),
        )
        .route(&r("/flavors"), get(flavors::list_flavors))
        .route(&r("/flavors/detail"), get(flavors::list_flavors_detail))
        .route(&r("/flavors/{flavor_id}"), get(flavors::show_flavor))
        .route(&r("/images"), get(flavors::list_images))
        .route(&r("/images/detail"), get(flavors::list_images_detail))
        .route(&r("/images/{image_id}"), get(flavors::show_image))
        .route(
            &r("/servers/{server_id}/action"),
            post(server_actions::action),
        )
        .route(
            &r("/servers/{server_id}/os-volume_attachments"),
            get(server_actions::volume_attachments),
        )
        .route(
            &r("/servers/{server_id}/os-volume_attachments/{volume_id}"),
            get(server_actions::volume_attachment),
        )
        .route(
            &r("/servers/{server_id}/os-instance-actions"),
            get(server_actions::instance_actions),
        )
        .route(
            &r("/servers/{server_id}/os-instance-actions/{request_id}"),
            get(server_actions::instance_action),
        )
        .route(
            &r("/os-server-external-events"),
            post(server_actions::external_events),
        )
        .route(&r("/os-services"), get(hosts::list_services))
        .route(&r("/os-services/{service_id}"), put(hosts::update_service))
        .route(&r("/os-hypervisors"), get(hosts::list_hypervisors))
        .route(
            &r("/os-hypervisors/detail"),
            get(hosts::list_hypervisors_detail),
        )
        .route(
            &r("/os-hypervisors/{hypervisor_id}"),
            get(hosts::show_hypervisor),
        )
        .route(&r("/os-aggregates"), get(hosts::list_aggregates))
        .route(
            &r("/os-aggregates/{aggregate_id}"),
            get(hosts::show_aggregate),
        )
        .route(
            &r("/os-aggregates/{aggregate_id}/action"),
            post(hosts::aggregate_action),
        )
        .route(&r("/os-migrations"), get(migrations::list))
        .route(&r("/{*rest}"), axum::routing::any(not_found))
        .route_layer(middleware::from_fn_with_state(shared.clone(), context))
        .with_state(shared.clone());
    let discovery = Router::new()
        .route("/compute", get(versions))
        .route("/compute/", get(versions))
        .route(ROOT, get(version))
        .route(&format!("{ROOT}/"), get(version))
        .with_state(shared);
    api.merge(discovery)
}

async fn not_found() -> Response<Body> {
    error(404, "The resource could not be found.")
}

fn version_doc(endpoint: &str) -> Value {
    json!({
        "id": "v2.1",
        "status": "CURRENT",
        "version": MAX_VERSION.to_string(),
        "min_version": MIN_VERSION.to_string(),
        "updated": "2013-07-23T11:33:21Z",
        "links": [
            {"rel": "self", "href": format!("{endpoint}/")},
            {"rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/"},
        ],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2.1"}],
    })
}

async fn versions(
    State(shared): State<Arc<Shared>>,
    Extension(meta): Extension<RequestMeta>,
) -> Response<Body> {
    let base = format!("{}{}/compute", shared.base_url, meta.interface.prefix());
    // The list names each version and links to it, no more (Nova 34
    // deprecated v2.0 on 2025-07-04).
    let v2 = json!({
        "id": "v2.0", "status": "DEPRECATED", "version": "", "min_version": "",
        "updated": "2025-07-04T12:00:00Z",
        "links": [{"rel": "self", "href": format!("{base}/v2/")}],
    });
    let mut v21 = version_doc(&format!("{base}/v2.1"));
    v21["links"] = json!([{"rel": "self", "href": format!("{base}/v2.1/")}]);
    if let Some(doc) = v21.as_object_mut() {
        doc.remove("media-types");
    }
    json_response(200, &json!({"versions": [v2, v21]}))
}

async fn version(
    State(shared): State<Arc<Shared>>,
    Extension(meta): Extension<RequestMeta>,
) -> Response<Body> {
    let endpoint = format!("{}{}{ROOT}", shared.base_url, meta.interface.prefix());
    let mut response = json_response(200, &json!({"version": version_doc(&endpoint)}));
    let request_id =
        HeaderValue::from_str(&meta.request_id).unwrap_or(HeaderValue::from_static("req-unknown"));
    versioned(&mut response, MIN_VERSION, request_id);
    response
}

/// Nova's error envelope.
pub(crate) fn error(status: u16, message: &str) -> Response<Body> {
    service_error(Api::Compute, status, message, None)
}

pub(crate) fn world_error(e: world::Error) -> Response<Body> {
    error(e.status(), &e.to_string())
}

pub(crate) fn forbidden(policy: &str) -> Response<Body> {
    error(
        403,
        &format!("Policy doesn't allow {policy} to be performed."),
    )
}

/// `2026-08-21T10:00:00Z` (server created/updated).
pub(crate) fn iso_z(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `2026-08-21T10:00:00.000000` (migrations, services, actions).
pub(crate) fn iso_micro(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

/// Parses a JSON body, or Nova's 400.
pub(crate) fn parse_body(body: &[u8]) -> Result<Value, world::Error> {
    serde_json::from_slice(body)
        .map_err(|_| world::Error::BadRequest("Malformed request body".into()))
}

/// oslo's `bool_from_string(strict=True)`.
pub(crate) fn strict_bool(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "on" | "y" | "yes" => Some(true),
        "0" | "f" | "false" | "off" | "n" | "no" => Some(false),
        _ => None,
    }
}

/// Nova's JSON-schema boolean: a JSON bool or one of the accepted strings.
pub(crate) fn schema_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => strict_bool(s),
        _ => None,
    }
}

async fn context(
    State(shared): State<Arc<Shared>>,
    mut req: Request,
    next: Next,
) -> Response<Body> {
    let meta = req
        .extensions()
        .get::<RequestMeta>()
        .cloned()
        .unwrap_or_default();
    let headers = req.headers();
    let token = headers.get("x-auth-token").and_then(|v| v.to_str().ok());
    let service_token = headers.get("x-service-token").and_then(|v| v.to_str().ok());
    let caller = token.and_then(|t| shared.world.lock().identity.caller(t, service_token).ok());
    let request_id =
        HeaderValue::from_str(&meta.request_id).unwrap_or(HeaderValue::from_static("req-unknown"));
    let Some(caller) = caller else {
        let mut response = error(401, "The request you have made requires authentication.");
        if let Ok(v) = HeaderValue::from_str(&format!("Keystone uri=\"{}\"", shared.identity_url()))
        {
            response.headers_mut().insert("www-authenticate", v);
        }
        response
            .headers_mut()
            .insert("x-compute-request-id", request_id);
        return response;
    };
    let version = match microversion::negotiate(
        headers,
        "compute",
        Some("x-openstack-nova-api-version"),
        MIN_VERSION,
        MAX_VERSION,
    ) {
        Ok(v) => v,
        Err(e) => {
            let status = match e {
                microversion::Error::NotAcceptable { .. } => 406,
                microversion::Error::Malformed(_) => 400,
            };
            let mut response = error(status, &e.to_string());
            response
                .headers_mut()
                .insert("x-compute-request-id", request_id);
            return response;
        }
    };
    let prefix = format!("{}{}", shared.base_url, meta.interface.prefix());
    req.extensions_mut().insert(NovaCtx {
        version,
        caller,
        request_id: meta.request_id.clone(),
        endpoint: format!("{prefix}{ROOT}"),
        bookmark: format!("{prefix}/compute"),
    });
    let mut response = next.run(req).await;
    versioned(&mut response, version, request_id);
    response
        .extensions_mut()
        .insert(LoggedVersion(format!("compute {version}")));
    response
}

/// What Nova adds to every answer of its versioned API (the v2.1 version
/// document too, at 2.1): the microversion in both headers, `Vary` on them,
/// and the request id in both headers (its request-id middleware always
/// sends the compat `x-compute-request-id`).
fn versioned(response: &mut Response<Body>, version: Version, request_id: HeaderValue) {
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("compute {version}")) {
        h.insert("openstack-api-version", v);
    }
    if let Ok(v) = HeaderValue::from_str(&version.to_string()) {
        h.insert("x-openstack-nova-api-version", v);
    }
    h.insert(
        "vary",
        HeaderValue::from_static("OpenStack-API-Version, X-OpenStack-Nova-API-Version"),
    );
    h.insert("x-compute-request-id", request_id.clone());
    h.insert("x-openstack-request-id", request_id);
}

/// A `limit` query value: positive integer, else Nova's 400.
pub(crate) fn parse_limit(value: Option<&str>, max_limit: usize) -> Result<usize, world::Error> {
    match value {
        None => Ok(max_limit),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if n >= 0 => Ok((n as usize).min(max_limit)),
            Ok(_) => Err(world::Error::BadRequest(
                "limit param must be positive".into(),
            )),
            Err(_) => Err(world::Error::BadRequest(
                "limit param must be an integer".into(),
            )),
        },
    }
}

/// The next-page link: the same query with the marker replaced.
pub(crate) fn next_link(base: &str, pairs: &[(String, String)], marker: &str) -> String {
    let mut query: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k != "marker")
        .map(|(k, v)| format!("{}={}", crate::server::encode(k), crate::server::encode(v)))
        .collect();
    query.push(format!("marker={}", crate::server::encode(marker)));
    format!("{base}?{}", query.join("&"))
}
