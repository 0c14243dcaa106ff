//! The services' configuration files for a run: the products' defaults,
//! except the simulator's credentials, `[auth] mode = "none"`, and, when
//! the simulator runs `speed` times faster than real time, every setting
//! that paces a recovery divided by the same factor, as the test kit paces
//! them (`instanceha_testkit::settings::Pacing`).

use instanceha_api::config::Settings as ApiSettings;
use instanceha_testkit::settings::Pacing as Paced;

/// The pacing of the services' files: the test kit's, written as TOML.
#[derive(Clone, Debug)]
pub struct Pacing {
    pub speed: f64,
}

impl Pacing {
    /// The paced value of `key`, in humantime (whole microseconds).
    fn value(&self, key: &str) -> String {
        let paced = Paced { speed: self.speed }.value(key);
        format!("{}us", paced.as_micros())
    }

    /// `instanceha-engine`'s file for the simulator at `auth_url`.
    pub fn engine_toml(&self, auth_url: &str, log_filter: &str) -> String {
        let v = |key| self.value(key);
        format!(
            r#"# instanceha-bench: engine settings (defaults, paced by the simulator's speed {speed})
listen = "127.0.0.1:0"

[openstack]
interfaces = ["public"]

[openstack.auth]
auth_url = "{auth_url}"
username = "admin"
password = "secret"
project_name = "admin"
user_domain_name = "Default"
project_domain_name = "Default"

[openstack.service_auth]
auth_url = "{auth_url}"
username = "nova"
password = "secret"
project_name = "service"
user_domain_name = "Default"
project_domain_name = "Default"

[openstack.retry]
initial_backoff = "{initial_backoff}"
max_backoff = "{max_backoff}"
max_retry_after = "{max_retry_after}"

[recovery]
poll_interval = "{poll}"
migration_poll_interval = "{migration_poll}"
evacuation_timeout = "{evacuation_timeout}"
stalled_evacuation_after = "{stalled_evacuation_after}"
power_timeout = "{power_timeout}"

[host_failure]
service_down_timeout = "{service_down_timeout}"
wait_after_service_update = "{wait_after_service_update}"

[log]
filter = "{log_filter}"
"#,
            speed = self.speed,
            initial_backoff = v("openstack.retry.initial_backoff"),
            max_backoff = v("openstack.retry.max_backoff"),
            max_retry_after = v("openstack.retry.max_retry_after"),
            poll = v("recovery.poll_interval"),
            migration_poll = v("recovery.migration_poll_interval"),
            evacuation_timeout = v("recovery.evacuation_timeout"),
            stalled_evacuation_after = v("recovery.stalled_evacuation_after"),
            power_timeout = v("recovery.power_timeout"),
            service_down_timeout = v("host_failure.service_down_timeout"),
            wait_after_service_update = v("host_failure.wait_after_service_update"),
        )
    }

    /// `instanceha-api`'s file: `database_url`, no authentication, no REST
    /// API, and dispatch to the engine at `engine` (or none when `None`).
    ///
    /// Intake runs turn the per-client-address rate limit off: all the
    /// simulated agents share 127.0.0.1, where in production each has its
    /// own address.
    pub fn api_toml(&self, database_url: &str, engine: Option<&str>, log_filter: &str) -> String {
        let v = |key| self.value(key);
        let (enabled, engine_url) = match engine {
            Some(addr) => (true, format!("http://{addr}")),
            None => (false, "http://127.0.0.1:9".to_owned()),
        };
        format!(
            r#"# instanceha-bench: API settings (defaults, paced by the simulator's speed {speed})
listen = "127.0.0.1:0"

[database]
url = "{database_url}"

[auth]
mode = "none"

# The benchmark speaks gRPC only; Masakari's REST port (15868) stays free,
# so that runs side by side do not collide on it.
[rest]
enabled = false

[limits]
requests_per_second = {requests_per_second:?}

[dispatch]
enabled = {enabled}
engine_url = "{engine_url}"
replica_id = "bench"
retry_delay = "{retry_delay}"
max_retry_delay = "{max_retry_delay}"
scan_interval = "{scan_interval}"
run_timeout = "{run_timeout}"

[log]
filter = "{log_filter}"
"#,
            speed = self.speed,
            requests_per_second = if enabled {
                ApiSettings::default().limits.requests_per_second
            } else {
                0.0
            },
            retry_delay = v("dispatch.retry_delay"),
            max_retry_delay = v("dispatch.max_retry_delay"),
            scan_interval = v("dispatch.scan_interval"),
            run_timeout = v("dispatch.run_timeout"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_divides_by_the_speed() {
        let p = Pacing { speed: 10.0 };
        assert_eq!(p.value("recovery.poll_interval"), "100000us");
        let p = Pacing { speed: 1.0 };
        assert_eq!(p.value("dispatch.scan_interval"), "10000000us");
        assert!(
            p.engine_toml("http://x/identity/v3", "info")
                .contains("poll_interval = \"1000000us\"")
        );
    }
}
