//! A service on a runtime of its own, as the processes they are in
//! production: killing it drops every task and connection at once, as a
//! crashed process would. And the one way to start the engine and the API
//! from their settings.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use instanceha_api::config::Settings as ApiSettings;
use instanceha_engine::config::Settings as EngineSettings;
use instanceha_engine::recovery::Engine;
use openstack_client::OpenStack;
use tokio::sync::oneshot;

/// A service that did not start.
#[derive(Debug, thiserror::Error)]
#[error("{service} did not start: {reason}")]
pub struct StartError {
    pub service: &'static str,
    pub reason: String,
}

/// A running service and its address.
pub struct Process {
    runtime: Option<tokio::runtime::Runtime>,
    pub addr: SocketAddr,
    /// The API's Masakari-compatible REST address, when it serves one.
    pub rest_addr: Option<SocketAddr>,
    /// Asks the service to shut down gracefully.
    stop: Option<oneshot::Sender<()>>,
    /// Completes when it has.
    stopped: Option<oneshot::Receiver<()>>,
}

impl Process {
    fn new(
        runtime: tokio::runtime::Runtime,
        addr: SocketAddr,
        rest_addr: Option<SocketAddr>,
        control: Control,
    ) -> Self {
        Self {
            runtime: Some(runtime),
            addr,
            rest_addr,
            stop: Some(control.stop),
            stopped: Some(control.stopped),
        }
    }

    /// Shuts the service down as SIGTERM would (it finishes what it is
    /// doing) and waits for it, at most `within`; then drops its runtime.
    /// False if it did not stop in time.
    pub async fn stop(&mut self, within: std::time::Duration) -> bool {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let stopped = match self.stopped.take() {
            Some(stopped) => tokio::time::timeout(within, stopped).await.is_ok(),
            None => true,
        };
        self.kill();
        stopped
    }

    /// Stops the service at once, as a SIGKILL would.
    pub fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }

    pub fn is_running(&self) -> bool {
        self.runtime.is_some()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The two ends of a graceful stop, inside the service's runtime.
struct Control {
    stop: oneshot::Sender<()>,
    stopped: oneshot::Receiver<()>,
}

/// The service's side of [`Control`].
struct Stopping {
    stop: oneshot::Receiver<()>,
    stopped: oneshot::Sender<()>,
}

fn control() -> (Control, Stopping) {
    let (stop, stop_rx) = oneshot::channel();
    let (stopped_tx, stopped) = oneshot::channel();
    (
        Control { stop, stopped },
        Stopping {
            stop: stop_rx,
            stopped: stopped_tx,
        },
    )
}

/// A runtime for one service. With the `telemetry-capture` feature the
/// in-memory pipelines go in first: the services create their metric
/// instruments once per process, from the meter provider installed at that
/// moment.
fn runtime(service: &'static str) -> Result<tokio::runtime::Runtime, StartError> {
    crate::telemetry::prepare();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| StartError {
            service,
            reason: format!("cannot start a runtime: {e}"),
        })
}

/// Starts `instanceha-engine` with `settings`.
pub async fn start_engine(settings: EngineSettings) -> Result<Process, StartError> {
    let fail = |reason: String| StartError {
        service: "instanceha-engine",
        reason,
    };
    let (credentials, service, client) = settings
        .openstack_client(&BTreeMap::new())
        .map_err(|e| fail(e.to_string()))?;
    let tls = settings.tls.load("tls").map_err(|e| fail(e.to_string()))?;
    let link_token = settings.link_token().map_err(|e| fail(e.to_string()))?;
    let warm_up = settings.openstack.token_warmup_interval;
    let runtime = runtime("instanceha-engine")?;
    let (tx, rx) = oneshot::channel();
    let (control, stopping) = control();
    runtime.spawn(async move {
        let bound = async {
            let openstack =
                OpenStack::new(credentials, service, client).map_err(|e| e.to_string())?;
            let engine = Engine::new(
                openstack,
                settings.recovery_settings(),
                settings.recovery.max_concurrent_instances_total,
            );
            instanceha_engine::server::Server::bind(settings.listen, engine)
                .await
                .map(|server| {
                    server
                        .with_tls(tls)
                        .with_link_token(link_token)
                        .with_connections(&settings.connections)
                        .with_token_warm_up(warm_up)
                })
                .map_err(|e| e.to_string())
        };
        match bound.await {
            Ok(server) => {
                let _ = tx.send(Ok(server.local_addr()));
                let signal = async {
                    let _ = stopping.stop.await;
                };
                if let Err(e) = server.run(signal).await {
                    eprintln!("instanceha-engine stopped: {e}");
                }
                let _ = stopping.stopped.send(());
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    });
    let addr = rx
        .await
        .map_err(|_| fail("its runtime stopped".to_owned()))?
        .map_err(fail)?;
    Ok(Process::new(runtime, addr, None, control))
}

/// Starts `instanceha-api` with `settings`.
pub async fn start_api(settings: ApiSettings) -> Result<Process, StartError> {
    let fail = |reason: String| StartError {
        service: "instanceha-api",
        reason,
    };
    let runtime = runtime("instanceha-api")?;
    let (tx, rx) = oneshot::channel();
    let (control, stopping) = control();
    runtime.spawn(async move {
        match bind_api(&settings).await {
            Ok(server) => {
                let _ = tx.send(Ok((server.local_addr(), server.rest_addr())));
                let signal = async {
                    let _ = stopping.stop.await;
                };
                if let Err(e) = server.run(signal).await {
                    eprintln!("instanceha-api stopped: {e}");
                }
                let _ = stopping.stopped.send(());
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
            }
        }
    });
    let started = rx
        .await
        .map_err(|_| fail("its runtime stopped".to_owned()))
        .and_then(|bound| bound.map_err(fail));
    match started {
        Ok((addr, rest_addr)) => Ok(Process::new(runtime, addr, rest_addr, control)),
        Err(e) => {
            // Not dropped here: dropping a runtime blocks, which an async
            // caller may not.
            runtime.shutdown_background();
            Err(e)
        }
    }
}

/// Binds the API, waiting a little for its address while a killed API of
/// the same address is still being torn down (a killed service's runtime
/// drops its listeners in the background).
async fn bind_api(
    settings: &ApiSettings,
) -> Result<instanceha_api::server::Server, instanceha_api::server::Error> {
    let mut tries = 0;
    loop {
        match instanceha_api::server::Server::bind(settings).await {
            Err(instanceha_api::server::Error::Bind { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse && tries < 50 =>
            {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            bound => return bound,
        }
    }
}
