//! The one mapping of errors to Masakari's answers: status codes and fault
//! bodies `{"<faultName>": {"code": N, "message": "..."}}`
//! (`masakari/api/openstack/wsgi.py` `Fault`), and for authentication
//! failures the body keystonemiddleware sends (`{"error": {...}}`, without
//! microversion headers, as it answers before Masakari sees the request).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth::AuthError;
use crate::domain::InvalidField;
use crate::service;

/// Marks a response that Masakari's API would not have produced itself
/// (keystonemiddleware's): no microversion headers on it.
#[derive(Clone, Copy, Debug)]
pub struct NoVersionHeaders;

/// An answer other than success.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// 400 `badRequest`.
    #[error("{0}")]
    BadRequest(String),
    /// 401, as keystonemiddleware answers it.
    #[error("{reason}")]
    Unauthorized {
        reason: String,
        keystone_uri: Option<String>,
    },
    /// 403 `forbidden`.
    #[error("{0}")]
    Forbidden(String),
    /// 404 `itemNotFound`.
    #[error("{0}")]
    NotFound(String),
    /// 405 `badMethod`.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// 406: Masakari has no fault name for it (`masakariFault`).
    #[error("{0}")]
    NotAcceptable(String),
    /// 409 `conflictingRequest`.
    #[error("{0}")]
    Conflict(String),
    /// 413 `overLimit`.
    #[error("{0}")]
    TooLarge(String),
    /// 429 `overLimit`, with `Retry-After`: the caller is over its rate.
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after: std::time::Duration,
    },
    /// 415 `badMediaType`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 500 `masakariFault`.
    #[error("{0}")]
    Internal(String),
    /// 503 `serviceUnavailable`: the database does not answer.
    #[error("{0}")]
    Unavailable(String),
    /// 503, as keystonemiddleware answers when Keystone cannot be asked.
    #[error("{0}")]
    AuthUnavailable(String),
}

impl RestError {
    /// The shape error for one request field, in Masakari's words
    /// (`api/validation/validators.py`).
    pub fn invalid(field: &str, message: impl std::fmt::Display) -> Self {
        Self::BadRequest(format!(
            "Invalid input for field/attribute {field}. {message}"
        ))
    }

    /// Why the guard refused, for the operation Masakari calls `policy`.
    pub fn from_auth(err: AuthError, policy: &str, keystone_uri: Option<&str>) -> Self {
        match err {
            AuthError::Missing | AuthError::Invalid => Self::Unauthorized {
                reason: err.to_string(),
                keystone_uri: keystone_uri.map(str::to_owned),
            },
            AuthError::Forbidden { .. } => Self::Forbidden(format!(
                "Policy doesn't allow {policy} to be performed. ({err})"
            )),
            AuthError::Unavailable(_) => Self::AuthUnavailable(err.to_string()),
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable(_) | Self::AuthUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Masakari's fault name for the status (`Fault._fault_names`).
    fn fault_name(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "badRequest",
            Self::Unauthorized { .. } => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::NotFound(_) => "itemNotFound",
            Self::MethodNotAllowed(_) => "badMethod",
            Self::Conflict(_) => "conflictingRequest",
            Self::TooLarge(_) | Self::TooManyRequests { .. } => "overLimit",
            Self::UnsupportedMediaType(_) => "badMediaType",
            Self::Unavailable(_) | Self::AuthUnavailable(_) => "serviceUnavailable",
            Self::NotAcceptable(_) | Self::Internal(_) => "masakariFault",
        }
    }
}

/// The challenge of a 401 without Keystone (static tokens).
pub const BEARER_CHALLENGE: &str = "Bearer realm=\"instance-ha\"";

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), error = %self, "rest request failed");
        } else {
            tracing::debug!(status = status.as_u16(), error = %self, "rest request refused");
        }
        match self {
            Self::Unauthorized {
                keystone_uri,
                reason,
            } => {
                tracing::debug!(%reason, "rest caller not authenticated");
                let body = json!({"error": {
                    "code": 401,
                    "title": "Unauthorized",
                    "message": "The request you have made requires authentication.",
                }});
                let mut response = (status, axum::Json(body)).into_response();
                // Every 401 says how to authenticate (RFC 9110, 11.6.1):
                // keystonemiddleware's challenge naming Keystone when there
                // is one, else a bearer token (static tokens are sent in
                // `X-Auth-Token` or `Authorization: Bearer`).
                let keystone = keystone_uri
                    .and_then(|uri| HeaderValue::from_str(&format!("Keystone uri=\"{uri}\"")).ok());
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    keystone.unwrap_or(HeaderValue::from_static(BEARER_CHALLENGE)),
                );
                response.extensions_mut().insert(NoVersionHeaders);
                response
            }
            Self::AuthUnavailable(message) => {
                let body = json!({"error": {
                    "code": 503,
                    "title": "Service Unavailable",
                    "message": format!("The Keystone service is temporarily unavailable. ({message})"),
                }});
                let mut response = (status, axum::Json(body)).into_response();
                response.extensions_mut().insert(NoVersionHeaders);
                response
            }
            Self::TooManyRequests {
                ref message,
                retry_after,
            } => {
                // Masakari's `Fault` sends whole seconds, in the header and
                // as `retryAfter` in the body.
                let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                let body = json!({ self.fault_name(): {
                    "code": status.as_u16(),
                    "message": message,
                    "retryAfter": seconds.to_string(),
                }});
                let mut response = (status, axum::Json(body)).into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                response
            }
            other => {
                let name = other.fault_name();
                // Refused before its body was read: the connection cannot
                // carry another request, so say it will close, or a client
                // reusing it would see its next request cut off.
                let unread_body =
                    matches!(other, Self::TooLarge(_) | Self::UnsupportedMediaType(_));
                let body = json!({ name: {"code": status.as_u16(), "message": other.to_string()} });
                let mut response = (status, axum::Json(body)).into_response();
                if unread_body {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                response
            }
        }
    }
}

