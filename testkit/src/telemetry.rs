//! Telemetry for test binaries that look at traces and metrics (the
//! `telemetry-capture` feature): in-memory pipelines installed once, before
//! the first service starts, since the services create their metric
//! instruments once per process from the meter provider installed then.
//! Without the feature nothing is installed.

/// Installs the capturing pipelines if the feature asks for them.
pub(crate) fn prepare() {
    #[cfg(feature = "telemetry-capture")]
    let _ = captured();
}

#[cfg(feature = "telemetry-capture")]
mod capture {
    use std::sync::OnceLock;

    use instanceha_runtime::telemetry::{LogSettings, Pipelines, TelemetrySettings};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    /// The process-wide pipelines with an in-memory span exporter and the
    /// Prometheus registry of the metrics, installed once.
    pub fn captured() -> &'static (InMemorySpanExporter, prometheus::Registry) {
        static INSTALLED: OnceLock<(InMemorySpanExporter, prometheus::Registry)> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            let spans = InMemorySpanExporter::default();
            let pipelines =
                instanceha_runtime::telemetry::pipelines("tests", &TelemetrySettings::default())
                    .expect("the test pipelines");
            let registry = pipelines.registry.clone();
            let pipelines = Pipelines {
                tracer: SdkTracerProvider::builder()
                    .with_simple_exporter(spans.clone())
                    .build(),
                ..pipelines
            };
            // Quiet unless RUST_LOG asks (the feature may be on in a binary
            // whose standard output is read, such as the CLI's demo).
            let log = LogSettings {
                filter: "off".to_owned(),
                ..LogSettings::default()
            };
            // Kept for the life of the binary; a binary that installed its
            // own pipelines keeps them.
            if let Ok(installed) = instanceha_runtime::telemetry::install("tests", &log, pipelines)
            {
                std::mem::forget(installed);
            }
            (spans, registry)
        })
    }
}

#[cfg(feature = "telemetry-capture")]
pub use capture::captured;
