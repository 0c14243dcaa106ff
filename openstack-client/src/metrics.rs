//! Metrics of OpenStack calls: count by service, operation and outcome,
//! and latency, recorded through the global OpenTelemetry meter (a no-op
//! until a service installs one).

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};

struct Instruments {
    calls: Counter<u64>,
    latency: Histogram<f64>,
}

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("openstack-client");
        Instruments {
            calls: meter
                .u64_counter("instanceha_openstack_requests")
                .with_description("OpenStack API calls by service, operation and outcome (HTTP status, or timeout/connect/lost)")
                .build(),
            latency: meter
                .f64_histogram("instanceha_openstack_request_duration_seconds")
                .with_description("OpenStack API call latency, retries included")
                .with_unit("s")
                .with_boundaries(vec![
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ])
                .build(),
        }
    })
}

pub(crate) fn record(
    service: &'static str,
    operation: &'static str,
    status: &str,
    elapsed: Duration,
) {
    let labels = [
        KeyValue::new("service", service),
        KeyValue::new("operation", operation),
    ];
    let instruments = instruments();
    instruments.latency.record(elapsed.as_secs_f64(), &labels);
    instruments.calls.add(
        1,
        &[
            labels[0].clone(),
            labels[1].clone(),
            KeyValue::new("status", status.to_owned()),
        ],
    );
}
