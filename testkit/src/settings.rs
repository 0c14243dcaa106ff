//! The services' settings for a simulated cloud: the engine logs in to the
//! simulator's Keystone as `admin` (with `nova` as its service identity),
//! the API dispatches to the engine on loopback, everything listens on
//! port 0. And pacing: when the simulator runs `speed` times faster than
//! real time, every setting that paces a recovery is divided by the same
//! factor, so that the engine polls Nova as often per simulated second as
//! it would per real second.

use std::net::SocketAddr;
use std::time::Duration;

use instanceha_api::auth::AuthMode;
use instanceha_api::config::Settings as ApiSettings;
use instanceha_engine::config::Settings as EngineSettings;
use instanceha_runtime::secret::Secret;
use openstack_client::credentials::AuthSettings;
use openstack_sim::Sim;

/// Any port on loopback.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The engine link's token for the services this process starts: one
/// file, 0600 in a private directory under the temporary directory, made
/// on first use (the engine refuses a `Recover` without it, wherever it
/// listens; the API presents it).
pub fn link_token_file() -> std::path::PathBuf {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::temp_dir()
            .join("instanceha-testkit")
            .join(instanceha_runtime::state::LINK_TOKEN_FILE);
        Secret::read_or_create_file("link.token_file", &path)
            .expect("the test link token can be made");
        path
    })
    .clone()
}

/// The simulator's user `name` in project `project` (password `secret`).
pub fn sim_user(sim: &Sim, name: &str, project: &str) -> AuthSettings {
    AuthSettings {
        auth_url: Some(sim.auth_url()),
        username: Some(name.to_owned()),
        password: Some(Secret::new("secret")),
        project_name: Some(project.to_owned()),
        user_domain_name: Some("Default".to_owned()),
        project_domain_name: Some("Default".to_owned()),
        ..AuthSettings::default()
    }
}

/// The engine's defaults, against `sim`, taking the link token of
/// [`link_token_file`].
pub fn engine_for(sim: &Sim) -> EngineSettings {
    let mut settings = EngineSettings {
        listen: loopback(),
        ..EngineSettings::default()
    };
    settings.openstack.auth = sim_user(sim, "admin", "admin");
    settings.openstack.service_auth = Some(sim_user(sim, "nova", "service"));
    settings.openstack.interfaces = vec!["public".to_owned()];
    settings.link.token_file = Some(link_token_file());
    settings
}

/// The API's defaults on `database_url`, dispatching to the engine at
/// `engine` with the link token ([`link_token_file`]), without
/// authentication; the REST facade on port 0 (runs side
/// by side would collide on Masakari's fixed port).
pub fn api_for(database_url: &str, engine: SocketAddr) -> ApiSettings {
    let mut settings = ApiSettings {
        listen: loopback(),
        ..ApiSettings::default()
    };
    settings.database.url = database_url.to_owned();
    settings.rest.listen = loopback();
    settings.auth.mode = AuthMode::None;
    settings.dispatch.engine_url = format!("http://{engine}");
    settings.dispatch.replica_id = Some("api-test".to_owned());
    settings.dispatch.engine_token_file = Some(link_token_file());
    settings
}

/// What the system tests use on top of the defaults: short requests and
/// retries, fast polling, and bounds a test can wait for (at the tests'
/// simulator speed, 100).
pub fn quick_engine(settings: &mut EngineSettings) {
    settings.openstack.request_timeout = Duration::from_secs(2);
    settings.openstack.service_update_timeout = Duration::from_secs(4);
    // A short outage tolerance: faults that outlast it fail the step (for
    // a passing reason) within a test's patience.
    settings.recovery.outage_tolerance = Duration::from_secs(1);
    // Tests that count or trace Nova's requests see only the recovery's.
    settings.openstack.token_warmup_interval = Duration::ZERO;
    settings.openstack.retry.max_attempts = 3;
    settings.openstack.retry.initial_backoff = Duration::from_millis(10);
    settings.openstack.retry.max_backoff = Duration::from_millis(40);
    settings.openstack.retry.max_retry_after = Duration::from_millis(100);
    settings.recovery.poll_interval = Duration::from_millis(20);
    settings.recovery.migration_poll_interval = Duration::from_millis(20);
    settings.recovery.evacuation_timeout = Duration::from_secs(20);
    settings.recovery.stalled_evacuation_after = Duration::from_secs(5);
    settings.recovery.power_timeout = Duration::from_secs(10);
    settings.host_failure.service_down_timeout = Duration::from_secs(5);
}

/// The API's counterpart of [`quick_engine`]: fast retries and scans, a
/// short lease.
pub fn quick_api(settings: &mut ApiSettings) {
    settings.dispatch.max_attempts = 3;
    settings.dispatch.retry_window = Duration::from_secs(2);
    // Reconciles are bounded by this time alone: a Nova that stays
    // unreadable gets its verdict within it, not within five minutes.
    settings.dispatch.verdict_grace = Duration::from_secs(10);
    settings.dispatch.retry_delay = Duration::from_millis(50);
    settings.dispatch.max_retry_delay = Duration::from_millis(200);
    settings.dispatch.scan_interval = Duration::from_millis(100);
    settings.dispatch.lease = Duration::from_secs(3);
    settings.dispatch.connect_timeout = Duration::from_secs(1);
}

/// How the pacing settings are set for a simulator running `speed` times
/// faster than real time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pacing {
    pub speed: f64,
}

/// A setting that paces a recovery: its service, its key, its default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paced {
    pub service: &'static str,
    pub key: &'static str,
    pub default: Duration,
}

