//! OpenStack error bodies: Nova's and Cinder's `{"<faultName>": {...}}`, Keystone's
//! `{"error": {...}}` with `WWW-Authenticate`, and a load balancer's HTML error page.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

/// Which API's conventions a response follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Compute,
    Volume,
}

/// The fault name for a status (Nova's `Fault._fault_names`; Cinder's differs only for 429).
pub fn fault_name(api: Api, status: u16) -> &'static str {
    match status {
        400 => "badRequest",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "itemNotFound",
        405 => "badMethod",
        409 => "conflictingRequest",
        413 => "overLimit",
        415 => "badMediaType",
        429 if api == Api::Compute => "overLimit",
        501 => "notImplemented",
        503 => "serviceUnavailable",
        _ => "computeFault",
    }
}

/// A JSON response.
pub fn json_response(status: u16, body: &Value) -> Response<Body> {
    let mut response = Response::new(Body::from(serde_json::to_vec(body).unwrap_or_default()));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An empty response with a status.
pub fn empty_response(status: u16) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response
}

/// An empty response as Nova and Cinder send one (a `202` to an action):
/// still typed `application/json`.
pub fn empty_json_response(status: u16) -> Response<Body> {
    let mut response = empty_response(status);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Nova's or Cinder's error envelope; `retry_after` adds the header and, for 413 (and 429 on
/// Nova), the `retryAfter` body field.
pub fn service_error(
    api: Api,
    status: u16,
    message: &str,
    retry_after: Option<u32>,
) -> Response<Body> {
    let mut inner = json!({"code": status, "message": message});
    let body_retry = status == 413 || (status == 429 && api == Api::Compute);
    if let (Some(secs), true) = (retry_after, body_retry) {
        inner["retryAfter"] = json!(secs.to_string());
    }
    let mut response = json_response(status, &json!({ fault_name(api, status): inner }));
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

fn keystone_title(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Request Entity Too Large",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// Keystone's error envelope; a 401 carries `WWW-Authenticate: Keystone uri="..."`.
pub fn keystone_error(
    status: u16,
    message: &str,
    identity_url: &str,
    retry_after: Option<u32>,
) -> Response<Body> {
    let body =
        json!({"error": {"code": status, "title": keystone_title(status), "message": message}});
    let mut response = json_response(status, &body);
    if status == 401
        && let Ok(value) = HeaderValue::from_str(&format!("Keystone uri=\"{identity_url}\""))
    {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// An HAProxy-style HTML error page.
pub fn html_error(status: u16, retry_after: Option<u32>) -> Response<Body> {
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    let text = match status {
        503 => "No server is available to handle this request.",
        504 => "The server didn't respond in time.",
        502 => "The server returned an invalid or incomplete response.",
        429 => "You have sent too many requests in a given amount of time.",
        _ => "The request could not be served.",
    };
    let html = format!("<html><body><h1>{status} {reason}</h1>\n{text}\n</body></html>\n");
    let mut response = Response::new(Body::from(html));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if let Some(secs) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_names_follow_the_contract() {
        assert_eq!(fault_name(Api::Compute, 409), "conflictingRequest");
        assert_eq!(fault_name(Api::Compute, 429), "overLimit");
        assert_eq!(fault_name(Api::Volume, 429), "computeFault");
        assert_eq!(fault_name(Api::Volume, 500), "computeFault");
        assert_eq!(fault_name(Api::Compute, 503), "serviceUnavailable");
    }

    #[test]
    fn retry_after_goes_in_the_body_for_413_only_on_cinder() {
        let nova = service_error(Api::Compute, 429, "slow down", Some(5));
        assert_eq!(nova.headers()[header::RETRY_AFTER], "5");
        let cinder = service_error(Api::Volume, 413, "quota", Some(7));
        assert_eq!(cinder.headers()[header::RETRY_AFTER], "7");
    }
}
