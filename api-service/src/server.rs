//! Starting and stopping `instanceha-api`: open the database, bind the
//! listener, serve the public API with health and reflection, and shut down
//! gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use instanceha_runtime::connections::{ConnectionBudget, ServedLayer};
use instanceha_runtime::listen::{PlainListener, TlsListener};
use instanceha_runtime::shutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::auth::Guard;
use crate::changes::ChangeFeed;
use crate::config::{LimitSettings, Settings};
use crate::console::{self, Console};
use crate::dispatch::Dispatcher;
use crate::grpc::{self, GuardLayer, SizeLayer, TraceLayer};
use crate::rate_limit::RateLimiter;
use crate::rest::{self, RestLimits, RestState};
use crate::service::{Api, IntakeSettings};
use crate::store::{self, Store};

/// Why the API could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("configuration: {0}")]
    Config(String),
    #[error("the gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("the REST server failed: {0}")]
    RestServe(std::io::Error),
}

/// A `grpc.health.v1` service that is SERVING while the process serves at
/// all: for liveness probes, which must not restart a replica whose
/// database is down (readiness probes use the overall status, "").
pub const LIVENESS: &str = "liveness";

/// How often the gRPC server pings a connection's client.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);

/// The service names reported by `grpc.health.v1`.
const SERVICES: [&str; 4] = [
    "instanceha.v1.SegmentService",
    "instanceha.v1.HostService",
    "instanceha.v1.NotificationService",
    "instanceha.v1.VmoveService",
];

/// A bound, not yet serving, API.
pub struct Server {
    listener: TcpListener,
    api: Api,
    dispatcher: Option<Dispatcher>,
    guard: Guard,
    tls: Option<tonic::transport::ServerTlsConfig>,
    limits: LimitSettings,
    /// The Masakari-compatible REST API, when enabled.
    rest: Option<(TcpListener, RestState)>,
    /// Its TLS: the gRPC API's `[tls]` settings, as rustls needs them.
    rest_tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// The web console, on the REST listener, when both are enabled.
    console: Option<Console>,
    /// How long to go on serving, not ready, after the shutdown signal.
    drain_delay: Duration,
    /// The connection budget of every port.
    budget: ConnectionBudget,
}

impl Server {
    /// Opens (and migrates) the database and binds the listener.
    pub async fn bind(settings: &Settings) -> Result<Self, Error> {
        // `Settings::load` checks this too; a server built from settings
        // in code must not skip it.
        if let Some((listener, addr)) = settings.open_beyond_loopback() {
            return Err(Error::Config(format!(
                "auth.mode = \"none\" makes every caller admin, and {listener} listens on {addr}, reachable beyond this machine: use auth.mode = \"keystone\" or \"static\", or listen on loopback"
            )));
        }
        let budget = ConnectionBudget::for_process(&settings.connections);
        // One set of budgets for both APIs, counted once callers are known.
        let limits = &settings.limits;
        let guard = Guard::from_settings(&settings.auth)
            .map_err(|e| Error::Config(e.to_string()))?
            .with_limiter(RateLimiter::from_settings(
                limits.requests_per_second,
                limits.burst,
                limits.anonymous_requests_per_second,
                limits.anonymous_burst,
            ));
        let tls = settings
            .tls
            .load("tls")
            .map_err(|e| Error::Config(e.to_string()))?;
        let rest_tls = settings
            .tls
            .rustls("tls")
            .map_err(|e| Error::Config(e.to_string()))?;
        for (listener, addr) in plaintext_token_listeners(settings) {
            tracing::warn!(%listener, %addr, "callers' tokens cross the network in plaintext: set tls.cert_file and tls.key_file (or terminate tls in a mesh)");
        }
        let store = Store::open(&settings.database).await?;
        let intake = IntakeSettings {
            max_report_age: settings.dispatch.expire_after,
            ..settings.intake.clone()
        };
        let api = Api::new(store, intake, ChangeFeed::new());
        let listener = TcpListener::bind(settings.listen)
            .await
            .map_err(|source| Error::Bind {
                addr: settings.listen,
                source,
            })?;
        let rest = if settings.rest.enabled {
            Some(bind_rest(settings, &api, &guard).await?)
        } else {
            None
        };
        let console = rest
            .as_ref()
            .and_then(|(_, state)| console_of(settings, &api, &guard, rest_tls.is_some(), state));
        let dispatcher = if settings.dispatch.enabled {
            let listen = listener.local_addr().map_err(|source| Error::Bind {
                addr: settings.listen,
                source,
            })?;
            Some(dispatcher(settings, &api, listen)?)
        } else {
            tracing::warn!("dispatch is disabled: notifications are stored but not recovered");
            None
        };
        Ok(Self {
            listener,
            api,
            dispatcher,
            guard,
            tls,
            limits: settings.limits.clone(),
            rest,
            rest_tls,
            console,
            drain_delay: settings.shutdown.drain_delay,
            budget,
        })
    }