impl Pacing {
    /// The settings that pace a recovery, with the products' defaults
    /// (read from the crates, so that pacing follows them).
    pub fn settings() -> Vec<Paced> {
        let engine = EngineSettings::default();
        let api = ApiSettings::default();
        let paced = |service, key, default| Paced {
            service,
            key,
            default,
        };
        vec![
            paced(
                "engine",
                "recovery.poll_interval",
                engine.recovery.poll_interval,
            ),
            paced(
                "engine",
                "recovery.migration_poll_interval",
                engine.recovery.migration_poll_interval,
            ),
            paced(
                "engine",
                "recovery.evacuation_timeout",
                engine.recovery.evacuation_timeout,
            ),
            paced(
                "engine",
                "recovery.stalled_evacuation_after",
                engine.recovery.stalled_evacuation_after,
            ),
            paced(
                "engine",
                "recovery.power_timeout",
                engine.recovery.power_timeout,
            ),
            paced(
                "engine",
                "host_failure.service_down_timeout",
                engine.host_failure.service_down_timeout,
            ),
            paced(
                "engine",
                "host_failure.wait_after_service_update",
                engine.host_failure.wait_after_service_update,
            ),
            paced(
                "engine",
                "openstack.retry.initial_backoff",
                engine.openstack.retry.initial_backoff,
            ),
            paced(
                "engine",
                "openstack.retry.max_backoff",
                engine.openstack.retry.max_backoff,
            ),
            paced(
                "engine",
                "openstack.retry.max_retry_after",
                engine.openstack.retry.max_retry_after,
            ),
            paced("api", "dispatch.retry_delay", api.dispatch.retry_delay),
            paced(
                "api",
                "dispatch.max_retry_delay",
                api.dispatch.max_retry_delay,
            ),
            paced("api", "dispatch.scan_interval", api.dispatch.scan_interval),
            paced("api", "dispatch.run_timeout", api.dispatch.run_timeout),
        ]
    }

    /// The paced value of `key`: its default divided by the speed.
    pub fn value(&self, key: &str) -> Duration {
        let paced = Self::settings()
            .into_iter()
            .find(|p| p.key == key)
            .unwrap_or_else(|| panic!("{key} is not a paced setting"));
        Duration::from_secs_f64(paced.default.as_secs_f64() / self.speed)
    }

    /// `settings` paced.
    pub fn engine(&self, settings: &mut EngineSettings) {
        let v = |key| self.value(key);
        settings.recovery.poll_interval = v("recovery.poll_interval");
        settings.recovery.migration_poll_interval = v("recovery.migration_poll_interval");
        settings.recovery.evacuation_timeout = v("recovery.evacuation_timeout");
        settings.recovery.stalled_evacuation_after = v("recovery.stalled_evacuation_after");
        settings.recovery.power_timeout = v("recovery.power_timeout");
        settings.host_failure.service_down_timeout = v("host_failure.service_down_timeout");
        settings.host_failure.wait_after_service_update =
            v("host_failure.wait_after_service_update");
        settings.openstack.retry.initial_backoff = v("openstack.retry.initial_backoff");
        settings.openstack.retry.max_backoff = v("openstack.retry.max_backoff");
        settings.openstack.retry.max_retry_after = v("openstack.retry.max_retry_after");
    }

    /// `settings` paced.
    pub fn api(&self, settings: &mut ApiSettings) {
        let v = |key| self.value(key);
        settings.dispatch.retry_delay = v("dispatch.retry_delay");
        settings.dispatch.max_retry_delay = v("dispatch.max_retry_delay");
        settings.dispatch.scan_interval = v("dispatch.scan_interval");
        settings.dispatch.run_timeout = v("dispatch.run_timeout");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_divides_every_paced_setting_by_the_speed() {
        let pacing = Pacing { speed: 10.0 };
        assert_eq!(
            pacing.value("recovery.poll_interval"),
            Duration::from_millis(100)
        );
        let mut engine = EngineSettings::default();
        pacing.engine(&mut engine);
        let mut api = ApiSettings::default();
        pacing.api(&mut api);
        // Every paced setting is applied by `engine` or `api`.
        for paced in Pacing::settings() {
            let applied = match paced.key {
                "recovery.poll_interval" => engine.recovery.poll_interval,
                "recovery.migration_poll_interval" => engine.recovery.migration_poll_interval,
                "recovery.evacuation_timeout" => engine.recovery.evacuation_timeout,
                "recovery.stalled_evacuation_after" => engine.recovery.stalled_evacuation_after,
                "recovery.power_timeout" => engine.recovery.power_timeout,
                "host_failure.service_down_timeout" => engine.host_failure.service_down_timeout,
                "host_failure.wait_after_service_update" => {
                    engine.host_failure.wait_after_service_update
                }
                "openstack.retry.initial_backoff" => engine.openstack.retry.initial_backoff,
                "openstack.retry.max_backoff" => engine.openstack.retry.max_backoff,
                "openstack.retry.max_retry_after" => engine.openstack.retry.max_retry_after,
                "dispatch.retry_delay" => api.dispatch.retry_delay,
                "dispatch.max_retry_delay" => api.dispatch.max_retry_delay,
                "dispatch.scan_interval" => api.dispatch.scan_interval,
                "dispatch.run_timeout" => api.dispatch.run_timeout,
                other => panic!("{other} is paced but not applied"),
            };
            assert_eq!(applied, pacing.value(paced.key), "{}", paced.key);
        }
    }
}
