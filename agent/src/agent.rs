//! Starting the agent: the spool and its delivery to the API, the host
//! monitor with its detection driver and fencing devices, the process
//! monitor and the instance monitor, all stopped by one cancellation
//! token. The binary and the CLI's demo both start agents this way.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use instanceha_runtime::backoff::Backoff;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::client::{self, ApiClient};
use crate::config::{HostDriver, Settings};
use crate::delivery::Delivery;
use crate::fence::{self, Device};
use crate::host::heartbeat::{HeartbeatDetector, PeerAddresses, ReplayGuard};
use crate::host::kubernetes::KubernetesDetector;
use crate::host::membership::Membership;
use crate::host::pacemaker::PacemakerDetector;
use crate::host::{self, Context};
use crate::metrics::Metrics;
use crate::process;
use crate::spool::{self, Spool};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Spool(#[from] spool::Error),
    #[error(transparent)]
    Client(#[from] client::Error),
    #[error("fencing.devices.{host}: {source}")]
    Fence { host: String, source: fence::Error },
    #[error(transparent)]
    Host(#[from] host::Error),
    #[error(transparent)]
    Process(#[from] process::Error),
    #[error(transparent)]
    Credentials(#[from] crate::credentials::Error),
    #[error(transparent)]
    Settings(#[from] crate::config::Error),
}

/// A running agent.
pub struct Agent {
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    heartbeat_addrs: Vec<SocketAddr>,
    spool: Spool,
}

impl Agent {
    /// Starts every monitor the settings turn on.
    pub async fn start(settings: Settings) -> Result<Self, Error> {
        // The binary's settings were checked when loaded; settings built in
        // code (the demo) are checked here, so that none runs unsafe.
        settings.validate()?;
        // One crypto provider for reqwest and tonic (ring, as sqlx uses).
        crate::install_crypto_provider();
        let me = settings.hostname();
        let metrics = Metrics::new();
        let spool = Spool::open(&settings.spool.path)?;
        let client = ApiClient::new(&settings.api)?;
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        let pending = spool.pending().await?.len();
        tracing::info!(host = %me, spool = %settings.spool.path.display(), pending, api = %settings.api.url, "instanceha-agent starting");
        tasks.push(tokio::spawn(
            Delivery::new(
                spool.clone(),
                client.clone(),
                settings.spool.clone(),
                settings.api.watch,
                metrics.clone(),
            )
            .run(shutdown.clone()),
        ));

        let context = Context {
            me: me.clone(),
            devices: Arc::new(fence_devices(&settings)?),
            fencing: settings.fencing.clone(),
            spool: spool.clone(),
            metrics: metrics.clone(),
        };
        let mut heartbeat_addrs = Vec::new();
        match settings.host.driver {
            HostDriver::None => {}
            HostDriver::Heartbeat => {
                let detector = heartbeat_detector(&settings, &client, &me, &shutdown).await?;
                heartbeat_addrs = detector.local_addrs();
                tasks.push(tokio::spawn(host::run(detector, context, shutdown.clone())));
            }
            HostDriver::Pacemaker => {
                let p = &settings.host.pacemaker;
                let detector = PacemakerDetector::new(p.command.clone(), p.interval);
                tasks.push(tokio::spawn(host::run(detector, context, shutdown.clone())));
            }
            HostDriver::Kubernetes => {
                let detector = KubernetesDetector::new(&settings.host.kubernetes)?;
                tasks.push(tokio::spawn(host::run(detector, context, shutdown.clone())));
            }
        }

        if let Some(path) = &settings.process.list_path {
            for watched in process::load_list(path)? {
                tasks.push(tokio::spawn(process::watch(
                    watched,
                    me.clone(),
                    settings.process.clone(),
                    spool.clone(),
                    metrics.clone(),
                    shutdown.clone(),
                )));
            }
        }
        if settings.instance.enabled {
            tasks.push(tokio::spawn(crate::instance::run(
                settings.instance.clone(),
                me.clone(),
                spool.clone(),
                metrics.clone(),
                shutdown.clone(),
            )));
        }
        Ok(Self {
            shutdown,
            tasks,
            heartbeat_addrs,
            spool,
        })
    }

    /// Checks what [`start`](Self::start) would read (the settings, the
    /// API client's files, the fencing devices' credentials, the
    /// heartbeat key, the process list, the Kubernetes detector's files)
    /// without starting anything or changing anything on disk: the spool
    /// is not opened (a missing one is made at the first start), no
    /// address is bound and no peer asked. Lines for the operator.
    pub fn check(settings: &Settings) -> Result<Vec<String>, Error> {
        settings.validate()?;
        crate::install_crypto_provider();
        ApiClient::new(&settings.api)?;
        fence_devices(settings)?;
        match settings.host.driver {
            HostDriver::Heartbeat => {
                crate::credentials::read("host.heartbeat.key", &settings.host.heartbeat.key)?;
            }
            HostDriver::Kubernetes => {
                KubernetesDetector::new(&settings.host.kubernetes)?;
            }
            HostDriver::None | HostDriver::Pacemaker => {}
        }
        if let Some(path) = &settings.process.list_path {
            process::load_list(path)?;
        }
        let path = &settings.spool.path;
        let spool = match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() => format!("spool {}: exists", path.display()),
            Ok(_) => {
                return Err(Error::Settings(crate::config::Error::Invalid {
                    setting: "spool.path".to_owned(),
                    message: format!("{} is not a file", path.display()),
                }));
            }
            Err(_) => format!(
                "spool {}: does not exist yet, made at the first start",
                path.display()
            ),
        };
        Ok(vec![spool])
    }

    /// Where this agent receives heartbeats.
    pub fn heartbeat_addrs(&self) -> &[SocketAddr] {
        &self.heartbeat_addrs
    }

    pub fn spool(&self) -> &Spool {
        &self.spool
    }

    /// Stops every monitor and waits for them.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }

    /// Stops at once, as a crashed process would (for demos).
    pub fn abort(mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.shutdown.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The other hosts of `segment` in the API, at `NAME:port`; retried until
/// the API answers.
async fn peers_from_api(
    client: &ApiClient,
    segment: &str,
    me: &str,
    port: u16,
    shutdown: &CancellationToken,
) -> Vec<PeerAddresses> {
    let mut pauses = Backoff::new(Duration::from_secs(1), Duration::from_secs(30))
        .exact()
        .retries(None, None);
    loop {
        match client.segment_hosts(segment).await {
            Ok(hosts) => {
                return hosts
                    .into_iter()
                    .filter(|h| h != me)
                    .map(|name| PeerAddresses {
                        primary: format!("{name}:{port}"),
                        second: None,
                        name,
                    })
                    .collect();
            }
            Err(e) => {
                // No bound on the tries: there is always a next wait.
                let pause = pauses.next_delay(None).unwrap_or(Duration::from_secs(30));
                tracing::warn!(segment, error = %e, retry_in = ?pause, "cannot list the segment's hosts");
                tokio::select! {
                    () = shutdown.cancelled() => return Vec::new(),
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

/// The fencing devices of the settings, one per host.
fn fence_devices(settings: &Settings) -> Result<BTreeMap<String, Device>, Error> {
    let mut devices = BTreeMap::new();
    for (host, config) in &settings.fencing.devices {
        let device = Device::new(host, config).map_err(|source| Error::Fence {
            host: host.clone(),
            source,
        })?;
        devices.insert(host.clone(), device);
    }
    Ok(devices)
}

/// The heartbeat detector: its peers (from the settings or the API), its
/// membership, key and replay guard, bound to its addresses.
async fn heartbeat_detector(
    settings: &Settings,
    client: &ApiClient,
    me: &str,
    shutdown: &CancellationToken,
) -> Result<HeartbeatDetector, Error> {
    let hb = &settings.host.heartbeat;
    let peers = match hb.peers.is_empty() {
        false => hb
            .peers
            .iter()
            .map(|p| PeerAddresses {
                name: p.name.clone(),
                primary: p.address.clone(),
                second: p.second_address.clone(),
            })
            .collect(),
        true => peers_from_api(client, &hb.segment, me, hb.peer_port, shutdown).await,
    };
    let membership = Membership::new(
        me,
        &hb.segment,
        &crate::host::membership::incarnation(chrono::Utc::now()),
        peers.iter().map(|p| p.name.clone()),
        settings.host.detect_after,
    );
    tracing::info!(peers = ?peers.iter().map(|p| &p.name).collect::<Vec<_>>(), detect_after = ?settings.host.detect_after, "heartbeat membership");
    let key = crate::credentials::read("host.heartbeat.key", &hb.key)?;
    if key.is_none() {
        tracing::error!(
            "host.heartbeat.insecure_unsigned: heartbeats are not signed, anyone who can send UDP to this agent can vote a host failed or keep a dead one alive"
        );
    }
    let state_file = hb
        .state_file
        .clone()
        .unwrap_or_else(|| settings.spool.path.with_file_name("heartbeats.json"));
    let listen = hb.listen.ok_or_else(|| crate::config::Error::Invalid {
        setting: "host.heartbeat.listen".to_owned(),
        message: "must be set".to_owned(),
    })?;
    Ok(HeartbeatDetector::bind(
        membership,
        listen,
        hb.second_listen,
        peers,
        hb.interval,
        key,
        ReplayGuard::new(hb.max_clock_skew, Some(state_file)),
    )
    .await?)
}
