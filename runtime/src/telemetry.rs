//! Logging, tracing and metrics set-up: `tracing` with a human-readable or
//! JSON log, OpenTelemetry spans through `tracing-opentelemetry` exported
//! over OTLP when an endpoint is configured, and metrics exported over OTLP
//! and served for Prometheus scraping.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use opentelemetry::global;
use opentelemetry::propagation::TextMapCompositePropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("unknown log format {other:?} (text or json)")),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// Logging settings of a service (`[log]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// An `EnvFilter` directive, e.g. `info` or `info,instanceha_engine=debug`.
    /// `RUST_LOG` overrides it.
    pub filter: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: "info".to_owned(),
        }
    }
}

/// Traces and metrics settings of a service (`[telemetry]`). The standard
/// `OTEL_*` variables apply too: `OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// OTLP/gRPC endpoint (e.g. `http://otel-collector:4317`) for traces and
    /// metrics. Without it (and without `OTEL_EXPORTER_OTLP_ENDPOINT`),
    /// nothing is exported; trace context is still propagated and logged.
    pub otlp_endpoint: Option<String>,
    /// `service.name` (`OTEL_SERVICE_NAME` wins).
    pub service_name: Option<String>,
    /// Share of new traces to sample, 0.0 to 1.0; traces started upstream
    /// keep their caller's decision. Unset: `OTEL_TRACES_SAMPLER`, else all.
    pub sampling_ratio: Option<f64>,
    /// Where to serve metrics for Prometheus (`GET /metrics`); unset: not
    /// served.
    pub prometheus_listen: Option<SocketAddr>,
}

impl TelemetrySettings {
    pub fn validate(&self) -> Result<(), String> {
        if let Some(ratio) = self.sampling_ratio
            && !(0.0..=1.0).contains(&ratio)
        {
            return Err(format!(
                "telemetry.sampling_ratio: must be 0.0 to 1.0 (got {ratio})"
            ));
        }
        Ok(())
    }

    /// The OTLP endpoint from the settings or the environment.
    fn endpoint(&self) -> Option<String> {
        self.otlp_endpoint.clone().or_else(|| {
            [
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("log.filter: {0}")]
    Filter(#[from] tracing_subscriber::filter::ParseError),
    #[error("a global logger is already installed")]
    AlreadyInstalled,
    #[error("telemetry: cannot build the OTLP exporter: {0}")]
    Exporter(String),
    #[error("telemetry: {0}")]
    Invalid(String),
}

/// Chatty dependencies, quieted unless asked for.
const QUIET: &str = "sqlx=warn,sea_orm=warn,sea_orm_migration=warn,h2=warn,hyper=warn,hyper_util=warn,tower=warn,opentelemetry=warn,opentelemetry_sdk=warn";

/// The installed pipelines; shut them down to flush what is buffered.
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
    registry: prometheus::Registry,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Telemetry {
    /// The Prometheus text exposition of every metric.
    pub fn prometheus_text(&self) -> String {
        render(&self.registry)
    }

    /// Serves `GET /metrics` on `addr` until the process ends; returns the
    /// bound address.
    pub async fn serve_prometheus(
        &self,
        addr: SocketAddr,
        budget: &crate::connections::ConnectionBudget,
    ) -> std::io::Result<SocketAddr> {
        serve_registry(self.registry.clone(), addr, budget).await
    }

    /// Flushes and stops the exporters (blocking: run it off the runtime's
    /// worker threads, e.g. in `spawn_blocking`).
    pub fn shutdown(self) {
        if let Err(e) = self.tracer.shutdown() {
            eprintln!("telemetry: traces not flushed: {e}");
        }
        if let Err(e) = self.meter.shutdown() {
            eprintln!("telemetry: metrics not flushed: {e}");
        }
    }
}

/// The pipelines without installing them globally: for tests that bring
/// their own span exporter.
pub struct Pipelines {
    pub tracer: SdkTracerProvider,
    pub meter: SdkMeterProvider,
    pub registry: prometheus::Registry,
}

/// Builds the trace and metric pipelines for `service`. Must run inside a
/// Tokio runtime (the OTLP exporters need one).
pub fn pipelines(service: &str, settings: &TelemetrySettings) -> Result<Pipelines, Error> {
    settings.validate().map_err(Error::Invalid)?;
    let name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| settings.service_name.clone())
        .unwrap_or_else(|| service.to_owned());
    let resource = Resource::builder()
        .with_service_name(name)
        .with_attributes([opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        )])
        .build();
    let mut tracer = SdkTracerProvider::builder().with_resource(resource.clone());
    if let Some(ratio) = settings.sampling_ratio {
        tracer = tracer.with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        ))));
    }
    let registry = prometheus::Registry::new();
    crate::process_metrics::register(&registry, service);
    let prometheus = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .without_target_info()
        .without_units()
        .scope_info_enabled(false)
        .build()
        .map_err(|e| Error::Exporter(e.to_string()))?;
    let mut meter = SdkMeterProvider::builder()
        .with_resource(resource)
        .with_reader(prometheus);
    if let Some(endpoint) = settings.endpoint() {
        use opentelemetry_otlp::WithExportConfig as _;
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone())
            .build()
            .map_err(|e| Error::Exporter(e.to_string()))?;
        tracer = tracer.with_batch_exporter(spans);
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
            .map_err(|e| Error::Exporter(e.to_string()))?;
        meter =
            meter.with_reader(opentelemetry_sdk::metrics::PeriodicReader::builder(metrics).build());
    }
    Ok(Pipelines {
        tracer: tracer.build(),
        meter: meter.build(),
        registry,
    })
}

