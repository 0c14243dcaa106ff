//! The Masakari-compatible REST edge: Masakari's API v1 (microversions 1.0
//! to 1.3) over the same [`Api`] operations as the gRPC edge, so that
//! masakari-monitors, python-masakariclient, openstacksdk's `instance_ha`
//! proxy and scripts keep working pointed at instanceha-api.
//!
//! * `version`: microversion negotiation and the version documents.
//! * `call`: what every request carries (version, token, project).
//! * `body`, `query`: reading request bodies and query strings the way
//!   Masakari's schemas and controllers do.
//! * `listing`: Masakari's `sort_key`/`sort_dir`/`limit`/`marker`.
//! * `convert`: domain types to and from Masakari's JSON shapes.
//! * `error`: the one mapping of errors to Masakari's status codes and
//!   fault bodies.
//! * `segments`, `hosts`, `notifications`, `vmoves`: thin handlers.
//! * `limit`: the per-client rate (shared with gRPC) and the timeout.
//! * `request_id`: `x-openstack-request-id` on every response, the
//!   request's span and its access line.
//!
//! `/healthcheck` answers load balancers as Masakari's does.

mod body;
mod call;
mod convert;
mod error;
mod hosts;
mod limit;
mod listing;
mod notifications;
mod query;
mod request_id;
mod segments;
mod version;
mod vmoves;

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::auth::Guard;
use crate::service::Api;

pub use error::RestError;
pub use limit::RestLimits;
pub use version::{ApiVersion, MAX_VERSION, MIN_VERSION};

/// `[rest]`: the Masakari-compatible REST API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RestSettings {
    /// Serve it (beside the gRPC API, in the same process).
    pub enabled: bool,
    /// Where it listens; 15868 is Masakari's port.
    pub listen: SocketAddr,
    /// The URL clients reach it at (`https://ha.example.org:15868`), for
    /// the links of the version documents; never taken from a request's
    /// `Host`. Default: `http://` (`https://` with `[tls]`) and `listen`.
    pub public_url: Option<String>,
}

impl RestSettings {
    /// The base of the links the API writes: `public_url`, else the
    /// scheme and the address it listens on (`bound`).
    pub fn base_url(&self, tls: bool, bound: SocketAddr) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("{}://{bound}", if tls { "https" } else { "http" }),
        }
    }
}

impl Default for RestSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 15868)),
            public_url: None,
        }
    }
}

/// What the handlers share. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RestState {
    api: Api,
    guard: Guard,
    /// Keystone's URL for `WWW-Authenticate` on 401, as keystonemiddleware
    /// sends it.
    keystone_uri: Option<String>,
    /// The base of every link (`rest.public_url`).
    base_url: String,
    /// Cancelled when the server begins to shut down: `/healthcheck` then
    /// answers 503 so that load balancers stop sending.
    draining: CancellationToken,
}

impl RestState {
    pub fn new(api: Api, guard: Guard, keystone_uri: Option<String>) -> Self {
        Self {
            api,
            guard,
            keystone_uri,
            base_url: format!("http://{}", RestSettings::default().listen),
            draining: CancellationToken::new(),
        }
    }

    /// Links are built on `base_url` (`RestSettings::base_url`).
    pub fn with_base_url(mut self, base_url: String) -> Self {
        self.base_url = base_url;
        self
    }

    /// Cancel it to report the server as shutting down.
    pub fn draining(&self) -> CancellationToken {
        self.draining.clone()
    }
}

/// `GET /healthcheck`, where Masakari serves oslo's healthcheck for load
/// balancers: `OK`, or 503 while the database does not answer or the
/// server is shutting down.
async fn healthcheck(State(state): State<RestState>) -> Response {
    if state.draining.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    match state.api.ready().await {
        Ok(()) => (StatusCode::OK, "OK").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "healthcheck: the database cannot write");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}

/// The REST API: version discovery at `/`, Masakari's v1 at `/v1` and, as
/// Masakari also routes it, at `/v1/{project_id}`; `/healthcheck`; all
/// within `limits`. Serve it with the callers' addresses
/// (`into_make_service_with_connect_info::<SocketAddr>()`), which the
/// rate limit needs.
pub fn router(state: RestState, limits: RestLimits) -> Router {
    let v1 = || {
        Router::new()
            .route("/segments", get(segments::list).post(segments::create))
            .route(
                "/segments/{segment_id}",
                get(segments::show)
                    .put(segments::update)
                    .delete(segments::delete),
            )
            .route(
                "/segments/{segment_id}/hosts",
                get(hosts::list).post(hosts::create),
            )
            .route(
                "/segments/{segment_id}/hosts/{host_id}",
                get(hosts::show).put(hosts::update).delete(hosts::delete),
            )
            .route(
                "/notifications",
                get(notifications::list).post(notifications::create),
            )
            .route("/notifications/{notification_id}", get(notifications::show))
            .route("/notifications/{notification_id}/vmoves", get(vmoves::list))
            .route(
                "/notifications/{notification_id}/vmoves/{vmove_id}",
                get(vmoves::show),
            )
    };
    let versioned = Router::new()
        .route("/v1", get(version::show))
        .route("/v1/", get(version::show))
        .nest("/v1", v1())
        .nest("/v1/{project_id}", v1())
        .route_layer(axum::middleware::from_fn(version::negotiate));
    Router::new()
        .route("/", get(version::index))
        .route("/healthcheck", get(healthcheck))
        .merge(versioned)
        .fallback(version::fallback)
        .method_not_allowed_fallback(error::method_not_allowed)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(limits, limit::enforce))
        // Outermost, so that every answer (timeouts and faults too) has
        // its request id and every log line its span.
        .layer(axum::middleware::from_fn(request_id::assign))
}
