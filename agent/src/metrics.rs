//! The agent's metrics (OpenTelemetry instruments, exported over OTLP and
//! served for Prometheus by `instanceha-telemetry`): detections, fences
//! with their outcome and duration, reports by outcome and the spool's
//! depth.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};

/// The instruments; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    detections: Counter<u64>,
    fences: Counter<u64>,
    fence_duration: Histogram<f64>,
    reports: Counter<u64>,
    depth: Arc<AtomicU64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Instruments from the globally installed meter provider.
    pub fn new() -> Self {
        Self::from_meter(&opentelemetry::global::meter("instanceha-agent"))
    }

    /// Instruments from `meter`.
    pub fn from_meter(meter: &opentelemetry::metrics::Meter) -> Self {
        let depth = Arc::new(AtomicU64::new(0));
        let observed = depth.clone();
        meter
            .u64_observable_gauge("instanceha_agent_spool_depth")
            .with_description("Reports spooled and not yet acknowledged by the API")
            .with_callback(move |gauge| gauge.observe(observed.load(Ordering::Relaxed), &[]))
            .build();
        Self {
            detections: meter
                .u64_counter("instanceha_agent_detections")
                .with_description("Failures detected, by kind (host, process, vm)")
                .build(),
            fences: meter
                .u64_counter("instanceha_agent_fences")
                .with_description("Fencing attempts, by driver and outcome")
                .build(),
            fence_duration: meter
                .f64_histogram("instanceha_agent_fence_duration_seconds")
                .with_description("From the power-off request to the confirmation (or the failure)")
                .with_boundaries(vec![
                    0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
                ])
                .build(),
            reports: meter
                .u64_counter("instanceha_agent_reports")
                .with_description("Report sends, by type and outcome (stored, refused, retry)")
                .build(),
            depth,
        }
    }

    pub fn detection(&self, kind: &'static str) {
        self.detections.add(1, &[KeyValue::new("kind", kind)]);
    }

    pub fn fence(&self, driver: &'static str, outcome: &'static str, took: Duration) {
        let labels = [
            KeyValue::new("driver", driver),
            KeyValue::new("outcome", outcome),
        ];
        self.fences.add(1, &labels);
        self.fence_duration.record(took.as_secs_f64(), &labels);
    }

    pub fn report(&self, kind: &str, outcome: &'static str) {
        self.reports.add(
            1,
            &[
                KeyValue::new("type", kind.to_owned()),
                KeyValue::new("outcome", outcome),
            ],
        );
    }

    pub fn spool_depth(&self, depth: u64) {
        self.depth.store(depth, Ordering::Relaxed);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::MeterProvider as _;

    #[tokio::test]
    async fn the_instruments_reach_prometheus() {
        let pipelines = instanceha_runtime::telemetry::pipelines(
            "test",
            &instanceha_runtime::telemetry::TelemetrySettings::default(),
        )
        .unwrap();
        let metrics = Metrics::from_meter(&pipelines.meter.meter("instanceha-agent"));
        metrics.detection("host");
        metrics.fence("redfish", "confirmed", Duration::from_millis(1500));
        metrics.report("COMPUTE_HOST", "stored");
        metrics.spool_depth(3);
        let text = instanceha_runtime::telemetry::render(&pipelines.registry);
        for expected in [
            "instanceha_agent_detections_total{kind=\"host\"} 1",
            "instanceha_agent_fences_total{driver=\"redfish\",outcome=\"confirmed\"} 1",
            "instanceha_agent_fence_duration_seconds_bucket{driver=\"redfish\",outcome=\"confirmed\",le=\"2\"} 1",
            "instanceha_agent_reports_total{outcome=\"stored\",type=\"COMPUTE_HOST\"} 1",
            "instanceha_agent_spool_depth 3",
        ] {
            assert!(text.contains(expected), "{expected} not in\n{text}");
        }
    }
}
