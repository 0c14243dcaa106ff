//! openstack-sim: a simulated OpenStack cloud (Keystone v3, Nova, Cinder v3) with a world model,
//! a discrete-event time model and fault injection, for tests, demos and benchmarks.
//!
//! # Layout
//! - [`scenario`]: the scenario format (TOML/JSON/builder), generators and validation.
//! - [`world`]: the cloud's state and the event-driven evacuation, stop/start and host models.
//! - [`identity`]: Keystone's users, projects, application credentials and tokens.
//! - `server`: the HTTP front (hyper), fault application, request logging.
//! - `keystone`, `nova`, `cinder`, `control`: the HTTP APIs; `bmc`: a Redfish BMC per host.
//! - Failures inside the cloud (`world::disruptions`): a message-bus outage that makes
//!   nova-conductor drop evacuations, a nova-compute process killed and started again, a host
//!   losing power, each leaving Nova's records as Nova 34 does.
//! - [`faults`], [`request_log`], [`microversion`], [`clock`], [`pattern`]: supporting pieces.
//!
//! Start one with [`Sim::start`]; everything is served on one port.

mod bmc;
mod cinder;
pub mod clock;
mod control;
pub mod envelope;
pub mod faults;
pub mod identity;
mod keystone;
pub mod microversion;
mod nova;
pub mod pattern;
pub mod request_log;
pub mod scenario;
mod server;
pub mod world;

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use faults::{ErrorBody, FaultEffect, FaultRule, FaultService, InstalledFault};
pub use request_log::RequestRecord;
pub use scenario::{MessageBusOutage, Scenario};
pub use world::evacuation::EvacuationPhase;
pub use world::model::EvacuationFailure;
pub use world::snapshot::WorldSnapshot;
pub use world::stats::{EvacuationRecord, EvacuationStats};

use server::Shared;
use world::World;

/// Why the simulator could not start or do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Scenario(#[from] scenario::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    World(#[from] world::Error),
    #[error(transparent)]
    Fault(#[from] faults::Error),
}

/// A running simulator. Dropping it stops the server (use [`Sim::shutdown`] to wait for that).
pub struct Sim {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Replaces the world with a freshly built one (faults are cleared, the request log is kept).
pub(crate) fn load(shared: &Shared, scenario: Scenario) -> Result<(), Error> {
    let world = World::new(&scenario)?;
    let seed = scenario.settings.seed;
    *shared.world.lock() = world;
    *shared.faults.lock() = faults::FaultSet::new(seed);
    *shared.scenario.lock() = scenario;
    tracing::info!("scenario loaded");
    Ok(())
}

impl Sim {
    /// Builds the world from `scenario` and serves every API on `listen` (use port 0 in tests).
    pub async fn start(scenario: Scenario, listen: SocketAddr) -> Result<Sim, Error> {
        Self::serve(scenario, listen, None).await
    }

    /// As [`Sim::start`], but every API over TLS with `tls` (the catalog's URLs are
    /// `https://`): for tests of a client's trust settings, with a certificate of the test's
    /// own CA.
    pub async fn start_tls(
        scenario: Scenario,
        listen: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
    ) -> Result<Sim, Error> {
        Self::serve(scenario, listen, Some(tls)).await
    }

