//! W3C trace context (`traceparent`, `tracestate`) and `baggage` carried in
//! HTTP headers and gRPC metadata, through the globally installed
//! propagator.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::global;
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::header::HeaderName::from_bytes(key.as_bytes()),
            http::header::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// The remote context carried by `headers` (empty if none).
pub fn extract(headers: &http::HeaderMap) -> Context {
    global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)))
}

/// Writes `context` into `headers`.
pub fn inject(context: &Context, headers: &mut http::HeaderMap) {
    global::get_text_map_propagator(|p| p.inject_context(context, &mut HeaderInjector(headers)));
}

/// Writes the current span's context into `headers`.
pub fn inject_current(headers: &mut http::HeaderMap) {
    inject(&tracing::Span::current().context(), headers);
}

/// The current span's context as a carrier (`traceparent`, `tracestate`,
/// `baggage`), for storing with a record or sending in gRPC metadata.
pub fn current_carrier() -> HashMap<String, String> {
    let mut carrier = HashMap::new();
    global::get_text_map_propagator(|p| {
        p.inject_context(&tracing::Span::current().context(), &mut carrier)
    });
    carrier
}

/// The context a carrier holds.
pub fn from_carrier(carrier: &HashMap<String, String>) -> Context {
    global::get_text_map_propagator(|p| p.extract(carrier))
}

/// The current span's `traceparent`, if a valid context is in force.
pub fn current_traceparent() -> Option<String> {
    current_carrier().remove("traceparent")
}

/// A context from a stored `traceparent`.
pub fn from_traceparent(traceparent: &str) -> Context {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    from_carrier(&carrier)
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt as _;

    use super::*;

    #[test]
    fn traceparent_round_trips_through_headers() {
        global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let context = extract(&headers);
        let span = context.span();
        assert_eq!(
            span.span_context().trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        let mut out = http::HeaderMap::new();
        inject(&context, &mut out);
        assert_eq!(
            out.get("traceparent").unwrap(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        let stored = from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert!(stored.span().span_context().is_remote());
    }
}