impl From<InvalidField> for RestError {
    fn from(field: InvalidField) -> Self {
        Self::invalid(&field.field, &field.reason)
    }
}

/// The service's errors, as Masakari reports the same situations.
impl From<service::Error> for RestError {
    fn from(err: service::Error) -> Self {
        match err {
            service::Error::InvalidArgument(field) => field.into(),
            service::Error::NotFound { kind, id } => Self::NotFound(not_found(kind, &id)),
            service::Error::AlreadyExists(message)
            | service::Error::FailedPrecondition(message) => Self::Conflict(message),
            service::Error::Unavailable(message) => Self::Unavailable(message),
            service::Error::Unauthenticated(reason) => Self::Unauthorized {
                reason,
                keystone_uri: None,
            },
            service::Error::PermissionDenied(reason) => Self::Forbidden(reason),
            service::Error::Internal { reference } => Self::Internal(format!(
                "The server has either erred or is incapable of performing the requested operation. (reference {reference})"
            )),
        }
    }
}

/// Masakari's `*NotFound` messages.
fn not_found(kind: &str, id: &str) -> String {
    match kind {
        "segment" => format!("No failover segment with id {id}."),
        "host" => format!("No host with id {id}."),
        "notification" => format!("No notification with id {id}."),
        "vmove" => format!("No vm move with id {id}."),
        other => format!("No {other} with id {id}."),
    }
}

/// 405 for a method a route does not have.
pub async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
) -> Response {
    let response = RestError::MethodNotAllowed(format!(
        "The request method: '{method}' is not allowed on the resource {}",
        uri.path()
    ))
    .into_response();
    // Masakari's 405 comes from a resource, after the version is settled.
    if uri.path().starts_with("/v1") {
        super::version::with_version_headers(&headers, response)
    } else {
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_errors_map_to_masakari_codes() {
        let cases = [
            (service::Error::invalid("name", "must not be empty"), 400),
            (
                service::Error::NotFound {
                    kind: "segment",
                    id: "x".into(),
                },
                404,
            ),
            (service::Error::AlreadyExists("dup".into()), 409),
            (service::Error::FailedPrecondition("busy".into()), 409),
            (service::Error::Unavailable("db".into()), 503),
            (
                service::Error::Internal {
                    reference: "r".into(),
                },
                500,
            ),
        ];
        for (err, code) in cases {
            assert_eq!(RestError::from(err).status().as_u16(), code);
        }
    }

    #[test]
    fn not_found_messages_are_masakaris() {
        let err = RestError::from(service::Error::NotFound {
            kind: "segment",
            id: "abc".into(),
        });
        assert_eq!(err.to_string(), "No failover segment with id abc.");
        assert_eq!(err.fault_name(), "itemNotFound");
    }

    #[test]
    fn auth_errors_name_the_policy() {
        let err = RestError::from_auth(
            AuthError::Forbidden {
                who: "bob".into(),
                operation: "CreateSegment".into(),
                needed: "admin".into(),
            },
            "os_masakari_api:segments:create",
            None,
        );
        assert_eq!(err.status(), StatusCode::FORBIDDEN);
        assert!(
            err.to_string()
                .starts_with("Policy doesn't allow os_masakari_api:segments:create")
        );
        let err = RestError::from_auth(AuthError::Missing, "p", Some("http://ks/v3"));
        assert_eq!(err.status(), StatusCode::UNAUTHORIZED);
    }
}
