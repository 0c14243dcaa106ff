//! The REST API's request timeout, answered `503`. (The request budgets,
//! shared with gRPC, are counted once the caller is authenticated:
//! `Call::allow`, answered `429 overLimit` with `Retry-After`.)

use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::RestError;

/// The limits of the REST API (`[limits]`).
#[derive(Clone, Debug)]
pub struct RestLimits {
    /// A request not answered within this is abandoned: its transaction,
    /// if any, is rolled back.
    pub request_timeout: Duration,
}

impl Default for RestLimits {
    /// The default `limits.request_timeout`.
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// The middleware: the timeout around the handler.
pub async fn enforce(State(limits): State<RestLimits>, request: Request, next: Next) -> Response {
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
                    // sleep: a handler slower than the timeout under test.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    "late"
                }),
            )
            .layer(axum::middleware::from_fn_with_state(limits, enforce))
    }

    #[tokio::test]
    async fn a_request_over_its_time_is_abandoned_with_503() {
        let app = slow_app(RestLimits {
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
