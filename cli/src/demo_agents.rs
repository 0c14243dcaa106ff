//! `instanceha demo --agents`: instead of the demo sending the
//! notification itself, one `instanceha-agent` per simulated compute host
//! (each on a runtime of its own, as a process would be) heartbeats with
//! the others over loopback and fences through the simulated host's
//! Redfish BMC. When a host loses power its agent dies with it; the
//! survivors notice, fence it, report it, and the engine recovers it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use instanceha_agent::config::{
    ApiSettings, FenceDevice, HeartbeatSettings, HostDriver, PeerSettings,
};
use instanceha_agent::{Agent, Settings as AgentSettings};
use openstack_sim::Sim;

use crate::client::Client;
use crate::error::Error;
use crate::resources::{Notification, NotificationFilter};

/// The agents, by host name.
pub struct DemoAgents {
    agents: Vec<(String, tokio::runtime::Runtime)>,
}

impl Drop for DemoAgents {
    fn drop(&mut self) {
        for (_, runtime) in self.agents.drain(..) {
            runtime.shutdown_background();
        }
    }
}

fn free_udp_port() -> Result<u16, Error> {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::Demo(format!("no free port for the agents: {e}")))
}

/// What the demo says before the failure.
pub fn intro(failed: &str) -> String {
    format!(
        "one instanceha-agent per host, heartbeating (host.detect_after 6 s), fencing through each host's simulated Redfish BMC\n\
         powering {failed} off (its agent dies with it); the others must notice, fence it and report it...\n\n"
    )
}

/// Starts one agent per host, with their default detection window, and
/// waits until they hear each other.
pub async fn start(
    sim: &Sim,
    api: SocketAddr,
    token: &str,
    dir: &Path,
    hosts: &[&str],
) -> Result<DemoAgents, Error> {
    let token_file = dir.join("agent-token");
    std::fs::write(&token_file, token)
        .map_err(|e| Error::Demo(format!("cannot write the agents' token: {e}")))?;
    // The key the agents sign their heartbeats with: random, 0600.
    let key_file = dir.join("heartbeat-key");
    instanceha_runtime::secret::Secret::read_or_create_file("host.heartbeat.key", &key_file)
        .map_err(|e| Error::Demo(format!("cannot make the heartbeat key: {e}")))?;
    let mut addresses = Vec::new();
    for host in hosts {
        addresses.push((
            (*host).to_owned(),
            format!("127.0.0.1:{}", free_udp_port()?),
        ));
    }
    let mut agents = Vec::new();
    for (host, address) in &addresses {
        let settings = agent_settings(
            sim,
            api,
            (&token_file, &key_file),
            dir,
            host,
            address,
            &addresses,
        )?;
        let runtime = run_agent(host, settings).await?;
        agents.push((host.clone(), runtime));
    }
    // Two heartbeat intervals: every agent hears the others.
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok(DemoAgents { agents })
}

/// The settings of `host`'s demo agent: heartbeats with every other host
/// of `addresses`, fencing through the simulator's Redfish.
fn agent_settings(
    sim: &Sim,
    api: SocketAddr,
    (token_file, key_file): (&Path, &Path),
    dir: &Path,
    host: &str,
    address: &str,
    addresses: &[(String, String)],
) -> Result<AgentSettings, Error> {
    let mut settings = AgentSettings {
        hostname: Some(host.to_owned()),
        api: ApiSettings {
            url: format!("http://{api}"),
            token_file: Some(token_file.to_owned()),
            ..ApiSettings::default()
        },
        ..AgentSettings::default()
    };
    settings.spool.path = dir.join(format!("agent-{host}.redb"));
    settings.spool.retry_initial = Duration::from_millis(200);
    settings.host.driver = HostDriver::Heartbeat;
    settings.host.heartbeat = HeartbeatSettings {
        listen: Some(
            address
                .parse()
                .map_err(|e| Error::Demo(format!("{address}: {e}")))?,
        ),
        key: instanceha_agent::config::CredentialSource {
            file: Some(key_file.to_owned()),
            env: None,
        },
        segment: "demo".to_owned(),
        peers: addresses
            .iter()
            .filter(|(name, _)| name != host)
            .map(|(name, address)| PeerSettings {
                name: name.clone(),
                address: address.clone(),
                second_address: None,
            })
            .collect(),
        ..HeartbeatSettings::default()
    };
    for (name, _) in addresses {
        settings.fencing.devices.insert(
            name.clone(),
            FenceDevice::Redfish {
                url: sim.base_url(),
                system: Some(name.clone()),
                username: None,
                password: Default::default(),
                ca_file: None,
                insecure: false,
            },
        );
    }
    settings.fencing.poll_interval = Duration::from_millis(200);
    Ok(settings)
}

/// `host`'s agent on a runtime of its own, once it has started.
async fn run_agent(host: &str, settings: AgentSettings) -> Result<tokio::runtime::Runtime, Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| Error::Demo(format!("cannot start a runtime: {e}")))?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    runtime.spawn(async move {
        match Agent::start(settings).await {
            Ok(agent) => {
                let _ = tx.send(Ok(()));
                std::future::pending::<()>().await;
                drop(agent);
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
            }
        }
    });
    rx.await
        .map_err(|_| Error::Demo(format!("the agent of {host} did not start")))?
        .map_err(|e| Error::Demo(format!("the agent of {host} did not start: {e}")))?;
    Ok(runtime)
}

impl DemoAgents {
    /// The host's agent dies with the host, as a process would.
    pub fn kill(&mut self, host: &str) {
        if let Some(i) = self.agents.iter().position(|(h, _)| h == host) {
            let (_, runtime) = self.agents.remove(i);
            runtime.shutdown_background();
        }
    }
}

/// Waits for the agents' report of `host`, which lost power at
/// `power_loss`; returns it and what to tell the operator.
pub async fn reported(
    client: &Client,
    host: &str,
    power_loss: Instant,
) -> Result<(Notification, String), Error> {
    let found = wait_for_report(client, host, Duration::from_secs(120)).await?;
    let text = format!(
        "the agents reported {host} {:.1} s after its power loss (detection, fencing, report): host_status {}\n\n",
        power_loss.elapsed().as_secs_f64(),
        found.payload.get("host_status").map_or("?", String::as_str)
    );
    Ok((found, text))
}

/// Waits for the agents' report of `host` (at most `patience`).
async fn wait_for_report(
    client: &Client,
    host: &str,
    patience: Duration,
) -> Result<Notification, Error> {
    let started = Instant::now();
    let filter = NotificationFilter {
        hostname: Some(host.to_owned()),
        ..NotificationFilter::default()
    };
    loop {
        let page = client
            .list_notifications(&filter, 10, String::new())
            .await?;
        if let Some(found) = page.items.into_iter().next() {
            return Ok(found);
        }
        if started.elapsed() > patience {
            return Err(Error::Demo(format!(
                "the agents did not report {host} within {patience:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