/// Installs logging, tracing, metrics and W3C propagation for a service's
/// process. Call once, inside the Tokio runtime.
pub fn init(
    service: &str,
    log: &LogSettings,
    settings: &TelemetrySettings,
) -> Result<Telemetry, Error> {
    let pipelines = pipelines(service, settings)?;
    install(service, log, pipelines)
}

/// Installs `pipelines` globally (with a log in `log`'s format).
pub fn install(service: &str, log: &LogSettings, pipelines: Pipelines) -> Result<Telemetry, Error> {
    let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| log.filter.clone());
    // The log's filter is the log's only: traces keep their spans whatever
    // the log level.
    let log_filter = EnvFilter::try_new(format!("{QUIET},{directives}"))?;
    let trace_filter = EnvFilter::try_new(format!("{QUIET},info"))?;
    let tracer = pipelines.tracer.tracer(service.to_owned());
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_error_records_to_exceptions(true)
        .with_filter(trace_filter);
    let registry = tracing_subscriber::registry().with(otel);
    let installed = match log.format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_target(true)
                    .with_ansi(colour(&std::io::stdout()))
                    .with_filter(log_filter),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_filter(log_filter),
            )
            .try_init(),
    };
    installed.map_err(|_| Error::AlreadyInstalled)?;
    global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]));
    global::set_tracer_provider(pipelines.tracer.clone());
    global::set_meter_provider(pipelines.meter.clone());
    Ok(Telemetry {
        tracer: pipelines.tracer,
        meter: pipelines.meter,
        registry: pipelines.registry,
    })
}

/// Installs only the log (for binaries that want no tracing pipeline).
pub fn init_log(log: &LogSettings) -> Result<(), Error> {
    let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| log.filter.clone());
    let filter = EnvFilter::try_new(format!("{QUIET},{directives}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(&std::io::stdout()))
        .with_target(true);
    let result = match log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|_| Error::AlreadyInstalled)
}

/// Whether text log lines written to `stream` get ANSI colours: only on a
/// terminal, and not when `NO_COLOR` is set to anything (no-color.org), so
/// that a log written to a file or a pipe holds no escape codes.
pub fn colour(stream: &impl std::io::IsTerminal) -> bool {
    colour_wanted(stream.is_terminal(), std::env::var_os("NO_COLOR"))
}

fn colour_wanted(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|value| value.is_empty())
}

/// Records the span's OpenTelemetry trace and span ids in its `trace_id`
/// and `span_id` fields (declared `tracing::field::Empty`), so that log
/// lines carry them.
pub fn record_ids(span: &tracing::Span) {
    let context = span.context();
    let span_ref = opentelemetry::trace::TraceContextExt::span(&context);
    let ids = span_ref.span_context();
    if ids.is_valid() {
        span.record("trace_id", tracing::field::display(ids.trace_id()));
        span.record("span_id", tracing::field::display(ids.span_id()));
    }
}

/// Marks the span failed with `message` (OpenTelemetry status error).
pub fn record_error(span: &tracing::Span, message: &str) {
    span.set_status(opentelemetry::trace::Status::error(message.to_owned()));
}

/// The Prometheus text of `registry`.
pub fn render(registry: &prometheus::Registry) -> String {
    use prometheus::Encoder as _;
    let mut out = Vec::new();
    let encoder = prometheus::TextEncoder::new();
    if let Err(e) = encoder.encode(&registry.gather(), &mut out) {
        return format!("# metrics could not be encoded: {e}\n");
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Serves `GET /metrics` with `registry`'s Prometheus text.
pub async fn serve_registry(
    registry: prometheus::Registry,
    addr: SocketAddr,
    budget: &crate::connections::ConnectionBudget,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    // Within the process's connection budget, like every other port.
    // (The tap only gives axum the peer's address.)
    let listener = axum::serve::ListenerExt::tap_io(
        crate::listen::PlainListener::new(listener, budget)?,
        |_| {},
    );
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let registry = registry.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        render(&registry),
                    )
                }
            }),
        )
        .layer(crate::connections::ServedLayer::new(budget.clone()));
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the metrics endpoint stopped");
        }
    });
    tracing::info!(addr = %bound, "serving metrics for prometheus on /metrics");
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_wanted(true, None));
        assert!(!colour_wanted(false, None));
        assert!(!colour_wanted(true, Some("1".into())));
        // An empty NO_COLOR does not count (no-color.org).
        assert!(colour_wanted(true, Some("".into())));
    }

    #[test]
    fn sampling_ratio_is_bounded() {
        let mut settings = TelemetrySettings::default();
        assert!(settings.validate().is_ok());
        settings.sampling_ratio = Some(1.5);
        assert!(settings.validate().unwrap_err().contains("sampling_ratio"));
    }

    #[tokio::test]
    async fn metrics_render_as_prometheus_text() {
        use opentelemetry::metrics::MeterProvider as _;
        let pipelines = pipelines("test", &TelemetrySettings::default()).unwrap();
        let meter = pipelines.meter.meter("test");
        let counter = meter.u64_counter("instanceha_things").build();
        counter.add(3, &[opentelemetry::KeyValue::new("kind", "x")]);
        let text = render(&pipelines.registry);
        assert!(
            text.contains("instanceha_things_total{kind=\"x\"} 3"),
            "{text}"
        );
    }
}