    /// The connection budget of its ports (the metrics port's too).
    pub fn budget(&self) -> &ConnectionBudget {
        &self.budget
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Where the REST API listens, when enabled.
    pub fn rest_addr(&self) -> Option<SocketAddr> {
        self.rest.as_ref().map(|(listener, _)| {
            listener
                .local_addr()
                .expect("a bound listener has an address")
        })
    }

    pub fn api(&self) -> &Api {
        &self.api
    }

    /// Serves until `shutdown` completes; then reports NOT_SERVING (gRPC
    /// health and REST `/healthcheck`) while it goes on serving for the
    /// drain delay, stops accepting and drains in-flight requests.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let addr = self.local_addr();
        let drain_delay = self.drain_delay;
        let (reporter, health_service) = tonic_health::server::health_reporter();
        for service in SERVICES {
            reporter
                .set_service_status(service, ServingStatus::Serving)
                .await;
        }
        // For liveness probes: the process serves, whatever its database.
        reporter
            .set_service_status(LIVENESS, ServingStatus::Serving)
            .await;
        let database_check = tokio::spawn(watch_database(self.api.clone(), reporter.clone()));
        let stop_dispatch = CancellationToken::new();
        let dispatch = self
            .dispatcher
            .map(|d| tokio::spawn(d.run(stop_dispatch.clone())));

        let routes = grpc::routes(
            &self.api,
            self.limits.max_message_bytes,
            grpc::WatchSlots::new(self.limits.max_watches_per_caller, self.limits.max_watches),
        )?
        .add_service(health_service);
        let rest_limits = RestLimits {
            request_timeout: self.limits.request_timeout,
        };
        let stop_rest = CancellationToken::new();
        let rest_draining = self.rest.as_ref().map(|(_, state)| state.draining());
        let rest_tls = self.rest_tls;
        let rest_budget = self.budget.clone();
        let console = self.console;
        let rest_server = self.rest.map(|(listener, state)| {
            tokio::spawn(serve_rest(
                listener,
                state,
                console,
                rest_limits,
                rest_tls,
                rest_budget,
                stop_rest.clone(),
            ))
        });
        tracing::info!(%addr, "instanceha-api listening");
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = self.tls {
            builder = builder
                .tls_config(tls)
                .map_err(|e| Error::Config(format!("tls: {e}")))?;
        }
        let result = builder
            .timeout(self.limits.request_timeout)
            .http2_max_header_list_size(grpc::MAX_HEADER_LIST_BYTES)
            // Pings well within `connections.idle_timeout`: a live client
            // answers them, so only a dead or silent one is idle.
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .layer(ServedLayer::new(self.budget.clone()))
            .layer(TraceLayer)
            .layer(SizeLayer)
            .layer(GuardLayer::new(self.guard))
            .add_routes(routes)
            .serve_with_incoming_shutdown(self.budget.incoming(self.listener), async {
                shutdown.await;
                // Not ready from now on, whatever the database says.
                database_check.abort();
                for service in std::iter::once("").chain(SERVICES) {
                    reporter
                        .set_service_status(service, ServingStatus::NotServing)
                        .await;
                }
                if let Some(draining) = &rest_draining {
                    draining.cancel();
                }
                shutdown::drain(drain_delay).await;
                tracing::info!("shutting down: draining requests");
                stop_rest.cancel();
            })
            .await;
        database_check.abort();
        stop_rest.cancel();
        let rest_result = match rest_server {
            Some(task) => task
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e)))
                .map_err(Error::RestServe),
            None => Ok(()),
        };
        stop_dispatch.cancel();
        if let Some(dispatch) = dispatch {
            let _ = dispatch.await;
        }
        result?;
        rest_result?;
        tracing::info!("instanceha-api stopped");
        Ok(())
    }
}