    async fn serve(
        scenario: Scenario,
        listen: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Result<Sim, Error> {
        let world = World::new(&scenario)?;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| Error::Bind {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: listen,
            source,
        })?;
        let shared = Arc::new(Shared {
            faults: Mutex::new(faults::FaultSet::new(scenario.settings.seed)),
            log: Mutex::new(request_log::RequestLog::new(
                scenario.settings.request_log_capacity,
            )),
            world: Mutex::new(world),
            scenario: Mutex::new(scenario),
            base_url: format!("{}://{addr}", if tls.is_some() { "https" } else { "http" }),
        });
        let router = keystone::routes(shared.clone())
            .merge(nova::routes(shared.clone()))
            .merge(cinder::routes(shared.clone()))
            .merge(control::routes(shared.clone()))
            .merge(bmc::routes(shared.clone()));
        let (shutdown, stop) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(server::serve(
                listener,
                shared.clone(),
                router,
                tls.map(tokio_rustls::TlsAcceptor::from),
                stop.clone(),
            )),
            tokio::spawn(server::tick(shared.clone(), stop)),
        ];
        tracing::info!(%addr, "openstack-sim listening");
        Ok(Sim {
            shared,
            addr,
            shutdown,
            tasks,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS).
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// Keystone's `auth_url`: `{base}/identity/v3`.
    pub fn auth_url(&self) -> String {
        format!("{}/identity/v3", self.base_url())
    }

    /// The public compute endpoint: `{base}/compute/v2.1`.
    pub fn compute_url(&self) -> String {
        format!("{}/compute/v2.1", self.base_url())
    }

    /// The public volume endpoint of a project: `{base}/volume/v3/{project_id}`.
    pub fn volume_url(&self, project_id: &str) -> String {
        format!("{}/volume/v3/{project_id}", self.base_url())
    }

    /// The internal-interface base: `{base}/internal` (same handlers, logged as `internal`).
    pub fn internal_base_url(&self) -> String {
        format!("{}/internal", self.base_url())
    }

    /// The id of a Keystone project by name.
    pub fn project_id(&self, name: &str) -> Option<String> {
        self.shared
            .world
            .lock()
            .identity
            .project_by_name(name)
            .map(|p| p.id.clone())
    }

    /// Cuts a host's power.
    pub fn power_off(&self, host: &str) -> Result<(), Error> {
        Ok(self.shared.world.lock().power_off(host)?)
    }

    /// Restores a host's power (its compute comes back after `durations.host_boot`).
    pub fn power_on(&self, host: &str) -> Result<(), Error> {
        Ok(self.shared.world.lock().power_on(host)?)
    }

    /// Kills a host's nova-compute process (host and guests stay up); with `restart_after`, it
    /// starts again that many simulated seconds later. Rebuilds it was running freeze for good.
    pub fn kill_compute(&self, host: &str, restart_after: Option<f64>) -> Result<(), Error> {
        Ok(self.shared.world.lock().kill_compute(host, restart_after)?)
    }

    /// Starts a killed nova-compute process again.
    pub fn start_compute(&self, host: &str) -> Result<(), Error> {
        Ok(self.shared.world.lock().start_compute(host)?)
    }

    /// Stops the message bus for a while (see [`MessageBusOutage`]).
    pub fn message_bus_outage(&self, outage: MessageBusOutage) -> Result<(), Error> {
        Ok(self.shared.world.lock().message_bus_outage(outage)?)
    }

    /// Makes the next evacuation of a server fail in this way (None clears it).
    pub fn set_evacuation_failure(
        &self,
        instance_id: &str,
        failure: Option<EvacuationFailure>,
    ) -> Result<(), Error> {
        Ok(self
            .shared
            .world
            .lock()
            .set_evacuation_failure(instance_id, failure)?)
    }

    /// Installs a fault rule; returns its id.
    pub fn inject_fault(&self, rule: FaultRule) -> Result<u64, Error> {
        let now = self.shared.sim_now();
        Ok(self.shared.faults.lock().add(rule, now)?)
    }

    /// The installed fault rules.
    pub fn faults(&self) -> Vec<InstalledFault> {
        let now = self.shared.sim_now();
        self.shared.faults.lock().list(now)
    }

    /// Removes one fault rule; false when unknown.
    pub fn delete_fault(&self, id: u64) -> bool {
        self.shared.faults.lock().remove(id)
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.shared.faults.lock().clear();
    }

    /// Revokes every token issued so far; returns how many were live.
    pub fn revoke_all_tokens(&self) -> usize {
        self.shared.world.lock().identity.revoke_all()
    }

    /// Revokes one token; false when unknown or already revoked.
    pub fn revoke_token(&self, token: &str) -> bool {
        self.shared.world.lock().identity.revoke(token)
    }

    /// Makes every live token (or just `token`) expire within `in_secs` real seconds.
    pub fn expire_tokens(&self, token: Option<&str>, in_secs: f64) -> usize {
        self.shared.world.lock().identity.expire(token, in_secs)
    }

    /// A copy of the whole world now.
    pub fn snapshot(&self) -> WorldSnapshot {
        self.shared.world.lock().snapshot()
    }

    /// The logged calls with `seq > since` (all when None), oldest first.
    pub fn request_log(&self, since: Option<u64>) -> Vec<RequestRecord> {
        self.shared.log.lock().since(since)
    }

    /// The seq of the last logged call (0 when none).
    pub fn last_request_seq(&self) -> u64 {
        self.shared.log.lock().last_seq()
    }

    /// Evacuation statistics.
    pub fn stats(&self) -> EvacuationStats {
        self.shared.world.lock().stats()
    }

    /// Simulated seconds since the scenario was loaded.
    pub fn sim_time(&self) -> f64 {
        self.shared.world.lock().tick().as_secs_f64()
    }

    /// Jumps simulated time forward by `secs`, applying everything that falls due.
    pub fn advance(&self, secs: f64) -> f64 {
        self.shared.world.lock().advance(secs).as_secs_f64()
    }

    /// Replaces the world with one built from `scenario` (faults cleared, log kept).
    pub fn load_scenario(&self, scenario: Scenario) -> Result<(), Error> {
        load(&self.shared, scenario)
    }

    /// Rebuilds the world from the scenario last loaded.
    pub fn reset(&self) -> Result<(), Error> {
        let scenario = self.shared.scenario.lock().clone();
        load(&self.shared, scenario)
    }

    /// Stops serving and waits for the server to finish.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}
