//! One request to OpenStack as the client's calls describe it, the answer
//! they get back, and how failures read: the service's own message from an
//! error body, a transport error in a few words.

use std::time::Duration;

use bytes::Bytes;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::catalog::ServiceKind;
use super::error::{Call, Error};

/// One request to send.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub kind: ServiceKind,
    pub method: Method,
    pub path: String,
    pub query: Vec<(&'static str, String)>,
    pub body: Option<Value>,
    /// What the call does (`servers.get`, `servers.action.evacuate`), for
    /// spans and metrics.
    pub operation: &'static str,
    /// Safe to send again after a timeout, a broken connection or a 5xx:
    /// reads. A write is sent again only when it certainly was not applied
    /// (refused); an unknown outcome goes back to the caller, which reads
    /// Nova's state before asking again.
    pub idempotent: bool,
    /// Send `X-Service-Token` too.
    pub service_token: bool,
    /// This request's own timeout, instead of the client's.
    pub timeout: Option<Duration>,
}

impl Request {
    pub fn get(kind: ServiceKind, path: impl Into<String>) -> Self {
        Self {
            kind,
            method: Method::GET,
            path: path.into(),
            query: Vec::new(),
            body: None,
            operation: "other",
            idempotent: true,
            service_token: false,
            timeout: None,
        }
    }

    pub fn with_body(
        kind: ServiceKind,
        method: Method,
        path: impl Into<String>,
        body: Value,
    ) -> Self {
        Self {
            kind,
            method,
            path: path.into(),
            query: Vec::new(),
            body: Some(body),
            operation: "other",
            idempotent: false,
            service_token: false,
            timeout: None,
        }
    }

    pub fn named(mut self, operation: &'static str) -> Self {
        self.operation = operation;
        self
    }

    pub fn query(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.query.push((key, value.into()));
        self
    }

    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    pub fn service_token(mut self) -> Self {
        self.service_token = true;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The request as errors name it: `nova GET /servers/1`.
    pub fn call(&self) -> Call {
        Call {
            service: self.kind.name(),
            method: self.method.clone(),
            path: self.path.clone(),
        }
    }
}

/// A successful answer.
#[derive(Clone, Debug)]
pub(crate) struct Response {
    pub body: Bytes,
    pub request_id: Option<String>,
    pub call: Call,
}

impl Response {
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Decode {
            call: Box::new(self.call.clone()),
            reason: e.to_string(),
        })
    }
}

/// A fresh global request id, `req-<uuid>`.
pub fn request_id() -> String {
    format!("req-{}", uuid::Uuid::new_v4())
}

/// The human part of an error body: Nova/Cinder's `{"fault": {"message"}}`,
/// Keystone's `{"error": {"message"}}`, or the start of an HTML page.
pub(crate) fn error_message(body: &str, status: u16) -> String {
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(body)
        && let Some(message) = map
            .values()
            .find_map(|v| v.get("message").and_then(Value::as_str))
    {
        return message.to_owned();
    }
    let text: String = strip_tags(body)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if text.is_empty() {
        reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("error")
            .to_owned()
    } else {
        text.chars().take(200).collect()
    }
}

fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// A reqwest error in a few words, without URLs (they may carry tokens in
/// other clients' hands; ours never do, but keep messages short).
pub(crate) fn describe(err: &reqwest::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(err);
    let mut deepest = err.to_string();
    while let Some(e) = source {
        deepest = e.to_string();
        source = e.source();
    }
    if err.is_timeout() {
        "timed out".to_owned()
    } else if err.is_connect() {
        format!("connection failed ({deepest})")
    } else {
        deepest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_are_read_in_every_shape() {
        assert_eq!(
            error_message(
                r#"{"conflictingRequest":{"code":409,"message":"Cannot 'evacuate' instance"}}"#,
                409
            ),
            "Cannot 'evacuate' instance"
        );
        assert_eq!(
            error_message(
                r#"{"error":{"code":401,"title":"Unauthorized","message":"The request you have made requires authentication."}}"#,
                401
            ),
            "The request you have made requires authentication."
        );
        assert_eq!(
            error_message(
                "<html><body><h1>503 Service Unavailable</h1>\nNo server is available.</body></html>",
                503
            ),
            "503 Service Unavailable No server is available."
        );
        assert_eq!(error_message("", 504), "Gateway Timeout");
    }
}