/// Serves the REST API on `listener` (over TLS with `tls`), every
/// connection within `budget`, until `stop`.
async fn serve_rest(
    listener: TcpListener,
    state: RestState,
    console: Option<Console>,
    limits: RestLimits,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    budget: ConnectionBudget,
    stop: CancellationToken,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, tls = tls.is_some(), "masakari-compatible rest api listening");
    }
    let app = match console {
        Some(console) => rest::router(state, limits).merge(console::router(console)),
        None => rest::router(state, limits),
    }
    .layer(ServedLayer::new(budget.clone()))
    .into_make_service_with_connect_info::<SocketAddr>();
    // Within the budget, Nagle off; the taps only give axum the peer's
    // address.
    match tls {
        Some(tls) => {
            let listener =
                axum::serve::ListenerExt::tap_io(TlsListener::new(listener, tls, &budget)?, |_| {});
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
        None => {
            let listener =
                axum::serve::ListenerExt::tap_io(PlainListener::new(listener, &budget)?, |_| {});
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
    }
}

/// The web console on the REST listener whose handlers share `rest`,
/// when enabled: its streams bounded like the watch streams, ended when
/// the REST listener drains.
fn console_of(
    settings: &Settings,
    api: &Api,
    guard: &Guard,
    tls: bool,
    rest: &RestState,
) -> Option<Console> {
    let limits = &settings.limits;
    settings.console.enabled.then(|| {
        Console::new(
            api.clone(),
            guard.clone(),
            settings.console.clone(),
            tls,
            grpc::WatchSlots::new(limits.max_watches_per_caller, limits.max_watches),
            rest.draining(),
        )
    })
}

/// The REST listener, bound, and what its handlers share; its links on
/// `rest.public_url` or the address it got.
async fn bind_rest(
    settings: &Settings,
    api: &Api,
    guard: &Guard,
) -> Result<(TcpListener, RestState), Error> {
    let bind_error = |source| Error::Bind {
        addr: settings.rest.listen,
        source,
    };
    let listener = TcpListener::bind(settings.rest.listen)
        .await
        .map_err(bind_error)?;
    let keystone_uri = (settings.auth.mode == crate::auth::AuthMode::Keystone)
        .then(|| settings.auth.keystone.auth_url.clone())
        .flatten();
    let bound = listener.local_addr().map_err(bind_error)?;
    let base_url = settings.rest.base_url(settings.tls.enabled(), bound);
    let state = RestState::new(api.clone(), guard.clone(), keystone_uri).with_base_url(base_url);
    Ok((listener, state))
}

/// The dispatcher, with the engine link's token: the one configured, else
/// the state directory's, made on first start if the engine has not yet.
fn dispatcher(settings: &Settings, api: &Api, listen: SocketAddr) -> Result<Dispatcher, Error> {
    let token_file = settings.engine_token_file();
    if settings.dispatch.engine_token_file.is_none() {
        instanceha_runtime::secret::Secret::read_or_create_file(
            "dispatch.engine_token_file",
            &token_file,
        )
        .map_err(|e| Error::Config(e.to_string()))?;
    }
    let dispatch = crate::dispatch::DispatchSettings {
        engine_token_file: Some(token_file),
        ..settings.dispatch.clone()
    };
    Dispatcher::new(api.clone(), dispatch, listen).map_err(Error::Config)
}

/// The listeners (`grpc`, `rest`) that take callers' tokens in plaintext
/// on an address beyond loopback, where they are anyone's on the path:
/// authentication on, TLS off. Each is warned about at start.
pub fn plaintext_token_listeners(settings: &Settings) -> Vec<(&'static str, SocketAddr)> {
    if settings.auth.mode == crate::auth::AuthMode::None || settings.tls.enabled() {
        return Vec::new();
    }
    std::iter::once(("grpc", settings.listen))
        .chain(
            settings
                .rest
                .enabled
                .then_some(("rest", settings.rest.listen)),
        )
        .filter(|(_, addr)| !addr.ip().is_loopback())
        .collect()
}

/// Reports NOT_SERVING while the database cannot write (it does not
/// answer, its disk is full, it is read-only), so that load balancers and
/// Kubernetes probes route around a replica that cannot work; probed by a
/// write every few seconds, every second while it cannot, so that the API
/// serves again as soon as it can.
async fn watch_database(api: Api, reporter: HealthReporter) {
    let mut serving = true;
    loop {
        let every = if serving {
            Duration::from_secs(5)
        } else {
            Duration::from_secs(1)
        };
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            // A write failed: look now.
            () = api.write_failed() => {}
        }
        let probe = api.probe_storage().await;
        if probe.is_ok() != serving {
            serving = probe.is_ok();
            let status = match probe {
                Ok(()) => {
                    tracing::info!("the database can write again; serving");
                    ServingStatus::Serving
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the database cannot write; reporting not serving");
                    ServingStatus::NotServing
                }
            };
            reporter.set_service_status("", status).await;
            for service in SERVICES {
                reporter.set_service_status(service, status).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthMode;

    fn settings(auth: AuthMode, grpc: &str, rest: Option<&str>) -> Settings {
        let mut settings = Settings {
            listen: grpc.parse().unwrap(),
            ..Settings::default()
        };
        settings.auth.mode = auth;
        settings.rest.enabled = rest.is_some();
        if let Some(rest) = rest {
            settings.rest.listen = rest.parse().unwrap();
        }
        settings
    }

    fn names(settings: &Settings) -> Vec<&'static str> {
        plaintext_token_listeners(settings)
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    #[test]
    fn listeners_taking_tokens_in_plaintext_beyond_loopback_are_named() {
        for auth in [AuthMode::Keystone, AuthMode::Static] {
            let open = settings(auth, "0.0.0.0:15869", Some("[::]:15868"));
            assert_eq!(names(&open), ["grpc", "rest"], "{auth:?}");
            assert_eq!(
                plaintext_token_listeners(&open)[0].1,
                open.listen,
                "the address is the one warned about"
            );
            let grpc_only = settings(auth, "192.0.2.10:15869", None);
            assert_eq!(names(&grpc_only), ["grpc"], "{auth:?}");
            let rest_only = settings(auth, "127.0.0.1:15869", Some("0.0.0.0:15868"));
            assert_eq!(names(&rest_only), ["rest"], "{auth:?}");
        }
    }

    #[test]
    fn loopback_tls_or_no_tokens_need_no_warning() {
        let loopback = settings(AuthMode::Keystone, "127.0.0.1:15869", Some("[::1]:15868"));
        assert!(names(&loopback).is_empty());
        let mut with_tls = settings(AuthMode::Keystone, "0.0.0.0:15869", Some("0.0.0.0:15868"));
        with_tls.tls.cert_file = Some("/etc/instanceha/tls/api.pem".into());
        with_tls.tls.key_file = Some("/etc/instanceha/tls/api.key".into());
        assert!(names(&with_tls).is_empty());
        let no_tokens = settings(AuthMode::None, "0.0.0.0:15869", Some("0.0.0.0:15868"));
        assert!(names(&no_tokens).is_empty());
    }
}
