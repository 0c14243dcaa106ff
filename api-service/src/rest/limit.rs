//! The REST API's protection, as the gRPC API has it: the per-client
//! request budget (shared with gRPC), answered `429 overLimit` with
//! `Retry-After`, and the request timeout, answered `503`. `/healthcheck`
//! is never limited: load balancers must always get an answer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::RestError;
use crate::rate_limit::RateLimiter;

/// The limits of the REST API (`[limits]`).
#[derive(Clone, Debug)]
pub struct RestLimits {
    /// The per-client budget, the one the gRPC API uses (none: no limit).
    pub limiter: Option<RateLimiter>,
    /// A request not answered within this is abandoned: its transaction,
    /// if any, is rolled back.
    pub request_timeout: Duration,
}

impl Default for RestLimits {
    /// No rate limit; the default `limits.request_timeout`.
    fn default() -> Self {
        Self {
            limiter: None,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// The middleware: the budget first, then the timeout around the handler.
pub async fn enforce(State(limits): State<RestLimits>, request: Request, next: Next) -> Response {
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    let exempt = request.uri().path() == "/healthcheck";
    if let (Some(limiter), Some(client), false) = (&limits.limiter, client, exempt)
        && let Err(wait) = limiter.take(client, Instant::now())
    {
        tracing::info!(%client, path = %request.uri().path(), "rate limited");
        return RestError::TooManyRequests {
            message: format!(
                "too many requests from {client}: retry in {} ms (limits.requests_per_second)",
                wait.as_millis().max(1)
            ),
            retry_after: wait,
        }
        .into_response();
    }
    let path = request.uri().path().to_owned();
    match tokio::time::timeout(limits.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(%path, timeout = ?limits.request_timeout, "rest request timed out");
            RestError::Unavailable(format!(
                "the request did not complete within {} (limits.request_timeout)",
                humantime::format_duration(limits.request_timeout)
            ))
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    fn slow_app(limits: RestLimits) -> Router {
        Router::new()
            .route(
                "/v1/segments",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    "late"
                }),
            )
            .layer(axum::middleware::from_fn_with_state(limits, enforce))
    }

    #[tokio::test]
    async fn a_request_over_its_time_is_abandoned_with_503() {
        let app = slow_app(RestLimits {
            limiter: None,
            request_timeout: Duration::from_millis(10),
        });
        let request = Request::get("/v1/segments").body(Body::empty()).unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let message = body["serviceUnavailable"]["message"].as_str().unwrap();
        assert!(message.contains("limits.request_timeout"), "{message}");
    }
}
