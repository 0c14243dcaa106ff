//! Request ids, as oslo.middleware's `RequestId` gives them in Masakari's
//! pipeline: every response carries `x-openstack-request-id: req-<uuid4>`,
//! a fresh id of this request (faults and errors too). A caller's own
//! `X-OpenStack-Request-Id` is never echoed: when it has the form
//! `req-<uuid>` (lowercase, oslo's `ID_FORMAT`) it is kept as the request's
//! *global* request id and logged beside the local one; any other value is
//! ignored. Each request gets a server span (child of the caller's W3C
//! `traceparent`) carrying both ids and the trace id, and one access line,
//! `rest request`, so that an operator can grep a client's request id in
//! the log and find the trace.

use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The header, in both directions (oslo's `HTTP_RESP_HEADER_REQUEST_ID`
/// and `INBOUND_HEADER`; HTTP header names are case-insensitive).
pub const HEADER: HeaderName = HeaderName::from_static("x-openstack-request-id");

/// A fresh request id: `req-` and a random UUID (oslo.context's
/// `generate_request_id`).
pub fn generate() -> String {
    format!("req-{}", uuid::Uuid::new_v4().hyphenated())
}

/// Whether `id` is a request id a caller may pass on: `req-` and a
/// hyphenated UUID in lowercase hexadecimal, exactly oslo's `ID_FORMAT`
/// (`^req-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$`).
pub fn is_valid(id: &str) -> bool {
    let Some(uuid) = id.strip_prefix("req-") else {
        return false;
    };
    let groups: Vec<&str> = uuid.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(group, len)| {
            group.len() == len
                && group
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

/// The middleware, outermost on the REST router: the span, the access
/// line and the response header.
pub async fn assign(request: Request, next: Next) -> Response {
    let id = generate();
    let global = request
        .headers()
        .get(&HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| is_valid(v))
        .map(str::to_owned);
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let span = tracing::info_span!(
        "rest.request",
        otel.name = %format_args!("{method} rest"),
        otel.kind = "server",
        http.request.method = %method,
        url.path = %path,
        request_id = %id,
        global_request_id = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    if let Some(global) = &global {
        span.record("global_request_id", global.as_str());
    }
    let _ = span.set_parent(instanceha_runtime::propagation::extract(request.headers()));
    instanceha_runtime::telemetry::record_ids(&span);
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    span.in_scope(|| {
        tracing::info!(
            status = response.status().as_u16(),
            elapsed_ms = started.elapsed().as_millis(),
            "rest request"
        );
    });
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().entry(HEADER).or_insert(value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_valid_and_differ() {
        let (a, b) = (generate(), generate());
        assert!(is_valid(&a), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn only_oslo_s_format_is_valid() {
        assert!(is_valid("req-0f8fad5b-d9cb-469f-a165-70867728950e"));
        for bad in [
            "",
            "req-",
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "req-0F8FAD5B-D9CB-469F-A165-70867728950E",
            "req-0f8fad5bd9cb469fa16570867728950e",
            "req-0f8fad5b-d9cb-469f-a165-70867728950e-",
            "req-0f8fad5b-d9cb-469f-a165-70867728950",
            "req-0f8fad5b-d9cb-469f-a165-70867728950g",
            "req-{0f8fad5b-d9cb-469f-a165-70867728950e}",
            "req-0f8fad5b-d9cb-469f-a165-70867728950e\nx",
        ] {
            assert!(!is_valid(bad), "{bad:?}");
        }
    }
}
