//! The gRPC edge of tracing: every call gets a server span, child of the
//! caller's W3C trace context (`traceparent`, `tracestate`, `baggage`
//! metadata), so a notification's recovery joins the agent's trace.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::{Layer, Service};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

#[derive(Clone, Copy, Debug, Default)]
pub struct TraceLayer;

impl<S> Layer<S> for TraceLayer {
    type Service = TraceService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TraceService { inner }
    }
}

#[derive(Clone, Debug)]
pub struct TraceService<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for TraceService<S>
where
    S: Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let path = request.uri().path().trim_start_matches('/').to_owned();
        let (service, method) = path.split_once('/').unwrap_or((path.as_str(), ""));
        let span = tracing::info_span!(
            "grpc.request",
            otel.name = %path,
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = %service,
            rpc.method = %method,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        let _ = span.set_parent(instanceha_runtime::propagation::extract(request.headers()));
        instanceha_runtime::telemetry::record_ids(&span);
        Box::pin(async move { inner.call(request).await }.instrument(span))
    }
}
