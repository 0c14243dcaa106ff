//! What every `/v1` request carries: its microversion (settled by
//! [`super::version::negotiate`]), its token, the project id Masakari
//! allows in the path; and the permission
//! check through the shared [`crate::auth::Guard`].

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts, RawPathParams};
use axum::http::request::Parts;

use super::RestState;
use super::error::RestError;
use super::version::{ApiVersion, MIN_VERSION};
use crate::auth::{Operation, Principal, Refusal, token_from_headers};

/// Longest W3C `traceparent` kept for the recovery's trace.
const TRACEPARENT_MAX: usize = 512;

/// A request under `/v1`.
#[derive(Clone, Debug)]
pub struct Call {
    pub version: ApiVersion,
    token: Option<String>,
    traceparent: Option<String>,
    /// The address the request came from, for the request budgets.
    client: Option<IpAddr>,
}

impl<S: Send + Sync> FromRequestParts<S> for Call {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // Masakari routes `/v1/{project_id}/...` only for ids of hex digits
        // and dashes. The id carries no authority here (roles do), so it is
        // not compared with the token's project.
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_| RestError::NotFound("The resource could not be found.".to_owned()))?;
        if let Some((_, project)) = params.iter().find(|(name, _)| *name == "project_id")
            && !is_project_id(project)
        {
            return Err(RestError::NotFound(
                "The resource could not be found.".to_owned(),
            ));
        }
        Ok(Self {
            version: parts
                .extensions
                .get::<ApiVersion>()
                .copied()
                .unwrap_or(MIN_VERSION),
            token: token_from_headers(&parts.headers).map(str::to_owned),
            traceparent: parts
                .headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .filter(|v| v.len() <= TRACEPARENT_MAX)
                .map(str::to_owned),
            client: parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| addr.ip()),
        })
    }
}

impl Call {
    /// Authenticates the caller, checks it may do `operation` (Masakari's
    /// policy name is quoted when refusing) and counts the call against its
    /// budget (`429 overLimit` with `Retry-After` beyond it).
    pub async fn allow(
        &self,
        state: &RestState,
        operation: Operation,
    ) -> Result<Principal, RestError> {
        state
            .guard
            .admit(self.token.as_deref(), Some(operation), self.client)
            .await
            .map_err(|refused| match refused {
                Refusal::Auth(e) => RestError::from_auth(
                    e,
                    operation.masakari_policy().unwrap_or("os_masakari_api"),
                    state.keystone_uri.as_deref(),
                ),
                throttled @ Refusal::Throttled { wait, .. } => {
                    tracing::info!(reason = %throttled, "rate limited");
                    RestError::TooManyRequests {
                        message: throttled.to_string(),
                        retry_after: wait,
                    }
                }
            })
    }

    pub fn traceparent(&self) -> Option<String> {
        self.traceparent.clone()
    }
}

/// `[0-9a-f\-]+`
fn is_project_id(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_ids_are_hex_and_dashes() {
        assert!(is_project_id("0123abcd-ef"));
        assert!(!is_project_id("segments"));
        assert!(!is_project_id(""));
        assert!(!is_project_id("ABC"));
    }
}
