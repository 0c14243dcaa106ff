//! What every service's `/metrics` says about the process itself: the
//! standard `process_*` metrics (CPU seconds, resident and virtual memory,
//! open and maximum file descriptors, start time; read from `/proc`, so
//! Linux only) and `instanceha_build_info`, a gauge of 1 whose labels say
//! which service and version is running (join it on `instance` to label
//! other series with the version).

/// Registers the process collector and the build information of `service`
/// in `registry`. A registry that already has them keeps its own.
pub fn register(registry: &prometheus::Registry, service: &str) {
    #[cfg(target_os = "linux")]
    {
        let collector = prometheus::process_collector::ProcessCollector::for_self();
        if let Err(e) = registry.register(Box::new(collector)) {
            tracing::debug!(error = %e, "process metrics not registered");
        }
    }
    let opts = prometheus::Opts::new(
        "instanceha_build_info",
        "1 for the running build: the service's name and version as labels",
    );
    match prometheus::IntGaugeVec::new(opts, &["service", "version"]) {
        Ok(info) => {
            info.with_label_values(&[service, env!("CARGO_PKG_VERSION")])
                .set(1);
            if let Err(e) = registry.register(Box::new(info)) {
                tracing::debug!(error = %e, "build information not registered");
            }
        }
        Err(e) => tracing::debug!(error = %e, "build information not registered"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_process_and_the_build_are_in_the_text() {
        let registry = prometheus::Registry::new();
        super::register(&registry, "instanceha-test");
        let text = crate::telemetry::render(&registry);
        assert!(
            text.contains(&format!(
                "instanceha_build_info{{service=\"instanceha-test\",version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        #[cfg(target_os = "linux")]
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(
                text.contains(&format!("\n{name} ")),
                "{name} not in\n{text}"
            );
        }
    }
}
