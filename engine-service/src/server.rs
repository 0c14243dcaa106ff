//! Starting and stopping `instanceha-engine`: build the OpenStack client,
//! bind, serve the Recover stream with health and reflection, keep the
//! token warm, and shut down gracefully. Health reports SERVING once
//! Keystone and Nova answer (Cinder is optional: without it in the catalog
//! the engine warns once and recovers without boot-from-volume checks).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use instanceha_proto::engine::v1 as pb;
use instanceha_runtime::backoff::Backoff;
use instanceha_runtime::connections::{ConnectionBudget, ServedLayer};
use instanceha_runtime::shutdown;
use tokio::net::TcpListener;
use tonic_health::ServingStatus;

use crate::link::{LinkAuth, RecoverService};
use crate::recovery::Engine;
use openstack_client::OpenStack;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("the gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

const SERVICE: &str = "instanceha.engine.v1.Engine";

/// A `grpc.health.v1` service SERVING while the process serves at all.
pub const LIVENESS: &str = "liveness";

/// A bound, not yet serving, engine.
pub struct Server {
    listener: TcpListener,
    engine: Engine,
    tls: Option<tonic::transport::ServerTlsConfig>,
    /// Who may open a `Recover` stream.
    auth: LinkAuth,
    /// How long to go on serving, not ready, after the shutdown signal.
    drain_delay: Duration,
    /// How often the token is kept warm (zero: never).
    warm_up_interval: Duration,
    /// The connection budget of its ports.
    budget: ConnectionBudget,
}

impl Server {
    pub async fn bind(listen: SocketAddr, engine: Engine) -> Result<Self, Error> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| Error::Bind {
                addr: listen,
                source,
            })?;
        Ok(Self {
            listener,
            engine,
            tls: None,
            auth: LinkAuth::default(),
            drain_delay: Duration::ZERO,
            warm_up_interval: Duration::ZERO,
            budget: ConnectionBudget::for_process(&Default::default()),
        })
    }

    /// Accepts connections within `settings` (`[connections]`).
    pub fn with_connections(
        mut self,
        settings: &instanceha_runtime::connections::ConnectionSettings,
    ) -> Self {
        self.budget = ConnectionBudget::for_process(settings);
        self
    }

    /// The connection budget of its ports (the metrics port's too).
    pub fn budget(&self) -> &ConnectionBudget {
        &self.budget
    }

    /// Every `interval`, a cheap authenticated call to Nova and Cinder
    /// keeps the token validated in their caches
    /// (`openstack.token_warmup_interval`; zero: off).
    pub fn with_token_warm_up(mut self, interval: Duration) -> Self {
        self.warm_up_interval = interval;
        self
    }

    /// After the shutdown signal, report NOT_SERVING but go on accepting
    /// calls for `delay` (`shutdown.drain_delay`).
    pub fn with_drain_delay(mut self, delay: Duration) -> Self {
        self.drain_delay = delay;
        self
    }

    /// Serves over TLS (with client-certificate authentication if `tls`
    /// has a client CA).
    pub fn with_tls(mut self, tls: Option<tonic::transport::ServerTlsConfig>) -> Self {
        self.tls = tls;
        self
    }

    /// Refuses `Recover` calls that do not present `token`
    /// (`link.token_file`, from `Settings::link_token`).
    pub fn with_link_token(mut self, token: Option<instanceha_runtime::secret::Secret>) -> Self {
        self.auth = LinkAuth::new(token);
        self
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Serves until `shutdown` completes; then reports NOT_SERVING while it
    /// goes on serving for the drain delay, stops accepting and waits for
    /// the Recover streams in progress to end.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let addr = self.local_addr();
        let drain_delay = self.drain_delay;
        let (reporter, health) = tonic_health::server::health_reporter();
        // For startup and liveness probes: the process serves, whether or
        // not OpenStack answers yet (a restart would not make it answer).
        reporter
            .set_service_status(LIVENESS, ServingStatus::Serving)
            .await;
        reporter
            .set_service_status(SERVICE, ServingStatus::NotServing)
            .await;
        reporter
            .set_service_status("", ServingStatus::NotServing)
            .await;
        let openstack_check = tokio::spawn(serve_once_openstack_answers(
            reporter.clone(),
            self.engine.openstack().clone(),
            self.warm_up_interval,
        ));
        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(instanceha_proto::ENGINE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(instanceha_proto::ENGINE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()?;
        let _in_flight = in_flight_gauge(self.engine.clone());
        tracing::info!(%addr, "instanceha-engine listening");
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = self.tls {
            builder = builder.tls_config(tls)?;
        }
        let result = builder
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .layer(ServedLayer::new(self.budget.clone()))
            .add_service(pb::engine_server::EngineServer::with_interceptor(
                RecoverService::new(self.engine.clone()),
                self.auth,
            ))
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .serve_with_incoming_shutdown(self.budget.incoming(self.listener), async {
                shutdown.await;
                // Not ready from now on, even if OpenStack answers meanwhile.
                openstack_check.abort();
                for service in ["", SERVICE] {
                    reporter
                        .set_service_status(service, ServingStatus::NotServing)
                        .await;
                }
                shutdown::drain(drain_delay).await;
                tracing::info!("shutting down: waiting for recoveries in progress");
            })
            .await;
        openstack_check.abort();
        result?;
        tracing::info!("instanceha-engine stopped");
        Ok(())
    }
}

/// Logs in and discovers Nova's endpoint (and Cinder's, if the catalog has
/// one), retrying until it works.
/// Ready (SERVING) once OpenStack answers, then keeps the token warm until
/// shutdown aborts it.
async fn serve_once_openstack_answers(
    reporter: tonic_health::server::HealthReporter,
    openstack: OpenStack,
    warm_up: Duration,
) {
    wait_for_openstack(&openstack).await;
    reporter
        .set_service_status(SERVICE, ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    if !warm_up.is_zero() {
        keep_token_warm(openstack, warm_up).await;
    }
}

/// The engine concurrency in use, for the metrics, while the gauge lives.
fn in_flight_gauge(engine: Engine) -> opentelemetry::metrics::ObservableGauge<u64> {
    opentelemetry::global::meter("instanceha-engine")
        .u64_observable_gauge("instanceha_engine_instances_in_flight")
        .with_description("Instances being recovered right now, across runs")
        .with_callback(move |observer| observer.observe(engine.instances_in_flight() as u64, &[]))
        .build()
}

async fn wait_for_openstack(openstack: &OpenStack) {
    let mut retries =
        Backoff::new(Duration::from_secs(1), Duration::from_secs(30)).retries(None, None);
    loop {
        match openstack.check().await {
            Ok((compute, Some(volume))) => {
                tracing::info!(
                    compute = %compute.url, nova_microversion = %compute.microversion,
                    volume = %volume.url, cinder_microversion = %volume.microversion,
                    "openstack reachable"
                );
                return;
            }
            Ok((compute, None)) => {
                tracing::warn!(
                    compute = %compute.url, nova_microversion = %compute.microversion,
                    "openstack reachable without cinder in the catalog: boot-from-volume checks are off"
                );
                return;
            }
            Err(e) => {
                let Some(delay) = retries.next_delay(None) else {
                    return;
                };
                tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "openstack not reachable yet");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Keeps the engine's token validated in Nova's and Cinder's caches: a
/// cheap authenticated call every `interval` (below keystonemiddleware's
/// 300 s cache time), so the first evacuation after a quiet period does not
/// wait on Keystone. Failures are logged and do not stop it.
async fn keep_token_warm(openstack: OpenStack, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match openstack.warm_up().await {
            Ok(()) => tracing::debug!("token kept warm"),
            Err(e) => tracing::warn!(error = %e, "cannot keep the token warm"),
        }
    }
}
